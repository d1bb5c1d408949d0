/*
 * tools/twbench.c — the Tailwind benchmark: replicate N objects to r backups and report
 * throughput, latency, backup and primary CPU and control RPCs per object; compare Tailwind's one-sided
 * writes (--mode onesided) with RPC-based replication (--mode rpc, the paper's RAMCloud
 * baseline: TW_DATA_PATH=rpc) and with bare one-sided writes (--mode raw, the
 * ceiling), and sweep sizes, r, batch, in-flight and offered load. See docs/twbench.md and
 * docs/benchmarks.md.
 *
 * With no arguments it starts three local twd processes (found next to this executable, else on
 * $PATH), each in a temporary directory under $TMPDIR, reads their addresses from their
 * `ready <address>` lines, replicates 1,000,000 objects of 100 bytes at r = 3 over tcp, prints a
 * table, stops the twd's with SIGTERM, removes the directories and exits 0. Several modes or
 * sweep points run back to back on the same twd's.
 *
 * This file: main, the options and the sweep loop. The rest: local twd's (bench_spawn.c),
 * backup CPU (bench_cpu.c), the onesided and rpc modes (bench_run.c), raw mode (bench_raw.c),
 * the output (bench_report.c); bench.h says what they share.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "env_defaults.h"
#include "bench.h"
#include "fabric/fabric.h"
#include "peer/peer.h"
#include "proto/auth.h"
#include "proto/rpc.h"

const char *const mode_names[M_COUNT] = { "onesided", "rpc", "raw" };

struct result results[MAX_RESULTS];
unsigned n_results;

static char env_provider[256]; /* $FI_PROVIDER, copied before it is unset */

/* Cluster key for our own RPC connections (stats, raw mode); the primary reads the file. */
static struct tw_auth_key *bench_key;

int bench_connect(struct tw_peer *p, struct tw_fab *fab)
{
	struct tw_peer_opts po;
	int rc;

	tw__peer_opts_init(&po, TAILWIND__ROLE__ROLE_ADMIN);
	po.key = bench_key;
	po.node_id = (uint64_t)getpid() | 1;
	po.node_name = "twbench";
	rc = tw__peer_connect(p, fab, &po);
	if (rc < 0 && p->failed == TW_PEER_HANDSHAKE)
		fprintf(stderr, "twbench: backup %s: %s\n", p->addr, p->why);
	return rc;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t log_seq;

uint64_t next_log_id(void)
{
	return ((uint64_t)getpid() << 16) | ++log_seq;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: twbench [options]\n"
		"Replicate objects from a primary to r backups and report throughput, latency,\n"
		"the backups' and the primary's own CPU and control RPCs per object; compare\n"
		"Tailwind's one-sided writes with RPC-based replication and with bare one-sided\n"
		"writes. See docs/twbench.md.\n"
		"With no --backups, starts local twd processes (removed at exit).\n\n"
		"  --provider P      libfabric provider: tcp (default), sockets, shm, verbs, ...\n"
		"  --backups A,B,..  use these running twd's instead of local ones\n"
		"  --mode M[,M..]    onesided (default), rpc (the backup CPU receives, checks,\n"
		"                    copies and replies), raw (bare one-sided writes, no log format);\n"
		"                    several: run each, same backups, side-by-side table with ratios\n"
		"  -r N[,N..]        replication factor(s) (default 3)\n"
		"  --count N         objects per run (default 1000000)\n"
		"  --max-bytes N     fewer objects for large sizes: count * size <= N per run\n"
		"  --size N, --sizes N[,N..]  object size(s) in bytes (default 100)\n"
		"  --batch N[,N..]   max entries per write (default 256)\n"
		"  --inflight N[,N..] writes in flight per backup (default 8)\n"
		"  --rate R[,R..]    open-loop offered load, objects/s (default: closed loop);\n"
		"                    latency is measured from each object's scheduled time\n"
		"  --async           asynchronous appends, progress thread (default); then\n"
		"                    --latency-count synchronous appends for the latency columns\n"
		"  --sync            every append synchronous (latency from all of them)\n"
		"  --driven          asynchronous appends driven by the calling thread: no\n"
		"                    progress thread (TW_PRIMARY_SYNC with tw_primary_append_async,\n"
		"                    whole batches under load); latency columns as --async\n"
		"  --latency-count N synchronous appends after each async run (default 10000)\n"
		"  --segment-size N  segment (and local twd buffer) size (default 8388608)\n"
		"  --buffers N       buffers per local twd (default 16)\n"
		"  --preopen         open the next segment while the current one fills\n"
		"  --keep-segments   keep every segment in the primary's memory until the end (by\n"
		"                    default the closed segments below the acknowledged one are\n"
		"                    released as the run goes, so the log arena reuses them)\n"
		"  --arena-size N    budget of the primary's log arena (default: a quarter of\n"
		"                    the machine's memory)\n"
		"  --busy-poll       the primary polls instead of blocking (local twd's still block)\n"
		"  --logs N          N logs in this process on one shared context (one connection\n"
		"                    per backup, one progress thread); --count objects in all,\n"
		"                    round robin; reports threads, fds, RSS, open time, aggregate\n"
		"                    and per-log objects/s, fairness (first -r, --size, --batch,\n"
		"                    --inflight only)\n"
		"  --logs-private    with --logs: each log opened alone (tw_primary_open)\n"
		"  --no-settle       do not wait for the backups to go idle between runs\n"
		"  --twd PATH        twd executable for local backups\n"
		"  --key-file PATH   cluster key (default: $TW_KEY_FILE); local twd's get it too\n"
		"  --json            machine-readable output on stdout (one line)\n"
		"  --no-progress     no progress bar (it is shown only when stderr is a terminal)\n"
		"  --version         print the version and exit\n"
		"  --help            this text\n"
		"\n");
	fputs("Provider defaults: FI_SOCKETS_PE_WAITTIME=0 is set unless the environment sets\n"
	      "it (for the primary and the local twd's; docs/fabric.md).\n"
	      "\n" EXIT_HELP, f);
}

static void touch_pages(void *p, size_t len)
{
	volatile uint8_t *b = p;

	for (size_t i = 0; i < len; i += 4096)
		b[i] = 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '-' || *s == '+')
		return -1; /* strtoull would turn "-1" into 2^64 - 1 */
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		mul = 1024, end++;
	else if (*end == 'm' || *end == 'M')
		mul = 1024 * 1024, end++;
	if (*end || v > UINT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

/* Comma-separated list of numbers in [lo, hi]; returns how many, or -1. */
static int parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, unsigned max)
{
	char buf[512], *save = NULL, *tok;
	unsigned n = 0;

	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
		return -1;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (n == max || parse_u64(tok, &v) || v < lo || v > hi)
			return -1;
		out[n++] = v;
	}
	return n ? (int)n : -1;
}

/* ------------------------------------------------------------------ results */

/* ------------------------------------------------------------------ main */

static void quiet_sink(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	(void)level;
	(void)msg;
}

/* Whether the provider opens here: a one-line answer now instead of a twd that dies later. */
static int check_provider(const char *prov)
{
	struct tw_fab_events ev = { 0 };
	struct tw_fab_config fc;
	struct tw_fab *fab;
	int rc;

	tw__fab_config_init(&fc);
	fc.provider = prov;
	tw_diag_set_sink(quiet_sink, NULL); /* the one line below says it all */
	rc = tw__fab_open(&fc, &ev, &fab);
	tw_diag_set_sink(NULL, NULL);
	if (rc < 0) {
		fprintf(stderr, "twbench: --provider %s: %s\n", prov, tw__fab_errmsg(NULL));
		return rc;
	}
	tw__fab_close(fab);
	return 0;
}

#define MAX_COUNT 1000000000ull /* --count, --latency-count: 16 bytes of bookkeeping each */

/* "twbench: --count -1: expected ..." for a bad option value. */
static int bad_value(int c, const char *arg)
{
	static const struct {
		int c;
		const char *name, *want;
	} t[] = {
		{ 'r', "-r", "replication factors from 1 to 16, comma-separated" },
		{ 'n', "--count", "a number of objects from 1 to 1000000000 (k/M suffixes)" },
		{ 's', "--size", "sizes in bytes from 1 to 4294967295, comma-separated" },
		{ 'B', "--batch", "entries per write from 1 to 1048576, comma-separated" },
		{ 'I', "--inflight", "writes in flight from 1 to 1024, comma-separated" },
		{ 'R', "--rate", "objects per second from 1 to 4294967296, comma-separated" },
		{ 'g', "--segment-size", "a multiple of the page size from 4096 to 4294963200 "
		  "(k/M suffixes): what a primary and a twd (--buffer-size) take" },
		{ 'a', "--arena-size", "bytes, at least 4096 (K/M/G suffixes)" },
		{ 'f', "--buffers", "a number of buffers from 1 to 4096" },
		{ 'X', "--max-bytes", "a number of bytes >= 0 (k/M suffixes)" },
		{ 'L', "--latency-count", "a number of appends from 0 to 1000000000" },
		{ 'p', "--provider", "a libfabric provider name (tcp, sockets, shm, verbs, ...)" },
		{ 'G', "--logs", "a number of logs from 1 to 4096" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (t[i].c == c) {
			fprintf(stderr, "twbench: %s '%s': expected %s\n", t[i].name, arg, t[i].want);
			return EXIT_USAGE;
		}
	}
	fprintf(stderr, "twbench: bad value '%s' (see twbench --help)\n", arg);
	return EXIT_USAGE;
}

static int parse_modes(const char *s, struct opts *o)
{
	char buf[128], *save = NULL, *tok;

	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
		return -1;
	o->n_modes = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int m = -1;

		for (int k = 0; k < M_COUNT; k++)
			if (!strcmp(tok, mode_names[k]))
				m = k;
		if (m < 0 || o->n_modes == M_COUNT)
			return -1;
		o->modes[o->n_modes++] = (enum bmode)m;
	}
	return o->n_modes ? 0 : -1;
}

static const struct option lopts[] = {
	{ "provider", required_argument, NULL, 'p' },
	{ "backups", required_argument, NULL, 'b' },
	{ "count", required_argument, NULL, 'n' },
	{ "size", required_argument, NULL, 's' },
	{ "sizes", required_argument, NULL, 's' },
	{ "sync", no_argument, NULL, 'S' },
	{ "async", no_argument, NULL, 'A' },
	{ "driven", no_argument, NULL, 'D' },
	{ "batch", required_argument, NULL, 'B' },
	{ "inflight", required_argument, NULL, 'I' },
	{ "rate", required_argument, NULL, 'R' },
	{ "segment-size", required_argument, NULL, 'g' },
	{ "buffers", required_argument, NULL, 'f' },
	{ "busy-poll", no_argument, NULL, 'P' },
	{ "mode", required_argument, NULL, 'm' },
	{ "latency-count", required_argument, NULL, 'L' },
	{ "preopen", no_argument, NULL, 'O' },
	{ "keep-segments", no_argument, NULL, 'k' },
	{ "arena-size", required_argument, NULL, 'a' },
	{ "no-settle", no_argument, NULL, 'N' },
	{ "max-bytes", required_argument, NULL, 'X' },
	{ "twd", required_argument, NULL, 't' },
	{ "key-file", required_argument, NULL, 'K' },
	{ "json", no_argument, NULL, 'j' },
	{ "logs", required_argument, NULL, 'G' },
	{ "logs-private", no_argument, NULL, 'H' },
	{ "no-progress", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* One option of the command line: -1 to go on, or the exit code to end with. */
static int parse_opt(int c, struct opts *o)
{
	uint64_t v, list[MAX_LIST];
	int n;

	switch (c) {
	case 'p':
		if (!optarg[0])
			goto bad;
		o->provider = optarg;
		return -1;
	case 'b': o->backups_arg = optarg; return -1;
	case 'r':
		n = parse_list(optarg, 1, MAX_BACKUPS, list, MAX_LIST);
		if (n < 0)
			goto bad;
		for (int i = 0; i < n; i++)
			o->rs[i] = (unsigned)list[i];
		o->n_r = (unsigned)n;
		return -1;
	case 'n':
		if (parse_u64(optarg, &v) || !v || v > MAX_COUNT)
			goto bad;
		o->count = v;
		return -1;
	case 's':
		n = parse_list(optarg, 1, UINT32_MAX, list, MAX_LIST);
		if (n < 0)
			goto bad;
		for (int i = 0; i < n; i++)
			o->sizes[i] = (uint32_t)list[i];
		o->n_sizes = (unsigned)n;
		return -1;
	case 'S': o->async = false; return -1;
	case 'A': o->async = true; o->driven = false; return -1;
	case 'D': o->async = true; o->driven = true; return -1;
	case 'B':
		n = parse_list(optarg, 1, 1u << 20, list, MAX_LIST);
		if (n < 0)
			goto bad;
		for (int i = 0; i < n; i++)
			o->batches[i] = (unsigned)list[i];
		o->n_batches = (unsigned)n;
		return -1;
	case 'I':
		n = parse_list(optarg, 1, TW_PRIMARY_MAX_INFLIGHT, list, MAX_LIST);
		if (n < 0)
			goto bad;
		for (int i = 0; i < n; i++)
			o->inflights[i] = (unsigned)list[i];
		o->n_inflights = (unsigned)n;
		return -1;
	case 'R':
		n = parse_list(optarg, 1, 1ull << 32, list, MAX_LIST);
		if (n < 0)
			goto bad;
		for (int i = 0; i < n; i++)
			o->rates[i] = (double)list[i];
		o->n_rates = (unsigned)n;
		return -1;
	case 'g':
		/* Refused up front: the primary and the twd's would refuse it later. */
		if (parse_u64(optarg, &v) || v < 4096 || v >= (1ull << 32) ||
		    v % (uint64_t)sysconf(_SC_PAGESIZE) != 0)
			goto bad;
		o->segment_size = (size_t)v;
		return -1;
	case 'f':
		if (parse_u64(optarg, &v) || !v || v > 4096)
			goto bad;
		o->twd_buffers = (size_t)v;
		return -1;
	case 'P': o->busy_poll = true; return -1;
	case 'O': o->preopen = true; return -1;
	case 'k': o->keep_segments = true; return -1;
	case 'a':
		if (parse_u64(optarg, &v) || v < 4096 || v > SIZE_MAX / 2)
			goto bad;
		o->arena_size = (size_t)v;
		return -1;
	case 'N': o->settle = false; return -1;
	case 'X':
		if (parse_u64(optarg, &v))
			goto bad;
		o->max_bytes = v;
		return -1;
	case 'm':
		if (parse_modes(optarg, o) < 0) {
			fprintf(stderr, "twbench: --mode takes onesided, rpc, raw (comma-separated)\n");
			return EXIT_USAGE;
		}
		return -1;
	case 'L':
		if (parse_u64(optarg, &v) || v > MAX_COUNT)
			goto bad;
		o->lat_count = v;
		return -1;
	case 't': o->twd_path = optarg; return -1;
	case 'j': o->json = true; return -1;
	case 'q': o->progress = false; return -1;
	case 'K': o->key_file = optarg; return -1;
	case 'G':
		if (parse_u64(optarg, &v) || !v || v > 4096)
			goto bad;
		o->logs = (unsigned)v;
		return -1;
	case 'H': o->logs_private = true; return -1;
	case 'h': usage(stdout); return EXIT_OK;
	case 'V': printf("twbench (tailwind) %s\n", tw_version()); return EXIT_OK;
	default:
		fprintf(stderr, "twbench: see twbench --help for the options\n");
		return EXIT_USAGE;
	}
bad:
	return bad_value(c, optarg ? optarg : "");
}

/* The options together, once all are read: -1 to go on, or the exit code to end with. */
static int check_opts(int argc, char **argv, struct opts *o, uint32_t *max_size, unsigned *max_r,
		      unsigned *runs_total)
{
	if (optind < argc) {
		fprintf(stderr, "twbench: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EXIT_USAGE;
	}
	for (unsigned i = 0; i < o->n_sizes; i++) {
		if ((size_t)o->sizes[i] + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > o->segment_size) {
			fprintf(stderr, "twbench: --size %u does not fit a %zu-byte segment\n",
				o->sizes[i], o->segment_size);
			return EXIT_USAGE;
		}
		if (o->sizes[i] > *max_size)
			*max_size = o->sizes[i];
	}
	for (unsigned i = 0; i < o->n_r; i++)
		if (o->rs[i] > *max_r)
			*max_r = o->rs[i];
	*runs_total = o->n_sizes * o->n_r * o->n_batches * o->n_inflights * o->n_rates * o->n_modes;
	if (*runs_total > sizeof(results) / sizeof(results[0])) {
		fprintf(stderr, "twbench: %u runs are too many (at most %zu)\n", *runs_total,
			sizeof(results) / sizeof(results[0]));
		return EXIT_USAGE;
	}
	return -1;
}

/* The backups: the --backups given, or local twd's started here (stop_twds stops them); each
 * must hold a segment in one buffer. -1 to go on, or the exit code to end with. */
static int setup_backups(struct opts *o, unsigned max_r, const char **addrs, unsigned *n_addrs)
{
	int rc;

	if (o->backups_arg) {
		char *save = NULL, *tok;

		for (tok = strtok_r(o->backups_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (*n_addrs == MAX_BACKUPS) {
				fprintf(stderr, "twbench: at most %d backups\n", MAX_BACKUPS);
				return EXIT_USAGE;
			}
			addrs[(*n_addrs)++] = tok;
		}
	} else {
		rc = local_twds_start(o, max_r, addrs, n_addrs);
		if (rc)
			return rc;
	}
	if (*n_addrs < max_r) {
		fprintf(stderr, "twbench: -r %u needs at least %u backups, %u given\n", max_r, max_r,
			*n_addrs);
		return EXIT_USAGE;
	}
	if (!n_twd) {
		/* Running twd's: each must hold a segment in one buffer, or every open fails. */
		remote_stats_open(o->provider, addrs, *n_addrs);
		for (unsigned i = 0; i < *n_addrs; i++) {
			uint64_t bs = remote_buffer_size(i);

			if (bs && bs < o->segment_size) {
				fprintf(stderr, "twbench: --segment-size %zu: backup %s has buffers of %"
					PRIu64 " bytes (its twd --buffer-size), and a segment must fit "
					"one: give --segment-size %" PRIu64 " or less\n", o->segment_size,
					addrs[i], bs, bs);
				return EXIT_USAGE;
			}
		}
	}
	return -1;
}

/* Every point of the sweep (sizes x r x batches x inflights x rates x modes), in order, into
 * results[]: 0, or -1 when a run failed (it said why). */
static int run_sweep(struct opts *o, const char **addrs, unsigned n_addrs, uint8_t *payload,
		     struct run *run, unsigned runs_total)
{
	unsigned run_no = 0;
	int rc;

	for (unsigned is = 0; is < o->n_sizes; is++)
	for (unsigned ir = 0; ir < o->n_r; ir++)
	for (unsigned ib = 0; ib < o->n_batches; ib++)
	for (unsigned ii = 0; ii < o->n_inflights; ii++)
	for (unsigned iq = 0; iq < o->n_rates; iq++)
	for (unsigned im = 0; im < o->n_modes; im++) {
		struct result *x = &results[n_results];

		memset(x, 0, sizeof(*x));
		x->pt.size = o->sizes[is];
		x->pt.r = o->rs[ir];
		x->pt.batch = o->batches[ib];
		x->pt.inflight = o->inflights[ii];
		x->pt.rate = o->rates[iq];
		x->mode = o->modes[im];
		x->count = o->count;
		if (o->max_bytes && x->count * x->pt.size > o->max_bytes)
			x->count = o->max_bytes / x->pt.size > 1000 ? o->max_bytes / x->pt.size : 1000;
		if (x->mode == M_RAW && !o->async) {
			fprintf(stderr, "twbench: raw mode has no --sync form; skipped\n");
			continue;
		}
		run_no++;
		if (runs_total > 1 && !o->json)
			fprintf(stderr, "twbench: run %u/%u: mode %s, size %u, r %u, batch %u, "
				"inflight %u%s\n", run_no, runs_total, mode_names[x->mode], x->pt.size,
				x->pt.r, x->pt.batch, x->pt.inflight, x->pt.rate > 0 ? ", open loop" : "");
		if (o->settle && n_results)
			settle_backups();
		if (x->mode == M_RAW)
			rc = run_raw(o, addrs, x, payload, run);
		else
			rc = run_primary(o, addrs, n_addrs, x->mode, x, payload, run);
		if (rc < 0)
			return -1;
		x->ops = (double)x->count / x->secs;
		x->mbs = (double)x->count * x->pt.size / x->secs / 1e6;
		n_results++;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.provider = "tcp", .rs = { 3 }, .n_r = 1, .count = 1000000, .sizes = { 100 },
		.n_sizes = 1, .batches = { 256 }, .n_batches = 1, .inflights = { 8 },
		.n_inflights = 1, .rates = { 0 }, .n_rates = 1, .modes = { M_ONESIDED }, .n_modes = 1,
		.segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE, .twd_buffers = 16, .async = true,
		.lat_count = 10000, .settle = true,
	};
	const char *addrs[MAX_BACKUPS];
	unsigned n_addrs = 0, max_r = 0, runs_total;
	struct run run = { 0 };
	uint8_t *payload = NULL;
	uint32_t max_size = 0;
	int c, rc, exit_code = EXIT_FAIL;

	tw_tools_env_defaults(); /* first: no thread runs yet (the sockets provider's spin) */
	o.progress = isatty(STDERR_FILENO);
	prctl(PR_SET_TIMERSLACK, 1000UL); /* --rate pacing sleeps to the microsecond */
	/* $FI_PROVIDER is our default provider, passed by name (to the twd's too); left set,
	 * libfabric would hide every other provider from the "this machine offers" list. */
	if (getenv("FI_PROVIDER") && getenv("FI_PROVIDER")[0]) {
		snprintf(env_provider, sizeof(env_provider), "%s", getenv("FI_PROVIDER"));
		o.provider = env_provider;
		unsetenv("FI_PROVIDER");
	}
	while ((c = getopt_long(argc, argv, "r:hV", lopts, NULL)) != -1)
		if ((rc = parse_opt(c, &o)) != -1)
			return rc;
	rc = check_opts(argc, argv, &o, &max_size, &max_r, &runs_total);
	if (rc != -1)
		return rc;

	if (check_provider(o.provider) < 0)
		return EXIT_PROVIDER;
	o.key_file = tw__auth_key_path(o.key_file);
	if (o.key_file) {
		char why[512];

		if (tw__auth_key_load(o.key_file, &bench_key, why, sizeof(why)) < 0) {
			fprintf(stderr, "twbench: %s\n", why);
			return EXIT_USAGE;
		}
	}
	rc = setup_backups(&o, max_r, addrs, &n_addrs);
	if (rc != -1) {
		exit_code = rc;
		goto out;
	}

	payload = malloc(max_size);
	run.t_submit = calloc(o.count, sizeof(uint64_t));
	run.lat_ns = calloc(o.count > o.lat_count ? o.count : o.lat_count, sizeof(uint64_t));
	if (!payload || !run.t_submit || !run.lat_ns) {
		fprintf(stderr, "twbench: out of memory for %" PRIu64 " objects\n", o.count);
		exit_code = EXIT_MEMORY;
		goto out;
	}
	/* Back the per-object arrays before any run: untouched, their page faults landed inside
	 * the measured interval (11,000 per second at 1.3 million objects per second), in every
	 * mode. A volatile store per page: the compiler turns malloc + memset(0) into calloc. */
	touch_pages(run.t_submit, o.count * sizeof(uint64_t));
	touch_pages(run.lat_ns, (o.count > o.lat_count ? o.count : o.lat_count) * sizeof(uint32_t));
	for (uint32_t i = 0; i < max_size; i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	if (o.logs) {
		if (o.logs_private && o.logs > 1 && !o.json)
			fprintf(stderr, "twbench: --logs-private: %u fabric instances, %u "
				"connections per backup, %u progress threads\n", o.logs, o.logs,
				o.logs);
		exit_code = run_logs(&o, addrs, n_addrs, payload) < 0 ? EXIT_FAIL : EXIT_OK;
		goto out;
	}

	if (run_sweep(&o, addrs, n_addrs, payload, &run, runs_total) < 0)
		goto out;
	if (o.json)
		print_json(&o);
	else if (n_results == 1)
		print_single(&o, &results[0]);
	else
		print_table(&o);
	fflush(stdout);
	exit_code = EXIT_OK;
out:
	free(payload);
	free(run.t_submit);
	free(run.lat_ns);
	remote_stats_close();
	stop_twds();
	return exit_code;
}

