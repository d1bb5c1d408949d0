/*
 * tests/lib/child.h — the programs a test starts (tools/proc.h underneath): finding one in the
 * build tree, starting one that prints "ready <address>" once it listens (twd, rpc_server,
 * fab_peer) and waiting for that line (never a sleep, never a fixed port), stopping one.
 *
 *   child_tool("tools/twd", twd, sizeof(twd));             // or the whole test is a skip
 *   struct proc *p = child_ready(argv, NULL, 20000, addr, sizeof(addr), NULL);
 *   TAP_REQUIRE(p, "twd ready");
 *   is_int(child_stop(p, SIGTERM, 20000), 0, "twd exits 0 on SIGTERM");
 */
#ifndef TW_TESTS_CHILD_H
#define TW_TESTS_CHILD_H

#include <stdbool.h>
#include <stddef.h>

#include "proc.h"

/* proc_find_tool(relpath, out, len), or the whole test skipped (tap_plan_skip_all: "<relpath>
 * not built (set TW_BUILD_ROOT)"): call it before the plan. */
void child_tool(const char *relpath, char *out, size_t len);

/*
 * proc_spawn(argv, env_extra), then wait up to timeout_ms for its line "ready <address>"; the
 * address goes to addr (len bytes). Returns the process; or NULL after a diagnostic naming
 * argv[0] and why (the child, if any, stopped and freed), the reason to *err when err is not
 * NULL: -ECHILD (it could not be started), -EPIPE (it exited first), -ETIMEDOUT, -EINVAL (no
 * address on the line), -ENAMETOOLONG (the address does not fit).
 */
struct proc *child_ready(char *const argv[], char *const env_extra[], int timeout_ms, char *addr,
			 size_t len, int *err);

/* proc_kill(p, sig), proc_wait(p, timeout_ms), proc_free(p); returns what proc_wait returned
 * (the exit status, 128 + a signal, or -ETIMEDOUT). */
int child_stop(struct proc *p, int sig, int timeout_ms);

/*
 * SIGSTOP p and wait until every thread of it has stopped (or it exited): kill() returns before
 * the target stops. A stopped process's threads stop one by one: the thread that takes the
 * signal must first run, then it stops the others, so on a loaded machine a thread of the
 * target can go on for milliseconds after kill() (a twd's progress thread acknowledging one
 * more write, say). waitid(WSTOPPED) reports the whole group stopped; WNOWAIT leaves the
 * status for proc_wait. 0, or -errno (-ESRCH: p is gone).
 */
int child_pause(struct proc *p);

/* child_stop as two TAP tests: the signal is delivered (sig_what), the program exits 0 within
 * timeout_ms (exit_what). */
void child_stop_ok(struct proc *p, int sig, int timeout_ms, const char *sig_what,
		   const char *exit_what);

/*
 * Run argv, one of our programs that prints its report as one JSON line ("{...}", --json), to
 * its end: two TAP tests, the report came within timeout_ms (report_what) and the program
 * exited 0 (exit_what). The line goes to line (len bytes); whether it came.
 */
bool child_report(char *const argv[], int timeout_ms, char *line, size_t len,
		  const char *report_what, const char *exit_what);

#endif
