/*
 * tests/integration/crash_recover.c — CRASH TEST over a real provider (argv[1]: tcp, sockets,
 * shm). Three local twd backups with small buffers (segments roll over every few hundred
 * objects). Each round: a crash_primary process appends numbered objects to a fresh log and
 * reports every acknowledgement with a write(2) of "acked N"; after a random number of acks
 * (no sleeps: we read its lines) it gets SIGKILL (on shm it exits 137 from its progress thread
 * outside any fabric call: rt_crasher_kill, recover_util.h); whatever ack lines it wrote before
 * dying are drained from the pipe. Then tw_recover() must return objects 0, 1, 2 ... with intact payloads,
 * at least every acknowledged one (more only when whole and verified), and a second recovery
 * must return exactly the same number of objects.
 *
 * Rounds: 3 (CI); TW_LONG=1: 50. TW_SEED replays a run. Prints the totals
 * (kills, acknowledged, recovered, lost).
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
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define SEG "65536"
#define MAX_ACKS 4000

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char prim[1024], err[512];
	struct rt_cluster cl;
	unsigned rounds = tap_long_mode() ? 50 : 3;
	uint64_t tot_acked = 0, tot_rec = 0, tot_lost = 0, kills = 0;

	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	rng = tap_seed() | 1;
	tap_plan((int)rounds * 3);
	rt_start(&cl, prov, 3, "64K", "64");
	tap_diag("provider %s, backups %s %s %s", prov, cl.addr[0], cl.addr[1], cl.addr[2]);

	for (unsigned round = 0; round < rounds; round++) {
		uint64_t log_id = 0x5000 + round, target = rnd() % MAX_ACKS, acked;
		struct tw_recover_config rcfg;
		struct tw_recover_result res, res2;
		struct rt_check chk, chk2;
		struct rt_crasher k;
		int rc, rc2;

		rt_crasher_start(&k, prim, &cl, log_id, SEG);
		while (k.acked < target)
			rt_crasher_ack(&k, round);
		rt_crasher_kill(&k, &cl); /* the acks it wrote before dying count */
		acked = k.acked;
		kills++;

		tlog_recover_config(&rcfg, prov, cl.addrs, 3, log_id);
		memset(&chk, 0, sizeof(chk));
		rc = tw_recover(&rcfg, rt_check_cb, &chk, &res, err, sizeof(err));
		ok(rc == 0 && chk.bad == 0 && chk.next >= acked && chk.next == res.entries,
		   "round %u: killed after %" PRIu64 " acks (target %" PRIu64 "): recovered %"
		   PRIu64 " objects in order from %" PRIu64 " segments, epoch %" PRIu64 "%s%s%s",
		   round, acked, target, chk.next, res.segments, res.epoch, rc ? ": " : "",
		   rc ? err : "", chk.bad ? chk.first_bad : "");
		ok(res.copies_corrupt == 0 && res.segments_missing == 0,
		   "round %u: no copy skipped as corrupt (%" PRIu64 "), none missing (%" PRIu64 ")",
		   round, res.copies_corrupt, res.segments_missing);

		memset(&chk2, 0, sizeof(chk2));
		rc2 = tw_recover(&rcfg, rt_check_cb, &chk2, &res2, err, sizeof(err));
		ok(rc2 == 0 && chk2.bad == 0 && chk2.next == chk.next && res2.epoch > res.epoch,
		   "round %u: a second recovery gives the same %" PRIu64 " objects (got %" PRIu64
		   ", epoch %" PRIu64 ")%s%s", round, chk.next, chk2.next, res2.epoch,
		   rc2 ? ": " : "", rc2 ? err : "");
		tot_acked += acked;
		tot_rec += chk.next;
		if (chk.next < acked)
			tot_lost += acked - chk.next;
		if (round == 0)
			tap_diag("round 0 timings: fence %.2f ms, list %.2f ms, fetch %.2f ms, "
				 "record %.2f ms, total %.2f ms",
				 res.phase_ns[TW_RECOVER_PHASE_FENCE] / 1e6,
				 res.phase_ns[TW_RECOVER_PHASE_LIST] / 1e6,
				 res.phase_ns[TW_RECOVER_PHASE_FETCH] / 1e6,
				 res.phase_ns[TW_RECOVER_PHASE_RECORD] / 1e6,
				 res.phase_ns[TW_RECOVER_PHASE_TOTAL] / 1e6);
	}
	tap_diag("%s: kills %" PRIu64 ", acknowledged %" PRIu64 ", recovered %" PRIu64
		 " (unacknowledged but complete: %" PRIu64 "), lost %" PRIu64, prov, kills,
		 tot_acked, tot_rec, tot_rec - (tot_acked - tot_lost), tot_lost);
	rt_stop(&cl);
	return tap_exit();
}
