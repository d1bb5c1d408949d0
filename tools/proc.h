/*
 * tools/proc.h — spawn and supervise child processes: the tests' helper (integration tests,
 * benches) and twbench's local twd's share it (tools must not depend on tests/).
 *
 *   struct proc *p = proc_spawn(argv, env_extra);      // stdout is a pipe to us, stderr inherited
 *   proc_wait_line(p, "ready ", line, sizeof(line), 10000);  // no sleep: poll on the pipe
 *   ... talk to it ...
 *   proc_kill(p, SIGTERM); int st = proc_wait(p, 5000);  // exit status or 128+signal, <0 on error
 *   proc_free(p);                          // SIGTERM, then SIGKILL after 1 s, and reaps if alive
 *
 * Every spawned process is also remembered in a process-global list: proc_cleanup_all() (also
 * run from atexit after the first spawn) terminates and reaps leftovers so a failing test never
 * leaves children behind. Not thread-safe: use from one thread (or under the caller's lock).
 */
#ifndef TW_TOOLS_PROC_H
#define TW_TOOLS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct proc;

/*
 * Start argv[0] (a path; no $PATH search) with argv, the current environment plus `env_extra`
 * ("NAME=value" strings, NULL-terminated; may be NULL; later entries override). The child's stdout
 * is a pipe read by proc_wait_line/proc_read_line; stdin is /dev/null; stderr is inherited.
 * Returns NULL on failure (message on stderr). The strings are borrowed for the call.
 */
struct proc *proc_spawn(char *const argv[], char *const env_extra[]);

/* How proc_spawn_opts differs from proc_spawn; a zeroed struct (or NULL) is proc_spawn. */
struct proc_opts {
	/* Lines proc_wait_line skips go to stderr behind this prefix (a string that outlives the
	 * proc, e.g. a literal); NULL: "# child <pid>: ". */
	const char *echo_prefix;
	/* Skipped lines that start with this string are dropped, not echoed (a child's chatter,
	 * e.g. one line per acknowledgement, that would bury the diagnostics); NULL: none. */
	const char *drop_prefix;
	/* The child starts with no signal blocked (for a caller that blocks some for sigwait). */
	bool clear_sigmask;
	/* No message on stderr when spawning fails (errno says why). */
	bool quiet;
	/* Not in proc_cleanup_all's list and no atexit hook: the caller stops it (proc_free). */
	bool unlisted;
};

/* proc_spawn with options. On failure returns NULL with errno set. */
struct proc *proc_spawn_opts(char *const argv[], char *const env_extra[],
			     const struct proc_opts *opts);

pid_t proc_pid(const struct proc *p);

/*
 * Read lines from the child's stdout until one starts with `prefix` (NULL or "": any line) and
 * copy it, without the newline, into buf (truncated to len-1). Lines before it are discarded
 * (echoed to stderr as "# child: ..." for diagnosis). Returns the line length (>= 0), -ETIMEDOUT
 * when timeout_ms passed (timeout_ms < 0: wait forever), -EPIPE when the child closed stdout / exited.
 */
int proc_wait_line(struct proc *p, const char *prefix, char *buf, size_t len, int timeout_ms);

/* Send a signal. Returns 0 or -errno (-ESRCH when it is already reaped). */
int proc_kill(struct proc *p, int sig);

/*
 * Wait up to timeout_ms (< 0: forever) for the child to exit. Returns its exit status (0..255),
 * 128 + signal number when killed by a signal, or -ETIMEDOUT. Idempotent after it exited.
 */
int proc_wait(struct proc *p, int timeout_ms);

/* Whether the reaped child was ended by a signal (proc_wait then returned 128 + the signal). */
bool proc_signaled(const struct proc *p);

/* Whether the child is still running (not reaped, and waitpid WNOHANG says so). */
bool proc_alive(struct proc *p);

/* If still running: SIGTERM, up to 1 s grace, then SIGKILL; reap, close the pipe, free.
 * NULL is fine. */
void proc_free(struct proc *p);

/* proc_free every child spawned by proc_spawn that is still around (TERM, then KILL). */
void proc_cleanup_all(void);

/*
 * Path of a binary built in this tree: $TW_BUILD_ROOT/<relpath> (e.g. "tests/integration/fab_peer",
 * "tools/twd"). Falls back to the directory of /proc/self/exe's build tree guess when TW_BUILD_ROOT
 * is unset: the relpath relative to the current directory. Writes into out (len bytes);
 * returns 0, or -ENOENT when the file does not exist / is not executable, -ENAMETOOLONG.
 */
int proc_find_tool(const char *relpath, char *out, size_t len);

#endif
