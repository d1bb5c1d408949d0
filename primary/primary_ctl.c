/*
 * primary/primary_ctl.c — the primary's control plane: the backups' state after the context's
 * connect (ctx.c), the taken-over probe (a throw-away tw_peer per backup), choosing r backups for
 * a segment (refusals retried elsewhere and with back-off), the open and close RPCs, loss of a
 * backup. Runs on the driver thread, lock not held.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/rpc.h"
#include "primary/primary_int.h"

void tw__pctl_drop(struct tw_primary *p, struct pbackup *b)
{
	/* A private context's channel is this log's alone: close it (its pending writes
	 * complete now, nothing of ours reaches the backup later). A shared one serves the
	 * other logs too: closed (and connected again) only when the channel itself failed. */
	if (!p->ctx->shared)
		tw__ctx_drop(b->c);
	else if (b->c->peer.lost || (b->c->peer.ch && tw__chan_is_lost(b->c->peer.ch)))
		tw__ctx_heal(p->ctx, b->c);
}

int tw__pctl_check_backups(struct tw_primary *p)
{
	size_t up = 0;

	for (size_t i = 0; i < p->nbk; i++) {
		struct pbackup *b = &p->bk[i];
		struct cbackup *c = b->c;

		if (!c->peer.ch || !c->peer.rpc || c->peer.lost) {
			b->lost = true;
			snprintf(b->why, sizeof(b->why), "%s",
				 c->peer.why[0] ? c->peer.why : "not connected");
			continue;
		}
		b->gen = c->peer.gen;
		if (c->peer.buffer_size && c->peer.buffer_size < p->cfg.segment_size) {
			snprintf(b->why, sizeof(b->why), "buffer size %llu < segment size %zu",
				 (unsigned long long)c->peer.buffer_size, p->cfg.segment_size);
			tw_log_warn("primary: backup %s: %s", b->addr, b->why);
			continue; /* stays connected, never chosen */
		}
		up++;
	}
	if (up < p->r) {
		char *m = p->errmsg;
		size_t n = sizeof(p->errmsg);
		int k;

		k = snprintf(m, n, "need %u backups, only %zu usable:", p->r, up);
		for (size_t i = 0; i < p->nbk && k > 0 && (size_t)k < n; i++)
			k += snprintf(m + k, n - (size_t)k, " %s (%s)%s", p->bk[i].addr,
				      p->bk[i].why[0] ? p->bk[i].why : "ok",
				      i + 1 < p->nbk ? ";" : "");
		return -TW_ENOBACKUP;
	}
	return 0;
}

static bool usable(struct tw_primary *p, struct pbackup *b)
{
	struct cbackup *c = b->c;

	/* A backup this log lost is used again once the context connected to it again, for
	 * new segments only (a replica of the open segment there goes through the failover). */
	return c->peer.ch && c->peer.rpc && !c->peer.lost && !tw__chan_is_lost(c->peer.ch) &&
	       (!c->peer.buffer_size || c->peer.buffer_size >= p->cfg.segment_size) &&
	       (!b->lost || (pb_back(b) && !tw__primary_is_replica(p, b->idx)));
}

/* `b` holds a replica of ours again: this log uses its current connection. */
static void reattach(struct pbackup *b)
{
	if (b->lost)
		tw_log_info("primary log %llu: backup %s usable again (connected again)",
			    (unsigned long long)b->p->cfg.log_id, b->addr);
	b->lost = false;
	b->fo_seen = false;
	b->gen = b->c->peer.gen;
}

static bool chosen(const struct pseg *s, unsigned b)
{
	for (unsigned i = 0; i < s->nrep; i++)
		if (s->rep[i] == b)
			return true;
	return false;
}

/* Wait `ms` while keeping the fabric progressing (never a bare sleep: peers need our polls). */
static void backoff_wait(struct tw_primary *p, unsigned ms)
{
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;
	uint64_t now;

	while ((now = tw_now_ns()) < end) {
		int left = (int)((end - now + 999999u) / 1000000u);

		tw__fab_progress(p->fab, left);
	}
}

/* Control RPCs (struct pcall): several are sent at once and waited for together. */
static void call_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct pcall *c = arg;
	const char *m = NULL;

	c->status = status;
	if (reply && tw__rpc_reply_status(reply, &m) >= 0 && m && m[0])
		snprintf(c->msg, sizeof(c->msg), "%s", m);
	else if (status < 0 && c->b->c->peer.rpc && tw__rpc_client_errmsg(c->b->c->peer.rpc)[0])
		snprintf(c->msg, sizeof(c->msg), "%s", tw__rpc_client_errmsg(c->b->c->peer.rpc));
	if (status == 0 && reply && reply->body_case == TAILWIND__ENVELOPE__BODY_OPEN_SEGMENT_REPLY &&
	    reply->open_segment_reply && reply->open_segment_reply->rkey) {
		tw__rpc_rkey_from_pb(reply->open_segment_reply->rkey, &c->rk);
		c->seed = reply->open_segment_reply->chain_seed;
	}
	c->done = true;
}

static void call_start(struct tw_primary *p, struct pcall *c, struct pbackup *b,
		       Tailwind__Envelope *env)
{
	int rc;

	memset(c, 0, sizeof(*c));
	c->b = b;
	c->gen = b->c->peer.gen;
	PSTAT_ADD(p, rpcs, 1);
	rc = prpc(p, b) ? tw__rpc_call(b->c->peer.rpc, env, call_done, c) : -TW_EPEERLOST;
	if (rc < 0) { /* the callback will not run */
		c->status = rc;
		c->done = true;
		snprintf(c->msg, sizeof(c->msg), "cannot send: %s", tw_strerror(rc));
	}
}

/* Progress the fabric until every call completed (each has the RPC timeout). */
static void call_wait(struct tw_primary *p, struct pcall *c, unsigned n)
{
	for (;;) {
		bool all = true;

		for (unsigned i = 0; i < n; i++)
			if (!c[i].done)
				all = false;
		if (all)
			return;
		tw__fab_progress(p->fab, p->ctx->cfg.busy_poll ? 0 : 10);
		for (unsigned i = 0; i < n; i++)
			if (!c[i].done && c[i].b->c->peer.rpc)
				tw__rpc_client_expire(c[i].b->c->peer.rpc);
	}
}

/* Account for the answer to one open: a replica gained, or why not. Returns -TW_EFENCED
 * (fatal, p->errmsg set) or 0. */
static int open_result(struct tw_primary *p, struct pseg *seg, struct pcall *c, bool *refused)
{
	struct pbackup *b = c->b;
	int rc = c->status;

	if (rc == 0 && c->rk.len < seg->cap) {
		snprintf(b->why, sizeof(b->why), "granted %llu bytes, need %zu",
			 (unsigned long long)c->rk.len, seg->cap);
		b->lost = true; /* misbehaving: never choose it again */
		return 0;
	}
	if (rc == 0 && c->seed != seg->seed) {
		/* A 1.1 backup ignores the seed: it would scan the replica unseeded and find it
		 * corrupt at the close. Its buffer stays open there until a fence or delete. */
		snprintf(b->why, sizeof(b->why), "answered chain seed 0x%08x to 0x%08x: it does "
			 "not support chain seeds (protocol 1.%d, 1.2 needed); upgrade twd there",
			 c->seed, seg->seed,
			 b->c->peer.rpc ? tw__rpc_client_peer_minor(b->c->peer.rpc) : 0);
		b->lost = true; /* never choose it again */
		return 0;
	}
	if (rc == 0) {
		/* A backup this log lost while the open was in flight (a pre-open answered after a
		 * write there failed) stays lost: the caller drops the replica (preopen_finish).
		 * Only a new connection (pb_back) makes it ours again. */
		if (!b->lost || pb_back(b))
			reattach(b);
		seg->rep[seg->nrep] = b->idx;
		seg->rk[seg->nrep] = c->rk;
		seg->nrep++;
		b->why[0] = '\0';
		return 0;
	}
	snprintf(b->why, sizeof(b->why), "%s%s%s",
		 rc == -TW_EREFUSED ? "refused (RESOURCE_EXHAUSTED)" : tw_strerror(rc),
		 c->msg[0] ? ": " : "", c->msg);
	if (rc == -TW_EREFUSED) {
		*refused = true;
		PSTAT_ADD(p, open_refused, 1);
		tw_log_info("primary: backup %s refused segment %u, trying another", b->addr, seg->id);
		return 0;
	}
	if (rc == -TW_EFENCED) {
		snprintf(p->errmsg, sizeof(p->errmsg), "log %llu epoch %llu fenced by backup %s: %s",
			 (unsigned long long)p->cfg.log_id, (unsigned long long)p->cfg.epoch, b->addr,
			 b->why);
		return rc;
	}
	if (rc == -EEXIST && p->creating) {
		snprintf(p->errmsg, sizeof(p->errmsg), "log %llu already exists on backup %s: %s",
			 (unsigned long long)p->cfg.log_id, b->addr, b->why);
		return -TW_ELOGEXISTS;
	}
	tw_log_warn("primary: backup %s: open segment %u: %s", b->addr, seg->id, b->why);
	/* A loss like any other (counted, its closed segments re-replicated): a backup stopped
	 * while it held no replica of the open segment is noticed only here, by the RPC timeout,
	 * as no write of ours was in flight there for the fabric's op deadline to fail. */
	if (rc == -ETIMEDOUT || rc == -TW_EPEERLOST || rc == -TW_EMALFORMED)
		tw__pfo_lost(p, b->idx, b->why);
	return 0;
}

/* A shared context's channels lost meanwhile (for every log: a fence of another log, an
 * operation timeout behind a deep queue) are connected again before a choice of backups, not
 * left out of it. */
static void heal_shared(struct tw_primary *p)
{
	for (size_t k = 0; p->ctx->shared && k < p->nbk; k++)
		if (p->bk[k].c->peer.lost && !p->bk[k].c->dead)
			tw__ctx_heal(p->ctx, p->bk[k].c);
}

/* Open `seg` on backups until it has r replicas (it may already have some). */
int tw__pctl_open_segment(struct tw_primary *p, struct pseg *seg)
{
	uint64_t deadline = tw_now_ns() + (uint64_t)p->cfg.open_retry_ms * 1000000u;
	unsigned delay = 5;
	struct tw_rpc_seg_meta m = {
		.log_id = p->cfg.log_id, .segment_id = seg->id, .checksum = 0, .offset = 0,
	};
	struct tw_rpc_req req;
	struct pcall calls[TW_PRIMARY_MAX_REPLICAS];
	bool *tried = calloc(p->nbk, sizeof(bool));
	bool revived = false;

	if (!tried)
		return -ENOMEM;
	for (;;) {
		bool refused = false;

		heal_shared(p);
		memset(tried, 0, p->nbk * sizeof(bool));
		while (seg->nrep < p->r) {
			unsigned n = 0;

			/* Ask as many untried backups as replicas are missing, all at once; for a
			 * new log's first segment, one backup first: two primaries creating the
			 * same log meet there and only one gets past it. */
			unsigned want = p->creating && seg->nrep == 0 ? 1 : p->r - seg->nrep;

			for (size_t k = 0; k < p->nbk && n < want; k++) {
				unsigned bi = (unsigned)((seg->id + k) % p->nbk);
				struct pbackup *b = &p->bk[bi];

				if (tried[bi] || chosen(seg, bi) || !usable(p, b) ||
				    !tw__pzone_ok(p, seg, bi, calls, n))
					continue;
				tried[bi] = true;
				if (tw__pcoord_note(p, bi) < 0)
					continue; /* not recorded for the log: not used */
				tw__rpc_req_open_segment(&req, p->cfg.epoch, &m, 0, seg->cap);
				req.body.open_segment.create_log = p->creating;
				req.body.open_segment.chain_seed = seg->seed;
				PSTAT_ADD(p, rpc_open, 1);
				call_start(p, &calls[n++], b, &req.env);
			}
			if (!n)
				break;
			call_wait(p, calls, n);
			for (unsigned i = 0; i < n; i++) {
				int orc = open_result(p, seg, &calls[i], &refused);

				if (orc < 0) {
					free(tried);
					return orc;
				}
			}
		}
		if (seg->nrep == p->r) {
			free(tried);
			return 0;
		}
		/* Short of backups: once, those that are down are probed now rather than at their
		 * back-off's turn (one restarted a moment ago can take the segment), and we look
		 * again if any answered (ctx_revive.c, tw__ctx_revive_now). */
		if (!refused && !revived) {
			revived = true;
			if (tw__pfo_revive(p, seg))
				continue;
		}
		if (!refused || tw_now_ns() + (uint64_t)delay * 1000000u > deadline)
			break;
		backoff_wait(p, delay);
		delay = delay * 2 > 200 ? 200 : delay * 2;
	}
	free(tried);

	{
		char *msg = p->errmsg;
		size_t n = sizeof(p->errmsg);
		int k = snprintf(msg, n, "log %llu segment %u: need %u backups, only %u available:",
				 (unsigned long long)p->cfg.log_id, seg->id, p->r, seg->nrep);

		for (size_t i = 0; i < p->nbk && k > 0 && (size_t)k < n; i++) {
			const struct pbackup *b = &p->bk[i];

			k += snprintf(msg + k, n - (size_t)k, " %s (%s)%s", b->addr,
				      chosen(seg, (unsigned)i) ? "opened"
				      : b->why[0]		 ? b->why
								 : "not usable",
				      i + 1 < p->nbk ? ";" : "");
		}
		tw_log_error("primary: %s", p->errmsg);
	}
	/* Give back the buffers we got (an empty close), best effort. */
	{
		unsigned n = 0;

		for (unsigned i = 0; i < seg->nrep; i++) {
			struct pbackup *b = &p->bk[seg->rep[i]];

			if (usable(p, b)) {
				tw__rpc_req_close_segment(&req, p->cfg.epoch, &m, 0);
				PSTAT_ADD(p, rpc_close, 1);
				call_start(p, &calls[n++], b, &req.env);
			}
		}
		call_wait(p, calls, n);
	}
	seg->nrep = 0;
	return -TW_ENOBACKUP;
}

static void close_req(struct tw_primary *p, struct pseg *seg, struct tw_rpc_req *req)
{
	struct tw_rpc_seg_meta m = {
		.log_id = p->cfg.log_id,
		.segment_id = seg->id,
		.checksum = seg->w.last_checksum,
		.offset = seg->w.pos,
	};

	tw__rpc_req_close_segment(req, p->cfg.epoch, &m, seg->version);
	PSTAT_ADD(p, rpc_close, 1);
}

void tw__pctl_close_begin(struct tw_primary *p, struct pseg *seg)
{
	struct tw_rpc_req req;
	unsigned n = 0;

	if (seg->closed)
		return;
	seg->closing = true;
	for (unsigned i = 0; i < seg->nrep && n < p->r; i++) {
		struct pbackup *b = &p->bk[seg->rep[i]];

		if (!b->c->peer.rpc || b->lost) {
			/* Re-replicated from our memory in the background (primary_rerep.c). */
			tw_log_warn("primary: backup %s lost before closing segment %u: %s", b->addr,
				    seg->id, b->why);
			p->rr_dirty = true;
			continue;
		}
		close_req(p, seg, &req);
		call_start(p, &p->close_calls[n++], b, &req.env);
	}
	p->close_n = n;
	tw__primary_lock(p);
	p->closing = seg;
	tw__primary_unlock(p);
}

/* One close answer that is not a success: a lost backup (its closed copy goes to a spare in the
 * background), a connection made again since the call (a reset of the context's fabric, which
 * failed every call in flight: ask again), or a refusal (the log fails). */
static int close_failed(struct tw_primary *p, struct pseg *seg, struct pcall *c)
{
	struct pbackup *b = c->b;
	int rc = c->status;
	/* Lost, timed out, or its connection closed under it (a loss handled meanwhile, or
	 * a reset): the call ended without a verdict from the backup. */
	bool no_answer = rc == -ETIMEDOUT || rc == -TW_EPEERLOST || rc == -TW_ECLOSED;

	if (no_answer && !b->lost && prpc(p, b) && b->c->peer.gen != c->gen) {
		struct tw_rpc_req req;

		close_req(p, seg, &req);
		call_start(p, c, b, &req.env);
		call_wait(p, c, 1);
		rc = c->status;
		if (!rc)
			return 0;
		no_answer = rc == -ETIMEDOUT || rc == -TW_EPEERLOST || rc == -TW_ECLOSED;
	}
	if (no_answer) {
		snprintf(b->why, sizeof(b->why), "close segment %u: %s", seg->id, tw_strerror(rc));
		tw__pfo_lost(p, b->idx, b->why);
		p->rr_dirty = true;
		return 0;
	}
	tw__primary_fail(p, rc, "backup %s: close segment %u (offset %llu): %s%s%s", b->addr,
			 seg->id, (unsigned long long)seg->w.pos, tw_strerror(rc),
			 c->msg[0] ? ": " : "", c->msg);
	return rc;
}

int tw__pctl_close_end(struct tw_primary *p)
{
	struct pseg *seg = p->closing;
	int first = 0;

	if (!seg)
		return 0;
	call_wait(p, p->close_calls, p->close_n);
	for (unsigned i = 0; i < p->close_n; i++) {
		int rc = p->close_calls[i].status ? close_failed(p, seg, &p->close_calls[i]) : 0;

		if (rc < 0 && !first)
			first = rc;
	}
	p->close_n = 0;
	seg->closed = true;
	/* A replica whose backup was lost after it was asked (and answered) is owed to a spare
	 * too: the background re-replication passed this segment over while it was closing. */
	for (unsigned i = 0; i < seg->nrep; i++)
		if (p->bk[seg->rep[i]].lost)
			p->rr_dirty = true;
	tw__primary_lock(p);
	p->closing = NULL;
	if (p->threaded)
		pthread_cond_broadcast(&p->cv_app); /* tw_primary_flush waits for it */
	tw__primary_unlock(p);
	return first;
}

void tw__pctl_close_poll(struct tw_primary *p)
{
	if (!p->closing)
		return;
	for (unsigned i = 0; i < p->close_n; i++) {
		struct pcall *c = &p->close_calls[i];

		if (c->done)
			continue;
		if (c->b->c->peer.rpc)
			tw__rpc_client_expire(c->b->c->peer.rpc);
		if (!c->done)
			return;
	}
	(void)tw__pctl_close_end(p); /* a failure is the log's error (tw__primary_fail) */
}

int tw__pctl_close_segment(struct tw_primary *p, struct pseg *seg)
{
	int rc = tw__pctl_close_end(p); /* one closing segment at a time */

	if (seg->closed)
		return rc;
	tw__pctl_close_begin(p, seg);
	if (!rc)
		rc = tw__pctl_close_end(p);
	else
		(void)tw__pctl_close_end(p);
	return rc;
}

/* Pre-open: send the opens of `seg` to the first r usable backups and return at once. */
void tw__pctl_preopen_begin(struct tw_primary *p, struct pseg *seg)
{
	struct tw_rpc_seg_meta m = {
		.log_id = p->cfg.log_id, .segment_id = seg->id, .checksum = 0, .offset = 0,
	};
	struct tw_rpc_req req;

	heal_shared(p);
	p->next_n = 0;
	for (size_t k = 0; k < p->nbk && p->next_n < p->r; k++) {
		struct pbackup *b = &p->bk[(seg->id + k) % p->nbk];

		if (!usable(p, b) || !tw__pzone_ok(p, seg, (unsigned)((seg->id + k) % p->nbk),
					       p->next_calls, p->next_n) ||
		    tw__pcoord_note(p, (unsigned)((seg->id + k) % p->nbk)) < 0)
			continue;
		tw__rpc_req_open_segment(&req, p->cfg.epoch, &m, 0, seg->cap);
		req.body.open_segment.chain_seed = seg->seed;
		PSTAT_ADD(p, rpc_open, 1);
		call_start(p, &p->next_calls[p->next_n++], b, &req.env);
	}
}

/* Collect the pre-open answers, then open on more backups if some refused. */
int tw__pctl_preopen_finish(struct tw_primary *p, struct pseg *seg)
{
	bool refused = false;

	call_wait(p, p->next_calls, p->next_n);
	for (unsigned i = 0; i < p->next_n; i++)
		if (open_result(p, seg, &p->next_calls[i], &refused) < 0)
			return -TW_EFENCED;
	p->next_n = 0;
	/* A backup lost since the pre-open cannot serve: drop it while the segment is empty
	 * (no failover needed; primary_rerep.c). */
	for (unsigned i = 0; i < seg->nrep;) {
		if (p->bk[seg->rep[i]].lost) {
			seg->nrep--;
			seg->rep[i] = seg->rep[seg->nrep];
			seg->rk[i] = seg->rk[seg->nrep];
		} else {
			i++;
		}
	}
	return seg->nrep == p->r ? 0 : tw__pctl_open_segment(p, seg);
}

/* The pre-opened segment will not be used: give its buffers back (empty close). */
void tw__pctl_preopen_abandon(struct tw_primary *p, struct pseg *seg)
{
	struct tw_rpc_seg_meta m = {
		.log_id = p->cfg.log_id, .segment_id = seg->id, .checksum = 0, .offset = 0,
	};
	struct pcall calls[TW_PRIMARY_MAX_REPLICAS];
	struct tw_rpc_req req;
	unsigned n = 0;

	call_wait(p, p->next_calls, p->next_n);
	for (unsigned i = 0; i < p->next_n; i++) {
		struct pbackup *b = p->next_calls[i].b;

		if (p->next_calls[i].status || !usable(p, b))
			continue;
		tw__rpc_req_close_segment(&req, p->cfg.epoch, &m, 0);
		PSTAT_ADD(p, rpc_close, 1);
		call_start(p, &calls[n++], b, &req.env);
	}
	call_wait(p, calls, n);
	p->next_n = 0;
}

/* ------------------------------------------------------------------ ownership (docs/recovery.md) */

/* The first page of a backup's listing of our log: whether it knows the log, its epoch there
 * and owner. 0 or a negative code. */
static int list_log(struct tw_primary *p, struct tw_rpc_client *rpc, bool *known,
		    uint64_t *epoch, uint64_t *owner)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_list_segments(&req, p->cfg.log_id, false, 0);
	PSTAT_ADD(p, rpcs, 1);
	PSTAT_ADD(p, rpc_other, 1);
	rc = tw__rpc_call_sync(rpc, &req.env, &rep);
	if (rc == 0) {
		const Tailwind__ListSegmentsReply *r = rep.env->list_segments_reply;

		*known = r->log_known || r->n_segments > 0;
		*epoch = r->log_epoch;
		*owner = r->log_owner;
		for (size_t i = 0; i < r->n_segments; i++)
			if (r->segments[i]->epoch > *epoch)
				*epoch = r->segments[i]->epoch;
	}
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__pctl_probe_new_log(struct tw_primary *p)
{
	uint64_t top = 0;

	for (size_t i = 0; i < p->nbk; i++) {
		struct pbackup *b = &p->bk[i];
		uint64_t epoch = 0, owner = 0;
		bool known = false;
		int rc;

		if (!b->c->peer.rpc || b->lost)
			continue;
		rc = list_log(p, prpc(p, b), &known, &epoch, &owner);
		if (rc < 0) {
			snprintf(b->why, sizeof(b->why), "listing the log: %s", tw_strerror(rc));
			tw_log_warn("primary: backup %s: %s", b->addr, b->why);
			continue;
		}
		if (known) {
			snprintf(p->errmsg, sizeof(p->errmsg), "log %llu already exists on backup %s "
				 "(epoch %llu): a plain open only creates new logs. If its primary "
				 "is dead, take it over (tw_primary_takeover): that "
				 "fences it, recovers every entry and continues the same log; or "
				 "delete it (twctl delete)", (unsigned long long)p->cfg.log_id,
				 b->addr, (unsigned long long)epoch);
			return -TW_ELOGEXISTS;
		}
		if (epoch > top)
			top = epoch;
	}
	if (p->cfg.epoch == 0) {
		if (top >= TW_EPOCH_MAX) {
			snprintf(p->errmsg, sizeof(p->errmsg), "log %llu: its last epoch %llu leaves "
				 "no room (maximum %llu)", (unsigned long long)p->cfg.log_id,
				 (unsigned long long)top, (unsigned long long)TW_EPOCH_MAX);
			return -ERANGE;
		}
		p->cfg.epoch = top + 1;
	} else if (p->cfg.epoch < top) {
		snprintf(p->errmsg, sizeof(p->errmsg), "log %llu was at epoch %llu on a backup: "
			 "open it with a higher epoch (or 0 for automatic)",
			 (unsigned long long)p->cfg.log_id, (unsigned long long)top);
		return -TW_EFENCED;
	}
	return 0;
}

int tw__pctl_taken_over(struct tw_primary *p, char *why, size_t len)
{
	struct tw_peer_opts o;

	/* A throw-away connection per backup: a peer without a cbackup (ctx.c's event routing
	 * runs no failover for it), its one call stamped with our incarnation. With the
	 * Handshake, so that a backup with a cluster key answers it (without one the key's
	 * backups refused the ListLogs, and a takeover was never seen this way). */
	tw__ctx_peer_opts(p->ctx, &o);
	o.incarnation = p->incarnation;
	for (size_t i = 0; i < p->nbk; i++) {
		struct tw_peer tmp;
		uint64_t epoch = 0, owner = 0;
		bool known = false, taken;
		int rc;

		if (p->bk[i].c->dead)
			continue; /* a connect failed already: do not wait for another timeout */
		tw__peer_init(&tmp, p->bk[i].addr, NULL);
		rc = tw__peer_connect(&tmp, p->fab, &o);
		if (rc < 0 && tmp.failed == TW_PEER_CONNECT)
			p->bk[i].c->dead = true;
		if (rc == 0)
			rc = list_log(p, tmp.rpc, &known, &epoch, &owner);
		tw__peer_close(&tmp);
		if (rc < 0)
			continue;
		taken = epoch > p->cfg.epoch || (epoch == p->cfg.epoch && owner != p->incarnation);
		if (taken) {
			snprintf(why, len, "log %llu was taken over: backup %s holds it at epoch %llu "
				 "(owner incarnation %016llx); this primary is epoch %llu, incarnation "
				 "%016llx", (unsigned long long)p->cfg.log_id, tmp.addr,
				 (unsigned long long)epoch, (unsigned long long)owner,
				 (unsigned long long)p->cfg.epoch, (unsigned long long)p->incarnation);
			return 1;
		}
	}
	return 0;
}

int tw__pctl_free(struct tw_primary *p, uint64_t below, uint64_t *freed_out)
{
	struct pcall calls[64];
	struct tw_rpc_req req;
	int first = 0;

	*freed_out = 0;
	for (size_t i = 0; i < p->nbk; i += 64) {
		unsigned n = 0;

		for (size_t k = i; k < p->nbk && n < 64; k++) {
			struct pbackup *b = &p->bk[k];

			if (!usable(p, b))
				continue;
			tw__rpc_req_free_segments(&req, p->cfg.epoch, p->cfg.log_id, below);
			PSTAT_ADD(p, rpc_other, 1);
			call_start(p, &calls[n++], b, &req.env);
		}
		call_wait(p, calls, n);
		for (unsigned k = 0; k < n; k++) {
			if (calls[k].status == 0)
				continue;
			tw_log_warn("primary: backup %s: free below segment %llu: %s%s%s",
				    calls[k].b->addr, (unsigned long long)below,
				    tw_strerror(calls[k].status), calls[k].msg[0] ? ": " : "",
				    calls[k].msg);
			if (!first)
				first = calls[k].status;
		}
	}
	return first;
}
