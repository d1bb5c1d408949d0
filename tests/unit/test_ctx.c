/*
 * tests/unit/test_ctx.c — many logs on one context (tailwind/context.h) over the in-memory
 * fabric ("mem") with in-process backups: the demultiplexing of completions, RPC replies and
 * losses between logs that share one channel per backup.
 *
 *   - two logs on one context share 4 channels (one per backup), each gets exactly its own
 *     acknowledgements;
 *   - a channel that vanishes is lost for both: each runs its own failover (the context
 *     connects to the backup again, each log reopens its own buffer there), nothing acked lost;
 *   - a backup that stops for good: each log fails over to the spare on its own;
 *   - closing one log leaves the other working; tw_ctx_close refuses while a log is open;
 *   - a takeover of one log by another primary fences it there, which closes the context's
 *     shared connections: the fenced log fails with -TW_EFENCED, the other goes on (reconnect);
 *   - tw_primary_takeover_on and tw_primary_trim on a context;
 *   - recovery returns every acknowledged entry of every log, in order;
 *   - the private-context path (tw_primary_open) still works next to it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/backup.h>
#include <tailwind/context.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "primary/primary_int.h"
#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define SEG (64u * 1024u)
#define OBJ 100u
#define NB 5

/* Entry `seq` of log `log`: distinct per log, so a misrouted acknowledgement or write shows. */
static void fill(uint8_t *buf, uint64_t log, uint64_t seq)
{
	for (uint32_t i = 0; i < OBJ; i++)
		buf[i] = (uint8_t)(seq * 31 + log * 7 + i);
	memcpy(buf, &seq, 8);
	memcpy(buf + 8, &log, 8);
}

struct rcheck {
	uint64_t log, next, bad;
};

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct rcheck *k = arg;
	uint8_t want[OBJ];

	fill(want, k->log, k->next);
	if (e->len != OBJ || memcmp(e->data, want, OBJ)) {
		k->bad++;
		return 0;
	}
	k->next++;
	return 0;
}

static int recover_log(const char **addrs, size_t n, uint64_t log_id, uint64_t first,
		       struct rcheck *k)
{
	memset(k, 0, sizeof(*k));
	k->log = log_id;
	k->next = first;
	return tbackup_recover(addrs, n, log_id, check_cb, k, NULL);
}

static void log_cfg(struct tw_primary_config *cfg, uint64_t log_id)
{
	tw_primary_config_init(cfg);
	cfg->log_id = log_id;
	cfg->replicas = 3;
	cfg->segment_size = SEG;
	cfg->rerep_rate = 0;
	cfg->mode = TW_PRIMARY_ASYNC; /* what a shared context serves */
}

/* Append entries [from, to) of log `p` (id `log`) asynchronously. 0 or the first error. */
static int append_range(struct tw_primary *p, uint64_t log, uint64_t from, uint64_t to,
			struct tlog_acks *a)
{
	uint8_t buf[OBJ];

	for (uint64_t i = from; i < to; i++) {
		int rc;

		fill(buf, log, i);
		rc = tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, a, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

/* After `what`: 1500 more appends to log A (400) and B (401) from `from`, both flushed, and
 * each log counted `failovers` failovers of its own (said as `fo_what`). */
static void both_go_on(struct tw_primary *pa, struct tw_primary *pb, uint64_t from,
		       struct tlog_acks *aa, struct tlog_acks *ab, const char *what,
		       uint64_t failovers, const char *fo_what)
{
	struct tw_primary_stats sa, sb;
	int rc;

	for (uint64_t i = from; i < from + 1500; i += 100) {
		TAP_REQUIRE(append_range(pa, 400, i, i + 100, aa) == 0, "append A");
		TAP_REQUIRE(append_range(pb, 401, i, i + 100, ab) == 0, "append B");
	}
	rc = tw_primary_flush(pa);
	is_int(rc, 0, "A: appends go on after %s (%s)", what, rc ? tw_primary_errmsg(pa) : "ok");
	rc = tw_primary_flush(pb);
	is_int(rc, 0, "B: appends go on after %s (%s)", what, rc ? tw_primary_errmsg(pb) : "ok");
	tw_primary_get_stats(pa, &sa);
	tw_primary_get_stats(pb, &sb);
	ok(sa.failovers == failovers && sb.failovers == failovers, "%s (A %" PRIu64 ", B %" PRIu64
	   ")", fo_what, sa.failovers, sb.failovers);
}

static unsigned backup_index(struct tbackup *b, const char *addr)
{
	for (unsigned i = 0; i < NB; i++)
		if (!strcmp(b[i].addr, addr))
			return i;
	return NB;
}

int main(void)
{
	struct tbackups cl;
	struct tbackup *b = cl.b;
	const char **addrs = cl.addrs;
	struct tw_ctx_config cc, tc;
	struct tw_ctx_stats cs;
	struct tw_primary_config cfg;
	struct tw_primary *pa = NULL, *pb = NULL, *pc = NULL;
	struct tw_ctx *ctx = NULL;
	struct tlog_acks aa = { 0 }, ab = { 0 }, ac = { 0 };
	struct rcheck k;
	char err[1024], victim[128], what[160];
	unsigned vi;
	int rc;

	tbackups_start(&cl, "test_ctx", NB, "mem", 64, SEG);

	/* Bad configurations. */
	tw_ctx_config_init(&cc);
	cc.provider = "mem";
	is_int(tw_ctx_open(&cc, &ctx, err, sizeof(err)), -EINVAL, "no backups: -EINVAL (%s)", err);
	cc.backups = addrs;
	cc.n_backups = 4;
	cc.coordinator = "zk://127.0.0.1:1";
	is_int(tw_ctx_open(&cc, &ctx, err, sizeof(err)), -ENOTSUP, "coordinator: -ENOTSUP (%s)",
	       err);
	cc.coordinator = NULL;
	cc.op_timeout_ms = 300;

	rc = tw_ctx_open(&cc, &ctx, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "context open: %s", rc ? err : "ok");
	/* A sync log cannot be had on a shared context: refused, not quietly made async. */
	log_cfg(&cfg, 400);
	cfg.mode = TW_PRIMARY_SYNC;
	rc = tw_primary_open_on(ctx, &cfg, &pa, err, sizeof(err));
	ok(rc == -EINVAL && !pa && strstr(err, "tw_primary_config.mode") &&
	   strstr(err, "TW_PRIMARY_ASYNC"), "mode SYNC on a shared context: -EINVAL naming the "
	   "field (%s)", err);
	rc = tw_primary_takeover_on(ctx, &cfg, NULL, NULL, NULL, &pa, err, sizeof(err));
	ok(rc == -EINVAL && !pa && strstr(err, "tw_primary_config.mode"),
	   "and on a takeover on it (%s)", err);
	cfg.mode = (enum tw_primary_mode)7;
	is_int(tw_primary_open(&cc, &cfg, &pa, err, sizeof(err)), -EINVAL,
	       "mode 7 on a private context: -EINVAL (%s)", err);
	log_cfg(&cfg, 400);
	rc = tw_primary_open_on(ctx, &cfg, &pa, err, sizeof(err));
	is_int(rc, 0, "log A open on the context (%s)", rc ? err : "ok");
	log_cfg(&cfg, 401);
	rc = tw_primary_open_on(ctx, &cfg, &pb, err, sizeof(err));
	is_int(rc, 0, "log B open on the context (%s)", rc ? err : "ok");
	TAP_REQUIRE(pa && pb, "both logs open");
	tw_ctx_get_stats(ctx, &cs);
	ok(cs.logs == 2 && cs.channels == 4, "one channel per backup for both logs (%" PRIu64
	   " logs, %" PRIu64 " channels)", cs.logs, cs.channels);
	ok(pa->ctx == pb->ctx && pa->fab == pb->fab, "both logs on one fabric instance");
	log_cfg(&cfg, 401);
	is_int(tw_primary_open_on(ctx, &cfg, &pc, err, sizeof(err)), -TW_ELOGEXISTS,
	       "a second open of log B on the same context: -TW_ELOGEXISTS");

	/* Demux: interleaved appends, each log gets its own acknowledgements in order. */
	for (uint64_t i = 0; i < 1500; i += 100) {
		TAP_REQUIRE(append_range(pa, 400, i, i + 100, &aa) == 0, "append A");
		TAP_REQUIRE(append_range(pb, 401, i, i + 100, &ab) == 0, "append B");
	}
	is_int(tw_primary_flush(pa), 0, "A: 1500 appends flushed");
	is_int(tw_primary_flush(pb), 0, "B: 1500 appends flushed");
	ok(aa.ok == 1500 && ab.ok == 1500 && !aa.errors && !ab.errors && !aa.out_of_order &&
	   !ab.out_of_order, "each log got exactly its own 1500 acknowledgements, in order "
	   "(A %" PRIu64 ", B %" PRIu64 ")", aa.ok, ab.ok);

	/* A channel vanishes: lost for both logs; each fails over on its own. */
	snprintf(victim, sizeof(victim), "%s", pa->bk[pa->cur->rep[1]].addr);
	ok(!strcmp(victim, pb->bk[pb->cur->rep[1]].addr) ||
	   !strcmp(victim, pb->bk[pb->cur->rep[0]].addr) ||
	   !strcmp(victim, pb->bk[pb->cur->rep[2]].addr), "the victim %s holds a replica of both "
	   "logs' open segments", victim);
	{
		struct tw_mem_fault f = { .kind = TW_MEM_FAULT_VANISH };

		/* The channel is the context's: no lock of either log protects it, so stop the
		 * context's thread for the injection. */
		tw__ctx_drive_enter(ctx);
		tw__mem_inject(pa->bk[pa->cur->rep[1]].c->peer.ch, &f);
		tw__ctx_drive_leave(ctx);
	}
	snprintf(what, sizeof(what), "the channel to %s vanished", victim);
	both_go_on(pa, pb, 1500, &aa, &ab, what, 1, "each log ran its own failover");
	tw_ctx_get_stats(ctx, &cs);
	ok(cs.reconnects >= 1 && cs.channels == 4, "the context connected to %s again (%" PRIu64
	   " reconnects, %" PRIu64 " channels)", victim, cs.reconnects, cs.channels);
	ok(aa.ok == 3000 && ab.ok == 3000 && !aa.errors && !ab.errors,
	   "every append acknowledged (A %" PRIu64 ", B %" PRIu64 ")", aa.ok, ab.ok);

	/* A backup stops for good: both fail over to the spare, each on its own. */
	vi = backup_index(b, pa->bk[pa->cur->rep[0]].addr);
	TAP_REQUIRE(vi < 4, "victim index");
	tbackup_stop(&b[vi]);
	snprintf(what, sizeof(what), "backup %u stopped", vi);
	both_go_on(pa, pb, 3000, &aa, &ab, what, 2, "each log failed over again");
	for (unsigned i = 0; i < 3; i++)
		ok(backup_index(b, tw_primary_replica_addr(pa, i)) != vi &&
		   backup_index(b, tw_primary_replica_addr(pb, i)) != vi,
		   "replica %u: A on %s, B on %s (not the stopped one)", i,
		   tw_primary_replica_addr(pa, i), tw_primary_replica_addr(pb, i));

	/* Closing one log leaves the other working; the context refuses to close under it. */
	is_int(tw_primary_close(pa), 0, "A closed");
	pa = NULL;
	is_int(tw_ctx_close(ctx), -EBUSY, "the context does not close with B open (%s)",
	       tw_ctx_errmsg(ctx));
	TAP_REQUIRE(append_range(pb, 401, 4500, 5000, &ab) == 0, "append B");
	is_int(tw_primary_flush(pb), 0, "B goes on after A closed");
	ok(ab.ok == 5000 && !ab.errors, "B: %" PRIu64 " acknowledged", ab.ok);

	/* Takeover on the context, and log cleaning. */
	{
		struct tw_recover_result res;

		memset(&k, 0, sizeof(k));
		k.log = 400;
		log_cfg(&cfg, 400);
		rc = tw_primary_takeover_on(ctx, &cfg, check_cb, &k, &res, &pa, err, sizeof(err));
		is_int(rc, 0, "A taken over on the context (%s)", rc ? err : "ok");
		ok(k.next == 4500 && k.bad == 0, "the takeover delivered A's 4500 entries (%" PRIu64
		   ", %" PRIu64 " bad)", k.next, k.bad);
		if (pa) {
			struct tlog_acks a2 = { 0 };

			aa = a2;
			TAP_REQUIRE(append_range(pa, 400, 4500, 5000, &aa) == 0, "append A");
			is_int(tw_primary_flush(pa), 0, "A appends after the takeover");
			rc = tw_primary_trim(pa, tw_primary_first_segment(pa));
			ok(rc >= 0, "tw_primary_trim on a log of a context (%d)", rc);
		}
	}

	/* The fence hazard: a private primary takes B over. The backups close the connections
	 * that opened B's buffers: the context's shared ones, which A uses too. B must fail with
	 * -TW_EFENCED; A must go on (the context connects again, A reopens its buffers). */
	{
		struct tw_recover_result res;
		struct tw_primary *nb = NULL;
		const char *alive[4];
		unsigned n = 0;
		struct tlog_acks a3 = { 0 };

		for (unsigned i = 0; i < 4; i++)
			if (i != vi)
				alive[n++] = addrs[i];
		alive[n++] = b[4].addr;
		memset(&k, 0, sizeof(k));
		k.log = 401;
		log_cfg(&cfg, 401);
		cfg.mode = TW_PRIMARY_SYNC; /* private */
		tlog_transport(&tc, "mem", alive, n);
		rc = tw_primary_takeover(&tc, &cfg, check_cb, &k, &res, &nb, err, sizeof(err));
		is_int(rc, 0, "B taken over by a private primary (%s)", rc ? err : "ok");
		ok(k.next == 5000 && k.bad == 0, "that takeover delivered B's 5000 entries");
		rc = append_range(pb, 401, 5000, 5100, &a3);
		if (rc == 0)
			rc = tw_primary_flush(pb);
		is_int(rc, -TW_EFENCED, "the old B fails with -TW_EFENCED (%s)",
		       tw_primary_errmsg(pb));
		if (pa) {
			rc = append_range(pa, 400, 5000, 5500, &aa);
			if (rc == 0)
				rc = tw_primary_flush(pa);
			is_int(rc, 0, "A on the same context goes on after B's fence (%s)",
			       rc ? tw_primary_errmsg(pa) : "ok");
			ok(aa.ok == 1000 && !aa.errors, "A: %" PRIu64 " acknowledged since the "
			   "takeover", aa.ok);
		}
		tw_primary_close(nb);
	}
	/* Log cleaning after tw_primary_finish: the log is no longer served, so the calling
	 * thread sends its FreeSegments while the context's thread goes on serving A. */
	{
		struct tw_primary *pd = NULL;
		struct tlog_acks ad = { 0 };
		uint32_t last;

		log_cfg(&cfg, 403);
		rc = tw_primary_open_on(ctx, &cfg, &pd, err, sizeof(err));
		is_int(rc, 0, "log D open on the context (%s)", rc ? err : "ok");
		if (pd) {
			TAP_REQUIRE(append_range(pd, 403, 0, 1500, &ad) == 0, "append D");
			is_int(tw_primary_finish(pd), 0, "D finished");
			last = (uint32_t)(tw_primary_acked_lsn(pd) >> 32);
			ok(last >= 2, "D filled %u segments", last + 1);
			if (pa)
				TAP_REQUIRE(append_range(pa, 400, 5500, 5600, &aa) == 0, "append A");
			rc = tw_primary_trim(pd, last);
			is_int(rc, (int)last, "tw_primary_trim after the finish released %u segments",
			       last);
			if (pa)
				is_int(tw_primary_flush(pa), 0, "A went on meanwhile");
			is_int(tw_primary_close(pd), 0, "D closed");
		}
	}
	tw_primary_close(pb);
	pb = NULL;
	is_int(tw_primary_close(pa), 0, "A closed");
	pa = NULL;
	tw_ctx_get_stats(ctx, &cs);
	is_int((int)cs.logs, 0, "no log left on the context");
	is_int(tw_ctx_close(ctx), 0, "context closed");

	/* Recovery: every acknowledged entry of each log, in order. */
	{
		const char *alive[4];
		unsigned n = 0;

		for (unsigned i = 0; i < 4; i++)
			if (i != vi)
				alive[n++] = addrs[i];
		alive[n++] = b[4].addr;
		/* A's prefix before the takeover was freed (log cleaning): it starts at 4500. */
		rc = recover_log(alive, n, 400, 4500, &k);
		ok(rc == 0 && k.bad == 0 && k.next == 5600, "recovery of A after its cleaning: "
		   "entries 4500..%" PRIu64 " (%" PRIu64 " bad)", k.next, k.bad);
		rc = recover_log(alive, n, 401, 0, &k);
		ok(rc == 0 && k.bad == 0 && k.next == 5000, "recovery of B: %" PRIu64 " entries "
		   "(%" PRIu64 " bad)", k.next, k.bad);

		/* The private path, next to it, unchanged. */
		log_cfg(&cfg, 402);
		cfg.mode = TW_PRIMARY_SYNC; /* private */
		tlog_transport(&tc, "mem", alive, n);
		rc = tw_primary_open(&tc, &cfg, &pc, err, sizeof(err));
		is_int(rc, 0, "a private log opens (%s)", rc ? err : "ok");
		if (pc) {
			ok(pc->ctx && !pc->ctx->shared && pc->ctx->owner == pc,
			   "it has a private context of its own");
			TAP_REQUIRE(append_range(pc, 402, 0, 1000, &ac) == 0, "append C");
			is_int(tw_primary_flush(pc), 0, "private log: 1000 appends");
			is_int(tw_primary_close(pc), 0, "private log closed");
			rc = recover_log(alive, n, 402, 0, &k);
			ok(rc == 0 && k.next == 1000 && k.bad == 0, "recovery of the private log: %"
			   PRIu64 " entries", k.next);
		}
	}

	tbackups_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
