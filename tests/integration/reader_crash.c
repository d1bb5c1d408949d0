/*
 * tests/integration/reader_crash.c — CRASH TEST of readers over a real provider (argv[1]: tcp,
 * sockets, shm), three local twd backups with 64 KiB buffers. Each round, on a fresh log:
 *
 *   - a crash_primary process appends numbered objects as fast as it can and reports every
 *     acknowledgement ("acked N"); a reader in this process follows it, reading what is
 *     readable between the ack lines;
 *   - after a random number of acknowledgements the primary gets SIGKILL (on shm it exits from
 *     its progress thread outside any fabric call, as in crash_recover); the reader reads what
 *     is still readable: every object it returned must be one the primary acknowledged (it
 *     never sees one that was not), objects 0, 1, 2 ... in order;
 *   - a takeover in this process (tw_primary_takeover) recovers the log: everything the reader
 *     returned must be in the recovery (the recovered objects are 0 .. n-1, n >= what it read);
 *   - the new owner appends 40 more objects, numbered on from the recovered ones: the same
 *     reader, never reopened, returns the rest of the recovered objects and the new ones, in
 *     order (it follows the log across the takeover).
 *
 * Rounds: 20; TW_LONG=1: 100. TW_SEED replays a run.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/reader.h>

#include "proc.h"
#include "recover_util.h"
#include "rng.h"
#include "tap.h"
#include "tlog.h"

#define SEG "65536"
#define MAX_ACKS 2500
#define MORE 40

struct rd {
	struct tw_reader *r;
	uint64_t next;  /* objects returned so far = the next expected */
	uint64_t bad;
	char why[300];
};

/* Read what comes within timeout_ms (0: only what is readable now); stop at -ETIMEDOUT. */
static int drain(struct rd *d, int timeout_ms, uint64_t limit)
{
	while (d->next < limit) {
		struct tw_reader_entry e;
		uint8_t want[RT_OBJ];
		int rc = tw_reader_next(d->r, &e, timeout_ms);

		if (rc == -ETIMEDOUT)
			return 0;
		if (rc) {
			snprintf(d->why, sizeof(d->why), "reader: %s: %.200s", tw_strerror(rc),
				 tw_reader_errmsg(d->r));
			return rc;
		}
		rt_fill(want, d->next);
		if (e.len != RT_OBJ || memcmp(e.data, want, RT_OBJ) != 0) {
			if (!d->bad)
				snprintf(d->why, sizeof(d->why), "entry %" PRIu64 " at lsn %016" PRIx64
					 " is not that object", d->next, e.lsn);
			d->bad++;
		}
		d->next++;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char prim[1024], err[512];
	struct rt_cluster cl;
	unsigned rounds = tap_long_mode() ? 100 : 20;
	uint64_t tot_read = 0, tot_acked = 0, tot_rec = 0;

	if (proc_find_tool("tests/integration/crash_primary", prim, sizeof(prim)) != 0)
		tap_plan_skip_all("crash_primary not built");
	rng_state = tap_seed();
	tap_plan((int)rounds * 3);
	rt_start(&cl, prov, 3, "64K", "256");
	tap_diag("provider %s, backups %s %s %s", prov, cl.addr[0], cl.addr[1], cl.addr[2]);

	for (unsigned round = 0; round < rounds; round++) {
		uint64_t log_id = 0x6000 + round, target = rnd() % MAX_ACKS, acked;
		struct tw_reader_config rcfg;
		struct tw_ctx_config tc;
		struct tw_primary_config pcfg;
		struct tw_recover_result res;
		struct tw_primary *p2 = NULL;
		struct rt_check chk;
		struct rd d;
		struct rt_crasher k;
		uint64_t read_at_kill;
		int rc;

		rt_crasher_start(&k, prim, &cl, log_id, SEG);

		memset(&d, 0, sizeof(d));
		tw_reader_config_init(&rcfg);
		TLOG_CONFIG_LOG(&rcfg, prov, cl.addrs, 3, log_id);
		rcfg.poll_ms = 200;
		rc = tw_reader_open(&rcfg, &d.r, err, sizeof(err));
		TAP_REQUIRE(rc == 0, "round %u: reader open: %s", round, err);

		while (k.acked < target) {
			rt_crasher_ack(&k, round);
			if (rnd() % 64 == 0)
				(void)drain(&d, 0, UINT64_MAX); /* what is readable right now */
		}
		rt_crasher_kill(&k, &cl);
		acked = k.acked;
		/* What the backups were told before the kill is readable; nothing more. */
		rc = drain(&d, 300, UINT64_MAX);
		read_at_kill = d.next;
		ok(rc == 0 && d.bad == 0 && d.next <= acked, "round %u: killed after %" PRIu64
		   " acks: the reader returned objects 0..%" PRIu64 " in order, none unacknowledged"
		   " %s", round, acked, d.next, d.why);

		tlog_transport(&tc, prov, cl.addrs, 3);
		tw_primary_config_init(&pcfg);
		pcfg.log_id = log_id;
		pcfg.segment_size = 65536;
		memset(&chk, 0, sizeof(chk));
		rc = tw_primary_takeover(&tc, &pcfg, rt_check_cb, &chk, &res, &p2, err,
					 sizeof(err));
		ok(rc == 0 && chk.bad == 0 && chk.next >= acked && chk.next >= read_at_kill,
		   "round %u: the takeover recovered %" PRIu64 " objects: every acknowledged one (%"
		   PRIu64 ") and every one the reader returned (%" PRIu64 ") %s%s", round, chk.next,
		   acked, read_at_kill, rc ? err : "", chk.bad ? chk.first_bad : "");
		if (rc == 0) {
			uint8_t obj[RT_OBJ];
			uint64_t lsn;

			for (uint64_t i = 0; i < MORE && rc == 0; i++) {
				rt_fill(obj, chk.next + i);
				rc = tw_primary_append(p2, obj, RT_OBJ, &lsn);
			}
		}
		if (rc == 0)
			rc = drain(&d, 10000, chk.next + MORE);
		ok(rc == 0 && d.bad == 0 && d.next == chk.next + MORE, "round %u: the reader went on "
		   "across the takeover (epoch %" PRIu64 "): objects up to %" PRIu64 " of %" PRIu64
		   " %s", round, res.epoch, d.next, chk.next + MORE, d.why);
		tw_primary_close(p2);
		tw_reader_close(d.r);
		tot_read += read_at_kill;
		tot_acked += acked;
		tot_rec += chk.next;
	}
	tap_diag("%s: %u kills; acknowledged %" PRIu64 ", read before the takeover %" PRIu64
		 ", recovered %" PRIu64, prov, rounds, tot_acked, tot_read, tot_rec);
	rt_stop(&cl);
	return tap_exit();
}
