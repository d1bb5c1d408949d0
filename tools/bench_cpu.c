/*
 * tools/bench_cpu.c — twbench: the backups' CPU time around each replication phase. Local twd's
 * are read from /proc/<pid>/stat (the process, and its main thread, where twd runs the backup);
 * with --backups there is no pid to read, so each backup is asked for its counters (Stats RPC)
 * over a fabric instance of our own. The primary's CPU is this process's
 * (CLOCK_PROCESS_CPUTIME_ID): the appending thread and, in --async runs, the primary's progress
 * thread; twbench's own bookkeeping between appends is in it too, and is small. See bench.h.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "fabric/fabric.h"
#include "proto/rpc.h"

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
	struct tw_peer peer[MAX_BACKUPS]; /* rpc NULL: not connected */
	unsigned n;
};

static void remote_close(struct remote *rs)
{
	for (unsigned i = 0; i < rs->n; i++)
		tw__peer_close(&rs->peer[i]);
	if (rs->fab)
		tw__fab_close(rs->fab);
	memset(rs, 0, sizeof(*rs));
}

static int remote_open(struct remote *rs, const char *provider, const char *const *addrs,
		       unsigned n)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = tw__peer_fab_on_recv,
				    .on_lost = tw__peer_fab_on_lost };
	int rc;

	memset(rs, 0, sizeof(*rs));
	tw__fab_config_init(&fc);
	fc.provider = provider;
	rc = tw__fab_open(&fc, &ev, &rs->fab);
	if (rc < 0) {
		rs->fab = NULL;
		return rc;
	}
	rs->n = n;
	for (unsigned i = 0; i < n; i++) {
		tw__peer_init(&rs->peer[i], addrs[i], NULL);
		(void)bench_connect(&rs->peer[i], rs->fab); /* a failed one is not asked */
	}
	return 0;
}

/* Process CPU seconds of backup i, or -1. */
static double remote_cpu(struct remote *rs, unsigned i)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	double v = -1;

	if (!rs->peer[i].rpc)
		return -1;
	tw__rpc_req_stats(&req);
	if (tw__rpc_call_sync(rs->peer[i].rpc, &req.env, &rep) == 0 && rep.env &&
	    rep.env->body_case == TAILWIND__ENVELOPE__BODY_STATS_REPLY && rep.env->stats_reply)
		v = rep.env->stats_reply->cpu_seconds;
	tw__rpc_reply_release(&rep);
	return v;
}

static struct remote rs_stats;
static bool rs_open;
static unsigned rs_n;

/* CPU seconds of this process, all threads; -1 if unknown. */
static double self_cpu(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return -1;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of the calling thread; -1 if unknown. */
static double thread_cpu(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return -1;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cpu_mark(struct cpumark *m)
{
	m->self = self_cpu();
	m->thread = thread_cpu();
	for (unsigned i = 0; i < n_twd; i++) {
		m->proc[i] = proc_cpu(twd_pid(i));
		m->main[i] = proc_cpu_tid(twd_pid(i), twd_pid(i)); /* twd runs the backup there */
	}
	if (!n_twd && rs_open)
		for (unsigned i = 0; i < rs_n; i++) {
			m->proc[i] = remote_cpu(&rs_stats, i);
			m->main[i] = -1;
		}
}

void cpu_delta(const struct cpumark *a, const struct cpumark *b, struct result *res)
{
	unsigned n = n_twd ? n_twd : (rs_open ? rs_n : 0);

	res->n_cpu = n;
	res->cpu_ok = n > 0;
	res->cpu_main_ok = n_twd > 0;
	res->cpu_sum = res->cpu_main_sum = 0;
	res->cpu_primary = a->self >= 0 && b->self >= 0 ? b->self - a->self : -1;
	res->cpu_caller = a->thread >= 0 && b->thread >= 0 ? b->thread - a->thread : -1;
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
void settle_backups(void)
{
	double last = -1;

	for (int k = 0; k < 50 && n_twd; k++) {
		struct timespec ts = { 0, 100000000 };
		double sum = 0;

		for (unsigned i = 0; i < n_twd; i++)
			sum += proc_cpu(twd_pid(i));
		if (last >= 0 && sum - last < 0.005)
			return;
		last = sum;
		nanosleep(&ts, NULL);
	}
}


void remote_stats_open(const char *provider, const char *const *addrs, unsigned n)
{
	if (remote_open(&rs_stats, provider, addrs, n) == 0) {
		rs_open = true;
		rs_n = n;
	}
}

uint64_t remote_buffer_size(unsigned i)
{
	return rs_open && i < rs_stats.n && rs_stats.peer[i].rpc ? rs_stats.peer[i].buffer_size : 0;
}

void remote_stats_close(void)
{
	if (rs_open)
		remote_close(&rs_stats);
}
