/*
 * primary/primary_rerep.c — backup failure on the primary (Tailwind §3.4.3): detection hooks,
 * suspension, replacement of a lost replica of the open segment, replica versions, and the
 * background re-replication of closed segments. See docs/failover.md.
 *
 * State machine of the open segment (driver thread only; p->fo_* fields):
 *
 *   HEALTHY --tw__pfo_lost(b), b a replica of the open segment--> SUSPENDED (fo_pending)
 *     nothing new is sealed or posted; appends are accepted into the log and wait; writes in
 *     flight to the survivors complete; writes to the lost backup complete with errors and
 *     mark their slots `repair` (never acknowledged while repair is set).
 *   SUSPENDED --tw__pfo_run--> REPLACING
 *     close the lost backup's channel (its pending writes complete now, none lands later);
 *     choose a spare (usable, not already a replica); OpenSegment with the segment's current
 *     replica version v; one-sided write of the sealed prefix [0, sealed end) from the
 *     primary's buffer; SetReplicaVersion(v + 1) on every replica (the spare included).
 *   REPLACING --all replicas healthy--> HEALTHY: clear `repair`, acknowledge, seal again.
 *   REPLACING --another replica lost meanwhile--> REPLACING (next lost index, version v + 2)
 *   REPLACING --no spare / fenced--> FAILED (-TW_ENOBACKUP naming every backup / -TW_EFENCED).
 *
 * Why v and then v + 1 (not the spare opened at v + 1 directly): until the copy completed the
 * spare holds only part of the prefix. Were it already at v + 1, a primary crash in that window
 * would leave recovery choosing the spare's partial copy (highest version wins) over the
 * survivors' complete ones. Bumped only after the copy, every copy at the highest version holds
 * every acknowledged byte; the lost backup's copy stays at v and is ignored.
 *
 * Closed segments with a replica on a lost backup: one at a time between driver rounds, at most
 * cfg.rerep_rate bytes/s on average: open on a spare (version v), copy [0, end), CloseSegment
 * with the final offset and checksum, SetReplicaVersion(v + 1) on the replicas. Each step is a
 * blocking call on the driver thread (one segment's copy delays appends by that long).
 *
 * Threading: every function runs on the driver thread with the lock not held; the segment
 * array is read under the lock (app threads release segments in async mode).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rpc.h"
#include "primary/primary_int.h"

#define COPY_CHUNK (1u << 20) /* bytes per one-sided write of a copy */

static size_t inflight_from(struct tw_primary *p, const struct pseg *s, size_t len);

static bool holds(const struct pseg *s, unsigned b)
{
	for (unsigned i = 0; i < s->nrep; i++)
		if (s->rep[i] == b)
			return true;
	return false;
}

/* Whether backup `bi` can take replica index `i` of `s`: a spare, or the lost replica's own
 * backup once the context connected to it again (the log's buffer there is reopened: the backup
 * hands the owner its same bytes, docs/primary.md "Many logs: the context"). */
static bool spare_ok(struct tw_primary *p, const struct pseg *s, unsigned i, unsigned bi)
{
	struct pbackup *b = &p->bk[bi];
	struct cbackup *c = b->c;

	if (bi == s->rep[i]) /* not a restarted process: it would hand back an empty buffer */
		return pb_back(b) && c->node_gen <= b->gen &&
		       (!c->peer.buffer_size || c->peer.buffer_size >= s->cap);
	return c->peer.ch && c->peer.rpc && !c->peer.lost && !tw__chan_is_lost(c->peer.ch) &&
	       !b->unregistered && !holds(s, bi) && (!b->lost || pb_back(b)) &&
	       (!c->peer.buffer_size || c->peer.buffer_size >= s->cap) &&
	       tw__pzone_ok(p, s, bi, NULL, 0);
}

void tw__pfo_lost(struct tw_primary *p, unsigned bi, const char *why)
{
	struct pbackup *b = &p->bk[bi];

	if (p->ctx->resetting)
		return; /* the context's teardown of every channel (tw__ctx_reset), not a loss */
	b->lost = true;
	if (!b->fo_seen) {
		b->fo_seen = true;
		b->lost_ns = tw_now_ns();
		if (why && why != b->why)
			snprintf(b->why, sizeof(b->why), "%s", why);
		PSTAT_ADD(p, backups_lost, 1);
		p->rr_dirty = true;
		tw_log_warn("primary log %llu: backup %s lost: %s", (unsigned long long)p->cfg.log_id,
			    b->addr, why ? why : "?");
	}
	if (!p->fo_pending && !p->err && tw__primary_is_replica(p, bi) && p->cur && !p->cur->closed) {
		PST(p->fo_pending, true); /* the driver stops sealing */
		p->fo_first = bi;
		p->fo_since_ns = b->lost_ns ? b->lost_ns : tw_now_ns();
		tw_log_warn("primary log %llu: appends suspended: replacing backup %s of segment %u",
			    (unsigned long long)p->cfg.log_id, b->addr, p->cur->id);
	}
}

/* Message for -TW_ENOBACKUP: every backup and why it cannot be used. */
static void no_spare_fail(struct tw_primary *p, const struct pseg *s, unsigned lost)
{
	char msg[sizeof(p->errmsg)];
	size_t n = sizeof(msg);
	unsigned up = 0;
	int k;

	for (unsigned i = 0; i < s->nrep; i++)
		if (i != lost && !p->bk[s->rep[i]].lost)
			up++;
	k = snprintf(msg, n, "backup %s lost (%s); no spare for segment %u: need %u backups, only "
		     "%u usable:", p->bk[s->rep[lost]].addr, p->bk[s->rep[lost]].why, s->id, p->r, up);
	for (size_t i = 0; i < p->nbk && k > 0 && (size_t)k < n; i++) {
		const struct pbackup *b = &p->bk[i];

		bool rep = holds(s, (unsigned)i) && !b->lost;

		k += snprintf(msg + k, n - (size_t)k, " %s (%s%s)%s", b->addr,
			      rep ? "" : b->lost ? "lost: " : "",
			      rep ? "replica" : b->why[0] ? b->why : "not usable",
			      i + 1 < p->nbk ? ";" : "");
	}
	tw__primary_fail(p, -TW_ENOBACKUP, "%s", msg);
}

unsigned tw__pfo_revive(struct tw_primary *p, const struct pseg *s)
{
	size_t n = p->ctx->nbk;
	bool *want = calloc(n ? n : 1, sizeof(bool));
	unsigned back;

	if (!want)
		return 0;
	/* A replica's own backup back with the same node only lost its channel; it is taken back
	 * by the failover the usual way (the background probes), not hurried here. */
	for (size_t k = 0; k < p->nbk && k < n; k++)
		want[k] = !holds(s, (unsigned)k) && !tw__primary_is_replica(p, (unsigned)k);
	back = tw__ctx_revive_now(p->ctx, want, TW__REVIVE_WAIT_MS);
	free(want);
	return back;
}

/*
 * Open segment `s` (at its current version) on a spare to take replica index `i`. On success
 * *bi_out and *rk_out. Returns 0, -TW_ENOBACKUP (no spare took it, after retrying refusals for
 * open_retry_ms), -TW_EFENCED (p->errmsg not set; *why_out names the backup).
 */
static int open_spare(struct tw_primary *p, struct pseg *s, unsigned i, unsigned *bi_out,
		      struct tw_rkey *rk_out, char *why_out, size_t why_len)
{
	uint64_t deadline = tw_now_ns() + (uint64_t)p->cfg.open_retry_ms * 1000000u;
	struct tw_rpc_seg_meta m = {
		.log_id = p->cfg.log_id, .segment_id = s->id, .checksum = 0, .offset = 0,
	};
	unsigned delay = 5;
	bool revived = false;

	tw__pcoord_refresh(p); /* spares from the live registry (a no-op without a coordinator) */
	for (;;) {
		bool refused = false;

		/* Shared context: lost channels are connected again before the choice. */
		for (size_t k = 0; p->ctx->shared && k < p->nbk; k++)
			if (p->bk[k].c->peer.lost && !p->bk[k].c->dead)
				tw__ctx_heal(p->ctx, p->bk[k].c);
		for (size_t k = 0; k < p->nbk; k++) {
			/* k = 0: the lost replica's own backup, if it is back; then the others. */
			unsigned bi = (unsigned)((s->rep[i] + k) % p->nbk);
			struct pbackup *b = &p->bk[bi];
			struct tw_rkey rk;
			const char *msg;
			int rc;

			if (!spare_ok(p, s, i, bi) || tw__pcoord_note(p, bi) < 0)
				continue;
			PSTAT_ADD(p, rpcs, 1);
			PSTAT_ADD(p, rpc_open, 1);
			rc = tw__rpc_open_segment_seeded(prpc(p, b), p->cfg.epoch, &m, s->version,
							s->cap, s->seed, &rk);
			if (rc == 0 && rk.len >= s->cap) {
				*bi_out = bi;
				*rk_out = rk;
				return 0;
			}
			if (rc == 0) {
				snprintf(b->why, sizeof(b->why), "granted %llu bytes, need %zu",
					 (unsigned long long)rk.len, s->cap);
				b->lost = true; /* misbehaving: never choose it again */
				continue;
			}
			msg = b->c->peer.rpc ? tw__rpc_client_errmsg(b->c->peer.rpc) : "";
			snprintf(b->why, sizeof(b->why), "open segment %u: %s%s%s", s->id,
				 rc == -TW_EREFUSED ? "refused (RESOURCE_EXHAUSTED)" : tw_strerror(rc),
				 msg[0] ? ": " : "", msg);
			if (rc == -TW_EFENCED) {
				snprintf(why_out, why_len, "backup %s: %s", b->addr, b->why);
				return rc;
			}
			if (rc == -TW_EREFUSED) {
				refused = true;
				PSTAT_ADD(p, open_refused, 1);
				continue;
			}
			tw_log_warn("primary: spare %s: %s", b->addr, b->why);
			if (rc == -ETIMEDOUT || rc == -TW_EPEERLOST || rc == -TW_EMALFORMED)
				tw__pfo_lost(p, bi, b->why);
		}
		/* None took it: once, the backups that are down are probed now, not at their
		 * back-off's turn (one back from a pause a moment ago is a spare), and we look
		 * again if any answered (ctx_revive.c, tw__ctx_revive_now). */
		if (!refused && !revived) {
			revived = true;
			if (tw__pfo_revive(p, s))
				continue;
		}
		if (!refused || tw_now_ns() + (uint64_t)delay * 1000000u > deadline)
			return -TW_ENOBACKUP;
		/* Back-off that keeps the fabric progressing (peers need our polls). */
		{
			uint64_t end = tw_now_ns() + (uint64_t)delay * 1000000u;
			uint64_t now;

			while ((now = tw_now_ns()) < end)
				tw__fab_progress(p->fab, (int)((end - now + 999999u) / 1000000u));
			(void)0;
		}
		delay = delay * 2 > 200 ? 200 : delay * 2;
	}
}

struct copy_op {
	struct tw_op op; /* first */
	int status;
	bool done;
};

static void copy_done(struct tw_op *op, int status)
{
	struct copy_op *c = (struct copy_op *)op;

	c->status = status;
	c->done = true;
}

/* Write [from, len) of `s` to replica index `i` (blocking, chunked). 0 or a negative code. */
static int pfo_copy(struct tw_primary *p, struct pseg *s, unsigned i, size_t from, size_t len)
{
	struct pbackup *b = &p->bk[s->rep[i]];
	size_t written;
	bool ok;

	tw__primary_lock(p); /* application threads append (move w.pos) under it */
	ok = tw__pseg_sent_ok(s, from, len - from);
	written = s->w.pos;
	tw__primary_unlock(p);
	if (!ok) {
		tw_log_error("primary log %llu: segment %u: a copy of [%zu, %zu) would send bytes "
			     "this segment never wrote (written: %zu); refused",
			     (unsigned long long)p->cfg.log_id, s->id, from, len, written);
		return -EFAULT;
	}
	for (size_t off = from; off < len; off += COPY_CHUNK) {
		size_t n = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;
		struct copy_op c;
		int rc;

		if (!b->c->peer.ch)
			return -TW_EPEERLOST;
		memset(&c, 0, sizeof(c));
		c.op.cb = copy_done;
		c.op.arg = &c;
		c.op.flags = TW_OP_UNCHECKED; /* cut at COPY_CHUNK, not at sealed writes */
		rc = tw__chan_write(b->c->peer.ch, &c.op, s->buf + off, n, s->mr, &s->rk[i], off);
		if (rc < 0)
			return rc;
		while (!c.done)
			tw__fab_progress(p->fab, p->ctx->cfg.busy_poll ? 0 : 100);
		if (c.status < 0)
			return c.status;
	}
	return 0;
}

/* SetReplicaVersion(version) on every healthy replica of `s`. A replica that fails is marked
 * lost. Returns 0, or -TW_EFENCED (p failed). */
static int bump_version(struct tw_primary *p, struct pseg *s, uint64_t version)
{
	for (unsigned j = 0; j < s->nrep; j++) {
		struct pbackup *b = &p->bk[s->rep[j]];
		int rc;

		if (b->lost || !b->c->peer.rpc)
			continue;
		PSTAT_ADD(p, rpcs, 1);
		PSTAT_ADD(p, rpc_other, 1);
		rc = tw__rpc_set_replica_version(prpc(p, b), p->cfg.epoch, p->cfg.log_id, s->id,
						version);
		if (rc == -TW_EFENCED) {
			tw__primary_fail(p, rc, "log %llu epoch %llu fenced by backup %s (set replica "
				     "version of segment %u)", (unsigned long long)p->cfg.log_id,
				     (unsigned long long)p->cfg.epoch, b->addr, s->id);
			return rc;
		}
		if (rc < 0) {
			char why[200];

			snprintf(why, sizeof(why), "set replica version %" PRIu64 " of segment %u: %s",
				 version, s->id, tw_strerror(rc));
			tw__pfo_lost(p, s->rep[j], why);
		}
	}
	s->version = version;
	return 0;
}

/*
 * Replace replica index `i` of `s` (its backup is lost) by a spare holding [0, len), then raise
 * the version on all replicas. `closed`: also send CloseSegment (len, checksum) to the spare.
 * Returns 0 (done, or the spare was lost meanwhile: the caller looks again), -TW_ENOBACKUP or
 * -TW_EFENCED (p failed only for the open segment: `fail_open`).
 */
static int replace(struct tw_primary *p, struct pseg *s, unsigned i, size_t len, bool closed)
{
	unsigned lost = s->rep[i], bi;
	struct tw_rkey rk;
	char why[480];
	size_t from = 0;
	int rc;

	why[0] = '\0';
	rc = open_spare(p, s, i, &bi, &rk, why, sizeof(why));
	if (rc == -TW_EFENCED) {
		tw__primary_fail(p, rc, "log %llu epoch %llu fenced while replacing backup %s: %s",
			     (unsigned long long)p->cfg.log_id, (unsigned long long)p->cfg.epoch,
			     p->bk[lost].addr, why);
		return rc;
	}
	if (rc < 0)
		return rc;
	s->rep[i] = bi;
	s->rk[i] = rk;
	if (bi == lost && !closed) {
		/* Our own buffer again (a reconnect): it holds every write that completed there;
		 * only the writes in flight at the loss may be missing. */
		tw__primary_lock(p);
		from = inflight_from(p, s, len);
		tw__primary_unlock(p);
		tw_log_info("primary log %llu: segment %u: reopened on %s (connected again; "
			    "rewriting %zu bytes)", (unsigned long long)p->cfg.log_id, s->id,
			    p->bk[bi].addr, len - from);
	} else {
		tw_log_info("primary log %llu: segment %u: backup %s replaces %s (copying %zu "
			    "bytes)", (unsigned long long)p->cfg.log_id, s->id, p->bk[bi].addr,
			    p->bk[lost].addr, len);
	}
	p->bk[bi].lost = false;
	p->bk[bi].fo_seen = false;
	p->bk[bi].gen = p->bk[bi].c->peer.gen;
	rc = pfo_copy(p, s, i, from, len);
	if (rc < 0) {
		char w[200];

		snprintf(w, sizeof(w), "copy of segment %u: %s", s->id, tw_strerror(rc));
		tw__pfo_lost(p, bi, w);
		return 0;
	}
	PSTAT_ADD(p, rerep_bytes, len - from);
	if (closed) {
		struct tw_rpc_seg_meta m = {
			.log_id = p->cfg.log_id, .segment_id = s->id,
			.checksum = s->w.last_checksum, .offset = len,
		};

		PSTAT_ADD(p, rpcs, 1);
		PSTAT_ADD(p, rpc_close, 1);
		rc = tw__rpc_close_segment(prpc(p, &p->bk[bi]), p->cfg.epoch, &m, s->version, NULL);
		if (rc < 0) {
			char w[200];

			snprintf(w, sizeof(w), "close of re-replicated segment %u: %s", s->id,
				 tw_strerror(rc));
			tw__pfo_lost(p, bi, w);
			return 0;
		}
	}
	rc = bump_version(p, s, s->version + 1);
	if (rc < 0)
		return rc;
	PSTAT_ADD(p, rereplications, 1);
	return 0;
}

/* Index of the first replica of `s` on a lost backup, or UINT_MAX. */
static unsigned first_lost(struct tw_primary *p, const struct pseg *s)
{
	for (unsigned i = 0; i < s->nrep; i++) {
		struct pbackup *b = &p->bk[s->rep[i]];

		if (b->lost || !b->c->peer.ch || tw__chan_is_lost(b->c->peer.ch))
			return i;
	}
	return UINT_MAX;
}

/* Lowest offset of a write in flight into `s` (len when none). */
static size_t inflight_from(struct tw_primary *p, const struct pseg *s, size_t len)
{
	size_t from = len;

	for (uint64_t k = PLD(p->slot_tail); k < PLD(p->slot_head); k++) {
		const struct pslot *sl = &p->slots[k % p->nslots];

		if (sl->seg == s && sl->off < from)
			from = sl->off;
	}
	return from;
}

void tw__pfo_run(struct tw_primary *p)
{
	struct pseg *s = p->cur;
	bool recopy = false;
	size_t from = 0;
	uint64_t d;

	if (!p->fo_pending || p->fo_running)
		return;
	p->fo_running = true;
	/* Appenders seal under the lock (tw__primary_seal_appender) and look at fo_pending
	 * there: one that sealed before it was set is done once we have held the lock, and none
	 * seals after until the failover ends. The open segment's writer is ours from here. */
	tw__primary_lock(p);
	tw__primary_unlock(p);
	/* A fabric whose peers' losses block each other (shm in libfabric 1.17: the sender
	 * consumes the responses of its writes in order, so one write to a peer that never
	 * answers blocks the completion of every later write of the endpoint, to every peer;
	 * tw__fab_loss_blocks_others): the context closes every channel (every write in flight of
	 * every log completes with an error, slots marked repair), rebuilds its endpoint
	 * (tw__fab_reset: same handle, the registrations stay valid) and connects the healthy
	 * backups again; every log with writes in flight then writes them again (fo_recopy; same
	 * bytes: harmless if an old write still lands). Once per loss, not once per log: a log
	 * whose suspension began before the last reset was covered by it. */
	if (s && !s->closed && tw__fab_loss_blocks_others(p->fab) &&
	    (p->ctx->loss_gen != p->ctx->reset_gen || p->fo_since_ns > p->ctx->reset_ns))
		(void)tw__ctx_reset(p->ctx, (int)p->fo_first);
	recopy = p->fo_recopy && !p->err;
	if (recopy) {
		tw__primary_lock(p);
		from = inflight_from(p, s, s->w.write_start);
		tw__primary_unlock(p);
	}
again:
	while (!p->err && s && !s->closed) {
		unsigned i;
		size_t len;
		int rc;

		/* Close every lost replica's channel: its pending writes complete now (marking
		 * their slots for repair), and nothing of ours reaches it later. */
		for (unsigned j = 0; j < s->nrep; j++) {
			struct pbackup *b = &p->bk[s->rep[j]];

			if (b->c->peer.ch && tw__chan_is_lost(b->c->peer.ch))
				tw__pfo_lost(p, s->rep[j], "connection lost");
			if (b->lost && (b->c->peer.ch || b->c->peer.rpc))
				tw__pctl_drop(p, b);
		}
		i = first_lost(p, s);
		if (i == UINT_MAX)
			break;
		tw__primary_lock(p);
		len = s->w.write_start; /* sealed prefix: nothing is sealed while suspended */
		tw__primary_unlock(p);
		rc = replace(p, s, i, len, false);
		if (rc == -TW_ENOBACKUP)
			no_spare_fail(p, s, i);
	}
	if (recopy && !p->err && s && !s->closed) {
		/* After a reset: the writes that were in flight, again, to every replica. */
		size_t len = s->w.write_start;
		bool again = false;

		for (unsigned j = 0; j < s->nrep; j++) {
			int rc = pfo_copy(p, s, j, from, len);

			if (rc < 0) {
				char w[160];

				snprintf(w, sizeof(w), "rewrite after the reset: %s", tw_strerror(rc));
				tw__pfo_lost(p, s->rep[j], w);
				again = true;
			} else {
				PSTAT_ADD(p, rerep_bytes, len - from);
			}
		}
		if (again)
			goto again;
		recopy = false;
	}
	p->fo_recopy = false;
	PST(p->fo_pending, false);
	p->fo_running = false;
	/* Appenders stopped by back-pressure while suspended may seal again (they counted
	 * themselves in n_sleep before they looked at fo_pending: see PLD). */
	if (PLD(p->n_sleep)) {
		tw__primary_lock(p);
		tw__primary_room_wake_one(p);
		tw__primary_unlock(p);
	}
	if (p->err)
		return;
	/* Every slot in flight is now on a full set of replicas (the copy covered the sealed
	 * prefix, writes sealed and not yet posted included): its acknowledgement
	 * waits only for the survivors' completions. */
	for (uint64_t k = PLD(p->slot_tail); k < p->slot_posted; k++)
		p->slots[k % p->nslots].repair = false;
	d = tw_now_ns() - p->fo_since_ns;
	PSTAT_ADD(p, suspended_ns, d);
	__atomic_store_n(&p->st.suspended_last_ns, d, __ATOMIC_RELAXED);
	PSTAT_ADD(p, failovers, 1);
	tw_log_warn("primary log %llu: appends resumed after %.1f ms (segment %u, replica version "
		    "%" PRIu64 ")", (unsigned long long)p->cfg.log_id, (double)d / 1e6,
		    s ? s->id : 0, s ? s->version : 0);
}

void tw__pfo_background(struct tw_primary *p, bool all)
{
	uint64_t pending = 0;
	size_t from, to;
	bool more = false;

	if (!p->rr_dirty || p->fo_running || p->fo_pending || p->err)
		return;
	if (!all && p->cfg.rerep_rate && tw_now_ns() < p->rr_credit_ns)
		return;
	p->fo_running = true;
	tw__primary_lock(p);
	from = p->released;
	to = p->nsegs;
	tw__primary_unlock(p);
	for (size_t id = from; id < to && !p->err && !more; id++) {
		struct pseg *s;
		unsigned i;

		tw__primary_lock(p);
		s = id >= p->released && id < p->nsegs ? p->segs[id] : NULL;
		tw__primary_unlock(p);
		if (!s || !s->closed)
			continue;
		while ((i = first_lost(p, s)) != UINT_MAX && !p->err) {
			int rc;

			if (p->bk[s->rep[i]].c->peer.ch || p->bk[s->rep[i]].c->peer.rpc)
				tw__pctl_drop(p, &p->bk[s->rep[i]]);
			rc = replace(p, s, i, s->w.pos, true);
			if (rc == -TW_ENOBACKUP) {
				tw_log_warn("primary log %llu: closed segment %u is short of a replica: "
					    "no spare for the one on %s", (unsigned long long)p->cfg.log_id,
					    s->id, p->bk[s->rep[i]].addr);
				pending++;
				break;
			}
			if (rc < 0)
				break;
			if (p->cfg.rerep_rate)
				p->rr_credit_ns = tw_now_ns() +
						  (uint64_t)s->w.pos * 1000000000u / p->cfg.rerep_rate;
			if (!all) {
				more = true; /* one segment per round: the rest later */
				break;
			}
		}
	}
	if (!more) {
		/* Scanned everything: done, or short of spares until the next loss. */
		__atomic_store_n(&p->st.rerep_pending, pending, __ATOMIC_RELAXED);
		p->rr_dirty = false;
	}
	p->fo_running = false;
}

/* After the context reset the fabric (ctx.c, tw__ctx_reset; struct tw__log_ops.reset): the
 * backups connected again (again[i]) whose loss this log saw since the reset before (or since
 * its suspension) are tried again; those not connected are lost; the writes in flight were
 * dropped with the channels, so the open segment is suspended and they are rewritten
 * (fo_recopy). Driver thread. */
void tw__pfo_after_reset(struct tw_primary *p, const bool *again, int first, uint64_t prev_ns,
			 uint64_t now)
{
	for (size_t i = 0; i < p->nbk; i++) {
		struct pbackup *b = &p->bk[i];
		uint64_t since = p->fo_pending ? p->fo_since_ns : prev_ns;

		if (again[i] && b->lost && b->fo_seen && b->lost_ns >= since) {
			tw_log_info("primary log %llu: trying %s again (%s)",
				    (unsigned long long)p->cfg.log_id, b->addr, b->why);
			b->lost = false;
			b->fo_seen = false;
			b->why[0] = '\0';
			PSTAT_ADD(p, backups_lost, (uint64_t)-1);
		}
		if (again[i] && !b->lost)
			b->gen = b->c->peer.gen;
	}
	for (size_t i = 0; i < p->nbk; i++) {
		const char *why = p->bk[i].c->peer.why;

		if (!again[i] && !p->bk[i].lost)
			tw__pfo_lost(p, (unsigned)i, why[0] ? why : "not connected after a reset");
	}
	/* Every write in flight was dropped with the channels: rewrite them. */
	if (p->cur && !p->cur->closed && PLD(p->slot_tail) < PLD(p->slot_head)) {
		p->fo_recopy = true;
		if (!p->fo_pending) {
			PST(p->fo_pending, true);
			p->fo_first = first >= 0 ? (unsigned)first : 0;
			p->fo_since_ns = now;
		}
	}
}
