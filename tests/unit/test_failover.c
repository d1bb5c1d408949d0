/*
 * tests/unit/test_failover.c — backup failure on the primary over the in-memory fabric ("mem")
 * with in-process backups: a replica of the open segment fails (write error, dropped write,
 * backup gone) while appends stream, with a spare in the list (4 backups, r = 3): appends go on,
 * nothing acknowledged is lost, the counters tell what happened, closed segments that lived on
 * the lost backup are re-replicated, and recovery from all four backups returns every
 * acknowledged entry while ignoring the lost backup's stale copies (older replica version).
 * The async cases run again with batches of 8, where the appending thread seals whole batches
 * itself during the failover. A spare stopped (mem's TW_MEM_FAULT_STOP) is lost at the next
 * segment's open. Last, the same
 * through the RPC-replication baseline (TW_DATA_PATH=rpc) with a backup closed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "primary/primary_int.h"
#include "tap.h"
#include "tbackup.h"
#include "tlog.h"
#include "twd_client.h"

#define SEG (64u * 1024u)
#define OBJ 100u
#define NB 5

static bool preopen;    /* run(): cfg.preopen */
static unsigned batch;  /* run(): cfg.max_batch when not 0 */

static void fill(uint8_t *buf, uint64_t seq)
{
	for (uint32_t i = 0; i < OBJ; i++)
		buf[i] = (uint8_t)(seq * 31 + i);
	memcpy(buf, &seq, 8);
}

struct rcheck {
	uint64_t next, bad;
};

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct rcheck *k = arg;
	uint8_t want[OBJ];

	fill(want, k->next);
	if (e->len != OBJ || memcmp(e->data, want, OBJ)) {
		k->bad++;
		return 0;
	}
	k->next++;
	return 0;
}

/* A TAP test, named what: recovery of log_id from addrs[0..n) returns entries 0..want-1 as
 * fill() made them. res for the caller's own checks. */
static void recovers_all(const char *what, const char **addrs, size_t n, uint64_t log_id,
			 uint64_t want, struct tw_recover_result *res)
{
	struct rcheck k = { 0, 0 };
	int rc = tbackup_recover(addrs, n, log_id, check_cb, &k, res);

	ok(rc == 0 && k.bad == 0 && k.next == want,
	   "%s: recovery from %zu backups returns all %" PRIu64 " entries (%" PRIu64 " bad)%s%s",
	   what, n, k.next, k.bad, rc ? ": " : "", rc ? tw_strerror(rc) : "");
}

/* Appends entries [from, to) asynchronously, their acknowledgements in a; stops at the first
 * append refused (the acknowledgement count tells). */
static void append_range(struct tw_primary *p, uint64_t from, uint64_t to, struct tlog_acks *a)
{
	uint8_t buf[OBJ];

	for (uint64_t i = from; i < to; i++) {
		fill(buf, i);
		if (tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, a, NULL) != 0)
			break;
	}
}

/* The configuration every case starts from: 4 mem backups, r = 3, a short op timeout, no
 * re-replication pacing. */
static void base_cfg(struct tw_ctx_config *tc, struct tw_primary_config *cfg, const char **addrs,
		     uint64_t log_id, enum tw_primary_mode mode)
{
	tlog_primary_config(tc, cfg, "mem", addrs, 4, log_id);
	cfg->segment_size = SEG;
	cfg->mode = mode;
	tc->op_timeout_ms = 300;
	cfg->rerep_rate = 0;
}

/*
 * One run: open on addrs[0..3] (r = 3, one spare), append `before` entries, inject `fault` on
 * the replica index 1 of the open segment, append `after` more; check, close, recover.
 */
static void run(const char *name, const char **addrs, enum tw_primary_mode mode, uint64_t log_id,
		enum tw_mem_fault_kind fault)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_recover_result res;
	struct tw_primary *p;
	struct tlog_acks a = { 0 };
	char victim[128];
	const unsigned before = 1500, after = 1500; /* ~2.5 segments each */
	uint32_t fault_seg;
	bool back;
	int rc;

	base_cfg(&tc, &cfg, addrs, log_id, mode);
	cfg.preopen = preopen;
	if (batch)
		cfg.max_batch = batch;
	p = tlog_open(&tc, &cfg, "%s", name);
	if (!p)
		return;
	append_range(p, 0, before, &a);
	is_int(tw_primary_flush(p), 0, "%s: %u appends before the fault", name, before);
	{
		struct tw_mem_fault f = { .kind = fault };

		tw__primary_lock(p);
		snprintf(victim, sizeof(victim), "%s", p->bk[p->cur->rep[1]].addr);
		fault_seg = p->cur->id;
		tw__mem_inject(p->bk[p->cur->rep[1]].c->peer.ch, &f);
		tw__primary_unlock(p);
	}
	append_range(p, before, before + after, &a);
	rc = tw_primary_flush(p);
	is_int(rc, 0, "%s: appends go on after the loss of %s (%s)", name, victim,
	       rc ? tw_primary_errmsg(p) : "ok");
	ok(a.ok == before + after && a.errors == 0, "%s: %" PRIu64 " acknowledged, %" PRIu64
	   " failed", name, a.ok, a.errors);
	/* The victim's twd is alive (only the channel failed): the context's reviver may connect
	 * to it again (primary/ctx_revive.c) and later segments may use it; the segments it held
	 * at the loss never keep it. */
	back = __atomic_load_n(&p->ctx->st.reconnects, __ATOMIC_RELAXED) > 0;
	for (unsigned i = 0; i < 3; i++)
		ok(back || strcmp(tw_primary_replica_addr(p, i), victim) != 0, "%s: replica %u is %s%s",
		   name, i, tw_primary_replica_addr(p, i), back ? " (the victim connected again)" :
		   "");
	rc = tw_primary_finish(p);
	is_int(rc, 0, "%s: finish", name);
	tw_primary_get_stats(p, &st);
	tap_diag("%s: %" PRIu64 " writes, %" PRIu64 " sealed by the appending thread", name,
		 st.writes, st.appender_seals);
	ok(st.backups_lost == 1 && st.failovers == 1, "%s: stats: %" PRIu64 " lost, %" PRIu64
	   " failovers", name, st.backups_lost, st.failovers);
	ok(st.rereplications >= 2 && st.rerep_bytes > 0 && st.rerep_pending == 0,
	   "%s: stats: %" PRIu64 " re-replications (open + closed segments), %" PRIu64 " bytes, %"
	   PRIu64 " pending", name, st.rereplications, st.rerep_bytes, st.rerep_pending);
	ok(st.suspended_last_ns > 0 && st.suspended_ns >= st.suspended_last_ns,
	   "%s: suspended %.2f ms (last %.2f ms)", name, (double)st.suspended_ns / 1e6,
	   (double)st.suspended_last_ns / 1e6);
	/* The writes the failover repaired are not timed (their time is the failover's). */
	ok(st.writes_timed > 0 && st.writes_timed < st.writes,
	   "%s: %" PRIu64 " of %" PRIu64 " writes timed (the repaired ones are not)", name,
	   st.writes_timed, st.writes);
	/* No segment keeps a replica on the lost backup. */
	{
		bool clean = true;

		for (size_t s = 0; s < p->nsegs; s++)
			for (unsigned i = 0; i < p->segs[s]->nrep; i++)
				if (!strcmp(p->bk[p->segs[s]->rep[i]].addr, victim) &&
				    (!back || p->segs[s]->id <= fault_seg))
					clean = false;
		ok(clean, "%s: no segment of %zu keeps a replica on %s%s", name, p->nsegs, victim,
		   back ? " from before the loss" : "");
	}
	tw_primary_close(p);

	recovers_all(name, addrs, 4, log_id, before + after, &res);
	ok(res.copies_stale >= 1, "%s: recovery ignored %" PRIu64 " stale copies on %s", name,
		   res.copies_stale, victim);
}

/*
 * Background re-replication is rate-limited: with rerep_rate = one segment per second, the
 * closed segments of the lost backup are not all copied within the test's milliseconds; finish
 * copies what is still owed, and recovery gets everything.
 */
static void test_rate(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_recover_result res;
	struct tw_primary *p;
	uint8_t buf[OBJ];
	uint64_t during, owed = 0;
	unsigned victim;

	tlog_transport(&tc, "mem", addrs, 4);
	tw_primary_config_init(&cfg);
	cfg.log_id = 210;
	cfg.segment_size = SEG;
	cfg.rerep_rate = SEG; /* bytes per second */
	p = tlog_open(&tc, &cfg, "rate");
	if (!p)
		return;
	for (uint64_t i = 0; i < 4000; i++) {
		fill(buf, i);
		TAP_REQUIRE(tw_primary_append_async(p, buf, OBJ, NULL, NULL, NULL) == 0, "append");
	}
	TAP_REQUIRE(tw_primary_flush(p) == 0, "flush");
	victim = p->cur->rep[1];
	for (size_t s = 0; s + 1 < p->nsegs; s++)
		for (unsigned i = 0; i < p->segs[s]->nrep; i++)
			owed += p->segs[s]->rep[i] == victim;
	{
		struct tw_mem_fault f = { .kind = TW_MEM_FAULT_VANISH };

		tw__mem_inject(p->bk[victim].c->peer.ch, &f);
	}
	for (uint64_t i = 4000; i < 4200; i++) {
		fill(buf, i);
		TAP_REQUIRE(tw_primary_append_async(p, buf, OBJ, NULL, NULL, NULL) == 0, "append");
	}
	is_int(tw_primary_flush(p), 0, "rate: appends go on");
	tw_primary_get_stats(p, &st);
	during = st.rereplications;
	ok(owed >= 2 && during >= 1 && during <= 2,
	   "rate: %" PRIu64 " closed segments owed, %" PRIu64 " replicas re-created so far (the "
	   "open one, at most one closed one per second)", owed, during);
	is_int(tw_primary_finish(p), 0, "rate: finish");
	tw_primary_get_stats(p, &st);
	ok(st.rereplications == 1 + owed && st.rerep_pending == 0,
	   "rate: finish copied the rest (%" PRIu64 " in all, %" PRIu64 " pending)",
	   st.rereplications, st.rerep_pending);
	tw_primary_close(p);
	recovers_all("rate", addrs, 4, 210, 4200, &res);
}

/*
 * A backup that stopped and came back must not resurrect stale data: its copy (version 0) got
 * more writes than the others and was even closed (as twd does with open buffers on SIGTERM),
 * while the two current replicas (version 1) are still open. Recovery must deliver exactly the
 * version-1 content and report the stale copy.
 */
struct stale_x {
	unsigned got, bad;
};

static int stale_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct stale_x *x = arg;
	uint8_t want[OBJ];

	twc_fill(want, OBJ, 1000 + x->got / 10, x->got % 10);
	if (e->len != OBJ || memcmp(e->data, want, OBJ))
		x->bad++;
	else
		x->got++;
	return 0;
}

static void test_stale_closed(const char **addrs)
{
	uint64_t ver[3] = { 1, 1, 0 };
	struct tw_recover_config rc;
	struct tw_recover_result res;
	struct stale_x x = { 0, 0 };
	struct twc c[3];
	char err[512];
	int r;

	for (unsigned i = 0; i < 3; i++) {
		TAP_REQUIRE(twc_connect(&c[i], "mem", addrs[i]) == 0, "connect %u", i);
		TAP_REQUIRE(twc_seg_init(&c[i], SEG) == 0, "seg init");
		TAP_REQUIRE(twc_open(&c[i], 300, 0, 0, ver[i], SEG) == 0, "open %u", i);
		for (unsigned w = 0; w < 5; w++)
			TAP_REQUIRE(twc_write(&c[i], 10, OBJ, 1000 + w) == 0, "write");
	}
	for (unsigned w = 0; w < 3; w++)
		TAP_REQUIRE(twc_write(&c[2], 10, OBJ, 9000 + w) == 0, "stale write");
	TAP_REQUIRE(twc_close_seg(&c[2], UINT64_MAX, 0, NULL) == 0, "close the stale copy");
	for (unsigned i = 0; i < 3; i++)
		twc_close(&c[i]);

	tlog_recover_config(&rc, "mem", addrs, 3, 300);
	r = tw_recover(&rc, stale_cb, &x, &res, err, sizeof(err));
	ok(r == 0 && x.bad == 0 && x.got == 50 && res.copies_stale == 1,
	   "stale closed copy: recovery delivers the 50 entries of version 1, not the 80 of the "
	   "closed version-0 copy (%u delivered, %u bad, %" PRIu64 " stale)%s%s", x.got, x.bad,
	   res.copies_stale, r ? ": " : "", r ? err : "");
}

/*
 * The RPC-replication baseline (TW_DATA_PATH=rpc: the fabric sends writes as messages and the
 * backups' fabric checks each sealed write) through a failover: the re-replication copies are
 * whole segment prefixes, not sealed writes, and must be placed without the check
 * (TW_OP_UNCHECKED). The victim backup is closed (its channels are lost). Runs last: it stops
 * one of the four backups for good.
 */
static void test_rpc_failover(struct tbackup *b, const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_recover_result res;
	struct tw_primary *p;
	struct tlog_acks a = { 0 };
	const char *rest[3];
	unsigned vi = 0, n = 0;
	int rc;

	base_cfg(&tc, &cfg, addrs, 220, TW_PRIMARY_ASYNC);
	setenv("TW_DATA_PATH", "rpc", 1); /* the baseline's switch, read at the open */
	p = tlog_open(&tc, &cfg, "rpc");
	unsetenv("TW_DATA_PATH");
	if (!p)
		return;
	append_range(p, 0, 1500, &a);
	is_int(tw_primary_flush(p), 0, "rpc: 1500 appends before the loss");
	tw__primary_lock(p);
	for (unsigned i = 0; i < 4; i++)
		if (!strcmp(b[i].addr, p->bk[p->cur->rep[1]].addr))
			vi = i;
	tw__primary_unlock(p);
	tbackup_stop(&b[vi]);
	append_range(p, 1500, 3000, &a);
	rc = tw_primary_flush(p);
	is_int(rc, 0, "rpc: appends go on after backup %u closed (%s)", vi,
	       rc ? tw_primary_errmsg(p) : "ok");
	ok(a.ok == 3000 && a.errors == 0, "rpc: %" PRIu64 " acknowledged, %" PRIu64 " failed", a.ok,
	   a.errors);
	is_int(tw_primary_finish(p), 0, "rpc: finish (every closed segment re-replicated)");
	tw_primary_get_stats(p, &st);
	ok(st.backups_lost == 1 && st.failovers == 1 && st.rereplications >= 2 &&
	   st.rerep_bytes > SEG, "rpc: %" PRIu64 " lost, %" PRIu64 " failovers, %" PRIu64
	   " re-replications of %" PRIu64 " bytes, copied as unchecked writes", st.backups_lost,
	   st.failovers, st.rereplications, st.rerep_bytes);
	tw_primary_close(p);
	for (unsigned i = 0; i < 4; i++)
		if (i != vi)
			rest[n++] = addrs[i];
	recovers_all("rpc, without the closed backup", rest, 3, 220, 3000, &res);
}

/*
 * A backup stopped (SIGSTOP) while it holds no replica of the open segment is only noticed when
 * the next segment is opened there: the open's RPC times out, the segment goes to the spare.
 * That is a loss like any other (docs/failover.md: every loss goes through tw__pfo_lost):
 * counted in backups_lost and never used again. It was not counted, and failover_stop_tcp
 * waited for the count for ever while the appends went on (docs/fabric.md, "Deadlines").
 */
static void test_stopped_spare(const char **addrs)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_primary *p;
	uint8_t buf[OBJ];
	char victim[128] = "";
	unsigned seg0, vi = 4;
	int rc = 0;

	base_cfg(&tc, &cfg, addrs, 206, TW_PRIMARY_SYNC);
	tc.rpc_timeout_ms = 300;
	p = tlog_open(&tc, &cfg, "stopped spare");
	if (!p)
		return;
	for (uint64_t i = 0; i < 100; i++) {
		fill(buf, i);
		tw_primary_append(p, buf, OBJ, NULL);
	}
	seg0 = p->cur->id;
	for (unsigned b = 0; b < 4 && vi == 4; b++)
		if (!tw__primary_is_replica(p, b))
			vi = b;
	TAP_REQUIRE(vi < 4, "a spare outside segment %u", seg0);
	snprintf(victim, sizeof(victim), "%s", p->bk[vi].addr);
	{
		struct tw_mem_fault f = { .kind = TW_MEM_FAULT_STOP };

		is_int(tw__mem_inject(p->bk[vi].c->peer.ch, &f), 0, "stopped spare: %s stopped",
		       victim);
	}
	for (uint64_t i = 100; i < 1500 && !rc; i++) { /* past the rollover */
		fill(buf, i);
		rc = tw_primary_append(p, buf, OBJ, NULL);
	}
	is_int(rc, 0, "stopped spare: appends go on (%s)", rc ? tw_primary_errmsg(p) : "ok");
	ok(p->cur->id > seg0, "stopped spare: rolled over from segment %u to %u", seg0, p->cur->id);
	for (unsigned i = 0; i < 3; i++)
		ok(strcmp(tw_primary_replica_addr(p, i), victim) != 0,
		   "stopped spare: replica %u is %s", i, tw_primary_replica_addr(p, i));
	tw_primary_get_stats(p, &st);
	ok(st.backups_lost == 1 && st.failovers == 0, "stopped spare: stats: %" PRIu64 " lost "
	   "(the open timed out), %" PRIu64 " failovers", st.backups_lost, st.failovers);
	tw_primary_close(p);
}

int main(void)
{
	struct tbackups cl;
	struct tbackup *b = cl.b;
	const char **addrs = cl.addrs;

	tbackups_start(&cl, "test_failover", NB, "mem", 16, SEG);

	run("write error, sync", addrs, TW_PRIMARY_SYNC, 200, TW_MEM_FAULT_FAIL);
	run("write error, async", addrs, TW_PRIMARY_ASYNC, 201, TW_MEM_FAULT_FAIL);
	run("dropped write (op timeout), sync", addrs, TW_PRIMARY_SYNC, 202, TW_MEM_FAULT_DROP);
	run("peer vanishes, async", addrs, TW_PRIMARY_ASYNC, 203, TW_MEM_FAULT_VANISH);
	preopen = true; /* the next segment is already open on its backups, the victim's too */
	run("write error, preopen, async", addrs, TW_PRIMARY_ASYNC, 204, TW_MEM_FAULT_FAIL);
	run("peer vanishes, preopen, sync", addrs, TW_PRIMARY_SYNC, 205, TW_MEM_FAULT_VANISH);
	preopen = false;
	/* Whole batches of 8 in async mode: the appending thread seals batches itself while the
	 * failover runs (docs/primary.md, "Who seals"; the failover takes the appenders' lock
	 * before it reads the open segment's writer). */
	batch = 8;
	run("write error, batches of 8, async", addrs, TW_PRIMARY_ASYNC, 207, TW_MEM_FAULT_FAIL);
	run("peer vanishes, batches of 8, async", addrs, TW_PRIMARY_ASYNC, 208, TW_MEM_FAULT_VANISH);
	batch = 0;
	test_stale_closed(addrs);
	test_rate(addrs);
	test_stopped_spare(addrs);
	test_rpc_failover(b, addrs);

	tbackups_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
