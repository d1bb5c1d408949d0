/*
 * tests/unit/test_fabric_shm_av.c — shm address-vector entries (fabric/ofi_rdm.c, docs/fabric.md
 * "AV entries on shm"). libfabric 1.17's shm AV holds 256 peers and counts every insert, even
 * of a name it holds; its fi_av_remove leaves stale state, so a fab gives an entry back only
 * when it only accepts and the peer's endpoint is gone. In one process, a listener runs in its
 * own thread while a client fab:
 *   - connects and closes 300 channels to it: one entry on each side (both used to insert once
 *     per channel: the 257th connect failed on the client, "fi_av_insert ... failed");
 *   - closes: the listener gives the entry back (its region is gone) after a CQ read;
 * then the listener, which gave an entry back, refuses to connect out (-ENOTSUP): its record
 * of a freed slot is stale, and only a peer's connection request refreshes it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "fab_events.h"
#include "fabric/fabric.h"
#include "tap.h"

#define NCHAN 300

static atomic_bool stop;

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	(void)arg;
	(void)err;
	tw__chan_close(ch);
}

static void *serve(void *arg)
{
	struct tw_fab *fab = arg;

	while (!atomic_load(&stop))
		tw__fab_progress(fab, 10);
	return NULL;
}

int main(void)
{
	struct tw_fab_config cfg;
	struct tw_fab_events ev = { .on_lost = on_lost };
	struct tw_fab *lis = NULL, *cli = NULL;
	struct tw_fab_stats sl, sc;
	char addr[TW_ADDR_MAX];
	struct tw_chan *ch;
	pthread_t th;
	uint64_t end;
	int i, rc = 0;

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	rc = tw__fab_open(&cfg, &ev, &lis);
	if (rc == -TW_ENOPROV)
		tap_plan_skip_all("shm not available here");
	tap_plan(6);
	TAP_REQUIRE(rc == 0 && tw__fab_listen(lis, addr, sizeof(addr)) == 0, "listener");
	TAP_REQUIRE(tw__fab_open(&cfg, NULL, &cli) == 0, "client fab");

	TAP_REQUIRE(pthread_create(&th, NULL, serve, lis) == 0, "pthread_create");
	i = fab_connect_close(cli, addr, NCHAN, &rc);
	ok(i == NCHAN, "%d of %d channels of one client endpoint connected%s%s", i, NCHAN,
	   rc ? ": " : "", rc ? tw__fab_errmsg(cli) : "");
	tw__fab_get_stats(cli, &sc);
	is_int(sc.shm_av_peers, 1, "the client holds one AV entry for the listener");
	tw__fab_close(cli);
	atomic_store(&stop, true);
	pthread_join(th, NULL);

	/* This thread progresses the listener now: the client's region is gone, so the entry is
	 * given back at the sweep after the next one (100 ms apart, a CQ read in between). */
	end = tw_now_ns() + 10000000000ull;
	do {
		tw__fab_progress(lis, 10);
		tw__fab_get_stats(lis, &sl);
	} while (sl.shm_av_peers && tw_now_ns() < end);
	is_int(sl.shm_av_given_back, 1, "the listener gave the client's entry back");
	is_int(sl.shm_av_peers, 0, "and holds none");

	rc = tw__fab_connect(lis, addr, &ch);
	is_int(rc, -ENOTSUP, "a listener that gave entries back does not connect out");
	ok(strstr(tw__fab_errmsg(lis), "accepts only") != NULL, "it says why: %s",
	   tw__fab_errmsg(lis));
	tw__fab_close(lis);
	return tap_exit();
}
