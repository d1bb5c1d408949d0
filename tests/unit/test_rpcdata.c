/*
 * tests/unit/test_rpcdata.c — the RPC-replication baseline (TW_DATA_PATH=rpc: the
 * primary's fabric sends its writes as messages, fabric/wmsg.c; the backups' fabric layer checks
 * each sealed write with tw__log_check_write, log/check.h, copies it and replies): the write check
 * (pure), then the data path over the in-memory fabric ("mem") with three in-process backups: synchronous appends (one entry per
 * write, so both paths produce the same bytes) land identically with one-sided writes and with
 * data messages (same buffer bytes, same scan: entries, valid length, checksum); then batched
 * asynchronous appends through the rpc path, closed (the backups' close scans agree) and counted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "core/util.h"
#include "backup/backup_int.h"
#include "log/check.h"
#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define SEG (64u * 1024u)
#define NB 3

static void fill(uint8_t *buf, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seq * 31 + i);
}

static uint32_t len_of(uint64_t seq)
{
	return 1 + (uint32_t)((seq * 37) % 300);
}

/* ------------------------------------------------------------------ pure part */

static void test_check_write(void)
{
	static uint8_t buf[8192];
	struct tw_log_writer w;
	uint8_t payload[300];
	size_t off, len, off2, len2;

	memset(buf, 0, sizeof(buf));
	tw_log_writer_init(&w, buf, sizeof(buf));
	for (uint64_t i = 0; i < 5; i++) {
		fill(payload, len_of(i), i);
		tw_log_writer_append(&w, payload, len_of(i), &off);
	}
	tw_log_writer_seal(&w, &off, &len);
	fill(payload, 40, 9);
	tw_log_writer_append(&w, payload, 40, &off2);
	tw_log_writer_seal(&w, &off2, &len2);
	is_int(tw__log_check_write(buf + off, len), 0, "a sealed write of 5 entries checks");
	is_int(tw__log_check_write(buf + off2, len2), 0, "the next write (chained) checks alone");
	is_int(tw__log_check_write(buf + off, len - 1), -TW_ECORRUPT, "truncated: corrupt");
	is_int(tw__log_check_write(buf + off, len + len2), -TW_ECORRUPT,
	       "two writes: a checksum entry inside is refused");
	is_int(tw__log_check_write(buf + off2, len2 - TW_CKSUM_ENTRY_SIZE), -TW_ECORRUPT,
	       "no checksum entry: corrupt");
	buf[off + TW_ENTRY_HDR_SIZE] ^= 0x10; /* entry 0's payload */
	is_int(tw__log_check_write(buf + off, len), -TW_ECORRUPT, "payload bit flip: corrupt");
}

/* ------------------------------------------------------------------ over "mem" */

enum data_path { DP_ONESIDED, DP_RPC };

static struct tw_primary *open_log_t(const char **addrs, uint64_t log_id, enum data_path dp,
				     unsigned timeout_ms)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	char err[512];
	int rc;

	tlog_primary_config(&tc, &cfg, "mem", addrs, NB, log_id);
	cfg.replicas = NB;
	cfg.segment_size = SEG;
	if (timeout_ms) {
		tc.op_timeout_ms = timeout_ms;
		tc.rpc_timeout_ms = timeout_ms;
		tc.connect_timeout_ms = timeout_ms;
		cfg.open_retry_ms = timeout_ms;
	}
	/* The baseline's switch is the environment, read at the open (docs/api.md). */
	setenv("TW_DATA_PATH", dp == DP_RPC ? "rpc" : "onesided", 1);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	unsetenv("TW_DATA_PATH");
	TAP_REQUIRE(rc == 0, "tw_primary_open (data path %d): %s", (int)dp, err);
	return p;
}

static struct tw_primary *open_log(const char **addrs, uint64_t log_id, enum data_path dp)
{
	return open_log_t(addrs, log_id, dp, 0);
}

static void test_same_bytes(struct tbackup *bk, const char **addrs)
{
	struct tw_primary *a = open_log(addrs, 101, DP_ONESIDED);
	struct tw_primary *r = open_log(addrs, 102, DP_RPC);
	struct tw_primary_stats sa, sr;
	uint8_t payload[300];
	uint64_t last = 0;
	bool same = true, scans = true;
	unsigned compared = 0;
	int rc = 0;

	for (uint64_t i = 0; i < 1200 && !rc; i++) {
		uint64_t la, lr;

		fill(payload, len_of(i), i);
		rc = tw_primary_append(a, payload, len_of(i), &la);
		if (!rc)
			rc = tw_primary_append(r, payload, len_of(i), &lr);
		if (!rc && la != lr)
			rc = -EINVAL;
		last = la;
	}
	is_int(rc, 0, "1200 synchronous appends on both paths, same positions");
	/* Look at the open segment on every backup, with the backups paused. */
	for (unsigned k = 0; k < NB; k++)
		tbackup_pause(&bk[k]);
	for (unsigned k = 0; k < NB; k++) {
		uint32_t segid = tw_lsn_to_pos(last).segment;
		struct seg *x = tw__bk_seg_find(bk[k].b, 101, segid);
		struct seg *y = tw__bk_seg_find(bk[k].b, 102, segid);
		struct tw_scan_result s1, s2;

		if (!x || !y || !x->buf || !y->buf || x->length != y->length) {
			same = false;
			continue;
		}
		/* Each segment has its own chain seed, so the checksum entries differ; the data
		 * entries (headers and payloads, at the same offsets) must not. */
		tw_scan_seeded(x->buf->mem, x->length, x->seed, &s1);
		tw_scan_seeded(y->buf->mem, y->length, y->seed, &s2);
		scans &= s1.valid_len == s2.valid_len && s1.entries == s2.entries &&
			 s1.entries > 0 && x->seed != 0 && y->seed != 0;
		if (s1.valid_len == s2.valid_len) {
			struct tw_entry_iter ix = { x->buf->mem, s1.valid_len, 0 };
			struct tw_entry_iter iy = { y->buf->mem, s2.valid_len, 0 };
			const void *px, *py;
			uint32_t lx, ly;
			size_t ox, oy;
			int rx, ry;

			while ((rx = tw_entry_next(&ix, &px, &lx, &ox)) == 1 &&
			       (ry = tw_entry_next(&iy, &py, &ly, &oy)) == 1)
				same &= ox == oy && lx == ly && memcmp(px, py, lx) == 0;
			same &= rx == 0;
		} else {
			same = false;
		}
		compared++;
	}
	ok(same && compared == NB, "open segment: identical data entries on all %u backups", compared);
	ok(scans, "open segment: both scan (each with its seed) to the same entries and valid length");
	for (unsigned k = 0; k < NB; k++)
		tbackup_resume(&bk[k]);
	tw_primary_get_stats(a, &sa);
	tw_primary_get_stats(r, &sr);
	ok(sa.writes == 1200 && sr.writes == 1200 && sa.segments == sr.segments && sr.segments >= 3,
	   "one entry per write on both paths (%llu, %llu writes), %llu segments each",
	   (unsigned long long)sa.writes, (unsigned long long)sr.writes,
	   (unsigned long long)sr.segments);
	is_int(tw_primary_close(a), 0, "one-sided log closed (backups' scans agreed)");
	is_int(tw_primary_close(r), 0, "rpc log closed (backups' scans agreed)");
}

static void test_rpc_batched(struct tbackup *bk, const char **addrs)
{
	struct tw_primary *r = open_log(addrs, 103, DP_RPC);
	struct tw_primary_stats st;
	struct tlog_acks c = { 0 };
	uint8_t payload[300];
	uint64_t entries = 0, n = 4000;
	int rc = 0;

	for (uint64_t i = 0; i < n && !rc; i++) {
		fill(payload, len_of(i), i);
		rc = tw_primary_append_async(r, payload, len_of(i), tlog_ack_cb, &c, NULL);
	}
	if (!rc)
		rc = tw_primary_flush(r);
	is_int(rc, 0, "%llu asynchronous appends over the rpc path", (unsigned long long)n);
	ok(c.n == n && c.errors == 0, "every callback ran, no error (%llu)", (unsigned long long)c.n);
	tw_primary_get_stats(r, &st);
	ok(st.writes < n, "batched: %llu writes for %llu entries", (unsigned long long)st.writes,
	   (unsigned long long)n);
	is_int(tw_primary_close(r), 0, "closed: every segment's close scan agreed");
	tbackup_pause(&bk[0]);
	for (uint64_t s = 0; s < st.segments; s++) {
		struct seg *x = tw__bk_seg_find(bk[0].b, 103, s);

		entries += x ? x->entries : 0;
	}
	tbackup_resume(&bk[0]);
	ok(entries == n, "backup 0 verified %llu entries in %llu segments",
	   (unsigned long long)entries, (unsigned long long)st.segments);
}

/* Which side did the work: the backups' fabric layer placed (and checked) every write of the
 * rpc log and none of the one-sided log's. */
static void test_who_placed(struct tbackup *bk, const char **addrs)
{
	struct tw_primary *a = open_log(addrs, 105, DP_ONESIDED);
	struct tw_primary *r = open_log(addrs, 106, DP_RPC);
	struct tw_fab_stats f0, f1, f2;
	struct tw_primary_stats st;
	uint8_t payload[200];
	int rc = 0;

	fill(payload, sizeof(payload), 3);
	tbackup_pause(&bk[1]);
	tw__fab_get_stats(bk[1].b->fab, &f0);
	tbackup_resume(&bk[1]);
	for (unsigned i = 0; i < 50 && !rc; i++)
		rc = tw_primary_append(a, payload, sizeof(payload), NULL);
	tbackup_pause(&bk[1]);
	tw__fab_get_stats(bk[1].b->fab, &f1);
	tbackup_resume(&bk[1]);
	for (unsigned i = 0; i < 50 && !rc; i++)
		rc = tw_primary_append(r, payload, sizeof(payload), NULL);
	tbackup_pause(&bk[1]);
	tw__fab_get_stats(bk[1].b->fab, &f2);
	tbackup_resume(&bk[1]);
	tw_primary_get_stats(r, &st);
	is_int(rc, 0, "50 appends on each path");
	ok(f1.wmsg_served == f0.wmsg_served, "one-sided: the backup placed no write itself");
	ok(f2.wmsg_served - f1.wmsg_served == st.writes && st.writes == 50 &&
	   f2.wmsg_served_bytes - f1.wmsg_served_bytes >= 50 * sizeof(payload),
	   "rpc: the backup's fabric placed and checked each of the %llu writes (%llu bytes)",
	   (unsigned long long)(f2.wmsg_served - f1.wmsg_served),
	   (unsigned long long)(f2.wmsg_served_bytes - f1.wmsg_served_bytes));
	tw_primary_close(a);
	tw_primary_close(r);
}

/* A backup that stops answering data messages (its thread paused, the channel up): the write
 * fails after op_timeout_ms instead of waiting for ever. */
static void test_rpc_timeout(struct tbackup *bk, const char **addrs)
{
	struct tw_primary *r = open_log_t(addrs, 104, DP_RPC, 300);
	uint8_t payload[100];
	uint64_t t0;
	int rc;

	fill(payload, sizeof(payload), 1);
	is_int(tw_primary_append(r, payload, sizeof(payload), NULL), 0, "append with all backups up");
	tbackup_pause(&bk[2]);
	t0 = tw_now_ns();
	rc = tw_primary_append(r, payload, sizeof(payload), NULL);
	ok(rc < 0 && tw_now_ns() - t0 < 5000000000ull,
	   "backup silent: the append fails in %.2f s (%s)", (double)(tw_now_ns() - t0) / 1e9,
	   tw_strerror(rc));
	tbackup_resume(&bk[2]);
	tw_primary_close(r);
}

/* A TW_DATA_PATH that is neither onesided nor rpc is refused at the open, naming the variable. */
static void test_bad_switch(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char err[512] = "";
	int rc;

	tlog_primary_config(&tc, &cfg, "mem", addrs, NB, 107);
	cfg.replicas = NB;
	cfg.segment_size = SEG;
	setenv("TW_DATA_PATH", "twosided", 1);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	unsetenv("TW_DATA_PATH");
	is_int(rc, -EINVAL, "TW_DATA_PATH=twosided: the open fails with -EINVAL");
	ok(!p && strstr(err, "TW_DATA_PATH=twosided") != NULL, "... saying which setting (%s)", err);
}

int main(void)
{
	struct tbackups cl;

	tap_plan(24);
	test_check_write();
	tbackups_start(&cl, "test_rpcdata", NB, "mem", 32, SEG);
	test_same_bytes(cl.b, cl.addrs);
	test_rpc_batched(cl.b, cl.addrs);
	test_rpc_timeout(cl.b, cl.addrs);
	test_who_placed(cl.b, cl.addrs);
	test_bad_switch(cl.addrs);
	tbackups_stop(&cl);
	return tap_exit();
}
