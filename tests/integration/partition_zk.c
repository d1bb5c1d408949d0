/*
 * tests/integration/partition_zk.c — a primary cut off by a network partition (argv[1]: tcp or
 * sockets; docs/coordination.md, "What ZooKeeper does not protect"). Needs root (ip netns);
 * skipped (exit 77) with the reason otherwise.
 *
 * ZooKeeper, the backups and a standby run in this network namespace; the primary runs in its
 * own namespace, linked to ours by a veth pair (10.X.Y.1 here, 10.X.Y.2 there). The primary
 * takes the log and appends without end; the link is cut (`ip link set ... down`): its
 * ZooKeeper session expires, the standby on our side sees the owner node go and takes over
 * (fence, recover, append). The link heals: the old primary, which still believes it owns the
 * log, fails its next appends with -TW_EFENCED (the backups' fence stops it, not ZooKeeper) --
 * or, when an RPC of its was in flight during the cut, with -TW_ENOBACKUP on its own timeout --
 * and a final recovery holds every entry it had acknowledged, then the standby's.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "cli_run.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "zkserver.h"

#define NB 3
#define IP "/usr/sbin/ip"

static const char *prov;
static char twctl[512];
static char ns[32], veth_here[16], veth_there[16], ip_here[32], ip_there[32];
static bool ns_made;

/* Run `ip ARGS...` (argv-style, NULL-terminated); its exit status, or -1. */
static int ip_run(const char *a0, ...)
{
	char *argv[16];
	va_list ap;
	int n = 0, st;
	pid_t pid;

	argv[n++] = (char *)IP;
	argv[n++] = (char *)a0;
	va_start(ap, a0);
	while (n < 15 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execv(IP, argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void teardown(void)
{
	if (ns_made) {
		ip_run("link", "del", veth_here, NULL); /* the pair goes with it */
		ip_run("netns", "del", ns, NULL);
		ns_made = false;
	}
}

static bool setup_netns(char *why, size_t len)
{
	pid_t pid = getpid();
	char cidr_here[40], cidr_there[40];

	snprintf(ns, sizeof(ns), "twp%d", (int)pid);
	snprintf(veth_here, sizeof(veth_here), "twr%d", (int)pid);
	snprintf(veth_there, sizeof(veth_there), "twn%d", (int)pid);
	/* A /30 of its own per test process (the tcp and sockets tests run at once). */
	snprintf(ip_here, sizeof(ip_here), "10.%d.%d.%d", 100 + (int)((pid >> 14) % 100),
		 (int)((pid >> 6) & 0xff), (int)((pid & 0x3f) << 2) + 1);
	snprintf(ip_there, sizeof(ip_there), "10.%d.%d.%d", 100 + (int)((pid >> 14) % 100),
		 (int)((pid >> 6) & 0xff), (int)((pid & 0x3f) << 2) + 2);
	snprintf(cidr_here, sizeof(cidr_here), "%s/30", ip_here);
	snprintf(cidr_there, sizeof(cidr_there), "%s/30", ip_there);
	if (ip_run("netns", "add", ns, NULL) != 0) {
		snprintf(why, len, "ip netns add %s failed (no CAP_SYS_ADMIN here?)", ns);
		return false;
	}
	ns_made = true;
	atexit(teardown);
	if (ip_run("link", "add", veth_here, "type", "veth", "peer", "name", veth_there, NULL) ||
	    ip_run("link", "set", veth_there, "netns", ns, NULL) ||
	    ip_run("addr", "add", cidr_here, "dev", veth_here, NULL) ||
	    ip_run("link", "set", veth_here, "up", NULL) ||
	    ip_run("-n", ns, "addr", "add", cidr_there, "dev", veth_there, NULL) ||
	    ip_run("-n", ns, "link", "set", veth_there, "up", NULL) ||
	    ip_run("-n", ns, "link", "set", "lo", "up", NULL)) {
		snprintf(why, len, "cannot set up the veth pair %s/%s (ip link/addr failed)",
			 veth_here, veth_there);
		return false;
	}
	return true;
}

static uint64_t wait_acked(struct proc *p, uint64_t want, int timeout_ms)
{
	char line[256];
	uint64_t have = 0;

	while (have < want && proc_wait_line(p, NULL, line, sizeof(line), timeout_ms) >= 0) {
		uint64_t n;

		if (sscanf(line, "acked %" SCNu64, &n) == 1 && n > have)
			have = n;
	}
	return have;
}

int main(int argc, char **argv)
{
	char err[512], url[160], logs[32], line[640];
	char *twd_args[] = { (char *)"--listen", ip_here, (char *)"--coordinator", url, NULL };
	struct zkserver zk;
	struct rt_cluster cl;
	struct proc *old, *sb;
	uint64_t log, acked_old = 0, acked_sb = 0, took_entries = 0;
	bool took = false;
	int st;

	prov = argc > 1 ? argv[1] : "tcp";
	if (geteuid() != 0)
		tap_plan_skip_all("needs root: the primary runs in its own network namespace "
				  "(ip netns), cut off by taking a veth link down");
	if (access(IP, X_OK))
		tap_plan_skip_all("no %s (iproute2) here", IP);
	zkserver_require();
	child_tool("tools/twctl", twctl, sizeof(twctl));
	if (!setup_netns(err, sizeof(err))) {
		teardown();
		tap_plan_skip_all("%s", err);
	}
	tap_diag("primary in netns %s (%s), ZooKeeper and %d backups here (%s)", ns, ip_there, NB,
		 ip_here);

	/* ZooKeeper and the backups listen on our end of the link. */
	zkserver_start_on(&zk, ip_here, ip_here);
	snprintf(url, sizeof(url), "%s", zk.url);
	rt_start_with(&cl, NULL, prov, NB, "64K", "64", twd_args);
	log = 0x6a00000000000000ull | (uint64_t)getpid();
	snprintf(logs, sizeof(logs), "%#" PRIx64, log);

	/* The primary, in the other namespace: owns the log at once, appends without end.
	 * op timeout: twctl's default (10 s) is longer than the cut. */
	{
		char *args[] = { (char *)IP, (char *)"netns", (char *)"exec", ns, twctl, (char *)"-c",
				 url, (char *)"-p", (char *)prov, (char *)"-t", (char *)"2000",
				 (char *)"standby", logs, (char *)"-S", (char *)"64K",
				 (char *)"--append", (char *)"1000000000", NULL };

		old = proc_spawn_opts(args, (char *const[]){ (char *)"TW_LOG_LEVEL=warn", NULL },
				      &(struct proc_opts){ .drop_prefix = "acked " });
		TAP_REQUIRE(old, "spawn the primary in %s", ns);
	}
	st = proc_wait_line(old, "took-over ", line, sizeof(line), 60000);
	TAP_REQUIRE(st >= 0, "the primary in %s took the log", ns);
	acked_old = wait_acked(old, 300, 60000);
	ok(acked_old >= 300, "the primary across the veth link appends (%" PRIu64 " acknowledged)",
	   acked_old);
	/* The standby, here. */
	{
		char *args[] = { twctl, (char *)"-c", url, (char *)"-p", (char *)prov, (char *)"-t",
				 (char *)"2000", (char *)"standby", logs, (char *)"-S", (char *)"64K",
				 (char *)"--append", (char *)"100", NULL };

		sb = proc_spawn_opts(args, (char *const[]){ (char *)"TW_LOG_LEVEL=warn", NULL },
				     &(struct proc_opts){ .drop_prefix = "acked " });
		TAP_REQUIRE(sb && proc_wait_line(sb, "watching ", line, sizeof(line), 60000) >= 0,
			    "the standby watches the owner node");
	}
	/* Cut. */
	is_int(ip_run("link", "set", veth_here, "down", NULL), 0, "link cut (ip link set %s down)",
	       veth_here);
	/* Whatever the primary printed before the cut took effect: acknowledged. The pipe
	 * is local, so its lines still come; nothing more is acknowledged once cut. */
	{
		char tl[640];
		struct took {
			uint64_t epoch, entries;
		} t = { 0, 0 };

		st = proc_wait_line(sb, "took-over ", tl, sizeof(tl), 60000);
		if (st >= 0)
			sscanf(strstr(tl, "epoch="), "epoch=%" SCNu64, &t.epoch);
		if (st >= 0 && strstr(tl, "entries="))
			sscanf(strstr(tl, "entries="), "entries=%" SCNu64, &t.entries);
		took_entries = t.entries;
		took = st >= 0 && t.epoch >= 2;
		ok(st >= 0 && t.epoch >= 2, "the standby took over after the primary's session "
		   "expired (epoch %" PRIu64 ", %" PRIu64 " entries recovered)", t.epoch, t.entries);
		tap_diag("standby: %s", st >= 0 ? tl : "(no line)");
	}
	/* Drain what the old primary acknowledged until now (lines already in the pipe). */
	{
		uint64_t more = wait_acked(old, UINT64_MAX, 200);

		if (more > acked_old)
			acked_old = more;
	}
	ok(took_entries >= acked_old, "the standby recovered every entry the cut-off primary had "
	   "acknowledged (%" PRIu64 " >= %" PRIu64 ")", took_entries, acked_old);
	acked_sb = wait_acked(sb, took_entries + 100, 60000);
	is_int(proc_wait(sb, 60000), 0, "the standby appended 100 entries and closed the log");
	is_int(acked_sb, took_entries + 100, "its entries were acknowledged");
	proc_free(sb);

	/* Heal: the old primary reaches the backups again, and they refuse it. */
	is_int(ip_run("link", "set", veth_here, "up", NULL), 0, "link healed");
	if (!took) {
		/* Nobody fenced it: it would append for ever. The checks below fail. */
		tap_diag("no takeover: stopping the old primary");
		proc_kill(old, SIGKILL);
	}
	{
		char fl[640] = "";
		int got = -1;
		uint64_t end = tw_now_ns() + 60 * 1000000000ull; /* lines may come for ever */

		while (tw_now_ns() < end &&
		       (st = proc_wait_line(old, NULL, line, sizeof(line),
					    (int)((end - tw_now_ns()) / 1000000u) + 1)) >= 0) {
			uint64_t n;

			if (sscanf(line, "acked %" SCNu64, &n) == 1 && n > acked_old)
				acked_old = n; /* cannot happen: checked below */
			if (!strncmp(line, "append failed: ", 15)) {
				snprintf(fl, sizeof(fl), "%s", line);
				break;
			}
		}
		got = proc_wait(old, 60000);
		/* Fenced when it reached a backup after the fence; when a roll's RPC was in
		 * flight during the cut, its timeout (-t, 2 s) cut every backup off first:
		 * no backups, equally without acknowledging anything (docs/coordination.md). */
		ok(got == 1 && (strstr(fl, "fenced") || strstr(fl, "not enough backups")),
		   "the old primary's appends fail: fenced, or cut off by its own timeouts "
		   "(exit %d: %s)", got, fl[0] ? fl : "no failure line");
		tap_diag("the old primary stopped %s", strstr(fl, "fenced") ? "at the fence"
			 : "on its own timeouts before reaching a fenced backup");
		proc_free(old);
	}
	ok(acked_old <= took_entries, "nothing was acknowledged to the old primary after the "
	   "standby's recovery (%" PRIu64 " <= %" PRIu64 ")", acked_old, took_entries);
	/* The final recovery: the old primary's acknowledged entries, then the standby's. */
	{
		char out[300];
		char *args[] = { twctl, (char *)"-c", url, (char *)"-p", (char *)prov,
				 (char *)"recover", logs, (char *)"-o", out, NULL };
		struct cli_out o;
		FILE *f;
		uint64_t n = 0, bad = 0;

		snprintf(out, sizeof(out), "%s/rec", cl.root);
		st = cli_run(args, NULL, NULL, 0, 60000, &o);
		cli_out_free(&o);
		f = st == 0 ? fopen(out, "rb") : NULL;
		while (f) {
			uint8_t b[64];
			int rc = rt_read_entry(f, b, sizeof(b));

			if (rc <= 0) {
				bad += rc < 0;
				break;
			}
			bad += tw_load_le64(b) != n++;
		}
		if (f)
			fclose(f);
		ok(st == 0 && !bad && n == acked_sb && n >= acked_old,
		   "the final recovery: %" PRIu64 " entries in order (%" PRIu64 " out of place): all "
		   "%" PRIu64 " of the old primary, then the standby's up to %" PRIu64, n, bad,
		   acked_old, acked_sb);
	}
	rt_stop(&cl);
	zkserver_stop(&zk);
	teardown();
	tap_done_testing();
	return tap_exit();
}
