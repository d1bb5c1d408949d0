/*
 * tests/unit/test_oom_backup.c — the backup when an allocation of its progress thread fails
 * (tests/unit/alloc_fault.h; docs/testing.md). A backup on a thread over the in-memory fabric,
 * a small client (tests/integration/twd_client.c) writing a segment:
 *   - the flush job of a closed segment cannot be allocated: the buffer must still be flushed
 *     (retried on a later pass), not hold the unflushed limit forever.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/backup.h>

#include "alloc_fault.h"
#include "backup/backup_int.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

#define BUF (64 * 1024)
#define DEADLINE_S 30 /* a bound for a failure, not a timing assert */

static char root[128];

static void *run_main(void *arg)
{
	tw_af_count_thread(true); /* the progress thread's allocations may be failed */
	tw_backup_run(arg);
	return NULL;
}

static struct tw_backup *start(pthread_t *thr)
{
	struct tw_backup_config cfg;
	struct tw_backup *b;
	char dir[192];
	int rc;

	snprintf(dir, sizeof(dir), "%s/b", root);
	tw_backup_config_init(&cfg);
	cfg.provider = "mem";
	cfg.dir = dir;
	cfg.buffers = 4;
	cfg.buffer_size = BUF;
	rc = tw_backup_open(&cfg, &b, NULL, 0);
	TAP_REQUIRE(rc == 0, "tw_backup_open: %s", tw_strerror(rc));
	TAP_REQUIRE(pthread_create(thr, NULL, run_main, b) == 0, "thread");
	return b;
}

static void stop(struct tw_backup *b, pthread_t thr)
{
	tw_backup_stop(b);
	pthread_join(thr, NULL);
	tw_backup_close(b);
}

/* Ask the backup (an RPC wakes its loop) until `flushes` flushes are done or the deadline. */
static bool wait_flushed(struct twc *c, struct tw_backup *b, uint64_t flushes)
{
	time_t end = time(NULL) + DEADLINE_S;
	struct tw_backup_stats st;

	for (;;) {
		struct twc_stats ts;

		tw_backup_get_stats(b, &st);
		if (st.flushes >= flushes && st.buffers_closed == 0)
			return true;
		if (time(NULL) > end)
			break;
		if (twc_stats(c, &ts) != 0) /* the round trip paces the loop: no sleep */
			break;
	}
	tap_diag("after %ds: %" PRIu64 " flushes, %" PRIu64 " closed buffers waiting, %" PRIu64
		 " flush errors", DEADLINE_S, st.flushes, st.buffers_closed, st.flush_errors);
	return false;
}

static void test_flush_job_enomem(void)
{
	pthread_t thr;
	struct tw_backup *b = start(&thr);
	struct twc c;
	long injected;
	int rc;

	rc = twc_connect(&c, "mem", tw_backup_listen_addr(b));
	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg init");
	rc = twc_open(&c, 0x51, 0, 0, 0, BUF);
	TAP_REQUIRE(rc == 0, "open: %s", tw_strerror(rc));
	TAP_REQUIRE(twc_write(&c, 5, 200, 7) == 0, "write");
	/* The first job-sized allocation of the progress thread: the flush job of the close. */
	tw_af_arm(1, sizeof(struct job));
	rc = twc_close_seg(&c, UINT64_MAX, 0, NULL);
	injected = tw_af_disarm();
	ok(rc == 0, "the segment closes although its flush job could not be allocated: %s",
	   tw_strerror(rc));
	is_int(injected, 1, "the flush job's allocation was failed");
	ok(wait_flushed(&c, b, 1), "the closed buffer is flushed later and released");
	twc_close(&c);
	stop(b, thr);
}

int main(void)
{
	tap_plan(3);
	tmpdir_make(root, sizeof(root), NULL, "tw-oomb");
	test_flush_job_enomem();
	tmpdir_remove(root);
	return tap_exit();
}
