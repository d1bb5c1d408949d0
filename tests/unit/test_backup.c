/*
 * tests/unit/test_backup.c — the backup in-process: tw_backup_run on a thread over the "mem"
 * fabric, a client (tests/integration/twd_client.c) on the main thread. Covers open/write/close,
 * admission (pool and unflushed limit), malformed requests, fencing, set-version, free, read
 * grants of flushed segments, a misbehaving peer, zero handler calls per replicated write, the
 * battery flush of open buffers, and the restart that rebuilds the index (corrupt file included).
 *
 * Provider: "mem" by default; TW_TEST_PROVIDER=tcp runs the same over tcp.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "core/util.h"
#include "backup/backup_int.h"
#include "backup/metalog.h"
#include "backup/segfile.h"
#include "rmtree.h"
#include "tap.h"
#include "tlog.h"
#include "tmpdir.h"
#include "tclock.h"
#include "tstorage.h"
#include "twd_client.h"

#define BUF (64 * 1024)

static const char *prov;
static char dir[256];
static struct tw_backup *bk;
static pthread_t thr;
static int run_rc;

static void *run_main(void *arg)
{
	(void)arg;
	run_rc = tw_backup_run(bk);
	return NULL;
}

/* A backup with `buffers` initial buffers that may grow to `max`. */
/* The storage the next backup started uses (NULL: the system calls), and its journal's
 * capacity (0: the default). */
static struct tstorage *storage;
static uint32_t meta_cap;
static struct tclock *clock_seam; /* the fence hold's clock (NULL: the system's) */

static void start_pool(unsigned buffers, unsigned max, unsigned limit)
{
	struct tw_backup_config cfg;
	int rc;

	tw_backup_config_init(&cfg);
	cfg.provider = prov;
	cfg.dir = dir;
	cfg.buffers = buffers;
	cfg.max_buffers = max;
	cfg.buffer_size = BUF;
	cfg.unflushed_limit = limit;
	cfg.node_id = 77;
	rc = tw__backup_open_on(&cfg, &(struct tw__backup_opts){
					storage ? &storage->ops : NULL, meta_cap,
					clock_seam ? &clock_seam->ops : NULL }, &bk, NULL, 0);
	TAP_REQUIRE(rc == 0, "tw_backup_open: %s", tw_strerror(rc));
	TAP_REQUIRE(pthread_create(&thr, NULL, run_main, NULL) == 0, "thread");
}

/* A fixed pool of `buffers` (no growth). */
static void start(unsigned buffers, unsigned limit)
{
	start_pool(buffers, buffers, limit);
}

/* Stop the progress thread; optionally flush everything (battery case); close. */
static void stop(bool flush)
{
	tw_backup_stop(bk);
	pthread_join(thr, NULL);
	is_int(run_rc, 0, "tw_backup_run returned 0 after tw_backup_stop");
	if (flush)
		is_int(tw_backup_flush_all(bk), 0, "tw_backup_flush_all");
	tw_backup_close(bk);
	bk = NULL;
}

static void conn(struct twc *c)
{
	int rc = twc_connect(c, prov, tw_backup_listen_addr(bk));

	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	TAP_REQUIRE(twc_seg_init(c, BUF) == 0, "seg init");
}

static void test_basic(void)
{
	struct twc c;
	struct tw_rpc_seg_meta scanned;
	struct twc_info li[8];
	struct twc_stats s0, s1;
	struct tw_backup_stats bs;
	int rc, n;

	start(4, 0);
	conn(&c);
	is_int(twc_open(&c, 10, 0, 1, 1, BUF), 0, "open log 10 seg 0");
	ok(c.rk.len == BUF, "rkey covers the requested length");
	TAP_REQUIRE(twc_stats(&c, &s0) == 0, "stats");
	for (int i = 0; i < 200; i++) {
		rc = twc_write(&c, 1 + (unsigned)(i % 3), 100, (uint32_t)i);
		if (rc) {
			ok(0, "write %d: %s", i, tw_strerror(rc));
			break;
		}
	}
	TAP_REQUIRE(twc_stats(&c, &s1) == 0, "stats");
	is_int((long long)(s1.handler_calls_non_stats - s0.handler_calls_non_stats), 0,
	       "200 replicated writes: 0 handler invocations on the backup");
	tap_diag("backup cq_entries +%llu, cq_polls +%llu over 200 writes",
		 (unsigned long long)(s1.cq_entries - s0.cq_entries),
		 (unsigned long long)(s1.cq_polls - s0.cq_polls));

	n = twc_list(&c, 10, false, li, 8);
	ok(n == 1 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
	   li[0].valid_len == c.w.pos && li[0].checksum == c.w.last_checksum,
	   "list scans the open buffer: valid_len %llu == %zu",
	   n > 0 ? (unsigned long long)li[0].valid_len : 0ull, c.w.pos);
	is_int(twc_close_seg(&c, UINT64_MAX, 0, &scanned), 0, "close with matching metadata");
	ok(scanned.offset == c.w.pos, "close reply carries the scanned offset");
	/* The flush finishes asynchronously: ask until the listing says flushed (each ask is a
	 * round trip through the progress thread; bounded by a deadline, no sleeping). */
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;) {
		n = twc_list(&c, 10, false, li, 8);
		if (n == 1 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED)
			break;
	}
	ok(n == 1 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
	   li[0].entries > 0, "closed segment is flushed");
	{
		char path[512];
		struct stat st;

		snprintf(path, sizeof(path), "%s/000000000000000a-0000000000000000.twseg", dir);
		ok(stat(path, &st) == 0 && (size_t)st.st_size == SEGFILE_DATA_OFF +
		   (c.w.pos + SEGFILE_BLOCK - 1) / SEGFILE_BLOCK * SEGFILE_BLOCK,
		   "segment file has the header block + valid bytes padded to a block");
	}
	is_int(twc_close_seg(&c, UINT64_MAX, 0, NULL), 0, "retried close of the same segment: OK");

	/* read grant of a flushed segment: loaded, then read back one-sided */
	{
		struct tw_rpc_read_grant g;
		uint8_t *dst = tw__fab_alloc(BUF);
		struct tw_mr *mr = NULL;

		rc = tw__rpc_read_segment(c.rpc, 1, 10, 0, &g);
		is_int(rc, 0, "read grant of the flushed segment");
		ok(g.meta.offset == c.w.pos && g.meta.checksum == c.w.last_checksum,
		   "grant meta: valid length and checksum");
		TAP_REQUIRE(dst && tw__mr_reg(c.fab, dst, BUF, TW_MR_READ_DST, &mr) == 0, "dst");
		if (rc == 0) {
			rc = twc_read(&c, &g.rkey, 0, (size_t)g.meta.offset, dst, mr);
			is_int(rc, 0, "one-sided read of the loaded segment");
			ok(rc == 0 && memcmp(dst, c.seg, c.w.pos) == 0,
			   "read-back bytes equal what the primary wrote");
		}
		tw__mr_close(mr);
		is_int(tw__rpc_release_segment(c.rpc, 1, 10, 0), 0, "release the grant");
		is_int(tw__rpc_release_segment(c.rpc, 1, 10, 0), -TW_ENOTFOUND,
		       "second release: NOT_FOUND");
		tw__fab_free(dst, BUF);
	}

	tw_backup_get_stats(bk, &bs);
	{
		uint64_t calls[TW_BACKUP_RPC_KINDS];

		tw_backup_get_rpc_calls(bk, calls, TW_BACKUP_RPC_KINDS);
		ok(calls[TW_BACKUP_RPC_OPEN] == 1 && calls[TW_BACKUP_RPC_CLOSE] == 2,
		   "in-process stats count handler calls per kind (open %llu, close %llu)",
		   (unsigned long long)calls[TW_BACKUP_RPC_OPEN],
		   (unsigned long long)calls[TW_BACKUP_RPC_CLOSE]);
	}
	ok(bs.flushes >= 1 && bs.bytes_flushed >= c.w.pos, "flush counted");
	twc_close(&c);
	stop(false);
}

static void test_admission_and_validation(void)
{
	struct twc c, d;
	struct tw_rpc_seg_meta scanned;
	struct tw_rpc_seg_meta m;
	struct tw_rkey rk;
	int rc;

	start(3, 2); /* 3 buffers, at most 2 unflushed */
	conn(&c);
	conn(&d);
	is_int(twc_open(&c, 20, 0, 1, 1, BUF), 0, "open 1");
	is_int(twc_open(&c, 20, 1, 1, 1, BUF), 0, "open 2");
	rc = twc_open(&c, 20, 2, 1, 1, BUF);
	is_int(rc, -TW_EREFUSED, "open beyond the unflushed limit: RESOURCE_EXHAUSTED");
	ok(strstr(tw__rpc_client_errmsg(c.rpc), "unflushed limit") != NULL,
	   "clear message: %s", tw__rpc_client_errmsg(c.rpc));

	/* malformed requests, each answered with the right status */
	m = (struct tw_rpc_seg_meta){ 21, 0, 0, 0 };
	is_int(tw__rpc_open_segment(c.rpc, 1, &m, 1, 0, &rk), -EINVAL, "open length 0: INVALID");
	is_int(tw__rpc_open_segment(c.rpc, 1, &m, 1, BUF + 1, &rk), -EINVAL,
	       "open length > buffer size: INVALID");
	m.offset = 100;
	is_int(tw__rpc_open_segment(c.rpc, 1, &m, 1, 50, &rk), -EINVAL,
	       "open offset past length: INVALID");
	m = (struct tw_rpc_seg_meta){ 99, 0, 0, 0 };
	is_int(tw__rpc_close_segment(c.rpc, 1, &m, 1, NULL), -TW_ENOTFOUND,
	       "close of an unknown log: NOT_FOUND");
	m = (struct tw_rpc_seg_meta){ 20, 0, 0, BUF + 1 };
	is_int(tw__rpc_close_segment(c.rpc, 1, &m, 1, NULL), -EINVAL,
	       "close offset past the buffer: INVALID");
	is_int(twc_open(&c, 20, 0, 1, 0, BUF), -TW_ESTALE, "reopen with an older version: STALE");

	/* checksum mismatch on close: CORRUPT, segment kept and marked */
	c.log_id = 20;
	c.segment_id = 0;
	c.version = 1;
	TAP_REQUIRE(twc_open(&c, 20, 0, 1, 1, BUF) == 0, "reopen (idempotent)");
	TAP_REQUIRE(twc_write(&c, 5, 100, 1) == 0, "write");
	rc = twc_close_seg(&c, c.w.pos, c.w.last_checksum ^ 1, &scanned);
	is_int(rc, -TW_ECORRUPT, "close with a wrong checksum: CORRUPT");
	ok(scanned.offset == c.w.pos, "reply still carries the scan");
	{
		struct twc_info li[4];
		int n = twc_list(&c, 20, false, li, 4);

		ok(n >= 1 && li[0].segment_id == 0 && li[0].corrupt, "listed as corrupt");
	}

	/* epochs: a primary (z) writes segment 1; fence to 5: z's writes fail, epoch-4 requests
	 * are FENCED, the other connection still works */
	{
		struct twc z;
		uint64_t e = 0;

		conn(&z);
		is_int(twc_open(&z, 20, 1, 1, 1, BUF), 0, "zombie-to-be opens segment 1 (again)");
		is_int(twc_write(&z, 2, 100, 5), 0, "and writes");
		is_int(tw__rpc_fence(d.rpc, 20, 5, &e, NULL), 0, "fence log 20 to epoch 5");
		rc = twc_write(&z, 2, 100, 6);
		ok(rc != 0, "the fenced primary's next write fails (%s)", tw_strerror(rc));
		twc_close(&z);

		is_int(tw__rpc_fence(d.rpc, 20, 5, &e, NULL), 0, "fence again, same epoch: OK");
		is_int((long long)e, 5, "fence reply epoch");
		is_int(tw__rpc_fence(d.rpc, 20, 4, &e, NULL), -TW_EFENCED, "fence to an older epoch: FENCED");
		m = (struct tw_rpc_seg_meta){ 20, 1, 0, 0 };
		is_int(tw__rpc_close_segment(d.rpc, 4, &m, 1, NULL), -TW_EFENCED,
		       "close with a stale epoch: FENCED");
		is_int(tw__rpc_set_replica_version(d.rpc, 5, 20, 1, 2), 0, "set version 2");
		is_int(tw__rpc_set_replica_version(d.rpc, 5, 20, 1, 1), -TW_ESTALE,
		       "set an older version: STALE");
	}
	/* the fenced primary's connection (c) was closed by the backup; d keeps working */
	{
		struct twc_stats s;

		is_int(twc_stats(&d, &s), 0, "other connection still served");
		ok(s.buffers_total == 3, "stats: 3 buffers");
	}
	/* free everything of log 20 */
	{
		uint64_t freed = 0;

		is_int(tw__rpc_free_segments(d.rpc, 5, 20, 100, false, &freed), 0, "free log 20");
		is_int((long long)freed, 2, "two segments freed");
	}
	twc_close(&c);
	twc_close(&d);
	stop(false);
}

static void test_pool_exhaustion(void)
{
	struct twc c, bad;
	int rc;

	start(2, 0);
	conn(&c);
	is_int(twc_open(&c, 30, 0, 1, 1, BUF), 0, "open 1 of 2");
	is_int(twc_open(&c, 30, 1, 1, 1, BUF), 0, "open 2 of 2");
	rc = twc_open(&c, 30, 2, 1, 1, BUF);
	is_int(rc, -TW_EREFUSED, "open beyond the pool: RESOURCE_EXHAUSTED");
	ok(strstr(tw__rpc_client_errmsg(c.rpc), "no free buffer") != NULL, "clear message: %s",
	   tw__rpc_client_errmsg(c.rpc));

	/* a peer sending garbage loses its own connection only */
	rc = twc_connect(&bad, prov, tw_backup_listen_addr(bk));
	TAP_REQUIRE(rc == 0, "connect");
	ok(twc_send_garbage(&bad, 64, 0xab),
	   "garbage frame: that connection is closed by the backup");
	twc_close(&bad);
	{
		struct twc_stats s;

		is_int(twc_stats(&c, &s), 0, "the good connection is still served");
		is_int(s.buffers_open, 2, "its buffers are intact");
	}
	twc_close(&c);
	stop(false);
}

/* Growth on demand: 2 initial buffers, cap 5. Five segments open at once (three in grown
 * buffers, written and closed like any other), the sixth refused naming the flag; after the
 * flushes the next opens reuse the pool's buffers without growing past the peak. */
static void test_pool_growth(void)
{
	struct twc c;
	struct tw_backup_stats bs;
	struct twc_stats s;
	struct twc_info li[16];
	uint64_t pos[5];
	uint32_t ck[5];
	int rc, n = 0;

	start_pool(2, 5, 0);
	conn(&c);
	tw_backup_get_stats(bk, &bs);
	ok(bs.buffers == 2 && bs.buffers_max == 5 && bs.buffers_free == 2,
	   "start: 2 buffers of a cap of 5 (%llu, %llu)", (unsigned long long)bs.buffers,
	   (unsigned long long)bs.buffers_max);
	for (unsigned i = 0; i < 5; i++) {
		c.chain_seed = 0x5e0 + i;
		TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg init");
		rc = twc_open(&c, 51, i, 1, 1, BUF);
		is_int(rc, 0, "open %u of 5 (%s)", i + 1, rc ? tw__rpc_client_errmsg(c.rpc) : "");
		for (unsigned k = 0; k < 20 && rc == 0; k++)
			if (twc_write(&c, 2, 300, i * 100 + k) != 0) {
				ok(0, "write %u to segment %u", k, i);
				break;
			}
		pos[i] = c.w.pos;
		ck[i] = c.w.last_checksum;
	}
	tw_backup_get_stats(bk, &bs);
	ok(bs.buffers == 5 && bs.buffers_grown == 3 && bs.buffers_free == 0 &&
	   bs.buffers_open == 5, "the pool grew by 3 to its cap (buffers %llu, grown %llu)",
	   (unsigned long long)bs.buffers, (unsigned long long)bs.buffers_grown);
	is_int(twc_stats(&c, &s), 0, "stats over the wire");
	ok(s.buffers_total == 5 && s.buffers_max == 5, "StatsReply: total 5, max 5");

	rc = twc_open(&c, 51, 5, 1, 1, BUF);
	is_int(rc, -TW_EREFUSED, "open beyond the cap: RESOURCE_EXHAUSTED");
	ok(strstr(tw__rpc_client_errmsg(c.rpc), "no free buffer") &&
	   strstr(tw__rpc_client_errmsg(c.rpc), "--max-buffers 5"),
	   "the refusal names the limit and the flag: %s", tw__rpc_client_errmsg(c.rpc));
	{
		/* A primary refused by its only backup: -TW_ENOBACKUP quotes the backup's reason. */
		struct tw_ctx_config tc;
		struct tw_primary_config pc;
		struct tw_primary *p = NULL;
		const char *addr = tw_backup_listen_addr(bk);
		char err[1024];

		tlog_primary_config(&tc, &pc, prov, &addr, 1, 52);
		pc.replicas = 1;
		pc.segment_size = BUF;
		pc.open_retry_ms = 50;
		rc = tw_primary_open(&tc, &pc, &p, err, sizeof(err));
		is_int(rc, -TW_ENOBACKUP, "a primary's open at the cap: -TW_ENOBACKUP");
		ok(rc && strstr(err, "--max-buffers 5"), "its message carries the backup's: %s",
		   rc ? err : "");
		if (!rc)
			tw_primary_close(p);
	}

	/* Every replica validates at its close, grown buffers included. */
	for (unsigned i = 0; i < 5; i++) {
		c.segment_id = i;
		is_int(twc_close_seg(&c, pos[i], ck[i], NULL), 0, "close segment %u (%llu bytes)",
		       i, (unsigned long long)pos[i]);
	}
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;) {
		int flushed = 0;

		n = twc_list(&c, 51, false, li, 16);
		for (int i = 0; i < n; i++)
			flushed += li[i].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED;
		if (flushed == 5)
			break;
		n = -1;
	}
	is_int(n, 5, "the five segments are flushed");
	tw_backup_get_stats(bk, &bs);
	is_int((long long)bs.buffers_free, 5, "their buffers are free again");

	/* Reuse: five more opens take the freed buffers; the pool stays at its peak. */
	for (unsigned i = 6; i < 11; i++) {
		c.chain_seed = 0x7e0 + i;
		TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg init");
		rc = twc_open(&c, 51, i, 1, 1, BUF);
		if (rc) {
			ok(0, "reopen %u: %s", i, tw__rpc_client_errmsg(c.rpc));
			break;
		}
		TAP_REQUIRE(twc_write(&c, 3, 200, i) == 0, "write");
	}
	tw_backup_get_stats(bk, &bs);
	ok(bs.buffers == 5 && bs.buffers_grown == 3 && bs.buffers_open == 5,
	   "five opens reused freed buffers: still 5 buffers, 3 grown (%llu, %llu)",
	   (unsigned long long)bs.buffers, (unsigned long long)bs.buffers_grown);
	is_int(twc_close_seg(&c, UINT64_MAX, 0, NULL), 0, "a reused buffer's replica validates");
	twc_close(&c);
	stop(false);
}

static void test_battery_and_restart(void)
{
	struct twc c;
	struct twc_info li[8];
	size_t open_len;
	int n;

	start(4, 0);
	conn(&c);
	TAP_REQUIRE(twc_open(&c, 0x40, 0, 3, 1, BUF) == 0, "open closed-to-be");
	TAP_REQUIRE(twc_write(&c, 10, 64, 9) == 0, "write");
	is_int(twc_close_seg(&c, UINT64_MAX, 0, NULL), 0, "close 40/0");
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "new local segment");
	TAP_REQUIRE(twc_open(&c, 0x40, 1, 3, 1, BUF) == 0, "open 40/1");
	TAP_REQUIRE(twc_write(&c, 7, 80, 10) == 0, "write");
	TAP_REQUIRE(twc_write(&c, 3, 80, 11) == 0, "write");
	open_len = c.w.pos;
	{
		uint64_t e;

		is_int(tw__rpc_fence(c.rpc, 0x99, 7, &e, NULL), 0, "fence log 0x99 (no segments here) to 7");
	}
	twc_close(&c);
	stop(true); /* battery: flush the open buffer too */

	/* a corrupt extra file and a leftover tmp file */
	{
		char path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/0000000000000041-0000000000000000.twseg", dir);
		f = fopen(path, "w");
		fputs("this is not a segment file, but long enough to have a header........"
		      "......................................................................",
		      f);
		fclose(f);
		snprintf(path, sizeof(path), "%s/0000000000000040-0000000000000009.twseg.tmp", dir);
		f = fopen(path, "w");
		fputs("partial", f);
		fclose(f);
		/* a spare file a crash left behind (a freed segment's blocks) */
		snprintf(path, sizeof(path), "%s/00000003.twspare", dir);
		f = fopen(path, "w");
		fputs("a freed segment's old bytes", f);
		fclose(f);
	}

	start(4, 0);
	conn(&c);
	n = twc_list(&c, 0x40, false, li, 8);
	ok(n == 2, "restart: both segments of log 0x40 listed (%d)", n);
	if (n == 2) {
		ok(li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED && !li[0].corrupt,
		   "closed segment: flushed");
		ok(li[1].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
		   li[1].valid_len == open_len && li[1].entries == 10 && li[1].epoch == 3,
		   "open-at-shutdown segment: listed open with its scanned length %llu == %zu",
		   (unsigned long long)li[1].valid_len, open_len);
	}
	n = twc_list(&c, 0x41, false, li, 8);
	ok(n == 1 && li[0].corrupt, "corrupt file reported as corrupt, daemon keeps serving");
	{
		char path[512];
		struct stat st;

		snprintf(path, sizeof(path), "%s/0000000000000040-0000000000000009.twseg.tmp", dir);
		ok(stat(path, &st) != 0, "leftover tmp file removed at start");
		snprintf(path, sizeof(path), "%s/00000003.twspare", dir);
		ok(stat(path, &st) != 0, "leftover spare file removed at start");
	}
	{
		struct tw_rpc_read_grant g;

		is_int(tw__rpc_read_segment(c.rpc, 3, 0x40, 1, &g), 0,
		       "read grant of the battery-flushed segment (loaded from disk)");
		ok(g.meta.offset == open_len, "grant length = scanned length");
		is_int(tw__rpc_read_segment(c.rpc, 3, 0x41, 0, &g), -TW_ECORRUPT,
		       "read grant of the corrupt file: CORRUPT");
		is_int(tw__rpc_read_segment(c.rpc, 2, 0x40, 1, &g), -TW_EFENCED,
		       "epoch restored from the files: older epoch FENCED");
	}
	{
		uint64_t e = 0;
		struct tw_rpc_seg_meta m = { 0x99, 0, 0, 0 };
		struct tw_rkey rk;

		is_int(tw__rpc_fence(c.rpc, 0x99, 6, &e, NULL), -TW_EFENCED,
		       "fence survived the restart: an older fence is refused");
		is_int((long long)e, 7, "epoch 7 restored from the epoch file");
		is_int(tw__rpc_open_segment(c.rpc, 6, &m, 1, BUF, &rk), -TW_EFENCED,
		       "an open with the old epoch is FENCED after the restart");
	}
	twc_close(&c);
	stop(false);
}

/* The disk fails: closed buffers are kept (and count against the unflushed limit), opens get
 * refused, nothing is lost; when the disk recovers the buffers are flushed. */
static struct tstorage failing_disk;

static void test_flush_failure(void)
{
	struct twc c;
	struct tw_backup_stats bs;
	struct twc_info li[4];
	int rc, n;

	tstorage_init(&failing_disk, false);
	tstorage_fail(&failing_disk, "fsync", -EIO, -1);
	storage = &failing_disk;
	start(4, 2);
	conn(&c);
	TAP_REQUIRE(twc_open(&c, 50, 0, 1, 1, BUF) == 0, "open");
	TAP_REQUIRE(twc_write(&c, 4, 100, 1) == 0, "write");
	is_int(twc_close_seg(&c, UINT64_MAX, 0, NULL), 0, "close (the flush will fail)");
	/* Ask until the flusher gave up its immediate retries (deadline, no sleep). */
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;) {
		struct twc_stats s;

		twc_stats(&c, &s);
		tw_backup_get_stats(bk, &bs);
		if (bs.flush_errors >= 3)
			break;
	}
	ok(bs.flush_errors >= 3, "flush failures counted (%llu)",
	   (unsigned long long)bs.flush_errors);
	is_int((long long)bs.buffers_closed, 1, "the closed buffer is kept in memory");
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
	TAP_REQUIRE(twc_open(&c, 50, 1, 1, 1, BUF) == 0, "open 2 (unflushed: 2 of 2)");
	rc = twc_open(&c, 50, 2, 1, 1, BUF);
	is_int(rc, -TW_EREFUSED, "with the disk failing the unflushed limit refuses opens");
	n = twc_list(&c, 50, false, li, 4);
	ok(n == 2 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED,
	   "segment 0 listed closed (not flushed)");
	twc_close(&c);
	tw_backup_stop(bk);
	pthread_join(thr, NULL);
	is_int(tw_backup_flush_all(bk), -EIO, "battery flush with the disk still failing: -EIO");
	tstorage_fail(&failing_disk, NULL, 0, 0);
	is_int(tw_backup_flush_all(bk), 0, "disk back: battery flush succeeds");
	tw_backup_get_stats(bk, &bs);
	is_int((long long)(bs.buffers_open + bs.buffers_closed), 1,
	       "closed buffer flushed; the open one stays open in memory");
	tw_backup_close(bk);
	bk = NULL;
	storage = NULL;
	{
		char path[512];
		struct stat st;

		snprintf(path, sizeof(path), "%s/0000000000000032-0000000000000000.twseg", dir);
		ok(stat(path, &st) == 0, "segment 0 is on disk");
		snprintf(path, sizeof(path), "%s/0000000000000032-0000000000000001.twseg", dir);
		ok(stat(path, &st) == 0, "open segment 1 is on disk too (battery flush)");
	}
}

/* The fence hold (TW_FENCE_HOLD_MS) on the clock seam (core/clock.h): a fence from another
 * incarnation is refused while the last fencer's connection is open and was active within the
 * hold, and accepted once the hold has passed; the test moves the backup's clock on instead of
 * waiting 10 s. */
static struct tclock hold_clock;

static void test_fence_hold(void)
{
	const uint64_t ms = 1000000u;
	uint64_t got = 0, owner = 0;
	struct twc a, b;
	int rc;

	tclock_init(&hold_clock);
	clock_seam = &hold_clock;
	start(4, 0);
	conn(&a);
	conn(&b);
	tw__rpc_client_set_incarnation(a.rpc, 0xA1);
	tw__rpc_client_set_incarnation(b.rpc, 0xB2);
	is_int(tw__rpc_fence(a.rpc, 0x81, 2, &got, &owner), 0, "hold: A fences log 0x81 at epoch 2");
	tclock_advance(&hold_clock, (uint64_t)TW_FENCE_HOLD_MS * ms - 1);
	rc = tw__rpc_fence(b.rpc, 0x81, 3, &got, &owner);
	ok(rc == -TW_EFENCED && got == 2 && owner == 0xA1, "hold: B's fence 1 ns before the hold "
	   "ends is refused, A keeps the log (%s, epoch %" PRIu64 ")", tw_strerror(rc), got);
	tclock_advance(&hold_clock, 1);
	rc = tw__rpc_fence(b.rpc, 0x81, 3, &got, &owner);
	ok(rc == 0 && got == 3 && owner == 0xB2, "hold: at TW_FENCE_HOLD_MS of A's silence B's "
	   "fence is accepted (%s, epoch %" PRIu64 ")", tw_strerror(rc), got);
	/* B holds now; A's activity does not extend B's hold, B's own does. */
	tclock_advance(&hold_clock, (uint64_t)TW_FENCE_HOLD_MS * ms / 2);
	is_int(tw__rpc_fence(b.rpc, 0x81, 3, &got, &owner), 0, "hold: B fences again (active)");
	tclock_advance(&hold_clock, (uint64_t)TW_FENCE_HOLD_MS * ms / 2 + 1);
	rc = tw__rpc_fence(a.rpc, 0x81, 4, &got, &owner);
	ok(rc == -TW_EFENCED && got == 3, "hold: measured from B's last request, not its first "
	   "(%s)", tw_strerror(rc));
	twc_close(&a);
	twc_close(&b);
	stop(false);
	clock_seam = NULL;
}

/* The metadata journal's disk fails (the storage seam, backup/storage.h): an open and a fence,
 * each durable before it is answered, are refused with the error and recorded nowhere; the
 * backup keeps serving, and both succeed once the disk is back, and hold after a restart. */
static struct tstorage journal_disk;

static void test_journal_failure(void)
{
	uint64_t got = 0, owner = 0;
	struct twc_info li[4];
	struct twc c;
	int rc;

	tstorage_init(&journal_disk, false);
	storage = &journal_disk;
	start(4, 2);
	conn(&c);
	tstorage_fail(&journal_disk, "write", -EIO, -1);
	rc = twc_open(&c, 0x71, 0, 1, 1, BUF);
	ok(rc < 0 && atomic_load(&journal_disk.failed) == 1, "journal write fails: the open is "
	   "refused (%s)", tw_strerror(rc));
	rc = tw__rpc_fence(c.rpc, 0x72, 3, &got, &owner);
	ok(rc < 0 && atomic_load(&journal_disk.failed) == 2, "journal write fails: the fence is "
	   "refused (%s)", tw_strerror(rc));
	tstorage_fail(&journal_disk, NULL, 0, 0);
	is_int(twc_list(&c, 0x71, false, li, 4), 0, "the refused open left no segment");
	is_int(twc_open(&c, 0x71, 0, 1, 1, BUF), 0, "disk back: the open succeeds");
	is_int(tw__rpc_fence(c.rpc, 0x72, 3, &got, &owner), 0, "disk back: the fence succeeds");
	twc_close(&c);
	stop(false);
	storage = NULL;
	start(4, 2);
	conn(&c);
	is_int(tw__rpc_fence(c.rpc, 0x72, 2, &got, &owner), -TW_EFENCED,
	       "after a restart the fence holds (an older one is refused)");
	is_int(twc_list(&c, 0x71, false, li, 4), 1, "and the open is recorded (1 segment listed)");
	twc_close(&c);
	stop(false);
}

/* The storage directory refuses O_DIRECT (the storage seam plays the file system): every
 * segment is still flushed (buffered), and the backup says so in one info line, not one per
 * file. */
static atomic_int direct_lines;

static void count_sink(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "O_DIRECT"))
		atomic_fetch_add(&direct_lines, 1);
	fprintf(stderr, "# [%d] %s\n", (int)level, msg);
}

static struct tstorage refuse_direct;

static void test_direct_refused(void)
{
	struct twc c;
	struct twc_info li[4];
	int n = 0;

	atomic_store(&direct_lines, 0);
	tstorage_init(&refuse_direct, false);
	tstorage_fail(&refuse_direct, "direct", -EINVAL, -1);
	storage = &refuse_direct;
	start(4, 0);
	conn(&c);
	for (uint64_t seg = 0; seg < 3; seg++) {
		TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
		TAP_REQUIRE(twc_open(&c, 0x61, seg, 1, 1, BUF) == 0, "open %llu",
			    (unsigned long long)seg);
		TAP_REQUIRE(twc_write(&c, 3, 100, (uint32_t)seg) == 0, "write");
		TAP_REQUIRE(twc_close_seg(&c, UINT64_MAX, 0, NULL) == 0, "close");
	}
	/* Ask until all three are flushed (deadline, no sleep). */
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;) {
		n = twc_list(&c, 0x61, false, li, 4);
		if (n == 3 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
		    li[1].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
		    li[2].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED)
			break;
	}
	ok(n == 3 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
	   li[1].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
	   li[2].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED,
	   "O_DIRECT refused: the three closed segments are flushed anyway");
	twc_close(&c);
	stop(false);
	storage = NULL;
	is_int(atomic_load(&direct_lines), 1, "one log line about O_DIRECT for three files");
	{
		char name[SEGFILE_NAME_MAX];
		struct segfile_hdr h;
		int dfd = open(dir, O_RDONLY | O_DIRECTORY);
		int bad = 0;

		for (uint64_t seg = 0; seg < 3; seg++) {
			tw__segfile_name(0x61, seg, name, sizeof(name));
			if (tw__segfile_verify(dfd, name, &h) != 0 || h.entries != 3)
				bad++;
		}
		close(dfd);
		is_int(bad, 0, "the buffered files verify");
	}
}

/* Wait (up to 10 s) for segment 0 of `log` to be flushed: the flusher reports it in listings. */
static int wait_flushed(struct twc *c, uint64_t log)
{
	struct twc_info li[4];

	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;)
		if (twc_list(c, log, false, li, 4) == 1 &&
		    li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED)
			return 0;
	return -ETIMEDOUT;
}

/* A deleted log whose file could not be removed must not come back after the metadata journal
 * was compacted and the backup restarted (the compacted journal keeps the delete). */
static struct tstorage remove_disk;

static void test_delete_survives_compaction(void)
{
	uint64_t got = 0, owner = 0, freed = 0;
	struct twc_info li[4];
	struct twc c;
	char path[512];
	struct stat st;
	int n;

	char saved[sizeof(dir)];

	/* A fresh directory: an existing journal keeps the capacity it was created with. */
	memcpy(saved, dir, sizeof(dir));
	TAP_REQUIRE(strlen(saved) + 10 < sizeof(dir), "dir name");
	snprintf(dir, sizeof(dir), "%s/compact", saved);
	TAP_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	meta_cap = 32; /* records: compaction after a few dozen fences */
	snprintf(path, sizeof(path), "%s/000000000000005a-0000000000000000.twseg", dir);
	tstorage_init(&remove_disk, false);
	storage = &remove_disk;
	start(4, 2);
	conn(&c);
	TAP_REQUIRE(twc_open(&c, 90, 0, 1, 1, BUF) == 0, "open log 90");
	TAP_REQUIRE(twc_write(&c, 4, 100, 1) == 0, "write");
	TAP_REQUIRE(twc_close_seg(&c, UINT64_MAX, 0, NULL) == 0, "close");
	TAP_REQUIRE(wait_flushed(&c, 90) == 0, "flushed");
	TAP_REQUIRE(stat(path, &st) == 0, "segment 0 of log 90 flushed to %s", path);
	TAP_REQUIRE(tw__rpc_fence(c.rpc, 90, 2, &got, &owner) == 0, "fence log 90 at epoch 2");
	/* The flusher frees a file by renaming it to a spare (tw__segfile_recycle): the next
	 * rename, that one, fails; the journal's compaction below renames again and succeeds. */
	tstorage_fail(&remove_disk, "rename", -EIO, 1);
	is_int(tw__rpc_free_segments(c.rpc, 2, 90, 0, true, &freed), 0,
	       "delete log 90 (its file removal fails)");
	for (uint64_t log = 1000; log < 1000 + 2 * 32; log++)
		TAP_REQUIRE(tw__rpc_fence(c.rpc, log, 1, &got, &owner) == 0, "fence %llu",
			    (unsigned long long)log);
	ok(stat(path, &st) == 0, "after 64 more journal records (a compaction), the file of the "
	   "deleted log is still there");
	twc_close(&c);
	stop(false);
	storage = NULL;
	start(4, 2);
	conn(&c);
	n = twc_list(&c, 90, true, li, 4);
	is_int(n, 0, "after the restart the deleted log lists no segment");
	ok(stat(path, &st) != 0 && errno == ENOENT, "and its file was removed at the restart");
	twc_close(&c);
	stop(false);
	meta_cap = 0;
	memcpy(dir, saved, sizeof(dir));
}

/* The spare files are counted: a deleted log's file is kept (spares_kept), the next segment
 * flushed is written over it (spares_reused), and the counters reach the Stats RPC. */
static void test_spares_counted(void)
{
	uint64_t got = 0, owner = 0, freed = 0;
	struct tw_backup_stats bs = { 0 };
	struct twc_stats ts;
	struct twc c;
	char saved[sizeof(dir)];

	memcpy(saved, dir, sizeof(dir));
	TAP_REQUIRE(strlen(saved) + 10 < sizeof(dir), "dir name");
	snprintf(dir, sizeof(dir), "%s/spares", saved);
	TAP_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	start(4, 2);
	conn(&c);
	tw_backup_get_stats(bk, &bs);
	ok(bs.spares_kept == 0 && bs.spares_reused == 0, "a new backup counts no spare file");
	TAP_REQUIRE(twc_open(&c, 93, 0, 1, 1, BUF) == 0 && twc_write(&c, 4, 100, 1) == 0 &&
		    twc_close_seg(&c, UINT64_MAX, 0, NULL) == 0, "log 93: a segment written, closed");
	TAP_REQUIRE(wait_flushed(&c, 93) == 0, "and flushed");
	TAP_REQUIRE(tw__rpc_fence(c.rpc, 93, 2, &got, &owner) == 0, "fence log 93 at epoch 2");
	is_int(tw__rpc_free_segments(c.rpc, 2, 93, 0, true, &freed), 0, "delete log 93");
	/* The flusher frees the file after the reply: poll the counter it reports. */
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end && !bs.spares_kept;)
		tw_backup_get_stats(bk, &bs);
	ok(bs.spares_kept == 1 && bs.spares_reused == 0, "its file kept as a spare (kept %" PRIu64
	   ", reused %" PRIu64 ")", bs.spares_kept, bs.spares_reused);
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0 && twc_open(&c, 94, 0, 1, 1, BUF) == 0 &&
		    twc_write(&c, 4, 100, 2) == 0 &&
		    twc_close_seg(&c, UINT64_MAX, 0, NULL) == 0, "log 94: a segment written, closed");
	TAP_REQUIRE(wait_flushed(&c, 94) == 0, "and flushed");
	tw_backup_get_stats(bk, &bs);
	ok(bs.spares_kept == 1 && bs.spares_reused == 1, "its file written over the spare (kept %"
	   PRIu64 ", reused %" PRIu64 ")", bs.spares_kept, bs.spares_reused);
	is_int(twc_stats(&c, &ts), 0, "Stats RPC");
	ok(ts.spares_kept == 1 && ts.spares_reused == 1, "the Stats RPC's message carries them");
	twc_close(&c);
	stop(false);
	memcpy(dir, saved, sizeof(dir));
}

/* An epoch above TW_EPOCH_MAX in the journal makes its log unavailable, not the backup, and a
 * compaction of the journal keeps it so (it must not be dropped: a fence never goes back). */
static void test_bad_epoch_survives_compaction(void)
{
	struct metalog_rec rec = { METALOG_OWNER, 77, UINT64_MAX, 0, 0 };
	uint64_t got = 0, owner = 0;
	char saved[sizeof(dir)], why[256];
	struct metalog ml;
	struct twc c;
	int dfd, rc;

	memcpy(saved, dir, sizeof(dir));
	TAP_REQUIRE(strlen(saved) + sizeof("/badepoch") <= sizeof(dir), "dir name");
	memcpy(dir + strlen(saved), "/badepoch", sizeof("/badepoch"));
	TAP_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	meta_cap = 32;
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	TAP_REQUIRE(dfd >= 0 && tw__metalog_open(&ml, NULL, dfd, 32, NULL, NULL, why, sizeof(why)) == 0 &&
		    tw__metalog_append(&ml, &rec) == 0, "a journal with epoch 2^64-1 for log 77");
	tw__metalog_close(&ml);
	close(dfd);
	start(2, 0);
	conn(&c);
	rc = tw__rpc_fence(c.rpc, 77, 5, &got, &owner);
	ok(rc == -TW_ECORRUPT && strstr(tw__rpc_client_errmsg(c.rpc), "unavailable"),
	   "a fence of log 77 is refused: %s", tw__rpc_client_errmsg(c.rpc));
	is_int(tw__rpc_fence(c.rpc, 78, 5, &got, &owner), 0, "log 78 is fenced");
	for (uint64_t log = 1000; log < 1000 + 2 * 32; log++)
		TAP_REQUIRE(tw__rpc_fence(c.rpc, log, 1, &got, &owner) == 0, "fence %llu",
			    (unsigned long long)log);
	twc_close(&c);
	stop(false);
	start(2, 0);
	conn(&c);
	rc = tw__rpc_fence(c.rpc, 77, 5, &got, &owner);
	ok(rc == -TW_ECORRUPT, "after a compaction and a restart, log 77 is still refused (%s)",
	   tw_strerror(rc));
	rc = tw__rpc_fence(c.rpc, 78, 5, &got, &owner);
	ok(rc == 0 && got == 5, "and log 78 kept its epoch 5 (%s)", tw_strerror(rc));
	twc_close(&c);
	stop(false);
	meta_cap = 0;
	memcpy(dir, saved, sizeof(dir));
}

/*
 * RecoveredOffset with repair bytes (protocol 1.3): the bytes of a write this copy never got,
 * made by appending to the client's writer without sending. A piece that would leave a gap
 * after what the copy holds, or an offset past the copy, is refused and changes nothing;
 * pieces that follow on complete it, an earlier piece leaves it open, the last one closes it at
 * the offset (the close walk verifies the completed bytes).
 */
static void test_repair_pieces(void)
{
	uint8_t payload[100];
	struct twc_info li[2];
	struct tw_rpc_seg_meta m;
	struct twc c;
	size_t have, off, wlen;
	int n;

	start(2, 0);
	conn(&c);
	TAP_REQUIRE(twc_open(&c, 0x70, 0, 1, 1, BUF) == 0, "open");
	TAP_REQUIRE(twc_write(&c, 3, 100, 5) == 0, "write");
	have = c.w.pos;
	for (unsigned i = 0; i < 40; i++) {
		twc_fill(payload, sizeof(payload), 6, i);
		TAP_REQUIRE(tw_log_writer_append(&c.w, payload, sizeof(payload), NULL) == 0, "append");
	}
	TAP_REQUIRE(tw_log_writer_seal(&c.w, &off, &wlen) == 0 && off == have, "seal");
	m = (struct tw_rpc_seg_meta){ 0x70, 0, c.w.last_checksum, c.w.pos };
	is_int(tw__rpc_recovered_repair(c.rpc, 1, &m, 1, have + 1, c.seg + have + 1, 100),
	       -EINVAL, "a piece that leaves a gap is refused (%s)", tw__rpc_client_errmsg(c.rpc));
	m.offset = BUF + 8;
	is_int(tw__rpc_recovered_repair(c.rpc, 1, &m, 1, have, c.seg + have, 100), -EINVAL,
	       "an offset past the copy is refused (%s)", tw__rpc_client_errmsg(c.rpc));
	m.offset = c.w.pos;
	n = twc_list(&c, 0x70, false, li, 2);
	ok(n == 1 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
	   li[0].valid_len == have, "after the refusals the copy is open with its %zu bytes", have);
	is_int(tw__rpc_recovered_repair(c.rpc, 1, &m, 1, have - 8, c.seg + have - 8, wlen / 2 + 8),
	       0, "a first piece (overlapping the copy's end by 8 bytes) is stored");
	n = twc_list(&c, 0x70, false, li, 2);
	ok(n == 1 && li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN,
	   "the copy stays open after a first piece");
	is_int(tw__rpc_recovered_repair(c.rpc, 1, &m, 1, have + wlen / 2, c.seg + have + wlen / 2,
					wlen - wlen / 2),
	       0, "the last piece closes the copy");
	n = twc_list(&c, 0x70, false, li, 2);
	ok(n == 1 && li[0].state != TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
	   li[0].valid_len == c.w.pos && li[0].checksum == c.w.last_checksum,
	   "closed at the recovered %zu bytes with the writer's checksum (listed %llu)", c.w.pos,
	   n == 1 ? (unsigned long long)li[0].valid_len : 0ull);
	twc_close(&c);
	stop(false);
}

/* The stats' names of the RPC kinds (twctl stats prints them): one per kind, in its place. */
static void test_rpc_names(void)
{
	ok(!strcmp(tw_backup_rpc_name(TW_BACKUP_RPC_HANDSHAKE), "handshake"), "name of HANDSHAKE");
	ok(!strcmp(tw_backup_rpc_name(TW_BACKUP_RPC_SET_VERSION), "set-version"),
	   "name of SET_VERSION");
	ok(!strcmp(tw_backup_rpc_name(TW_BACKUP_RPC_RECOVERED), "recovered-offset"),
	   "name of RECOVERED");
	ok(!strcmp(tw_backup_rpc_name(TW_BACKUP_RPC_OTHER), "other"), "name of OTHER");
	ok(!strcmp(tw_backup_rpc_name(TW_BACKUP_RPC_KINDS), "unknown"), "past the last kind");
}

int main(void)
{
	prov = getenv("TW_TEST_PROVIDER");
	if (!prov || !prov[0])
		prov = "mem";
	tmpdir_make(dir, sizeof(dir), NULL, "tw-backup");
	tap_diag("provider %s, dir %s", prov, dir);
	test_rpc_names();
	test_basic();
	test_admission_and_validation();
	test_pool_exhaustion();
	test_pool_growth();
	test_flush_failure();
	test_delete_survives_compaction();
	test_spares_counted();
	test_bad_epoch_survives_compaction();
	test_repair_pieces();
	test_fence_hold();
	tw_diag_set_level(TW_DIAG_INFO);
	tw_diag_set_sink(count_sink, NULL);
	test_direct_refused();
	test_journal_failure();
	tw_diag_set_sink(NULL, NULL);
	rm_tree(dir); /* the next test starts on an empty directory */
	TAP_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	test_battery_and_restart();
	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
