/*
 * tools/twbench_engine.c — the primary's append engine alone: appends/s and CPU nanoseconds per
 * append on one core, on a transport that costs (almost) nothing. See docs/benchmarks.md, "The
 * engine alone", and docs/twbench.md.
 *
 * The backups are in this process: r tw_backup instances on the in-memory fabric ("mem",
 * fabric/mem.c), each run by a thread of its own, storing in a scratch directory (removed at
 * exit). On "mem" a one-sided write is a memcpy into the target's registered buffer during the
 * post itself and its completion an event on the initiator's own queue: the target does nothing
 * per write. So what a run costs the primary is its engine (copy into the segment, header, CRC32C,
 * sealing, posting, completions, acknowledgements, callbacks) plus that copy into r buffers.
 *
 * One core: the backups are started first, on any CPU; then the calling thread binds itself to
 * one CPU (--cpu, default the one it runs on) and opens the log, so that the primary's progress
 * thread (async mode) inherits the binding: the application thread and the progress thread share
 * that core. The backups' threads are moved to the other CPUs, if there are any. The primary's CPU is the process's CPU (CLOCK_PROCESS_CPUTIME_ID) less the CPU of
 * the threads that existed before the log was opened other than the calling one (the backups'
 * threads and their flushers), read through their per-thread CPU clocks.
 *
 * --fabric null uses the provider "mem-null" instead: the same fabric, but the write copies
 * nothing; the backups' own threads place the bytes (before any control message they handle),
 * as a NIC would, so what a run costs the primary is its engine alone. For this benchmark only.
 *
 * Only the public API (tailwind/primary.h, tailwind/backup.h); the "mem" and "mem-null"
 * providers are internal to the library but reachable through the provider name.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/common.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "exit.h"

#define MAX_R 8
#define MAX_LIST 8
#define MAX_THREADS 64
#define MAX_RUNS 32
#define MAX_PER_CALL 1024

/* async: the log's progress thread; driven: the caller's calls (sync mode); loop: the same
 * calls from a caller that drives the log from an event loop (tw_primary_wait_prepare), which
 * makes its acknowledged positions demand-driven as in async mode (docs/readers.md); batch:
 * async, the entries appended --per-call at a time with tw_primary_append_batch, as a service
 * appends a burst of requests. */
enum amode { A_ASYNC = 0, A_DRIVEN, A_LOOP, A_BATCH, A_COUNT };
static const char *const amode_names[A_COUNT] = { "async", "driven", "loop", "batch" };

struct eopts {
	unsigned r;
	uint64_t count;
	uint64_t max_bytes;
	uint32_t sizes[MAX_LIST];
	unsigned n_sizes;
	enum amode modes[A_COUNT];
	unsigned n_modes;
	unsigned runs;
	unsigned batch, inflight;
	uint64_t batch_bytes;    /* 0: the library's */
	size_t segment_size;
	unsigned progress_every; /* driven, loop: tw_primary_progress(p, 0) every N appends (0:
				  * never) */
	unsigned per_call;       /* batch: entries per tw_primary_append_batch */
	unsigned buffers;        /* each backup's pool, fixed */
	int cpu;                 /* -1: the CPU the caller runs on; -2: no binding */
	const char *dir;
	const char *fabric;      /* provider: "mem", or "mem-null" (--fabric null) */
	bool json;
};

/* One run's numbers. */
struct eresult {
	enum amode mode;
	uint32_t size;
	unsigned run;
	uint64_t count;
	double secs;
	double appends_per_s;
	double cpu_ns;        /* the primary's CPU per append (all its threads) */
	double app_cpu_ns;    /* the appending thread's CPU per append */
	double bk_cpu_ns;     /* the r backups' threads' CPU per append, all together */
	double cores;         /* the primary's CPU over the wall time: 1.0 is its core, busy */
	double entries_per_write;
	uint64_t writes, wakeups;
	uint64_t appender_seals; /* writes the appending thread sealed itself (async) */
	uint64_t set_acked;      /* SetAcked sent, all replicas (docs/readers.md, "Publishing") */
};

static struct eresult results[MAX_LIST * A_COUNT * MAX_RUNS];
static unsigned n_results;

/* ------------------------------------------------------------------ clocks */

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	if (clock_gettime(c, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CPU clock of thread `tid` of this process: the kernel's encoding of a per-thread
 * CPUCLOCK_SCHED clock (what glibc's pthread_getcpuclockid returns for a pthread_t; here for
 * threads the library started, whose pthread_t we do not hold). */
static clockid_t thread_clock(pid_t tid)
{
	return (clockid_t)((~(unsigned)tid << 3) | 6u);
}

/* The threads that are not the primary's: every thread of the process at the time of the call
 * except the caller. */
struct others {
	pid_t tid[MAX_THREADS];
	unsigned n;
};

static void others_list(struct others *o)
{
	pid_t self = (pid_t)syscall(SYS_gettid);
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	o->n = 0;
	if (!d)
		return;
	while ((e = readdir(d)) != NULL && o->n < MAX_THREADS) {
		pid_t t = (pid_t)atoi(e->d_name);

		if (t > 0 && t != self)
			o->tid[o->n++] = t;
	}
	closedir(d);
}

static uint64_t others_cpu(const struct others *o)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < o->n; i++)
		sum += clock_ns(thread_clock(o->tid[i]));
	return sum;
}

/* The primary's CPU so far: the process less the other threads. */
static uint64_t primary_cpu(const struct others *o)
{
	return clock_ns(CLOCK_PROCESS_CPUTIME_ID) - others_cpu(o);
}

/* ------------------------------------------------------------------ in-process backups */

struct ebackup {
	struct tw_backup *b;
	pthread_t th;
	bool running;
	char dir[600]; /* scratch + "/b" + index */
};

static struct ebackup bk[MAX_R];
static unsigned n_bk;
static char scratch[512];

static void *backup_main(void *arg)
{
	struct ebackup *e = arg;

	(void)tw_backup_run(e->b);
	return NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	(void)remove(path); /* best effort */
	return 0;
}

static void backups_stop(void)
{
	for (unsigned i = 0; i < n_bk; i++) {
		if (bk[i].running) {
			tw_backup_stop(bk[i].b);
			pthread_join(bk[i].th, NULL);
		}
		/* What twd does at SIGTERM: the segments closed last are still being written. */
		(void)tw_backup_flush_all(bk[i].b);
		tw_backup_close(bk[i].b);
	}
	n_bk = 0;
	if (scratch[0])
		nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	scratch[0] = 0;
}

/* A scratch directory under `parent` (default: /dev/shm when it is there, so that the backups'
 * segment files cost no disk, else $TMPDIR or /tmp), and r backups on "mem" storing in it. */
static int backups_start(const struct eopts *o, const char **addrs)
{
	const char *parent = o->dir;
	struct stat st;

	if (!parent)
		parent = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" :
			 getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if ((size_t)snprintf(scratch, sizeof(scratch), "%s/twbench-engine.XXXXXX", parent) >=
		    sizeof(scratch) ||
	    !mkdtemp(scratch)) {
		fprintf(stderr, "twbench-engine: cannot create a directory under %s: %s; give "
				"another with --dir\n", parent, strerror(errno));
		scratch[0] = 0;
		return EXIT_STORAGE;
	}
	for (unsigned i = 0; i < o->r; i++) {
		struct tw_backup_config bc;
		char err[512];
		int rc;

		snprintf(bk[i].dir, sizeof(bk[i].dir), "%s/b%u", scratch, i);
		tw_backup_config_init(&bc);
		bc.provider = o->fabric;
		bc.dir = bk[i].dir;
		/* A fixed pool, touched by the warm-up run: a buffer that grew mid-run would be
		 * first written (page faults) by the primary's own copy into it. */
		bc.buffers = o->buffers;
		bc.max_buffers = o->buffers;
		bc.buffer_size = o->segment_size;
		bc.key_file = "";
		rc = tw_backup_open(&bc, &bk[i].b, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "twbench-engine: cannot open backup %u: %s: %s\n", i,
				tw_strerror(rc), err);
			backups_stop();
			return rc == -ENOMEM || rc == -EAGAIN ? EXIT_MEMORY : EXIT_STORAGE;
		}
		n_bk++;
		if (pthread_create(&bk[i].th, NULL, backup_main, &bk[i]) != 0) {
			fprintf(stderr, "twbench-engine: cannot start a backup thread\n");
			backups_stop();
			return EXIT_FAIL;
		}
		bk[i].running = true;
		addrs[i] = tw_backup_listen_addr(bk[i].b);
	}
	return EXIT_OK;
}

/* Keep the backups' threads (their progress and their flushers, which write every segment to
 * the scratch directory) off the primary's CPU when the process may use another one, so that the
 * core measured is the primary's alone. Best effort. */
static void backups_elsewhere(int cpu)
{
	cpu_set_t all, set;
	struct others o;

	CPU_ZERO(&all);
	for (int i = 0; i < CPU_SETSIZE; i++)
		CPU_SET(i, &all);
	/* The CPUs the process started with: those of a backup thread (started unbound). */
	others_list(&o);
	if (!o.n || sched_getaffinity(o.tid[0], sizeof(all), &all) != 0)
		return;
	set = all;
	CPU_CLR(cpu, &set);
	if (!CPU_COUNT(&set))
		return;
	for (unsigned i = 0; i < o.n; i++)
		(void)sched_setaffinity(o.tid[i], sizeof(set), &set);
}

/* ------------------------------------------------------------------ one run */

struct ack {
	uint64_t done, errors;
	int first_err;
};

/* A batch's callback: its `n` entries are acknowledged (or failed) at once. */
struct batch_ack {
	struct ack *a;
	uint64_t n;
};

static void batch_ack_cb(void *arg, int status, uint64_t lsn)
{
	struct batch_ack *b = arg;

	(void)lsn;
	if (status < 0) {
		b->a->errors += b->n;
		if (!b->a->first_err)
			b->a->first_err = status;
	}
	__atomic_store_n(&b->a->done, b->a->done + b->n, __ATOMIC_RELEASE);
}

static void ack_cb(void *arg, int status, uint64_t lsn)
{
	struct ack *a = arg;

	(void)lsn;
	if (status < 0) {
		a->errors++;
		if (!a->first_err)
			a->first_err = status;
	}
	__atomic_store_n(&a->done, a->done + 1, __ATOMIC_RELEASE);
}

static uint64_t log_seq;

/* Appends of one run before its clocks start: five segments full (an entry takes its header
 * and its payload in a segment, tailwind/log_format.h), which takes the log through four
 * rollovers and the trims after them: every page of the segments the arena then holds at
 * once (three) has been written, and the timed run reuses them. */
static uint64_t warm_count(const struct eopts *o, uint32_t size)
{
	return 5 * (uint64_t)o->segment_size / (size + TW_ENTRY_HDR_SIZE) + 1;
}

/* Append `n` entries of `size` bytes from `buf` (numbered from `first`), driving the log every
 * `progress_every` appends in driven mode and trimming the acknowledged segments at each new
 * segment (so that the backups' buffers and the log arena are reused, as a service trims).
 * 0, or the error (said on stderr). */
static void trim_at(struct tw_primary *p, uint64_t lsn, uint32_t *trimmed)
{
	if ((uint32_t)(lsn >> 32) != *trimmed) {
		uint32_t below = (uint32_t)(tw_primary_acked_lsn(p) >> 32);

		*trimmed = (uint32_t)(lsn >> 32);
		if (below)
			(void)tw_primary_trim(p, below);
	}
}

/* batch: `n` entries from `first`, o->per_call per call (the last call fewer), from `buf`
 * (per_call entries of `size` bytes each). */
static int append_n_batch(const struct eopts *o, struct tw_primary *p, uint8_t *buf,
			  uint32_t size, uint64_t first, uint64_t n, struct ack *ack,
			  uint32_t *trimmed)
{
	struct iovec iov[MAX_PER_CALL];
	uint64_t lsns[MAX_PER_CALL];
	struct batch_ack full = { ack, o->per_call }, last = { ack, n % o->per_call };

	for (unsigned k = 0; k < o->per_call; k++)
		iov[k] = (struct iovec){ buf + (size_t)k * size, size };
	for (uint64_t i = first; i < first + n; i += o->per_call) {
		size_t m = first + n - i < o->per_call ? (size_t)(first + n - i) : o->per_call;
		int rc;

		for (size_t k = 0; k < m; k++) {
			uint64_t id = i + k;

			memcpy(iov[k].iov_base, &id, size < 8 ? size : 8);
		}
		rc = tw_primary_append_batch(p, iov, m, batch_ack_cb, m == o->per_call ? &full : &last,
					     lsns);
		if (rc < 0) {
			fprintf(stderr, "twbench-engine: batch append at %" PRIu64 " failed: %s: %s\n",
				i, tw_strerror(rc), tw_primary_errmsg(p));
			return rc;
		}
		trim_at(p, lsns[m - 1], trimmed);
	}
	return 0;
}

static int append_n(const struct eopts *o, struct tw_primary *p, enum amode mode, uint8_t *buf,
		    uint32_t size, uint64_t first, uint64_t n, struct ack *ack, uint64_t *lsn,
		    uint32_t *trimmed)
{
	if (mode == A_BATCH)
		return append_n_batch(o, p, buf, size, first, n, ack, trimmed);
	for (uint64_t i = first; i < first + n; i++) {
		int rc;

		memcpy(buf, &i, size < 8 ? size : 8);
		rc = tw_primary_append_async(p, buf, size, ack_cb, ack, lsn);
		if (rc < 0) {
			fprintf(stderr, "twbench-engine: append %" PRIu64 " failed: %s: %s\n", i,
				tw_strerror(rc), tw_primary_errmsg(p));
			return rc;
		}
		if (mode != A_ASYNC && o->progress_every && i % o->progress_every == 0) {
			/* loop: a busy event loop's pass: it asks before its (zero) sleep, then
			 * progresses; it never sleeps, having appends to make. */
			rc = mode == A_LOOP ? tw_primary_wait_prepare(p, 0) : 0;
			if (rc >= 0)
				rc = tw_primary_progress(p, 0);
			if (rc < 0) {
				fprintf(stderr, "twbench-engine: progress: %s: %s\n",
					tw_strerror(rc), tw_primary_errmsg(p));
				return rc;
			}
		}
		trim_at(p, *lsn, trimmed);
	}
	return 0;
}

static int run_one(const struct eopts *o, const char *const *addrs, enum amode mode,
		   uint32_t size, unsigned run, struct eresult *res)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st, st0;
	struct tw_primary *p = NULL;
	struct others oth;
	struct ack ack = { 0, 0, 0 };
	uint64_t count = o->count, warm = warm_count(o, size), t0, t1, c0, c1, a0, a1, b0, b1;
	uint64_t lsn = 0;
	uint32_t trimmed = 0;
	char err[1024];
	uint8_t *buf;
	int rc;

	if (o->max_bytes && count * size > o->max_bytes)
		count = o->max_bytes / size ? o->max_bytes / size : 1;
	buf = malloc((size_t)size * (mode == A_BATCH ? o->per_call : 1));
	if (!buf)
		return -ENOMEM;
	memset(buf, 0x5a, (size_t)size * (mode == A_BATCH ? o->per_call : 1));
	tw_ctx_config_init(&tc);
	tc.backups = addrs;
	tc.n_backups = o->r;
	tc.provider = o->fabric;
	tc.key_file = "";
	tw_primary_config_init(&cfg);
	cfg.log_id = ((uint64_t)getpid() << 16) | ++log_seq;
	cfg.epoch = 1;
	cfg.replicas = o->r;
	cfg.segment_size = o->segment_size;
	if (o->batch)
		cfg.max_batch = o->batch;
	if (o->batch_bytes)
		cfg.max_batch_bytes = (size_t)o->batch_bytes;
	if (o->inflight)
		cfg.max_inflight = o->inflight;
	cfg.mode = mode == A_ASYNC || mode == A_BATCH ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	others_list(&oth); /* before the open: the progress thread is the primary's */
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twbench-engine: cannot open the log: %s: %s\n", tw_strerror(rc),
			err);
		free(buf);
		return rc;
	}
	if (mode == A_LOOP) { /* the descriptor an event loop would sleep on, and its first ask */
		rc = tw_primary_wait_fd(p);
		if (rc >= 0)
			rc = tw_primary_wait_prepare(p, 0);
		if (rc < 0) {
			fprintf(stderr, "twbench-engine: --append loop: provider %s cannot drive a log "
				"from an event loop: %s\n", o->fabric, tw_strerror(rc));
			goto fail;
		}
	}

	/* Not timed: the log's first segments, so that the pages of its context's log arena (new
	 * with each log opened alone) are touched before the clocks start; after the trims below
	 * the run reuses those pages, as a service's log does once it has run a while. */
	rc = append_n(o, p, mode, buf, size, 0, warm, &ack, &lsn, &trimmed);
	if (rc == 0)
		rc = tw_primary_flush(p);
	if (rc < 0)
		goto fail;
	tw_primary_get_stats(p, &st0);
	t0 = clock_ns(CLOCK_MONOTONIC);
	b0 = others_cpu(&oth);
	c0 = primary_cpu(&oth);
	a0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	rc = append_n(o, p, mode, buf, size, warm, count, &ack, &lsn, &trimmed);
	if (rc < 0)
		goto fail;
	rc = tw_primary_flush(p);
	t1 = clock_ns(CLOCK_MONOTONIC);
	b1 = others_cpu(&oth);
	c1 = primary_cpu(&oth);
	a1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (rc < 0 || ack.errors || ack.done != warm + count) {
		fprintf(stderr, "twbench-engine: %" PRIu64 " of %" PRIu64 " appends failed: %s: %s\n",
			ack.errors + (warm + count - ack.done), warm + count,
			tw_strerror(rc ? rc : ack.first_err ? ack.first_err : -EIO),
			tw_primary_errmsg(p));
		rc = rc ? rc : ack.first_err ? ack.first_err : -EIO;
		goto fail;
	}
	tw_primary_get_stats(p, &st);
	rc = tw_primary_close(p);
	p = NULL;
	if (rc < 0) {
		fprintf(stderr, "twbench-engine: close: %s\n", tw_strerror(rc));
		goto fail;
	}
	res->mode = mode;
	res->size = size;
	res->run = run;
	res->count = count;
	res->secs = (double)(t1 - t0) / 1e9;
	res->appends_per_s = res->secs > 0 ? (double)count / res->secs : 0;
	res->cpu_ns = (double)(c1 - c0) / (double)count;
	res->app_cpu_ns = (double)(a1 - a0) / (double)count;
	res->bk_cpu_ns = (double)(b1 - b0) / (double)count;
	res->cores = t1 > t0 ? (double)(c1 - c0) / (double)(t1 - t0) : 0;
	res->writes = st.writes - st0.writes;
	res->wakeups = st.wakeups - st0.wakeups;
	res->appender_seals = st.appender_seals - st0.appender_seals;
	res->set_acked = st.rpc_set_acked - st0.rpc_set_acked;
	res->entries_per_write = (double)count / (double)(res->writes ? res->writes : 1);
	free(buf);
	return 0;
fail:
	if (p)
		tw_primary_close(p);
	free(buf);
	return rc < 0 ? rc : -EIO;
}

/* ------------------------------------------------------------------ output */

static void range_of(enum amode m, uint32_t size, double *lo, double *hi, double *clo,
		     double *chi)
{
	*lo = *clo = 1e300;
	*hi = *chi = 0;
	for (unsigned i = 0; i < n_results; i++) {
		const struct eresult *x = &results[i];

		if (x->mode != m || x->size != size)
			continue;
		*lo = x->appends_per_s < *lo ? x->appends_per_s : *lo;
		*hi = x->appends_per_s > *hi ? x->appends_per_s : *hi;
		*clo = x->cpu_ns < *clo ? x->cpu_ns : *clo;
		*chi = x->cpu_ns > *chi ? x->cpu_ns : *chi;
	}
}

static void print_text(const struct eopts *o, int cpu)
{
	printf("twbench-engine: the primary alone, provider %s, r = %u, segment %zu B, %s; "
	       "target >= 10 M appends/s, <= 100 ns CPU/append (100 B)\n",
	       o->fabric, o->r, o->segment_size, cpu >= 0 ? "bound to one CPU" : "not bound");
	printf("%-7s %6s %3s %10s %8s %12s %11s %11s %6s %8s %8s %10s\n", "appends", "size",
	       "run", "count", "seconds", "appends/s", "CPU ns/app", "app ns/app", "cores", "ent/wr",
	       "wakeups", "bk ns/app");
	for (unsigned i = 0; i < n_results; i++) {
		const struct eresult *x = &results[i];

		printf("%-7s %6u %3u %10" PRIu64 " %8.3f %12.0f %11.1f %11.1f %6.2f %8.1f %8" PRIu64
		       " %10.1f\n", amode_names[x->mode], x->size, x->run + 1, x->count, x->secs,
		       x->appends_per_s, x->cpu_ns, x->app_cpu_ns, x->cores, x->entries_per_write,
		       x->wakeups, x->bk_cpu_ns);
	}
	printf("\nranges over %u run(s)\n%-7s %6s %25s %21s\n", o->runs, "appends", "size",
	       "appends/s (M)", "CPU ns/append");
	for (unsigned m = 0; m < o->n_modes; m++)
		for (unsigned s = 0; s < o->n_sizes; s++) {
			double lo, hi, clo, chi;
			char a[64], c[64];

			range_of(o->modes[m], o->sizes[s], &lo, &hi, &clo, &chi);
			snprintf(a, sizeof(a), "%.2f-%.2f", lo / 1e6, hi / 1e6);
			snprintf(c, sizeof(c), "%.0f-%.0f", clo, chi);
			printf("%-7s %6u %25s %21s\n", amode_names[o->modes[m]], o->sizes[s], a, c);
		}
}

static void print_json(const struct eopts *o, int cpu)
{
	printf("{\"twbench_engine\":{\"version\":\"%s\",\"provider\":\"%s\",\"replicas\":%u,"
	       "\"segment_size\":%zu,\"batch\":%u,\"batch_bytes\":%" PRIu64 ",\"inflight\":%u,"
	       "\"cpu\":%d,\"runs\":%u},\"runs\":[",
	       tw_version(), o->fabric, o->r, o->segment_size, o->batch, o->batch_bytes,
	       o->inflight, cpu, o->runs);
	for (unsigned i = 0; i < n_results; i++) {
		const struct eresult *x = &results[i];

		printf("%s{\"append\":\"%s\",\"size\":%u,\"run\":%u,\"count\":%" PRIu64
		       ",\"seconds\":%.6f,\"appends_per_s\":%.1f,\"cpu_ns_per_append\":%.2f,"
		       "\"app_thread_cpu_ns_per_append\":%.2f,\"backups_cpu_ns_per_append\":%.2f,"
		       "\"primary_cores\":%.3f,\"writes\":%"
		       PRIu64 ",\"entries_per_write\":%.3f,\"wakeups\":%" PRIu64
		       ",\"appender_seals\":%" PRIu64 ",\"set_acked\":%" PRIu64 "}",
		       i ? "," : "", amode_names[x->mode], x->size, x->run + 1, x->count, x->secs,
		       x->appends_per_s, x->cpu_ns, x->app_cpu_ns, x->bk_cpu_ns, x->cores,
		       x->writes, x->entries_per_write, x->wakeups, x->appender_seals, x->set_acked);
	}
	printf("],\"ranges\":[");
	for (unsigned m = 0, k = 0; m < o->n_modes; m++)
		for (unsigned s = 0; s < o->n_sizes; s++, k++) {
			double lo, hi, clo, chi;

			range_of(o->modes[m], o->sizes[s], &lo, &hi, &clo, &chi);
			printf("%s{\"append\":\"%s\",\"size\":%u,\"appends_per_s\":{\"min\":%.1f,"
			       "\"max\":%.1f},\"cpu_ns_per_append\":{\"min\":%.2f,\"max\":%.2f}}",
			       k ? "," : "", amode_names[o->modes[m]], o->sizes[s], lo, hi, clo,
			       chi);
		}
	printf("]}\n");
}

/* ------------------------------------------------------------------ options */

static void usage(FILE *f)
{
	fputs("Usage: twbench-engine [options]\n"
	      "Measure the primary's append engine alone: appends/s and CPU ns per append on\n"
	      "one core, with r backups in this process on the in-memory fabric (\"mem\": a\n"
	      "write is a memcpy into the backup's buffer, the backup does nothing per write).\n"
	      "The primary's CPU is the process's less the backups' threads. A warm-up run (not\n"
	      "reported) first writes every backup buffer once, and each run fills five\n"
	      "segments before its clocks start (the new log's arena pages). A benchmark,\n"
	      "not a test; uses only the public API. See docs/benchmarks.md, \"The engine\n"
	      "alone\".\n\n"
	      "  --append M[,M..]  async (TW_PRIMARY_ASYNC: progress thread, on the same core),\n"
	      "                    driven (TW_PRIMARY_SYNC, tw_primary_append_async and\n"
	      "                    tw_primary_progress from the calling thread) and/or loop\n"
	      "                    (driven, as from a busy event loop: tw_primary_wait_prepare\n"
	      "                    before each tw_primary_progress, so acknowledged positions\n"
	      "                    are published on demand) and/or batch (async, appended\n"
	      "                    --per-call entries at a time by tw_primary_append_batch);\n"
	      "                    default all four\n"
	      "  --per-call N      batch: entries per tw_primary_append_batch (default 32, at\n"
	      "                    most 1024)\n",
	      f);
	fputs("  --sizes N[,N..]   entry payload sizes in bytes (default 100,4096)\n"
	      "  --count N         appends per run (default 2000000)\n"
	      "  --max-bytes N     fewer appends for large sizes: count * size <= N (default\n"
	      "                    1073741824)\n"
	      "  --runs N          runs of each point (default 3); ranges are printed\n"
	      "  -r N              replicas, backups in this process (default 3, at most 8)\n"
	      "  --batch N         max entries per write (default: the library's)\n"
	      "  --batch-bytes N   bytes of entries after which a write is due (default: the\n"
	      "                    library's)\n"
	      "  --inflight N      writes in flight per backup (default: the library's)\n"
	      "  --segment-size N  segment size (default 8388608)\n"
	      "  --progress-every N  driven, loop: tw_primary_progress(p, 0) every N appends\n"
	      "                    (default 256; 0: never, the appends drive the log\n"
	      "                    themselves)\n"
	      "  --buffers N       each backup's pool of segment buffers, fixed (default 16)\n"
	      "  --cpu N           bind the appending thread and the primary's threads to CPU N\n"
	      "                    (default: the CPU it starts on); --cpu -1: no binding\n"
	      "  --fabric F        mem (default): each write is copied into r backups' buffers\n"
	      "                    by the primary's thread; null (provider \"mem-null\", for\n"
	      "                    this benchmark only): writes complete at once and the\n"
	      "                    backups' own threads place the bytes, as a NIC would; the\n"
	      "                    RPCs (segment open, close and its scan, SetAcked) are real\n"
	      "  --dir D           where the backups' scratch directory goes (default /dev/shm,\n"
	      "                    else $TMPDIR or /tmp); removed at exit\n"
	      "  --json            machine-readable output on stdout (one line)\n"
	      "  --version         print the version and exit\n"
	      "  --help            this text\n\n" EXIT_HELP,
	      f);
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return false;
	*out = v;
	return true;
}

static bool parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (!parse_u64(s, &v) || v < min || v > max)
		return false;
	*out = (uint32_t)v;
	return true;
}

static int bad(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "twbench-engine: %s '%s': %s (see --help)\n", opt, val, why);
	return EXIT_USAGE;
}

static const struct option lo[] = {
	{ "append", required_argument, NULL, 'a' },
	{ "sizes", required_argument, NULL, 's' },
	{ "size", required_argument, NULL, 's' },
	{ "count", required_argument, NULL, 'n' },
	{ "max-bytes", required_argument, NULL, 'M' },
	{ "runs", required_argument, NULL, 'R' },
	{ "batch", required_argument, NULL, 'b' },
	{ "batch-bytes", required_argument, NULL, 'y' },
	{ "inflight", required_argument, NULL, 'i' },
	{ "segment-size", required_argument, NULL, 'S' },
	{ "progress-every", required_argument, NULL, 'P' },
	{ "per-call", required_argument, NULL, 'k' },
	{ "cpu", required_argument, NULL, 'c' },
	{ "buffers", required_argument, NULL, 'B' },
	{ "dir", required_argument, NULL, 'd' },
	{ "fabric", required_argument, NULL, 'f' },
	{ "json", no_argument, NULL, 'j' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* --append M[,M..] into o->modes: -1 to go on, or the exit code to end with. */
static int parse_modes(const char *arg, struct eopts *o)
{
	char *dup = strdup(arg), *save = NULL;

	o->n_modes = 0;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		enum amode m = !strcmp(t, "async")  ? A_ASYNC :
			       !strcmp(t, "driven") ? A_DRIVEN :
			       !strcmp(t, "loop")   ? A_LOOP :
			       !strcmp(t, "batch")  ? A_BATCH : A_COUNT;

		if (m == A_COUNT || o->n_modes == A_COUNT) {
			free(dup);
			return bad("--append", arg, "async, driven, loop and/or batch");
		}
		o->modes[o->n_modes++] = m;
	}
	free(dup);
	if (!o->n_modes)
		return bad("--append", arg, "async, driven, loop and/or batch");
	return -1;
}

/* One option of the command line into *o: -1 to go on, or the exit code to end with. */
static int parse_opt(int c, struct eopts *o)
{
	uint32_t v;
	uint64_t u;

	switch (c) {
	case 'a':
		return parse_modes(optarg, o);
	case 's': {
		char *dup = strdup(optarg), *save = NULL;

		o->n_sizes = 0;
		for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			if (o->n_sizes == MAX_LIST || !parse_u32(t, 1, 1u << 20, &v)) {
				free(dup);
				return bad("--sizes", optarg,
					   "1 to 1048576 bytes, at most 8 sizes");
			}
			o->sizes[o->n_sizes++] = v;
		}
		free(dup);
		if (!o->n_sizes)
			return bad("--sizes", optarg, "1 to 1048576 bytes");
		return -1;
	}
	case 'n':
		if (!parse_u64(optarg, &o->count) || !o->count)
			return bad("--count", optarg, "a positive number");
		return -1;
	case 'M':
		if (!parse_u64(optarg, &o->max_bytes))
			return bad("--max-bytes", optarg, "a number of bytes (0: no cap)");
		return -1;
	case 'R':
		if (!parse_u32(optarg, 1, MAX_RUNS, &o->runs))
			return bad("--runs", optarg, "1 to 32");
		return -1;
	case 'r':
		if (!parse_u32(optarg, 1, MAX_R, &o->r))
			return bad("-r", optarg, "1 to 8 replicas");
		return -1;
	case 'b':
		if (!parse_u32(optarg, 1, 1u << 20, &o->batch))
			return bad("--batch", optarg, "a positive number");
		return -1;
	case 'y':
		if (!parse_u64(optarg, &o->batch_bytes) || !o->batch_bytes ||
		    o->batch_bytes >= (1ull << 32))
			return bad("--batch-bytes", optarg, "1 to 4294967295 bytes");
		return -1;
	case 'i':
		if (!parse_u32(optarg, 1, TW_PRIMARY_MAX_INFLIGHT, &o->inflight))
			return bad("--inflight", optarg, "1 to 1024");
		return -1;
	case 'S':
		if (!parse_u64(optarg, &u) || u < 65536 || u >= (1ull << 32) || u % 4096)
			return bad("--segment-size", optarg,
				   "a multiple of 4096 from 65536, under 4 GiB");
		o->segment_size = (size_t)u;
		return -1;
	case 'P':
		if (!parse_u32(optarg, 0, UINT32_MAX, &o->progress_every))
			return bad("--progress-every", optarg, "a number (0: never)");
		return -1;
	case 'k':
		if (!parse_u32(optarg, 1, MAX_PER_CALL, &o->per_call))
			return bad("--per-call", optarg, "1 to 1024 entries");
		return -1;
	case 'B':
		if (!parse_u32(optarg, 4, 4096, &o->buffers))
			return bad("--buffers", optarg, "4 to 4096");
		return -1;
	case 'c':
		if (!strcmp(optarg, "-1"))
			o->cpu = -2;
		else if (parse_u32(optarg, 0, CPU_SETSIZE - 1, &v))
			o->cpu = (int)v;
		else
			return bad("--cpu", optarg, "a CPU number, or -1 for no binding");
		return -1;
	case 'd':
		o->dir = optarg;
		return -1;
	case 'f':
		if (!strcmp(optarg, "mem"))
			o->fabric = "mem";
		else if (!strcmp(optarg, "null"))
			o->fabric = "mem-null";
		else
			return bad("--fabric", optarg, "mem or null");
		return -1;
	case 'j':
		o->json = true;
		return -1;
	case 'V':
		printf("twbench-engine (tailwind) %s\n", tw_version());
		return EXIT_OK;
	case 'h':
		usage(stdout);
		return EXIT_OK;
	default:
		usage(stderr);
		return EXIT_USAGE;
	}
}

/* Bind after the backups started (their threads stay free), before any log is opened (its
 * progress thread inherits the binding). *cpu: the CPU bound to (unchanged with --cpu -1).
 * EXIT_OK, or EXIT_USAGE (said why). */
static int bind_cpu(const struct eopts *o, int *cpu)
{
	if (o->cpu != -2) {
		cpu_set_t set;

		*cpu = o->cpu >= 0 ? o->cpu : sched_getcpu();
		CPU_ZERO(&set);
		CPU_SET(*cpu, &set);
		if (*cpu < 0 || sched_setaffinity(0, sizeof(set), &set) != 0) {
			fprintf(stderr, "twbench-engine: cannot bind to CPU %d: %s; try another "
					"--cpu, or --cpu -1\n", *cpu, strerror(errno));
			return EXIT_USAGE;
		}
		backups_elsewhere(*cpu);
	}
	return EXIT_OK;
}

/* A warm-up run, then every mode x size x run into results[]: EXIT_OK or the exit code. */
static int run_all(const struct eopts *o, const char *const *addrs)
{
	int ec = EXIT_OK;

	/* Warm-up, not reported: every backup buffer written once, so that no measured run pays
	 * the first touch of one of its pages (page faults). Each run's log has an arena of its
	 * own, touched by that run's untimed first appends (run_one). */
	{
		struct eopts w = *o;
		struct eresult x;
		uint32_t big = 0;

		for (unsigned s = 0; s < o->n_sizes; s++)
			big = o->sizes[s] > big ? o->sizes[s] : big;
		w.count = (uint64_t)(o->buffers + 4) * o->segment_size / (big + 64) + 1;
		w.max_bytes = 0;
		if (run_one(&w, addrs, A_DRIVEN, big, 0, &x) < 0)
			ec = EXIT_FAIL;
	}
	for (unsigned m = 0; m < o->n_modes && ec == EXIT_OK; m++)
		for (unsigned s = 0; s < o->n_sizes && ec == EXIT_OK; s++)
			for (unsigned k = 0; k < o->runs && ec == EXIT_OK; k++) {
				int rc = run_one(o, addrs, o->modes[m], o->sizes[s], k,
						 &results[n_results]);

				if (rc < 0)
					ec = rc == -ENOMEM || rc == -ENOSPC ? EXIT_MEMORY : EXIT_FAIL;
				else
					n_results++;
			}
	return ec;
}

int main(int argc, char **argv)
{
	struct eopts o = { .r = 3, .count = 2000000, .max_bytes = 1u << 30, .runs = 3,
			   .segment_size = 8u << 20, .progress_every = 256, .cpu = -1, .fabric = "mem",
			   .buffers = 16 };
	const char *addrs[MAX_R];
	int c, rc, ec = EXIT_OK, cpu = -2;

	o.sizes[0] = 100;
	o.sizes[1] = 4096;
	o.n_sizes = 2;
	o.modes[0] = A_ASYNC;
	o.modes[1] = A_DRIVEN;
	o.modes[2] = A_LOOP;
	o.modes[3] = A_BATCH;
	o.n_modes = 4;
	o.per_call = 32;
	while ((c = getopt_long(argc, argv, "r:h", lo, NULL)) != -1)
		if ((rc = parse_opt(c, &o)) != -1)
			return rc;
	if (optind < argc) {
		fprintf(stderr, "twbench-engine: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	for (unsigned s = 0; s < o.n_sizes; s++)
		if (o.sizes[s] > o.segment_size - 64)
			return bad("--sizes", "", "an entry must fit in a segment");

	ec = backups_start(&o, addrs);
	if (ec != EXIT_OK)
		return ec;
	ec = bind_cpu(&o, &cpu);
	if (ec == EXIT_OK)
		ec = run_all(&o, addrs);
	backups_stop();
	if (ec != EXIT_OK)
		return ec;
	if (o.json)
		print_json(&o, cpu);
	else
		print_text(&o, cpu);
	return EXIT_OK;
}
