/*
 * tests/integration/twbench_cli.c — twbench's messages and its clean-up (tcp):
 * --version; --count -1 / --latency-count -1 / -r 0 / --provider '' are one-line errors naming
 * the option and the allowed range (exit 2); an unknown provider says so (exit 2, no "Broken
 * pipe"); progress lines while the local backups start; SIGINT while the backups start and
 * during a run stops the twd's (none is left for us, the subreaper, to adopt) and removes the
 * temporary directories under $TMPDIR.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "tap.h"
#include "tmpdir.h"

static char bench[1024];

static int run(const char *const *args, char *const *env, const char *trigger, int sig,
	       struct cli_out *o)
{
	return cli_run_prog(bench, args, env, trigger, sig, 120000, o);
}

static void one_line_error(const char *const *args, const char *what, const char *want1,
			   const char *want2)
{
	struct cli_out o;
	int st = run(args, NULL, NULL, 0, &o);

	is_int(st, 2, "%s: exit 2", what);
	ok(cli_lines(o.err) == 1 && strstr(o.err, want1) && strstr(o.err, want2),
	   "%s: one line naming '%s' and '%s'", what, want1, want2);
	if (cli_lines(o.err) != 1 || !strstr(o.err, want1) || !strstr(o.err, want2))
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
}

/* Entries in dir other than . and .. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Children reparented to us (we are a subreaper) that are still around or unreaped. */
static int adopted(void)
{
	int n = 0;
	pid_t w;

	while ((w = waitpid(-1, NULL, WNOHANG)) > 0)
		n++; /* exited orphans: the twd outlived twbench */
	if (w == 0)
		n++; /* at least one orphan still running */
	return n;
}

static void interrupt(const char *tmp, const char *trigger, const char *what)
{
	char env[600];
	char *envv[] = { env, NULL };
	struct cli_out o;
	int st;

	snprintf(env, sizeof(env), "TMPDIR=%s", tmp);
	st = run((const char *[]){ "--provider", "tcp", "--count", "10M", "--no-progress", NULL },
		 envv, trigger, SIGINT, &o);
	ok(o.sig_sent, "%s: SIGINT sent after \"%s\"", what, trigger);
	is_int(st, 128 + SIGINT, "%s: twbench ends by SIGINT", what);
	ok(strstr(o.err, "removing"), "%s: says it stops the twd's and removes its directory",
	   what);
	is_int(entries(tmp), 0, "%s: nothing left under $TMPDIR", what);
	is_int(adopted(), 0, "%s: no twd outlived twbench", what);
	if (st != 128 + SIGINT || entries(tmp) != 0)
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
}

int main(void)
{
	char tmp[256];
	struct cli_out o;
	int st;

	child_tool("tools/twbench", bench, sizeof(bench));
	tmpdir_make(tmp, sizeof(tmp), NULL, "tw-twbenchcli");
	TAP_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "PR_SET_CHILD_SUBREAPER");

	st = run((const char *[]){ "--version", NULL }, NULL, NULL, 0, &o);
	is_int(st, 0, "--version: exit 0");
	ok(strncmp(o.out, "twbench (tailwind) ", 19) == 0, "--version prints the version: %s",
	   o.out);
	cli_out_free(&o);
	st = run((const char *[]){ "--help", NULL }, NULL, NULL, 0, &o);
	ok(st == 0 && strstr(o.out, "--version"), "--help lists --version");
	cli_out_free(&o);

	one_line_error((const char *[]){ "--count", "-1", NULL }, "--count -1", "--count",
		       "from 1 to 1000000000");
	one_line_error((const char *[]){ "--latency-count", "-1", NULL }, "--latency-count -1",
		       "--latency-count", "from 0 to 1000000000");
	one_line_error((const char *[]){ "-r", "0", NULL }, "-r 0", "-r '0'", "from 1 to 16");
	one_line_error((const char *[]){ "--batch", "x", NULL }, "--batch x", "--batch", "from 1");
	one_line_error((const char *[]){ "--provider", "", NULL }, "--provider ''", "--provider",
		       "provider name");

	st = run((const char *[]){ "--provider", "nosuch", "--count", "10", NULL }, NULL, NULL, 0,
		 &o);
	is_int(st, 2, "--provider nosuch: exit 2");
	ok(strstr(o.err, "--provider nosuch") && strstr(o.err, "not available") &&
	   strstr(o.err, "offers: ") && !strstr(o.err, "Broken pipe"),
	   "--provider nosuch: says the provider is not available and what is");
	tap_diag("stderr: %s", o.err);
	cli_out_free(&o);

	{
		char env[600];
		char *envv[] = { env, NULL };

		snprintf(env, sizeof(env), "TMPDIR=%s", tmp);
		st = run((const char *[]){ "--provider", "tcp", "--count", "2000", "--latency-count",
			 "10", "--no-progress", NULL }, envv, NULL, 0, &o);
		is_int(st, 0, "a short run: exit 0");
		ok(strstr(o.err, "starting local backup 1/3") && strstr(o.err, "backup 3/3 ready at "),
		   "progress lines while the backups start");
		is_int(entries(tmp), 0, "a short run: nothing left under $TMPDIR");
		cli_out_free(&o);
	}

	interrupt(tmp, "backup 1/3 ready at ", "SIGINT while the backups start");
	interrupt(tmp, "backup 3/3 ready at ", "SIGINT during the run");

	tmpdir_remove(tmp);
	tap_done_testing();
	return tap_exit();
}
