/*
 * tests/unit/test_readers_backup.c — what a backup does for readers (protocol 1.4,
 * replica/backup_readers.c, docs/readers.md), against an in-process backup over the in-memory
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
 *     first live segment.
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

	tw__rpc_req_set_acked(&req, epoch, LOG, 0, acked);
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

/* Send a ReadEntries that completes into *r later. */
static void rd_async(struct twc *c, uint64_t off, uint32_t wait, struct rd *r)
{
	struct tw_rpc_req req;

	memset(r, 0, sizeof(*r));
	tw__rpc_req_read_entries(&req, LOG, 0, off, 0, wait);
	TAP_REQUIRE(tw__rpc_call(c->rpc, &req.env, rd_cb, r) == 0, "send ReadEntries");
}

/* Progress the reader's fabric for `ms` (or until *r is answered when stop is set). */
static void pump(struct twc *c, struct rd *r, unsigned ms, bool stop)
{
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;

	while (tw_now_ns() < end && !(stop && r->done)) {
		tw__fab_progress(c->fab, 5);
		tw__rpc_client_expire(c->rpc);
	}
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

	tap_plan(23);
	snprintf(dir, sizeof(dir), "/tmp/tw_rdbk.%d", (int)getpid());
	tw_backup_config_init(&cfg);
	cfg.provider = "mem";
	cfg.dir = dir;
	cfg.buffers = 4;
	cfg.max_buffers = 4;
	cfg.buffer_size = BUF;
	TAP_REQUIRE(tw_backup_open(&cfg, &bk) == 0, "backup open");
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

	twc_close(&rdr);
	twc_close(&w);
	tw_backup_stop(bk);
	pthread_join(thr, NULL);
	tw_backup_close(bk);
	rm_tree(dir);
	return tap_exit();
}
