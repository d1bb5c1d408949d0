/*
 * tests/integration/partition_e2e.c — a network partition across "hosts" (argv[1]: tcp or
 * sockets). Needs root and network namespaces; otherwise the whole test is skipped.
 *
 * Hosts (one network namespace each, names unique per run): P (the primary), B0..B3 (twd's; r = 3,
 * B3 a spare), R (the recovery host), joined by veth pairs to a bridge in a seventh namespace.
 * Addresses 10.231.7.0/24 exist only inside these namespaces.
 *   1. failover_primary in P appends numbered objects and reports its acks; op and RPC timeouts
 *      are long (20 s), so that it is still waiting when the partition heals.
 *   2. After a few thousand acks, P's bridge port goes down: P is cut off (no local error).
 *   3. This program, re-executed inside R, recovers the log (fence with a new epoch: the backups
 *      revoke the log's open buffers and drop P's connections) and prints what it got.
 *   4. P's bridge port comes back up. The old primary's writes and RPCs now fail (revoked keys,
 *      closed connections, FENCED replies): it must report a failure, never a new ack of an
 *      entry the recovery did not return.
 * Checks: recovery returned every entry P acknowledged (before the cut, and any ack printed
 * later), in order; P failed after the link came back. Bounded: under a minute.
 * Cleanup (also on failure, from atexit): children killed, namespaces deleted.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/recovery.h>

#include "child.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"
#include "tmpdir.h"

#define NB 4
#define SUBNET "10.231.7."
#define LOG_ID 0xa117
#define SEG "262144"
#define BEFORE 3000

static char tag[16];                      /* unique per run */
static char ns_br[32], ns_p[32], ns_r[32], ns_b[NB][32];
static bool ns_made[NB + 3];
static char root_dir[128];

static int sh(const char *fmt, ...) TW_PRINTF(1, 2);

static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "# command failed (%d): %s\n", rc, cmd);
	return rc;
}

static void cleanup(void)
{
	const char *all[NB + 3] = { ns_br, ns_p, ns_r, ns_b[0], ns_b[1], ns_b[2], ns_b[3] };

	proc_cleanup_all();
	for (unsigned i = 0; i < NB + 3; i++)
		if (ns_made[i])
			sh("ip netns delete %s 2>/dev/null", all[i]);
	if (root_dir[0])
		tmpdir_remove(root_dir);
}

/* Namespaces of earlier runs that died without cleaning up (killed by a timeout): their tag is
 * the pid of a process that no longer exists. */
static void sweep_stale(void)
{
	FILE *f = popen("ip netns list 2>/dev/null", "r");
	char line[256];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long pid;
		char name[128];

		if (sscanf(line, "%127s", name) != 1 || strncmp(name, "twpart-", 7) != 0)
			continue;
		pid = strtoul(name + 7, NULL, 16);
		if (pid && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
			sh("ip netns delete %s 2>/dev/null", name);
	}
	pclose(f);
}

/* Host namespace `ns` with address SUBNET<host>, port p<host> on the bridge. */
static bool host(const char *ns, unsigned idx, unsigned hostno)
{
	if (sh("ip netns add %s", ns) != 0)
		return false;
	ns_made[idx] = true;
	return sh("ip -n %s link add p%u%s type veth peer name eth0 netns %s", ns_br, hostno, tag,
		  ns) == 0 &&
	       sh("ip -n %s link set p%u%s master br0 up", ns_br, hostno, tag) == 0 &&
	       sh("ip -n %s addr add " SUBNET "%u/24 dev eth0", ns, hostno) == 0 &&
	       sh("ip -n %s link set eth0 up", ns) == 0 && sh("ip -n %s link set lo up", ns) == 0;
}

/* Recovery host side: argv = self --recover PROV ADDR...; prints one result line. */
static int recover_main(int argc, char **argv)
{
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	struct rt_check chk;
	char err[512];
	int rc;

	tlog_recover_config(&cfg, argv[2], (const char *const *)&argv[3], (size_t)(argc - 3),
			    LOG_ID);
	cfg.connect_timeout_ms = 3000;
	cfg.rpc_timeout_ms = 5000;
	cfg.op_timeout_ms = 5000;
	memset(&chk, 0, sizeof(chk));
	rc = tw_recover(&cfg, rt_check_cb, &chk, &res, err, sizeof(err));
	printf("recovered %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %s\n", rc, chk.next, chk.bad,
	       res.epoch, res.backups_fenced, rc ? err : (chk.bad ? chk.first_bad : "ok"));
	fflush(stdout);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char twd[1024], prim[1024], self[1024], line[700], addr[NB][128], logid[32];
	struct proc *bk[NB], *pp, *rp;
	uint64_t acked = 0, acked_at_cut, t0 = tw_now_ns();
	bool failed = false;
	char failmsg[600] = "";
	int rc;

	if (argc > 2 && !strcmp(argv[1], "--recover"))
		return recover_main(argc, argv);
	if (geteuid() != 0)
		tap_plan_skip_all("needs root (network namespaces)");
	child_tool("tools/twd", twd, sizeof(twd));
	child_tool("tests/integration/failover_primary", prim, sizeof(prim));
	rc = (int)readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (rc <= 0)
		tap_plan_skip_all("cannot find /proc/self/exe");
	self[rc] = '\0';
	snprintf(tag, sizeof(tag), "%x", (unsigned)getpid()); /* <= 6 hex digits */
	sweep_stale();
	snprintf(ns_br, sizeof(ns_br), "twpart-%s-br", tag);
	snprintf(ns_p, sizeof(ns_p), "twpart-%s-p", tag);
	snprintf(ns_r, sizeof(ns_r), "twpart-%s-r", tag);
	for (unsigned i = 0; i < NB; i++)
		snprintf(ns_b[i], sizeof(ns_b[i]), "twpart-%s-b%u", tag, i);
	atexit(cleanup);
	if (sh("ip netns add %s", ns_br) != 0)
		tap_plan_skip_all("network namespaces unavailable (ip netns add failed)");
	ns_made[0] = true;
	tap_plan(5);
	TAP_REQUIRE(sh("ip -n %s link add br0 type bridge", ns_br) == 0 &&
		    sh("ip -n %s link set br0 up", ns_br) == 0, "bridge");
	TAP_REQUIRE(host(ns_p, 1, 10), "primary host");
	TAP_REQUIRE(host(ns_r, 2, 20), "recovery host");
	for (unsigned i = 0; i < NB; i++)
		TAP_REQUIRE(host(ns_b[i], 3 + i, 11 + i), "backup host %u", i);
	tmpdir_make(root_dir, sizeof(root_dir), NULL, "tw-part");

	/* Backups: twd inside B0..B3, listening on their own address. */
	for (unsigned i = 0; i < NB; i++) {
		char dir[192], listen[32];
		char *a[] = { (char *)"/usr/sbin/ip", (char *)"netns", (char *)"exec", ns_b[i], twd,
			      (char *)"-p", (char *)prov, (char *)"-d", dir, (char *)"-l", listen,
			      (char *)"--buffers", (char *)"32", (char *)"--buffer-size",
			      (char *)"256K", NULL };

		snprintf(dir, sizeof(dir), "%s/b%u", root_dir, i);
		snprintf(listen, sizeof(listen), SUBNET "%u", 11 + i);
		bk[i] = child_ready(a, NULL, 20000, addr[i], sizeof(addr[i]), NULL);
		TAP_REQUIRE(bk[i], "twd %u ready", i);
	}
	tap_diag("%s: hosts %s (primary), %s (recovery), backups %s %s %s %s (r = 3)", prov, ns_p,
		 ns_r, addr[0], addr[1], addr[2], addr[3]);

	/* The primary inside P. */
	snprintf(logid, sizeof(logid), "0x%x", LOG_ID);
	{
		char *a[] = { (char *)"/usr/sbin/ip", (char *)"netns", (char *)"exec", ns_p, prim,
			      (char *)prov, logid, (char *)SEG, (char *)"3", (char *)"100000000",
			      (char *)"20000", addr[0], addr[1], addr[2], addr[3], NULL };

		pp = proc_spawn(a, NULL);
		TAP_REQUIRE(pp, "spawn the primary");
	}
	while (acked < BEFORE) {
		rc = proc_wait_line(pp, NULL, line, sizeof(line), 20000);
		TAP_REQUIRE(rc >= 0, "primary: %" PRIu64 " acks, then %s", acked, strerror(-rc));
		if (!strncmp(line, "acked ", 6) && strtoull(line + 6, NULL, 10) + 1 > acked)
			acked = strtoull(line + 6, NULL, 10) + 1;
		TAP_REQUIRE(strncmp(line, "failed", 6) != 0, "primary failed early: %s", line);
	}

	/* 2. Cut P off. */
	TAP_REQUIRE(sh("ip -n %s link set p10%s down", ns_br, tag) == 0, "link down");
	acked_at_cut = acked;
	tap_diag("cut the primary off after %" PRIu64 " acks", acked);

	/* 3. Recover from R. */
	{
		char *a[] = { (char *)"/usr/sbin/ip", (char *)"netns", (char *)"exec", ns_r, self,
			      (char *)"--recover", (char *)prov, addr[0], addr[1], addr[2], addr[3],
			      NULL };
		uint64_t got = 0, bad = 1, epoch = 0;
		unsigned fenced = 0;
		int rrc = -1, n = 0;

		rp = proc_spawn(a, NULL);
		TAP_REQUIRE(rp, "spawn the recovery");
		rc = proc_wait_line(rp, "recovered ", line, sizeof(line), 40000);
		TAP_REQUIRE(rc > 0, "recovery result line: %s", strerror(-rc));
		sscanf(line + 10, "%d %" SCNu64 " %" SCNu64 " %" SCNu64 " %u %n", &rrc, &got, &bad,
		       &epoch, &fenced, &n);
		proc_wait(rp, 10000);
		proc_free(rp);
		ok(rrc == 0 && bad == 0 && got >= acked_at_cut && fenced == NB,
		   "recovery host: %" PRIu64 " objects in order (%" PRIu64 " acknowledged before the "
		   "cut), epoch %" PRIu64 ", %u backups fenced%s%s", got, acked_at_cut, epoch, fenced,
		   rrc ? ": " : "", rrc ? line + 10 + n : "");

		/* 4. Heal; the old primary must fail, never acknowledge beyond what was
		 * recovered. */
		TAP_REQUIRE(sh("ip -n %s link set p10%s up", ns_br, tag) == 0, "link up");
		tap_diag("link restored %.1f s into the test", (double)(tw_now_ns() - t0) / 1e9);
		while (!failed) {
			rc = proc_wait_line(pp, NULL, line, sizeof(line), 40000);
			if (rc < 0)
				break;
			if (!strncmp(line, "acked ", 6) && strtoull(line + 6, NULL, 10) + 1 > acked)
				acked = strtoull(line + 6, NULL, 10) + 1;
			if (!strncmp(line, "failed ", 7)) {
				failed = true;
				snprintf(failmsg, sizeof(failmsg), "%.590s", line + 7);
			}
		}
		ok(failed, "the old primary failed after the partition healed: %s",
		   failed ? failmsg : "no failure reported");
		/* "failed <status> <message>": fenced (the recovery's epoch reached a backup
		 * it still talks to, or its taken-over probe found the new owner), or every
		 * backup lost while cut off. */
		{
			int st = failed ? atoi(failmsg) : 0;

			ok(failed && ((st == -TW_EFENCED && (strstr(failmsg, "fenced") ||
							    strstr(failmsg, "taken over"))) ||
				      (st != -TW_EFENCED && strstr(failmsg, "lost"))),
			   "its error says why (fenced, taken over or lost): %s",
			   failed ? failmsg : "-");
		}
		ok(acked <= got, "every entry it ever acknowledged (%" PRIu64 ") was recovered (%"
		   PRIu64 ")", acked, got);
	}
	proc_kill(pp, SIGKILL);
	proc_wait(pp, 10000);
	proc_free(pp);
	for (unsigned i = 0; i < NB; i++) {
		proc_kill(bk[i], SIGTERM);
		proc_wait(bk[i], 20000);
		proc_free(bk[i]);
	}
	ok(tw_now_ns() - t0 < 60000000000ull, "bounded: %.1f s", (double)(tw_now_ns() - t0) / 1e9);
	return tap_exit();
}
