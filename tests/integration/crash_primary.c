/*
 * tests/integration/crash_primary.c — the primary the crash tests kill: opens log LOG on the
 * given backups (r = number of backups), then appends numbered objects (recover_util.h) with
 * tw_primary_append_async as fast as it can. Every acknowledgement is reported on stdout with one
 * write(2) of "acked N\n" (N = object number) from the callback, so nothing the driver reads is
 * lost in a stdio buffer when the process is SIGKILLed; the driver counts as acknowledged only
 * what it read. Prints "ready" once the log is open.
 *
 * With CRASH_ACK_SHM=PATH in the environment (a file of at least 8 bytes) the acknowledgements
 * go there instead: one atomic store of (highest acknowledged object number + 1) into a shared
 * mapping of the file, no system call on the ack path (so the process spends its time writing,
 * as an unthrottled writer does); the store outlives a SIGKILL.
 *
 * usage: crash_primary PROVIDER LOG_ID SEGMENT_SIZE COUNT ADDR...
 * With COUNT objects appended and acknowledged it prints "done" and closes the log.
 * Exit 1 on any error (message on stderr).
 * Environment (shm_zombie): CRASH_EPOCH (the log's epoch), CRASH_OP_TIMEOUT_MS (the context's
 * op_timeout_ms), CRASH_BURST=N with CRASH_PAUSE_US=U: after every N appends, wait for their
 * acknowledgements (tw_primary_flush), then pause U microseconds (a writer in bursts, for a
 * stop to land in the middle of one or between two).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <tailwind/primary.h>

#include "recover_util.h"
#include "say.h"

static volatile int failed;
static uint64_t *ack_shm; /* CRASH_ACK_SHM's mapping, or NULL */

static void on_ack(void *arg, int status, uint64_t lsn)
{
	(void)lsn;
	if (status) {
		if (!failed)
			fprintf(stderr, "crash_primary: append %" PRIuPTR " failed: %s\n",
				(uintptr_t)arg, tw_strerror(status));
		failed = 1;
		return;
	}
	if (ack_shm) {
		uint64_t n = (uint64_t)(uintptr_t)arg + 1;

		if (n > __atomic_load_n(ack_shm, __ATOMIC_RELAXED))
			__atomic_store_n(ack_shm, n, __ATOMIC_RELEASE);
		return;
	}
	sayf("acked %" PRIuPTR "\n", (uintptr_t)arg);
}

int main(int argc, char **argv)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	uint8_t obj[RT_OBJ];
	uint64_t count, burst = 0;
	unsigned pause_us = 0;
	int rc;

	if (argc < 6) {
		fprintf(stderr, "usage: crash_primary PROVIDER LOG_ID SEGMENT_SIZE COUNT ADDR...\n");
		return 2;
	}
	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	tc.provider = argv[1];
	cfg.log_id = strtoull(argv[2], NULL, 0);
	cfg.segment_size = strtoull(argv[3], NULL, 0);
	count = strtoull(argv[4], NULL, 0);
	tc.backups = (const char *const *)&argv[5];
	tc.n_backups = (size_t)(argc - 5);
	cfg.replicas = (unsigned)tc.n_backups;
	cfg.mode = TW_PRIMARY_ASYNC;
	if (getenv("CRASH_ACK_SHM")) {
		int fd = open(getenv("CRASH_ACK_SHM"), O_RDWR);
		void *m = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE,
						     MAP_SHARED, fd, 0);

		if (m == MAP_FAILED) {
			fprintf(stderr, "crash_primary: CRASH_ACK_SHM %s: %s\n",
				getenv("CRASH_ACK_SHM"), strerror(errno));
			return 1;
		}
		close(fd);
		ack_shm = m;
	}
	if (getenv("CRASH_EPOCH"))
		cfg.epoch = strtoull(getenv("CRASH_EPOCH"), NULL, 0);
	if (getenv("CRASH_OP_TIMEOUT_MS"))
		tc.op_timeout_ms = (unsigned)strtoul(getenv("CRASH_OP_TIMEOUT_MS"), NULL, 0);
	if (getenv("CRASH_BURST"))
		burst = strtoull(getenv("CRASH_BURST"), NULL, 0);
	if (getenv("CRASH_PAUSE_US"))
		pause_us = (unsigned)strtoul(getenv("CRASH_PAUSE_US"), NULL, 0);
	p = say_opened(&tc, &cfg, "crash_primary");
	for (uint64_t seq = 0; seq < count && !failed; seq++) {
		if (burst && seq && seq % burst == 0) {
			rc = tw_primary_flush(p);
			if (rc) {
				fprintf(stderr, "crash_primary: flush before %" PRIu64 ": %s (%s)\n",
					seq, tw_strerror(rc), tw_primary_errmsg(p));
				failed = 1;
				break;
			}
			if (pause_us)
				usleep(pause_us); /* pacing the writer, not waiting for anything */
		}
		rt_fill(obj, seq);
		rc = tw_primary_append_async(p, obj, RT_OBJ, on_ack, (void *)(uintptr_t)seq, NULL);
		if (rc) {
			fprintf(stderr, "crash_primary: append %" PRIu64 ": %s (%s)\n", seq,
				tw_strerror(rc), tw_primary_errmsg(p));
			failed = 1;
			break;
		}
	}
	rc = tw_primary_flush(p);
	if (rc == 0 && !failed)
		say("done\n", 5);
	tw_primary_close(p);
	return failed || rc ? 1 : 0;
}
