/*
 * tools/bench_run.c — twbench's onesided and rpc modes: the real primary (only TW_DATA_PATH
 * differs), and the measuring helpers raw mode shares (percentiles, progress bar, open-loop
 * pacing). See bench.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tailwind/primary.h>

#include "bench.h"

static void async_cb(void *arg, int status, uint64_t lsn)
{
	struct run *r = arg;
	uint64_t i = r->done;

	(void)lsn;
	/* Callbacks come in log order, which is submission order: i is this object's index. */
	if (status < 0) {
		r->errors++;
		if (!r->first_err)
			r->first_err = status;
	} else if (ACK_SAMPLED(i)) {
		uint64_t now = now_ns(), d = now > r->t_submit[i] ? now - r->t_submit[i] : 0;

		r->lat_ns[i / ACK_SAMPLE] = d;
	}
	__atomic_store_n(&r->done, i + 1, __ATOMIC_RELEASE);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, uint64_t n, double q)
{
	uint64_t i;

	if (!n)
		return 0;
	i = (uint64_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i] / 1000.0;
}

/* Sort n latencies (64-bit nanoseconds: nothing is clamped): LSD radix sort, 8 bits a pass, only
 * over the bytes the largest value uses (4 passes up to 4.29 s; a 1M-sample qsort with a
 * comparison callback took ~10% of a run's CPU samples); qsort if the scratch buffer cannot be
 * had. */
static void sort_u64(uint64_t *v, uint64_t n)
{
	uint64_t *tmp = n > 1 ? malloc(n * sizeof(*tmp)) : NULL;
	uint64_t *src = v, *dst = tmp, max = 0;
	unsigned passes = 0;

	if (!tmp) {
		qsort(v, n, sizeof(uint64_t), cmp_u64);
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		max = v[i] > max ? v[i] : max;
	for (uint64_t m = max; m; m >>= 8)
		passes++;
	for (unsigned shift = 0; shift < 8 * passes; shift += 8) {
		uint64_t count[257] = { 0 };
		uint64_t *t;

		for (uint64_t i = 0; i < n; i++)
			count[((src[i] >> shift) & 0xff) + 1]++;
		for (unsigned b = 0; b < 256; b++)
			count[b + 1] += count[b];
		for (uint64_t i = 0; i < n; i++)
			dst[count[(src[i] >> shift) & 0xff]++] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	if (src != v) /* an odd number of passes */
		memcpy(v, src, n * sizeof(*v));
	free(tmp);
}

void pcts(uint64_t *v, uint64_t n, double *p50, double *p99, double *p999)
{
	sort_u64(v, n);
	*p50 = pct(v, n, 0.50);
	*p99 = pct(v, n, 0.99);
	*p999 = pct(v, n, 0.999);
}

void progress_bar(uint64_t done, uint64_t total)
{
	int w = 40, fill = (int)(done * (uint64_t)w / (total ? total : 1));

	fprintf(stderr, "\r[%.*s%*s] %3d%% %" PRIu64 "/%" PRIu64, fill,
		"########################################", w - fill, "",
		(int)(done * 100 / (total ? total : 1)), done, total);
	if (done == total)
		fputc('\n', stderr);
}

/* Open-loop pacing: the time object i is due at `rate` objects/s from t0. */
uint64_t sched_ns(uint64_t t0, double rate, uint64_t i)
{
	return t0 + (uint64_t)((double)i * 1e9 / rate);
}

/* Wait until about `t` by sleeping, never spinning: on a 2-vCPU machine a spinning submitter
 * would take the CPU from the primary's progress thread and the backups. Gaps under 5 us are not
 * waited for (the objects go out in a burst; their latency still counts from their scheduled
 * time). The timer slack is set to 1 us in main(). */
void wait_until(uint64_t t)
{
	for (;;) {
		uint64_t n = now_ns();
		struct timespec ts;

		if (n + 5000 >= t)
			return;
		ts.tv_sec = (time_t)((t - n) / 1000000000u);
		ts.tv_nsec = (long)((t - n) % 1000000000u);
		nanosleep(&ts, NULL);
	}
}

/* onesided and rpc: the real primary; only TW_DATA_PATH differs. */
/* Phase 1: res->count appends of pt->size bytes (paced at pt->rate when given), async or
 * sync; in sync mode the latency of each into run->lat_ns. 0, or the failed append's error. */
static int append_stream(const struct opts *o, const struct point *pt, struct result *res,
			 uint8_t *payload, struct run *run, struct tw_primary *p, uint64_t t0)
{
	int rc;

	for (uint64_t i = 0; i < res->count; i++) {
		memcpy(payload, &i, pt->size < 8 ? pt->size : 8); /* sequence number in every object */
		if (pt->rate > 0) {
			run->t_submit[i] = sched_ns(t0, pt->rate, i);
			wait_until(run->t_submit[i]);
		}
		if (o->async) {
			if (pt->rate <= 0 && ACK_SAMPLED(i))
				run->t_submit[i] = now_ns();
			rc = tw_primary_append_async(p, payload, pt->size, async_cb, run, NULL);
		} else {
			uint64_t a = pt->rate > 0 ? run->t_submit[i] : now_ns(), d;

			rc = tw_primary_append(p, payload, pt->size, NULL);
			d = now_ns() - a;
			run->lat_ns[i] = d;
		}
		if (rc < 0) {
			fprintf(stderr, "\ntwbench: append %" PRIu64 " failed: %s: %s\n", i,
				tw_strerror(rc), tw_primary_errmsg(p));
			return rc;
		}
		/* A service keeps in memory what it still reads: here nothing, so the closed
		 * segments below the acknowledged one go back to the log arena for reuse. */
		if (!o->keep_segments && (i & 0xfff) == 0xfff)
			tw_primary_unload(p, (uint32_t)(tw_primary_acked_lsn(p) >> 32));
		if (o->progress && (i & 0x3fff) == 0)
			progress_bar(i, res->count);
	}
	return 0;
}

/* Phase 2 (async closed-loop runs): synchronous appends on a second log, caller-driven, one
 * at a time, o->lat_count of them: their latencies. */
static int sync_latency(const struct opts *o, const struct point *pt, struct result *res,
			uint8_t *payload, struct run *run, const struct tw_ctx_config *tc,
			struct tw_primary_config *cfg)
{
	uint64_t n = o->lat_count;
	uint64_t *lat = run->lat_ns; /* reused: phase 1's percentiles are taken */
	struct tw_primary *p = NULL;
	char errmsg[1024];
	int rc;

	cfg->log_id = next_log_id();
	cfg->mode = TW_PRIMARY_SYNC;
	rc = tw_primary_open(tc, cfg, &p, errmsg, sizeof(errmsg));
	if (rc < 0) {
		fprintf(stderr, "twbench: cannot open the latency log: %s: %s\n",
			tw_strerror(rc), errmsg);
		return rc;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t a = now_ns(), d;

		memcpy(payload, &i, pt->size < 8 ? pt->size : 8);
		rc = tw_primary_append(p, payload, pt->size, NULL);
		d = now_ns() - a;
		if (rc < 0) {
			fprintf(stderr, "twbench: sync append %" PRIu64 " failed: %s: %s\n", i,
				tw_strerror(rc), tw_primary_errmsg(p));
			tw_primary_close(p);
			return rc;
		}
		lat[i] = d;
	}
	rc = tw_primary_close(p);
	if (rc < 0) {
		fprintf(stderr, "twbench: close: %s\n", tw_strerror(rc));
		return rc;
	}
	res->n_lat = n;
	pcts(lat, n, &res->p50, &res->p99, &res->p999);
	return 0;
}

int run_primary(const struct opts *o, const char *const *addrs, unsigned n_addrs,
		       enum bmode mode, struct result *res, uint8_t *payload, struct run *run)
{
	const struct point *pt = &res->pt;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	struct tw_primary_stats st;
	struct cpumark c0, c1;
	char errmsg[1024];
	uint64_t t0, t1;
	int rc;

	tw_ctx_config_init(&tc);
	tc.backups = addrs;
	tc.n_backups = n_addrs;
	tc.provider = o->provider;
	tc.key_file = o->key_file ? o->key_file : "";
	tc.busy_poll = o->busy_poll;
	tc.arena_size = o->arena_size;
	tw_primary_config_init(&cfg);
	cfg.log_id = next_log_id();
	cfg.epoch = 1;
	cfg.replicas = pt->r;
	cfg.segment_size = o->segment_size;
	cfg.max_batch = pt->batch;
	cfg.max_inflight = pt->inflight;
	cfg.mode = o->async && !o->driven ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	cfg.preopen = o->preopen;
	cfg.open_retry_ms = 30000;
	/* The baseline is the environment's switch (docs/api.md), read by the open: no other
	 * thread of twbench runs while it is set. */
	if (setenv("TW_DATA_PATH", mode == M_RPC ? "rpc" : "onesided", 1) != 0)
		return -errno;
	rc = tw_primary_open(&tc, &cfg, &p, errmsg, sizeof(errmsg));
	if (rc < 0) {
		fprintf(stderr, "twbench: cannot open the log: %s: %s\n", tw_strerror(rc), errmsg);
		return rc;
	}
	run->done = 0;
	run->errors = 0;
	run->first_err = 0;
	cpu_mark(&c0);

	/* Phase 1: replicate `count` objects (throughput; in sync mode also the latencies). */
	t0 = now_ns();
	rc = append_stream(o, pt, res, payload, run, p, t0);
	if (rc < 0)
		goto fail;
	rc = tw_primary_flush(p);
	t1 = now_ns();
	if (rc < 0 || run->errors) {
		fprintf(stderr, "\ntwbench: %" PRIu64 " appends failed: %s: %s\n", run->errors,
			tw_strerror(rc ? rc : run->first_err), tw_primary_errmsg(p));
		rc = rc ? rc : run->first_err;
		goto fail;
	}
	if (o->progress)
		progress_bar(res->count, res->count);
	cpu_mark(&c1);
	cpu_delta(&c0, &c1, res);
	rc = tw_primary_finish(p); /* the final close RPC counts too */
	tw_primary_get_stats(p, &st);
	if (rc < 0) {
		fprintf(stderr, "twbench: closing the log: %s: %s\n", tw_strerror(rc),
			tw_primary_errmsg(p));
		goto fail;
	}
	tw_primary_close(p);
	p = NULL;
	res->secs = (double)(t1 - t0) / 1e9;
	res->st = st;
	if (o->async) {
		res->have_ack = true;
		pcts(run->lat_ns, ACK_SAMPLES(res->count), &res->a50, &res->a99, &res->a999);
	} else {
		res->n_lat = res->count;
		pcts(run->lat_ns, res->count, &res->p50, &res->p99, &res->p999);
	}

	if (o->async && o->lat_count && pt->rate <= 0)
		return sync_latency(o, pt, res, payload, run, &tc, &cfg);
	return 0;
fail:
	if (p)
		tw_primary_close(p);
	return rc < 0 ? rc : -EIO;
}
