/*
 * tests/lib/cli_run.h — run one of our programs with its stdout and stderr captured
 * (tools/proc.h leaves stderr inherited; message tests need to read it).
 *
 *   struct cli_out o;
 *   int st = cli_run(argv, env_extra, NULL, 0, 20000, &o);  // exit status, 128+signal, <0 error
 *   ... strstr(o.err, "...") ...; cli_out_free(&o);
 *
 * With `trigger` set, sends `sig` to the child once `trigger` appears on its stderr (never a
 * sleep). When timeout_ms passes the child is killed with SIGKILL and -ETIMEDOUT returned (a
 * program that blocks shows up as a failed test, never a hung one).
 */
#ifndef TW_TESTS_CLI_RUN_H
#define TW_TESTS_CLI_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct cli_out {
	char *out, *err; /* NUL-terminated, never NULL after cli_run */
	size_t out_len, err_len;
	int sig_sent;    /* 1 when the trigger was seen and the signal sent */
};

int cli_run(char *const argv[], char *const env_extra[], const char *trigger, int sig,
	    int timeout_ms, struct cli_out *o);
void cli_out_free(struct cli_out *o);
/* cli_run of the program at `prog` with args (NULL-terminated, after the program's name; at
 * most 62). -E2BIG for more. */
int cli_run_prog(const char *prog, const char *const *args, char *const env_extra[],
		 const char *trigger, int sig, int timeout_ms, struct cli_out *o);
/* The first line of s that starts with prefix (NULL: the first line), without its newline, into
 * line (len bytes; "" when there is none). Whether there was one. */
bool cli_line(const char *s, const char *prefix, char *line, size_t len);
/* The number after "key": in s, one of our programs' flat JSON objects (keys are unique). */
bool cli_json_num(const char *s, const char *key, double *out);
/* Lines in s (a trailing newline does not start a new one). */
unsigned cli_lines(const char *s);

#endif
