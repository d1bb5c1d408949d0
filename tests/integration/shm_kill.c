/*
 * tests/integration/shm_kill.c — KILL TEST on shm, argv[1] the TW_FAB_SHM_FAST value set here
 * for every process started ("on": the CMA fast path; "off": delivery-complete): a writer SIGKILLed in the middle of its write bursts
 * must never wedge a twd (docs/fabric.md "A writer killed holding a region lock").
 *
 * Three twds with small buffers. Each round a crash_primary process opens a fresh log on all
 * three and appends numbered objects as fast as it can, reporting its acknowledgements with one
 * atomic store into a shared file mapping (CRASH_ACK_SHM: no system call on its ack path, so it
 * spends its time writing, much of it inside libfabric's copy under a twd's region lock); after
 * a random number of acks (the word watched, no sleeps) it gets a real SIGKILL, wherever it is.
 * What the word says after its death is what was acknowledged to it. Then:
 *   - every twd serves a new client: a connection and a stats request to each of the three
 *     answer within SERVE_MS (the session timeout of a primary's backups);
 *   - tw_recover() returns objects 0, 1, 2 ... intact, at least every acknowledged one.
 * The next round's primary must open its log on all three again.
 *
 * Rounds: $TW_KILL_ROUNDS, else 100 with TW_LONG=1, else 20. TW_SEED replays a run. Prints the
 * totals (kills, acknowledged, recovered, lost) and, per twd, how many dead holders' region
 * locks it freed (its stats).
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <tailwind/recovery.h>

#include "core/util.h"
#include "child.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"
#include "twd_client.h"

#define SEG "65536"
#define MAX_ACKS 20000
#define SERVE_MS 10000 /* a primary's default session timeout to its backups */

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The shared word crash_primary stores its acknowledgements in (CRASH_ACK_SHM). */
static volatile uint64_t *ack_word(char *path, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	void *m;
	int fd;

	snprintf(path, len, "%s/tw-shm-kill.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	TAP_REQUIRE(fd >= 0 && ftruncate(fd, 4096) == 0, "ack file %s: %s", path, strerror(errno));
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	TAP_REQUIRE(m != MAP_FAILED, "mmap %s: %s", path, strerror(errno));
	close(fd);
	return m;
}

/* A connection and a stats answer from the twd at `addr`, retried until SERVE_MS pass.
 * Returns the milliseconds it took, or -1. */
static long serve_ms(const char *addr, struct twc_stats *st)
{
	uint64_t t0 = tw_now_ns(), end = t0 + SERVE_MS * 1000000ull;

	do {
		struct twc c;
		int rc = twc_connect(&c, "shm", addr);

		if (rc == 0)
			rc = twc_stats(&c, st);
		twc_close(&c);
		if (rc == 0)
			return (long)((tw_now_ns() - t0) / 1000000u);
	} while (tw_now_ns() < end);
	return -1;
}

/* A twd that did not answer: each thread's state, CPU time and system call ("running": it
 * spins in user space); with TW_KILL_GDB=1 also gdb's backtraces (by hand). */
static void dump_twd(int pid)
{
	char path[128], buf[512];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	while (d && (de = readdir(d)) != NULL) {
		char stat[512] = "", sc[128] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(buf, sizeof(buf), "/proc/%d/task/%s/stat", pid, de->d_name);
		if ((f = fopen(buf, "r"))) {
			if (!fgets(stat, sizeof(stat), f))
				stat[0] = '\0';
			fclose(f);
		}
		snprintf(buf, sizeof(buf), "/proc/%d/task/%s/syscall", pid, de->d_name);
		if ((f = fopen(buf, "r"))) {
			if (!fgets(sc, sizeof(sc), f))
				sc[0] = '\0';
			fclose(f);
		}
		stat[strcspn(stat, "\n")] = sc[strcspn(sc, "\n")] = '\0';
		tap_diag("twd %d thread %s: stat %.120s | syscall %.60s", pid, de->d_name, stat, sc);
	}
	if (d)
		closedir(d);
	if (getenv("TW_KILL_GDB") && !strcmp(getenv("TW_KILL_GDB"), "1")) {
		snprintf(buf, sizeof(buf), "gdb -p %d -batch -ex 'thread apply all bt' >&2", pid);
		if (system(buf) != 0)
			tap_diag("gdb failed");
	}
}

int main(int argc, char **argv)
{
	const char *fast = argc > 1 ? argv[1] : "on";
	const char *env = getenv("TW_KILL_ROUNDS");
	unsigned rounds = env ? (unsigned)strtoul(env, NULL, 10) : tap_long_mode() ? 100 : 20;
	char prim[1024], err[512], logid[32], line[256];
	struct rt_cluster cl;
	uint64_t tot_acked = 0, tot_rec = 0, tot_lost = 0, kills = 0;
	long worst_ms = 0;
	char ackpath[512], ackenv[600];
	volatile uint64_t *ack = ack_word(ackpath, sizeof(ackpath));
	char *penv[] = { ackenv, NULL };

	setenv("TW_FAB_SHM_FAST", fast, 1);
	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	rng = tap_seed() | 1;
	tap_plan((int)rounds * 3);
	rt_start(&cl, "shm", 3, "64K", "64");
	tap_diag("backups %s %s %s, %u rounds", cl.addr[0], cl.addr[1], cl.addr[2], rounds);
	snprintf(ackenv, sizeof(ackenv), "CRASH_ACK_SHM=%s", ackpath);

	for (unsigned round = 0; round < rounds; round++) {
		uint64_t log_id = 0x6000 + round, target = 1 + rnd() % MAX_ACKS, acked = 0;
		char *pargv[] = { prim, (char *)"shm", logid, (char *)SEG, (char *)"100000000",
				 (char *)cl.addr[0], (char *)cl.addr[1], (char *)cl.addr[2], NULL };
		struct tw_recover_config rcfg;
		struct tw_recover_result res;
		struct rt_check chk;
		struct proc *p;
		long ms[3];
		int rc, pid, served = 0;

		snprintf(logid, sizeof(logid), "0x%" PRIx64, log_id);
		__atomic_store_n(ack, 0, __ATOMIC_RELAXED);
		p = proc_spawn(pargv, penv);
		TAP_REQUIRE(p, "spawn crash_primary");
		pid = (int)proc_pid(p);
		rc = proc_wait_line(p, "ready", line, sizeof(line), 20000);
		ok(rc >= 0, "round %u: a new primary opens its log on the three twds%s", round,
		   rc >= 0 ? "" : " (none answered: a twd is wedged?)");
		if (rc < 0) {
			proc_kill(p, SIGKILL);
			proc_wait(p, 20000);
			proc_free(p);
			tap_diag("wedged after %u kills", round);
			break;
		}
		for (uint64_t last = 0, t = tw_now_ns(); acked < target; sched_yield()) {
			acked = __atomic_load_n(ack, __ATOMIC_ACQUIRE);
			if (acked != last) {
				last = acked;
				t = tw_now_ns();
			}
			TAP_REQUIRE(proc_alive(p) && tw_now_ns() < t + 20000000000ull,
				    "round %u: crash_primary %s after %" PRIu64 " acks", round,
				    proc_alive(p) ? "stuck" : "exited", acked);
		}
		proc_kill(p, SIGKILL);
		while (proc_wait_line(p, NULL, line, sizeof(line), 20000) >= 0)
			; /* its pipe, up to the end */
		proc_wait(p, 20000);
		proc_free(p);
		acked = __atomic_load_n(ack, __ATOMIC_ACQUIRE); /* what it stored before dying */
		rt_shm_cleanup(pid);
		kills++;

		for (int i = 0; i < 3; i++) {
			struct twc_stats st;

			ms[i] = serve_ms(cl.addr[i], &st);
			served += ms[i] >= 0;
			if (ms[i] < 0)
				dump_twd((int)proc_pid(cl.p[i]));
			if (ms[i] > worst_ms)
				worst_ms = ms[i];
		}
		ok(served == 3, "round %u: killed after %" PRIu64 " acks; the twds serve a new "
		   "client after %ld, %ld, %ld ms (-1: not within %d ms)", round, acked, ms[0],
		   ms[1], ms[2], SERVE_MS);

		tlog_recover_config(&rcfg, "shm", cl.addrs, 3, log_id);
		memset(&chk, 0, sizeof(chk));
		rc = tw_recover(&rcfg, rt_check_cb, &chk, &res, err, sizeof(err));
		ok(rc == 0 && chk.bad == 0 && chk.next >= acked && chk.next == res.entries,
		   "round %u: recovered %" PRIu64 " objects in order (%" PRIu64 " acknowledged)%s%s%s",
		   round, chk.next, acked, rc ? ": " : "", rc ? err : "",
		   chk.bad ? chk.first_bad : "");
		tot_acked += acked;
		tot_rec += chk.next;
		if (chk.next < acked)
			tot_lost += acked - chk.next;
		if (served < 3) {
			tap_diag("wedged after %u kills", round + 1);
			break;
		}
	}
	tap_diag("TW_FAB_SHM_FAST=%s: kills %" PRIu64 ", acknowledged %" PRIu64 ", recovered %" PRIu64
		 ", lost %" PRIu64 ", slowest twd answer after a kill %ld ms", fast, kills, tot_acked,
		 tot_rec, tot_lost, worst_ms);
	rt_stop(&cl);
	unlink(ackpath);
	return tap_exit();
}
