/*
 * tests/unit/test_zones.c — the zone rule of replica placement (tc.zones;
 * primary/primary_coord.c, docs/coordination.md) over the in-memory fabric with in-process backups, no
 * coordinator: backups listed zone by zone (A A B B C C), so that taking them in order would put
 * two replicas in one zone; every segment's replicas (sync and pre-open) are in three zones; a
 * lost replica's spare is its zone mate (the only backup the rule allows); with two zones for
 * r = 3 the open fails with -TW_ENOBACKUP, and without zones the same backups are fine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/primary.h>

#include "fabric/fabric.h"
#include "primary/primary_int.h"
#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define SEG (64u * 1024u)
#define OBJ 100u
#define NB 6

static const char *zones[NB] = { "A", "A", "B", "B", "C", "C" };

static void cfg_for(struct tw_ctx_config *tc, struct tw_primary_config *cfg, const char **addrs,
		    const char **z, size_t n, uint64_t log_id)
{
	tlog_primary_config(tc, cfg, "mem", addrs, n, log_id);
	tc->zones = z;
	cfg->segment_size = SEG;
	cfg->open_retry_ms = 500;
	tc->op_timeout_ms = 300;
	cfg->rerep_rate = 0;
}

static int append_n(struct tw_primary *p, unsigned n)
{
	uint8_t buf[OBJ];

	memset(buf, 0x5a, sizeof(buf));
	for (unsigned i = 0; i < n; i++) {
		int rc = tw_primary_append(p, buf, OBJ, NULL);

		if (rc)
			return rc;
	}
	return 0;
}

/* Zones of every segment in memory are distinct (lost replicas included: placed before). */
static unsigned bad_segments(struct tw_primary *p)
{
	unsigned bad = 0;

	for (size_t s = 0; s < p->nsegs; s++) {
		const struct pseg *g = p->segs[s];

		if (!g)
			continue;
		for (unsigned i = 0; i < g->nrep; i++)
			for (unsigned j = i + 1; j < g->nrep; j++)
				if (!p->bk[g->rep[i]].lost && !p->bk[g->rep[j]].lost &&
				    !strcmp(p->bk[g->rep[i]].zone, p->bk[g->rep[j]].zone))
					bad++;
	}
	return bad;
}

static void test_placement(const char **addrs, bool preopen)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	char err[1024];
	int rc;

	cfg_for(&tc, &cfg, addrs, zones, NB, preopen ? 0x2001 : 0x2000);
	cfg.preopen = preopen;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open: %s", err);
	is_int(append_n(p, 3000), 0, "%s: 3000 appends (~5 segments)", preopen ? "preopen" : "plain");
	ok(p->nsegs >= 4, "%s: %zu segments", preopen ? "preopen" : "plain", p->nsegs);
	is_int(bad_segments(p), 0, "%s: no segment has two replicas in one zone",
	       preopen ? "preopen" : "plain");
	tw_primary_close(p);
}

static void test_spare(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	char err[1024], vzone[64];
	unsigned victim, mate;
	bool mate_used = false;
	int rc;

	cfg_for(&tc, &cfg, addrs, zones, NB, 0x2002);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open: %s", err);
	is_int(append_n(p, 300), 0, "spare: appends before the loss");
	victim = p->cur->rep[1];
	mate = victim ^ 1u; /* zones come in pairs */
	snprintf(vzone, sizeof(vzone), "%s", p->bk[victim].zone);
	{
		struct tw_mem_fault f = { .kind = TW_MEM_FAULT_VANISH };

		tw__mem_inject(p->bk[victim].c->peer.ch, &f);
	}
	is_int(append_n(p, 300), 0, "spare: appends go on after backup %u (zone %s) vanished",
	       victim, vzone);
	for (unsigned i = 0; i < p->cur->nrep; i++) {
		ok(p->cur->rep[i] != victim, "spare: replica %u is not the lost backup", i);
		mate_used |= p->cur->rep[i] == mate;
	}
	ok(mate_used, "spare: the lost backup's zone mate (%u, zone %s) took its place", mate,
	   p->bk[mate].zone);
	is_int(bad_segments(p), 0, "spare: still no segment with two replicas in one zone");
	tw_primary_close(p);
}

static void test_too_few_zones(const char **addrs)
{
	static const char *two[3] = { "A", "A", "B" };
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char err[1024] = "";
	int rc;

	cfg_for(&tc, &cfg, addrs, two, 3, 0x2003);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	ok(rc == -TW_ENOBACKUP && !p, "two zones for r = 3: -TW_ENOBACKUP (%s: %s)",
	   tw_strerror(rc), err);
	cfg_for(&tc, &cfg, addrs, NULL, 3, 0x2004);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "the same three backups without zones: open (%s)", rc ? err : "ok");
	tw_primary_close(p);
}

/* The static backend through the same path as ZooKeeper: tc.coordinator = "static:A,B,C". */
static void test_static_backend(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char url[512], err[1024] = "";
	int rc;

	snprintf(url, sizeof(url), "static:%s,%s,%s", addrs[0], addrs[2], addrs[4]);
	cfg_for(&tc, &cfg, NULL, NULL, 0, 0x2005);
	tc.coordinator = url;
	cfg.epoch = 0; /* the static backend leaves the epoch to the backups */
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "coordinator static:...: open with no backups list (%s)", rc ? err : "ok");
	if (rc)
		return;
	is_int(append_n(p, 100), 0, "static backend: appends");
	ok(tw_primary_epoch(p) >= 1, "static backend: automatic epoch %llu",
	   (unsigned long long)tw_primary_epoch(p));
	tw_primary_close(p);
	tc.coordinator = "zk://";
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	ok(rc == -EINVAL && strstr(err, "bad coordinator URL"), "a bad coordinator URL: -EINVAL "
	   "(%s)", err);
}

int main(void)
{
	struct tbackups cl;
	const char **addrs = cl.addrs;

	tbackups_start(&cl, "test_zones", NB, "mem", 16, SEG);
	test_placement(addrs, false);
	test_placement(addrs, true);
	test_spare(addrs);
	test_too_few_zones(addrs);
	test_static_backend(addrs);
	tbackups_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
