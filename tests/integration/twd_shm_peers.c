/*
 * tests/integration/twd_shm_peers.c — a shm twd serves any number of peers over its lifetime.
 *
 * libfabric 1.17's shm address vector holds 256 peers, and a twd used to keep the entry of
 * every peer it had ever accepted: the 257th client endpoint got "connect timeout" (issue 28).
 * Each phase runs against its own twd, N = 300 peers each (docs/fabric.md "AV entries on shm"):
 *   channels  one endpoint of this process opens and closes N channels to the twd (the same
 *             peer name N times: one entry, not N inserts);
 *   fabs      this process opens N fabs one after the other, each a new endpoint, and closes
 *             each (a live process whose endpoints are gone: their regions are removed);
 *   processes N `twctl -p shm -b ADDR stat` processes, PAR at a time (peers that exit).
 * Each connection must succeed, the twd must give the entries back (its stats: shm_peers,
 * shm_peers_given_back), and at the end it must still serve a segment written through it.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "fab_events.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "twd_client.h"

#define N 300
#define PAR 16
#define BUF (256 * 1024)

static char twctl_path[1024];

/* One twd on shm (tests/lib/recover_util.h); its address in c->addr[0]. */
static void start_twd(struct rt_cluster *c)
{
	rt_start(c, "shm", 1, "256K", "2");
}

static void stop_twd(struct rt_cluster *c, const char *phase)
{
	is_int(rt_stop_one(c, 0), 0, "%s: twd exits 0 on SIGTERM", phase);
	rt_stop(c);
}

/* Stats through a new client (its own endpoint, which then counts as one entry). */
static int stats(const char *addr, struct twc_stats *st)
{
	struct twc c;
	int rc = twc_connect(&c, "shm", addr);

	if (rc == 0)
		rc = twc_stats(&c, st);
	twc_close(&c);
	return rc;
}

/*
 * The entries of the peers that are gone are given back by the twd's progress (every 100 ms):
 * ask until only the asking client's entry (and `keep` others) is left, or 20 s pass.
 */
static void check_given_back(const char *addr, const char *phase, uint64_t keep)
{
	struct twc_stats st = {0};
	uint64_t end = tw_now_ns() + 20000000000ull;
	struct twc c;
	int rc = twc_connect(&c, "shm", addr);

	while (rc == 0 && (rc = twc_stats(&c, &st)) == 0 && st.shm_peers > 1 + keep &&
	       tw_now_ns() < end)
		;
	twc_close(&c);
	ok(rc == 0 && st.shm_peers <= 1 + keep,
	   "%s: the twd holds %" PRIu64 " AV entries (asker included), %" PRIu64 " given back",
	   phase, st.shm_peers, st.shm_peers_given_back);
}

static void phase_channels(void)
{
	struct rt_cluster cl;
	const char *addr;
	struct tw_fab_config fc;
	struct tw_fab *fab;
	struct twc_stats st;
	int i, rc = 0;

	start_twd(&cl);
	addr = cl.addr[0];
	tw__fab_config_init(&fc);
	fc.provider = "shm";
	TAP_REQUIRE(tw__fab_open(&fc, NULL, &fab) == 0, "open a fab");
	i = fab_connect_close(fab, addr, N, &rc);
	ok(i == N, "channels: %d of %d channels of one endpoint connected%s%s", i, N,
	   rc ? ": " : "", rc ? tw__fab_errmsg(fab) : "");
	tw__fab_close(fab);
	rc = stats(addr, &st);
	ok(rc == 0 && st.connections == (uint64_t)N + 1 && st.shm_peers <= 2,
	   "channels: %" PRIu64 " connections, %" PRIu64 " AV entries held (one per endpoint)",
	   st.connections, st.shm_peers);
	stop_twd(&cl, "channels");
}

static void phase_fabs(void)
{
	struct rt_cluster cl;
	struct twc_stats st;
	const char *addr;
	int i, rc = 0;

	start_twd(&cl);
	addr = cl.addr[0];
	for (i = 0; i < N; i++) {
		struct twc c;

		rc = twc_connect(&c, "shm", addr);
		if (rc == 0)
			rc = twc_stats(&c, &st);
		twc_close(&c);
		if (rc)
			break;
	}
	ok(i == N, "fabs: %d of %d endpoints of this process served%s%s", i, N,
	   rc ? ": " : "", rc ? tw_strerror(rc) : "");
	check_given_back(addr, "fabs", 0);
	stop_twd(&cl, "fabs");
}

static int twctl_stat(const char *addr, struct proc **out)
{
	char *argv[] = { twctl_path, (char *)"-p", (char *)"shm", (char *)"-b", (char *)addr,
			 (char *)"-t", (char *)"20000", (char *)"stat", NULL };

	*out = proc_spawn(argv, NULL);
	return *out ? 0 : -errno;
}

static void phase_processes(void)
{
	struct rt_cluster cl;
	const char *addr;
	struct proc *run[PAR] = {0};
	int started = 0, done = 0, failed = 0, first_failed = -1;
	uint64_t t0;
	struct twc c;
	int rc;

	start_twd(&cl);
	addr = cl.addr[0];
	t0 = tw_now_ns();
	/* PAR at a time, oldest first. */
	while (done < N) {
		int slot = done % PAR;

		while (started < N && started - done < PAR) {
			TAP_REQUIRE(twctl_stat(addr, &run[started % PAR]) == 0, "spawn twctl");
			started++;
		}
		rc = proc_wait(run[slot], 60000);
		if (rc != 0) {
			if (first_failed < 0)
				first_failed = done + 1;
			failed++;
		}
		proc_free(run[slot]);
		run[slot] = NULL;
		done++;
	}
	ok(failed == 0, "processes: %d twctl stat processes, %d failed (the first: number %d)",
	   N, failed, first_failed);
	tap_diag("processes: %d twctl runs, %d at a time, in %.1f s", N, PAR,
		 (double)(tw_now_ns() - t0) / 1e9);
	check_given_back(addr, "processes", 0);

	/* Still a backup: a segment written and closed through it. */
	rc = twc_connect(&c, "shm", addr);
	ok(rc == 0, "processes: a client connects afterwards (%s)", tw_strerror(rc));
	if (rc == 0) {
		TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "segment buffer");
		rc = twc_open(&c, 0x28, 0, 1, 1, BUF);
		for (int i = 0; rc == 0 && i < 10; i++)
			rc = twc_write(&c, 4, 200, (uint32_t)i);
		if (rc == 0)
			rc = twc_close_seg(&c, UINT64_MAX, 0, NULL);
		ok(rc == 0, "processes: and writes a segment and closes it (%s)", tw_strerror(rc));
	} else {
		ok(0, "processes: no segment written");
	}
	twc_close(&c);
	stop_twd(&cl, "processes");
}

int main(void)
{
	if (proc_find_tool("tools/twctl", twctl_path, sizeof(twctl_path)) != 0)
		tap_plan_skip_all("twctl not built");
	tap_plan(11);
	phase_channels();
	phase_fabs();
	phase_processes();
	return tap_exit();
}
