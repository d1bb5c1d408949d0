/*
 * tools/twbench.c — the Tailwind benchmark: replicate N objects to r backups and report
 * throughput, latency, backup CPU and control RPCs per object. See docs/twbench.md.
 *
 * With no arguments it starts three local twd processes (found next to this executable, else on
 * $PATH), each in a temporary directory under $TMPDIR, reads their addresses from their
 * `ready <address>` lines, replicates 1,000,000 objects of 100 bytes at r = 3 over tcp, prints a
 * table, stops the twd's with SIGTERM, removes the directories and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "fabric/fabric.h"
#include "proto/rpc.h"

extern char **environ;

#define MAX_BACKUPS 16

struct opts {
	const char *provider;
	char *backups_arg;
	unsigned r;
	uint64_t count;
	uint32_t size;
	bool async;
	unsigned batch;
	unsigned inflight;
	size_t segment_size;
	size_t twd_buffers;
	bool json;
	bool busy_poll;
	bool preopen;
	bool progress;
	const char *mode;
	const char *twd_path;
	uint64_t lat_count;
};

struct twd {
	pid_t pid;
	int out_fd;
	char dir[PATH_MAX];
	char addr[128];
	double cpu_start;
};

static struct twd twds[MAX_BACKUPS];
static unsigned n_twd;
static char tmp_root[PATH_MAX];

/* ------------------------------------------------------------------ helpers */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int rm_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path) < 0 ? 0 : 0;
}

static void stop_twds(void)
{
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].pid > 0)
			kill(twds[i].pid, SIGTERM);
	for (unsigned i = 0; i < n_twd; i++) {
		struct twd *t = &twds[i];
		uint64_t end = now_ns() + 20000000000ull;
		int st;

		if (t->pid <= 0)
			continue;
		for (;;) {
			pid_t w = waitpid(t->pid, &st, WNOHANG);

			if (w == t->pid || (w < 0 && errno != EINTR))
				break;
			if (now_ns() > end) {
				fprintf(stderr, "twbench: twd %d did not exit after SIGTERM, killing it\n",
					(int)t->pid);
				kill(t->pid, SIGKILL);
				waitpid(t->pid, &st, 0);
				break;
			}
			/* Wait for the child by polling its stdout pipe for EOF (no sleep). */
			if (t->out_fd >= 0) {
				struct pollfd pfd = { .fd = t->out_fd, .events = POLLIN };
				char buf[256];

				if (poll(&pfd, 1, 50) > 0 && read(t->out_fd, buf, sizeof(buf)) <= 0) {
					close(t->out_fd);
					t->out_fd = -1;
				}
			} else {
				struct timespec ts = { 0, 10000000 };

				nanosleep(&ts, NULL); /* reaping only; not synchronisation */
			}
		}
		t->pid = 0;
		if (t->out_fd >= 0)
			close(t->out_fd);
		t->out_fd = -1;
	}
	if (tmp_root[0]) {
		nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		tmp_root[0] = '\0';
	}
}

static void on_signal(int sig)
{
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].pid > 0)
			kill(twds[i].pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int find_twd(const char *given, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n;
	const char *path;

	if (given) {
		snprintf(out, len, "%s", given);
		return access(out, X_OK) == 0 ? 0 : -ENOENT;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (snprintf(out, len, "%s/twd", self) < (int)len && access(out, X_OK) == 0)
				return 0;
		}
	}
	path = getenv("PATH");
	while (path && *path) {
		const char *c = strchr(path, ':');
		size_t l = c ? (size_t)(c - path) : strlen(path);

		if (l) {
			snprintf(out, len, "%.*s/twd", (int)l, path);
			if (access(out, X_OK) == 0)
				return 0;
		}
		path = c ? c + 1 : NULL;
	}
	return -ENOENT;
}

/* Read from fd until a line starting with "ready " arrives; copy the address. */
static int wait_ready(struct twd *t, int timeout_ms)
{
	char buf[1024];
	size_t used = 0;
	uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		struct pollfd pfd = { .fd = t->out_fd, .events = POLLIN };
		uint64_t now = now_ns();
		char *nl;
		ssize_t n;
		int rc;

		if (now >= end)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, (int)((end - now) / 1000000u) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			continue;
		n = read(t->out_fd, buf + used, sizeof(buf) - 1 - used);
		if (n <= 0)
			return -EPIPE;
		used += (size_t)n;
		buf[used] = '\0';
		while ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			if (!strncmp(buf, "ready ", 6)) {
				if (strlen(buf + 6) >= sizeof(t->addr))
					return -ENAMETOOLONG;
				memcpy(t->addr, buf + 6, strlen(buf + 6) + 1);
				return 0;
			}
			fprintf(stderr, "twbench: twd: %s\n", buf);
			memmove(buf, nl + 1, used - (size_t)(nl + 1 - buf) + 1);
			used -= (size_t)(nl + 1 - buf);
		}
		if (used >= sizeof(buf) - 1)
			used = 0;
	}
}

static int start_twd(const char *exe, const struct opts *o, unsigned i)
{
	struct twd *t = &twds[i];
	posix_spawn_file_actions_t fa;
	char bufsz[32], nbuf[32];
	char *argv[16];
	int pfd[2], rc, k = 0;

	if (snprintf(t->dir, sizeof(t->dir), "%s/b%u", tmp_root, i) >= (int)sizeof(t->dir))
		return -ENAMETOOLONG;
	if (mkdir(t->dir, 0700) < 0)
		return -errno;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	snprintf(bufsz, sizeof(bufsz), "%zu", o->segment_size);
	snprintf(nbuf, sizeof(nbuf), "%zu", o->twd_buffers);
	argv[k++] = (char *)exe;
	argv[k++] = (char *)"--provider";
	argv[k++] = (char *)o->provider;
	argv[k++] = (char *)"--dir";
	argv[k++] = t->dir;
	argv[k++] = (char *)"--buffer-size";
	argv[k++] = bufsz;
	argv[k++] = (char *)"--buffers";
	argv[k++] = nbuf;
	argv[k] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	rc = posix_spawn(&t->pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		t->pid = 0;
		return -rc;
	}
	t->out_fd = pfd[0];
	n_twd = i + 1 > n_twd ? i + 1 : n_twd;
	rc = wait_ready(t, 20000);
	if (rc < 0)
		fprintf(stderr, "twbench: %s did not print its ready line: %s\n", exe, strerror(-rc));
	return rc;
}

/* utime + stime of a process, seconds. */
static double proc_cpu(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	p = strrchr(buf, ')'); /* comm may contain spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ------------------------------------------------------------------ remote backups' CPU
 * With --backups there is no pid to read: ask each backup for its counters (Stats RPC, the
 * backup's process CPU time) over a fabric instance of our own, before and after the run. */

struct remote {
	struct tw_fab *fab;
	struct tw_chan *ch[MAX_BACKUPS];
	struct tw_rpc_client *cl[MAX_BACKUPS];
	unsigned n;
};

static void rs_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_rpc_client *cl = tw_chan_user(ch);

	(void)arg;
	if (cl)
		tw_rpc_client_on_recv(cl, msg, len);
}

static void rs_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct tw_rpc_client *cl = tw_chan_user(ch);

	(void)arg;
	if (cl)
		tw_rpc_client_on_lost(cl, err);
}

static void remote_close(struct remote *rs)
{
	for (unsigned i = 0; i < rs->n; i++) {
		if (rs->cl[i])
			tw_rpc_client_destroy(rs->cl[i]);
		if (rs->ch[i])
			tw_chan_close(rs->ch[i]);
	}
	if (rs->fab)
		tw_fab_close(rs->fab);
	memset(rs, 0, sizeof(*rs));
}

static int remote_open(struct remote *rs, const char *provider, const char *const *addrs,
		       unsigned n)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = rs_on_recv, .on_lost = rs_on_lost };
	int rc;

	memset(rs, 0, sizeof(*rs));
	tw_fab_config_init(&fc);
	fc.provider = provider;
	rc = tw_fab_open(&fc, &ev, &rs->fab);
	if (rc < 0) {
		rs->fab = NULL;
		return rc;
	}
	rs->n = n;
	for (unsigned i = 0; i < n; i++) {
		if (tw_fab_connect(rs->fab, addrs[i], &rs->ch[i]) < 0) {
			rs->ch[i] = NULL;
			continue;
		}
		if (tw_rpc_client_create(rs->ch[i], NULL, &rs->cl[i]) < 0)
			rs->cl[i] = NULL;
		else
			tw_chan_set_user(rs->ch[i], rs->cl[i]);
	}
	return 0;
}

/* Process CPU seconds of backup i, or -1. */
static double remote_cpu(struct remote *rs, unsigned i)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	double v = -1;

	if (!rs->cl[i])
		return -1;
	tw_rpc_req_stats(&req);
	if (tw_rpc_call_sync(rs->cl[i], &req.env, &rep) == 0 && rep.env &&
	    rep.env->body_case == TAILWIND__ENVELOPE__BODY_STATS_REPLY && rep.env->stats_reply)
		v = rep.env->stats_reply->cpu_seconds;
	tw_rpc_reply_release(&rep);
	return v;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: twbench [options]\n"
		"Replicate objects from a primary to r backups with one-sided writes and report\n"
		"throughput, latency, backup CPU and control RPCs per object.\n"
		"With no --backups, starts r local twd processes (removed at exit).\n\n"
		"  --provider P      libfabric provider: tcp (default), sockets, shm, verbs, ...\n"
		"  --backups A,B,..  use these running twd's instead of local ones\n"
		"  -r N              replication factor (default 3)\n"
		"  --count N         objects to replicate (default 1000000)\n"
		"  --size N          object size in bytes (default 100)\n"
		"  --async           asynchronous appends with callbacks, progress thread (default):\n"
		"                    batching and pipelining; then --latency-count synchronous\n"
		"                    appends on a second log for the latency columns\n"
		"  --sync            every append synchronous (latency from all of them)\n"
		"  --latency-count N synchronous appends measured after an --async run\n"
		"                    (default 10000; 0: none)\n"
		"  --batch N         max entries per write (default 256)\n"
		"  --inflight N      writes in flight per backup (default 8)\n"
		"  --segment-size N  segment (and local twd buffer) size (default 8388608)\n"
		"  --buffers N       buffers per local twd (default 16)\n"
		"  --preopen         open the next segment while the current one fills\n"
		"  --busy-poll       the primary polls instead of blocking (local twd's still block)\n"
		"  --mode M          onesided (default; rpc and raw are not implemented yet)\n"
		"  --twd PATH        twd executable for local backups\n"
		"  --json            machine-readable output on stdout\n"
		"  --no-progress     no progress bar (it is shown only when stderr is a terminal)\n"
		"  --help            this text\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		mul = 1024, end++;
	else if (*end == 'm' || *end == 'M')
		mul = 1024 * 1024, end++;
	if (*end)
		return -1;
	*out = v * mul;
	return 0;
}

/* ------------------------------------------------------------------ the run */

struct run {
	uint64_t *t_submit;
	uint32_t *lat_ns;
	uint64_t done;
	uint64_t errors;
	int first_err;
};

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
	} else {
		uint64_t d = now_ns() - r->t_submit[i];

		r->lat_ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
	}
	__atomic_store_n(&r->done, i + 1, __ATOMIC_RELEASE);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const uint32_t *v, uint64_t n, double q)
{
	uint64_t i;

	if (!n)
		return 0;
	i = (uint64_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i] / 1000.0;
}

static void progress_bar(uint64_t done, uint64_t total)
{
	int w = 40, fill = (int)(done * (uint64_t)w / (total ? total : 1));

	fprintf(stderr, "\r[%.*s%*s] %3d%% %" PRIu64 "/%" PRIu64, fill,
		"########################################", w - fill, "",
		(int)(done * 100 / (total ? total : 1)), done, total);
	if (done == total)
		fputc('\n', stderr);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "backups", required_argument, NULL, 'b' },
		{ "count", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "sync", no_argument, NULL, 'S' },
		{ "async", no_argument, NULL, 'A' },
		{ "batch", required_argument, NULL, 'B' },
		{ "inflight", required_argument, NULL, 'I' },
		{ "segment-size", required_argument, NULL, 'g' },
		{ "buffers", required_argument, NULL, 'f' },
		{ "busy-poll", no_argument, NULL, 'P' },
		{ "mode", required_argument, NULL, 'm' },
		{ "latency-count", required_argument, NULL, 'L' },
		{ "preopen", no_argument, NULL, 'O' },
		{ "twd", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-progress", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.provider = "tcp", .r = 3, .count = 1000000, .size = 100, .batch = 256,
		.inflight = 8, .segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE, .twd_buffers = 16,
		.mode = "onesided", .async = true, .lat_count = 10000,
	};
	const char *addrs[MAX_BACKUPS];
	unsigned n_addrs = 0;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	struct tw_primary_stats st;
	struct run run = { 0 };
	double cpu[MAX_BACKUPS], cpu0[MAX_BACKUPS];
	unsigned n_cpu = 0;
	struct remote rs = { 0 };
	char errmsg[1024], twd_exe[PATH_MAX];
	uint8_t *payload;
	uint64_t t0, t1, v, n_lat = 0;
	uint32_t *lat = NULL;
	int c, rc, exit_code = 1;

	o.progress = isatty(STDERR_FILENO);
	if (getenv("FI_PROVIDER"))
		o.provider = getenv("FI_PROVIDER");
	while ((c = getopt_long(argc, argv, "r:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'p': o.provider = optarg; break;
		case 'b': o.backups_arg = optarg; break;
		case 'r':
			if (parse_u64(optarg, &v) || !v || v > MAX_BACKUPS)
				goto bad;
			o.r = (unsigned)v;
			break;
		case 'n':
			if (parse_u64(optarg, &v) || !v)
				goto bad;
			o.count = v;
			break;
		case 's':
			if (parse_u64(optarg, &v) || !v || v > UINT32_MAX)
				goto bad;
			o.size = (uint32_t)v;
			break;
		case 'S': o.async = false; break;
		case 'A': o.async = true; break;
		case 'B':
			if (parse_u64(optarg, &v) || !v || v > 1u << 20)
				goto bad;
			o.batch = (unsigned)v;
			break;
		case 'I':
			if (parse_u64(optarg, &v) || !v || v > TW_PRIMARY_MAX_INFLIGHT)
				goto bad;
			o.inflight = (unsigned)v;
			break;
		case 'g':
			if (parse_u64(optarg, &v) || v < 4096 || v >= (1ull << 32))
				goto bad;
			o.segment_size = (size_t)v;
			break;
		case 'f':
			if (parse_u64(optarg, &v) || !v || v > 4096)
				goto bad;
			o.twd_buffers = (size_t)v;
			break;
		case 'P': o.busy_poll = true; break;
		case 'O': o.preopen = true; break;
		case 'm': o.mode = optarg; break;
		case 'L':
			if (parse_u64(optarg, &v))
				goto bad;
			o.lat_count = v;
			break;
		case 't': o.twd_path = optarg; break;
		case 'j': o.json = true; break;
		case 'q': o.progress = false; break;
		case 'h': usage(stdout); return 0;
		default:
		bad:
			if (c != '?')
				fprintf(stderr, "twbench: bad value for option: %s\n", optarg ? optarg : "");
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "twbench: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (strcmp(o.mode, "onesided")) {
		fprintf(stderr, "twbench: --mode %s is not implemented yet (only onesided)\n", o.mode);
		return 2;
	}
	if ((size_t)o.size + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > o.segment_size) {
		fprintf(stderr, "twbench: --size %u does not fit a %zu-byte segment\n", o.size,
			o.segment_size);
		return 2;
	}

	if (o.backups_arg) {
		char *save = NULL, *tok;

		for (tok = strtok_r(o.backups_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (n_addrs == MAX_BACKUPS) {
				fprintf(stderr, "twbench: at most %d backups\n", MAX_BACKUPS);
				return 2;
			}
			addrs[n_addrs++] = tok;
		}
	} else {
		const char *tmp = getenv("TMPDIR");

		if (find_twd(o.twd_path, twd_exe, sizeof(twd_exe)) < 0) {
			fprintf(stderr, "twbench: cannot find twd (next to twbench or on $PATH); use "
					"--twd PATH or --backups\n");
			return 1;
		}
		snprintf(tmp_root, sizeof(tmp_root), "%s/twbench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(tmp_root)) {
			fprintf(stderr, "twbench: mkdtemp %s: %s\n", tmp_root, strerror(errno));
			tmp_root[0] = '\0';
			return 1;
		}
		atexit(stop_twds);
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		signal(SIGPIPE, SIG_IGN);
		for (unsigned i = 0; i < o.r; i++) {
			twds[i].out_fd = -1;
			rc = start_twd(twd_exe, &o, i);
			if (rc < 0) {
				fprintf(stderr, "twbench: cannot start %s: %s\n", twd_exe, strerror(-rc));
				return 1;
			}
			addrs[n_addrs++] = twds[i].addr;
		}
	}
	if (n_addrs < o.r) {
		fprintf(stderr, "twbench: -r %u needs at least %u backups, %u given\n", o.r, o.r, n_addrs);
		return 2;
	}

	payload = malloc(o.size);
	run.t_submit = calloc(o.count, sizeof(uint64_t));
	run.lat_ns = calloc(o.count, sizeof(uint32_t));
	if (!payload || !run.t_submit || !run.lat_ns) {
		fprintf(stderr, "twbench: out of memory for %" PRIu64 " objects\n", o.count);
		return 1;
	}
	for (uint32_t i = 0; i < o.size; i++)
		payload[i] = (uint8_t)(i * 7 + 1);

	tw_primary_config_init(&cfg);
	cfg.log_id = ((uint64_t)getpid() << 16) | 1;
	cfg.epoch = 1;
	cfg.backups = addrs;
	cfg.n_backups = n_addrs;
	cfg.replicas = o.r;
	cfg.provider = o.provider;
	cfg.segment_size = o.segment_size;
	cfg.max_batch = o.batch;
	cfg.max_inflight = o.inflight;
	cfg.mode = o.async ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	cfg.busy_poll = o.busy_poll;
	cfg.preopen = o.preopen;
	cfg.open_retry_ms = 30000;
	rc = tw_primary_open(&cfg, &p, errmsg, sizeof(errmsg));
	if (rc < 0) {
		fprintf(stderr, "twbench: cannot open the log: %s: %s\n", tw_strerror(rc), errmsg);
		return 1;
	}
	for (unsigned i = 0; i < n_twd; i++)
		twds[i].cpu_start = proc_cpu(twds[i].pid);
	if (!n_twd && remote_open(&rs, o.provider, addrs, n_addrs) == 0) {
		for (unsigned i = 0; i < n_addrs; i++)
			cpu0[i] = remote_cpu(&rs, i);
	}

	/* Phase 1: replicate `count` objects (throughput; in sync mode also the latencies). */
	t0 = now_ns();
	for (uint64_t i = 0; i < o.count; i++) {
		memcpy(payload, &i, o.size < 8 ? o.size : 8); /* sequence number in every object */
		if (o.async) {
			run.t_submit[i] = now_ns();
			rc = tw_primary_append_async(p, payload, o.size, async_cb, &run, NULL);
		} else {
			uint64_t a = now_ns(), d;

			rc = tw_primary_append(p, payload, o.size, NULL);
			d = now_ns() - a;
			run.lat_ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		if (rc < 0) {
			fprintf(stderr, "\ntwbench: append %" PRIu64 " failed: %s: %s\n", i, tw_strerror(rc),
				tw_primary_errmsg(p));
			goto out;
		}
		if (o.progress && (i & 0x3fff) == 0)
			progress_bar(i, o.count);
	}
	rc = tw_primary_flush(p);
	t1 = now_ns();
	if (rc < 0 || run.errors) {
		fprintf(stderr, "\ntwbench: %" PRIu64 " appends failed: %s: %s\n", run.errors,
			tw_strerror(rc ? rc : run.first_err), tw_primary_errmsg(p));
		goto out;
	}
	if (o.progress)
		progress_bar(o.count, o.count);
	for (unsigned i = 0; i < n_twd; i++)
		cpu[i] = proc_cpu(twds[i].pid) - twds[i].cpu_start;
	n_cpu = n_twd;
	if (!n_twd && rs.fab) {
		for (unsigned i = 0; i < n_addrs; i++) {
			double c1 = remote_cpu(&rs, i);

			cpu[i] = c1 >= 0 && cpu0[i] >= 0 ? c1 - cpu0[i] : -1;
		}
		n_cpu = n_addrs;
		remote_close(&rs);
	}
	rc = tw_primary_finish(p); /* the final close RPC counts too */
	tw_primary_get_stats(p, &st);
	if (rc < 0) {
		fprintf(stderr, "twbench: closing the log: %s: %s\n", tw_strerror(rc), tw_primary_errmsg(p));
		goto out;
	}
	tw_primary_close(p);
	p = NULL;

	/* Phase 2 (async runs): latency of synchronous appends on a second log, caller-driven. */
	if (o.async && o.lat_count) {
		uint64_t n = o.lat_count;

		lat = calloc(n, sizeof(uint32_t));
		if (!lat) {
			fprintf(stderr, "twbench: out of memory\n");
			goto out;
		}
		cfg.log_id++;
		cfg.mode = TW_PRIMARY_SYNC;
		rc = tw_primary_open(&cfg, &p, errmsg, sizeof(errmsg));
		if (rc < 0) {
			fprintf(stderr, "twbench: cannot open the latency log: %s: %s\n", tw_strerror(rc),
				errmsg);
			goto out;
		}
		for (uint64_t i = 0; i < n; i++) {
			uint64_t a = now_ns(), d;

			memcpy(payload, &i, o.size < 8 ? o.size : 8);
			rc = tw_primary_append(p, payload, o.size, NULL);
			d = now_ns() - a;
			if (rc < 0) {
				fprintf(stderr, "twbench: sync append %" PRIu64 " failed: %s: %s\n", i,
					tw_strerror(rc), tw_primary_errmsg(p));
				goto out;
			}
			lat[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		rc = tw_primary_close(p);
		p = NULL;
		if (rc < 0) {
			fprintf(stderr, "twbench: close: %s\n", tw_strerror(rc));
			goto out;
		}
		n_lat = n;
	} else if (!o.async) {
		lat = run.lat_ns;
		run.lat_ns = NULL;
		n_lat = o.count;
	}

	{
		double secs = (double)(t1 - t0) / 1e9;
		double ops = (double)o.count / secs;
		double mbs = (double)o.count * o.size / secs / 1e6;
		double p50 = 0, p99 = 0, p999 = 0, a50 = 0, a99 = 0, a999 = 0;
		uint64_t ctl = st.rpc_open + st.rpc_close;
		double per_obj = (double)ctl / (double)o.count;
		double per_req = (double)ctl / ((double)o.count * o.r);
		char k[64];

		if (n_lat) {
			qsort(lat, n_lat, sizeof(uint32_t), cmp_u32);
			p50 = pct(lat, n_lat, 0.50);
			p99 = pct(lat, n_lat, 0.99);
			p999 = pct(lat, n_lat, 0.999);
		}
		if (o.async) {
			qsort(run.lat_ns, o.count, sizeof(uint32_t), cmp_u32);
			a50 = pct(run.lat_ns, o.count, 0.50);
			a99 = pct(run.lat_ns, o.count, 0.99);
			a999 = pct(run.lat_ns, o.count, 0.999);
		}
		if (o.json) {
			printf("{\"provider\":\"%s\",\"mode\":\"%s\",\"append\":\"%s\",\"replicas\":%u,"
			       "\"count\":%" PRIu64 ",\"size\":%u,\"batch\":%u,\"inflight\":%u,"
			       "\"segment_size\":%zu,\"seconds\":%.6f,\"objects_per_s\":%.1f,"
			       "\"mb_per_s\":%.3f,\"sync_latency_samples\":%" PRIu64 ","
			       "\"sync_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},",
			       o.provider, o.mode, o.async ? "async" : "sync", o.r, o.count, o.size,
			       o.batch, o.inflight, o.segment_size, secs, ops, mbs, n_lat, p50, p99, p999);
			if (o.async)
				printf("\"async_ack_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},",
				       a50, a99, a999);
			printf("\"backup_cpu_s\":[");
			for (unsigned i = 0; i < n_cpu; i++) {
				if (cpu[i] >= 0)
					printf("%s%.3f", i ? "," : "", cpu[i]);
				else
					printf("%snull", i ? "," : "");
			}
			printf("],\"writes\":%" PRIu64 ",\"entries_per_write\":%.3f,\"segments\":%" PRIu64
			       ",\"rpcs\":{\"handshake\":%" PRIu64 ",\"open\":%" PRIu64 ",\"close\":%" PRIu64
			       ",\"total\":%" PRIu64 "},\"control_rpcs_per_object\":%.4g,"
			       "\"control_rpcs_per_replication_request\":%.4g,\"open_refused\":%" PRIu64 "}\n",
			       st.writes, (double)o.count / (double)(st.writes ? st.writes : 1),
			       st.segments, st.rpc_handshake, st.rpc_open, st.rpc_close, st.rpcs, per_obj,
			       per_req, st.open_refused);
		} else {
			printf("twbench: %" PRIu64 " objects of %u B, r = %u, provider %s, %s appends, "
			       "segment %zu B, batch <= %u, %u in flight\n",
			       o.count, o.size, o.r, o.provider, o.async ? "async" : "sync",
			       o.segment_size, o.batch, o.inflight);
			printf("  %-40s %14.0f\n", "objects/s", ops);
			printf("  %-40s %14.2f\n", "MB/s (payload)", mbs);
			snprintf(k, sizeof(k), "sync append latency p50 (us, n=%" PRIu64 ")", n_lat);
			printf("  %-40s %14.1f\n", k, p50);
			printf("  %-40s %14.1f\n", "sync append latency p99 (us)", p99);
			printf("  %-40s %14.1f\n", "sync append latency p99.9 (us)", p999);
			if (o.async) {
				printf("  %-40s %14.1f\n", "async submit->ack p50 (us)", a50);
				printf("  %-40s %14.1f\n", "async submit->ack p99 (us)", a99);
				printf("  %-40s %14.1f\n", "async submit->ack p99.9 (us)", a999);
			}
			for (unsigned i = 0; i < n_cpu; i++) {
				if (n_twd)
					snprintf(k, sizeof(k), "backup %u CPU (s, pid %d)", i, (int)twds[i].pid);
				else
					snprintf(k, sizeof(k), "backup %u CPU (s, stats RPC)", i);
				if (cpu[i] >= 0)
					printf("  %-40s %14.3f\n", k, cpu[i]);
				else
					printf("  %-40s %14s\n", k, "n/a");
			}
			printf("  %-40s %14" PRIu64 "\n", "writes (each to r backups)", st.writes);
			printf("  %-40s %14.2f\n", "entries per write",
			       (double)o.count / (double)(st.writes ? st.writes : 1));
			printf("  %-40s %14" PRIu64 "\n", "segments", st.segments);
			snprintf(k, sizeof(k), "%" PRIu64 " + %" PRIu64, st.rpc_open, st.rpc_close);
			printf("  %-40s %14s\n", "open + close RPCs", k);
			printf("  %-40s %14.3g\n", "control RPCs per object", per_obj);
			printf("  %-40s %14.3g  (paper: 2.38e-05)\n", "control RPCs per replication request",
			       per_req);
			printf("  %-40s %14.3f\n", "seconds", secs);
		}
		fflush(stdout);
	}
	exit_code = 0;
out:
	if (p)
		tw_primary_close(p);
	free(payload);
	free(run.t_submit);
	free(run.lat_ns);
	free(lat);
	if (rs.fab)
		remote_close(&rs);
	stop_twds();
	return exit_code;
}
