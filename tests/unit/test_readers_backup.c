/*
 * tests/unit/test_readers_backup.c — what a backup does for readers (protocol 1.4,
 * backup/backup_readers.c, docs/readers.md), against an in-process backup over the in-memory
 * fabric, with a writer client (twd_client) and a reader speaking the RPCs directly:
 *
 *   - an open segment is readable only up to the SetAcked position: nothing before the first,
 *     whole entries after; a lower SetAcked is ignored, one past the segment's length refused;
 *   - a read at the readable end with wait_ms is held: not answered before the position moves,
 *     answered by the SetAcked that moves it (the entries in the reply), or empty when the wait
 *     runs out;
 *   - fencing applies: a fence at a newer epoch closes the old owner's connection, its SetAcked
 *     on a new one is FENCED, and the readable end stays; the recovery's RecoveredOffset closes the copy, which answers a held
 *     read with the rest of the segment, state CLOSED;
 *   - a read that cannot hold one entry says its size; an offset inside an entry is refused;
 *   - after log cleaning a read of a freed segment is NOT_FOUND, says "freed", and carries the
 *     first live segment;
 *   - demand-driven SetAcked (hold_ms): with no reader of the log active, a SetAcked is applied
 *     but its answer held; a reader's ReadEntries releases it (readers true) and waits for the
 *     owner's next SetAcked, which is answered at once while the reader is active and answers
 *     the read with the new position; the deadline releases one
 *     (readers false); a newer SetAcked on the connection releases the older; the segment's
 *     close and a fence release it; a connection closed with one held leaves none held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "rmtree.h"
#include "tap.h"
#include "twd_client.h"

#define BUF (64 * 1024)
#define LOG 30

static struct tw_backup *bk;
static pthread_t thr;
static char dir[256];

static void *run_main(void *arg)
{
	(void)arg;
	(void)tw_backup_run(bk);
	return NULL;
}

static int set_acked(struct twc *c, uint64_t epoch, uint64_t acked)
{
	struct tw_rpc_req req;

	tw__rpc_req_set_acked(&req, epoch, LOG, 0, acked, 0);
	return tw__rpc_call_sync(c->rpc, &req.env, NULL);
}

struct rd {
	int status;
	bool done;
	uint64_t readable, free_below, len;
	uint32_t entry_len;
	int state;
	char msg[256];
};

static void rd_fill(struct rd *r, int status, const Tailwind__Envelope *env)
{
	const Tailwind__ReadEntriesReply *m = env ? env->read_entries_reply : NULL;
	const char *msg = NULL;

	memset(r, 0, sizeof(*r));
	r->status = status;
	r->done = true;
	if (env && tw__rpc_reply_status(env, &msg) >= 0 && msg)
		snprintf(r->msg, sizeof(r->msg), "%s", msg);
	if (m) {
		r->readable = m->readable;
		r->free_below = m->free_below;
		r->len = m->data.len;
		r->entry_len = m->entry_len;
		r->state = m->state;
	}
}

static void rd_cb(void *arg, int status, const Tailwind__Envelope *reply)
{
	rd_fill(arg, status, reply);
}

/* A blocking ReadEntries. */
static struct rd rd_sync(struct twc *c, uint64_t seg, uint64_t off, uint32_t max, uint32_t wait)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	struct rd r;
	int rc;

	tw__rpc_req_read_entries(&req, LOG, seg, off, max, wait);
	rc = tw__rpc_call_sync(c->rpc, &req.env, &rep);
	rd_fill(&r, rc, rep.env);
	tw__rpc_reply_release(&rep);
	return r;
}

/* Send a ReadEntries of segment 0 of `log` that completes into *r later. */
static void rd_async_log(struct twc *c, uint64_t log, uint64_t off, uint32_t wait, struct rd *r)
{
	struct tw_rpc_req req;

	memset(r, 0, sizeof(*r));
	tw__rpc_req_read_entries(&req, log, 0, off, 0, wait);
	TAP_REQUIRE(tw__rpc_call(c->rpc, &req.env, rd_cb, r) == 0, "send ReadEntries");
}

static void rd_async(struct twc *c, uint64_t off, uint32_t wait, struct rd *r)
{
	rd_async_log(c, LOG, off, wait, r);
}

/* Progress c's fabric for `ms`, or until *done when `done` is not NULL. */
static void pump_until(struct twc *c, const bool *done, unsigned ms)
{
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;

	while (tw_now_ns() < end && !(done && *done)) {
		tw__fab_progress(c->fab, 5);
		tw__rpc_client_expire(c->rpc);
	}
}

/* The same until *r is answered when stop is set. */
static void pump(struct twc *c, struct rd *r, unsigned ms, bool stop)
{
	pump_until(c, stop ? &r->done : NULL, ms);
}

/* ---- held SetAcked (hold_ms) */

struct sa {
	int status;
	bool done, readers;
};

static void sa_cb(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct sa *a = arg;

	a->status = status;
	a->done = true;
	a->readers = reply && reply->body_case == TAILWIND__ENVELOPE__BODY_SET_ACKED_REPLY &&
		     reply->set_acked_reply && reply->set_acked_reply->readers;
}

static void sa_async(struct twc *c, uint64_t log, uint64_t acked, uint32_t hold, struct sa *a)
{
	struct tw_rpc_req req;

	memset(a, 0, sizeof(*a));
	tw__rpc_req_set_acked(&req, 1, log, 0, acked, hold);
	TAP_REQUIRE(tw__rpc_call(c->rpc, &req.env, sa_cb, a) == 0, "send SetAcked");
}

static void sa_pump(struct twc *c, struct sa *a, unsigned ms, bool stop)
{
	pump_until(c, stop ? &a->done : NULL, ms);
}

/* A writer owning a fresh log with one written entry; returns the position after it. */
static uint64_t hold_log(struct twc *h, uint64_t log)
{
	TAP_REQUIRE(twc_connect(h, "mem", tw_backup_listen_addr(bk)) == 0, "connect");
	TAP_REQUIRE(twc_seg_init(h, BUF) == 0, "seg init");
	TAP_REQUIRE(twc_open(h, log, 0, 1, 0, BUF) == 0, "open");
	TAP_REQUIRE(twc_write(h, 2, 100, 9) == 0, "write");
	return h->w.pos;
}

static uint64_t holding(struct twc *c)
{
	struct twc_stats st;

	TAP_REQUIRE(twc_stats(c, &st) == 0, "stats");
	return st.set_acked_holding;
}

static void test_holds(struct twc *rdr)
{
	struct twc h;
	struct sa a, a2;
	struct rd r;
	uint64_t off, off2, t0, epoch_got = 0, owner = 0;

	/* Released by a reader's request, which then waits for the owner's next position. */
	off = hold_log(&h, 40);
	sa_async(&h, 40, off, 5000, &a);
	sa_pump(&h, &a, 150, false);
	ok(!a.done && holding(rdr) == 1, "no reader: the SetAcked answer is held");
	TAP_REQUIRE(twc_write(&h, 1, 100, 10) == 0, "write");
	off2 = h.w.pos;
	rd_async_log(rdr, 40, 0, 0, &r);
	t0 = tw_now_ns();
	sa_pump(&h, &a, 3000, true);
	ok(a.done && a.status == 0 && a.readers && tw_now_ns() - t0 < 2000000000ull,
	   "a reader's ReadEntries releases it at once, readers true (%.1f ms)",
	   (double)(tw_now_ns() - t0) / 1e6);
	pump(rdr, &r, 100, false);
	ok(!r.done, "that read waits for the owner's next position");
	sa_async(&h, 40, off2, 5000, &a2);
	sa_pump(&h, &a2, 3000, true);
	ok(a2.done && a2.status == 0 && a2.readers && holding(rdr) == 0,
	   "while the reader is active, a SetAcked is answered at once");
	pump(rdr, &r, 3000, true);
	ok(r.done && r.status == 0 && r.readable == off2 && r.len == off2, "the read is answered "
	   "with the new position: %llu bytes, readable %llu of %llu (held one: %llu)",
	   (unsigned long long)r.len, (unsigned long long)r.readable, (unsigned long long)off2,
	   (unsigned long long)off);
	twc_close(&h);

	/* The deadline; a newer one; the connection goes with one held. */
	off = hold_log(&h, 41);
	t0 = tw_now_ns();
	sa_async(&h, 41, off, 200, &a);
	sa_pump(&h, &a, 3000, true);
	ok(a.done && a.status == 0 && !a.readers && tw_now_ns() - t0 >= 190000000ull,
	   "held to its deadline, readers false (%.0f ms for hold_ms 200)",
	   (double)(tw_now_ns() - t0) / 1e6);
	sa_async(&h, 41, off, 5000, &a);
	sa_pump(&h, &a, 100, false);
	sa_async(&h, 41, off, 5000, &a2);
	sa_pump(&h, &a, 3000, true);
	sa_pump(&h, &a2, 100, false);
	ok(a.done && a.status == 0 && !a2.done && holding(rdr) == 1,
	   "a newer SetAcked of the log answers the older at once and is held itself");
	twc_close(&h);
	t0 = tw_now_ns();
	while (holding(rdr) != 0 && tw_now_ns() - t0 < 3000000000ull)
		; /* the backup notices the loss on its own thread: ask again */
	ok(holding(rdr) == 0, "its connection closed: nothing held any more");

	/* The segment's close. */
	off = hold_log(&h, 42);
	sa_async(&h, 42, off, 5000, &a);
	sa_pump(&h, &a, 100, false);
	t0 = tw_now_ns();
	is_int(twc_close_seg(&h, UINT64_MAX, 0, NULL), 0, "close the segment");
	sa_pump(&h, &a, 3000, true);
	ok(a.done && a.status == 0 && tw_now_ns() - t0 < 2000000000ull,
	   "the close releases the held answer");
	twc_close(&h);

	/* A fence (the old owner's connection is dropped with it). */
	off = hold_log(&h, 43);
	sa_async(&h, 43, off, 5000, &a);
	sa_pump(&h, &a, 100, false);
	TAP_REQUIRE(!a.done, "held before the fence");
	t0 = tw_now_ns();
	is_int(tw__rpc_fence(rdr->rpc, 43, 2, &epoch_got, &owner), 0, "fence log 43");
	sa_pump(&h, &a, 4000, true);
	ok(a.done && tw_now_ns() - t0 < 3000000000ull && holding(rdr) == 0,
	   "the fence ends the held answer (%s) before its deadline", tw_strerror(a.status));
	twc_close(&h);
}

int main(void)
{
	struct tw_backup_config cfg;
	struct twc w, rdr;
	struct rd r, held;
	uint64_t off1, off2, off3, t0;
	uint64_t epoch_got = 0, owner = 0, freed = 0;
	uint32_t ck;
	struct tw_rpc_seg_meta m;

	tap_plan(35);
	snprintf(dir, sizeof(dir), "/tmp/tw_rdbk.%d", (int)getpid());
	tw_backup_config_init(&cfg);
	cfg.provider = "mem";
	cfg.dir = dir;
	cfg.buffers = 8;
	cfg.max_buffers = 8;
	cfg.buffer_size = BUF;
	TAP_REQUIRE(tw_backup_open(&cfg, &bk, NULL, 0) == 0, "backup open");
	TAP_REQUIRE(pthread_create(&thr, NULL, run_main, NULL) == 0, "thread");
	TAP_REQUIRE(twc_connect(&w, "mem", tw_backup_listen_addr(bk)) == 0, "writer connect");
	TAP_REQUIRE(twc_seg_init(&w, BUF) == 0, "seg init");
	TAP_REQUIRE(twc_connect(&rdr, "mem", tw_backup_listen_addr(bk)) == 0, "reader connect");

	TAP_REQUIRE(twc_open(&w, LOG, 0, 1, 0, BUF) == 0, "open");
	TAP_REQUIRE(twc_write(&w, 2, 100, 1) == 0, "write 1");
	off1 = w.w.pos;
	TAP_REQUIRE(twc_write(&w, 3, 100, 2) == 0, "write 2");
	off2 = w.w.pos;
	TAP_REQUIRE(twc_write(&w, 1, 100, 3) == 0, "write 3");
	off3 = w.w.pos;

	r = rd_sync(&rdr, 0, 0, 0, 0);
	ok(r.status == 0 && r.len == 0 && r.readable == 0 &&
	   r.state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN, "written but not acknowledged: "
	   "nothing readable (status %d, %llu bytes, readable %llu)", r.status,
	   (unsigned long long)r.len, (unsigned long long)r.readable);
	is_int(set_acked(&w, 1, off1), 0, "SetAcked from the owner");
	r = rd_sync(&rdr, 0, 0, 0, 0);
	ok(r.status == 0 && r.len == off1 && r.readable == off1, "readable exactly to the "
	   "acknowledged position (%llu of %llu)", (unsigned long long)r.len,
	   (unsigned long long)off1);
	is_int(set_acked(&w, 1, 12), 0, "a lower SetAcked is answered OK");
	r = rd_sync(&rdr, 0, 0, 0, 0);
	ok(r.readable == off1, "and ignored: readable stays %llu", (unsigned long long)r.readable);
	is_int(set_acked(&w, 1, BUF + 1), -EINVAL, "SetAcked past the segment's length refused");

	/* Held at the readable end until the position moves. */
	rd_async(&rdr, off1, 5000, &held);
	pump(&rdr, &held, 100, false);
	ok(!held.done, "a read at the readable end is held (not answered within 100 ms)");
	t0 = tw_now_ns();
	is_int(set_acked(&w, 1, off2), 0, "SetAcked moves the position");
	pump(&rdr, &held, 5000, true);
	ok(held.done && held.status == 0 && held.len == off2 - off1 && held.readable == off2,
	   "the held read is answered with the new entries (%llu bytes) in %.1f ms",
	   (unsigned long long)held.len, (double)(tw_now_ns() - t0) / 1e6);

	/* The wait runs out. */
	t0 = tw_now_ns();
	r = rd_sync(&rdr, 0, off2, 0, 150);
	ok(r.status == 0 && r.len == 0 && tw_now_ns() - t0 >= 140000000ull,
	   "a held read with nothing new is answered empty when its wait runs out (%.0f ms)",
	   (double)(tw_now_ns() - t0) / 1e6);

	/* Too small for one entry; not at an entry. */
	r = rd_sync(&rdr, 0, off1, 50, 0);
	ok(r.status == 0 && r.len == 0 && r.entry_len == 112, "max_bytes below one entry: no data,"
	   " entry_len %u (12 + 100)", r.entry_len);
	r = rd_sync(&rdr, 0, off1 + 5, 0, 0);
	ok(r.status == -EINVAL && strstr(r.msg, "no entry"), "an offset inside an entry is "
	   "refused: %s", r.msg);
	r = rd_sync(&rdr, 7, 0, 0, 0);
	ok(r.status == -TW_ENOTFOUND, "a segment the backup does not hold: NOT_FOUND (%s)", r.msg);

	/* Fencing: a newer owner fences; the old owner's positions are refused. */
	tw__rpc_client_set_incarnation(rdr.rpc, 77);
	is_int(tw__rpc_fence(rdr.rpc, LOG, 2, &epoch_got, &owner), 0, "fence at epoch 2");
	ck = w.w.last_checksum;
	ok(set_acked(&w, 1, off3) < 0, "the fence closed the old owner's connection");
	twc_close(&w);
	TAP_REQUIRE(twc_connect(&w, "mem", tw_backup_listen_addr(bk)) == 0, "writer reconnects");
	is_int(set_acked(&w, 1, off3), -TW_EFENCED, "the fenced owner's SetAcked is FENCED");
	r = rd_sync(&rdr, 0, off2, 0, 0);
	ok(r.status == 0 && r.readable == off2 && r.len == 0, "the readable end stayed at %llu",
	   (unsigned long long)r.readable);

	/* The recovery closes the copy at the length it recovered: a held read gets the rest. */
	rd_async(&rdr, off2, 5000, &held);
	pump(&rdr, &held, 50, false);
	ok(!held.done, "a read held at the end of the fenced segment");
	m.log_id = LOG;
	m.segment_id = 0;
	m.offset = off3;
	m.checksum = ck;
	{
		struct twc rec;

		TAP_REQUIRE(twc_connect(&rec, "mem", tw_backup_listen_addr(bk)) == 0, "connect");
		tw__rpc_client_set_incarnation(rec.rpc, 77);
		is_int(tw__rpc_recovered_offset(rec.rpc, 2, &m, 0), 0, "RecoveredOffset closes it");
		twc_close(&rec);
	}
	pump(&rdr, &held, 5000, true);
	ok(held.done && held.status == 0 && held.len == off3 - off2 && held.readable == off3 &&
	   held.state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED, "the held read is "
	   "answered with the rest (%llu bytes), state closed (%d)", (unsigned long long)held.len,
	   held.state);
	r = rd_sync(&rdr, 0, 0, 0, 0);
	ok(r.status == 0 && r.len == off3 && r.readable == off3, "closed: readable to its length");

	/* Cleaning. */
	is_int(tw__rpc_free_segments(rdr.rpc, 2, LOG, 1, false, &freed), 0, "free below 1");
	r = rd_sync(&rdr, 0, 0, 0, 0);
	ok(r.status == -TW_ENOTFOUND && r.free_below == 1 && strstr(r.msg, "freed"),
	   "a freed segment: NOT_FOUND, free_below %llu: %s", (unsigned long long)r.free_below,
	   r.msg);

	test_holds(&rdr);

	twc_close(&rdr);
	twc_close(&w);
	tw_backup_stop(bk);
	pthread_join(thr, NULL);
	tw_backup_close(bk);
	rm_tree(dir);
	return tap_exit();
}
