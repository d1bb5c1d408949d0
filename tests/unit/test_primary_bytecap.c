/*
 * tests/unit/test_primary_bytecap.c — the byte cap of a write (tw_primary_config.max_batch_bytes,
 * docs/primary.md, "Batching and pipelining"), over the in-memory fabric with three in-process
 * backups, in both modes:
 *   - the defaults (max_batch 1024, max_batch_bytes TW_PRIMARY_DEFAULT_BATCH_BYTES), and a cap
 *     of 0 refused with a message that names it;
 *   - a stream of 100-byte appends with a cap of four entries' bytes: no write holds more than
 *     four entries (max_batch_seen), though max_batch allows 64; without the cap, caller-driven
 *     appends make writes of more than four;
 *   - a cap smaller than one entry: every write holds one entry, and every entry is
 *     acknowledged and reads back;
 *   - bytes make a batch due before the count does (async): behind a write in flight, four
 *     entries that reach the cap wait as a whole batch and go as one write.
 * Meant for TSan too (.ci/run).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "primary/primary_engine.h"
#include "tap.h"
#include "tbackup.h"
#include "tfab.h"
#include "tgate.h"
#include "tlog.h"

#define SEG (64u * 1024u)
#define LEN 100u
#define CAP4 (4u * (TW_ENTRY_HDR_SIZE + LEN)) /* four entries of LEN bytes */

static const char *const mode_name[] = { "sync", "async" };

static void fill(uint8_t *buf, uint64_t seq)
{
	for (uint32_t i = 0; i < LEN; i++)
		buf[i] = (uint8_t)(seq * 31 + i);
	memcpy(buf, &seq, sizeof(seq));
}

/* ------------------------------------------------------------------ configuration */

static void test_config(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char err[1024] = "";

	tw_primary_config_init(&cfg);
	is_int((int)cfg.max_batch, 1024, "config: max_batch defaults to 1024");
	ok(cfg.max_batch_bytes == TW_PRIMARY_DEFAULT_BATCH_BYTES,
	   "config: max_batch_bytes defaults to TW_PRIMARY_DEFAULT_BATCH_BYTES (%zu)",
	   cfg.max_batch_bytes);
	tlog_mem_config(&tc, &cfg, addrs, 600, SEG, TW_PRIMARY_SYNC);
	cfg.max_batch_bytes = 0;
	is_int(tw_primary_open(&tc, &cfg, &p, err, sizeof(err)), -EINVAL,
	       "config: max_batch_bytes 0 refused");
	ok(!p && strstr(err, "max_batch_bytes must be > 0"), "config: the message names it (%s)",
	   err);
}

/* ------------------------------------------------------------------ a stream under the cap */

/* n appends of LEN bytes without a wait in between, then a flush: the stats after it. */
static bool stream(struct tw_primary *p, unsigned n, const char *what,
		   struct tw_primary_stats *st)
{
	struct tlog_acks_mt x = { 0 };
	uint8_t buf[LEN];
	uint64_t lsns[2000];
	int bad = 0, badread = 0;

	for (unsigned i = 0; i < n && i < 2000; i++) {
		fill(buf, i);
		if (tw_primary_append_async(p, buf, LEN, tlog_ack_mt_cb, &x, &lsns[i]) != 0)
			bad++;
	}
	is_int(bad, 0, "%s: %u appends", what, n);
	is_int(tw_primary_flush(p), 0, "%s: flush", what);
	ok(atomic_load(&x.n) == n && x.a.ok == n && !x.a.out_of_order,
	   "%s: every append acknowledged once, in order (%" PRIu64 " of %u)", what,
	   (uint64_t)atomic_load(&x.n), n);
	for (unsigned i = 0; i < n && i < 2000; i++) {
		const void *data;
		uint32_t got;

		fill(buf, i);
		if (tw_primary_read(p, lsns[i], &data, &got) != 0 || got != LEN ||
		    memcmp(data, buf, LEN))
			badread++;
	}
	is_int(badread, 0, "%s: every entry reads back", what);
	tw_primary_get_stats(p, st);
	return !bad && !badread;
}

/* A log on the test's backups with max_batch (0: the default) and the byte cap `cap`, `n`
 * entries streamed into it (stream above): the log, still open, or NULL (said). */
static struct tw_primary *open_streamed(const char **addrs, uint64_t log,
					enum tw_primary_mode mode, unsigned max_batch, size_t cap,
					unsigned n, const char *what, struct tw_primary_stats *st)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;

	tlog_mem_config(&tc, &cfg, addrs, log, SEG, mode);
	if (max_batch)
		cfg.max_batch = max_batch;
	if (cap)
		cfg.max_batch_bytes = cap;
	p = tlog_open(&tc, &cfg, "%s", what);
	if (p)
		stream(p, n, what, st);
	return p;
}

/*
 * A cap of four entries' bytes with max_batch 64: no write holds more than four entries, and a
 * write's bytes stay within the cap (plus the checksum entry). Caller-driven appends without
 * the cap make writes of more than four entries (whole batches under load, docs/primary.md),
 * so the bound is the cap's doing; async ones batch as the progress thread's timing allows,
 * so they are only checked against the bound.
 */
static void test_stream(const char **addrs, enum tw_primary_mode mode)
{
	const char *m = mode_name[mode];
	struct tw_primary_stats st;
	struct tw_primary *p;
	char what[64];

	snprintf(what, sizeof(what), "cap %s", m);
	p = open_streamed(addrs, 610 + mode, mode, 64, CAP4, 2000, what, &st);
	if (!p)
		return;
	ok(st.max_batch_seen >= 1 && st.max_batch_seen <= 4,
	   "%s: no write over four entries (largest %" PRIu64 ", max_batch 64)", what,
	   st.max_batch_seen);
	ok(st.writes >= 2000 / 4 && st.write_bytes <= st.writes * (CAP4 + TW_CKSUM_ENTRY_SIZE),
	   "%s: %" PRIu64 " writes, %" PRIu64 " bytes each on average (cap %u)", what, st.writes,
	   st.writes ? st.write_bytes / st.writes : 0, CAP4);
	is_int(tw_primary_close(p), 0, "%s: close", what);

	if (mode != TW_PRIMARY_SYNC)
		return;
	snprintf(what, sizeof(what), "no cap %s", m);
	p = open_streamed(addrs, 620, mode, 64, 0, 2000, what, &st);
	if (!p)
		return;
	ok(st.max_batch_seen > 4, "%s: writes of more than four entries (largest %" PRIu64 ")",
	   what, st.max_batch_seen);
	is_int(tw_primary_close(p), 0, "%s: close", what);
}

/* A cap below one entry's bytes: each entry is a write of its own (documented, not refused). */
static void test_tiny(const char **addrs, enum tw_primary_mode mode)
{
	const char *m = mode_name[mode];
	struct tw_primary_stats st;
	struct tw_primary *p;
	char what[64];

	snprintf(what, sizeof(what), "tiny cap %s", m);
	p = open_streamed(addrs, 630 + mode, mode, 0, 1, 500, what, &st);
	if (!p)
		return;
	ok(st.max_batch_seen == 1 && st.writes == st.appends && st.appends == 500,
	   "%s: one entry per write (%" PRIu64 " writes of %" PRIu64 " appends, largest %" PRIu64
	   ")", what, st.writes, st.appends, st.max_batch_seen);
	is_int(tw_primary_close(p), 0, "%s: close", what);
}

/* ------------------------------------------------------------------ bytes make a batch due */

/* The gate in the completion path (tests/lib/tgate.h). */
static struct tgate gate = TGATE_INIT;

/*
 * Async mode, max_batch 64 and a cap of four entries' bytes: the first entry goes alone (nothing
 * in flight) and its completion is held at the gate; four more wait behind it, and with them a
 * whole batch is there by bytes (batch_full, tw__primary_batch_due) though the count is far
 * from max_batch; once the gate opens they go as one write.
 */
static void test_due_by_bytes(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tlog_acks_mt x = { 0 };
	uint8_t buf[LEN];
	int bad = 0;

	tlog_mem_config(&tc, &cfg, addrs, 640, SEG, TW_PRIMARY_ASYNC);
	cfg.max_batch = 64;
	cfg.max_batch_bytes = CAP4;
	p = tlog_open(&tc, &cfg, "due by bytes");
	if (!p)
		return;
	tgate_close_on(&gate, p);
	fill(buf, 0);
	is_int(tw_primary_append_async(p, buf, LEN, tlog_ack_mt_cb, &x, NULL), 0, "due by bytes: A");
	ok(tgate_wait_seen(&gate, 10), "due by bytes: A is in flight (held at the gate)");
	for (uint64_t i = 1; i <= 3; i++) {
		fill(buf, i);
		bad += tw_primary_append_async(p, buf, LEN, tlog_ack_mt_cb, &x, NULL) != 0;
	}
	ok(!bad && pending_entries(p) == 3 && !batch_full(p) && !tw__primary_batch_due(p),
	   "due by bytes: three entries behind a write in flight are not a batch (%" PRIu64
	   " bytes of %u)", pending_bytes(p), CAP4);
	fill(buf, 4);
	bad += tw_primary_append_async(p, buf, LEN, tlog_ack_mt_cb, &x, NULL) != 0;
	ok(!bad && pending_entries(p) == 4 && pending_bytes(p) == CAP4 && batch_full(p) &&
		   tw__primary_batch_due(p),
	   "due by bytes: the fourth reaches the cap: a whole batch (%" PRIu64 " entries, %" PRIu64
	   " bytes)", pending_entries(p), pending_bytes(p));
	tgate_open(&gate);
	is_int(tw_primary_flush(p), 0, "due by bytes: flush");
	ok(PLD(p->slot_head) == 2 && p->slots[1].nrec == 4,
	   "due by bytes: the four went as one write (%" PRIu64 " writes, the second of %" PRIu64
	   " entries)", (uint64_t)PLD(p->slot_head), p->slots[1].nrec);
	ok(atomic_load(&x.n) == 5 && !x.a.errors && !x.a.out_of_order,
	   "due by bytes: 5 acknowledged in order");
	is_int(tw_primary_close(p), 0, "due by bytes: close");
}

int main(void)
{
	struct tbackups cl;

	tbackups_start(&cl, "test_primary_bytecap", 3, "mem", 16, SEG);
	test_config(cl.addrs);
	test_stream(cl.addrs, TW_PRIMARY_SYNC);
	test_stream(cl.addrs, TW_PRIMARY_ASYNC);
	test_tiny(cl.addrs, TW_PRIMARY_SYNC);
	test_tiny(cl.addrs, TW_PRIMARY_ASYNC);
	test_due_by_bytes(cl.addrs);
	tbackups_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
