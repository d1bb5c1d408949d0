/*
 * tools/bench_logs.c — twbench --logs N: N logs in one process, as a storage service runs them.
 * By default the N logs share one context (tailwind/context.h: one fabric instance, one
 * channel per backup, one progress thread); with --logs-private each is opened with
 * tw_primary_open (a private context each: its own connections and, async, its own thread).
 *
 * It opens the logs (timed), reads the process's threads, file descriptors and resident memory
 * from /proc/self, then appends --count objects in all, round robin over the logs from one
 * thread (asynchronous appends), and reports the aggregate objects/s and each log's own rate
 * (its share over the time from the start to its last acknowledgement): min, median, max, and
 * min/max as the fairness. See docs/twbench.md.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/context.h>
#include <tailwind/primary.h>

#include "bench.h"

struct blog {
	struct tw_primary *p;
	uint64_t quota;
	uint64_t acked;   /* progress thread */
	uint64_t errors;
	int first_err;
	uint64_t last_ns; /* time of its last acknowledgement */
};

static void logs_cb(void *arg, int status, uint64_t lsn)
{
	struct blog *l = arg;

	(void)lsn;
	if (status < 0) {
		if (!l->errors++)
			l->first_err = status;
		return;
	}
	l->acked++;
	l->last_ns = now_ns();
}

/* "Threads:" or "VmRSS:" (kB) of /proc/self/status; -1 if not found. */
static long status_field(const char *name)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(name);

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && sscanf(line + n, "%ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Open the n logs, on ctx when given (else each on a private context of cc), and give each
 * its share of o->count. 0, or the error of the open that failed (it said so). */
static int open_logs(const struct opts *o, const struct tw_ctx_config *cc, struct tw_ctx *ctx,
		     struct blog *logs, unsigned n)
{
	unsigned r = o->rs[0];
	char err[1024];
	int rc;

	for (unsigned i = 0; i < n; i++) {
		struct tw_primary_config cfg;

		tw_primary_config_init(&cfg);
		cfg.log_id = next_log_id();
		cfg.epoch = 1;
		cfg.replicas = r;
		cfg.segment_size = o->segment_size;
		cfg.max_batch = o->batches[0];
		cfg.max_inflight = o->inflights[0];
		cfg.mode = TW_PRIMARY_ASYNC;
		cfg.preopen = o->preopen;
		cfg.open_retry_ms = 30000;
		rc = ctx ? tw_primary_open_on(ctx, &cfg, &logs[i].p, err, sizeof(err))
			 : tw_primary_open(cc, &cfg, &logs[i].p, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "twbench: cannot open log %u of %u: %s: %s\n", i + 1, n,
				tw_strerror(rc), err);
			return rc;
		}
		logs[i].quota = o->count / n + (i < o->count % n);
	}
	return 0;
}

/* Round robin, one object per log in turn, until every quota is appended. 0, or the error of
 * the append that failed (it said so). */
static int round_robin(const struct opts *o, struct blog *logs, unsigned n, uint8_t *payload)
{
	uint32_t size = o->sizes[0];
	int rc;

	for (uint64_t k = 0, done = 0; done < o->count; k++) {
		struct blog *l = &logs[k % n];
		uint64_t i = k / n;

		if (i >= l->quota)
			continue;
		memcpy(payload, &i, size < 8 ? size : 8);
		rc = tw_primary_append_async(l->p, payload, size, logs_cb, l, NULL);
		if (rc < 0) {
			fprintf(stderr, "\ntwbench: log %" PRIu64 ": append failed: %s: %s\n",
				k % n, tw_strerror(rc), tw_primary_errmsg(l->p));
			return rc;
		}
		done++;
		if (o->progress && (done & 0x3fff) == 0)
			progress_bar(done, o->count);
	}
	return 0;
}

int run_logs(const struct opts *o, const char *const *addrs, unsigned n_addrs, uint8_t *payload)
{
	unsigned n = o->logs, r = o->rs[0];
	uint32_t size = o->sizes[0];
	struct blog *logs = calloc(n, sizeof(*logs));
	double *rates = calloc(n, sizeof(*rates));
	struct tw_ctx_config cc;
	struct tw_ctx *ctx = NULL;
	struct tw_ctx_stats cs;
	char err[1024];
	long th0 = status_field("Threads:"), fd0 = count_fds(), rss0 = status_field("VmRSS:");
	long th1, fd1, rss1;
	uint64_t t_start, t0, t_open, t1, total = 0, errors = 0;
	double conns;
	int rc = 0;

	if (!logs || !rates) {
		fprintf(stderr, "twbench: out of memory for %u logs\n", n);
		rc = -ENOMEM;
		goto out;
	}
	/* The transport: of the shared context, or of every log's private one. */
	tw_ctx_config_init(&cc);
	cc.provider = o->provider;
	cc.backups = addrs;
	cc.n_backups = n_addrs;
	cc.key_file = o->key_file ? o->key_file : "";
	cc.busy_poll = o->busy_poll;
	cc.arena_size = o->arena_size; /* --arena-size: the shared context's, or each private log's */
	t_start = now_ns();
	if (!o->logs_private) {
		rc = tw_ctx_open(&cc, &ctx, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "twbench: cannot open the context: %s: %s\n",
				tw_strerror(rc), err);
			goto out;
		}
	}
	rc = open_logs(o, &cc, ctx, logs, n);
	if (rc < 0)
		goto out;
	t_open = now_ns();
	th1 = status_field("Threads:");
	fd1 = count_fds();
	rss1 = status_field("VmRSS:");
	if (ctx) {
		tw_ctx_get_stats(ctx, &cs);
		conns = (double)cs.channels / n_addrs;
	} else {
		conns = n; /* a private context each: one connection per log to every backup */
	}

	t0 = now_ns();
	rc = round_robin(o, logs, n, payload);
	if (rc < 0)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		int frc = tw_primary_flush(logs[i].p);

		if (frc < 0 && !rc)
			rc = frc;
	}
	t1 = now_ns();
	if (o->progress)
		progress_bar(o->count, o->count);
	for (unsigned i = 0; i < n; i++) {
		uint64_t end = logs[i].last_ns > t0 ? logs[i].last_ns : t1;

		total += logs[i].acked;
		errors += logs[i].errors;
		rates[i] = (double)logs[i].acked / ((double)(end - t0) / 1e9);
	}
	if (rc < 0 || errors) {
		fprintf(stderr, "twbench: %" PRIu64 " appends failed: %s\n", errors,
			tw_strerror(rc ? rc : -EIO));
		rc = rc ? rc : -EIO;
		goto out;
	}
	qsort(rates, n, sizeof(*rates), cmp_double);
	printf("twbench: %u logs on %s, %" PRIu64 " objects of %u B in all (round robin), r = %u, "
	       "provider %s, async appends, segment %zu B\n", n,
	       ctx ? "one context" : "a private context each", o->count, size, r, o->provider,
	       o->segment_size);
	printf("  %-44s %12.1f\n", "open time (ms, all logs)", (double)(t_open - t_start) / 1e6);
	printf("  %-44s %12ld  (%ld before)\n", "threads", th1, th0);
	printf("  %-44s %12ld  (%ld before)\n", "file descriptors", fd1, fd0);
	printf("  %-44s %12.1f\n", "connections per backup", conns);
	printf("  %-44s %12.1f  (%.1f before)\n", "RSS after open (MB)", (double)rss1 / 1024,
	       (double)rss0 / 1024);
	printf("  %-44s %12.2f\n", "RSS per log (MB)", (double)(rss1 - rss0) / 1024 / n);
	printf("  %-44s %12.0f\n", "objects/s (aggregate)",
	       (double)total / ((double)(t1 - t0) / 1e9));
	printf("  %-44s %12.0f\n", "objects/s per log, min", rates[0]);
	printf("  %-44s %12.0f\n", "objects/s per log, median", rates[n / 2]);
	printf("  %-44s %12.0f\n", "objects/s per log, max", rates[n - 1]);
	printf("  %-44s %12.3f\n", "fairness (min / max)",
	       rates[n - 1] > 0 ? rates[0] / rates[n - 1] : 0);
	printf("  %-44s %12.3f\n", "seconds", (double)(t1 - t0) / 1e9);
	fflush(stdout);
	rc = 0;
out:
	for (unsigned i = 0; logs && i < n; i++)
		if (logs[i].p)
			tw_primary_close(logs[i].p);
	tw_ctx_close(ctx);
	free(logs);
	free(rates);
	return rc;
}
