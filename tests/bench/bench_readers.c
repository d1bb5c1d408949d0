/*
 * tests/bench/bench_readers.c — readers of a live log (docs/readers.md, "Measured"): how far
 * behind the writer a reader returns an entry, against the writer's own (sync) append latency,
 * and what readers cost the backups' CPU. Three local twd's, a sync-mode primary (r = 3)
 * appending 100-byte objects at a steady pace (one every --gap microseconds, so the log is
 * live, not saturated), and 0, 1 and 8 readers (threads of this process, each its own reader:
 * connections, fabric) following it from the tail.
 *
 *   TW_BUILD_ROOT=$PWD tests/bench/bench_readers [-p tcp] [-n 20000] [-g 200] [-r 0,1,8] [--json]
 *
 * Per configuration: append latency p50/p99 (append call to its return), reader lag p50/p99
 * (the entry returned by the reader, measured from the append's return: the time readers trail
 * the writer's acknowledgement), and the backups' CPU (user + system of the three twd processes
 * from /proc, per 1000 entries and in % of one core over the run), for the RPC path (the bytes in
 * the ReadEntries replies) and the one-sided path (ReadEntries only for the readable end, the
 * bytes by fi_read of a read grant) side by side.
 * Prints the load average beside the numbers.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/reader.h>

#include "core/util.h"
#include "recover_util.h"

#define MAXR 16

static const char *prov = "tcp";
static unsigned n_entries = 20000, gap_us = 200;
static struct rt_cluster cl;
static uint64_t *t_ack;   /* per seq: when the append returned */
static uint64_t *t_sub;   /* per seq: when the append was called */

struct rth {
	uint64_t log_id;
	bool one_sided;
	uint64_t *t_read; /* per seq */
	uint64_t got;
	int err;
	pthread_t th;
};

/* Posted once by each reader thread when its reader is open (or failed to open). */
static sem_t readers_opened;

static uint64_t cpu_ticks(int pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, st = 0;
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	p = strrchr(buf, ')');
	/* fields after ")": state(3) ... utime(14) stime(15) */
	if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
		return ut + st;
	return 0;
}

static uint64_t backups_cpu(void)
{
	uint64_t t = 0;

	for (unsigned i = 0; i < cl.n; i++)
		t += cpu_ticks((int)proc_pid(cl.p[i]));
	return t;
}

static void *reader_main(void *arg)
{
	struct rth *t = arg;
	struct tw_reader_config rc;
	struct tw_reader *r;
	char err[512];

	tw_reader_config_init(&rc);
	rc.provider = prov;
	rc.log_id = t->log_id;
	rc.backups = cl.addrs;
	rc.n_backups = cl.n;
	rc.from = TW_READ_OLDEST;
	rc.one_sided = t->one_sided;
	t->err = tw_reader_open(&rc, &r, err, sizeof(err));
	sem_post(&readers_opened);
	if (t->err) {
		fprintf(stderr, "bench_readers: reader: %s\n", err);
		return NULL;
	}
	while (t->got < n_entries) {
		struct tw_reader_entry e;
		uint64_t seq;
		int rc2 = tw_reader_next(r, &e, 20000);

		if (rc2) {
			t->err = rc2;
			fprintf(stderr, "bench_readers: reader: %s\n", tw_reader_errmsg(r));
			break;
		}
		memcpy(&seq, e.data, sizeof(seq));
		if (seq < n_entries)
			t->t_read[seq] = tw_now_ns();
		t->got++;
	}
	tw_reader_close(r);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, size_t n, double q)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(size_t)(q * (double)(n - 1))] / 1000.0;
}

struct result {
	unsigned readers;
	bool one_sided;
	double app_p50, app_p99, lag_p50, lag_p99, cpu_ms_per_k, cpu_pct;
	int err;
};

static void run(unsigned nreaders, bool one_sided, uint64_t log_id, struct result *res)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct rth th[MAXR];
	uint8_t obj[100];
	uint64_t *v, c0, c1, w0, w1;
	size_t nv = 0;
	char err[512];
	long hz = sysconf(_SC_CLK_TCK);

	memset(res, 0, sizeof(*res));
	res->readers = nreaders;
	res->one_sided = one_sided;
	tw_ctx_config_init(&tc);
	tc.provider = prov;
	tc.backups = cl.addrs;
	tc.n_backups = cl.n;
	tw_primary_config_init(&cfg);
	cfg.log_id = log_id;
	cfg.replicas = cl.n;
	res->err = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	if (res->err) {
		fprintf(stderr, "bench_readers: open: %s\n", err);
		return;
	}
	memset(obj, 0x5a, sizeof(obj));
	obj[8] = 0;
	{
		uint64_t seq = UINT64_MAX, lsn;

		memcpy(obj, &seq, sizeof(seq)); /* an entry before the readers open */
		res->err = tw_primary_append(p, obj, sizeof(obj), &lsn);
	}
	memset(th, 0, sizeof(th));
	sem_init(&readers_opened, 0, 0);
	for (unsigned i = 0; i < nreaders; i++) {
		th[i].log_id = log_id;
		th[i].one_sided = one_sided;
		th[i].t_read = calloc(n_entries, sizeof(uint64_t));
		pthread_create(&th[i].th, NULL, reader_main, &th[i]);
	}
	for (unsigned i = 0; i < nreaders; i++)
		while (sem_wait(&readers_opened) != 0) /* EINTR */
			;
	sem_destroy(&readers_opened);
	c0 = backups_cpu();
	w0 = tw_now_ns();
	for (uint64_t s = 0; s < n_entries && !res->err; s++) {
		uint64_t lsn, next = tw_now_ns() + (uint64_t)gap_us * 1000u;

		memcpy(obj, &s, sizeof(s));
		t_sub[s] = tw_now_ns();
		res->err = tw_primary_append(p, obj, sizeof(obj), &lsn);
		t_ack[s] = tw_now_ns();
		while (tw_now_ns() < next) /* the pace: a live log, not a saturated one */
			tw_primary_progress(p, 0);
	}
	for (unsigned i = 0; i < nreaders; i++)
		pthread_join(th[i].th, NULL);
	w1 = tw_now_ns();
	c1 = backups_cpu();
	v = calloc((size_t)n_entries * (nreaders ? nreaders : 1), sizeof(uint64_t));
	for (uint64_t s = 0; s < n_entries; s++)
		v[nv++] = t_ack[s] - t_sub[s];
	res->app_p50 = pct(v, nv, 0.5);
	res->app_p99 = pct(v, nv, 0.99);
	nv = 0;
	for (unsigned i = 0; i < nreaders; i++) {
		for (uint64_t s = 0; s < n_entries; s++)
			if (th[i].t_read[s])
				v[nv++] = th[i].t_read[s] > t_ack[s] ? th[i].t_read[s] - t_ack[s] : 0;
		if (th[i].err)
			res->err = th[i].err;
		free(th[i].t_read);
	}
	res->lag_p50 = pct(v, nv, 0.5);
	res->lag_p99 = pct(v, nv, 0.99);
	res->cpu_ms_per_k = (double)(c1 - c0) * 1000.0 / (double)hz / ((double)n_entries / 1000.0);
	res->cpu_pct = (double)(c1 - c0) / (double)hz / ((double)(w1 - w0) / 1e9) * 100.0;
	free(v);
	tw_primary_close(p);
}

int main(int argc, char **argv)
{
	unsigned counts[MAXR] = { 0, 1, 8 }, nc = 3, nr = 0;
	struct result res[2 * MAXR];
	bool json = false;
	double load[3] = { 0, 0, 0 };

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) {
			prov = argv[++i];
		} else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
			n_entries = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "-g") == 0 && i + 1 < argc) {
			gap_us = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
			char *s = argv[++i], *tok;

			nc = 0;
			for (tok = strtok(s, ","); tok && nc < MAXR; tok = strtok(NULL, ","))
				counts[nc++] = (unsigned)strtoul(tok, NULL, 10);
		} else {
			fprintf(stderr, "usage: bench_readers [-p PROVIDER] [-n ENTRIES] [-g GAP_US] "
				"[-r 0,1,8] [--json]\n");
			return 2;
		}
	}
	if (n_entries == 0)
		n_entries = 1;
	for (unsigned i = 0; i < nc; i++)
		if (counts[i] > MAXR)
			counts[i] = MAXR;
	t_ack = calloc(n_entries, sizeof(uint64_t));
	t_sub = calloc(n_entries, sizeof(uint64_t));
	rt_start(&cl, prov, 3, "8M", "16");
	for (unsigned i = 0; i < nc; i++) {
		run(counts[i], false, 0xbe00 + 2 * i, &res[nr++]);
		if (counts[i])
			run(counts[i], true, 0xbe01 + 2 * i, &res[nr++]);
	}
	rt_stop(&cl);
	if (getloadavg(load, 3) < 0)
		load[0] = load[1] = load[2] = -1;
	if (json) {
		printf("{\"provider\":\"%s\",\"entries\":%u,\"gap_us\":%u,\"loadavg\":[%.2f,%.2f,"
		       "%.2f],\"runs\":[", prov, n_entries, gap_us, load[0], load[1], load[2]);
		for (unsigned i = 0; i < nr; i++)
			printf("%s{\"readers\":%u,\"path\":\"%s\",\"append_p50_us\":%.1f,"
			       "\"append_p99_us\":%.1f,\"lag_p50_us\":%.1f,\"lag_p99_us\":%.1f,"
			       "\"backup_cpu_ms_per_1000\":%.2f,\"backup_cpu_pct\":%.1f,\"error\":%d}",
			       i ? "," : "", res[i].readers, res[i].one_sided ? "one-sided" : "rpc",
			       res[i].app_p50, res[i].app_p99,
			       res[i].lag_p50, res[i].lag_p99, res[i].cpu_ms_per_k, res[i].cpu_pct,
			       res[i].err);
		printf("]}\n");
		return 0;
	}
	printf("bench_readers: %s, %u entries of 100 bytes, one every %u us, r = 3, load average "
	       "%.2f %.2f %.2f\n", prov, n_entries, gap_us, load[0], load[1], load[2]);
	printf("%-8s %-9s %12s %12s %12s %12s %16s %12s\n", "readers", "path", "append p50",
	       "append p99", "lag p50", "lag p99", "backup CPU/1000", "backup CPU");
	for (unsigned i = 0; i < nr; i++)
		printf("%-8u %-9s %10.1fus %10.1fus %10.1fus %10.1fus %14.2fms %11.1f%%%s\n",
		       res[i].readers, res[i].one_sided ? "one-sided" : "rpc", res[i].app_p50,
		       res[i].app_p99, res[i].lag_p50, res[i].lag_p99, res[i].cpu_ms_per_k,
		       res[i].cpu_pct, res[i].err ? " (error)" : "");
	return 0;
}
