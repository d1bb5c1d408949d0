/*
 * tests/unit/test_backup_stress.c — the backup's threads under load (meant for TSan): one
 * progress thread, the flusher, and several client threads that each replicate their own log
 * through a small pool (opens get refused and retried), free old segments, take read grants,
 * while the main thread reads tw_backup_get_stats. Then a battery flush and a restart: every
 * segment that was not freed is listed with the right entry count.
 *
 * Provider "mem" (TW_TEST_PROVIDER overrides). TW_LONG=1: more segments.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tailwind/backup.h>

#include "core/util.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

#define BUF (32 * 1024)
#define THREADS 4

static const char *prov;
static char dir[256];
static struct tw_backup *bk;
static atomic_bool clients_done;
static unsigned nsegs = 12;

struct worker {
	pthread_t thr;
	unsigned id;
	int failures;
	unsigned refused;
	unsigned written; /* segments closed */
	unsigned kept_from; /* segments below this were freed */
	char why[256];
};

static void *progress_main(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)tw_backup_run(bk);
}

static void *client_main(void *arg)
{
	struct worker *w = arg;
	struct twc c;
	uint64_t log = 0x100 + w->id;
	int rc;

	rc = twc_connect(&c, prov, tw_backup_listen_addr(bk));
	if (rc) {
		snprintf(w->why, sizeof(w->why), "connect: %s", tw_strerror(rc));
		w->failures++;
		return NULL;
	}
	for (unsigned s = 0; s < nsegs; s++) {
		if (twc_seg_init(&c, BUF) != 0) {
			w->failures++;
			break;
		}
		/* A refused open (every buffer busy) is asked again after one Stats round trip:
		 * the backup's loop runs its flushes meanwhile; no sleep, a 60 s deadline. */
		for (uint64_t end = tw_now_ns() + 60000000000ull;;) {
			struct twc_stats ts;

			rc = twc_open(&c, log, s, 1, 1, BUF);
			if (rc != -TW_EREFUSED || tw_now_ns() > end)
				break;
			w->refused++;
			if (twc_stats(&c, &ts) != 0)
				break;
		}
		if (rc) {
			snprintf(w->why, sizeof(w->why), "open %u: %s", s, tw_strerror(rc));
			w->failures++;
			break;
		}
		for (unsigned k = 0; k < 5 + s % 4; k++) {
			rc = twc_write(&c, 1 + k % 3, 64 + w->id, s * 100 + k);
			if (rc) {
				snprintf(w->why, sizeof(w->why), "write: %s", tw_strerror(rc));
				w->failures++;
				goto out;
			}
		}
		rc = twc_close_seg(&c, UINT64_MAX, 0, NULL);
		if (rc) {
			snprintf(w->why, sizeof(w->why), "close %u: %s", s, tw_strerror(rc));
			w->failures++;
			break;
		}
		w->written++;
		if (s % 5 == 4) {
			uint64_t freed;

			rc = tw__rpc_free_segments(c.rpc, 1, log, s - 2, false, &freed);
			if (rc)
				w->failures++;
			else
				w->kept_from = s - 2;
		}
		if (s % 3 == 1) {
			struct tw_rpc_read_grant g;

			rc = tw__rpc_read_segment(c.rpc, 1, log, s, &g);
			if (rc == 0)
				tw__rpc_release_segment(c.rpc, 1, log, s);
			else if (rc != -TW_EREFUSED)
				w->failures++;
		}
	}
out:
	twc_close(&c);
	return NULL;
}

static void start(void)
{
	struct tw_backup_config cfg;
	int rc;

	tw_backup_config_init(&cfg);
	cfg.provider = prov;
	cfg.dir = dir;
	cfg.buffers = 5;
	cfg.unflushed_limit = 3;
	cfg.buffer_size = BUF;
	rc = tw_backup_open(&cfg, &bk, NULL, 0);
	TAP_REQUIRE(rc == 0, "open: %s", tw_strerror(rc));
}

int main(void)
{
	struct worker w[THREADS];
	pthread_t prog;
	struct tw_backup_stats st;
	unsigned polls = 0;
	void *ret;

	prov = getenv("TW_TEST_PROVIDER");
	if (!prov || !prov[0])
		prov = "mem";
	if (tap_long_mode())
		nsegs = 60;
	tmpdir_make(dir, sizeof(dir), NULL, "tw-bstress");

	start();
	TAP_REQUIRE(pthread_create(&prog, NULL, progress_main, NULL) == 0, "thread");
	for (unsigned i = 0; i < THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		TAP_REQUIRE(pthread_create(&w[i].thr, NULL, client_main, &w[i]) == 0, "thread");
	}
	/* Read the counters concurrently while the clients run. */
	for (unsigned i = 0; i < THREADS; i++) {
		while (pthread_tryjoin_np(w[i].thr, NULL) == EBUSY) {
			tw_backup_get_stats(bk, &st);
			polls++;
			sched_yield();
		}
	}
	atomic_store(&clients_done, true);
	for (unsigned i = 0; i < THREADS; i++) {
		ok(w[i].failures == 0 && w[i].written == nsegs,
		   "client %u: %u segments replicated, %u opens refused and retried%s%s", i,
		   w[i].written, w[i].refused, w[i].why[0] ? ": " : "", w[i].why);
	}
	tw_backup_get_stats(bk, &st);
	{
		uint64_t calls[TW_BACKUP_RPC_KINDS];

		tw_backup_get_rpc_calls(bk, calls, TW_BACKUP_RPC_KINDS);
		ok(calls[TW_BACKUP_RPC_OPEN] >= THREADS * nsegs, "opens counted (%llu)",
		   (unsigned long long)calls[TW_BACKUP_RPC_OPEN]);
	}
	tap_diag("stats read %u times concurrently; %llu flushes, %llu refused",
		 polls, (unsigned long long)st.flushes, (unsigned long long)st.opens_refused);

	tw_backup_stop(bk);
	pthread_join(prog, &ret);
	is_int((int)(intptr_t)ret, 0, "run returned 0");
	is_int(tw_backup_flush_all(bk), 0, "flush_all");
	tw_backup_get_stats(bk, &st);
	is_int((long long)st.buffers_open + (long long)st.buffers_closed, 0,
	       "nothing left unflushed");
	tw_backup_close(bk);

	/* Restart: every kept segment is there, verified. */
	start();
	TAP_REQUIRE(pthread_create(&prog, NULL, progress_main, NULL) == 0, "thread");
	{
		struct twc c;
		struct twc_info li[256];
		int rc = twc_connect(&c, prov, tw_backup_listen_addr(bk));

		TAP_REQUIRE(rc == 0, "connect");
		for (unsigned i = 0; i < THREADS; i++) {
			int n = twc_list(&c, 0x100 + i, false, li, 256);
			bool good = n == (int)(nsegs - w[i].kept_from);

			for (int k = 0; good && k < n; k++)
				good = li[k].segment_id == w[i].kept_from + (unsigned)k &&
				       li[k].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
				       !li[k].corrupt && li[k].entries > 0;
			ok(good, "restart: log %u lists its %d kept segments, flushed and verified",
			   i, n);
		}
		twc_close(&c);
	}
	tw_backup_stop(bk);
	pthread_join(prog, NULL);
	tw_backup_close(bk);
	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
