/*
 * tests/unit/test_primary.c — the primary over the in-memory fabric ("mem") with in-process
 * backups (tw_backup_* on threads): sync and async appends, batching, in-order acks, rollover
 * across many segments, reading back, too few backups, refused opens, lost backups, and a
 * sync-mode log driven from the caller's epoll loop on the mem fabric's descriptor.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/primary.h>

#include "primary/primary_int.h"
#include "tap.h"
#include "tbackup.h"
#include "tfab.h"
#include "tlog.h"

#define SEG (64u * 1024u)

/* "mem" by default; $TW_PRIMARY_TEST_PROVIDER runs the same tests over a real provider (the
 * fault-injection tests then skip). */
static const char *prov = "mem";

static void cfg_for(struct tw_ctx_config *tc, struct tw_primary_config *cfg, const char **addrs,
		    size_t n, uint64_t log_id)
{
	tlog_primary_config(tc, cfg, prov, addrs, n, log_id);
	cfg->segment_size = SEG;
	cfg->open_retry_ms = 5000;
	tc->busy_poll = getenv("TW_PRIMARY_TEST_BUSY_POLL") != NULL;
}

static void fill(uint8_t *buf, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seq * 31 + i);
	if (len >= 8)
		memcpy(buf, &seq, 8);
}

/* Appends entry seq (100 bytes, fill's) asynchronously: tw_primary_append_async's answer. */
static int append_seq(struct tw_primary *p, uint64_t seq, tw_append_cb cb, void *arg,
		      uint64_t *lsn_out)
{
	uint8_t buf[100];

	fill(buf, 100, seq);
	return tw_primary_append_async(p, buf, 100, cb, arg, lsn_out);
}

static bool check_entry(struct tw_primary *p, uint64_t lsn, uint32_t len, uint64_t seq)
{
	uint8_t want[512];
	const void *data;
	uint32_t got_len;

	if (tw_primary_read(p, lsn, &data, &got_len) != 0 || got_len != len)
		return false;
	fill(want, len, seq);
	return memcmp(data, want, len) == 0;
}

/* ------------------------------------------------------------------ async ack recorder */

/* ------------------------------------------------------------------ tests */

static void test_sync(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_primary_stats st;
	uint64_t lsn[200], t0, t1;
	uint8_t buf[256];
	int bad = 0, badread = 0;

	cfg_for(&tc, &cfg, addrs, 3, 101);
	p = tlog_open(&tc, &cfg, "sync");
	if (!p)
		return;
	t0 = tw_now_ns();
	for (uint64_t i = 0; i < 200; i++) {
		uint32_t len = 1 + (uint32_t)(i * 13 % 200);

		fill(buf, len, i);
		if (tw_primary_append(p, buf, len, &lsn[i]) != 0)
			bad++;
		else if (tw_primary_acked_lsn(p) != lsn[i] + TW_ENTRY_HDR_SIZE + len)
			bad++;
	}
	t1 = tw_now_ns();
	is_int(bad, 0, "sync: 200 appends acknowledged, acked_lsn follows");
	for (uint64_t i = 0; i < 200; i++)
		if (!check_entry(p, lsn[i], 1 + (uint32_t)(i * 13 % 200), i))
			badread++;
	is_int(badread, 0, "sync: every entry reads back by lsn");
	{
		struct tw_pos pos = tw_lsn_to_pos(lsn[5]);
		const void *d;
		uint32_t l;

		ok(tw_primary_read_pos(p, pos, &d, &l) == 0 && l == 1 + 5 * 13 % 200,
		   "sync: read by struct tw_pos");
		pos.offset += 1;
		is_int(tw_primary_read_pos(p, pos, &d, &l), -TW_ENOTFOUND,
		       "sync: read at a non-entry offset -> ENOTFOUND");
	}
	tw_primary_get_stats(p, &st);
	is_int(st.writes, 200, "sync: one write per synchronous append");
	{
		/* One write at a time, each inside the loop: their times add up to less than it. */
		uint64_t sum = st.write_seal_post_ns + st.write_posting_ns + st.write_post_done_ns +
			       st.write_done_ack_ns;

		ok(st.writes_timed == 200 && st.write_posting_ns > 0 && sum <= t1 - t0,
		   "sync: 200 writes timed, %.1f us of the loop's %.1f us (posting %.1f)",
		   (double)sum / 1e3, (double)(t1 - t0) / 1e3, (double)st.write_posting_ns / 1e3);
	}
	ok(st.segments == 1 && st.roll_ns == 0, "sync: one segment, no time in rollovers (%llu ns)",
	   (unsigned long long)st.roll_ns);
	ok(tw_primary_replica_addr(p, 0) && tw_primary_replica_addr(p, 2) &&
		   !tw_primary_replica_addr(p, 3), "sync: 3 replica addresses");
	is_int(tw_primary_append(p, buf, 0, NULL), -EINVAL, "sync: zero-length append -> EINVAL");
	is_int(tw_primary_append(p, buf, SEG, NULL), -EINVAL, "sync: oversize append -> EINVAL");
	is_int(tw_primary_finish(p), 0, "sync: finish (final close RPC)");
	tw_primary_get_stats(p, &st);
	ok(st.rpc_open == 3 && st.rpc_close == 3, "sync: 3 opens and 3 closes counted (%llu, %llu)",
	   (unsigned long long)st.rpc_open, (unsigned long long)st.rpc_close);
	is_int(tw_primary_append(p, buf, 10, NULL), -TW_ECLOSED, "sync: append after finish -> ECLOSED");
	ok(check_entry(p, lsn[7], 1 + 7 * 13 % 200, 7), "sync: reads still work after finish");
	is_int(tw_primary_close(p), 0, "sync: close");
}

static void test_async_callbacks(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_primary_stats st;
	struct tlog_acks a = { 0 };
	const uint64_t n = 20000;
	int bad = 0;

	cfg_for(&tc, &cfg, addrs, 3, 102);
	cfg.max_inflight = 2;
	cfg.max_batch = 64;
	p = tlog_open(&tc, &cfg, "async cb (caller-driven)");
	if (!p)
		return;
	static uint64_t lsns[20000];
	uint64_t t0 = tw_now_ns(), t1;

	for (uint64_t i = 0; i < n; i++) {
		if (append_seq(p, i, tlog_ack_cb, &a, &lsns[i]) != 0)
			bad++;
	}
	is_int(bad, 0, "async cb: %llu appends accepted", (unsigned long long)n);
	is_int(tw_primary_flush(p), 0, "async cb: flush");
	t1 = tw_now_ns();
	is_int(a.n, n, "async cb: every callback ran");
	is_int(a.errors, 0, "async cb: no errors");
	is_int(a.out_of_order, 0, "async cb: acknowledged in log order");
	tw_primary_get_stats(p, &st);
	ok(st.writes < n, "async cb: batching: %llu writes for %llu appends (max batch %llu)",
	   (unsigned long long)st.writes, (unsigned long long)n,
	   (unsigned long long)st.max_batch_seen);
	ok(st.max_batch_seen <= 64, "async cb: no write carries more than max_batch entries");
	ok(st.inflight_peak >= 2, "async cb: pipelining: %llu writes in flight at peak",
	   (unsigned long long)st.inflight_peak);
	ok(st.segments > 20, "async cb: rolled over %llu segments", (unsigned long long)st.segments);
	/* The appending thread drives the log: every rollover ran inside the loop. */
	ok(st.roll_ns > 0 && st.roll_ns <= t1 - t0,
	   "async cb: %.1f ms in rollovers, of the loop's %.1f ms", (double)st.roll_ns / 1e6,
	   (double)(t1 - t0) / 1e6);
	bad = 0;
	for (uint64_t i = 0; i < n; i++)
		if (!check_entry(p, lsns[i], 100, i))
			bad++;
	is_int(bad, 0, "async cb: all %llu entries read back across %llu segments",
	       (unsigned long long)n, (unsigned long long)st.segments);
	ok(tw_lsn_to_pos(lsns[n - 1]).segment == st.segments - 1, "async cb: last lsn in the last segment");
	is_int(tw_primary_close(p), 0, "async cb: close");
}

/* Pre-opened segments: same results, one extra open and close per backup at the end. */
static void test_preopen(const char **addrs, enum tw_primary_mode mode)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_primary_stats st;
	struct tlog_acks a = { 0 };
	const uint64_t n = 12000;
	const char *m = mode == TW_PRIMARY_ASYNC ? "async" : "sync";
	int bad = 0;

	cfg_for(&tc, &cfg, addrs, 4, 120 + mode);
	cfg.preopen = true;
	cfg.mode = mode;
	p = tlog_open(&tc, &cfg, "preopen %s", m);
	if (!p)
		return;
	for (uint64_t i = 0; i < n; i++) {
		if (append_seq(p, i, tlog_ack_cb, &a, NULL) != 0)
			bad++;
	}
	is_int(tw_primary_flush(p), 0, "preopen %s: flush", m);
	ok(bad == 0 && a.n == n && !a.errors && !a.out_of_order,
	   "preopen %s: %llu appends acknowledged in order", m, (unsigned long long)a.n);
	is_int(tw_primary_finish(p), 0, "preopen %s: finish", m);
	tw_primary_get_stats(p, &st);
	ok(st.segments > 15, "preopen %s: %llu segments", m, (unsigned long long)st.segments);
	/* Every used segment opened and closed on 3 backups; the unused pre-opened one is given
	 * back (its granted buffers closed); refusals under buffer pressure add opens. */
	ok(st.rpc_open >= 3 * st.segments + 1 && st.rpc_close >= 3 * st.segments &&
		   st.rpc_close <= 3 * (st.segments + 1) &&
		   st.rpc_open - st.open_refused <= 3 * (st.segments + 1),
	   "preopen %s: %llu opens (%llu refused), %llu closes for %llu segments", m,
	   (unsigned long long)st.rpc_open, (unsigned long long)st.open_refused,
	   (unsigned long long)st.rpc_close, (unsigned long long)st.segments);
	is_int(tw_primary_close(p), 0, "preopen %s: close", m);
}

/* Caller-driven mode: callbacks append again (async, and sometimes blocking), across
 * rollovers. */
struct chain {
	struct tw_primary *p;
	uint64_t want, appended, acked, out_of_order, errors, blocking, last;
};

static void chain_cb(void *arg, int status, uint64_t lsn)
{
	struct chain *c = arg;
	uint8_t buf[100];

	if (status)
		c->errors++;
	if (c->acked && lsn <= c->last)
		c->out_of_order++;
	c->last = lsn;
	c->acked++;
	while (c->appended < c->want && c->appended < c->acked + c->blocking + 8) {
		if (c->appended % 50 == 7) {
			uint64_t l;

			fill(buf, 100, c->appended);
			c->appended++;
			if (tw_primary_append(c->p, buf, 100, &l) == 0)
				c->blocking++;
			else
				c->errors++;
		} else if (append_seq(c->p, c->appended++, chain_cb, c, NULL) != 0) {
			c->errors++;
		}
	}
}

static void test_nested(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct chain c = { 0 };

	cfg_for(&tc, &cfg, addrs, 3, 130);
	cfg.max_inflight = 3;
	c.p = tlog_open(&tc, &cfg, "nested");
	if (!c.p)
		return;
	c.want = 3000; /* ~5 segments */
	c.appended = 1;
	append_seq(c.p, 0, chain_cb, &c, NULL);
	for (int i = 0; i < 10000 && c.acked + c.blocking < c.want && !c.errors; i++)
		tw_primary_flush(c.p);
	is_int(c.errors, 0, "nested: callbacks appending again: no errors");
	is_int(c.acked + c.blocking, c.want, "nested: every append acknowledged (%llu blocking ones "
	       "from inside callbacks)", (unsigned long long)c.blocking);
	is_int(c.out_of_order, 0, "nested: in log order");
	is_int(tw_primary_close(c.p), 0, "nested: close");
}

/* Async mode: callbacks run on the progress thread; blocking calls from them fail at once
 * instead of waiting for themselves, appends either go in or fail with EAGAIN. */
struct reentry {
	struct tw_primary *p;
	uint64_t calls, deadlk, flush_deadlk, added, eagain, other;
};

static void reentry_cb(void *arg, int status, uint64_t lsn)
{
	struct reentry *r = arg;
	uint8_t buf[100];
	int rc;

	(void)status;
	(void)lsn;
	r->calls++;
	if (r->calls > 2000)
		return;
	fill(buf, 100, r->calls);
	if (tw_primary_append(r->p, buf, 100, NULL) == -EDEADLK)
		r->deadlk++;
	if (tw_primary_flush(r->p) == -EDEADLK)
		r->flush_deadlk++;
	rc = tw_primary_append_async(r->p, buf, 100, reentry_cb, r, NULL);
	if (rc == 0)
		r->added++;
	else if (rc == -EAGAIN)
		r->eagain++;
	else if (rc != -TW_ECLOSED) /* during close: no more appends */
		r->other++;
}

static void test_async_reentry(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct reentry r = { 0 };

	cfg_for(&tc, &cfg, addrs, 3, 131);
	cfg.mode = TW_PRIMARY_ASYNC;
	r.p = tlog_open(&tc, &cfg, "reentry");
	if (!r.p)
		return;
	for (int i = 0; i < 4; i++)
		append_seq(r.p, (uint64_t)i, reentry_cb, &r, NULL);
	/* The chain ends when the callbacks stop adding (2000 calls) or every one got EAGAIN. */
	for (int i = 0; i < 100; i++)
		tw_primary_flush(r.p);
	is_int(tw_primary_close(r.p), 0, "reentry: close (callbacks did not deadlock)");
	ok(r.deadlk > 0 && r.deadlk == r.flush_deadlk && r.deadlk == (r.calls > 2000 ? 2000 : r.calls),
	   "reentry: blocking append/flush from a callback -> EDEADLK (%llu)",
	   (unsigned long long)r.deadlk);
	ok(r.added > 0 && r.other == 0, "reentry: append_async from a callback: %llu in, %llu EAGAIN",
	   (unsigned long long)r.added, (unsigned long long)r.eagain);
}

/* The backup's test seam (backup/backup_int.h): hold its scanner before the next close's
 * scan, so that the close stays unanswered. */
void tw__bk_scan_hold(struct tw_backup *b, bool hold);

/* Close behind (docs/primary.md, "Segment rollover"): a full segment's close is answered while
 * the next segment fills. With every backup's close scan held, appends into the next segment are
 * acknowledged, the closing segment is not released, and a flush waits for the close. */
static void test_close_behind(struct tbackup *b, unsigned nb, const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_primary *p;
	uint64_t lsn = 0, in_next = 0;
	uint8_t buf[100];
	int bad = 0;

	cfg_for(&tc, &cfg, addrs, 3, 160);
	p = tlog_open(&tc, &cfg, "close behind");
	if (!p)
		return;
	for (unsigned i = 0; i < nb; i++)
		tw__bk_scan_hold(b[i].b, true);
	for (uint64_t i = 0; in_next < 50 && i < 100000; i++) {
		fill(buf, 100, i);
		if (tw_primary_append(p, buf, 100, &lsn) != 0) /* returns acknowledged */
			bad++;
		else if (tw_lsn_to_pos(lsn).segment == 1)
			in_next++;
	}
	tw_primary_get_stats(p, &st);
	ok(!bad && in_next == 50 && st.segments == 2 && st.rpc_close == 3,
	   "50 appends acknowledged in segment 1 while segment 0's 3 closes are unanswered "
	   "(%llu segments, %llu closes sent)", (unsigned long long)st.segments,
	   (unsigned long long)st.rpc_close);
	is_int(tw_primary_unload(p, 1), 0, "close behind: segment 0 is not released while closing");
	for (unsigned i = 0; i < nb; i++)
		tw__bk_scan_hold(b[i].b, false);
	is_int(tw_primary_flush(p), 0, "close behind: flush (it waits for the close)");
	is_int(tw_primary_unload(p, 1), 1, "close behind: then segment 0 is released");
	is_int(tw_primary_close(p), 0, "close behind: close");
}

/* Releasing closed segments from the primary's memory. */
static void test_release(const char **addrs, enum tw_primary_mode mode)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	const char *m = mode == TW_PRIMARY_ASYNC ? "async" : "sync";
	static uint64_t lsns[4000];
	uint8_t buf[100];
	const void *d;
	uint32_t len;
	int bad = 0;

	cfg_for(&tc, &cfg, addrs, 3, 140 + mode);
	cfg.mode = mode;
	p = tlog_open(&tc, &cfg, "release %s", m);
	if (!p)
		return;
	for (uint64_t i = 0; i < 4000; i++) { /* ~7 segments */
		if (append_seq(p, i, NULL, NULL, &lsns[i]) != 0)
			bad++;
	}
	is_int(tw_primary_flush(p), 0, "release %s: flush", m);
	is_int(tw_primary_unload(p, 3), 3, "release %s: segments 0..2 released", m);
	is_int(tw_primary_unload(p, 3), 0, "release %s: again: nothing more", m);
	is_int(tw_primary_read(p, lsns[0], &d, &len), -TW_ENOTFOUND, "release %s: entry 0 gone", m);
	ok(check_entry(p, lsns[3999], 100, 3999), "release %s: the last entry still reads", m);
	is_int(tw_primary_unload(p, 1000), (int)tw_lsn_to_pos(lsns[3999]).segment - 3,
	       "release %s: everything but the open segment", m);
	for (uint64_t i = 0; i < 500; i++) {
		fill(buf, 100, i);
		if (tw_primary_append(p, buf, 100, NULL) != 0)
			bad++;
	}
	is_int(bad, 0, "release %s: appends before and after work", m);
	is_int(tw_primary_close(p), 0, "release %s: close", m);
}

/* Async mode: progress thread, two app threads. */
struct app_arg {
	struct tw_primary *p;
	uint64_t n;
	unsigned id;
	struct tlog_acks a;
	int bad;
};

static void *app_main(void *arg)
{
	struct app_arg *x = arg;
	uint8_t buf[128];

	for (uint64_t i = 0; i < x->n; i++) {
		fill(buf, 100, i);
		buf[8] = (uint8_t)x->id;
		if (i % 1000 == 999) {
			if (tw_primary_append(x->p, buf, 100, NULL) != 0)
				x->bad++;
		} else if (tw_primary_append_async(x->p, buf, 100, tlog_ack_cb, &x->a, NULL) != 0) {
			x->bad++;
		}
	}
	return NULL;
}

static void test_async_thread(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_primary_stats st;
	struct app_arg x[2];
	pthread_t th[2];

	cfg_for(&tc, &cfg, addrs, 3, 103);
	cfg.mode = TW_PRIMARY_ASYNC;
	cfg.max_inflight = 4;
	cfg.max_batch = 128;
	p = tlog_open(&tc, &cfg, "async mode");
	if (!p)
		return;
	for (unsigned i = 0; i < 2; i++) {
		memset(&x[i], 0, sizeof(x[i]));
		x[i].p = p;
		x[i].n = 15000;
		x[i].id = i;
		pthread_create(&th[i], NULL, app_main, &x[i]);
	}
	for (unsigned i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	is_int(tw_primary_flush(p), 0, "async mode: flush");
	is_int(x[0].bad + x[1].bad, 0, "async mode: every append accepted / acknowledged");
	is_int(x[0].a.n + x[1].a.n, 2 * (15000 - 15), "async mode: every callback ran");
	is_int(x[0].a.errors + x[1].a.errors, 0, "async mode: no errors");
	is_int(x[0].a.out_of_order + x[1].a.out_of_order, 0, "async mode: in log order");
	tw_primary_get_stats(p, &st);
	ok(st.writes < 30000, "async mode: batching: %llu writes for 30000 appends",
	   (unsigned long long)st.writes);
	is_int(st.acked, 30000, "async mode: stats count 30000 acknowledged");
	is_int(tw_primary_close(p), 0, "async mode: close");
}

/*
 * A caller-driven log (sync mode) under asynchronous appends posts whole batches: the first
 * entry goes out alone (nothing in flight), then entries wait until max_batch of them are
 * there. 1,280 appends of max_batch 64 without a call in between: at most 1,280 / 64 + a few
 * writes (one entry per free slot, the behaviour before, made 81).
 */
static void test_driven_batching(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_primary *p;
	struct tlog_acks a = { 0 };
	uint8_t buf[32];

	cfg_for(&tc, &cfg, addrs, 3, 190);
	cfg.max_batch = 64;
	cfg.max_inflight = 4;
	p = tlog_open(&tc, &cfg, "driven");
	if (!p)
		return;
	for (uint64_t i = 0; i < 1280; i++) {
		fill(buf, sizeof(buf), i);
		if (tw_primary_append_async(p, buf, sizeof(buf), tlog_ack_cb, &a, NULL) < 0)
			break;
	}
	is_int(tw_primary_flush(p), 0, "driven: flush");
	tw_primary_get_stats(p, &st);
	ok(a.n == 1280 && a.errors == 0 && a.out_of_order == 0,
	   "driven: 1280 acknowledged in order (%" PRIu64 ", %" PRIu64 " errors)", a.n, a.errors);
	ok(st.writes <= 1280 / 64 + 4, "driven: whole batches: %" PRIu64 " writes for 1280 appends",
	   st.writes);
	is_int(tw_primary_close(p), 0, "driven: close");
}

/* Completions of later writes arrive first: acks still go out in log order. */
/* The writes' completions, held by the test fabric (tests/lib/tfab.h) for the test to pass
 * on in an order of its choosing. */
static struct tw_op *held[64];
static tw_op_cb held_next[64];
static int n_held;

static void hold_cb(struct tfab *t, struct tw_op *op, int status, tw_op_cb next)
{
	(void)t;
	(void)status;
	held_next[n_held] = next;
	held[n_held++] = op;
}

static void test_order(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tlog_acks a = { 0 };
	static struct tfab tf;
	uint64_t lsn[3];
	uint8_t buf[64];

	cfg_for(&tc, &cfg, addrs, 3, 104);
	cfg.max_inflight = 4;
	p = tlog_open(&tc, &cfg, "order");
	if (!p)
		return;
	tfab_wrap_primary(&tf, p, hold_cb, NULL);
	for (int i = 0; i < 3; i++) {
		fill(buf, 50, (uint64_t)i);
		tw_primary_append_async(p, buf, 50, tlog_ack_cb, &a, &lsn[i]);
		/* Under load a caller-driven log waits for a whole batch; progress seals what
		 * waits now: one write per append. */
		tw_primary_progress(p, 0);
	}
	for (int i = 0; i < 100 && n_held < 9; i++)
		tw_primary_progress(p, 10);
	is_int(n_held, 9, "order: 3 writes x 3 replicas posted and completed (held by the test)");
	if (n_held != 9)
		TAP_FATAL("cannot continue the order test");
	/* Complete writes 2 and 1 first. */
	for (int i = 8; i >= 3; i--)
		held_next[i](held[i], 0);
	tw_primary_progress(p, 0);
	is_int(a.n, 0, "order: later writes complete first: nothing acknowledged yet");
	is_int(tw_primary_acked_lsn(p), 0, "order: acked_lsn still 0");
	for (int i = 2; i >= 0; i--)
		held_next[i](held[i], 0);
	tw_primary_progress(p, 0);
	is_int(a.n, 3, "order: first write completes: all three acknowledged");
	is_int(a.out_of_order, 0, "order: in log order");
	ok(a.last_lsn == lsn[2], "order: last acknowledged is the third append");
	tfab_unhook(&tf);
	is_int(tw_primary_close(p), 0, "order: close");
}

static void test_too_few(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	const char *bad[3] = { addrs[0], addrs[1], "mem://4242" };
	char err[1024];
	int rc;

	cfg_for(&tc, &cfg, addrs, 2, 105);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, -TW_ENOBACKUP, "too few: 2 backups for r = 3 -> ENOBACKUP");
	cfg_for(&tc, &cfg, bad, 3, 106);
	tc.connect_timeout_ms = 500;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, -TW_ENOBACKUP, "too few: one unreachable backup -> ENOBACKUP");
	ok(strstr(err, "mem://4242") != NULL, "too few: message names it: %s", err);
}

static void test_refusal(struct tbackup *small, const char **addrs4)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *hog, *p;
	struct tw_primary_stats st;
	const char *only_small[3] = { small->addr, addrs4[1], addrs4[2] };
	char err[1024];
	uint8_t buf[100];
	int rc;
	bool uses_small = false;

	/* Another log takes the small backup's only buffer. */
	cfg_for(&tc, &cfg, only_small, 3, 107);
	cfg.replicas = 1;
	rc = tw_primary_open(&tc, &cfg, &hog, err, sizeof(err));
	is_int(rc, 0, "refusal: another log holds the small backup's buffer (%s)", rc ? err : "ok");
	if (rc)
		return;
	/* Ours lists the small backup first: it refuses, another one is taken. */
	cfg_for(&tc, &cfg, addrs4, 4, 108);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "refusal: open retries elsewhere (%s)", rc ? err : "ok");
	if (rc == 0) {
		tw_primary_get_stats(p, &st);
		ok(st.open_refused >= 1, "refusal: %llu refusal(s) seen", (unsigned long long)st.open_refused);
		for (unsigned i = 0; i < 3; i++)
			if (tw_primary_replica_addr(p, i) && !strcmp(tw_primary_replica_addr(p, i), small->addr))
				uses_small = true;
		ok(!uses_small, "refusal: the refusing backup is not a replica");
		fill(buf, 100, 1);
		is_int(tw_primary_append(p, buf, 100, NULL), 0, "refusal: append works");
		is_int(tw_primary_close(p), 0, "refusal: close");
	}
	/* Only 3 candidates, one refusing: back-off then a clear error. */
	cfg_for(&tc, &cfg, only_small, 3, 109);
	cfg.open_retry_ms = 200;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, -TW_ENOBACKUP, "refusal: only refusing candidates left -> ENOBACKUP after back-off");
	ok(strstr(err, small->addr) && strstr(err, "RESOURCE_EXHAUSTED"), "refusal: message: %s", err);
	tw_primary_close(hog);
}

static void test_lost(const char **addrs, struct tbackup *victim, const char **addrs_v)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_mem_fault f = { .kind = TW_MEM_FAULT_FAIL };
	struct tlog_acks a = { 0 };
	uint8_t buf[100];
	char err[1024];
	uint64_t t0;
	int rc;

	/* A write error. */
	cfg_for(&tc, &cfg, addrs, 3, 110);
	p = tlog_open(&tc, &cfg, "lost");
	if (!p)
		return;
	fill(buf, 100, 0);
	is_int(tw_primary_append(p, buf, 100, NULL), 0, "lost: first append ok");
	tw__mem_inject(p->bk[p->cur->rep[1]].c->peer.ch, &f);
	rc = tw_primary_append(p, buf, 100, NULL);
	is_int(rc, -TW_ENOBACKUP, "lost: write error, no spare -> ENOBACKUP");
	ok(strstr(tw_primary_errmsg(p), p->bk[p->cur->rep[1]].addr) != NULL, "lost: message names the backup: %s",
	   tw_primary_errmsg(p));
	is_int(tw_primary_append(p, buf, 100, NULL), -TW_ENOBACKUP, "lost: later appends fail at once");
	is_int(tw_primary_append_async(p, buf, 100, tlog_ack_cb, &a, NULL), -TW_ENOBACKUP,
	       "lost: async append refused, callback not called");
	is_int(a.n, 0, "lost: no callback");
	ok(tw_primary_close(p) < 0, "lost: close reports the failure");

	/* A dropped write: op timeout, never a hang. */
	cfg_for(&tc, &cfg, addrs, 3, 111);
	tc.op_timeout_ms = 300;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	if (rc == 0) {
		struct tw_mem_fault d = { .kind = TW_MEM_FAULT_DROP };

		memset(&a, 0, sizeof(a));
		tw_primary_append_async(p, buf, 100, tlog_ack_cb, &a, NULL);
		tw_primary_flush(p);
		tw__mem_inject(p->bk[p->cur->rep[0]].c->peer.ch, &d);
		t0 = tw_now_ns();
		for (int i = 0; i < 5; i++)
			tw_primary_append_async(p, buf, 100, tlog_ack_cb, &a, NULL);
		rc = tw_primary_flush(p);
		is_int(rc, -TW_ENOBACKUP, "lost: dropped write, no spare -> ENOBACKUP after the op timeout");
		ok(tw_now_ns() - t0 < 5000000000ull, "lost: within %llu ms",
		   (unsigned long long)((tw_now_ns() - t0) / 1000000));
		is_int(a.n, 6, "lost: every callback ran");
		is_int(a.errors, 5, "lost: the 5 after the drop failed, the first succeeded");
		tw_primary_close(p);
	} else {
		ok(0, "lost: open for the drop test: %s", err);
		tap_skip(3, "no primary");
	}

	/* A backup process goes away: on_lost -> error. */
	cfg_for(&tc, &cfg, addrs_v, 3, 112);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "lost: open with the victim (%s)", rc ? err : "ok");
	if (rc)
		return;
	is_int(tw_primary_append(p, buf, 100, NULL), 0, "lost: append before the loss");
	tbackup_stop(victim);
	rc = 0;
	for (int i = 0; i < 100 && rc == 0; i++)
		rc = tw_primary_append(p, buf, 100, NULL);
	is_int(rc, -TW_ENOBACKUP, "lost: backup closed, no spare -> ENOBACKUP");
	ok(strstr(tw_primary_errmsg(p), victim->addr) != NULL, "lost: names %s: %s", victim->addr,
	   tw_primary_errmsg(p));
	tw_primary_close(p);
}

/*
 * The same bursts of asynchronous appends on two sync-mode logs, one driven the plain way
 * (the caller's calls), one from an epoll loop on tw_primary_wait_fd, which the mem fabric has
 * (an eventfd): both acknowledge everything in order; the loop's log publishes its acknowledged
 * position on demand (SetAcked held by backups without readers, one in flight per replica), the
 * plain one at every reap; and a held SetAcked's answer, which arrives while the loop sleeps,
 * wakes it through the descriptor.
 */
static void test_loop(const char **addrs)
{
	struct tw_primary_stats st[2];
	uint64_t fd_wakes = 0, sleeps = 0;
	int tries = 0;

	for (int looped = 0; looped < 2; looped++) {
		struct tw_ctx_config tc;
		struct tw_primary_config cfg;
		struct tw_primary *p;
		struct tlog_acks a = { 0 };
		struct tlog_loop l = { .ep = -1 };
		const char *what = looped ? "loop" : "plain";
		uint64_t n = 0, end;
		int bad = 0, fd = -1;

		cfg_for(&tc, &cfg, addrs, 3, 192 + (uint64_t)looped);
		/* A backup holds a SetAcked rpc_timeout_ms / 4 = 350 ms (docs/readers.md): not a
		 * multiple of the loop's 100 ms sleeps, so its answer comes in the middle of one. */
		tc.rpc_timeout_ms = 1400;
		cfg.max_batch = 64;
		p = tlog_open(&tc, &cfg, "%s-driven log", what);
		if (!p)
			return;
		if (looped) {
			struct epoll_event ev = { .events = EPOLLIN };

			fd = tw_primary_wait_fd(p);
			ok(fd >= 0, "loop: the mem fabric gives a descriptor (%d)", fd);
			l.ep = epoll_create1(EPOLL_CLOEXEC);
			TAP_REQUIRE(l.ep >= 0 && epoll_ctl(l.ep, EPOLL_CTL_ADD, fd, &ev) == 0,
				    "epoll set");
		}
		for (unsigned burst = 0; burst < 20 && !bad; burst++) {
			for (unsigned i = 0; i < 150; i++, n++)
				if (append_seq(p, n, tlog_ack_cb, &a, NULL) != 0)
					bad++;
			if (looped) {
				bad += tlog_loop_until(&l, p, &a, n, 5000) < 0;
				continue;
			}
			end = tw_now_ns() + 5000000000ull;
			while (a.n < n && tw_now_ns() < end)
				if (tw_primary_progress(p, 1) < 0)
					bad++;
		}
		ok(!bad && a.n == n && a.errors == 0 && a.out_of_order == 0,
		   "%s: %" PRIu64 " appends in 20 bursts acknowledged in order (%" PRIu64
		   " callbacks, %" PRIu64 " errors)", what, n, a.n, a.errors);
		if (looped) {
			/* Idle: one more entry, acknowledged; its reap sends the replicas the new
			 * position (or the answer of the one in flight does), which the backups hold
			 * and then answer while the loop sleeps: the answer must wake it through the
			 * descriptor. An answer that lands between two sleeps is handled by the pass
			 * in between and wakes nothing, so up to five tries, each a fresh SetAcked. */
			uint64_t w0 = l.fd_wakes;

			for (tries = 0; tries < 5 && l.fd_wakes == w0 && !bad; tries++) {
				if (append_seq(p, n++, tlog_ack_cb, &a, NULL) != 0)
					bad++;
				bad += tlog_loop_until(&l, p, &a, n, 5000) < 0;
				end = tw_now_ns() + 1500000000ull;
				while (l.fd_wakes == w0 && tw_now_ns() < end && !bad)
					if (tlog_loop_pass(&l, p) < 0)
						bad++;
			}
			fd_wakes = l.fd_wakes - w0;
			sleeps = l.sleeps;
			close(l.ep);
		}
		tw_primary_get_stats(p, &st[looped]);
		is_int(tw_primary_close(p), 0, "%s: close", what);
	}
	ok(fd_wakes >= 1, "loop: a held SetAcked's answer woke the sleeping loop through the "
	   "descriptor (%" PRIu64 " sleeps in all, %d tries)", sleeps, tries);
	ok(st[1].rpc_set_acked < st[0].rpc_set_acked,
	   "the loop-driven log publishes on demand: %" PRIu64 " SetAcked against %" PRIu64
	   " for the plain sync-mode log (%" PRIu64 " and %" PRIu64 " writes)",
	   st[1].rpc_set_acked, st[0].rpc_set_acked, st[1].writes, st[0].writes);
}

int main(void)
{
	struct tbackups cl;
	struct tbackup *b = cl.b;
	const char **addrs = cl.addrs, *addrs4[4], *addrs_v[3];

	if (getenv("TW_PRIMARY_TEST_PROVIDER"))
		prov = getenv("TW_PRIMARY_TEST_PROVIDER");
	tbackups_start(&cl, "test_primary", 4, prov, 8, SEG);
	tbackups_add(&cl, prov, 1, SEG, 1); /* b[4], small: one buffer */
	tbackups_add(&cl, prov, 8, SEG, 0); /* b[5], the victim */
	addrs4[0] = b[4].addr;
	addrs4[1] = b[0].addr;
	addrs4[2] = b[1].addr;
	addrs4[3] = b[2].addr;
	addrs_v[0] = b[5].addr;
	addrs_v[1] = b[1].addr;
	addrs_v[2] = b[2].addr;

	test_sync(addrs);
	test_async_callbacks(addrs);
	test_async_thread(addrs);
	test_order(addrs);
	test_driven_batching(addrs);
	if (!strcmp(prov, "mem"))
		test_loop(addrs);
	test_nested(addrs);
	test_async_reentry(addrs);
	test_close_behind(b, 4, addrs);
	test_release(addrs, TW_PRIMARY_SYNC);
	test_release(addrs, TW_PRIMARY_ASYNC);
	test_preopen(addrs, TW_PRIMARY_SYNC);
	test_preopen(addrs, TW_PRIMARY_ASYNC);
	if (!strcmp(prov, "mem"))
		test_too_few(addrs);
	test_refusal(&b[4], addrs4);
	if (!strcmp(prov, "mem"))
		test_lost(addrs, &b[5], addrs_v);

	tbackups_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
