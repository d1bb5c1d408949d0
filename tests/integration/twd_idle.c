/*
 * tests/integration/twd_idle.c — an idle shm twd sleeps (issue 33, docs/fabric.md "Idle shm
 * backups sleep on a doorbell").
 *
 * argv: PROVIDER (shm), then "dc" (the default: delivery-complete writes) or "fast"
 * (TW_FAB_SHM_FAST=on: libfabric's CMA fast path), then optionally the idle period in seconds
 * (default 3; the measurement in docs/fabric.md used 10).
 *
 * One twd, one sync-mode primary in this process with a log open on it: SYNC sync appends
 * (their p50 is printed), then nothing at all for the idle period, during which the twd's CPU
 * time (utime + stime of every thread, /proc/PID/stat) must grow by less than 5 % of the wall
 * time: it sleeps instead of polling. That bound is generous (the aim is < 1 %, and a twd that
 * polls with its 100 µs backoff took several percent here): it asserts sleeping, not speed.
 * Then one more append must complete (the first message wakes the sleeping twd), and SYNC more
 * whose p50 is printed too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define SYNC 2000
#define OBJ 100u
#define CPU_BOUND_PCT 5.0

/* utime + stime of process `pid`, all threads, in seconds; < 0 if it cannot be read. */
static double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut, st;
	const char *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* SYNC sync appends; their p50 in µs, or 0 if one failed. */
static double sync_p50(struct tw_primary *p, uint64_t *seq, const char *what)
{
	static uint64_t lat[SYNC];
	uint8_t buf[OBJ];
	unsigned bad = 0;

	for (unsigned i = 0; i < SYNC; i++) {
		uint64_t t0 = tw_now_ns();

		memset(buf, (int)(*seq & 0xff), sizeof(buf));
		memcpy(buf, seq, sizeof(*seq));
		(*seq)++;
		if (tw_primary_append(p, buf, OBJ, NULL) < 0 && !bad++)
			tap_diag("%s: append: %s", what, tw_primary_errmsg(p));
		lat[i] = tw_now_ns() - t0;
	}
	is_int(bad, 0, "%s: %u sync appends acknowledged", what, SYNC);
	qsort(lat, SYNC, sizeof(lat[0]), cmp_u64);
	return bad ? 0 : (double)lat[SYNC / 2] / 1000.0;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "shm";
	const char *mode = argc > 2 ? argv[2] : "dc";
	double idle_s = argc > 3 ? atof(argv[3]) : 3.0;
	uint64_t log_id = 0x1d1e000000000000ull | (uint64_t)getpid(), seq = 0;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct rt_cluster cl;
	uint8_t buf[OBJ] = {0};
	pid_t twd;

	if (strcmp(mode, "dc") && strcmp(mode, "fast"))
		TAP_FATAL("mode %s: expected dc or fast", mode);
	if (idle_s < 0.5)
		idle_s = 0.5;
	setenv("TW_FAB_SHM_FAST", strcmp(mode, "fast") ? "off" : "on", 1);
	tap_diag("provider %s, %s writes, idle period %.1f s", prov,
		 !strcmp(mode, "fast") ? "fast-path (TW_FAB_SHM_FAST=on, the default)" :
		 "delivery-complete (TW_FAB_SHM_FAST=off)", idle_s);
	rt_start(&cl, prov, 1, "1M", "4");
	twd = proc_pid(cl.p[0]);
	tlog_primary_config(&tc, &cfg, prov, cl.addrs, 1, log_id);
	cfg.replicas = 1;
	cfg.segment_size = 1u << 20;
	cfg.mode = TW_PRIMARY_SYNC;
	p = tlog_open(&tc, &cfg, "log on one twd");
	if (!p) {
		rt_stop(&cl);
		tap_done_testing();
		return tap_exit();
	}
	tap_diag("sync append p50 before the idle period: %.1f µs", sync_p50(p, &seq, "before"));
	{
		/* The idle period: nothing is appended, the log stays open. */
		double c0 = proc_cpu_s(twd), c1, wall, pct;
		uint64_t t0 = tw_now_ns();
		struct timespec ts = {.tv_sec = (time_t)idle_s,
				      .tv_nsec = (long)((idle_s - (double)(time_t)idle_s) * 1e9)};

		while (nanosleep(&ts, &ts) != 0)
			;
		c1 = proc_cpu_s(twd);
		wall = (double)(tw_now_ns() - t0) / 1e9;
		pct = 100.0 * (c1 - c0) / wall;
		ok(c0 >= 0 && c1 >= 0 && pct < CPU_BOUND_PCT,
		   "idle twd: %.3f s of CPU in %.2f s (%.2f %% of a CPU, bound %.0f %%)", c1 - c0,
		   wall, pct, CPU_BOUND_PCT);
	}
	{
		uint64_t t0 = tw_now_ns();
		int rc;

		memcpy(buf, &seq, sizeof(seq));
		seq++;
		rc = tw_primary_append(p, buf, OBJ, NULL);
		is_int(rc, 0, "the first append after the idle period is acknowledged (%.1f µs)",
		       (double)(tw_now_ns() - t0) / 1000.0);
	}
	tap_diag("sync append p50 after the idle period: %.1f µs", sync_p50(p, &seq, "after"));
	is_int(tw_primary_close(p), 0, "primary close");
	is_int(rt_stop_one(&cl, 0), 0, "twd exits 0 on SIGTERM");
	rt_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
