/*
 * tests/integration/shm_zombie.c — a fenced primary that wakes up on shm's CMA fast path
 * (TW_FAB_SHM_FAST=on, set here for every process; argv[1]: shm). There the writer's own
 * process_vm_writev places the bytes and the backup checks no key, so only a fence that moves
 * the log's buffers away from the addresses the writer knows stops it (docs/fabric.md, "Passive
 * shm backups").
 *
 * Three twd's with one buffer each (--buffers 1 --max-buffers 1), so a log opened after another
 * log's segment was freed reuses that very buffer. Each round:
 *   - writer A (crash_primary, another process) appends numbered objects to log LA in bursts;
 *   - after a number of its acknowledgements (varied per round) A is stopped (SIGSTOP);
 *   - tw_recover(LA) fences it on every backup, takes the log over and recovers it (the open
 *     copies are closed at the recovered length, flushed and their buffers freed);
 *   - log LB (a primary in this process) opens a segment, which takes the freed buffer on every
 *     backup, and appends K objects, each acknowledged;
 *   - A is resumed (SIGCONT) and runs until it gives up (its writes must fail) or finishes.
 * Then, checked byte for byte (rt_check_cb compares every entry with the object it must be):
 *   - every object acknowledged to A is in LA's recovery (A got no acknowledgement for a write
 *     made after its fence);
 *   - LB's recovery returns exactly its K acknowledged objects, none damaged.
 * SHM_ZOMBIE_ROUNDS (default 20) runs more rounds by hand.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "child.h"
#include "fabric/ofi_int.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

/* Segment = buffer = 1 MiB; A appends at most 6000 objects of RT_OBJ bytes (A_COUNT), LB 3000:
 * each stays within one segment, so each log holds one buffer per backup. */
#define SEG "1048576"
#define A_COUNT "6000"
#define B_COUNT 3000
#define LA0 0x5a00000ull
#define LB0 0x5b00000ull

/*
 * Whether the shm region lock of the twd at `addr` ("fi_shm://NAME") is held now. libfabric
 * 1.17's writer holds the target's lock for the whole copy of a fast-path write; a writer
 * stopped inside one freezes that twd's progress until it runs again (a stopped holder is not
 * dead: docs/fabric.md, "A writer killed holding a region lock"), so no fence can reach it.
 * The layout is 1.17's (fabric/ofi_int.h); false when it cannot be read.
 */
static bool region_locked(const char *addr)
{
	const char *n = strstr(addr, "://");
	char name[256];
	bool held;
	void *p;
	int fd;

	snprintf(name, sizeof(name), "/%s", n ? n + 3 : addr);
	fd = shm_open(name, O_RDONLY, 0);
	if (fd < 0)
		return false;
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return false;
	held = *(const volatile int *)((const char *)p + TW_SMR_V117_OFF_LOCK) !=
	       tw__shm_spin_free_value();
	munmap(p, 4096);
	return held;
}

/* SIGSTOP A and wait until every thread of it has stopped (child_pause): a look at the region
 * locks made right after kill() alone can see them free while A, still running on the other
 * CPU, takes one and is then stopped holding it (the hang this test had in CI: the twd wedged,
 * recovery and LB's open waited on it). */
static void stop_a(struct proc *a, unsigned round)
{
	int rc = child_pause(a);

	TAP_REQUIRE(rc == 0 || rc == -ESRCH, "round %u: SIGSTOP A and wait for it to stop: %s",
		    round, strerror(-rc));
}

static uint64_t acked_of(const char *line)
{
	return strtoull(line + strlen("acked "), NULL, 10) + 1;
}

/* LB: open (retried while the backups' only buffer still waits for LA's flush), K appends. */
static struct tw_primary *open_lb(const struct rt_cluster *cl, uint64_t log, unsigned round)
{
	struct tw_ctx_config tc;
	struct tw_primary_config pc;
	struct tw_primary *p = NULL;
	char err[1024];
	int rc = -1;

	tlog_transport(&tc, cl->prov, cl->addrs, 3);
	tw_primary_config_init(&pc);
	pc.log_id = log;
	pc.segment_size = strtoull(SEG, NULL, 0);
	/* Refused (RESOURCE_EXHAUSTED) until LA's closed copy is flushed and its buffer free:
	 * each try is a round of RPCs, the flush takes milliseconds. */
	for (int tries = 0; tries < 2000 && rc != 0; tries++)
		rc = tw_primary_open(&tc, &pc, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "round %u: LB open: %s: %s", round, tw_strerror(rc), err);
	return p;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "shm";
	const char *env_rounds = getenv("SHM_ZOMBIE_ROUNDS");
	unsigned rounds = env_rounds ? (unsigned)strtoul(env_rounds, NULL, 0) :
			  tap_sanitizer() ? 10 : 20;
	char *const extra[] = { (char *)"--max-buffers", (char *)"1", NULL };
	char prim[512], logid[32], line[256];
	char *const penv[] = { (char *)"TW_FAB_SHM_FAST=on", (char *)"CRASH_OP_TIMEOUT_MS=500",
			       (char *)"CRASH_BURST=400", (char *)"CRASH_PAUSE_US=5000", NULL };
	unsigned bad_a = 0, bad_b = 0, late_acks = 0, a_failed = 0, zombies = 0, restops = 0;
	uint64_t seed = tap_seed();
	struct rt_cluster cl;

	if (strcmp(prov, "shm") != 0) {
		printf("1..0 # SKIP the CMA fast path is shm's only\n");
		return 0;
	}
	if (rounds == 0)
		rounds = 1;
	/* Before any thread: this process's LB and recoveries, the twd's and A all take the
	 * fast path where it holds (docs/fabric.md). */
	setenv("TW_FAB_SHM_FAST", "on", 1);
	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	tap_plan(5);
	rt_start_with(&cl, NULL, prov, 3, SEG, "1", extra);

	for (unsigned r = 0; r < rounds; r++) {
		uint64_t la = LA0 + r, lb = LB0 + r, a_acked = 0, stop_at;
		bool a_done = false, a_done_before;
		char *argv_a[] = { prim, (char *)prov, logid, (char *)SEG, (char *)A_COUNT,
				   (char *)cl.addr[0], (char *)cl.addr[1], (char *)cl.addr[2], NULL };
		struct tw_recover_config rcfg;
		struct tw_recover_result res;
		struct rt_check ca, cb;
		struct tw_primary *pb;
		uint8_t obj[RT_OBJ];
		struct proc *a;
		char err[1024];
		int rc, pid;

		/* Stop A in the middle of one of its first bursts of 400 appends: after 20 .. 200
		 * of that burst's acknowledgements, while it still posts the rest. */
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		stop_at = 400 * ((seed >> 33) % 5) + 20 + (seed >> 40) % 180;
		snprintf(logid, sizeof(logid), "0x%" PRIx64, la);
		a = proc_spawn(argv_a, penv);
		TAP_REQUIRE(a, "round %u: spawn A", r);
		rc = proc_wait_line(a, "ready", line, sizeof(line), 20000);
		TAP_REQUIRE(rc >= 0, "round %u: A ready: %s", r, strerror(-rc));
		while (a_acked < stop_at && !a_done) {
			rc = proc_wait_line(a, NULL, line, sizeof(line), 20000);
			TAP_REQUIRE(rc >= 0, "round %u: A's ack after %" PRIu64 ": %s", r, a_acked,
				    strerror(-rc));
			if (strncmp(line, "acked ", 6) == 0)
				a_acked = acked_of(line);
			a_done = strcmp(line, "done") == 0;
		}
		stop_a(a, r);
		/* Stopped inside a write, A holds a twd's region lock, and that twd can be neither
		 * fenced nor used until A runs (libfabric 1.17): let it run to its next line and
		 * stop it again (counted). A twd's own progress holds its lock for microseconds,
		 * which costs at most a needless restop. */
		for (unsigned t = 0; !a_done; t++) {
			bool held = false;

			for (unsigned i = 0; i < 3; i++)
				held |= region_locked(cl.addr[i]);
			if (!held)
				break;
			TAP_REQUIRE(t < 200, "round %u: A stopped holding a twd's region lock %u "
				    "times in a row", r, t);
			restops++;
			proc_kill(a, SIGCONT);
			rc = proc_wait_line(a, NULL, line, sizeof(line), 20000);
			stop_a(a, r);
			if (rc >= 0 && strncmp(line, "acked ", 6) == 0)
				a_acked = acked_of(line);
			a_done = rc >= 0 && strcmp(line, "done") == 0;
		}
		a_done_before = a_done;
		/* A loaded machine may read A's lines so late that it finished first: then this
		 * round has no zombie (counted, diagnosed). */
		if (a_done)
			tap_diag("round %u: A finished before it could be stopped", r);

		/* Fence A and take LA over. */
		tlog_recover_config(&rcfg, prov, cl.addrs, 3, la);
		memset(&ca, 0, sizeof(ca));
		rc = tw_recover(&rcfg, rt_check_cb, &ca, &res, err, sizeof(err));
		TAP_REQUIRE(rc == 0, "round %u: recover LA: %s: %s", r, tw_strerror(rc), err);

		/* LB takes the freed buffer on every backup (one each) and fills part of it. */
		pb = open_lb(&cl, lb, r);
		for (uint64_t i = 0; i < B_COUNT; i++) {
			rt_fill(obj, i);
			rc = tw_primary_append_async(pb, obj, RT_OBJ, NULL, NULL, NULL);
			TAP_REQUIRE(rc == 0, "round %u: LB append %" PRIu64 ": %s", r, i,
				    tw_strerror(rc));
		}
		rc = tw_primary_flush(pb);
		TAP_REQUIRE(rc == 0, "round %u: LB flush: %s (%s)", r, tw_strerror(rc),
			    tw_primary_errmsg(pb));

		/* Wake the zombie and take every acknowledgement it reports until it exits. */
		proc_kill(a, SIGCONT);
		while (proc_wait_line(a, NULL, line, sizeof(line), 30000) >= 0) {
			uint64_t n;

			if (strcmp(line, "done") == 0)
				a_done = true; /* after the stop: it was still writing then */
			if (strncmp(line, "acked ", 6) != 0)
				continue;
			n = acked_of(line);
			if (n > a_acked)
				a_acked = n;
		}
		rc = proc_wait(a, 30000);
		/* A zombie only if it had writes left at its fence: a loaded machine can read A's
		 * lines so late that A had appended, replicated and flushed all A_COUNT objects
		 * before it was stopped (LA's recovery then holds them all), and such a writer
		 * rightly exits 0. */
		if (!a_done_before && ca.next < strtoull(A_COUNT, NULL, 10)) {
			zombies++;
			a_failed += rc != 0;
		} else if (!a_done_before) {
			tap_diag("round %u: A had written all %s objects before it was stopped", r,
				 A_COUNT);
		}
		pid = (int)proc_pid(a);
		proc_free(a);
		rt_shm_cleanup(pid);
		if (a_acked > ca.next) {
			if (!late_acks)
				tap_diag("round %u: A was acknowledged %" PRIu64 " objects; LA's "
					 "recovery holds %" PRIu64, r, a_acked, ca.next);
			late_acks += (unsigned)(a_acked - ca.next);
		}
		if (ca.bad || a_acked > ca.next)
			bad_a++;

		/* LB, byte for byte through recovery. */
		tlog_recover_config(&rcfg, prov, cl.addrs, 3, lb);
		memset(&cb, 0, sizeof(cb));
		rc = tw_recover(&rcfg, rt_check_cb, &cb, &res, err, sizeof(err));
		if (rc != 0 || cb.bad || cb.next != B_COUNT) {
			if (!bad_b)
				tap_diag("round %u: LB's recovery: %s, %" PRIu64 " of %d objects, %"
					 PRIu64 " bad%s%s%s%s", r, rc ? tw_strerror(rc) : "ok",
					 cb.next, B_COUNT, cb.bad, cb.bad ? ": " : "",
					 cb.bad ? cb.first_bad : "", rc ? ": " : "", rc ? err : "");
			bad_b++;
		}
		tw_primary_close(pb); /* fenced by that recovery: its error is expected */
	}
	tap_diag("%u stops of A landed inside a write (a twd's region lock held) and were made "
		 "again after its next line", restops);
	is_int(bad_b, 0, "%u rounds: no acknowledged object of LB damaged or lost (byte for byte "
	       "through recovery) after the fenced writer of LA resumed", rounds);
	is_int(bad_a, 0, "%u rounds: every object acknowledged to LA's writer is in LA's recovery",
	       rounds);
	is_int(late_acks, 0, "no acknowledgement for a write made after the fence");
	ok(zombies >= (rounds + 1) / 2, "A was stopped before it finished in %u of %u rounds",
	   zombies, rounds);
	is_int(a_failed, zombies, "the resumed writer failed in every such round (its writes after "
	       "the fence never complete)");
	rt_stop(&cl);
	return tap_exit();
}
