/*
 * tests/unit/test_primary_threads.c — appends from many application threads to one log
 * (docs/primary.md, "Appends from many threads"): an asynchronous-mode primary over the
 * in-memory fabric with three in-process backups, THREADS threads appending at once, most with
 * tw_primary_append_async, every 16th with the blocking tw_primary_append. Small batches and a
 * short pipeline keep the threads in the back-pressure wait (the room queue) most of the time,
 * and small segments make them meet rollovers. Checks: every append acknowledged exactly once,
 * the callbacks in log order, each blocking append returned after its own acknowledgement, and
 * a recovery from the backups yields exactly the appended entries, each thread's in its order.
 * Meant for TSan and ASan as well (meson test -C build-tsan primary_threads).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define NB 3
#define THREADS 8
#define SEG (64u * 1024u)
#define LEN 40u

static unsigned per_thread = 3000;

/* One acknowledgement, as the callback saw it. Written by the progress thread only. */
static uint64_t *ack_lsn;
static uint64_t nacks, ack_errors, ack_disorder;

/* Per append: the lsn it was given, and how many callbacks named it (acked exactly once). */
struct tstate {
	unsigned id;
	struct tw_primary *p;
	uint64_t *lsn;
	int err;
	unsigned blocking, blocking_early;
	pthread_t th;
};

static struct tstate ts[THREADS];

static void fill(uint8_t *b, unsigned t, unsigned i)
{
	b[0] = (uint8_t)t;
	memcpy(b + 1, &i, sizeof(i));
	for (unsigned k = 5; k < LEN; k++)
		b[k] = (uint8_t)(t * 31 + i + k);
}

static void ack_cb(void *arg, int status, uint64_t lsn)
{
	(void)arg;
	if (status) {
		ack_errors++;
		return;
	}
	if (nacks && lsn <= ack_lsn[nacks - 1])
		ack_disorder++;
	if (nacks < (uint64_t)THREADS * per_thread)
		ack_lsn[nacks] = lsn;
	nacks++;
}

static void *worker(void *arg)
{
	struct tstate *t = arg;
	uint8_t b[LEN];

	for (unsigned i = 0; i < per_thread; i++) {
		int rc;

		fill(b, t->id, i);
		if (i % 16 == 15) {
			rc = tw_primary_append(t->p, b, LEN, &t->lsn[i]);
			if (rc == 0) {
				t->blocking++;
				/* Returned after its own acknowledgement, not someone else's. */
				if (tw_primary_acked_lsn(t->p) <= t->lsn[i])
					t->blocking_early++;
			}
		} else {
			rc = tw_primary_append_async(t->p, b, LEN, ack_cb, NULL, &t->lsn[i]);
		}
		if (rc < 0) {
			t->err = rc;
			break;
		}
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct rec_check {
	unsigned next[THREADS];
	uint64_t got, bad;
};

static int rec_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct rec_check *c = arg;
	uint8_t want[LEN];
	const uint8_t *d = e->data;
	unsigned t = e->len == LEN ? d[0] : THREADS;

	c->got++;
	if (t >= THREADS || c->next[t] >= per_thread) {
		c->bad++;
		return 0;
	}
	fill(want, t, c->next[t]);
	if (memcmp(want, d, LEN) != 0)
		c->bad++;
	c->next[t]++;
	return 0;
}

int main(void)
{
	struct tbackups cl;
	const char **addrs = cl.addrs;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tw_primary_stats st;
	uint64_t total, *all, dups = 0, missing = 0, blocking = 0, early = 0;
	char err[512];
	int rc;

	if (getenv("TW_SANITIZER"))
		per_thread = 1000;
	total = (uint64_t)THREADS * per_thread;
	tbackups_start(&cl, "tw-pthreads", NB, "mem", 32, SEG);
	ack_lsn = calloc(total, sizeof(*ack_lsn));
	all = calloc(total, sizeof(*all));
	TAP_REQUIRE(ack_lsn && all, "memory");

	tlog_primary_config(&tc, &cfg, "mem", addrs, NB, 0x7417);
	cfg.segment_size = SEG;
	cfg.mode = TW_PRIMARY_ASYNC;
	cfg.max_batch = 16;   /* the threads meet back-pressure all the time */
	cfg.max_inflight = 2;
	cfg.preopen = true;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "primary open: %s: %s", tw_strerror(rc), err);

	for (unsigned t = 0; t < THREADS; t++) {
		ts[t].id = t;
		ts[t].p = p;
		ts[t].lsn = all + (uint64_t)t * per_thread;
		TAP_REQUIRE(pthread_create(&ts[t].th, NULL, worker, &ts[t]) == 0, "thread");
	}
	for (unsigned t = 0; t < THREADS; t++) {
		pthread_join(ts[t].th, NULL);
		if (ts[t].err)
			tap_diag("thread %u: %s: %s", t, tw_strerror(ts[t].err), tw_primary_errmsg(p));
		blocking += ts[t].blocking;
		early += ts[t].blocking_early;
	}
	for (unsigned t = 0; t < THREADS; t++)
		is_int(ts[t].err, 0, "thread %u: its %u appends accepted", t, per_thread);
	is_int(tw_primary_flush(p), 0, "flush: every append acknowledged by 3 backups");
	tw_primary_get_stats(p, &st);
	tap_diag("%" PRIu64 " appends in %" PRIu64 " writes over %" PRIu64 " segments",
		 st.appends, st.writes, st.segments);
	ok(st.segments >= 3, "rollovers happened under the threads (%" PRIu64 " segments)",
	   st.segments);
	is_int(ack_errors, 0, "no callback reported an error");
	is_int(ack_disorder, 0, "callbacks in log order (strictly increasing lsn)");
	is_int(nacks + blocking, total, "one acknowledgement per append (%" PRIu64 " callbacks + %"
	       PRIu64 " blocking)", nacks, blocking);
	is_int(early, 0, "every blocking append returned after its entry was acknowledged");
	{
		/* Callbacks + blocking returns cover every lsn handed out, each exactly once. */
		uint64_t *acked = calloc(total, sizeof(*acked)), n = 0;

		TAP_REQUIRE(acked, "memory");
		for (uint64_t i = 0; i < nacks && i < total; i++)
			acked[n++] = ack_lsn[i];
		for (unsigned t = 0; t < THREADS; t++)
			for (unsigned i = 15; i < per_thread; i += 16)
				if (n < total)
					acked[n++] = ts[t].lsn[i];
		qsort(all, total, sizeof(*all), cmp_u64);
		qsort(acked, n, sizeof(*acked), cmp_u64);
		for (uint64_t i = 1; i < total; i++)
			dups += all[i] == all[i - 1];
		for (uint64_t i = 0; i < total; i++)
			missing += i >= n || acked[i] != all[i];
		is_int(dups, 0, "every append got its own lsn");
		is_int(missing, 0, "the acknowledged lsns are exactly the appended ones");
		free(acked);
	}
	is_int(tw_primary_close(p), 0, "close");

	{
		struct tw_recover_config rc_cfg;
		struct tw_recover_result res;
		struct rec_check c;
		unsigned complete = 0;

		memset(&c, 0, sizeof(c));
		tlog_recover_config(&rc_cfg, "mem", addrs, NB, 0x7417);
		rc = tw_recover(&rc_cfg, rec_cb, &c, &res, err, sizeof(err));
		is_int(rc, 0, "recovery from the backups (%s)", rc ? err : "ok");
		is_int(c.got, total, "recovered every entry");
		is_int(c.bad, 0, "each thread's entries intact and in its order");
		for (unsigned t = 0; t < THREADS; t++)
			complete += c.next[t] == per_thread;
		is_int(complete, THREADS, "all threads' entries present");
	}
	tbackups_stop(&cl);
	free(ack_lsn);
	free(all);
	tap_done_testing();
	return tap_exit();
}
