/*
 * tests/unit/test_oom_sweep.c — out-of-memory sweep (docs/testing.md). Four backups on threads
 * and the primary and recovery on this thread, over the in-memory fabric. For k = 1, 2, ...
 * the k-th allocation made on this thread fails (tests/unit/alloc_fault.h) during one run of a
 * workload: tw_primary_open, appends across several segment rollovers, tw_primary_close and a
 * tw_recover of the log. For each k: every call returns 0 or an error (never a crash, never a
 * hang: the suite's timeout), a recovery that succeeds delivers every acknowledged entry and
 * nothing else than what was appended, and a recovery afterwards with working allocations does
 * too. The sweep ends at the first k the run does not reach (no failure injected).
 * The backups' own threads are not swept here (test_oom_backup.c fails chosen allocations
 * there). $TW_OOM_FROM=k starts the sweep at k; $TW_OOM_VERBOSE=1 keeps the library's log.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "alloc_fault.h"
#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define NB 4
#define SEG (16u * 1024u)
#define N 40   /* appends per run: about 3 segments of 16 KiB */
#define LEN 1000
#define ASYNC_EVERY 4 /* every 4th append is asynchronous */
#define MAX_K 100000

static struct tbackups cl;

static void fill(uint8_t *buf, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seq * 131 + i * 7);
	memcpy(buf, &seq, sizeof(seq));
}

/* One run's outcome. */
struct run {
	uint64_t log_id;
	unsigned appended; /* appends that returned 0 (async: queued) */
	unsigned acked;    /* entries acknowledged: the prefix 0 .. acked-1 */
	bool ack_gap;      /* an entry acknowledged while an earlier one failed */
	uint64_t lsn[N];
	int state[N];      /* 0 pending, 1 acknowledged, 2 failed */
};

struct check {
	const struct run *r;
	uint64_t got, bad;
	char why[160];
};

static void ack_cb(void *arg, int status, uint64_t lsn)
{
	struct run *r = arg;

	for (unsigned i = 0; i < r->appended; i++)
		if (r->lsn[i] == lsn && r->state[i] == 0)
			r->state[i] = status ? 2 : 1;
}

/* The acknowledged prefix; an acknowledged entry after a failed or pending one is a gap. */
static void count_acked(struct run *r)
{
	unsigned i = 0;

	while (i < r->appended && r->state[i] == 1)
		i++;
	r->acked = i;
	for (; i < r->appended; i++)
		if (r->state[i] == 1)
			r->ack_gap = true;
}

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct check *c = arg;
	uint8_t want[LEN];

	if (e->index >= c->r->appended || e->len != LEN) {
		if (c->bad++ == 0)
			snprintf(c->why, sizeof(c->why), "entry %" PRIu64 " (%u bytes) was never "
				 "appended (%u appends)", e->index, e->len, c->r->appended);
		return 0;
	}
	fill(want, LEN, e->index);
	if (memcmp(e->data, want, LEN) != 0) {
		if (c->bad++ == 0)
			snprintf(c->why, sizeof(c->why), "entry %" PRIu64 " holds other bytes",
				 e->index);
		return 0;
	}
	c->got++;
	return 0;
}

static int recover(const struct run *r, struct check *c, char *err, size_t errlen)
{
	struct tw_recover_config cfg;

	tlog_recover_config(&cfg, "mem", cl.addrs, NB, r->log_id);
	cfg.connect_timeout_ms = 2000;
	cfg.rpc_timeout_ms = 2000;
	cfg.op_timeout_ms = 2000;
	memset(c, 0, sizeof(*c));
	c->r = r;
	return tw_recover(&cfg, check_cb, c, NULL, err, errlen);
}

/* The workload; every call may fail. */
static void workload(struct run *r, int *rec_rc, struct check *rec)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	uint8_t buf[LEN];
	char err[256];
	int rc;

	tlog_primary_config(&tc, &cfg, "mem", cl.addrs, NB, r->log_id);
	cfg.segment_size = SEG;
	cfg.open_retry_ms = 0;
	tc.rpc_timeout_ms = 2000;
	tc.op_timeout_ms = 2000;
	tc.connect_timeout_ms = 2000;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	if (rc == 0) {
		for (unsigned i = 0; i < N; i++) {
			uint64_t lsn;

			fill(buf, LEN, i);
			if (i % ASYNC_EVERY == ASYNC_EVERY - 1) {
				rc = tw_primary_append_async(p, buf, LEN, ack_cb, r, &lsn);
			} else {
				rc = tw_primary_append(p, buf, LEN, &lsn);
				/* Sync: acknowledged on return. */
				if (rc == 0)
					r->state[i] = 1;
			}
			if (rc)
				break;
			r->lsn[i] = lsn;
			r->appended = i + 1;
		}
		tw_primary_close(p); /* waits for every append to be acknowledged or failed */
	}
	count_acked(r);
	*rec_rc = recover(r, rec, err, sizeof(err));
}

static void quiet(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	(void)level;
	(void)msg;
}

int main(void)
{
	unsigned long runs = 0, lost = 0, bad = 0, rec_ok = 0, rec_failed = 0, gaps = 0;
	long k;

	tap_plan(4);
	tbackups_start(&cl, "tw-oom", NB, "mem", 32, SEG);
	if (!getenv("TW_OOM_VERBOSE"))
		tw_diag_set_sink(quiet, NULL);
	tw_af_count_thread(true);
	k = getenv("TW_OOM_FROM") ? atol(getenv("TW_OOM_FROM")) : 1;
	for (; k <= MAX_K; k++) {
		struct run r = { .log_id = 0x00b0000000000000ull + (uint64_t)k };
		struct check rec, after;
		char err[256];
		int rec_rc, rc;
		long injected;

		tw_af_arm(k, 0);
		workload(&r, &rec_rc, &rec);
		injected = tw_af_disarm();

		runs++;
		/* With allocations working again: every acknowledged entry must be there. */
		rc = recover(&r, &after, err, sizeof(err));
		if (r.ack_gap && gaps++ == 0)
			tap_diag("k=%ld: an append was acknowledged after an earlier one failed", k);
		if (rec_rc == 0) {
			rec_ok++;
			if (rec.bad || rec.got < r.acked) {
				if (bad++ < 5)
					tap_diag("k=%ld: the swept recovery delivered %" PRIu64 " good "
						 "entries of %u acknowledged%s%s", k, rec.got, r.acked,
						 rec.bad ? ": " : "", rec.why);
			}
		} else {
			rec_failed++;
		}
		if (r.acked > 0 && (rc != 0 || after.bad || after.got < r.acked)) {
			if (lost++ < 5)
				tap_diag("k=%ld: recovery afterwards: %s (%s), %" PRIu64 " good entries "
					 "of %u acknowledged%s%s", k, tw_strerror(rc), rc ? err : "ok",
					 after.got, r.acked, after.bad ? ": " : "", after.why);
		} else if (after.bad && lost++ < 5) {
			tap_diag("k=%ld: recovery afterwards: %s", k, after.why);
		}
		if (injected == 0) {
			if (r.acked != N || rec_rc != 0)
				tap_diag("the run without an injected failure: %u of %d acknowledged, "
					 "recovery %s", r.acked, N, tw_strerror(rec_rc));
			break;
		}
	}
	tw_af_count_thread(false);
	tw_diag_set_sink(NULL, NULL);
	tap_diag("%lu runs: the swept recovery succeeded in %lu, failed in %lu", runs, rec_ok,
		 rec_failed);
	ok(k <= MAX_K && runs > 50, "the sweep reached a run with no allocation failing "
	   "(%lu runs, one failed allocation each before it)", runs);
	ok(lost == 0, "no acknowledged entry lost in any run (recovered afterwards): %lu bad runs",
	   lost);
	ok(bad == 0, "every swept recovery that succeeded delivered all acknowledged entries and "
	   "only appended ones: %lu bad", bad);
	ok(gaps == 0, "acknowledgements stay in order under allocation failures: %lu runs with a gap",
	   gaps);
	tbackups_stop(&cl);
	return tap_exit();
}
