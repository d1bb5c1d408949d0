/*
 * tools/twbench.c — the Tailwind benchmark: replicate N objects to r backups and report
 * throughput, latency, backup CPU and control RPCs per object; compare Tailwind's one-sided
 * writes (--mode onesided) with RPC-based replication (--mode rpc, the paper's RAMCloud
 * baseline: cfg.data_path = TW_DATA_RPC) and with bare one-sided writes (--mode raw, the
 * ceiling), and sweep sizes, r, batch, in-flight and offered load. See docs/twbench.md and
 * docs/benchmarks.md.
 *
 * With no arguments it starts three local twd processes (found next to this executable, else on
 * $PATH), each in a temporary directory under $TMPDIR, reads their addresses from their
 * `ready <address>` lines, replicates 1,000,000 objects of 100 bytes at r = 3 over tcp, prints a
 * table, stops the twd's with SIGTERM, removes the directories and exits 0. Several modes or
 * sweep points run back to back on the same twd's.
 *
 * Threading: main thread only, except the primary's own progress thread in --async runs (the
 * callbacks run there and touch only struct run).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "fabric/fabric.h"
#include "proto/auth.h"
#include "proto/rpc.h"

extern char **environ;

#define MAX_BACKUPS 16

#define MAX_LIST 32

enum bmode { M_ONESIDED = 0, M_RPC, M_RAW, M_COUNT };
static const char *const mode_names[M_COUNT] = { "onesided", "rpc", "raw" };

struct opts {
	const char *provider;
	char *backups_arg;
	unsigned rs[MAX_LIST], n_r;             /* -r list */
	uint64_t count;
	uint32_t sizes[MAX_LIST];               /* --size/--sizes list */
	unsigned n_sizes;
	bool async;
	unsigned batches[MAX_LIST], n_batches;  /* --batch list */
	unsigned inflights[MAX_LIST], n_inflights;
	double rates[MAX_LIST];                 /* --rate list; 0: closed loop */
	unsigned n_rates;
	enum bmode modes[M_COUNT];
	unsigned n_modes;
	size_t segment_size;
	size_t twd_buffers;
	bool json;
	bool busy_poll;
	bool preopen;
	bool progress;
	const char *twd_path;
	uint64_t lat_count;
	uint64_t max_bytes;                     /* cap count * size per run (0: none) */
	bool settle;                            /* wait for idle backups between runs */
	const char *key_file;                   /* --key-file, else $TW_KEY_FILE (resolved) */
};

struct twd {
	pid_t pid;
	int out_fd;
	char dir[PATH_MAX];
	char addr[128];
	double cpu_start;
};

/* Cluster key for our own RPC connections (stats, raw mode); the primary reads the file. */
static struct tw_auth_key *bench_key;

/* Handshake on a fresh connection, with the key's challenge-response when there is one. */
static int bench_handshake(struct tw_rpc_client *cl, const char *addr)
{
	struct tw_rpc_reply rep;
	char why[256];
	int rc;

	rc = tw_auth_client_handshake(cl, bench_key, (uint64_t)getpid() | 1,
				      TAILWIND__ROLE__ROLE_ADMIN, "twbench", &rep, why, sizeof(why));
	tw_rpc_reply_release(&rep);
	if (rc < 0)
		fprintf(stderr, "twbench: backup %s: %s\n", addr, why);
	return rc;
}

static struct twd twds[MAX_BACKUPS];
static unsigned n_twd;
static char tmp_root[PATH_MAX];
/* Held while twds[], n_twd and tmp_root change, so the signal thread sees whole updates. */
static pthread_mutex_t twd_lock = PTHREAD_MUTEX_INITIALIZER;
static char env_provider[256]; /* $FI_PROVIDER, copied before it is unset */

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
	pthread_mutex_lock(&twd_lock);
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
	pthread_mutex_unlock(&twd_lock);
}

/*
 * SIGINT/SIGTERM while local twd's run (blocked in every thread, taken here by sigwait): kill
 * the twd's (their data is scratch), reap them, remove the temporary directory, then die of the
 * same signal so the shell sees what happened.
 */
static void *signal_main(void *arg)
{
	sigset_t *set = arg;
	int sig;

	while (sigwait(set, &sig) != 0)
		;
	pthread_mutex_lock(&twd_lock);
	fprintf(stderr, "\ntwbench: %s: stopping %u local twd(s) and removing %s\n",
		strsignal(sig), n_twd, tmp_root[0] ? tmp_root : "(nothing)");
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].pid > 0)
			kill(twds[i].pid, SIGKILL);
	for (unsigned i = 0; i < n_twd; i++) {
		if (twds[i].pid > 0)
			while (waitpid(twds[i].pid, NULL, 0) < 0 && errno == EINTR)
				;
		twds[i].pid = 0;
	}
	if (tmp_root[0]) {
		nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		tmp_root[0] = '\0';
	}
	signal(sig, SIG_DFL);
	pthread_sigmask(SIG_UNBLOCK, set, NULL);
	raise(sig); /* to this thread: the default action ends the process */
	_exit(128 + sig);
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

/* twd's exit codes (twd --help, docs/operations.md). */
static const char *twd_status_str(int st)
{
	switch (st) {
	case 2: return "usage error";
	case 3: return "storage directory unusable";
	case 4: return "provider unavailable or cannot listen";
	case 5: return "cannot allocate or register the buffer pool";
	default: return "runtime failure";
	}
}

static int start_twd(const char *exe, const struct opts *o, unsigned i)
{
	struct twd *t = &twds[i];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t sa;
	sigset_t none;
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
	if (o->key_file) {
		argv[k++] = (char *)"--key-file";
		argv[k++] = (char *)o->key_file;
	}
	argv[k] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawnattr_init(&sa);
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&sa, &none); /* ours blocks SIGINT/SIGTERM for sigwait */
	posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK);
	pthread_mutex_lock(&twd_lock);
	rc = posix_spawn(&t->pid, exe, &fa, &sa, argv, environ);
	if (rc == 0)
		n_twd = i + 1 > n_twd ? i + 1 : n_twd;
	pthread_mutex_unlock(&twd_lock);
	posix_spawnattr_destroy(&sa);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		t->pid = 0;
		return -rc;
	}
	t->out_fd = pfd[0];
	rc = wait_ready(t, 20000);
	if (rc == -EPIPE) {
		int st = 0;

		pthread_mutex_lock(&twd_lock);
		if (waitpid(t->pid, &st, 0) == t->pid)
			t->pid = 0;
		pthread_mutex_unlock(&twd_lock);
		if (WIFEXITED(st))
			fprintf(stderr, "twbench: %s exited with status %d before it was ready (%s; "
				"its message is above)\n", exe, WEXITSTATUS(st),
				twd_status_str(WEXITSTATUS(st)));
		else
			fprintf(stderr, "twbench: %s died before it was ready\n", exe);
	} else if (rc < 0) {
		fprintf(stderr, "twbench: %s did not print its ready line: %s\n", exe, strerror(-rc));
	}
	return rc;
}

/* utime + stime of a process (tid 0) or of one of its threads, seconds; -1 if unknown. */
static double proc_cpu_tid(pid_t pid, pid_t tid)
{
	char path[96], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
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

static double proc_cpu(pid_t pid)
{
	return proc_cpu_tid(pid, 0);
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
		if (tw_rpc_client_create(rs->ch[i], NULL, &rs->cl[i]) < 0) {
			rs->cl[i] = NULL;
		} else {
			tw_chan_set_user(rs->ch[i], rs->cl[i]);
			if (bench_handshake(rs->cl[i], addrs[i]) < 0) {
				tw_rpc_client_destroy(rs->cl[i]);
				rs->cl[i] = NULL;
			}
		}
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
		"Usage: twbench [options]\n"
		"Replicate objects from a primary to r backups and report throughput, latency,\n"
		"backup CPU and control RPCs per object; compare Tailwind's one-sided writes with\n"
		"RPC-based replication and with bare one-sided writes. See docs/twbench.md.\n"
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
		"  --latency-count N synchronous appends after each async run (default 10000)\n"
		"  --segment-size N  segment (and local twd buffer) size (default 8388608)\n"
		"  --buffers N       buffers per local twd (default 16)\n"
		"  --preopen         open the next segment while the current one fills\n"
		"  --busy-poll       the primary polls instead of blocking (local twd's still block)\n"
		"  --no-settle       do not wait for the backups to go idle between runs\n"
		"  --twd PATH        twd executable for local backups\n"
		"  --key-file PATH   cluster key (default: $TW_KEY_FILE); local twd's get it too\n"
		"  --json            machine-readable output on stdout (one line)\n"
		"  --no-progress     no progress bar (it is shown only when stderr is a terminal)\n"
		"  --version         print the version and exit\n"
		"  --help            this text\n");
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

/* One point of a sweep. */
struct point {
	uint32_t size;
	unsigned r, batch, inflight;
	double rate; /* offered objects/s; 0: closed loop */
};

/* What one run measured. */
struct result {
	struct point pt;
	enum bmode mode;
	uint64_t count;
	double secs, ops, mbs;
	uint64_t n_lat;            /* synchronous latency samples */
	double p50, p99, p999;     /* synchronous append (raw: single write to r) latency, us */
	bool have_ack;
	double a50, a99, a999;     /* async submit (or scheduled time) -> ack, us */
	unsigned n_cpu;
	double cpu[MAX_BACKUPS];   /* process CPU s of each backup over the replication phase */
	double cpu_main[MAX_BACKUPS]; /* its progress (main) thread only; -1 unknown */
	double cpu_sum, cpu_main_sum;
	bool cpu_ok, cpu_main_ok;
	uint64_t writes, segments, rpc_handshake, rpc_open, rpc_close, rpc_total, open_refused;
};

static struct result results[1024];
static unsigned n_results;

/* Backup CPU accounting around one replication phase. */
struct cpumark {
	double proc[MAX_BACKUPS], main[MAX_BACKUPS];
};

static struct remote rs_stats;
static bool rs_open;
static unsigned rs_n;

static void cpu_mark(struct cpumark *m)
{
	for (unsigned i = 0; i < n_twd; i++) {
		m->proc[i] = proc_cpu(twds[i].pid);
		m->main[i] = proc_cpu_tid(twds[i].pid, twds[i].pid); /* twd runs the backup there */
	}
	if (!n_twd && rs_open)
		for (unsigned i = 0; i < rs_n; i++) {
			m->proc[i] = remote_cpu(&rs_stats, i);
			m->main[i] = -1;
		}
}

static void cpu_delta(const struct cpumark *a, const struct cpumark *b, struct result *res)
{
	unsigned n = n_twd ? n_twd : (rs_open ? rs_n : 0);

	res->n_cpu = n;
	res->cpu_ok = n > 0;
	res->cpu_main_ok = n_twd > 0;
	res->cpu_sum = res->cpu_main_sum = 0;
	for (unsigned i = 0; i < n; i++) {
		res->cpu[i] = a->proc[i] >= 0 && b->proc[i] >= 0 ? b->proc[i] - a->proc[i] : -1;
		res->cpu_main[i] = a->main[i] >= 0 && b->main[i] >= 0 ? b->main[i] - a->main[i] : -1;
		if (res->cpu[i] < 0)
			res->cpu_ok = false;
		else
			res->cpu_sum += res->cpu[i];
		if (res->cpu_main[i] < 0)
			res->cpu_main_ok = false;
		else
			res->cpu_main_sum += res->cpu_main[i];
	}
}

/* Between runs: wait until the local backups stop burning CPU (the previous run's flushes and
 * zeroing), so each run's CPU delta is its own. At most 5 s. Measurement hygiene only. */
static void settle_backups(void)
{
	double last = -1;

	for (int k = 0; k < 50 && n_twd; k++) {
		struct timespec ts = { 0, 100000000 };
		double sum = 0;

		for (unsigned i = 0; i < n_twd; i++)
			sum += proc_cpu(twds[i].pid);
		if (last >= 0 && sum - last < 0.005)
			return;
		last = sum;
		nanosleep(&ts, NULL);
	}
}

/* ------------------------------------------------------------------ the primary's modes */

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
		uint64_t now = now_ns(), d = now > r->t_submit[i] ? now - r->t_submit[i] : 0;

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

/* Sort n latencies: LSD radix sort, 4 passes of 8 bits (a 1M-sample qsort with a comparison
 * callback took ~10% of a run's CPU samples); qsort if the scratch buffer cannot be had. */
static void sort_u32(uint32_t *v, uint64_t n)
{
	uint32_t *tmp = n > 1 ? malloc(n * sizeof(*tmp)) : NULL;
	uint32_t *src = v, *dst = tmp;

	if (!tmp) {
		qsort(v, n, sizeof(uint32_t), cmp_u32);
		return;
	}
	for (unsigned shift = 0; shift < 32; shift += 8) {
		uint64_t count[257] = { 0 };
		uint32_t *t;

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
	/* Four passes: the sorted data is back in v. */
	free(tmp);
}

static void pcts(uint32_t *v, uint64_t n, double *p50, double *p99, double *p999)
{
	sort_u32(v, n);
	*p50 = pct(v, n, 0.50);
	*p99 = pct(v, n, 0.99);
	*p999 = pct(v, n, 0.999);
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

/* Open-loop pacing: the time object i is due at `rate` objects/s from t0. */
static uint64_t sched_ns(uint64_t t0, double rate, uint64_t i)
{
	return t0 + (uint64_t)((double)i * 1e9 / rate);
}

/* Wait until about `t` by sleeping, never spinning: on a 2-vCPU machine a spinning submitter
 * would take the CPU from the primary's progress thread and the backups. Gaps under 5 us are not
 * waited for (the objects go out in a burst; their latency still counts from their scheduled
 * time). The timer slack is set to 1 us in main(). */
static void wait_until(uint64_t t)
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

static uint64_t log_seq;

static uint64_t next_log_id(void)
{
	return ((uint64_t)getpid() << 16) | ++log_seq;
}

/* onesided and rpc: the real primary; only cfg.data_path differs. */
static int run_primary(const struct opts *o, const char *const *addrs, unsigned n_addrs,
		       enum bmode mode, struct result *res, uint8_t *payload, struct run *run)
{
	const struct point *pt = &res->pt;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	struct tw_primary_stats st;
	struct cpumark c0, c1;
	char errmsg[1024];
	uint64_t t0, t1;
	int rc;

	tw_primary_config_init(&cfg);
	cfg.log_id = next_log_id();
	cfg.epoch = 1;
	cfg.backups = addrs;
	cfg.n_backups = n_addrs;
	cfg.replicas = pt->r;
	cfg.provider = o->provider;
	cfg.key_file = o->key_file ? o->key_file : "";
	cfg.segment_size = o->segment_size;
	cfg.max_batch = pt->batch;
	cfg.max_inflight = pt->inflight;
	cfg.mode = o->async ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	cfg.busy_poll = o->busy_poll;
	cfg.preopen = o->preopen;
	cfg.open_retry_ms = 30000;
	cfg.data_path = mode == M_RPC ? TW_DATA_RPC : TW_DATA_ONESIDED;
	rc = tw_primary_open(&cfg, &p, errmsg, sizeof(errmsg));
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
	for (uint64_t i = 0; i < res->count; i++) {
		memcpy(payload, &i, pt->size < 8 ? pt->size : 8); /* sequence number in every object */
		if (pt->rate > 0) {
			run->t_submit[i] = sched_ns(t0, pt->rate, i);
			wait_until(run->t_submit[i]);
		}
		if (o->async) {
			if (pt->rate <= 0)
				run->t_submit[i] = now_ns();
			rc = tw_primary_append_async(p, payload, pt->size, async_cb, run, NULL);
		} else {
			uint64_t a = pt->rate > 0 ? run->t_submit[i] : now_ns(), d;

			rc = tw_primary_append(p, payload, pt->size, NULL);
			d = now_ns() - a;
			run->lat_ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		if (rc < 0) {
			fprintf(stderr, "\ntwbench: append %" PRIu64 " failed: %s: %s\n", i,
				tw_strerror(rc), tw_primary_errmsg(p));
			goto fail;
		}
		if (o->progress && (i & 0x3fff) == 0)
			progress_bar(i, res->count);
	}
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
	res->writes = st.writes;
	res->segments = st.segments;
	res->rpc_handshake = st.rpc_handshake;
	res->rpc_open = st.rpc_open;
	res->rpc_close = st.rpc_close;
	res->rpc_total = st.rpcs;
	res->open_refused = st.open_refused;
	if (o->async) {
		res->have_ack = true;
		pcts(run->lat_ns, res->count, &res->a50, &res->a99, &res->a999);
	} else {
		res->n_lat = res->count;
		pcts(run->lat_ns, res->count, &res->p50, &res->p99, &res->p999);
	}

	/* Phase 2 (async closed-loop runs): synchronous appends on a second log, caller-driven. */
	if (o->async && o->lat_count && pt->rate <= 0) {
		uint64_t n = o->lat_count;
		uint32_t *lat = run->lat_ns; /* reused: phase 1's percentiles are taken */

		cfg.log_id = next_log_id();
		cfg.mode = TW_PRIMARY_SYNC;
		rc = tw_primary_open(&cfg, &p, errmsg, sizeof(errmsg));
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
				goto fail;
			}
			lat[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		rc = tw_primary_close(p);
		p = NULL;
		if (rc < 0) {
			fprintf(stderr, "twbench: close: %s\n", tw_strerror(rc));
			return rc;
		}
		res->n_lat = n;
		pcts(lat, n, &res->p50, &res->p99, &res->p999);
	}
	return 0;
fail:
	if (p)
		tw_primary_close(p);
	return rc < 0 ? rc : -EIO;
}

/* ------------------------------------------------------------------ raw mode
 * Bare one-sided writes of the same object bytes to the same backups, with the same batch and
 * in-flight limits, and no protocol: no entry headers, no checksum entries, no segments (one
 * buffer per backup, written round and round), no acknowledgement order beyond the slot ring.
 * The objects are copied into a registered source buffer (the primary copies them once too).
 * One thread posts and polls (the ceiling of the transport, as the primary's driver sees it). */

struct rawslot;

struct rawop {
	struct tw_op op; /* first */
	struct rawslot *s;
};

struct rawslot {
	struct rawop ops[MAX_BACKUPS];
	uint64_t first, n; /* objects */
	unsigned remaining;
	int status;
};

struct raw {
	struct tw_fab *fab;
	unsigned r;
	struct tw_chan *ch[MAX_BACKUPS];
	struct tw_rpc_client *cl[MAX_BACKUPS];
	struct tw_rkey rk[MAX_BACKUPS];
	bool opened[MAX_BACKUPS];
	uint8_t *src;
	size_t src_len, region; /* nslots + 1 regions of `region` bytes, then a zero page */
	struct tw_mr *mr;
	struct rawslot *slots;
	unsigned nslots;
	uint64_t head, tail;
	uint64_t roff;          /* next remote offset */
	uint64_t pend_first, pend_n;
	unsigned batch;
	uint32_t size;
	uint64_t writes;
	int err;
	uint64_t *t_submit;
	uint32_t *lat_ns;
};

static void raw_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct raw *w = arg;

	for (unsigned i = 0; i < w->r; i++)
		if (w->ch[i] == ch && w->cl[i])
			tw_rpc_client_on_recv(w->cl[i], msg, len);
}

static void raw_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct raw *w = arg;

	for (unsigned i = 0; i < w->r; i++)
		if (w->ch[i] == ch && w->cl[i])
			tw_rpc_client_on_lost(w->cl[i], err);
	if (!w->err)
		w->err = err < 0 ? err : -TW_EPEERLOST;
}

static void raw_op_done(struct tw_op *op, int status)
{
	struct rawop *ro = (struct rawop *)op;

	if (status < 0 && !ro->s->status)
		ro->s->status = status;
	ro->s->remaining--;
}

static bool raw_slot_free(const struct raw *w)
{
	return w->head - w->tail < w->nslots;
}

/* Post the pending objects as one write to every backup. */
static int raw_post(struct raw *w)
{
	struct rawslot *s = &w->slots[w->head % w->nslots];
	uint8_t *src = w->src + (w->head % (w->nslots + 1)) * w->region;
	size_t len = w->pend_n * w->size;

	if (w->roff + len > w->rk[0].len)
		w->roff = 0;
	s->first = w->pend_first;
	s->n = w->pend_n;
	s->status = 0;
	s->remaining = w->r;
	w->head++;
	w->writes++;
	w->pend_first += w->pend_n;
	w->pend_n = 0;
	for (unsigned i = 0; i < w->r; i++) {
		struct rawop *ro = &s->ops[i];
		int rc;

		memset(&ro->op, 0, sizeof(ro->op));
		ro->op.cb = raw_op_done;
		ro->s = s;
		rc = tw_chan_write(w->ch[i], &ro->op, src, len, w->mr, &w->rk[i], w->roff);
		if (rc < 0) {
			s->remaining--;
			if (!s->status)
				s->status = rc;
		}
	}
	w->roff += len;
	return 0;
}

/* Retire finished writes in order; record their objects' latency. */
static void raw_reap(struct raw *w)
{
	uint64_t now = 0;

	while (w->tail < w->head) {
		struct rawslot *s = &w->slots[w->tail % w->nslots];

		if (s->remaining)
			break;
		if (s->status && !w->err)
			w->err = s->status;
		if (!now)
			now = now_ns();
		for (uint64_t i = s->first; w->lat_ns && i < s->first + s->n; i++) {
			uint64_t d = now > w->t_submit[i] ? now - w->t_submit[i] : 0;

			w->lat_ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		w->tail++;
	}
}

static void raw_drive(struct raw *w, int timeout_ms)
{
	tw_fab_progress(w->fab, timeout_ms);
	raw_reap(w);
}

static void raw_close(struct raw *w, uint64_t log_id)
{
	/* Make the buffers scan empty (type 0 at offset 0), then close them with offset 0, so
	 * the backups take them back without calling them corrupt. */
	for (unsigned i = 0; i < w->r && w->mr && !w->err; i++) {
		if (!w->opened[i])
			continue;
		struct rawop zop;
		struct rawslot zs;

		memset(&zs, 0, sizeof(zs));
		zs.remaining = 1;
		memset(&zop, 0, sizeof(zop));
		zop.op.cb = raw_op_done;
		zop.s = &zs;
		if (tw_chan_write(w->ch[i], &zop.op, w->src + (w->nslots + 1) * w->region, 64, w->mr,
				  &w->rk[i], 0) < 0)
			continue;
		while (zs.remaining)
			tw_fab_progress(w->fab, 100);
	}
	for (unsigned i = 0; i < w->r; i++) {
		if (w->opened[i] && w->cl[i]) {
			struct tw_rpc_seg_meta m = { log_id, 0, 0, 0 };

			tw_rpc_close_segment(w->cl[i], 1, &m, 0, NULL);
		}
		if (w->cl[i])
			tw_rpc_client_destroy(w->cl[i]);
		if (w->ch[i])
			tw_chan_close(w->ch[i]);
	}
	if (w->mr)
		tw_mr_close(w->mr);
	if (w->src)
		tw_fab_free(w->src, w->src_len);
	free(w->slots);
	if (w->fab)
		tw_fab_close(w->fab);
}

static int run_raw(const struct opts *o, const char *const *addrs, struct result *res,
		   uint8_t *payload, struct run *run)
{
	const struct point *pt = &res->pt;
	struct tw_fab_config fc;
	struct tw_fab_events ev = { 0 };
	struct raw w;
	struct cpumark c0, c1;
	uint64_t t0, t1, log_id = next_log_id();
	long pg = sysconf(_SC_PAGESIZE);
	int rc;

	memset(&w, 0, sizeof(w));
	w.r = pt->r;
	w.size = pt->size;
	w.nslots = pt->inflight;
	/* A write never exceeds the buffer (as a primary's write never exceeds a segment). */
	w.batch = pt->batch;
	if ((uint64_t)w.batch * pt->size > o->segment_size)
		w.batch = (unsigned)(o->segment_size / pt->size);
	w.region = ((size_t)w.batch * pt->size + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
	w.src_len = w.region * (w.nslots + 1) + (size_t)pg;
	w.t_submit = run->t_submit;
	w.lat_ns = run->lat_ns;
	tw_fab_config_init(&fc);
	fc.provider = o->provider;
	fc.busy_poll = o->busy_poll;
	if (fc.tx_depth < pt->inflight + 32)
		fc.tx_depth = pt->inflight + 32;
	ev.arg = &w;
	ev.on_recv = raw_on_recv;
	ev.on_lost = raw_on_lost;
	rc = tw_fab_open(&fc, &ev, &w.fab);
	if (rc < 0) {
		fprintf(stderr, "twbench: raw: cannot open the fabric: %s\n", tw_strerror(rc));
		return rc;
	}
	w.slots = calloc(w.nslots, sizeof(*w.slots));
	w.src = tw_fab_alloc(w.src_len);
	if (!w.slots || !w.src) {
		rc = -ENOMEM;
		goto out;
	}
	rc = tw_mr_reg(w.fab, w.src, w.src_len, TW_MR_WRITE_SRC, &w.mr);
	if (rc < 0) {
		w.mr = NULL;
		goto out;
	}
	for (unsigned i = 0; i < w.r; i++) {
		struct tw_rpc_seg_meta m = { log_id, 0, 0, 0 };

		rc = tw_fab_connect(w.fab, addrs[i], &w.ch[i]);
		if (rc < 0) {
			w.ch[i] = NULL;
			fprintf(stderr, "twbench: raw: cannot connect to %s: %s\n", addrs[i],
				tw_strerror(rc));
			goto out;
		}
		rc = tw_rpc_client_create(w.ch[i], NULL, &w.cl[i]);
		if (rc < 0) {
			w.cl[i] = NULL;
			goto out;
		}
		rc = bench_handshake(w.cl[i], addrs[i]);
		if (rc < 0)
			goto out;
		rc = tw_rpc_open_segment(w.cl[i], 1, &m, 0, o->segment_size, &w.rk[i]);
		if (rc < 0) {
			fprintf(stderr, "twbench: raw: %s refused a buffer: %s\n", addrs[i],
				tw_strerror(rc));
			goto out;
		}
		w.opened[i] = true;
		if (w.rk[i].len < w.rk[0].len)
			w.rk[0].len = w.rk[i].len; /* wrap at the smallest buffer */
	}
	cpu_mark(&c0);
	t0 = now_ns();
	for (uint64_t i = 0; i < res->count && !w.err; i++) {
		if (pt->rate > 0) {
			uint64_t due = sched_ns(t0, pt->rate, i);

			while (now_ns() + 5000 < due) {
				uint64_t n;

				if (w.pend_n && raw_slot_free(&w))
					raw_post(&w);
				if (w.tail < w.head)
					raw_drive(&w, 0);
				n = now_ns();
				/* Poll again within 50 us while writes are in flight; sleep, not spin. */
				wait_until(w.tail < w.head && due > n + 50000 ? n + 50000 : due);
			}
			w.t_submit[i] = due;
		} else {
			w.t_submit[i] = now_ns();
		}
		/* Back-pressure: at most `batch` objects wait while every slot is busy. */
		while (w.pend_n == w.batch && !w.err) {
			if (raw_slot_free(&w))
				raw_post(&w);
			else
				raw_drive(&w, o->busy_poll ? 0 : 100);
		}
		memcpy(payload, &i, pt->size < 8 ? pt->size : 8);
		memcpy(w.src + (w.head % (w.nslots + 1)) * w.region + w.pend_n * pt->size, payload,
		       pt->size);
		if (!w.pend_n)
			w.pend_first = i;
		w.pend_n++;
		/* The ceiling: every write carries a full batch (the primary's writes carry at most
		 * that many); completions are polled every 256 objects and under back-pressure. In
		 * open-loop runs a free slot takes what waits while the next object is not due. */
		if ((i & 255) == 255)
			raw_drive(&w, 0);
		if (w.pend_n == w.batch && raw_slot_free(&w))
			raw_post(&w);
		if (o->progress && (i & 0x3fff) == 0)
			progress_bar(i, res->count);
	}
	while (!w.err && (w.pend_n || w.tail < w.head)) {
		if (w.pend_n && raw_slot_free(&w))
			raw_post(&w);
		else
			raw_drive(&w, o->busy_poll ? 0 : 100);
	}
	t1 = now_ns();
	if (w.err) {
		rc = w.err;
		fprintf(stderr, "twbench: raw: a write failed: %s\n", tw_strerror(rc));
		goto out;
	}
	if (o->progress)
		progress_bar(res->count, res->count);
	cpu_mark(&c1);
	cpu_delta(&c0, &c1, res);
	res->secs = (double)(t1 - t0) / 1e9;
	res->writes = w.writes;
	res->segments = 1;
	res->rpc_open = w.r;
	res->rpc_close = w.r;
	res->rpc_total = 2 * w.r;
	res->have_ack = true;
	pcts(run->lat_ns, res->count, &res->a50, &res->a99, &res->a999);

	/* Latency: one object per write, to r backups, waited for, lat_count times. */
	if (o->lat_count && pt->rate <= 0) {
		uint64_t n = o->lat_count;

		w.lat_ns = NULL;
		for (uint64_t i = 0; i < n && !w.err; i++) {
			uint64_t a = now_ns(), d;

			memcpy(payload, &i, pt->size < 8 ? pt->size : 8);
			memcpy(w.src + (w.head % (w.nslots + 1)) * w.region, payload, pt->size);
			w.pend_first = i;
			w.pend_n = 1;
			raw_post(&w);
			while (w.tail < w.head && !w.err)
				raw_drive(&w, o->busy_poll ? 0 : 100);
			d = now_ns() - a;
			run->lat_ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		if (w.err) {
			rc = w.err;
			goto out;
		}
		res->n_lat = n;
		pcts(run->lat_ns, n, &res->p50, &res->p99, &res->p999);
	}
	rc = 0;
out:
	raw_close(&w, log_id);
	return rc;
}

/* ------------------------------------------------------------------ output */

static double cpu_per_gb(const struct result *x)
{
	double gb = (double)x->count * x->pt.size / 1e9;

	return x->cpu_ok && gb > 0 ? x->cpu_sum / gb : -1;
}

static double cpu_per_mobj(const struct result *x)
{
	return x->cpu_ok && x->count ? x->cpu_sum / ((double)x->count / 1e6) : -1;
}

static void json_num_or_null(const char *key, double v, bool ok, bool comma)
{
	if (ok)
		printf("\"%s\":%.6g%s", key, v, comma ? "," : "");
	else
		printf("\"%s\":null%s", key, comma ? "," : "");
}

static void print_run_json(const struct opts *o, const struct result *x)
{
	double per_obj = (double)(x->rpc_open + x->rpc_close) / (double)x->count;
	double per_req = per_obj / x->pt.r;

	printf("{\"provider\":\"%s\",\"mode\":\"%s\",\"append\":\"%s\",\"replicas\":%u,"
	       "\"count\":%" PRIu64 ",\"size\":%u,\"batch\":%u,\"inflight\":%u,"
	       "\"offered_rate\":%.1f,"
	       "\"segment_size\":%zu,\"seconds\":%.6f,\"objects_per_s\":%.1f,"
	       "\"mb_per_s\":%.3f,\"sync_latency_samples\":%" PRIu64 ","
	       "\"sync_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},",
	       o->provider, mode_names[x->mode], o->async ? "async" : "sync", x->pt.r, x->count,
	       x->pt.size, x->pt.batch, x->pt.inflight, x->pt.rate, o->segment_size, x->secs,
	       x->ops, x->mbs, x->n_lat, x->p50, x->p99, x->p999);
	if (x->have_ack)
		printf("\"async_ack_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},", x->a50,
		       x->a99, x->a999);
	printf("\"backup_cpu_s\":[");
	for (unsigned i = 0; i < x->n_cpu; i++)
		printf(x->cpu[i] >= 0 ? "%s%.3f" : "%snull", i ? "," : "", x->cpu[i]);
	printf("],\"backup_progress_cpu_s\":[");
	for (unsigned i = 0; i < x->n_cpu; i++)
		printf(x->cpu_main[i] >= 0 ? "%s%.3f" : "%snull", i ? "," : "", x->cpu_main[i]);
	printf("],");
	json_num_or_null("backup_cpu_total_s", x->cpu_sum, x->cpu_ok, true);
	json_num_or_null("backup_progress_cpu_total_s", x->cpu_main_sum, x->cpu_main_ok, true);
	json_num_or_null("backup_cpu_s_per_gb", cpu_per_gb(x), x->cpu_ok, true);
	json_num_or_null("backup_cpu_s_per_mobj", cpu_per_mobj(x), x->cpu_ok, true);
	printf("\"writes\":%" PRIu64 ",\"entries_per_write\":%.3f,\"segments\":%" PRIu64
	       ",\"rpcs\":{\"handshake\":%" PRIu64 ",\"open\":%" PRIu64 ",\"close\":%" PRIu64
	       ",\"total\":%" PRIu64 "},\"control_rpcs_per_object\":%.4g,"
	       "\"control_rpcs_per_replication_request\":%.4g,\"open_refused\":%" PRIu64 "}",
	       x->writes, (double)x->count / (double)(x->writes ? x->writes : 1), x->segments,
	       x->rpc_handshake, x->rpc_open, x->rpc_close, x->rpc_total, per_obj, per_req,
	       x->open_refused);
}

static bool same_point(const struct point *a, const struct point *b)
{
	return a->size == b->size && a->r == b->r && a->batch == b->batch &&
	       a->inflight == b->inflight && a->rate == b->rate;
}

static const struct result *find_result(const struct point *pt, enum bmode m)
{
	for (unsigned i = 0; i < n_results; i++)
		if (results[i].mode == m && same_point(&results[i].pt, pt))
			return &results[i];
	return NULL;
}

static double ratio(double a, double b)
{
	return b > 0 && a >= 0 ? a / b : -1;
}

/* Ratios of one sweep point: onesided over rpc (throughput, latencies, backup CPU), onesided over
 * raw (bytes/s). -1 where a mode is missing. */
struct cmp {
	struct point pt;
	double thr, p50, p99, a50, a99, cpu, cpu_main, raw_bytes, rpc_raw_bytes;
};

static unsigned comparisons(struct cmp *out, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < n_results && n < max; i++) {
		const struct point *pt = &results[i].pt;
		const struct result *os, *rp, *rw;
		bool seen = false;

		for (unsigned k = 0; k < n; k++)
			seen |= same_point(&out[k].pt, pt);
		if (seen)
			continue;
		os = find_result(pt, M_ONESIDED);
		rp = find_result(pt, M_RPC);
		rw = find_result(pt, M_RAW);
		if (!os || (!rp && !rw))
			continue;
		out[n].pt = *pt;
		out[n].thr = rp ? ratio(os->ops, rp->ops) : -1;
		out[n].p50 = rp && rp->n_lat ? ratio(os->p50, rp->p50) : -1;
		out[n].p99 = rp && rp->n_lat ? ratio(os->p99, rp->p99) : -1;
		out[n].a50 = rp ? ratio(os->a50, rp->a50) : -1;
		out[n].a99 = rp ? ratio(os->a99, rp->a99) : -1;
		out[n].cpu = rp && os->cpu_ok && rp->cpu_ok ? ratio(os->cpu_sum, rp->cpu_sum) : -1;
		out[n].cpu_main = rp && os->cpu_main_ok && rp->cpu_main_ok ?
				  ratio(os->cpu_main_sum, rp->cpu_main_sum) : -1;
		out[n].raw_bytes = rw ? ratio(os->mbs, rw->mbs) : -1;
		out[n].rpc_raw_bytes = rw && rp ? ratio(rp->mbs, rw->mbs) : -1;
		n++;
	}
	return n;
}

static void print_json(const struct opts *o)
{
	struct cmp c[256];
	unsigned nc;

	if (n_results == 1) {
		print_run_json(o, &results[0]);
		printf("\n");
		return;
	}
	printf("{\"twbench\":{\"provider\":\"%s\",\"count\":%" PRIu64 ",\"append\":\"%s\","
	       "\"segment_size\":%zu},\"runs\":[",
	       o->provider, o->count, o->async ? "async" : "sync", o->segment_size);
	for (unsigned i = 0; i < n_results; i++) {
		if (i)
			printf(",");
		print_run_json(o, &results[i]);
	}
	printf("],\"comparisons\":[");
	nc = comparisons(c, 256);
	for (unsigned i = 0; i < nc; i++) {
		printf("%s{\"size\":%u,\"replicas\":%u,\"batch\":%u,\"inflight\":%u,"
		       "\"offered_rate\":%.1f,", i ? "," : "", c[i].pt.size, c[i].pt.r, c[i].pt.batch,
		       c[i].pt.inflight, c[i].pt.rate);
		json_num_or_null("throughput_onesided_over_rpc", c[i].thr, c[i].thr >= 0, true);
		json_num_or_null("sync_p50_onesided_over_rpc", c[i].p50, c[i].p50 >= 0, true);
		json_num_or_null("sync_p99_onesided_over_rpc", c[i].p99, c[i].p99 >= 0, true);
		json_num_or_null("ack_p50_onesided_over_rpc", c[i].a50, c[i].a50 >= 0, true);
		json_num_or_null("ack_p99_onesided_over_rpc", c[i].a99, c[i].a99 >= 0, true);
		json_num_or_null("backup_cpu_onesided_over_rpc", c[i].cpu, c[i].cpu >= 0, true);
		json_num_or_null("backup_progress_cpu_onesided_over_rpc", c[i].cpu_main,
				 c[i].cpu_main >= 0, true);
		json_num_or_null("bytes_onesided_over_raw", c[i].raw_bytes, c[i].raw_bytes >= 0,
				 true);
		json_num_or_null("bytes_rpc_over_raw", c[i].rpc_raw_bytes, c[i].rpc_raw_bytes >= 0,
				 false);
		printf("}");
	}
	printf("]}\n");
}

/* The classic single-run table (one mode, one point). */
static void print_single(const struct opts *o, const struct result *x)
{
	double per_obj = (double)(x->rpc_open + x->rpc_close) / (double)x->count;
	double per_req = per_obj / x->pt.r;
	char k[64];

	printf("twbench: %" PRIu64 " objects of %u B, r = %u, provider %s, mode %s, %s appends, "
	       "segment %zu B, batch <= %u, %u in flight%s\n",
	       x->count, x->pt.size, x->pt.r, o->provider, mode_names[x->mode],
	       o->async ? "async" : "sync", o->segment_size, x->pt.batch, x->pt.inflight,
	       x->pt.rate > 0 ? ", open loop" : "");
	if (x->pt.rate > 0)
		printf("  %-40s %14.0f\n", "offered objects/s", x->pt.rate);
	printf("  %-40s %14.0f\n", "objects/s", x->ops);
	printf("  %-40s %14.2f\n", "MB/s (payload)", x->mbs);
	snprintf(k, sizeof(k), "sync append latency p50 (us, n=%" PRIu64 ")", x->n_lat);
	printf("  %-40s %14.1f\n", k, x->p50);
	printf("  %-40s %14.1f\n", "sync append latency p99 (us)", x->p99);
	printf("  %-40s %14.1f\n", "sync append latency p99.9 (us)", x->p999);
	if (x->have_ack) {
		printf("  %-40s %14.1f\n", "async submit->ack p50 (us)", x->a50);
		printf("  %-40s %14.1f\n", "async submit->ack p99 (us)", x->a99);
		printf("  %-40s %14.1f\n", "async submit->ack p99.9 (us)", x->a999);
	}
	for (unsigned i = 0; i < x->n_cpu; i++) {
		if (n_twd)
			snprintf(k, sizeof(k), "backup %u CPU (s, pid %d)", i, (int)twds[i].pid);
		else
			snprintf(k, sizeof(k), "backup %u CPU (s, stats RPC)", i);
		if (x->cpu[i] >= 0)
			printf("  %-40s %14.3f\n", k, x->cpu[i]);
		else
			printf("  %-40s %14s\n", k, "n/a");
	}
	if (x->cpu_ok) {
		printf("  %-40s %14.3f\n", "backup CPU s per GB (all backups)", cpu_per_gb(x));
		printf("  %-40s %14.3f\n", "backup CPU s per 1M objects (all)", cpu_per_mobj(x));
	}
	printf("  %-40s %14" PRIu64 "\n", "writes (each to r backups)", x->writes);
	printf("  %-40s %14.2f\n", "entries per write",
	       (double)x->count / (double)(x->writes ? x->writes : 1));
	printf("  %-40s %14" PRIu64 "\n", "segments", x->segments);
	snprintf(k, sizeof(k), "%" PRIu64 " + %" PRIu64, x->rpc_open, x->rpc_close);
	printf("  %-40s %14s\n", "open + close RPCs", k);
	printf("  %-40s %14.3g\n", "control RPCs per object", per_obj);
	printf("  %-40s %14.3g  (paper: 2.38e-05)\n", "control RPCs per replication request",
	       per_req);
	printf("  %-40s %14.3f\n", "seconds", x->secs);
}

static void fmt_ratio(char *buf, size_t len, double v)
{
	if (v < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2f", v);
}

/* Side-by-side: one line per run, then the ratios per point. */
static void print_table(const struct opts *o)
{
	struct cmp c[256];
	unsigned nc;

	printf("twbench: provider %s, %" PRIu64 " objects per run, %s appends, segment %zu B\n",
	       o->provider, o->count, o->async ? "async" : "sync", o->segment_size);
	printf("%6s %2s %5s %4s %9s %-8s %11s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", "size", "r",
	       "batch", "infl", "offered", "mode", "objects/s", "MB/s", "p50 us", "p99 us",
	       "ack p50", "ack p99", "bk CPU s", "CPUs/GB", "CPUs/Mob", "ent/wr");
	for (unsigned i = 0; i < n_results; i++) {
		const struct result *x = &results[i];
		char rate[32];

		if (x->pt.rate > 0)
			snprintf(rate, sizeof(rate), "%.0f", x->pt.rate);
		else
			snprintf(rate, sizeof(rate), "closed");
		printf("%6u %2u %5u %4u %9s %-8s %11.0f %8.2f %8.1f %8.1f %8.1f %8.1f %8.3f %8.3f "
		       "%8.3f %7.1f\n",
		       x->pt.size, x->pt.r, x->pt.batch, x->pt.inflight, rate, mode_names[x->mode],
		       x->ops, x->mbs, x->p50, x->p99, x->a50, x->a99, x->cpu_ok ? x->cpu_sum : -1,
		       cpu_per_gb(x), cpu_per_mobj(x),
		       (double)x->count / (double)(x->writes ? x->writes : 1));
	}
	nc = comparisons(c, 256);
	if (!nc)
		return;
	printf("\nratios (onesided / rpc unless said; throughput: higher is better for onesided, "
	       "latency and CPU: lower)\n");
	printf("%6s %2s %5s %4s %9s %9s %8s %8s %8s %8s %8s %9s %9s %9s\n", "size", "r", "batch",
	       "infl", "offered", "objects/s", "p50", "p99", "ack p50", "ack p99", "bk CPU",
	       "bk progr", "os/raw B", "rpc/raw B");
	for (unsigned i = 0; i < nc; i++) {
		char f[9][16], rate[32];

		fmt_ratio(f[0], 16, c[i].thr);
		fmt_ratio(f[1], 16, c[i].p50);
		fmt_ratio(f[2], 16, c[i].p99);
		fmt_ratio(f[3], 16, c[i].a50);
		fmt_ratio(f[4], 16, c[i].a99);
		fmt_ratio(f[5], 16, c[i].cpu);
		fmt_ratio(f[6], 16, c[i].cpu_main);
		fmt_ratio(f[7], 16, c[i].raw_bytes);
		fmt_ratio(f[8], 16, c[i].rpc_raw_bytes);
		if (c[i].pt.rate > 0)
			snprintf(rate, sizeof(rate), "%.0f", c[i].pt.rate);
		else
			snprintf(rate, sizeof(rate), "closed");
		printf("%6u %2u %5u %4u %9s %9s %8s %8s %8s %8s %8s %9s %9s %9s\n", c[i].pt.size,
		       c[i].pt.r, c[i].pt.batch, c[i].pt.inflight, rate, f[0], f[1], f[2], f[3],
		       f[4], f[5], f[6], f[7], f[8]);
	}
}

/* ------------------------------------------------------------------ main */

static void quiet_sink(void *arg, enum tw_log_level level, const char *msg)
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

	tw_fab_config_init(&fc);
	fc.provider = prov;
	tw_log_set_sink(quiet_sink, NULL); /* the one line below says it all */
	rc = tw_fab_open(&fc, &ev, &fab);
	tw_log_set_sink(NULL, NULL);
	if (rc < 0) {
		fprintf(stderr, "twbench: --provider %s: %s\n", prov, tw_fab_errmsg(NULL));
		return rc;
	}
	tw_fab_close(fab);
	return 0;
}

#define MAX_COUNT 1000000000ull /* --count, --latency-count: 12 bytes of bookkeeping each */

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
		{ 'g', "--segment-size", "bytes from 4096 to 4294967295 (k/M suffixes)" },
		{ 'f', "--buffers", "a number of buffers from 1 to 4096" },
		{ 'X', "--max-bytes", "a number of bytes >= 0 (k/M suffixes)" },
		{ 'L', "--latency-count", "a number of appends from 0 to 1000000000" },
		{ 'p', "--provider", "a libfabric provider name (tcp, sockets, shm, verbs, ...)" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (t[i].c == c) {
			fprintf(stderr, "twbench: %s '%s': expected %s\n", t[i].name, arg, t[i].want);
			return 2;
		}
	}
	fprintf(stderr, "twbench: bad value '%s' (see twbench --help)\n", arg);
	return 2;
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

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "backups", required_argument, NULL, 'b' },
		{ "count", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "sizes", required_argument, NULL, 's' },
		{ "sync", no_argument, NULL, 'S' },
		{ "async", no_argument, NULL, 'A' },
		{ "batch", required_argument, NULL, 'B' },
		{ "inflight", required_argument, NULL, 'I' },
		{ "rate", required_argument, NULL, 'R' },
		{ "segment-size", required_argument, NULL, 'g' },
		{ "buffers", required_argument, NULL, 'f' },
		{ "busy-poll", no_argument, NULL, 'P' },
		{ "mode", required_argument, NULL, 'm' },
		{ "latency-count", required_argument, NULL, 'L' },
		{ "preopen", no_argument, NULL, 'O' },
		{ "no-settle", no_argument, NULL, 'N' },
		{ "max-bytes", required_argument, NULL, 'X' },
		{ "twd", required_argument, NULL, 't' },
		{ "key-file", required_argument, NULL, 'K' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-progress", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.provider = "tcp", .rs = { 3 }, .n_r = 1, .count = 1000000, .sizes = { 100 },
		.n_sizes = 1, .batches = { 256 }, .n_batches = 1, .inflights = { 8 },
		.n_inflights = 1, .rates = { 0 }, .n_rates = 1, .modes = { M_ONESIDED }, .n_modes = 1,
		.segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE, .twd_buffers = 16, .async = true,
		.lat_count = 10000, .settle = true,
	};
	const char *addrs[MAX_BACKUPS];
	unsigned n_addrs = 0, max_r = 0, runs_total, run_no = 0;
	struct run run = { 0 };
	char twd_exe[PATH_MAX];
	uint8_t *payload = NULL;
	uint64_t v, list[MAX_LIST];
	uint32_t max_size = 0;
	static sigset_t sigs;
	pthread_t sigthr;
	int c, n, rc, exit_code = 1;

	o.progress = isatty(STDERR_FILENO);
	prctl(PR_SET_TIMERSLACK, 1000UL); /* --rate pacing sleeps to the microsecond */
	/* $FI_PROVIDER is our default provider, passed by name (to the twd's too); left set,
	 * libfabric would hide every other provider from the "this machine offers" list. */
	if (getenv("FI_PROVIDER") && getenv("FI_PROVIDER")[0]) {
		snprintf(env_provider, sizeof(env_provider), "%s", getenv("FI_PROVIDER"));
		o.provider = env_provider;
		unsetenv("FI_PROVIDER");
	}
	while ((c = getopt_long(argc, argv, "r:hV", lopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (!optarg[0])
				goto bad;
			o.provider = optarg;
			break;
		case 'b': o.backups_arg = optarg; break;
		case 'r':
			n = parse_list(optarg, 1, MAX_BACKUPS, list, MAX_LIST);
			if (n < 0)
				goto bad;
			for (int i = 0; i < n; i++)
				o.rs[i] = (unsigned)list[i];
			o.n_r = (unsigned)n;
			break;
		case 'n':
			if (parse_u64(optarg, &v) || !v || v > MAX_COUNT)
				goto bad;
			o.count = v;
			break;
		case 's':
			n = parse_list(optarg, 1, UINT32_MAX, list, MAX_LIST);
			if (n < 0)
				goto bad;
			for (int i = 0; i < n; i++)
				o.sizes[i] = (uint32_t)list[i];
			o.n_sizes = (unsigned)n;
			break;
		case 'S': o.async = false; break;
		case 'A': o.async = true; break;
		case 'B':
			n = parse_list(optarg, 1, 1u << 20, list, MAX_LIST);
			if (n < 0)
				goto bad;
			for (int i = 0; i < n; i++)
				o.batches[i] = (unsigned)list[i];
			o.n_batches = (unsigned)n;
			break;
		case 'I':
			n = parse_list(optarg, 1, TW_PRIMARY_MAX_INFLIGHT, list, MAX_LIST);
			if (n < 0)
				goto bad;
			for (int i = 0; i < n; i++)
				o.inflights[i] = (unsigned)list[i];
			o.n_inflights = (unsigned)n;
			break;
		case 'R':
			n = parse_list(optarg, 1, 1ull << 32, list, MAX_LIST);
			if (n < 0)
				goto bad;
			for (int i = 0; i < n; i++)
				o.rates[i] = (double)list[i];
			o.n_rates = (unsigned)n;
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
		case 'N': o.settle = false; break;
		case 'X':
			if (parse_u64(optarg, &v))
				goto bad;
			o.max_bytes = v;
			break;
		case 'm':
			if (parse_modes(optarg, &o) < 0) {
				fprintf(stderr, "twbench: --mode takes onesided, rpc, raw (comma-separated)\n");
				return 2;
			}
			break;
		case 'L':
			if (parse_u64(optarg, &v) || v > MAX_COUNT)
				goto bad;
			o.lat_count = v;
			break;
		case 't': o.twd_path = optarg; break;
		case 'j': o.json = true; break;
		case 'q': o.progress = false; break;
		case 'K': o.key_file = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("twbench (tailwind) %s\n", tw_version()); return 0;
		bad:
			return bad_value(c, optarg ? optarg : "");
		default:
			fprintf(stderr, "twbench: see twbench --help for the options\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "twbench: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	for (unsigned i = 0; i < o.n_sizes; i++) {
		if ((size_t)o.sizes[i] + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > o.segment_size) {
			fprintf(stderr, "twbench: --size %u does not fit a %zu-byte segment\n",
				o.sizes[i], o.segment_size);
			return 2;
		}
		if (o.sizes[i] > max_size)
			max_size = o.sizes[i];
	}
	for (unsigned i = 0; i < o.n_r; i++)
		if (o.rs[i] > max_r)
			max_r = o.rs[i];
	runs_total = o.n_sizes * o.n_r * o.n_batches * o.n_inflights * o.n_rates * o.n_modes;
	if (runs_total > sizeof(results) / sizeof(results[0])) {
		fprintf(stderr, "twbench: %u runs are too many (at most %zu)\n", runs_total,
			sizeof(results) / sizeof(results[0]));
		return 2;
	}

	if (check_provider(o.provider) < 0)
		return 2;
	o.key_file = tw_auth_key_path(o.key_file);
	if (o.key_file) {
		char why[512];

		if (tw_auth_key_load(o.key_file, &bench_key, why, sizeof(why)) < 0) {
			fprintf(stderr, "twbench: %s\n", why);
			return 2;
		}
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
		/* Before any thread: SIGINT/SIGTERM go to signal_main only. */
		sigemptyset(&sigs);
		sigaddset(&sigs, SIGINT);
		sigaddset(&sigs, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &sigs, NULL);
		if (!mkdtemp(tmp_root)) {
			fprintf(stderr, "twbench: mkdtemp %s: %s\n", tmp_root, strerror(errno));
			tmp_root[0] = '\0';
			return 1;
		}
		atexit(stop_twds);
		signal(SIGPIPE, SIG_IGN);
		rc = pthread_create(&sigthr, NULL, signal_main, &sigs);
		if (rc) {
			fprintf(stderr, "twbench: cannot start the signal thread: %s\n", strerror(rc));
			return 1;
		}
		pthread_detach(sigthr);
		for (unsigned i = 0; i < max_r; i++) {
			uint64_t t0 = now_ns();

			if (!o.json || o.progress)
				fprintf(stderr, "twbench: starting local backup %u/%u (%s, %s)...\n",
					i + 1, max_r, twd_exe, o.provider);
			twds[i].out_fd = -1;
			rc = start_twd(twd_exe, &o, i);
			if (rc < 0) {
				fprintf(stderr, "twbench: cannot start local backup %u/%u: %s\n", i + 1,
					max_r, rc == -EPIPE ? "twd exited early" : strerror(-rc));
				return 1;
			}
			if (!o.json || o.progress)
				fprintf(stderr, "twbench: backup %u/%u ready at %s (%.1f s)\n", i + 1,
					max_r, twds[i].addr, (double)(now_ns() - t0) / 1e9);
			addrs[n_addrs++] = twds[i].addr;
		}
	}
	if (n_addrs < max_r) {
		fprintf(stderr, "twbench: -r %u needs at least %u backups, %u given\n", max_r, max_r,
			n_addrs);
		return 2;
	}
	if (!n_twd && remote_open(&rs_stats, o.provider, addrs, n_addrs) == 0) {
		rs_open = true;
		rs_n = n_addrs;
	}

	payload = malloc(max_size);
	run.t_submit = calloc(o.count, sizeof(uint64_t));
	run.lat_ns = calloc(o.count > o.lat_count ? o.count : o.lat_count, sizeof(uint32_t));
	if (!payload || !run.t_submit || !run.lat_ns) {
		fprintf(stderr, "twbench: out of memory for %" PRIu64 " objects\n", o.count);
		goto out;
	}
	for (uint32_t i = 0; i < max_size; i++)
		payload[i] = (uint8_t)(i * 7 + 1);

	for (unsigned is = 0; is < o.n_sizes; is++)
	for (unsigned ir = 0; ir < o.n_r; ir++)
	for (unsigned ib = 0; ib < o.n_batches; ib++)
	for (unsigned ii = 0; ii < o.n_inflights; ii++)
	for (unsigned iq = 0; iq < o.n_rates; iq++)
	for (unsigned im = 0; im < o.n_modes; im++) {
		struct result *x = &results[n_results];

		memset(x, 0, sizeof(*x));
		x->pt.size = o.sizes[is];
		x->pt.r = o.rs[ir];
		x->pt.batch = o.batches[ib];
		x->pt.inflight = o.inflights[ii];
		x->pt.rate = o.rates[iq];
		x->mode = o.modes[im];
		x->count = o.count;
		if (o.max_bytes && x->count * x->pt.size > o.max_bytes)
			x->count = o.max_bytes / x->pt.size > 1000 ? o.max_bytes / x->pt.size : 1000;
		if (x->mode == M_RAW && !o.async) {
			fprintf(stderr, "twbench: raw mode has no --sync form; skipped\n");
			continue;
		}
		run_no++;
		if (runs_total > 1 && !o.json)
			fprintf(stderr, "twbench: run %u/%u: mode %s, size %u, r %u, batch %u, "
				"inflight %u%s\n", run_no, runs_total, mode_names[x->mode], x->pt.size,
				x->pt.r, x->pt.batch, x->pt.inflight, x->pt.rate > 0 ? ", open loop" : "");
		if (o.settle && n_results)
			settle_backups();
		if (x->mode == M_RAW)
			rc = run_raw(&o, addrs, x, payload, &run);
		else
			rc = run_primary(&o, addrs, n_addrs, x->mode, x, payload, &run);
		if (rc < 0)
			goto out;
		x->ops = (double)x->count / x->secs;
		x->mbs = (double)x->count * x->pt.size / x->secs / 1e6;
		n_results++;
	}
	if (o.json)
		print_json(&o);
	else if (n_results == 1)
		print_single(&o, &results[0]);
	else
		print_table(&o);
	fflush(stdout);
	exit_code = 0;
out:
	free(payload);
	free(run.t_submit);
	free(run.lat_ns);
	if (rs_open)
		remote_close(&rs_stats);
	stop_twds();
	return exit_code;
}
