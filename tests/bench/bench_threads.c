/*
 * tests/bench/bench_threads.c — appends from many application threads to one log: an
 * asynchronous-mode primary (TW_PRIMARY_ASYNC) against 3 local twd's, T threads calling
 * tw_primary_append (blocking, "sync") or tw_primary_append_async ("async") for a fixed time.
 * Prints aggregate objects/s per (mode, threads, run) and the min-max range per (mode,
 * threads); docs/benchmarks.md, "Appends from many threads".
 *
 *   TW_BUILD_ROOT=$PWD tests/bench/bench_threads [-p tcp] [-t 1,2,4,8] [-d SECONDS] [-r RUNS]
 *                                                [-s OBJ_BYTES] [-m sync,async]
 *
 * TW_BENCH_BACKUPS=A,B,C uses three running twd's instead of starting its own (so that a
 * profiler attached to this process sees the primary alone).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "core/util.h"
#include "proc.h"
#include "rmtree.h"
#include "tlog.h"

#define NB 3
#define MAXT 64

static const char *prov = "tcp";
static unsigned secs = 3, runs = 3, obj = 100;

struct worker {
	struct tw_primary *p;
	bool async;
	uint64_t deadline_ns;
	uint64_t done;   /* appends accepted */
	int err;
	pthread_t th;
};

static atomic_uint_fast64_t acked, ack_errors;

static void ack_cb(void *arg, int status, uint64_t lsn)
{
	(void)arg;
	(void)lsn;
	if (status)
		atomic_fetch_add_explicit(&ack_errors, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&acked, 1, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t buf[4096];

	memset(buf, 0x5a, sizeof(buf));
	while (tw_now_ns() < w->deadline_ns) {
		/* Check the clock every 64 appends: the clock costs less than an append, yet
		 * not nothing. */
		for (unsigned i = 0; i < 64; i++) {
			int rc = w->async ? tw_primary_append_async(w->p, buf, obj, ack_cb, NULL,
								    NULL)
					  : tw_primary_append(w->p, buf, obj, NULL);

			if (rc < 0) {
				w->err = rc;
				return NULL;
			}
			w->done++;
		}
	}
	return NULL;
}

/* One run: a fresh log, T threads for `secs`, then a flush. Objects acknowledged per second of
 * the whole run (flush included), or a negative number on failure. */
static double run_one(const char *const *addrs, uint64_t log_id, bool async, unsigned t)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct worker w[MAXT];
	uint64_t t0, t1, total = 0;
	char err[1024];
	int rc;

	tlog_primary_config(&tc, &cfg, prov, addrs, NB, log_id);
	cfg.mode = TW_PRIMARY_ASYNC;
	cfg.preopen = true;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "bench_threads: primary open: %s: %s\n", tw_strerror(rc), err);
		return -1;
	}
	atomic_store(&acked, 0);
	atomic_store(&ack_errors, 0);
	t0 = tw_now_ns();
	for (unsigned i = 0; i < t; i++) {
		w[i] = (struct worker){ .p = p, .async = async,
					.deadline_ns = t0 + (uint64_t)secs * 1000000000u };
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i])) {
			perror("pthread_create");
			exit(1);
		}
	}
	for (unsigned i = 0; i < t; i++) {
		pthread_join(w[i].th, NULL);
		total += w[i].done;
		if (w[i].err)
			fprintf(stderr, "bench_threads: thread %u: %s: %s\n", i,
				tw_strerror(w[i].err), tw_primary_errmsg(p));
	}
	rc = tw_primary_flush(p);
	t1 = tw_now_ns();
	if (rc)
		fprintf(stderr, "bench_threads: flush: %s\n", tw_strerror(rc));
	if (async && (atomic_load(&acked) != total || atomic_load(&ack_errors)))
		fprintf(stderr, "bench_threads: %" PRIu64 " appends, %" PRIu64 " acks, %" PRIu64
			" errors\n", total, (uint64_t)atomic_load(&acked),
			(uint64_t)atomic_load(&ack_errors));
	{
		struct tw_primary_stats st;

		tw_primary_get_stats(p, &st);
		printf("# %s, %u threads: %" PRIu64 " writes (%" PRIu64 " sealed by appenders), %"
		       PRIu64 " wake-ups of the progress thread\n", async ? "async" : "sync", t,
		       st.writes, st.appender_seals, st.wakeups);
	}
	tw_primary_close(p);
	return rc ? -1 : (double)total / ((double)(t1 - t0) / 1e9);
}

/* Runs are interleaved (run 0 of every thread count, then run 1, ...) so that a change of the
 * machine's load spreads over all of them; a range per (mode, threads) at the end. */
static int bench(const char *const *addrs, uint64_t log_id, const unsigned *threads,
		 unsigned nthreads, const bool *modes)
{
	double lo[2][16], hi[2][16];
	int bad = 0;

	printf("# provider %s, 3 local twd's, %u B objects, %u s per run, %u runs; objects/s "
	       "acknowledged by 3 backups (aggregate over the threads)\n", prov, obj, secs, runs);
	for (unsigned r = 0; r < runs; r++)
		for (int m = 0; m < 2; m++) {
			if (!modes[m])
				continue;
			for (unsigned k = 0; k < nthreads; k++) {
				double v = run_one(addrs, log_id++, m == 1, threads[k]);

				printf("%s threads=%u run=%u objects/s=%.0f\n", m ? "async" : "sync",
				       threads[k], r, v);
				fflush(stdout);
				bad += v < 0;
				if (r == 0 || v < lo[m][k])
					lo[m][k] = v;
				if (r == 0 || v > hi[m][k])
					hi[m][k] = v;
			}
		}
	for (int m = 0; m < 2; m++)
		for (unsigned k = 0; k < nthreads && modes[m]; k++)
			printf("RANGE %s threads=%u %.0f-%.0f\n", m ? "async" : "sync", threads[k],
			       lo[m][k], hi[m][k]);
	return bad;
}

int main(int argc, char **argv)
{
	char twd[1024], root[128], dirs[NB][256], addr[NB][256];
	const char *addrs[NB];
	struct proc *pr[NB];
	unsigned threads[16] = { 1, 2, 4, 8 }, nthreads = 4;
	bool modes[2] = { true, true }; /* sync, async */
	uint64_t log_id = 0x3e7c00000000000ull | ((uint64_t)getpid() << 16);
	int opt;

	while ((opt = getopt(argc, argv, "p:t:d:r:s:m:h")) != -1) {
		switch (opt) {
		case 'p':
			prov = optarg;
			break;
		case 't': {
			char *s = optarg, *end;

			nthreads = 0;
			while (*s && nthreads < 16) {
				unsigned long v = strtoul(s, &end, 10);

				if (end == s || v == 0 || v > MAXT) {
					fprintf(stderr, "bench_threads: -t %s: counts 1..%d\n", optarg,
						MAXT);
					return 2;
				}
				threads[nthreads++] = (unsigned)v;
				s = *end == ',' ? end + 1 : end;
			}
			break;
		}
		case 'd':
			secs = (unsigned)atoi(optarg);
			break;
		case 'r':
			runs = (unsigned)atoi(optarg);
			break;
		case 's':
			obj = (unsigned)atoi(optarg);
			break;
		case 'm':
			modes[0] = strstr(optarg, "sync") == optarg || strstr(optarg, ",sync");
			modes[1] = strstr(optarg, "async") != NULL;
			break;
		default:
			fprintf(stderr, "usage: bench_threads [-p PROVIDER] [-t 1,2,4,8] [-d SECONDS] "
				"[-r RUNS] [-s OBJ_BYTES] [-m sync,async]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!secs || !runs || !obj || obj > 4096) {
		fprintf(stderr, "bench_threads: -d, -r >= 1; -s 1..4096\n");
		return 2;
	}
	if (getenv("TW_BENCH_BACKUPS")) {
		char *s = getenv("TW_BENCH_BACKUPS");

		for (int b = 0; b < NB; b++) {
			size_t n = strcspn(s, ",");

			snprintf(addr[b], sizeof(addr[b]), "%.*s", (int)n, s);
			addrs[b] = addr[b];
			s += n + (s[n] == ',');
			if (!addr[b][0]) {
				fprintf(stderr, "bench_threads: TW_BENCH_BACKUPS: three addresses\n");
				return 2;
			}
		}
		return bench(addrs, log_id, threads, nthreads, modes) ? 1 : 0;
	}
	if (proc_find_tool("tools/twd", twd, sizeof(twd)) < 0) {
		fprintf(stderr, "bench_threads: tools/twd not found (set TW_BUILD_ROOT)\n");
		return 1;
	}
	snprintf(root, sizeof(root), "/tmp/tw-bench-thr-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	for (int b = 0; b < NB; b++) {
		char *av[] = { twd, (char *)"-p", (char *)prov, (char *)"-d", dirs[b], NULL };
		char line[512];

		snprintf(dirs[b], sizeof(dirs[b]), "%s/b%d", root, b);
		pr[b] = proc_spawn(av, NULL);
		if (!pr[b] || proc_wait_line(pr[b], "ready ", line, sizeof(line), 60000) < 0) {
			fprintf(stderr, "bench_threads: twd did not start\n");
			return 1;
		}
		snprintf(addr[b], sizeof(addr[b]), "%.*s", (int)sizeof(addr[b]) - 1, line + 6);
		addrs[b] = addr[b];
	}
	bench(addrs, log_id, threads, nthreads, modes);
	for (int b = 0; b < NB; b++) {
		proc_kill(pr[b], SIGTERM);
		proc_wait(pr[b], 60000);
		proc_free(pr[b]);
	}
	rm_tree(root);
	return 0;
}
