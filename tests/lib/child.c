/* tests/lib/child.c — see child.h. */
#include "child.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "tap.h"

void child_tool(const char *relpath, char *out, size_t len)
{
	if (proc_find_tool(relpath, out, len) != 0)
		tap_plan_skip_all("%s not built (set TW_BUILD_ROOT)", relpath);
}

struct proc *child_ready(char *const argv[], char *const env_extra[], int timeout_ms, char *addr,
			 size_t len, int *err)
{
	struct proc *p = proc_spawn(argv, env_extra);
	char line[1024];
	int rc = -ECHILD;

	if (p) {
		rc = proc_wait_line(p, "ready ", line, sizeof(line), timeout_ms);
		if (rc >= 0 && !line[6])
			rc = -EINVAL; /* "ready " and no address */
		else if (rc >= 0 && (size_t)snprintf(addr, len, "%s", line + 6) >= len)
			rc = -ENAMETOOLONG;
	}
	if (err)
		*err = rc < 0 ? rc : 0;
	if (rc >= 0)
		return p;
	tap_diag("%s did not get ready: %s", argv[0], strerror(-rc));
	proc_free(p);
	return NULL;
}

int child_stop(struct proc *p, int sig, int timeout_ms)
{
	int st;

	proc_kill(p, sig);
	st = proc_wait(p, timeout_ms);
	proc_free(p);
	return st;
}

int child_pause(struct proc *p)
{
	siginfo_t si;
	int rc = proc_kill(p, SIGSTOP);

	if (rc)
		return rc;
	memset(&si, 0, sizeof(si));
	do
		rc = waitid(P_PID, (id_t)proc_pid(p), &si, WSTOPPED | WEXITED | WNOWAIT);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : 0;
}

void child_stop_ok(struct proc *p, int sig, int timeout_ms, const char *sig_what,
		   const char *exit_what)
{
	is_int(proc_kill(p, sig), 0, "%s", sig_what);
	is_int(proc_wait(p, timeout_ms), 0, "%s", exit_what);
	proc_free(p);
}

bool child_report(char *const argv[], int timeout_ms, char *line, size_t len,
		  const char *report_what, const char *exit_what)
{
	struct proc *p = proc_spawn(argv, NULL);
	int rc;

	TAP_REQUIRE(p, "spawn %s", argv[0]);
	rc = proc_wait_line(p, "{", line, len, timeout_ms);
	ok(rc > 0, "%s", report_what);
	is_int(proc_wait(p, 60000), 0, "%s", exit_what);
	proc_free(p);
	return rc > 0;
}
