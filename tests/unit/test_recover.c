/*
 * tests/unit/test_recover.c — tw_recover() end to end over the in-memory fabric: three backups
 * in this process (tw_backup_run on threads), segment copies written by a small client
 * (tests/integration/twd_client.c) so each write can be torn on purpose with tw__mem_inject:
 *   - torn writes: the last write lands whole at one backup, torn at another (PREFIX, CHUNKS
 *     with the first chunk missing, CHUNKS with only a middle chunk) and absent at the third
 *     (FAIL, VANISH); or torn/absent everywhere. The write was never acknowledged (not all
 *     replicas hold it). Recovery yields a consistent log with every acknowledged entry, plus the
 *     last write only where some copy holds it whole; a second recovery gives the same answer.
 *     The first recovery completes the short copies with the bytes they lack (in two pieces for
 *     a long last write), so a third one, without the backup that held the only whole copy,
 *     still gives the same answer.
 *   - the same after every backup was shut down (open copies flushed) and restarted.
 *   - a backup missing from the first recovery comes back with a longer open copy: the second
 *     recovery gives the same answer and cuts that copy to it.
 *   - replica versions: a longer copy with an older version is ignored.
 *   - a copy the backup marked corrupt (close checksum mismatch) is skipped with a warning.
 *   - a missing segment in the middle: the prefix is delivered, -TW_ENOBACKUP.
 *   - the callback stopping the recovery: -ECANCELED.
 *   - a log no backup holds: success with nothing delivered (UBSan: no qsort of a NULL list).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/recovery.h>

#include "tap.h"
#include "tbackup.h"
#include "tlog.h"
#include "twd_client.h"

#define NB 3
#define BUF (64 * 1024)
#define W 10   /* acknowledged writes */
#define PER 3  /* entries per acknowledged write */
#define LAST 4 /* entries in the last (torn) write */
#define LEN 100

static struct tbackups cl;

/* Expected log: writes with seeds, entries per write. */
struct expect {
	uint32_t seed[64];
	unsigned n[64];
	unsigned writes;
	/* progress of the check */
	unsigned w, i;
	uint64_t got, bad;
	char why[160];
};

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct expect *x = arg;
	uint8_t want[LEN];

	while (x->w < x->writes && x->i == x->n[x->w]) {
		x->w++;
		x->i = 0;
	}
	if (x->w == x->writes) {
		if (x->bad++ == 0)
			snprintf(x->why, sizeof(x->why), "entry %" PRIu64 " past the expected log",
				 e->index);
		return 0;
	}
	twc_fill(want, LEN, x->seed[x->w], x->i);
	if (e->len != LEN || memcmp(e->data, want, LEN) != 0) {
		if (x->bad++ == 0)
			snprintf(x->why, sizeof(x->why), "entry %" PRIu64 " (segment %" PRIu64
				 " offset %" PRIu64 ") is not entry %u of write %u", e->index,
				 e->segment_id, e->offset, x->i, x->w);
		return 0;
	}
	x->i++;
	x->got++;
	return 0;
}

static void conn_all(struct twc *c, uint64_t log_id, uint64_t seg, uint64_t version[NB])
{
	for (int i = 0; i < NB; i++) {
		int rc = twc_connect(&c[i], "mem", cl.addrs[i]);

		TAP_REQUIRE(rc == 0, "connect %d: %s", i, tw_strerror(rc));
		TAP_REQUIRE(twc_seg_init(&c[i], BUF) == 0, "seg init");
		rc = twc_open(&c[i], log_id, seg, 0, version ? version[i] : 0, BUF);
		TAP_REQUIRE(rc == 0, "open on %d: %s", i, tw_strerror(rc));
	}
}

static void close_all(struct twc *c)
{
	for (int i = 0; i < NB; i++)
		twc_close(&c[i]);
}

/* `W` acknowledged writes of PER entries to every backup. */
static void write_acked(struct twc *c, struct expect *x)
{
	for (unsigned w = 0; w < W; w++) {
		for (int i = 0; i < NB; i++) {
			int rc = twc_write(&c[i], PER, LEN, 1000 + w);

			TAP_REQUIRE(rc == 0, "write %u to %d: %s", w, i, tw_strerror(rc));
		}
		if (x) {
			x->seed[x->writes] = 1000 + w;
			x->n[x->writes++] = PER;
		}
	}
}

/* Segment 0 of log_id open on every backup (replica versions `version`, NULL: 0) with `W`
 * acknowledged writes of PER entries; x expects them. */
static void acked_log(struct twc *c, uint64_t log_id, uint64_t version[NB], struct expect *x)
{
	memset(x, 0, sizeof(*x));
	conn_all(c, log_id, 0, version);
	write_acked(c, x);
}

static int recover(uint64_t log_id, struct expect *x, struct tw_recover_result *res)
{
	x->w = x->i = 0;
	x->got = x->bad = 0;
	x->why[0] = '\0';
	return tbackup_recover(cl.addrs, NB, log_id, check_cb, x, res);
}

/* Recovery of log_id from every backup delivers exactly the log x expects, intact (x->why names
 * the first entry that was not); res for the caller's own checks. */
static bool recovers_expected(uint64_t log_id, struct expect *x, struct tw_recover_result *res)
{
	uint64_t want = 0;

	for (unsigned w = 0; w < x->writes; w++)
		want += x->n[w];
	return recover(log_id, x, res) == 0 && x->bad == 0 && x->got == want;
}

static const char *kind_name(enum tw_mem_fault_kind k)
{
	switch (k) {
	case TW_MEM_FAULT_NONE: return "whole";
	case TW_MEM_FAULT_PREFIX: return "prefix";
	case TW_MEM_FAULT_CHUNKS: return "chunks";
	case TW_MEM_FAULT_FAIL: return "fail";
	case TW_MEM_FAULT_DROP: return "drop";
	case TW_MEM_FAULT_VANISH: return "vanish";
	case TW_MEM_FAULT_STOP: return "stop";
	}
	return "?";
}

/* The last write: fault f[i] at backup i. */
static void torn_case(uint64_t log_id, const struct tw_mem_fault f[NB], bool expect_last,
		      unsigned last)
{
	struct twc c[NB];
	struct expect x;
	struct tw_recover_result res, res2;
	char desc[96];
	bool whole;
	int rc;

	acked_log(c, log_id, NULL, &x);
	for (int i = 0; i < NB; i++) {
		if (f[i].kind != TW_MEM_FAULT_NONE)
			TAP_REQUIRE(tw__mem_inject(c[i].ch, &f[i]) == 0, "inject");
		rc = twc_write(&c[i], last, LEN, 7777);
		if (f[i].kind == TW_MEM_FAULT_NONE)
			TAP_REQUIRE(rc == 0, "whole write: %s", tw_strerror(rc));
	}
	close_all(c);
	snprintf(desc, sizeof(desc), "%s/%s/%s%s", kind_name(f[0].kind), kind_name(f[1].kind),
		 kind_name(f[2].kind), last > LAST ? " (long last write)" : "");
	if (expect_last) {
		x.seed[x.writes] = 7777;
		x.n[x.writes++] = last;
	}
	whole = recovers_expected(log_id, &x, &res);
	ok(whole,
	   "last write %s: recovered %" PRIu64 " entries, every acknowledged one%s%s%s", desc,
	   x.got, expect_last ? " plus the complete last write" : " and nothing torn",
	   x.bad ? ": " : "", x.bad ? x.why : "");
	ok(res.copies_corrupt == 0 && res.segments == 1, "%s: one segment, no copy corrupt",
	   desc);
	rc = recover(log_id, &x, &res2);
	ok(rc == 0 && x.bad == 0 && x.got == res.entries && res2.epoch > res.epoch,
	   "%s: a second recovery gives the same %" PRIu64 " entries (epoch %" PRIu64 " -> %"
	   PRIu64 ")", desc, x.got, res.epoch, res2.epoch);
	if (expect_last) {
		/* The backups that never got the last write whole, alone: the backup with the
		 * only complete copy is lost after the first recovery delivered that write. */
		const char *rest[NB];
		unsigned n = 0;

		for (int i = 0; i < NB; i++)
			if (f[i].kind != TW_MEM_FAULT_NONE)
				rest[n++] = cl.addrs[i];
		x.w = x.i = 0;
		x.got = x.bad = 0;
		rc = tbackup_recover(rest, n, log_id, check_cb, &x, &res2);
		ok(rc == 0 && x.bad == 0 && x.got == res.entries && res.copies_repaired == n,
		   "%s: the first recovery completed the %u short copies (%" PRIu64 "); without "
		   "the complete copy a recovery still gives its %" PRIu64 " entries (got %" PRIu64
		   ", rc %d)", desc, n, res.copies_repaired, res.entries, x.got, rc);
	}
}

static void test_torn(void)
{
	struct tw_mem_fault whole = { TW_MEM_FAULT_NONE, 0, 0 };
	struct tw_mem_fault prefix = { TW_MEM_FAULT_PREFIX, 200, 0 };
	struct tw_mem_fault no_first = { TW_MEM_FAULT_CHUNKS, 0, ~(uint64_t)1 };
	struct tw_mem_fault middle = { TW_MEM_FAULT_CHUNKS, 0, 1u << 3 };
	struct tw_mem_fault all_but_last = { TW_MEM_FAULT_CHUNKS, 0, 0x7f };
	struct tw_mem_fault fail = { TW_MEM_FAULT_FAIL, 0, 0 };
	struct tw_mem_fault vanish = { TW_MEM_FAULT_VANISH, 0, 0 };

	{
		struct tw_mem_fault f[NB] = { whole, prefix, fail };
		torn_case(0x100, f, true, LAST);
	}
	{
		struct tw_mem_fault f[NB] = { fail, no_first, whole };
		torn_case(0x101, f, true, LAST);
	}
	{
		struct tw_mem_fault f[NB] = { middle, whole, vanish };
		torn_case(0x102, f, true, LAST);
	}
	{
		struct tw_mem_fault f[NB] = { prefix, all_but_last, fail };
		torn_case(0x103, f, false, LAST);
	}
	{
		struct tw_mem_fault f[NB] = { no_first, middle, vanish };
		torn_case(0x104, f, false, LAST);
	}
	{
		/* Longer than one repair piece (32 KiB): the short copies get it in two. */
		struct tw_mem_fault f[NB] = { fail, whole, prefix };
		torn_case(0x105, f, true, 400);
	}
}

/* Every backup shut down (twd's SIGTERM: open buffers written as "open at shutdown") and
 * restarted, the last write whole at one of them only: the recovery loads the short copies from
 * their files, completes and closes them, so the backups without the whole copy give the same
 * log afterwards. */
static void test_restart_flushed(void)
{
	struct tw_mem_fault fail = { TW_MEM_FAULT_FAIL, 0, 0 };
	struct twc c[NB];
	struct expect x;
	struct tw_recover_result res, res2;
	const char *rest[NB - 1] = { NULL };
	bool whole;
	int rc;

	acked_log(c, 0x106, NULL, &x);
	for (int i = 0; i < NB; i++) {
		if (i != 1)
			TAP_REQUIRE(tw__mem_inject(c[i].ch, &fail) == 0, "inject");
		rc = twc_write(&c[i], LAST, LEN, 7777);
		if (i == 1)
			TAP_REQUIRE(rc == 0, "whole write: %s", tw_strerror(rc));
	}
	close_all(c);
	x.seed[x.writes] = 7777;
	x.n[x.writes++] = LAST;
	for (unsigned i = 0; i < NB; i++) {
		tbackup_shutdown(&cl.b[i]);
		tbackup_start(&cl.b[i], cl.root, i, "mem", 16, BUF, 0);
	}
	whole = recovers_expected(0x106, &x, &res);
	ok(whole && res.copies_repaired == 2,
	   "after a restart: recovered %" PRIu64 " entries, the two short copies (flushed while "
	   "open) completed from their files (%" PRIu64 ")%s%s", x.got, res.copies_repaired,
	   x.bad ? ": " : "", x.why);
	rest[0] = cl.addrs[0];
	rest[1] = cl.addrs[2];
	x.w = x.i = 0;
	x.got = x.bad = 0;
	rc = tbackup_recover(rest, NB - 1, 0x106, check_cb, &x, &res2);
	ok(rc == 0 && x.bad == 0 && x.got == res.entries,
	   "without the backup that had the whole copy: the same %" PRIu64 " entries (got %"
	   PRIu64 ", rc %d)", res.entries, x.got, rc);
}

/* A backup that missed the first recovery holds a longer open copy: the second recovery keeps
 * the first one's answer (closed copies win) and cuts that copy to it. */
static void test_late_backup(void)
{
	struct twc c[NB];
	struct expect x;
	struct tw_recover_result res;
	struct tw_recover_config cfg;
	struct twc_info li[4];
	char err[256];
	bool whole;
	int rc, n;

	acked_log(c, 0x500, NULL, &x);
	TAP_REQUIRE(twc_write(&c[2], LAST, LEN, 4444) == 0, "extra write to backup 2 only");
	close_all(c);
	tw_recover_config_init(&cfg);
	cfg.provider = "mem";
	cfg.log_id = 0x500;
	cfg.backups = cl.addrs;
	cfg.n_backups = 2; /* backup 2 unreachable this time */
	x.w = x.i = 0;
	x.got = x.bad = 0;
	rc = tw_recover(&cfg, check_cb, &x, &res, err, sizeof(err));
	ok(rc == 0 && x.bad == 0 && x.got == (uint64_t)W * PER && res.offsets_recorded == 2,
	   "recovery without backup 2: %" PRIu64 " entries, recorded on %" PRIu64 " backups",
	   x.got, res.offsets_recorded);
	whole = recovers_expected(0x500, &x, &res);
	ok(whole,
	   "backup 2 is back with a longer open copy: the closed copies win (%" PRIu64
	   " entries, same answer)", x.got);
	TAP_REQUIRE(twc_connect(&c[0], "mem", cl.addrs[2]) == 0, "connect");
	n = twc_list(&c[0], 0x500, false, li, 4);
	/* Closed, and possibly already flushed by the backup's flusher thread: both are final. */
	ok(n == 1 &&
	   (li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED ||
	    li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED) &&
	   li[0].entries == (uint64_t)W * PER && !li[0].corrupt,
	   "backup 2's copy was cut to the recovered length and closed (%" PRIu64
	   " entries, state %d)", n == 1 ? li[0].entries : 0, n == 1 ? (int)li[0].state : -1);
	twc_close(&c[0]);
}

/* One copy of an acknowledged log is bad, and recovery skips it and counts it: stale, a longer
 * copy with an older replica version (log 0x200); else corrupt, a copy closed with the wrong
 * checksum (log 0x300). */
static void test_bad_copy(bool stale)
{
	uint64_t ver[NB] = { 2, 2, 1 };
	uint64_t log_id = stale ? 0x200 : 0x300;
	struct twc c[NB];
	struct expect x;
	struct tw_recover_result res;
	uint64_t skipped;
	bool whole;

	acked_log(c, log_id, stale ? ver : NULL, &x);
	if (stale) {
		/* The old-version copy got more writes (a primary that lost it kept a stale view). */
		TAP_REQUIRE(twc_write(&c[2], LAST, LEN, 5555) == 0, "stale write");
	} else {
		is_int(twc_close_seg(&c[0], c[0].w.pos, c[0].w.last_checksum ^ 0x5a5a, NULL),
		       -TW_ECORRUPT, "backup 0 marks its copy corrupt (close checksum mismatch)");
		for (int i = 1; i < NB; i++)
			TAP_REQUIRE(twc_close_seg(&c[i], UINT64_MAX, 0, NULL) == 0, "close");
	}
	close_all(c);
	whole = recovers_expected(log_id, &x, &res);
	skipped = stale ? res.copies_stale : res.copies_corrupt;
	ok(whole && skipped == 1, "%s (%" PRIu64 " entries, %" PRIu64 " %s)",
	   stale ? "a longer copy with an older replica version is ignored"
		 : "the corrupt copy is skipped, the log comes from the others",
	   x.got, skipped, stale ? "stale" : "corrupt");
}

static void test_gap_and_cancel(void)
{
	struct twc c;
	struct expect x;
	struct tw_recover_result res;
	struct tw_recover_config cfg;
	char err[256];
	int rc;

	memset(&x, 0, sizeof(x));
	TAP_REQUIRE(twc_connect(&c, "mem", cl.addrs[0]) == 0, "connect");
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
	TAP_REQUIRE(twc_open(&c, 0x400, 0, 0, 0, BUF) == 0, "open 0");
	TAP_REQUIRE(twc_write(&c, PER, LEN, 1000) == 0, "write");
	TAP_REQUIRE(twc_close_seg(&c, UINT64_MAX, 0, NULL) == 0, "close 0");
	x.seed[0] = 1000;
	x.n[0] = PER;
	x.writes = 1;
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
	TAP_REQUIRE(twc_open(&c, 0x400, 2, 0, 0, BUF) == 0, "open 2");
	TAP_REQUIRE(twc_write(&c, PER, LEN, 3000) == 0, "write");
	twc_close(&c);
	rc = recover(0x400, &x, &res);
	/* A hole is found before anything is delivered: never a shorter log, never half a log. */
	ok(rc == -TW_ENOBACKUP && x.got == 0 && x.bad == 0 && res.segments_missing == 1,
	   "segment 1 missing: -TW_ENOBACKUP before delivering anything (%" PRIu64 " entries; "
	   "%s)", x.got, tw_strerror(rc));

	tlog_recover_config(&cfg, "mem", cl.addrs, NB, 0x300);
	rc = tw_recover(&cfg, NULL, NULL, &res, err, sizeof(err));
	ok(rc == 0 && res.entries == (uint64_t)W * PER, "verify-only recovery (no callback): %"
	   PRIu64 " entries", res.entries);
}

static int stop_cb(void *arg, const struct tw_recovered_entry *e)
{
	(void)arg;
	return e->index == 5;
}

static void test_cancel_and_errors(void)
{
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	const char *bad[1] = { "mem://999999" };
	char err[256];
	int rc;

	tlog_recover_config(&cfg, "mem", cl.addrs, NB, 0x300);
	rc = tw_recover(&cfg, stop_cb, NULL, &res, err, sizeof(err));
	ok(rc == -ECANCELED && res.entries == 6, "the callback stops the recovery: -ECANCELED "
	   "after 6 entries (%s)", err);

	cfg.n_backups = 0;
	is_int(tw_recover(&cfg, NULL, NULL, NULL, err, sizeof(err)), -EINVAL, "no backups: -EINVAL");
	cfg.backups = bad;
	cfg.n_backups = 1;
	cfg.connect_timeout_ms = 500;
	rc = tw_recover(&cfg, NULL, NULL, &res, err, sizeof(err));
	ok(rc == -TW_ENOBACKUP, "no backup reachable: -TW_ENOBACKUP (%s)", err);

	cfg.backups = cl.addrs;
	cfg.n_backups = NB;
	cfg.epoch = 50;
	{
		uint64_t ep = 0;
		unsigned fenced = 0;

		rc = tw_admin_fence(&cfg, &ep, &fenced, err, sizeof(err));
		ok(rc == 0 && ep == 50 && fenced == NB, "tw_admin_fence at epoch 50 on all %u "
		   "backups (%s)", fenced, rc ? err : "ok");
	}
	cfg.epoch = 10; /* older than the fence above */
	rc = tw_recover(&cfg, NULL, NULL, &res, err, sizeof(err));
	ok(rc == -TW_EFENCED, "an explicit epoch older than the log's: -TW_EFENCED (%s)", err);
}

/* A log no backup holds: an empty answer (the listing is empty: nothing to sort). */
static void test_unknown_log(void)
{
	struct expect x;
	struct tw_recover_result res;
	int rc;

	memset(&x, 0, sizeof(x));
	rc = recover(0x7e57000000003039ull, &x, &res);
	ok(rc == 0, "recovering a log no backup holds succeeds: %s", tw_strerror(rc));
	ok(res.segments == 0 && res.entries == 0 && res.copies_listed == 0,
	   "and delivers nothing (%" PRIu64 " segments, %" PRIu64 " entries)", res.segments,
	   res.entries);
}

int main(void)
{
	tap_plan(39);
	tbackups_start(&cl, "tw-trec", NB, "mem", 16, BUF);
	test_unknown_log();
	test_torn();
	test_late_backup();
	test_restart_flushed();
	test_bad_copy(true);
	test_bad_copy(false);
	test_gap_and_cancel();
	test_cancel_and_errors();
	tbackups_stop(&cl);
	return tap_exit();
}
