/*
 * examples/kv/twkv_ycsb.c — twkv-ycsb: the paper's end-to-end evaluation (Tailwind, ATC'18, §4)
 * on twkv (docs/kv.md, "Evaluation").
 *
 * With no arguments it starts three local twkv servers (r = 2: each server's partition is
 * replicated to the two others, so every server is a primary and a backup), loads 100,000
 * records of 30-byte keys and 100-byte values, and runs YCSB's workloads C (reads only), B
 * (95 % reads), A (50 % reads) and write-only, 5 s each with 128 requests in flight (closed
 * loop), keys drawn from YCSB's scrambled Zipfian (theta 0.99); each workload also runs with
 * the servers replicating by RPC (the baseline) instead of one-sided writes, on a fresh
 * cluster, and the table shows both side by side with their ratios. --rate gives open-loop runs at fixed offered loads instead (latency and
 * CPU versus load); --json prints the same for machines.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "kv_client.h"
#include "kv_spawn.h"
#include "ycsb.h"

#define MAX_POINTS 32
#define MAX_RUNS 512
#define LOAD_CLIENTS 128
#define VALUE_POOL (1u << 20)

/* --------------------------------------------------------------- latency histogram */

/* Log-linear buckets over nanoseconds: exact below 128 ns, then 64 per power of two (at most
 * 1.6 % off), up to 2^40 ns. */
#define HBUCKETS 2432

struct hist {
	uint64_t n;
	uint64_t b[HBUCKETS];
};

static unsigned hist_bucket(uint64_t v)
{
	unsigned m, shift;

	if (v < 128)
		return (unsigned)v;
	if (v >= (UINT64_C(1) << 40))
		v = (UINT64_C(1) << 40) - 1;
	m = 63u - (unsigned)__builtin_clzll(v);
	shift = m - 6;
	return 64 * shift + (unsigned)(v >> shift);
}

static uint64_t hist_value(unsigned idx)
{
	unsigned shift;

	if (idx < 128)
		return idx;
	shift = idx / 64 - 1;
	return (uint64_t)(idx - 64 * shift) << shift;
}

static void hist_add(struct hist *h, uint64_t ns)
{
	h->b[hist_bucket(ns)]++;
	h->n++;
}

/* The q-quantile in microseconds (0 with no samples). */
static double hist_us(const struct hist *h, double q)
{
	uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;

	if (!h->n)
		return 0;
	if (!want)
		want = 1;
	for (unsigned i = 0; i < HBUCKETS; i++) {
		seen += h->b[i];
		if (seen >= want)
			return (double)hist_value(i) / 1000.0;
	}
	return 0;
}

/* --------------------------------------------------------------- options */

struct mix {
	const char *name;
	double read;    /* the rest are updates (PUTs of existing keys) */
};

static const struct mix mixes_known[] = {
	{ "c", 1.0 }, { "b", 0.95 }, { "a", 0.5 }, { "w", 0.0 },
};

/* How the servers replicate: Tailwind, or the RPC-replication baseline (twkv -r). */
enum { MODE_ONESIDED, MODE_RPC };

struct opts {
	const char *provider;
	unsigned servers, replicas;
	uint64_t records;
	unsigned key_size, value_size;
	unsigned nclients;
	unsigned clients[MAX_POINTS]; /* closed loop: requests in flight */
	double duration, warmup;
	unsigned nmodes;
	int modes[2];                 /* MODE_ONESIDED, MODE_RPC */
	unsigned nmixes;
	const struct mix *mixes[8];
	unsigned nrates;
	double rates[MAX_POINTS];     /* open loop: offered requests per second */
	const char *segment_size, *memory;
	const char *drive;            /* servers' --drive (NULL: their default) */
	char twkv[4096];
	bool json;
	const char *cluster[KV_MAX_SERVERS]; /* an existing cluster instead of local servers */
	unsigned ncluster;
	uint64_t seed;
	unsigned reps;                /* --runs: the whole sequence, so many times */
};

static struct opts o = {
	.servers = 3, .replicas = 2, .records = 100000, .key_size = 30, .value_size = 100,
	.nclients = 1, .clients = { 128 }, .duration = 5, .warmup = 0.5, .segment_size = "8M",
	.memory = "1G", .reps = 1,
};

/* --------------------------------------------------------------- results */

enum { CPU_SERVE, CPU_REPLICATE, CPU_BACKUP, CPU_OTHER, CPU_PROCESS, NCPU };
static const char *const cpu_names[NCPU] = { "serve", "replicate", "backup", "other",
					     "process" };

/* What the servers report (STATS), summed over the servers. */
struct snap {
	uint64_t cpu[NCPU], appends, writes, rpcs, backup_rpcs, relocated, puts, gets;
	uint64_t put_batches; /* tw_primary_append_batch calls of the PUT path */
	uint64_t t_ns;
};

struct result {
	int mode;
	const char *mix;
	unsigned clients;             /* closed loop: requests in flight */
	double rate;                  /* offered ops/s; 0: closed loop */
	unsigned rep;                 /* which of the --runs */
	double secs, load1;
	uint64_t ops, gets, puts, errors, timeouts, not_owner;
	struct hist get, put;
	struct snap d;                /* server counters over the measured window */
};

static struct result runs[MAX_RUNS];
static unsigned nruns;

static const char *mode_name(int m)
{
	return m == MODE_RPC ? "rpc" : "onesided";
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double load_avg(void)
{
	double l = 0;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = 0;
		fclose(f);
	}
	return l;
}

/* --------------------------------------------------------------- servers' counters */

static uint64_t field(const char *text, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
	return 0;
}

static int snapshot(const struct kv_cluster *map, struct snap *s)
{
	static const char *const cpu_fields[NCPU] = { "cpu_serve_ns", "cpu_replicate_ns",
		"cpu_backup_ns", "cpu_other_ns", "cpu_process_ns" };

	memset(s, 0, sizeof(*s));
	s->t_ns = now_ns();
	for (unsigned i = 0; i < map->nservers; i++) {
		uint8_t st;
		char *t;
		uint32_t len;
		int rc = kv_call(map->servers[i].kv, KV_OP_STATS, NULL, 0, 10000, &st, &t, &len);

		if (rc < 0 || st != KV_S_OK) {
			fprintf(stderr, "twkv-ycsb: stats of %s: %s\n", map->servers[i].kv,
				rc < 0 ? strerror(-rc) : kv_status_str(st));
			if (rc == 0)
				free(t);
			return -EIO;
		}
		for (unsigned k = 0; k < NCPU; k++)
			s->cpu[k] += field(t, cpu_fields[k]);
		s->appends += field(t, "appends");
		s->writes += field(t, "writes");
		s->rpcs += field(t, "rpcs");
		s->backup_rpcs += field(t, "backup_rpcs");
		s->relocated += field(t, "relocated");
		s->puts += field(t, "puts");
		s->gets += field(t, "gets");
		s->put_batches += field(t, "put_batches");
		free(t);
	}
	return 0;
}

static void snap_delta(struct snap *d, const struct snap *a, const struct snap *b)
{
	for (unsigned k = 0; k < NCPU; k++)
		d->cpu[k] = b->cpu[k] - a->cpu[k];
	d->appends = b->appends - a->appends;
	d->writes = b->writes - a->writes;
	d->rpcs = b->rpcs - a->rpcs;
	d->backup_rpcs = b->backup_rpcs - a->backup_rpcs;
	d->relocated = b->relocated - a->relocated;
	d->puts = b->puts - a->puts;
	d->gets = b->gets - a->gets;
	d->put_batches = b->put_batches - a->put_batches;
	d->t_ns = b->t_ns - a->t_ns;
}

/* --------------------------------------------------------------- the workload */

struct driver {
	struct kvc *c;
	const struct kv_cluster *map;
	struct ycsb_scrambled keys;
	struct ycsb_rng rng;
	uint8_t *values;
	struct result *r;
	const struct mix *mix;  /* NULL: the load phase */
	uint64_t next_load;     /* load phase: next key number */
	bool measuring, stopping;
	uint64_t inflight;
	bool open_loop;
};

struct op {
	struct driver *d;
	uint64_t start;         /* scheduled (open loop) or sent (closed loop) */
	bool put;
	struct op *next_free;
};

static void issue(struct driver *d, struct op *op, uint64_t start);

static void op_done(void *arg, int status, uint64_t version, const uint8_t *value, uint32_t vlen)
{
	struct op *op = arg;
	struct driver *d = op->d;
	uint64_t t = now_ns();

	(void)version;
	(void)value;
	(void)vlen;
	d->inflight--;
	if (d->measuring) {
		d->r->ops++;
		if (status < 0 && status != -ENOENT)
			d->r->errors++;
		if (status == -ETIMEDOUT)
			d->r->timeouts++;
		if (op->put) {
			d->r->puts++;
			hist_add(&d->r->put, t - op->start);
		} else {
			d->r->gets++;
			hist_add(&d->r->get, t - op->start);
		}
	}
	if (d->open_loop || d->stopping || (!d->mix && d->next_load >= o.records)) {
		free(op);
		return;
	}
	issue(d, op, t); /* closed loop: this client's next request */
}

static void issue(struct driver *d, struct op *op, uint64_t start)
{
	char key[KV_MAX_KEY + 1];
	uint64_t keynum;
	size_t klen;
	int rc;

	if (d->mix)
		keynum = ycsb_next_keynum(&d->keys, &d->rng, o.records);
	else
		keynum = d->next_load++;
	klen = ycsb_key(key, sizeof(key), keynum, o.key_size);
	op->d = d;
	op->start = start;
	op->put = !d->mix || ycsb_uniform(&d->rng) >= d->mix->read;
	if (op->put)
		rc = kvc_put(d->c, key, (uint16_t)klen,
			     d->values + ycsb_rand(&d->rng) % (VALUE_POOL - o.value_size),
			     o.value_size, op_done, op);
	else
		rc = kvc_get(d->c, key, (uint16_t)klen, op_done, op);
	if (rc < 0) {
		fprintf(stderr, "twkv-ycsb: submit: %s\n", strerror(-rc));
		free(op);
		return;
	}
	d->inflight++;
}

/* Closed loop: `clients` requests in flight, each replaced by the next when it completes. Open
 * loop (rate > 0): requests at fixed intervals, latency from each one's scheduled time. */
static int run_phase(struct driver *d, unsigned clients, double rate, double warmup,
		     double duration)
{
	uint64_t t0 = now_ns(), t_meas = t0 + (uint64_t)(warmup * 1e9), sent = 0;
	uint64_t t_end = t_meas + (uint64_t)(duration * 1e9);
	struct snap a, b;
	bool load = !d->mix;

	d->open_loop = rate > 0;
	d->measuring = load;
	d->stopping = false;
	if (!d->open_loop)
		for (unsigned i = 0; i < clients && (!load || d->next_load < o.records); i++) {
			struct op *op = calloc(1, sizeof(*op));

			if (!op)
				return -ENOMEM;
			issue(d, op, now_ns());
		}
	if (load && snapshot(d->map, &a) < 0)
		return -EIO;
	for (;;) {
		uint64_t t = now_ns();
		long wait_us;
		int rc;

		if (!load && !d->measuring && t >= t_meas) {
			if (snapshot(d->map, &a) < 0)
				return -EIO;
			d->measuring = true;
			t = now_ns();
		}
		if (load ? d->inflight == 0 : t >= t_end)
			break;
		wait_us = 100000;
		if (d->open_loop) {
			uint64_t due = (uint64_t)((double)(t - t0) * rate / 1e9), next;

			for (; sent < due && d->inflight < 100000; sent++) {
				struct op *op = calloc(1, sizeof(*op));

				if (!op)
					return -ENOMEM;
				issue(d, op, t0 + (uint64_t)((double)sent * 1e9 / rate));
			}
			/* Wake up for the next request's scheduled time. */
			next = t0 + (uint64_t)((double)sent * 1e9 / rate);
			wait_us = next > t ? (long)((next - t) / 1000) : 0;
		}
		rc = kvc_poll(d->c, wait_us);
		if (rc < 0)
			return rc;
	}
	if (snapshot(d->map, &b) < 0)
		return -EIO;
	d->measuring = false;
	d->stopping = true;
	while (d->inflight)
		if (kvc_poll(d->c, 100000) < 0)
			break;
	snap_delta(&d->r->d, &a, &b);
	d->r->secs = (double)d->r->d.t_ns / 1e9;
	return 0;
}

/* --------------------------------------------------------------- local servers */

struct cluster {
	struct kv_cluster map;
	struct kv_child kids[KV_MAX_SERVERS];
	unsigned nkids;
	char dir[256];
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/*
 * One SIGTERM to every server at once, then wait for each without signalling again: a server
 * stops in order on its first SIGTERM (it closes its partitions' logs, then keeps its backup up
 * until the other servers' logs closed their segments there), but a second one means "stop now"
 * and skips that drain, and the logs still open elsewhere then saw their backup go ("backup
 * lost ... appends suspended" at every teardown, issue 34).
 */
static void cluster_stop(struct cluster *cl)
{
	for (unsigned i = 0; i < cl->nkids; i++)
		kill(cl->kids[i].pid, SIGTERM); /* all at once: none waits for another */
	for (unsigned i = 0; i < cl->nkids; i++)
		kv_child_stop(&cl->kids[i], 0, 20000);
	cl->nkids = 0;
	if (cl->dir[0])
		nftw(cl->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	cl->dir[0] = 0;
}

static int cluster_start(struct cluster *cl, int mode)
{
	const char *tmp = getenv("TMPDIR");
	char err[512], keys[32];

	memset(cl, 0, sizeof(*cl));
	snprintf(cl->dir, sizeof(cl->dir), "%s/twkv-ycsb.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(cl->dir)) {
		fprintf(stderr, "twkv-ycsb: mkdtemp %s: %s\n", cl->dir, strerror(errno));
		cl->dir[0] = 0;
		return -errno;
	}
	snprintf(keys, sizeof(keys), "%" PRIu64, o.records / o.servers + 1);
	cl->map.partitions = o.servers;
	cl->map.replicas = o.replicas;
	cl->map.log_base = 1000;
	for (unsigned i = 0; i < o.servers; i++) {
		char dir[300], line[512], *kv, *bk;
		char *argv[] = { o.twkv, (char *)"serve", (char *)"--dir", dir, (char *)"--replication",
				 (char *)mode_name(mode), (char *)"--segment-size",
				 (char *)o.segment_size, (char *)"--memory", (char *)o.memory,
				 (char *)"--keys", keys, NULL, NULL, NULL, NULL, NULL };
		unsigned na = 12;
		int rc;

		if (o.drive) {
			argv[na++] = (char *)"--drive";
			argv[na++] = (char *)o.drive;
		}
		if (o.provider) {
			argv[na++] = (char *)"--provider";
			argv[na++] = (char *)o.provider;
		}
		snprintf(dir, sizeof(dir), "%s/s%u", cl->dir, i);
		rc = kv_spawn(argv, &cl->kids[cl->nkids]);
		if (rc < 0) {
			fprintf(stderr, "twkv-ycsb: %s: %s\n", o.twkv, strerror(-rc));
			return rc;
		}
		cl->nkids++;
		rc = kv_child_line(&cl->kids[i], "ready ", line, sizeof(line), 60000);
		if (rc < 0) {
			fprintf(stderr, "twkv-ycsb: server %u did not get ready: %s\n", i,
				strerror(-rc));
			return rc;
		}
		kv = strstr(line, "kv=");
		bk = strstr(line, "backup=");
		if (!kv || !bk)
			return -EPROTO;
		*strchr(kv, ' ') = 0;
		snprintf(cl->map.servers[i].kv, KV_ADDR_MAX, "%s", kv + 3);
		snprintf(cl->map.servers[i].backup, KV_ADDR_MAX, "%s", bk + 7);
		cl->map.servers[i].owns = UINT64_C(1) << i;
	}
	cl->map.nservers = o.servers;
	if (kv_configure(&cl->map, 60000, err, sizeof(err)) < 0) {
		fprintf(stderr, "twkv-ycsb: configure: %s\n", err);
		return -EIO;
	}
	return 0;
}

/* --------------------------------------------------------------- one mix, one mode */

/* A fresh cluster in `mode`, loaded, then every point (clients or rates) of one mix. */
static int run_mix(const struct mix *mix, int mode, unsigned rep)
{
	unsigned npoints = o.nrates ? o.nrates : o.nclients;
	struct cluster cl;
	struct driver d;
	struct result load;
	char err[512];
	int rc;

	memset(&d, 0, sizeof(d));
	memset(&cl, 0, sizeof(cl));
	if (!o.ncluster) {
		fprintf(stderr, "twkv-ycsb: workload %s, %s replication: starting %u servers (%s)"
			"...\n", mix->name, mode_name(mode), o.servers,
			o.provider ? o.provider : "tcp");
		rc = cluster_start(&cl, mode);
		if (rc < 0)
			goto out;
		rc = kvc_open((const char *const *)&(const char *){ cl.map.servers[0].kv }, 1,
			      30000, &d.c, err, sizeof(err));
	} else {
		rc = kvc_open(o.cluster, o.ncluster, 30000, &d.c, err, sizeof(err));
	}
	if (rc < 0) {
		fprintf(stderr, "twkv-ycsb: %s\n", err);
		goto out;
	}
	d.map = kvc_map(d.c);
	d.values = malloc(VALUE_POOL);
	if (!d.values) {
		rc = -ENOMEM;
		goto out;
	}
	d.rng.s = o.seed;
	for (size_t i = 0; i < VALUE_POOL; i += 8) {
		uint64_t v = ycsb_rand(&d.rng);

		memcpy(d.values + i, &v, 8);
	}
	ycsb_scrambled_init(&d.keys, 0, o.records);
	memset(&load, 0, sizeof(load));
	d.r = &load;
	rc = run_phase(&d, LOAD_CLIENTS, 0, 0, 0);
	if (rc < 0)
		goto out;
	fprintf(stderr, "twkv-ycsb: loaded %" PRIu64 " records in %.2f s (%.0f puts/s, %" PRIu64
		" errors)\n", o.records, load.secs, (double)load.ops / load.secs, load.errors);
	for (unsigned k = 0; k < npoints && nruns < MAX_RUNS; k++) {
		struct result *r = &runs[nruns++];

		memset(r, 0, sizeof(*r));
		r->mode = mode;
		r->rep = rep;
		r->mix = mix->name;
		r->rate = o.nrates ? o.rates[k] : 0;
		r->clients = o.nrates ? 0 : o.clients[k];
		r->load1 = load_avg();
		d.r = r;
		d.mix = mix;
		fprintf(stderr, "twkv-ycsb: workload %s, %s: %s %.0f, %.1f s (load average %.2f)"
			"\n", r->mix, mode_name(mode), r->rate ? "offered ops/s" : "clients",
			r->rate ? r->rate : r->clients, o.duration, r->load1);
		rc = run_phase(&d, r->clients, r->rate, o.warmup, o.duration);
		if (rc < 0)
			goto out;
	}
out:
	kvc_close(d.c);
	free(d.values);
	cluster_stop(&cl);
	return rc;
}

/* --------------------------------------------------------------- output */

static double cores(const struct result *r, int k)
{
	return r->secs > 0 ? (double)r->d.cpu[k] / 1e9 / r->secs : 0;
}

static double per_put_us(const struct result *r, int k)
{
	return r->d.puts ? (double)r->d.cpu[k] / 1e3 / (double)r->d.puts : 0;
}

static const struct result *find(int mode, const char *mix, unsigned clients, double rate,
				 unsigned rep)
{
	for (unsigned i = 0; i < nruns; i++)
		if (runs[i].mode == mode && !strcmp(runs[i].mix, mix) &&
		    runs[i].clients == clients && runs[i].rate == rate && runs[i].rep == rep)
			return &runs[i];
	return NULL;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static double ops_per_s(const struct result *r)
{
	return r->secs > 0 ? (double)r->ops / r->secs : 0;
}

static double cpu_per_op(const struct result *r)
{
	return r->ops ? (double)r->d.cpu[CPU_PROCESS] / (double)r->ops : 0;
}

/* The runs in table order: by mix, point, run, mode (they ran interleaved). */
static unsigned ordered(const struct result **out)
{
	unsigned n = 0;

	for (unsigned m = 0; m < o.nmixes; m++)
		for (unsigned k = 0; k < (o.nrates ? o.nrates : o.nclients); k++)
			for (unsigned rep = 0; rep < o.reps; rep++)
				for (unsigned j = 0; j < o.nmodes; j++) {
					const struct result *r = find(o.modes[j], o.mixes[m]->name,
								      o.nrates ? 0 : o.clients[k],
								      o.nrates ? o.rates[k] : 0,
								      rep);

					if (r)
						out[n++] = r;
				}
	return n;
}

/* The ratios of one onesided run to the rpc run next to it. */
struct ratios {
	double ops, put50, put99, get50, backup, cpu;
};

static bool ratios_of(const struct result *a, struct ratios *q)
{
	const struct result *b = find(MODE_RPC, a->mix, a->clients, a->rate, a->rep);

	if (a->mode != MODE_ONESIDED || !b)
		return false;
	q->ops = ratio(ops_per_s(a), ops_per_s(b));
	q->put50 = ratio(hist_us(&a->put, 0.5), hist_us(&b->put, 0.5));
	q->put99 = ratio(hist_us(&a->put, 0.99), hist_us(&b->put, 0.99));
	q->get50 = ratio(hist_us(&a->get, 0.5), hist_us(&b->get, 0.5));
	q->backup = ratio(per_put_us(a, CPU_BACKUP), per_put_us(b, CPU_BACKUP));
	q->cpu = ratio(cpu_per_op(a), cpu_per_op(b));
	return true;
}

/* "1.23", or "1.10-1.35" for a range over the runs. */
static void cell(char *buf, double lo, double hi)
{
	if (lo == hi)
		snprintf(buf, 24, "%.2f", lo);
	else
		snprintf(buf, 24, "%.2f-%.2f", lo, hi);
}

static void print_table(void)
{
	const struct result *v[MAX_RUNS];
	unsigned n = ordered(v);

	printf("twkv-ycsb: provider %s, %u servers, r = %u, %" PRIu64 " records (%u B keys, %u B "
	       "values), %s, %.1f s per run, Tailwind %s\n", o.provider ? o.provider : "tcp",
	       o.servers, o.replicas, o.records, o.key_size, o.value_size,
	       o.nrates ? "open loop" : "closed loop", o.duration, tw_version());
	printf("  mix  mode      run clients  offered     ops/s  get p50  get p99  put p50  put p99 |"
	       " cores: serve  repl  backup  total | backup us/put  rpcs/put  load\n");
	for (unsigned i = 0; i < n; i++) {
		const struct result *r = v[i];

		printf("  %-4s %-9s %3u %7u %8.0f %9.0f %8.1f %8.1f %8.1f %8.1f | %12.2f %5.2f %7.2f "
		       "%6.2f | %13.2f  %8.2e %5.2f\n", r->mix, mode_name(r->mode), r->rep + 1,
		       r->clients, r->rate, ops_per_s(r), hist_us(&r->get, 0.5),
		       hist_us(&r->get, 0.99), hist_us(&r->put, 0.5), hist_us(&r->put, 0.99),
		       cores(r, CPU_SERVE), cores(r, CPU_REPLICATE), cores(r, CPU_BACKUP),
		       cores(r, CPU_PROCESS), per_put_us(r, CPU_BACKUP),
		       r->d.puts ? (double)r->d.rpcs / (double)r->d.puts : 0, r->load1);
		if (r->errors)
			printf("       (%" PRIu64 " errors, %" PRIu64 " timeouts)\n", r->errors,
			       r->timeouts);
	}
	if (o.nmodes < 2)
		return;
	printf("\nratios onesided / rpc (ops/s: higher is better for onesided; latency and CPU: "
	       "lower)%s\n", o.reps > 1 ? ", min-max over the runs" : "");
	printf("  mix  clients  offered        ops/s      put p50      put p99      get p50  "
	       "backup CPU/put  server CPU/op\n");
	for (unsigned i = 0; i < n; i++) {
		struct ratios q, lo = { 0 }, hi = { 0 };
		char c[6][24];
		unsigned k = 0;

		if (v[i]->mode != MODE_ONESIDED || v[i]->rep != 0)
			continue;
		for (unsigned j = 0; j < n; j++) {
			if (strcmp(v[j]->mix, v[i]->mix) || v[j]->clients != v[i]->clients ||
			    v[j]->rate != v[i]->rate || !ratios_of(v[j], &q))
				continue;
			if (!k++)
				lo = hi = q;
#define RANGE(f) do { lo.f = fmin(lo.f, q.f); hi.f = fmax(hi.f, q.f); } while (0)
			RANGE(ops); RANGE(put50); RANGE(put99); RANGE(get50); RANGE(backup); RANGE(cpu);
#undef RANGE
		}
		if (!k)
			continue;
		cell(c[0], lo.ops, hi.ops);
		cell(c[1], lo.put50, hi.put50);
		cell(c[2], lo.put99, hi.put99);
		cell(c[3], lo.get50, hi.get50);
		cell(c[4], lo.backup, hi.backup);
		cell(c[5], lo.cpu, hi.cpu);
		printf("  %-4s %7u %8.0f %12s %12s %12s %12s %15s %14s\n", v[i]->mix, v[i]->clients,
		       v[i]->rate, c[0], c[1], c[2], c[3], c[4], c[5]);
	}
}

static void print_json(void)
{
	const struct result *v[MAX_RUNS];
	unsigned n = ordered(v), nc = 0;

	printf("{\"provider\":\"%s\",\"servers\":%u,\"replicas\":%u,\"records\":%" PRIu64
	       ",\"key_size\":%u,\"value_size\":%u,\"duration_s\":%g,\"segment_size\":\"%s\","
	       "\"memory\":\"%s\",\"tailwind\":\"%s\",\"runs\":[", o.provider ? o.provider : "tcp",
	       o.servers, o.replicas, o.records, o.key_size, o.value_size, o.duration,
	       o.segment_size, o.memory, tw_version());
	for (unsigned i = 0; i < n; i++) {
		const struct result *r = v[i];

		printf("%s{\"mode\":\"%s\",\"mix\":\"%s\",\"run\":%u,\"clients\":%u,"
		       "\"offered_rate\":%g,\"load_avg\":%.2f,\"secs\":%.3f,\"ops\":%" PRIu64 ",\"ops_per_s\":%.1f,"
		       "\"gets\":%" PRIu64 ",\"puts\":%" PRIu64 ",\"errors\":%" PRIu64 ","
		       "\"timeouts\":%" PRIu64 ",\"get_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},"
		       "\"put_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},\"cores\":{",
		       i ? "," : "", mode_name(r->mode), r->mix, r->rep + 1, r->clients, r->rate,
		       r->load1,
		       r->secs, r->ops, ops_per_s(r), r->gets, r->puts, r->errors, r->timeouts,
		       hist_us(&r->get, 0.5), hist_us(&r->get, 0.99), hist_us(&r->get, 0.999),
		       hist_us(&r->put, 0.5), hist_us(&r->put, 0.99), hist_us(&r->put, 0.999));
		for (int k = 0; k < NCPU; k++)
			printf("%s\"%s\":%.4f", k ? "," : "", cpu_names[k], cores(r, k));
		printf("},\"backup_cpu_us_per_put\":%.3f,\"server_puts\":%" PRIu64 ",\"server_gets\":%"
		       PRIu64 ",\"appends\":%" PRIu64 ",\"writes\":%" PRIu64 ",\"rpcs\":%" PRIu64
		       ",\"rpcs_per_put\":%.3g,\"backup_rpcs\":%" PRIu64 ",\"relocated\":%" PRIu64
		       ",\"serve_cpu_us_per_put\":%.3f,\"replicate_cpu_us_per_put\":%.3f,"
		       "\"server_cpu_us_per_put\":%.3f,\"put_batches\":%" PRIu64
		       ",\"puts_per_batch\":%.2f}",
		       per_put_us(r, CPU_BACKUP), r->d.puts, r->d.gets, r->d.appends, r->d.writes,
		       r->d.rpcs, r->d.puts ? (double)r->d.rpcs / (double)r->d.puts : 0,
		       r->d.backup_rpcs, r->d.relocated, per_put_us(r, CPU_SERVE),
		       per_put_us(r, CPU_REPLICATE), per_put_us(r, CPU_PROCESS), r->d.put_batches,
		       r->d.put_batches ? (double)r->d.puts / (double)r->d.put_batches : 0);
	}
	printf("],\"comparisons\":[");
	for (unsigned i = 0; i < n; i++) {
		struct ratios q;

		if (!ratios_of(v[i], &q))
			continue;
		printf("%s{\"mix\":\"%s\",\"clients\":%u,\"offered_rate\":%g,\"run\":%u,"
		       "\"ops_onesided_over_rpc\":%.3f,\"put_p50_onesided_over_rpc\":%.3f,"
		       "\"put_p99_onesided_over_rpc\":%.3f,\"get_p50_onesided_over_rpc\":%.3f,"
		       "\"backup_cpu_per_put_onesided_over_rpc\":%.3f,"
		       "\"cpu_per_op_onesided_over_rpc\":%.3f}", nc++ ? "," : "", v[i]->mix,
		       v[i]->clients, v[i]->rate, v[i]->rep + 1, q.ops, q.put50, q.put99, q.get50,
		       q.backup, q.cpu);
	}
	printf("]}\n");
}

/* --------------------------------------------------------------- main */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: twkv-ycsb [options]\n"
		"YCSB workloads on a local twkv cluster, replication onesided and rpc side by side"
		" (docs/kv.md).\n"
		"  -p, --provider NAME     libfabric provider for replication (default tcp)\n"
		"  -n, --servers N         local servers, one partition each (default 3)\n"
		"  -r, --replicas R        backups per partition, < servers (default 2)\n"
		"  -R, --records N         records loaded (default 100000)\n"
		"  -k, --key-size B        key bytes, 23..1024 (default 30)\n"
		"  -v, --value-size B      value bytes (default 100)\n"
		"  -c, --clients LIST      closed loop: requests in flight (default 128)\n"
		"  -d, --duration S        seconds measured per run (default 5)\n"
		"  -w, --warmup S          seconds before each measured run (default 0.5)\n"
		"  -m, --mode LIST         onesided,rpc (default both)\n"
		"  -x, --mix LIST          c, b, a, w (write-only); default c,b,a,w\n"
		"      --rate LIST         open loop at these offered ops/s instead of closed loop\n"
		"  -S, --segment-size SIZE servers' log segments (default 8M)\n"
		"  -M, --memory SIZE       servers' log memory budget (default 1G)\n"
		"      --drive MODE        servers' --drive: thread or loop (default: theirs)\n"
		"  -s, --server ADDR       use a running cluster (one mode: its own)\n"
		"      --twkv PATH         the twkv program (default: next to this one)\n"
		"      --seed N            random seed (default: time)\n"
		"      --runs N            the whole sequence N times (ranges of the ratios)\n"
		"      --json              print JSON instead of the table\n");
}

static int parse_list(char *arg, const char **out, unsigned max)
{
	unsigned n = 0;

	for (char *save = NULL, *t = strtok_r(arg, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (n < max)
			out[n++] = t;
	return (int)n;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "servers", required_argument, NULL, 'n' },
		{ "replicas", required_argument, NULL, 'r' },
		{ "records", required_argument, NULL, 'R' },
		{ "key-size", required_argument, NULL, 'k' },
		{ "value-size", required_argument, NULL, 'v' },
		{ "clients", required_argument, NULL, 'c' },
		{ "duration", required_argument, NULL, 'd' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "mode", required_argument, NULL, 'm' },
		{ "mix", required_argument, NULL, 'x' },
		{ "rate", required_argument, NULL, 'L' },
		{ "segment-size", required_argument, NULL, 'S' },
		{ "memory", required_argument, NULL, 'M' },
		{ "server", required_argument, NULL, 's' },
		{ "twkv", required_argument, NULL, 'T' },
		{ "seed", required_argument, NULL, 'e' },
		{ "runs", required_argument, NULL, 'N' },
		{ "json", no_argument, NULL, 'j' },
		{ "drive", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *list[MAX_POINTS];
	int opt, n, rc = 0;

	o.modes[0] = MODE_ONESIDED;
	o.modes[1] = MODE_RPC;
	o.nmodes = 2;
	for (unsigned i = 0; i < 4; i++)
		o.mixes[i] = &mixes_known[i];
	o.nmixes = 4;
	o.seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
	while ((opt = getopt_long(argc, argv, "p:n:r:R:k:v:c:d:w:m:x:S:M:s:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p': o.provider = optarg; break;
		case 'n': o.servers = (unsigned)atoi(optarg); break;
		case 'r': o.replicas = (unsigned)atoi(optarg); break;
		case 'R': o.records = strtoull(optarg, NULL, 10); break;
		case 'k': o.key_size = (unsigned)atoi(optarg); break;
		case 'v': o.value_size = (unsigned)atoi(optarg); break;
		case 'c':
			n = parse_list(optarg, list, MAX_POINTS);
			o.nclients = 0;
			for (int i = 0; i < n; i++)
				if (!(o.clients[o.nclients++] = (unsigned)atoi(list[i])))
					goto bad;
			break;
		case 'd': o.duration = atof(optarg); break;
		case 'w': o.warmup = atof(optarg); break;
		case 'S': o.segment_size = optarg; break;
		case 'M': o.memory = optarg; break;
		case 'D':
			if (strcmp(optarg, "thread") && strcmp(optarg, "loop"))
				goto bad;
			o.drive = optarg;
			break;
		case 'T': snprintf(o.twkv, sizeof(o.twkv), "%s", optarg); break;
		case 'e': o.seed = strtoull(optarg, NULL, 0); break;
		case 'N': o.reps = (unsigned)atoi(optarg); break;
		case 'j': o.json = true; break;
		case 's':
			if (o.ncluster < KV_MAX_SERVERS)
				o.cluster[o.ncluster++] = optarg;
			break;
		case 'm':
			n = parse_list(optarg, list, 2);
			o.nmodes = 0;
			for (int i = 0; i < n; i++) {
				if (strcmp(list[i], "onesided") && strcmp(list[i], "rpc"))
					goto bad;
				o.modes[o.nmodes++] = list[i][0] == 'r' ? MODE_RPC
									: MODE_ONESIDED;
			}
			break;
		case 'x':
			n = parse_list(optarg, list, 8);
			o.nmixes = 0;
			for (int i = 0; i < n; i++) {
				unsigned k;

				for (k = 0; k < 4 && strcmp(list[i], mixes_known[k].name); k++)
					;
				if (k == 4)
					goto bad;
				o.mixes[o.nmixes++] = &mixes_known[k];
			}
			break;
		case 'L':
			n = parse_list(optarg, list, MAX_POINTS);
			o.nrates = 0;
			for (int i = 0; i < n; i++)
				if ((o.rates[o.nrates++] = atof(list[i])) <= 0)
					goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || o.servers < 2 || o.servers > KV_MAX_SERVERS || !o.replicas ||
	    o.replicas >= o.servers || !o.records || o.key_size < 23 || o.key_size > KV_MAX_KEY ||
	    o.value_size > KV_MAX_VALUE / 2 || !o.nclients || o.duration <= 0 || !o.nmodes ||
	    !o.reps ||
	    !o.nmixes) {
		fprintf(stderr, "twkv-ycsb: bad arguments (servers 2..%u, 1 <= replicas < servers, "
			"key size 23..%u, duration > 0)\n", KV_MAX_SERVERS, KV_MAX_KEY);
		return 2;
	}
	if (!o.twkv[0]) {
		char self[4000];
		ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
		char *slash;

		self[len > 0 ? len : 0] = 0;
		slash = strrchr(self, '/');
		snprintf(o.twkv, sizeof(o.twkv), "%.*s/twkv", slash ? (int)(slash - self) : 1,
			 slash ? self : ".");
	}
	if (o.ncluster) {
		uint8_t st;
		char *t;
		uint32_t len;

		/* A running cluster replicates as it was started: its one mode. */
		o.nmodes = 1;
		o.modes[0] = MODE_ONESIDED;
		if (kv_call(o.cluster[0], KV_OP_STATS, NULL, 0, 10000, &st, &t, &len) == 0) {
			if (strstr(t, "replication rpc\n"))
				o.modes[0] = MODE_RPC;
			free(t);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	/* Timer slack of 1 us: the open loop's waits end when the next request is due. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	/* Mode by mode within each mix, the order reversed from one mix to the next (onesided,
	 * rpc, rpc, onesided, ...): the two sides of a ratio run back to back, and a drift of the
	 * machine's load over the whole run favours neither. */
	for (unsigned rep = 0, k = 0; rep < o.reps && rc == 0; rep++)
		for (unsigned m = 0; m < o.nmixes && rc == 0; m++, k++)
			for (unsigned j = 0; j < o.nmodes && rc == 0; j++)
				rc = run_mix(o.mixes[m], o.modes[k % 2 ? o.nmodes - 1 - j : j], rep);
	if (nruns)
		o.json ? print_json() : print_table();
	return rc < 0;
bad:
	fprintf(stderr, "twkv-ycsb: bad value: %s\n", optarg);
	return 2;
}
