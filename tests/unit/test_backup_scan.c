/*
 * tests/unit/test_backup_scan.c — a close's scan on the backup's scanner thread
 * (backup/backup_scan.c), in-process over a provider (argv[1]: mem, tcp or sockets):
 *   - while the scan of a close is held, the close is not answered, and the backup serves the
 *     one-sided writes of another log meanwhile (on tcp and sockets those need its progress
 *     thread: before, the scan ran there and held them);
 *   - the next request settles it: the close is answered with the scanned offset, the listing
 *     says closed;
 *   - a close whose asker went away is applied all the same, and the backup goes on;
 *   - a close whose scan disagrees with it is answered CORRUPT after its scan, as before;
 *   - tw_backup_flush_all settles a held close first, and the backup closes cleanly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>

#include "core/util.h"
#include "backup/backup_int.h"
#include "proto/rpc.h"
#include "tap.h"
#include "tbackup.h"
#include "tmpdir.h"
#include "twd_client.h"

#define BUF (256 * 1024)

static const char *prov;
static char root[256];
static struct tbackup tb;
static struct tw_backup *bk;

/* A writer with an open segment (log_id, 0) holding `writes` writes of 8 entries. */
static void writer(struct twc *c, uint64_t log_id, int writes)
{
	int rc = twc_connect(c, prov, tb.addr);

	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	TAP_REQUIRE(twc_seg_init(c, BUF) == 0, "seg init");
	TAP_REQUIRE(twc_open(c, log_id, 0, 1, 1, BUF) == 0, "open log %llu",
		    (unsigned long long)log_id);
	for (int i = 0; i < writes; i++)
		TAP_REQUIRE(twc_write(c, 8, 100, (uint32_t)i) == 0, "write %d", i);
}

struct closing {
	bool done;
	int status;
	struct tw_rpc_seg_meta scanned;
};

static void close_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct closing *x = arg;

	x->status = status;
	if (reply && reply->body_case == TAILWIND__ENVELOPE__BODY_CLOSE_SEGMENT_REPLY &&
	    reply->close_segment_reply && reply->close_segment_reply->scanned) {
		x->scanned.offset = reply->close_segment_reply->scanned->offset;
		x->scanned.checksum = reply->close_segment_reply->scanned->checksum;
	}
	x->done = true;
}

/* Send c's close without waiting for the answer (checksum flipped when `bad`). */
static void close_async(struct twc *c, struct closing *x, bool bad)
{
	struct tw_rpc_seg_meta m = { c->log_id, c->segment_id, c->w.last_checksum, c->w.pos };
	struct tw_rpc_req req;

	if (bad)
		m.checksum ^= 1;
	memset(x, 0, sizeof(*x));
	tw__rpc_req_close_segment(&req, c->epoch, &m, c->version);
	TAP_REQUIRE(tw__rpc_call(c->rpc, &req.env, close_done, x) == 0, "close sent");
}

static uint64_t closes_counted(void)
{
	uint64_t calls[TW_BACKUP_RPC_KINDS] = { 0 };

	tw_backup_get_rpc_calls(bk, calls, TW_BACKUP_RPC_KINDS);
	return calls[TW_BACKUP_RPC_CLOSE];
}

/* Wait until the backup took a close more than `before` (its counters are published within
 * 50 ms; deadline 10 s). */
static bool close_taken(uint64_t before)
{
	uint64_t end = tw_now_ns() + 10000000000ull;

	while (closes_counted() <= before && tw_now_ns() < end)
		;
	return closes_counted() > before;
}

/* Progress c's fabric until the close is answered (deadline 10 s) or, with `rounds`, for that
 * many polls of up to 1 ms. */
static void await(struct twc *c, struct closing *x, int rounds)
{
	uint64_t end = tw_now_ns() + 10000000000ull;

	for (int i = 0; !x->done && (rounds ? i < rounds : tw_now_ns() < end); i++)
		tw__fab_progress(c->fab, 1);
}

/* The listing of (log_id, 0) as d sees it (a request: it settles every close asked before). */
static bool listed_closed(struct twc *d, uint64_t log_id, uint64_t len, bool *corrupt)
{
	struct twc_info li[4];
	int n = twc_list(d, log_id, false, li, 4);

	if (corrupt)
		*corrupt = n == 1 && li[0].corrupt;
	return n == 1 && li[0].valid_len == len &&
	       (li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED ||
		li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED);
}

static void test_held_close(void)
{
	struct twc c, d;
	struct closing x;
	int bad = 0;

	uint64_t before;

	writer(&c, 50, 40);
	writer(&d, 51, 0);
	tw__bk_scan_hold(bk, true);
	before = closes_counted();
	close_async(&c, &x, false);
	ok(close_taken(before), "the backup took the close");
	/* Then d's writes go to the same backup (on tcp and sockets its progress thread takes
	 * them: it is not in the scan). */
	for (int i = 0; i < 50; i++)
		if (twc_write(&d, 8, 100, (uint32_t)(1000 + i)) != 0)
			bad++;
	is_int(bad, 0, "50 writes of another log served while the close's scan is held");
	await(&c, &x, 50);
	ok(!x.done, "the close is not answered while its scan is held");
	ok(listed_closed(&d, 50, c.w.pos, NULL), "a request settles it: log 50 listed closed at "
	   "%zu", c.w.pos);
	await(&c, &x, 0);
	ok(x.done && x.status == 0 && x.scanned.offset == c.w.pos &&
	   x.scanned.checksum == c.w.last_checksum,
	   "the close answered OK with the scanned offset %llu (status %d)",
	   (unsigned long long)x.scanned.offset, x.status);
	twc_close(&c);
	twc_close(&d);
}

static void test_asker_gone(void)
{
	struct twc c, d;
	struct closing x;
	size_t pos;

	uint64_t before;

	writer(&c, 52, 20);
	writer(&d, 53, 1);
	pos = c.w.pos;
	tw__bk_scan_hold(bk, true);
	before = closes_counted();
	close_async(&c, &x, false);
	ok(close_taken(before), "the backup took the close");
	is_int(twc_write(&d, 8, 100, 7), 0, "a write of another log meanwhile");
	twc_close(&c);
	ok(listed_closed(&d, 52, pos, NULL), "a close whose asker went away is applied: log 52 "
	   "closed at %zu", pos);
	is_int(twc_write(&d, 8, 100, 8), 0, "the backup goes on serving");
	twc_close(&d);
}

static void test_corrupt_deferred(void)
{
	struct twc c, d;
	struct closing x;
	bool corrupt = false;

	uint64_t before;

	writer(&c, 54, 10);
	writer(&d, 55, 0);
	tw__bk_scan_hold(bk, true);
	before = closes_counted();
	close_async(&c, &x, true);
	ok(close_taken(before), "the backup took the close");
	ok(listed_closed(&d, 54, c.w.pos, &corrupt) && corrupt,
	   "a close that disagrees with its scan: closed at the scanned length, marked corrupt");
	await(&c, &x, 0);
	ok(x.done && x.status == -TW_ECORRUPT && x.scanned.offset == c.w.pos,
	   "answered CORRUPT after its scan, with the scanned offset (status %d)", x.status);
	twc_close(&c);
	twc_close(&d);
}

static void test_flush_all_settles(void)
{
	struct twc c;
	struct closing x;

	uint64_t before;

	writer(&c, 56, 10);
	tw__bk_scan_hold(bk, true);
	before = closes_counted();
	close_async(&c, &x, false);
	ok(close_taken(before), "the backup took the close (held)");
	tbackup_pause(&tb); /* its thread stopped and joined, the backup open */
	is_int(tw_backup_flush_all(bk), 0, "tw_backup_flush_all with a held close settles it");
	is_int(tw_backup_close(bk), 0, "the backup closes with nothing unflushed");
	tb.b = NULL;
	bk = NULL;
	twc_close(&c);
}

int main(int argc, char **argv)
{
	prov = argc > 1 ? argv[1] : "mem";
	tmpdir_make(root, sizeof(root), NULL, "tw-bkscan");
	tap_diag("provider %s, dir %s", prov, root);
	tbackup_start(&tb, root, 0, prov, 8, BUF, 0);
	bk = tb.b;
	test_held_close();
	test_asker_gone();
	test_corrupt_deferred();
	test_flush_all_settles();
	tmpdir_remove(root);
	tap_done_testing();
	return tap_exit();
}
