/*
 * tests/integration/failover_e2e.c — backup failure during a stream of appends, over a real
 * provider (argv[1]: tcp, sockets, shm), then a primary crash and recovery.
 *
 * Four local twd's, r = 3 (one spare). A failover_primary appends numbered objects as fast as it
 * can and reports every acknowledgement (write(2) lines, see failover_primary.c). After a few
 * thousand acks, one backup holding a replica of the open segment (and of the next two) is
 *   kill (argv[2] = "kill", default): SIGKILLed — the primary sees a CQ error / FI_SHUTDOWN /
 *        op timeout, replaces it with the spare, and goes on;
 *   stop (argv[2] = "stop"): SIGSTOPped — the primary's writes to it stall until the op
 *        timeout, it is replaced; then it is resumed (SIGCONT) with a stale open copy;
 *   restart (argv[2] = "restart"): SIGTERMed — twd flushes everything, the open buffer
 *        included (closed on disk, as on battery power), and exits; the primary replaces it;
 *        then it is started again on its directory and rejoins with that stale flushed copy.
 * Appends must continue after a pause (printed as a diagnostic: the longest gap between two
 * acknowledgements after the fault, and the suspension the primary measured). Then the primary
 * is SIGKILLed; tw_recover() over all four addresses must return every acknowledged object, in
 * order. In "stop" and "restart" modes the returning backup's copy has an older replica version
 * and recovery must say it ignored it (copies_stale).
 *
 *   repeat (argv[2] = "repeat"): REPEAT_RUNS times over, a fresh cluster of four twd's and a
 *        primary in sync mode (one 100-byte append at a time); right after a segment rolled over,
 *        the backup holding replica 0 of the new open segment is SIGKILLed. The spare must take
 *        its place and appends must go on every time. (On shm the primary resets its fabric,
 *        tw__fab_reset; its writes to the healthy replicas time out behind the dead one's, and when
 *        one of those timeouts was reported first the healthy backup was kept out as lost: "need 3
 *        backups, only 2 usable" in about half of the runs.)
 *
 *   heal (argv[2] = "heal"): three twd's, r = 2; a killed replica is started again on its
 *        address and must become a backup again (the context's reviver, primary/ctx_revive.c),
 *        so that a second kill still finds a spare. On shm the twd's listen on named endpoints
 *        (--listen 127.0.0.1:N: fi_ns://N), which a restart keeps (docs/fabric.md "Named shm
 *        endpoints"); on tcp and sockets the address is the port.
 *
 *   heal_now (argv[2] = "heal_now"): the same, but the second replica is killed as soon as the
 *        first one is running again, before the primary's reviver has probed it (its back-off
 *        reaches 1 s): the failover must ask for that probe itself (tw__ctx_revive_now) and
 *        take the restarted backup as the spare, where before the log failed ("no spare").
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/recovery.h>

#include "child.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define SEG "262144"
#define BEFORE 3000   /* acks before the fault (more than one segment) */
#define AFTER 5000    /* acks after the failover before the primary dies */
#define LINE_MS 30000 /* longest wait for one line */

struct run {
	struct proc *p;
	uint64_t acked;       /* objects acknowledged (highest N + 1) */
	char replicas[512];   /* last "replicas" line */
	bool lost, resumed, failed;
	uint64_t lost_n;      /* the last "lost N" line's N */
	uint64_t resumed_us, rereps, rerep_bytes;
	uint64_t fault_ns, last_ack_ns, max_gap_ns, first_ack_after_ns;
	uint64_t acked_at_fault;
	char failmsg[512];
};

/* Read one line of the primary; false at EOF or timeout. */
static bool step(struct run *r, int timeout_ms)
{
	char line[500];
	int rc = proc_wait_line(r->p, NULL, line, sizeof(line), timeout_ms);

	if (rc < 0)
		return false;
	if (!strncmp(line, "acked ", 6)) {
		uint64_t a = strtoull(line + 6, NULL, 10) + 1, now = tw_now_ns();

		if (a > r->acked)
			r->acked = a;
		if (r->fault_ns) {
			uint64_t gap = now - (r->last_ack_ns > r->fault_ns ? r->last_ack_ns
									     : r->fault_ns);

			if (!r->first_ack_after_ns && r->resumed)
				r->first_ack_after_ns = now - r->fault_ns;
			if (gap > r->max_gap_ns)
				r->max_gap_ns = gap;
		}
		r->last_ack_ns = now;
	} else if (!strncmp(line, "replicas ", 9)) {
		snprintf(r->replicas, sizeof(r->replicas), "%s", line + 9);
	} else if (!strncmp(line, "lost ", 5)) {
		r->lost = true;
		r->lost_n = strtoull(line + 5, NULL, 10);
	} else if (!strncmp(line, "resumed ", 8)) {
		r->resumed = true;
		sscanf(line + 8, "%" SCNu64 " %*u %" SCNu64 " %" SCNu64, &r->resumed_us, &r->rereps,
		       &r->rerep_bytes);
	} else if (!strncmp(line, "failed ", 7)) {
		r->failed = true;
		snprintf(r->failmsg, sizeof(r->failmsg), "%s", line + 7);
	}
	return true;
}

/* Backup index of the replica `which` of the last "replicas SEG A B C" line. */
static int victim_of(const struct rt_cluster *cl, const char *replicas, unsigned which)
{
	char buf[512], *save = NULL, *tok;
	unsigned k = 0;

	snprintf(buf, sizeof(buf), "%s", replicas);
	strtok_r(buf, " ", &save); /* segment id */
	while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
		if (k++ != which)
			continue;
		for (unsigned i = 0; i < cl->n; i++)
			if (!strcmp(cl->addr[i], tok))
				return (int)i;
	}
	return -1;
}

/* Start failover_primary on log `logid` over the cluster's four twd's (3 replicas) and read its
 * lines until `acks` objects are acknowledged. Returns its pid. */
static int start_primary(struct run *r, const struct rt_cluster *cl, char *prim, char *logid,
			 const char *op_timeout, char *const env[], uint64_t acks)
{
	char *pargv[] = { prim, (char *)cl->prov, logid, (char *)SEG, (char *)"3",
			  (char *)"100000000", (char *)op_timeout, (char *)cl->addr[0],
			  (char *)cl->addr[1], (char *)cl->addr[2], (char *)cl->addr[3], NULL };

	memset(r, 0, sizeof(*r));
	r->p = proc_spawn(pargv, env);
	TAP_REQUIRE(r->p, "spawn failover_primary");
	while (r->acked < acks && !r->failed)
		TAP_REQUIRE(step(r, LINE_MS), "primary: %" PRIu64 " acks, then silence", r->acked);
	return (int)proc_pid(r->p);
}

/* SIGKILL the primary (pid), read what it said last, reap it and what shm left of it. */
static void kill_primary(struct run *r, const char *prov, int pid)
{
	proc_kill(r->p, SIGKILL);
	while (step(r, LINE_MS))
		;
	proc_wait(r->p, 20000);
	proc_free(r->p);
	if (!strcmp(prov, "shm"))
		rt_shm_cleanup(pid);
}

/* Reap the killed twd `victim` and what shm left of it. */
static void reap_victim(struct rt_cluster *cl, int victim)
{
	int vpid = (int)proc_pid(cl->p[victim]);

	proc_wait(cl->p[victim], 20000);
	proc_free(cl->p[victim]);
	cl->p[victim] = NULL;
	if (!strcmp(cl->prov, "shm"))
		rt_shm_cleanup(vpid);
}

#define REPEAT_RUNS 8
#define REPEAT_BEFORE 300 /* acks before waiting for a rollover */
#define REPEAT_AFTER 300  /* acks after the fault */

/* One run of "repeat": returns whether appends went on after the kill. */
static bool repeat_once(const char *prov, unsigned run, char *prim)
{
	char logid[32], *env[] = { (char *)"FAILOVER_SYNC=1", NULL };
	struct rt_cluster cl;
	struct run r;
	char seg_at_start[512];
	int victim, pid;
	bool went_on;

	rt_start(&cl, prov, 4, "256K", "8");
	snprintf(logid, sizeof(logid), "0x%x", 0xf510 + run);
	pid = start_primary(&r, &cl, prim, logid, "2000", env, REPEAT_BEFORE);
	/* Kill at the start of a segment, so that the victim holds a replica of the open one. */
	snprintf(seg_at_start, sizeof(seg_at_start), "%s", r.replicas);
	while (!strcmp(seg_at_start, r.replicas) && !r.failed)
		TAP_REQUIRE(step(&r, LINE_MS), "primary: %" PRIu64 " acks, then silence", r.acked);
	TAP_REQUIRE(!r.failed, "primary failed before the fault: %s", r.failmsg);
	victim = victim_of(&cl, r.replicas, 0);
	TAP_REQUIRE(victim >= 0, "victim from \"%s\"", r.replicas);
	r.fault_ns = tw_now_ns();
	r.acked_at_fault = r.acked;
	proc_kill(cl.p[victim], SIGKILL);
	while (!(r.lost && r.acked >= r.acked_at_fault + REPEAT_AFTER) && !r.failed)
		if (!step(&r, LINE_MS))
			break;
	went_on = r.lost && !r.failed && r.acked >= r.acked_at_fault + REPEAT_AFTER;
	tap_diag("run %u: SIGKILL backup %d (replica 0 of segment %s) after %" PRIu64 " acks: %s%s",
		 run, victim, r.replicas, r.acked_at_fault,
		 !went_on ? "stuck: " : r.resumed ? "suspended, replaced, resumed" :
		 "replaced at a rollover", r.failed ? r.failmsg : "");
	kill_primary(&r, prov, pid);
	reap_victim(&cl, victim);
	rt_stop(&cl);
	return went_on;
}

static int repeat_main(const char *prov)
{
	char prim[1024];
	unsigned good = 0;

	child_tool("tests/integration/failover_primary", prim, sizeof(prim));
	tap_plan(REPEAT_RUNS + 1);
	for (unsigned i = 0; i < REPEAT_RUNS; i++) {
		bool went_on = repeat_once(prov, i, prim);

		good += went_on;
		ok(went_on, "run %u: the spare replaced the killed replica 0, appends went on", i);
	}
	is_int(good, REPEAT_RUNS, "%s: appends went on after every one of %u kills", prov,
	       REPEAT_RUNS);
	return tap_exit();
}

#define HEAL_AFTER 2000 /* acks after each kill */
#define HEAL_WAIT_MS 20000 /* longest wait for the restarted backup to hold a new segment */

/* Whether the "replicas SEG A B" line names `addr`. */
static bool names(const char *replicas, const char *addr)
{
	char buf[512], *save = NULL, *tok;

	snprintf(buf, sizeof(buf), "%s", replicas);
	strtok_r(buf, " ", &save); /* segment id */
	while ((tok = strtok_r(NULL, " ", &save)) != NULL)
		if (!strcmp(tok, addr))
			return true;
	return false;
}

/* shm: twd i's --listen, "127.0.0.1:N" (its endpoint is named fi_ns://N, docs/fabric.md
 * "Named shm endpoints"); empty on the other providers, where its address is its --listen. */
static char heal_listen[3][32];

/* shm: three twd's on named endpoints. The names are numbers picked from our pid; one a live
 * process holds already (another run of this test) makes twd exit: the next number. */
static void heal_start_shm(struct rt_cluster *cl, const char *prov)
{
	unsigned base = 20000u + ((unsigned)getpid() * 3u) % 40000u;

	rt_start(cl, prov, 0, "256K", "32");
	cl->n = 3;
	for (unsigned i = 0, t = 0; i < 3; i++) {
		for (cl->p[i] = NULL; !cl->p[i] && t < 30; t++) {
			char *argv[] = { cl->twd, (char *)"-p", (char *)prov, (char *)"-d", cl->dir[i],
					 (char *)"--buffers", (char *)"32", (char *)"--buffer-size",
					 (char *)"256K", (char *)"--listen", heal_listen[i], NULL };
			int err = 0;

			snprintf(cl->dir[i], sizeof(cl->dir[i]), "%s/b%u", cl->root, i);
			snprintf(heal_listen[i], sizeof(heal_listen[i]), "127.0.0.1:%u",
				 20000u + (base - 20000u + i + 3u * t) % 40000u);
			cl->p[i] = child_ready(argv, NULL, 30000, cl->addr[i], sizeof(cl->addr[i]),
					       &err);
			TAP_REQUIRE(cl->p[i] || err == -EPIPE, "twd %u on %s", i, heal_listen[i]);
		}
		TAP_REQUIRE(cl->p[i], "twd %u: no free shm name in 30 tries", i);
		cl->addrs[i] = cl->addr[i];
		tap_diag("twd %u: --listen %s, address %s", i, heal_listen[i], cl->addr[i]);
	}
}

/* shm: what a SIGKILLed named twd leaves (its region and doorbell; rt_shm_cleanup finds only
 * names with a pid in them). */
static void heal_cleanup_shm(const struct rt_cluster *cl, unsigned i)
{
	const char *n = strstr(cl->addr[i], "://");
	char path[320];

	if (!heal_listen[i][0] || !n)
		return;
	snprintf(path, sizeof(path), "/dev/shm/%s", n + 3);
	unlink(path);
	snprintf(path, sizeof(path), "/dev/shm/tw_bell_%s", n + 3);
	unlink(path);
}

/* Start twd i again on its directory and its address (the port may still be held by the dead
 * process' sockets for a moment: a few tries). */
static void restart_same_addr(struct rt_cluster *cl, unsigned i)
{
	char *argv[] = { cl->twd, (char *)"-p", (char *)cl->prov, (char *)"-d", cl->dir[i],
			 (char *)"--buffers", (char *)"32", (char *)"--buffer-size", (char *)"256K",
			 (char *)"--listen", heal_listen[i][0] ? heal_listen[i] : cl->addr[i], NULL };
	char addr[256];

	proc_free(cl->p[i]);
	cl->p[i] = NULL;
	for (unsigned t = 0; t < 20 && !cl->p[i]; t++) {
		int err = 0;

		cl->p[i] = child_ready(argv, NULL, 30000, addr, sizeof(addr), &err);
		if (!cl->p[i] && err != -EPIPE)
			break;
	}
	TAP_REQUIRE(cl->p[i], "twd %u restarted on %s", i, cl->addr[i]);
	TAP_REQUIRE(!strcmp(addr, cl->addr[i]), "twd %u restarted on %s, not %s", i, addr,
		    cl->addr[i]);
}

/*
 * "heal": three twd's and r = 2 (one spare). SIGKILL a replica A: the spare replaces it. Start A
 * again on the same address: the primary must probe it, connect again and place new segments
 * there. Then SIGKILL another replica B: A is the only spare left, and appends must go on (before
 * the reviver, "no spare for segment N: need 2 backups, only 1 usable"). Then recovery over the
 * two survivors returns every acknowledged object.
 */
static int heal_main(const char *prov, bool now)
{
	char prim[1024], logid[32], err[512];
	struct rt_cluster cl;
	struct tw_recover_config rcfg;
	struct tw_recover_result res;
	struct rt_check chk;
	struct run r;
	int a, b, pid, rc;
	uint64_t t0, waited_ns, seg_restart;
	bool back;

	child_tool("tests/integration/failover_primary", prim, sizeof(prim));
	tap_plan(now ? 4 : 5);
	if (!strcmp(prov, "shm"))
		heal_start_shm(&cl, prov);
	else
		rt_start(&cl, prov, 3, "256K", "32");
	snprintf(logid, sizeof(logid), "0x%x", 0xf504);
	{
		char *pargv[] = { prim, (char *)prov, logid, (char *)SEG, (char *)"2",
				  (char *)"100000000", (char *)"2000", cl.addr[0], cl.addr[1],
				  cl.addr[2], NULL };

		memset(&r, 0, sizeof(r));
		r.p = proc_spawn(pargv, NULL);
		TAP_REQUIRE(r.p, "spawn failover_primary");
		pid = (int)proc_pid(r.p);
	}
	while (r.acked < BEFORE && !r.failed)
		TAP_REQUIRE(step(&r, LINE_MS), "primary: %" PRIu64 " acks, then silence", r.acked);
	TAP_REQUIRE(!r.failed, "primary failed before the fault: %s", r.failmsg);

	a = victim_of(&cl, r.replicas, 0);
	TAP_REQUIRE(a >= 0, "victim from \"%s\"", r.replicas);
	r.fault_ns = tw_now_ns();
	r.acked_at_fault = r.acked;
	proc_kill(cl.p[a], SIGKILL);
	proc_wait(cl.p[a], 20000);
	tap_diag("SIGKILL backup %d (%s) after %" PRIu64 " acks", a, cl.addr[a], r.acked);
	while (!(r.lost_n >= 1 && r.acked >= r.acked_at_fault + HEAL_AFTER) && !r.failed)
		if (!step(&r, LINE_MS))
			break;
	ok(r.lost_n >= 1 && !r.failed, "the spare replaced backup %d, appends went on%s%s", a,
	   r.failed ? ": " : "", r.failed ? r.failmsg : "");

	restart_same_addr(&cl, (unsigned)a);
	t0 = tw_now_ns();
	/* Only a segment opened after the restart counts: the last "replicas" line may still be
	 * the one of the segment A was killed in, which names A (the line is printed when the
	 * acknowledged segment changes, not when a replica is replaced). */
	seg_restart = strtoull(r.replicas, NULL, 0);
	back = false;
	while (!now && !back && !r.failed &&
	       tw_now_ns() - t0 < (uint64_t)HEAL_WAIT_MS * 1000000u) {
		if (!step(&r, LINE_MS))
			break;
		back = strtoull(r.replicas, NULL, 0) > seg_restart && names(r.replicas, cl.addr[a]);
	}
	waited_ns = tw_now_ns() - t0;
	if (!now)
		ok(back, "backup %d restarted on %s holds a new segment %.0f ms later (replicas %s)",
		   a, cl.addr[a], (double)waited_ns / 1e6, r.replicas);

	b = victim_of(&cl, r.replicas, 0);
	if (b == a)
		b = victim_of(&cl, r.replicas, 1);
	TAP_REQUIRE(b >= 0 && b != a, "second victim from \"%s\"", r.replicas);
	r.acked_at_fault = r.acked;
	proc_kill(cl.p[b], SIGKILL);
	tap_diag("SIGKILL backup %d (%s) after %" PRIu64 " acks", b, cl.addr[b], r.acked);
	while (!(r.lost_n >= 2 && r.acked >= r.acked_at_fault + HEAL_AFTER) && !r.failed)
		if (!step(&r, LINE_MS))
			break;
	ok(r.lost_n >= 2 && !r.failed && r.acked >= r.acked_at_fault + HEAL_AFTER,
	   "the second kill: %" PRIu64 " acks after it, the restarted backup the only spare%s%s",
	   r.acked - r.acked_at_fault, r.failed ? ": failed: " : "", r.failed ? r.failmsg : "");

	kill_primary(&r, prov, pid);
	reap_victim(&cl, b);
	heal_cleanup_shm(&cl, (unsigned)b);
	tlog_recover_config(&rcfg, prov, cl.addrs, 3, strtoull(logid, NULL, 0));
	rcfg.connect_timeout_ms = 2000;
	rcfg.rpc_timeout_ms = 5000;
	rcfg.op_timeout_ms = 5000;
	memset(&chk, 0, sizeof(chk));
	rc = tw_recover(&rcfg, rt_check_cb, &chk, &res, err, sizeof(err));
	ok(rc == 0 && chk.bad == 0 && chk.next >= r.acked,
	   "recovery from the two survivors: %" PRIu64 " objects in order, %" PRIu64
	   " acknowledged%s%s%s", chk.next, r.acked, rc ? ": " : "", rc ? err : "",
	   chk.bad ? chk.first_bad : "");
	ok(res.segments_missing == 0 && res.copies_corrupt == 0,
	   "%" PRIu64 " segments, none missing, no corrupt copy (reached %u of %u backups)",
	   res.segments, res.backups_reached, res.backups);
	rt_stop(&cl);
	return tap_exit();
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	bool stop = argc > 2 && !strcmp(argv[2], "stop");
	bool restart = argc > 2 && !strcmp(argv[2], "restart");
	const char *mode = stop ? "stop" : restart ? "restart" : "kill";
	const char *op_timeout = stop ? "1000" : "2000";
	char prim[1024], logid[32], err[512];
	struct rt_cluster cl;
	struct tw_recover_config rcfg;
	struct tw_recover_result res;
	struct rt_check chk;
	struct run r;
	int victim, pid, rc;

	if (argc > 2 && !strcmp(argv[2], "repeat"))
		return repeat_main(prov);
	if (argc > 2 && !strcmp(argv[2], "heal"))
		return heal_main(prov, false);
	if (argc > 2 && !strcmp(argv[2], "heal_now"))
		return heal_main(prov, true);
	child_tool("tests/integration/failover_primary", prim, sizeof(prim));
	tap_plan(stop || restart ? 7 : 6);
	rt_start(&cl, prov, 4, "256K", "32");
	tap_diag("provider %s, mode %s, backups %s %s %s %s", prov, mode,
		 cl.addr[0], cl.addr[1], cl.addr[2], cl.addr[3]);
	snprintf(logid, sizeof(logid), "0x%x", stop ? 0xf502 : restart ? 0xf503 : 0xf501);
	pid = start_primary(&r, &cl, prim, logid, op_timeout, NULL, BEFORE);
	TAP_REQUIRE(!r.failed, "primary failed before the fault: %s", r.failmsg);

	/* Replica 2 of segment k is also one of k + 1 and k + 2: a rollover in between does not
	 * take the victim out of the open segment. */
	victim = victim_of(&cl, r.replicas, 2);
	TAP_REQUIRE(victim >= 0, "victim from \"%s\"", r.replicas);
	r.fault_ns = tw_now_ns();
	r.acked_at_fault = r.acked;
	proc_kill(cl.p[victim], stop ? SIGSTOP : restart ? SIGTERM : SIGKILL);
	tap_diag("%s backup %d (%s) after %" PRIu64 " acks (replicas of segment %s)",
		 stop ? "SIGSTOP" : restart ? "SIGTERM" : "SIGKILL", victim, cl.addr[victim], r.acked, r.replicas);

	/* Usually the loss hits the open segment (suspend, replace, resume: a "resumed" line);
	 * when it is noticed while the next segment is being opened, that open simply goes to
	 * the spare and nothing is suspended. */
	while (!(r.lost && r.acked >= r.acked_at_fault + AFTER) && !r.failed)
		if (!step(&r, LINE_MS))
			break;
	ok(r.lost && !r.failed, "the primary lost the backup and went on (%s)%s%s",
	   r.resumed ? "suspended, replaced, resumed" : "replaced at a rollover, no suspension",
	   r.failed ? ": failed: " : "", r.failed ? r.failmsg : "");
	ok(r.acked >= r.acked_at_fault + AFTER, "appends continued: %" PRIu64 " acks after the "
	   "fault (%" PRIu64 " in all)", r.acked - r.acked_at_fault, r.acked);
	tap_diag("pause: longest gap between acks after the fault %.1f ms; suspension measured by "
		 "the primary %.1f ms (from detection); %" PRIu64 " re-replications, %" PRIu64
		 " bytes copied", (double)r.max_gap_ns / 1e6, (double)r.resumed_us / 1e3, r.rereps,
		 r.rerep_bytes);
	if (restart) {
		/* It flushed its open buffer at version 0 and exited; start it on its directory. */
		proc_wait(cl.p[victim], 20000);
		rt_restart(&cl, (unsigned)victim, "256K", "32");
		tap_diag("backup %d restarted at %s", victim, cl.addr[victim]);
	}
	if (stop || restart) {
		if (stop)
			proc_kill(cl.p[victim], SIGCONT); /* back, with a stale open copy */
		/* More appends after it is back (the context probes it and may place new segments
		 * there again; its stale copy of the old ones stays out). */
		for (uint64_t until = r.acked + 1000; r.acked < until && !r.failed;)
			if (!step(&r, LINE_MS))
				break;
	}

	kill_primary(&r, prov, pid);
	if (!stop && !restart)
		reap_victim(&cl, victim);

	tlog_recover_config(&rcfg, prov, cl.addrs, 4, strtoull(logid, NULL, 0));
	rcfg.connect_timeout_ms = 2000;
	rcfg.rpc_timeout_ms = 5000;
	rcfg.op_timeout_ms = 5000;
	memset(&chk, 0, sizeof(chk));
	rc = tw_recover(&rcfg, rt_check_cb, &chk, &res, err, sizeof(err));
	ok(rc == 0 && chk.bad == 0 && chk.next >= r.acked,
	   "recovery after the primary's crash: %" PRIu64 " objects in order, %" PRIu64
	   " acknowledged%s%s%s", chk.next, r.acked, rc ? ": " : "", rc ? err : "",
	   chk.bad ? chk.first_bad : "");
	ok(res.segments_missing == 0 && res.copies_corrupt == 0,
	   "%" PRIu64 " segments, none missing, no corrupt copy (%" PRIu64 " stale, reached %u of "
	   "%u backups)", res.segments, res.copies_stale, res.backups_reached, res.backups);
	ok(res.backups_reached == (stop || restart ? 4u : 3u), "recovery reached %u backups",
	   res.backups_reached);
	if (stop || restart)
		ok(res.copies_stale >= 1, "the %s backup's copy was ignored: older replica "
		   "version (%" PRIu64 " stale copies)", stop ? "resumed" : "restarted",
		   res.copies_stale);
	ok(1, "%s: %" PRIu64 " acknowledged, %" PRIu64 " recovered", prov, r.acked, chk.next);
	rt_stop(&cl);
	return tap_exit();
}
