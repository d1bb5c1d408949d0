/*
 * primary/primary.c — the primary's replication engine: the segmented log in registered memory,
 * batching into sealed writes, pipelined write slots, in-order acknowledgements, segment
 * rollover, the per-log steps the context's progress thread runs (its loop is in ctx.c), and
 * the public API of tailwind/primary.h.
 * See docs/primary.md.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "coord/coord.h"
#include "recovery/recover_int.h"
#include "proto/auth.h"
#include "primary/primary_int.h"

void tw__primary_lock(struct tw_primary *p)
{
	if (p->threaded)
		pthread_mutex_lock(&p->lock);
}

void tw__primary_unlock(struct tw_primary *p)
{
	if (p->threaded)
		pthread_mutex_unlock(&p->lock);
}

/*
 * What the two modes do differently (docs/primary.md, "Threading"): who drives the fabric and
 * how a caller waits. TW_PRIMARY_SYNC: the caller drives, inside the calls. TW_PRIMARY_ASYNC:
 * the context's progress thread drives; callers copy under the lock and sleep on condition
 * variables. One table per mode, chosen at open (p->mode_ops).
 */
struct pmode_ops {
	/* Make room for one entry and append it (async: under the lock, handed to the thread);
	 * *idx_out: its record index. */
	int (*append)(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
		      void *arg, uint64_t *lsn_out, uint64_t *idx_out);
	/* tw_primary_append_batch: n entries (lengths checked), cb on the last one. */
	int (*append_batch)(struct tw_primary *p, const struct iovec *entries, size_t n,
			    tw_append_cb cb, void *arg, uint64_t *lsns_out);
	/* tw_primary_append: append and wait for the acknowledgement. */
	int (*append_wait)(struct tw_primary *p, const void *data, uint32_t len, uint64_t *lsn_out);
	/* tw_primary_flush. */
	int (*flush)(struct tw_primary *p);
	/* Run the callbacks of records [rec_tail, end) in order (driver thread, lock not held). */
	void (*complete)(struct tw_primary *p, uint64_t end, int status);
};

static const struct pmode_ops *mode_ops(bool threaded);

/* ------------------------------------------------------------------ lifecycle */

static const char *const pstate_names[] = {
	[PSTATE_OPENING] = "opening",     [PSTATE_RUNNING] = "running",
	[PSTATE_STOPPING] = "stopping",   [PSTATE_FINISHING] = "finishing",
	[PSTATE_FINISHED] = "finished",   [PSTATE_CLOSED] = "closed",
};

#define PS(s) (1u << (s))
/* The legal successors of each state (docs/primary.md, "Lifecycle"). */
static const unsigned pstate_next[] = {
	[PSTATE_OPENING] = PS(PSTATE_RUNNING) | PS(PSTATE_CLOSED),
	[PSTATE_RUNNING] = PS(PSTATE_STOPPING) | PS(PSTATE_FINISHING),
	[PSTATE_STOPPING] = PS(PSTATE_FINISHING),
	[PSTATE_FINISHING] = PS(PSTATE_FINISHED),
	[PSTATE_FINISHED] = PS(PSTATE_CLOSED),
	[PSTATE_CLOSED] = 0,
};
#undef PS

void tw__primary_set_state(struct tw_primary *p, enum pstate to)
{
	enum pstate from = pstate(p); /* the only writer: nobody changes it meanwhile */

	if (!(pstate_next[from] & (1u << to))) {
		tw_log_error("primary log %llu: illegal transition %s -> %s",
			     (unsigned long long)p->cfg.log_id, pstate_names[from], pstate_names[to]);
		abort();
	}
	tw_log_debug("primary log %llu: %s -> %s", (unsigned long long)p->cfg.log_id,
		     pstate_names[from], pstate_names[to]);
	__atomic_store_n(&p->state, to, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------ small helpers */

/* Wake the first thread waiting for room (lock held). One per event that makes room (a seal,
 * an acknowledgement): it appends at least once, which leads to another seal and so to the
 * next wake-up, so every waiter gets its turn while the others stay asleep; with T threads a
 * batch costs one sleep and one wake-up, not T (docs/primary.md, "Appends from many threads"). */
static void room_wake_one(struct tw_primary *p)
{
	struct pwaiter *w = p->room_head;

	if (!w)
		return;
	p->room_head = w->next;
	if (!p->room_head)
		p->room_tail = NULL;
	w->queued = false;
	pthread_cond_signal(&w->cv);
}

/* Wake every waiting application thread (lock held): a failure, a finished roll. */
static void wake_apps(struct tw_primary *p)
{
	/* (Sync mode: nobody waits, app_waiting is 0 and the room queue empty.) */
	if (p->app_waiting)
		pthread_cond_broadcast(&p->cv_app);
	while (p->room_head)
		room_wake_one(p);
}

/* Record the first failure (sticky). Takes the lock: call without holding it. */
void tw__primary_fail(struct tw_primary *p, int err, const char *fmt, ...)
{
	char taken[512];
	bool fenced = false;
	va_list ap;

	/* Backups that vanish all at once may have closed our connections because another owner
	 * fenced the log: say so (-TW_EFENCED), not just "no backup". Driver thread, no lock. */
	if (err == -TW_ENOBACKUP && !p->err && !p->checking && p->fab &&
	    pstate(p) < PSTATE_FINISHING) {
		p->checking = true;
		fenced = tw__pctl_taken_over(p, taken, sizeof(taken)) == 1;
		p->checking = false;
	}
	tw__primary_lock(p);
	if (!p->err) {
		p->err = fenced ? -TW_EFENCED : err;
		if (fenced) {
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", taken);
		} else {
			va_start(ap, fmt);
			vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
			va_end(ap);
		}
		tw_log_error("primary log %llu: %s", (unsigned long long)p->cfg.log_id, p->errmsg);
	}
	wake_apps(p);
	tw__primary_unlock(p);
}

bool tw__primary_is_replica(struct tw_primary *p, unsigned b)
{
	struct pseg *s = p->cur;

	if (!s)
		return false;
	for (unsigned i = 0; i < s->nrep; i++)
		if (s->rep[i] == b)
			return true;
	return false;
}

static uint64_t pending_entries(const struct tw_primary *p)
{
	return p->rec_head - p->rec_sealed;
}

static bool slot_free(const struct tw_primary *p)
{
	return p->slot_head - p->slot_tail < p->nslots;
}

/* ------------------------------------------------------------------ segments */

/* Give a segment's memory back to the arena (nothing is unmapped or deregistered). */
static void seg_free(struct tw_primary *p, struct pseg *s)
{
	if (!s)
		return;
	if (s->buf)
		tw__arena_put(p->ctx->arena, s->buf, s->cap);
	free(s);
}

/* A fresh chain seed for a new segment: uniformly distributed, independent of any backup's
 * buffer contents, never 0 (0 asks a backup for a zeroed buffer). splitmix64 (Steele, Lea,
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014) over a counter keyed
 * by getrandom at create; atomic so any thread that starts a segment may draw. */
static uint32_t seed_draw(struct tw_primary *p)
{
	for (;;) {
		uint64_t z = __atomic_add_fetch(&p->seed_ctr, 0x9e3779b97f4a7c15ull,
						__ATOMIC_RELAXED);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		if ((uint32_t)z != 0)
			return (uint32_t)z;
	}
}

/*
 * Segment `id` (not yet opened on backups), its memory from the log arena: a range the arena
 * already holds and registered with its extent (no map, zeroing or registration in steady
 * state), possibly holding an earlier segment's bytes. Reuse is safe because every use starts a
 * fresh writer at offset 0 under a fresh seed and nothing past what this use wrote is ever sent
 * (seg_sent_ok; docs/log-format.md §7, "Reused segments on the primary"). -ENOSPC when the
 * arena's budget is exhausted (p->errmsg says so).
 */
static int seg_new(struct tw_primary *p, uint32_t id, struct pseg **out)
{
	struct pseg *s = calloc(1, sizeof(*s));
	char why[256];
	int rc;

	if (!s)
		return -ENOMEM;
	s->id = id;
	s->cap = p->cfg.segment_size;
	rc = tw__arena_get(p->ctx->arena, s->cap, &s->buf, &s->mr, why, sizeof(why));
	if (rc < 0) {
		s->buf = NULL;
		tw__primary_lock(p);
		snprintf(p->errmsg, sizeof(p->errmsg), "log %llu segment %u: %s",
			 (unsigned long long)p->cfg.log_id, id, why);
		tw__primary_unlock(p);
		free(s);
		return rc;
	}
	s->seed = seed_draw(p);
	tw_log_writer_init_seeded(&s->w, s->buf, s->cap, s->seed);
	*out = s;
	return 0;
}

bool tw__pseg_sent_ok(const struct pseg *s, size_t off, size_t len)
{
	return off <= s->w.pos && len <= s->w.pos - off;
}

/* Add `s` as the new current segment. Takes the lock. */
static int seg_push(struct tw_primary *p, struct pseg *s)
{
	int rc;

	tw__primary_lock(p);
	rc = tw__push(&p->segs, &p->segs_cap, &p->nsegs, sizeof(s), 16, &s);
	if (rc == 0)
		p->cur = s;
	tw__primary_unlock(p);
	return rc;
}

/* Allocate the next segment and send its opens now, without waiting for the answers: with
 * cfg.preopen as soon as a segment is open; always at the start of a rollover (`now`), so that
 * the opens travel and are answered while the current segment drains and closes. Failures
 * here are not fatal: the rollover then opens the usual way. */
static void preopen_start(struct tw_primary *p, bool now)
{
	struct pseg *s;

	if ((!p->cfg.preopen && !now) || p->next || !p->cur || p->err)
		return;
	if (seg_new(p, p->cur->id + 1, &s) < 0)
		return; /* e.g. the arena is exhausted: the rollover tries again */
	p->next = s;
	tw__pctl_preopen_begin(p, s);
}

/* ------------------------------------------------------------------ writes and acks */

void tw__primary_op_done(struct tw_op *op, int status)
{
	struct pop *po = (struct pop *)op;
	struct pslot *s = po->slot;
	struct tw_primary *p = s->p;

	if (status < 0) {
		unsigned b = po->bk; /* not seg->rep[po->rep]: a failover may have replaced it */
		char why[200];

		/* Repaired by a failover (primary_rerep.c) that copies the prefix to a spare. */
		s->repair = true;
		snprintf(why, sizeof(why), "write of %zu bytes at segment %u offset %zu failed: %s",
			 s->len, s->seg->id, s->off, tw_strerror(status));
		tw__pfo_lost(p, b, why);
	}
	s->remaining--;
}

/* Seal the waiting entries into one write (lock held in async mode; the caller checked that
 * entries wait, a slot is free and the primary is healthy). Returns the slot, or NULL when the
 * seal failed (the caller then fails the primary with *rc_out). */
static struct pslot *seal_locked(struct tw_primary *p, int *rc_out)
{
	struct pseg *seg = p->cur;
	struct pslot *s;
	size_t off, len;
	int rc = tw_log_writer_seal(&seg->w, &off, &len);

	if (rc < 0 || !len) {
		*rc_out = rc < 0 ? rc : -TW_EPROTO;
		return NULL;
	}
	s = &p->slots[p->slot_head % p->nslots];
	s->seg = seg;
	s->off = off;
	s->len = len;
	s->remaining = seg->nrep;
	s->rec_end = p->rec_head;
	s->repair = false;
	p->rec_sealed = p->rec_head;
	p->slot_head++;
	room_wake_one(p); /* back-pressure released (async mode; the queue is empty in sync) */
	return s;
}

/* Post a sealed write to every replica of its segment. Driver thread, lock not held. */
static void post_slot(struct tw_primary *p, struct pslot *s, uint64_t n)
{
	struct pseg *seg = s->seg;
	int rc;

	PSTAT_ADD(p, writes, 1);
	PSTAT_ADD(p, write_bytes, s->len);
	if (n > p->st.max_batch_seen)
		__atomic_store_n(&p->st.max_batch_seen, n, __ATOMIC_RELAXED);
	if (p->slot_head - p->slot_tail > p->st.inflight_peak)
		__atomic_store_n(&p->st.inflight_peak, p->slot_head - p->slot_tail, __ATOMIC_RELAXED);

	for (unsigned i = 0; i < seg->nrep; i++) {
		struct pop *po = &s->ops[i];
		struct pbackup *b = &p->bk[seg->rep[i]];

		memset(&po->op, 0, sizeof(po->op));
		po->op.cb = p->op_cb;
		po->op.arg = s;
		po->slot = s;
		po->rep = i;
		po->bk = seg->rep[i];
		rc = b->c->peer.ch ? tw__chan_write(b->c->peer.ch, &po->op, seg->buf + s->off,
						    s->len, seg->mr, &seg->rk[i], s->off)
				   : -TW_EPEERLOST;
		if (rc < 0) {
			char why[160];

			s->repair = true; /* the failover copies it to the replacement */
			s->remaining--;
			snprintf(why, sizeof(why), "cannot post write: %s", tw_strerror(rc));
			tw__pfo_lost(p, seg->rep[i], why);
		}
	}
}

/* Whether waiting entries can be sealed now (lock held in async mode). */
static bool seal_ready(const struct tw_primary *p)
{
	return pending_entries(p) && slot_free(p) && !p->err && !p->need_roll && !p->fo_pending;
}

/* Seal the waiting entries into one write and post it to every replica. Driver thread, lock
 * not held; `ready`: only if seal_ready (the rollover seals while need_roll is set), checked
 * under the same lock as the seal. Returns 0 or a negative code (the primary is then failed). */
static int seal_post_if(struct tw_primary *p, bool ready)
{
	struct pslot *s;
	uint64_t n;
	int rc = 0;

	if (ready && p->fo_pending)
		return p->err;
	if (p->fo_pending && !p->fo_running)
		tw__pfo_run(p); /* a replica was lost: replace it before anything new goes out */
	if (p->fo_pending)
		return p->err;
	tw__primary_lock(p);
	n = pending_entries(p);
	if (!n || p->err || !slot_free(p) || (ready && p->need_roll)) {
		tw__primary_unlock(p);
		return p->err;
	}
	s = seal_locked(p, &rc);
	tw__primary_unlock(p);
	if (!s) {
		tw__primary_fail(p, rc, "seal failed: %s", tw_strerror(rc));
		return p->err;
	}
	post_slot(p, s, n);
	return 0;
}

static int seal_post(struct tw_primary *p)
{
	return seal_post_if(p, false);
}

/* Seal and post if seal_ready: one lock round for the check and the seal. */
static void try_seal(struct tw_primary *p)
{
	seal_post_if(p, true);
}

static void ack_one(struct tw_primary *p, const struct prec *r, int status)
{
	if (!status)
		__atomic_store_n(&p->acked_lsn, r->lsn + TW_ENTRY_HDR_SIZE + r->len, __ATOMIC_RELEASE);
	if (status)
		PSTAT_ADD(p, failed, 1);
	else
		PSTAT_ADD(p, acked, 1);
	if (r->cb)
		r->cb(r->arg, status, r->lsn);
}

/* Sync mode (pmode_ops.complete). Advance before each callback: a callback may append, which
 * may drive and reap (nested) again; the nested call continues where this one is. */
static void complete_recs_sync(struct tw_primary *p, uint64_t end, int status)
{
	while (p->rec_tail < end) {
		struct prec r = p->recs[p->rec_tail & p->rec_mask];

		p->rec_tail++;
		ack_one(p, &r, status);
	}
}

/* Async mode (pmode_ops.complete): callbacks run on the progress thread only (app threads
 * never reap), so the records stay ours until rec_tail moves, under the lock. The blocking
 * appenders among them were put on p->acked by sync_cb_queue: each is woken alone (a thread
 * whose entry is in a later write sleeps on), under the lock, before it can see rec_tail and
 * return. */
static void complete_recs_async(struct tw_primary *p, uint64_t end, int status)
{
	for (uint64_t i = p->rec_tail; i < end; i++)
		ack_one(p, &p->recs[i & p->rec_mask], status);
	pthread_mutex_lock(&p->lock);
	p->rec_tail = end;
	while (p->acked) {
		struct pwaiter *w = p->acked;

		p->acked = w->next;
		pthread_cond_signal(&w->cv);
	}
	room_wake_one(p); /* the record ring has room again */
	if (p->app_waiting)
		pthread_cond_broadcast(&p->cv_app); /* tw_primary_flush */
	pthread_mutex_unlock(&p->lock);
}

/* Acknowledge finished writes in log order and run their callbacks. Driver thread, lock not
 * held. Returns the number of appends completed. */
static int reap(struct tw_primary *p)
{
	uint64_t before = p->rec_tail;

	while (p->slot_tail < p->slot_head) {
		struct pslot *s = &p->slots[p->slot_tail % p->nslots];
		int st;

		if (s->remaining || (s->repair && !p->err))
			break; /* a repair waits for the failover (primary_rerep.c) */
		st = s->repair ? p->err : 0;
		if (p->reap_failed)
			st = p->err ? p->err : -TW_EPEERLOST;
		if (st)
			p->reap_failed = true;
		p->slot_tail++;
		p->mode_ops->complete(p, s->rec_end, st);
	}
	if (p->slot_tail == p->slot_head) {
		uint64_t end;
		int err;

		tw__primary_lock(p);
		err = p->err;
		end = p->rec_head;
		if (err) /* nothing will be sealed any more */
			p->rec_sealed = end;
		tw__primary_unlock(p);
		if (err && end > p->rec_tail) {
			p->reap_failed = true;
			p->mode_ops->complete(p, end, err);
		}
	}
	if (p->rec_tail != before)
		tw__packed_publish(p); /* readers (primary_acked.c) */
	return (int)(p->rec_tail - before);
}

/* One round of driver work: seal+post if possible, poll the fabric (blocking up to
 * timeout_ms), reap. Driver thread, lock not held. */
static int drive(struct tw_primary *p, int timeout_ms)
{
	int rc;

	try_seal(p);
	rc = tw__fab_progress(p->fab, timeout_ms);
	if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIMEDOUT) {
		tw__primary_fail(p, rc, "fabric progress failed: %s: %s", tw_strerror(rc),
			     tw__fab_errmsg(p->fab));
	}
	if (p->fo_pending && !p->fo_running)
		tw__pfo_run(p);
	rc = reap(p);
	try_seal(p);
	if (p->rr_dirty && !p->fo_running)
		tw__pfo_background(p, false);
	return rc;
}

/* Drive until every sealed write completed and was reaped. */
static void drain(struct tw_primary *p)
{
	for (;;) {
		bool more;

		tw__primary_lock(p);
		more = p->slot_tail < p->slot_head || (p->err && p->rec_tail < p->rec_head);
		tw__primary_unlock(p);
		if (!more)
			break;
		drive(p, PWAIT_SLICE_MS);
	}
}

/* Roll over: seal and drain the current segment, close it on its replicas, open the next one.
 * Driver thread, lock not held. Returns 0 or the primary's error. */
static int roll(struct tw_primary *p)
{
	struct pseg *old = p->cur, *s = NULL;
	bool preopened = true;
	int rc;

	/* Seal what waits and let every write of the segment complete. In sync mode the
	 * callbacks run meanwhile may append again: into this segment (then loop), or, if it
	 * does not fit, by rolling over themselves (nested), which this call then notices. */
	do {
		while (pending_entries(p) && !p->err && p->cur == old) {
			if (slot_free(p))
				seal_post(p);
			else
				drive(p, PWAIT_SLICE_MS);
		}
		drain(p);
	} while (pending_entries(p) && !p->err && p->cur == old);
	if (p->err)
		return p->err;
	if (p->cur != old)
		return 0; /* a nested call rolled over already */
	/* The next segment's opens go out before the close: a backup answers them (a durable
	 * record of the open) while this segment closes (a scan of the whole buffer), so the
	 * rollover waits for the slower of the two, not for their sum (docs/primary.md, "Segment
	 * rollover"). After the drain, which noticed any backup lost meanwhile. */
	preopen_start(p, true);
	/* The next segment's memory first: an exhausted arena refuses the rollover before the
	 * segment is closed, so the log goes on once the application releases segments. */
	if (p->next) {
		s = p->next;
		p->next = NULL;
	} else {
		rc = seg_new(p, old->id + 1, &s);
		if (rc == -ENOSPC) {
			tw_log_warn("primary log %llu: %s", (unsigned long long)p->cfg.log_id,
				    p->errmsg);
			return rc;
		}
		if (rc < 0) {
			tw__primary_fail(p, rc, "cannot allocate segment %u: %s", old->id + 1,
				     tw_strerror(rc));
			return p->err;
		}
		preopened = false;
	}
	rc = tw__pctl_close_segment(p, old);
	if (rc < 0) {
		if (preopened)
			tw__pctl_preopen_abandon(p, s);
		seg_free(p, s);
		return p->err ? p->err : rc;
	}
	rc = preopened ? tw__pctl_preopen_finish(p, s) : tw__pctl_open_segment(p, s);
	if (rc < 0) {
		seg_free(p, s);
		char why[sizeof(p->errmsg)];

		snprintf(why, sizeof(why), "%s", p->errmsg[0] ? p->errmsg : "cannot open the next segment");
		tw__primary_fail(p, rc, "%s", why);
		return p->err;
	}
	rc = seg_push(p, s);
	if (rc < 0) {
		seg_free(p, s);
		tw__primary_fail(p, rc, "out of memory");
		return p->err;
	}
	preopen_start(p, false);
	PSTAT_ADD(p, segments, 1);
	return 0;
}

/* ------------------------------------------------------------ per-log steps (progress thread) */

bool tw__primary_step_pre(struct tw_primary *p, bool *done)
{
	struct pslot *sealed = NULL;
	bool work = false;
	uint64_t sealed_n = 0;
	int seal_rc = 0;

	pthread_mutex_lock(&p->lock);
	if (p->need_roll && !p->err) {
		int rc;

		pthread_mutex_unlock(&p->lock);
		rc = roll(p);
		pthread_mutex_lock(&p->lock);
		p->need_roll = false;
		p->roll_rc = rc; /* -ENOSPC: the appends that asked for it fail (append_async_mode) */
		p->roll_gen++;
		pthread_cond_broadcast(&p->cv_app);
		pthread_mutex_unlock(&p->lock);
		return true;
	}
	if (p->need_roll && p->err) {
		p->need_roll = false;
		pthread_cond_broadcast(&p->cv_app);
	}
	if (p->free_req > p->free_done) {
		uint64_t below = p->free_req, n;

		p->free_done = below;
		pthread_mutex_unlock(&p->lock);
		(void)tw__pctl_free(p, below, &n); /* failures are logged per backup */
		return true;
	}
	if (p->free_list) {
		struct pseg *f = p->free_list;

		p->free_list = NULL;
		pthread_mutex_unlock(&p->lock);
		while (f) {
			struct pseg *nx = f->next_free;

			seg_free(p, f);
			f = nx;
		}
		return true;
	}
	if (pstate(p) == PSTATE_STOPPING && p->slot_tail == p->slot_head &&
	    p->rec_tail == p->rec_head) {
		/* Drained: let go of it (tw_primary_finish waits for this). */
		tw__primary_set_state(p, PSTATE_FINISHING);
		pthread_cond_broadcast(&p->cv_app);
		pthread_mutex_unlock(&p->lock);
		*done = true;
		return true;
	}
	/* Idle with a free slot: an append must wake us. Otherwise a completion will (also
	 * of the write sealed next). */
	p->pt_idle = slot_free(p) && !pending_entries(p);
	p->pt_idle_set = p->pt_idle;
	if (pstate(p) == PSTATE_STOPPING && p->slot_tail == p->slot_head)
		work = true;
	/* What waits goes out now, sealed under this same lock round. */
	if (seal_ready(p)) {
		sealed_n = pending_entries(p);
		sealed = seal_locked(p, &seal_rc);
	}
	pthread_mutex_unlock(&p->lock);
	if (sealed)
		post_slot(p, sealed, sealed_n);
	else if (seal_rc < 0)
		tw__primary_fail(p, seal_rc, "seal failed: %s", tw_strerror(seal_rc));
	return work;
}

void tw__primary_step_post(struct tw_primary *p)
{
	if (p->fo_pending && !p->fo_running)
		tw__pfo_run(p);
	reap(p);
	try_seal(p);
	if (p->rr_dirty && !p->fo_running)
		tw__pfo_background(p, false);
	/* Only step_pre sets pt_idle (appends only clear it): a lock round only if it did. */
	if (p->pt_idle_set) {
		p->pt_idle_set = false;
		pthread_mutex_lock(&p->lock);
		p->pt_idle = false;
		pthread_mutex_unlock(&p->lock);
	}
}

/* ------------------------------------------------------------------ public API */

static void set_errmsg(char *buf, size_t len, const char *msg);

static const struct tw_primary_config primary_defaults = {
	.replicas = 3,
	.segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE,
	.max_batch = 256,
	.max_inflight = 8,
	.mode = TW_PRIMARY_SYNC,
	.open_retry_ms = 3000,
	.rerep_rate = 64u << 20,
};

void tw_primary_config_init_sized(struct tw_primary_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &primary_defaults, sizeof(primary_defaults));
}

int tw__pcfg_make(struct tw__pcfg *pc, const struct tw_ctx_config *transport,
		  const struct tw_primary_config *cfg, char *errmsg, size_t errmsg_len)
{
	struct tw_primary_config c;
	struct tw_ctx_config t;
	int rc;

	memset(pc, 0, sizeof(*pc));
	if (!cfg) {
		set_errmsg(errmsg, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	rc = TW__CFG_TAKE(c, cfg, tw_primary_config_init, "tw_primary_config", errmsg, errmsg_len);
	if (rc == 0 && transport)
		rc = TW__CFG_TAKE(t, transport, tw_ctx_config_init, "tw_ctx_config", errmsg,
				  errmsg_len);
	else if (rc == 0)
		tw_ctx_config_init(&t);
	if (rc == 0 && c.epoch > TW_EPOCH_MAX) {
		set_errmsg(errmsg, errmsg_len, "epoch above the maximum (TW_EPOCH_MAX)");
		rc = -EINVAL;
	}
	if (rc < 0)
		return rc;
	pc->log_id = c.log_id;
	pc->epoch = c.epoch;
	pc->replicas = c.replicas;
	pc->segment_size = c.segment_size;
	pc->max_batch = c.max_batch;
	pc->max_inflight = c.max_inflight;
	pc->mode = c.mode;
	pc->open_retry_ms = c.open_retry_ms;
	pc->preopen = c.preopen;
	pc->rerep_rate = c.rerep_rate;
	pc->backups = t.backups;
	pc->n_backups = t.n_backups;
	pc->zones = t.zones;
	pc->provider = t.provider;
	pc->key_file = t.key_file;
	pc->busy_poll = t.busy_poll;
	pc->node_id = t.node_id;
	pc->op_timeout_ms = t.op_timeout_ms;
	pc->rpc_timeout_ms = t.rpc_timeout_ms;
	pc->connect_timeout_ms = t.connect_timeout_ms;
	pc->arena_size = t.arena_size;
	pc->coordinator = t.coordinator;
	return 0;
}

/* A NULL where an open needs a pointer. */
static int open_args_missing(char *errmsg, size_t errmsg_len)
{
	set_errmsg(errmsg, errmsg_len, "invalid argument");
	return -EINVAL;
}

static void set_errmsg(char *buf, size_t len, const char *msg)
{
	if (buf && len)
		snprintf(buf, len, "%s", msg);
}

/* Free the log. On a shared context: under the drive (its registrations are the context's
 * fabric's), out of the context's list. A private context goes with it. */
static void primary_free_driving(struct tw_primary *p)
{
	struct tw_ctx *ctx = p->ctx;

	tw__primary_lock(p);
	tw__primary_set_state(p, PSTATE_CLOSED); /* from OPENING (a failed open) or FINISHED */
	tw__primary_unlock(p);
	if (ctx) {
		tw__ctx_detach(ctx, p);
		if (!ctx->shared) {
			tw__ctx_stop(ctx);
			/* Pending operations complete (with errors) before the MRs go. */
			for (size_t i = 0; i < ctx->nbk; i++)
				tw__ctx_drop(&ctx->bk[i]);
		}
	}
	for (size_t i = 0; i < p->nsegs; i++)
		seg_free(p, p->segs[i]);
	free(p->segs);
	seg_free(p, p->next);
	free(p->next_calls);
	while (p->free_list) {
		struct pseg *nx = p->free_list->next_free;

		seg_free(p, p->free_list);
		p->free_list = nx;
	}
	tw__packed_release(p); /* readers (primary_acked.c) */
	if (ctx && !ctx->shared)
		tw__ctx_destroy(ctx);
	free(p->bk);
	free(p->slots);
	free(p->pops);
	free(p->recs);
	free(p->prov_copy);
	if (p->threaded) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->cv_app);
	}
	tw__coord_close(p->coord); /* last: the owner node goes once we no longer write */
	free(p);
}

static void primary_free(struct tw_primary *p)
{
	struct tw_ctx *ctx;

	if (!p)
		return;
	ctx = p->ctx;
	if (ctx && ctx->shared) {
		tw__ctx_drive_enter(ctx);
		primary_free_driving(p);
		tw__ctx_drive_leave(ctx);
		return;
	}
	primary_free_driving(p);
}

static int check_config(const struct tw__pcfg *cfg, bool on_ctx, char *msg, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (on_ctx) {
		/* The backups are the context's. */
	} else if (!cfg->backups || !cfg->n_backups) {
		snprintf(msg, len, "no backups given");
		return -EINVAL;
	}
	if (!cfg->replicas || cfg->replicas > TW_PRIMARY_MAX_REPLICAS) {
		snprintf(msg, len, "replication factor %u out of range 1..%u", cfg->replicas,
			 TW_PRIMARY_MAX_REPLICAS);
		return -EINVAL;
	}
	if (cfg->segment_size < 4096 || cfg->segment_size > UINT32_MAX ||
	    (pg > 0 && cfg->segment_size % (size_t)pg)) {
		snprintf(msg, len, "segment size %zu must be a page multiple in [4 KiB, 4 GiB)",
			 cfg->segment_size);
		return -EINVAL;
	}
	if (!cfg->max_batch || !cfg->max_inflight || cfg->max_inflight > TW_PRIMARY_MAX_INFLIGHT) {
		snprintf(msg, len, "max_batch must be > 0 and max_inflight in 1..%u",
			 TW_PRIMARY_MAX_INFLIGHT);
		return -EINVAL;
	}
	for (size_t i = 0; !on_ctx && i < cfg->n_backups; i++) {
		if (!cfg->backups[i] || !cfg->backups[i][0] ||
		    strlen(cfg->backups[i]) >= TW_ADDR_MAX) {
			snprintf(msg, len, "backup address %zu is empty or too long", i);
			return -EINVAL;
		}
	}
	return 0;
}

/* Open as owner (epoch cfg->epoch, `incarnation`), first segment `start`, on `ctx` (NULL: a
 * private context of its own). creating: a plain open of a new log (probe every backup,
 * create_log on segment 0). coord (may be NULL): the coordinator handle the primary keeps
 * (primary_coord.c), set before the first segment opens; on failure it is not closed (the
 * caller's). */
int tw__primary_open_as(struct tw_ctx *ctx, const struct tw__pcfg *cfg, uint64_t incarnation,
		    uint32_t start, bool creating, struct tw_coord *coord, struct tw_primary **out,
		    char *errmsg_out, size_t errmsg_len)
{
	struct tw_primary *p;
	char msg[512];
	uint64_t rec_cap;
	struct pseg *s0 = NULL;
	bool driving = false;
	size_t nbk;
	int rc;

	if (!cfg || !out) {
		set_errmsg(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	rc = check_config(cfg, ctx != NULL, msg, sizeof(msg));
	if (rc < 0) {
		tw_log_error("primary: %s", msg);
		set_errmsg(errmsg_out, errmsg_len, msg);
		return rc;
	}
	nbk = ctx ? ctx->nbk : cfg->n_backups;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	p->coord = coord;
	p->r = cfg->replicas;
	/* A shared context always has its progress thread: its logs are in async mode. */
	p->threaded = ctx || cfg->mode == TW_PRIMARY_ASYNC;
	p->mode_ops = mode_ops(p->threaded);
	p->cfg.mode = p->threaded ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	p->incarnation = incarnation;
	p->op_cb = tw__primary_op_done;
	p->creating = creating;
	if (getrandom(&p->seed_ctr, sizeof(p->seed_ctr), 0) != (ssize_t)sizeof(p->seed_ctr))
		p->seed_ctr = tw_now_ns() ^ ((uint64_t)getpid() << 32) ^ incarnation;
	p->seg_base = start;
	if (p->threaded) {
		pthread_mutexattr_t ma;

		/* Adaptive: appending threads hold it for a copy of one entry; a contender spins
		 * briefly instead of sleeping in the kernel (docs/primary.md, "Appends from many
		 * threads"). */
		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
		pthread_mutex_init(&p->lock, &ma);
		pthread_mutexattr_destroy(&ma);
		pthread_cond_init(&p->cv_app, NULL);
	}
	/* With a coordinator, room for the backups registered after the open (tw__pcoord_refresh;
	 * never moved: the context's bk[] has the same room). */
	p->bk_cap = nbk + (coord ? PCOORD_EXTRA : 0);
	p->bk = calloc(p->bk_cap ? p->bk_cap : 1, sizeof(*p->bk));
	p->nslots = cfg->max_inflight;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	p->pops = calloc((size_t)p->nslots * p->r, sizeof(*p->pops));
	rec_cap = 1024;
	while (rec_cap < (uint64_t)cfg->max_batch * (cfg->max_inflight + 1) * 2)
		rec_cap *= 2;
	p->recs = calloc(rec_cap, sizeof(*p->recs));
	p->next_calls = calloc(p->r, sizeof(*p->next_calls));
	p->rec_mask = rec_cap - 1;
	if (!ctx && cfg->provider)
		p->prov_copy = strdup(cfg->provider);
	if (!p->bk || !p->slots || !p->pops || !p->recs || !p->next_calls ||
	    (!ctx && cfg->provider && !p->prov_copy)) {
		p->coord = NULL;
		primary_free(p);
		set_errmsg(errmsg_out, errmsg_len, "out of memory");
		return -ENOMEM;
	}
	p->cfg.backups = NULL; /* borrowed for the call: the addresses live in p->bk[].addr */
	p->cfg.zones = NULL;   /* ... and the zones in p->bk[].zone */
	p->cfg.coordinator = NULL;
	p->cfg.provider = ctx ? ctx->cfg.provider : p->prov_copy;
	p->cfg.key_file = NULL; /* not kept: read once, by the context */
	if (ctx) {
		/* The transport is the context's. */
		p->cfg.busy_poll = ctx->cfg.busy_poll;
		p->cfg.node_id = ctx->node_id;
		p->cfg.op_timeout_ms = ctx->cfg.op_timeout_ms;
		p->cfg.rpc_timeout_ms = ctx->cfg.rpc_timeout_ms;
		p->cfg.connect_timeout_ms = ctx->cfg.connect_timeout_ms;
		p->cfg.n_backups = ctx->nbk;
	}
	for (unsigned i = 0; i < p->nslots; i++) {
		p->slots[i].p = p;
		p->slots[i].ops = &p->pops[(size_t)i * p->r];
	}

	if (!ctx) {
		struct tw_ctx_config cc;

		tw_ctx_config_init(&cc);
		cc.backups = cfg->backups;
		cc.n_backups = cfg->n_backups;
		cc.zones = cfg->zones;
		cc.provider = cfg->provider;
		cc.key_file = cfg->key_file;
		cc.busy_poll = cfg->busy_poll;
		cc.node_id = cfg->node_id;
		cc.op_timeout_ms = cfg->op_timeout_ms;
		cc.rpc_timeout_ms = cfg->rpc_timeout_ms;
		cc.connect_timeout_ms = cfg->connect_timeout_ms;
		cc.arena_size = cfg->arena_size;
		/* A private context: this log's alone, closed with it (the handshake RPCs count in
		 * its statistics, its RPC clients carry its incarnation). */
		rc = tw__ctx_create(&cc, false, cfg->max_inflight + 32, coord ? PCOORD_EXTRA : 0,
				&p->ctx);
		if (p->ctx) {
			p->ctx->owner = p;
			p->fab = p->ctx->fab;
		}
		if (rc < 0 && p->ctx)
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", p->ctx->errmsg);
		/* (tw__ctx_create connected before knowing its owner: stamp the incarnation now.) */
		for (size_t i = 0; rc == 0 && i < p->ctx->nbk; i++)
			if (p->ctx->bk[i].peer.rpc)
				tw__rpc_client_set_incarnation(p->ctx->bk[i].peer.rpc, incarnation);
	} else {
		p->ctx = ctx;
		p->fab = ctx->fab;
		tw__ctx_drive_enter(ctx);
		driving = true;
	}
	p->nbk = p->ctx ? p->ctx->nbk : 0; /* (0 when the context failed half-way) */
	for (size_t i = 0; i < p->nbk; i++) {
		struct cbackup *c = &p->ctx->bk[i];

		p->bk[i].p = p;
		p->bk[i].c = c;
		p->bk[i].idx = (unsigned)i;
		p->bk[i].gen = c->peer.gen;
		snprintf(p->bk[i].addr, sizeof(p->bk[i].addr), "%s", c->peer.addr);
		snprintf(p->bk[i].zone, sizeof(p->bk[i].zone), "%s", c->zone);
	}
	/* In the context's list from now on: a channel lost during the open reaches it. */
	if (rc == 0)
		rc = tw__ctx_attach(p->ctx, p);
	if (rc == 0)
		rc = tw__pctl_check_backups(p);
	if (rc == 0 && creating)
		rc = tw__pctl_probe_new_log(p);
	if (rc == 0)
		rc = seg_new(p, start, &s0);
	if (rc == 0) {
		rc = tw__pctl_open_segment(p, s0);
		if (rc < 0) {
			seg_free(p, s0);
			s0 = NULL;
		}
		/* A backup that closed our connection during the open may have done so because
		 * another owner fenced the log meanwhile (a racing takeover): say so, as
		 * tw__primary_fail does once the log is open. */
		if (rc == -TW_ENOBACKUP) {
			char taken[sizeof(p->errmsg)];

			if (tw__pctl_taken_over(p, taken, sizeof(taken)) == 1) {
				snprintf(p->errmsg, sizeof(p->errmsg), "%s", taken);
				rc = -TW_EFENCED;
			}
		}
	}
	p->creating = false;
	if (rc == 0) {
		rc = seg_push(p, s0);
		if (rc < 0) {
			seg_free(p, s0);
		} else {
			PSTAT_ADD(p, segments, 1);
			preopen_start(p, false);
		}
	}
	if (rc == 0 && p->threaded && !ctx) {
		/* A private context's thread starts here; it serves the log once RUNNING. */
		rc = tw__ctx_start(p->ctx);
		if (rc < 0)
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", p->ctx->errmsg);
	}
	if (rc == 0) {
		tw__primary_lock(p);
		tw__primary_set_state(p, PSTATE_RUNNING);
		tw__primary_unlock(p);
		if (p->threaded && !ctx)
			tw__fab_wakeup(p->fab); /* its first pass may have found it OPENING */
	}
	if (rc < 0) {
		if (!p->errmsg[0])
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", tw_strerror(rc));
		/* An existing log is an expected answer (the caller takes it over): not an error. */
		tw__log(rc == -TW_EEXIST ? TW_DIAG_INFO : TW_DIAG_ERROR, "primary: open log %llu "
		       "failed: %s", (unsigned long long)cfg->log_id, p->errmsg);
		set_errmsg(errmsg_out, errmsg_len, p->errmsg);
		p->coord = NULL;
		if (driving) {
			primary_free_driving(p);
			tw__ctx_drive_leave(ctx);
		} else {
			primary_free(p);
		}
		return rc;
	}
	if (driving)
		tw__ctx_drive_leave(ctx);
	tw_log_info("primary: log %llu open at epoch %llu (incarnation %016llx), first segment %u",
		    (unsigned long long)p->cfg.log_id, (unsigned long long)p->cfg.epoch,
		    (unsigned long long)p->incarnation, start);
	*out = p;
	return 0;
}

static int open_private(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, bool take,
			tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
			struct tw_primary **out, char *errmsg_out, size_t errmsg_len);

int tw_primary_open(const struct tw_ctx_config *transport, const struct tw_primary_config *config,
		    struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	return open_private(transport, config, false, NULL, NULL, NULL, out, errmsg_out,
			    errmsg_len);
}

/* The arguments of tw_primary_open_on and tw_primary_takeover_on: `what` the call does, for
 * the message when it comes from a callback on ctx's progress thread (it would wait for itself). */
static int open_check(const struct tw_ctx *ctx, const struct tw_primary_config *cfg,
		      struct tw_primary **out, const char *what, struct tw__pcfg *pc,
		      char *errmsg_out, size_t errmsg_len)
{
	if (!ctx || !cfg || !out) {
		set_errmsg(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	*out = NULL;
	if (tw__ctx_on_thread(ctx)) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "cannot %s from a callback of a log on the "
				 "same context (it would wait for itself)", what);
		return -EDEADLK;
	}
	return tw__pcfg_make(pc, NULL, cfg, errmsg_out, errmsg_len); /* the context's transport */
}

int tw_primary_open_on(struct tw_ctx *ctx, const struct tw_primary_config *config,
		       struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc;
	int rc = open_check(ctx, config, out, "open a log", &pc, errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	return tw__primary_open_as(ctx, &pc, tw__new_incarnation(), 0, true, NULL, out, errmsg_out,
			       errmsg_len);
}

static int takeover(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
		    tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
		    struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result local, *res = res_out ? res_out : &local;
	struct tw_recover_config rc_cfg;
	uint64_t inc = tw__new_incarnation(), next = 0;
	const char *addrs[TW_RECOVER_MAX_BACKUPS];
	size_t nbk = ctx ? ctx->nbk : cfg->n_backups;
	char msg[512];
	int rc;

	rc = check_config(cfg, ctx != NULL, msg, sizeof(msg));
	if (rc == 0 && nbk > TW_RECOVER_MAX_BACKUPS) {
		snprintf(msg, sizeof(msg), "at most %u backups", TW_RECOVER_MAX_BACKUPS);
		rc = -EINVAL;
	}
	if (rc < 0) {
		set_errmsg(errmsg_out, errmsg_len, msg);
		return rc;
	}
	tw_recover_config_init(&rc_cfg);
	rc_cfg.log_id = cfg->log_id;
	rc_cfg.epoch = cfg->epoch;
	if (ctx) {
		for (size_t i = 0; i < nbk; i++)
			addrs[i] = ctx->bk[i].peer.addr;
		rc_cfg.backups = addrs;
		rc_cfg.n_backups = nbk;
		tw__recover_config_link(&rc_cfg, ctx->cfg.provider, ctx->cfg.busy_poll,
					ctx->cfg.connect_timeout_ms);
	} else {
		rc_cfg.backups = cfg->backups;
		rc_cfg.n_backups = cfg->n_backups;
		tw__recover_config_link(&rc_cfg, cfg->provider, cfg->busy_poll,
					cfg->connect_timeout_ms);
	}
	/* 1. fence with a new epoch as incarnation `inc`, 2. recover (every entry to the
	 * caller), 3. continue as that same owner after everything the backups ever held. The
	 * recovery runs on connections of its own, not the context's. */
	rc = tw__recover_as(&rc_cfg, inc, on_entry, arg, res, &next, errmsg_out, errmsg_len);
	if (rc < 0)
		return rc;
	return tw__primary_continue(ctx, cfg, inc, next, res, NULL, out, errmsg_out, errmsg_len);
}

int tw__primary_continue(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
			 uint64_t incarnation, uint64_t next, const struct tw_recover_result *res,
			 struct tw_coord *coord, struct tw_primary **out, char *errmsg_out,
			 size_t errmsg_len)
{
	struct tw__pcfg pc = *cfg;
	char msg[96];
	int rc;

	if (next > UINT32_MAX - 1) {
		snprintf(msg, sizeof(msg), "log %llu has used every segment id",
			 (unsigned long long)cfg->log_id);
		set_errmsg(errmsg_out, errmsg_len, msg);
		return -ERANGE;
	}
	pc.epoch = res->epoch;
	rc = tw__primary_open_as(ctx, &pc, incarnation, (uint32_t)next, false, coord, out,
				 errmsg_out, errmsg_len);
	if (rc == 0)
		tw_log_info("primary: log %llu taken over at epoch %llu: %llu entries recovered, "
			    "continuing at segment %llu", (unsigned long long)cfg->log_id,
			    (unsigned long long)res->epoch, (unsigned long long)res->entries,
			    (unsigned long long)next);
	return rc;
}

/* A log on a private context: tw_primary_open (take false) and tw_primary_takeover. */
static int open_private(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, bool take,
			tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
			struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc, *cfg = &pc;
	int rc = out && transport ? tw__pcfg_make(&pc, transport, config, errmsg_out, errmsg_len)
				  : open_args_missing(errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	*out = NULL;
	if (cfg->coordinator && cfg->coordinator[0])
		return tw__pcoord_open(cfg, take, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
	if (take)
		return takeover(NULL, cfg, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
	return tw__primary_open_as(NULL, cfg, tw__new_incarnation(), 0, true, NULL, out, errmsg_out,
				   errmsg_len);
}

int tw_primary_takeover(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, tw_recover_entry_fn on_entry,
			void *arg, struct tw_recover_result *res_out, struct tw_primary **out,
			char *errmsg_out, size_t errmsg_len)
{
	return open_private(transport, config, true, on_entry, arg, res_out, out, errmsg_out,
			    errmsg_len);
}

int tw_primary_takeover_on(struct tw_ctx *ctx, const struct tw_primary_config *config,
			   tw_recover_entry_fn on_entry, void *arg,
			   struct tw_recover_result *res_out, struct tw_primary **out,
			   char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc;
	int rc = open_check(ctx, config, out, "take a log over", &pc, errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	return takeover(ctx, &pc, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
}

int tw_primary_trim(struct tw_primary *p, uint32_t below_segment)
{
	bool driving;
	uint64_t n = 0;
	int rc, released;

	if (!p)
		return -EINVAL;
	tw__primary_lock(p);
	if (p->cur && below_segment > p->cur->id)
		below_segment = p->cur->id;
	tw__primary_unlock(p);
	released = tw_primary_unload(p, below_segment);
	if (released < 0)
		return released;
	if (pserved(p)) {
		/* The control plane belongs to the progress thread: hand the RPCs to it. */
		tw__primary_lock(p);
		if (below_segment > p->free_req)
			p->free_req = below_segment;
		tw__primary_unlock(p);
		tw__fab_wakeup(p->fab);
		return released;
	}
	/* Not served (sync mode, or finished): this thread sends them; on a shared context under
	 * the drive, as the progress thread goes on serving the other logs (unless this is that
	 * thread: a callback of another log). */
	driving = p->ctx->shared && !tw__ctx_on_thread(p->ctx);
	if (driving)
		tw__ctx_drive_enter(p->ctx);
	rc = tw__pctl_free(p, below_segment, &n);
	if (driving)
		tw__ctx_drive_leave(p->ctx);
	return rc < 0 ? rc : released;
}

uint64_t tw_primary_epoch(const struct tw_primary *p)
{
	return p ? p->cfg.epoch : 0;
}

uint32_t tw_primary_first_segment(const struct tw_primary *p)
{
	return p ? p->seg_base : 0;
}

static int check_len(struct tw_primary *p, uint32_t len)
{
	if (len == 0 || (size_t)len + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > p->cfg.segment_size)
		return -EINVAL;
	return 0;
}

/* Appends an entry to segment s (the caller made room for it) and records it for its callback:
 * both modes, the async one under p->lock. */
static int append_rec(struct tw_primary *p, struct pseg *s, const void *data, uint32_t len,
		      tw_append_cb cb, void *arg, uint64_t *lsn_out, uint64_t *idx_out)
{
	struct prec *r;
	size_t off;
	int rc = tw_log_writer_append(&s->w, data, len, &off);

	if (rc < 0)
		return rc;
	r = &p->recs[p->rec_head & p->rec_mask];
	r->cb = cb;
	r->arg = arg;
	r->lsn = (uint64_t)s->id << 32 | off;
	r->len = len;
	*idx_out = p->rec_head++;
	PSTAT_ADD(p, appends, 1);
	PSTAT_ADD(p, bytes, len);
	if (lsn_out)
		*lsn_out = r->lsn;
	return 0;
}

static bool on_progress_thread(const struct tw_primary *p)
{
	return tw__ctx_on_thread(p->ctx); /* any log of the context: the thread serves them all */
}

/* A batch stopped at entry `from`: the entries not appended get TW_LSN_NONE. */
static void batch_unfilled(uint64_t *lsns_out, size_t from, size_t n)
{
	for (size_t i = from; lsns_out && i < n; i++)
		lsns_out[i] = TW_LSN_NONE;
}

/* Sync mode: make room for one entry (back-pressure, rollover) and append it; nothing is
 * sealed here (sync_kick). */
static int sync_room_append(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
			    void *arg, uint64_t *lsn_out, uint64_t *idx_out)
{
	struct pseg *s;
	int rc;

	if (p->err)
		return p->err;
	if (pstate(p) != PSTATE_RUNNING)
		return -TW_ECLOSED; /* finishing (a callback during the last drain) */
	/* Back-pressure: at most max_batch entries wait while all slots are busy. */
	while (!p->err && (pending_entries(p) >= p->cfg.max_batch ||
			   p->rec_head - p->rec_tail > p->rec_mask)) {
		if (slot_free(p))
			seal_post(p);
		else
			drive(p, PWAIT_SLICE_MS);
	}
	if (p->err)
		return p->err;
	s = p->cur;
	if (!tw_log_writer_fits(&s->w, len)) {
		rc = roll(p);
		if (rc < 0)
			return rc;
		s = p->cur;
	}
	return append_rec(p, s, data, len, cb, arg, lsn_out, idx_out);
}

/* Sync mode, after an append (or a batch of them): batching for a caller that appends
 * asynchronously and drives the log itself. An entry goes out at once when no write is in
 * flight (an idle log: no added latency); under load the entries wait until a whole batch
 * (max_batch) is there, which then takes the first free slot (polled for without blocking when
 * none looks free). Full writes, as a bare benchmark posts them, instead of one entry per free
 * slot (docs/benchmarks.md, "Caller-driven appends"). tw_primary_append, _flush and _progress
 * seal whatever waits. */
static void sync_kick(struct tw_primary *p)
{
	if (p->slot_head == p->slot_tail || pending_entries(p) >= p->cfg.max_batch) {
		if (!slot_free(p))
			drive(p, 0);
		if (slot_free(p))
			seal_post(p);
	}
}

/* Sync mode: make room and append. */
static int append_sync_mode(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
			    void *arg, uint64_t *lsn_out, uint64_t *idx_out)
{
	int rc = sync_room_append(p, data, len, cb, arg, lsn_out, idx_out);

	if (rc < 0)
		return rc;
	sync_kick(p);
	return 0;
}

/* Sync mode: every entry appended as by append_sync_mode, the batching rule applied once at the
 * end (the batch goes out as few writes as back-pressure allows). */
static int append_batch_sync_mode(struct tw_primary *p, const struct iovec *entries, size_t n,
				  tw_append_cb cb, void *arg, uint64_t *lsns_out)
{
	uint64_t lsn, idx;

	for (size_t i = 0; i < n; i++) {
		int rc = sync_room_append(p, entries[i].iov_base, (uint32_t)entries[i].iov_len,
					  i + 1 == n ? cb : NULL, arg, &lsn, &idx);

		if (rc < 0) {
			batch_unfilled(lsns_out, i, n);
			if (i)
				sync_kick(p); /* what was copied goes out as usual */
			return rc;
		}
		if (lsns_out)
			lsns_out[i] = lsn;
	}
	sync_kick(p);
	return 0;
}

/* An appender's state across the waits of async_room (async mode). */
struct room_wait {
	struct pwaiter me; /* in the room queue while it waits for back-pressure */
	bool me_init;
};

/*
 * Async mode, lock held: wait until an entry of `len` bytes can be appended to p->cur now
 * (back-pressure, rollover), dropping the lock while it waits. Returns 0 (lock held, room for
 * it), or an error (lock held): the primary's, -TW_ECLOSED, -EAGAIN (a callback on the progress
 * thread that would have to wait), -ENOSPC (the rollover asked for found the arena exhausted).
 */
static int async_room(struct tw_primary *p, uint32_t len, struct room_wait *rw)
{
	bool asked = false;
	uint64_t gen = 0;

	for (;;) {
		if (p->err || pstate(p) != PSTATE_RUNNING)
			return p->err ? p->err : -TW_ECLOSED;
		if (p->need_roll || pending_entries(p) >= p->cfg.max_batch ||
		    p->rec_head - p->rec_tail > p->rec_mask) {
			if (on_progress_thread(p))
				return -EAGAIN; /* a callback appending: would wait for ourselves */
			if (p->pt_idle) {
				p->pt_idle = false;
				pthread_mutex_unlock(&p->lock);
				tw__fab_wakeup(p->fab);
				pthread_mutex_lock(&p->lock);
				continue;
			}
			if (p->need_roll) { /* rare: once per segment; the roll wakes everyone */
				p->app_waiting++;
				pthread_cond_wait(&p->cv_app, &p->lock);
				p->app_waiting--;
				continue;
			}
			/* Back-pressure: queue up and sleep until a seal or an acknowledgement hands
			 * us the turn (room_wake_one), or a failure wakes everyone (wake_apps). */
			if (!rw->me_init) {
				pthread_cond_init(&rw->me.cv, NULL);
				rw->me_init = true;
			}
			rw->me.next = NULL;
			rw->me.queued = true;
			if (p->room_tail)
				p->room_tail->next = &rw->me;
			else
				p->room_head = &rw->me;
			p->room_tail = &rw->me;
			while (rw->me.queued)
				pthread_cond_wait(&rw->me.cv, &p->lock);
			continue;
		}
		if (!tw_log_writer_fits(&p->cur->w, len)) {
			if (on_progress_thread(p))
				return -EAGAIN;
			if (asked && p->roll_gen != gen && p->roll_rc == -ENOSPC)
				return -ENOSPC; /* the rollover we asked for found the arena exhausted */
			asked = true;
			gen = p->roll_gen;
			p->need_roll = true;
			p->pt_idle = false;
			pthread_mutex_unlock(&p->lock);
			tw__fab_wakeup(p->fab);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		return 0;
	}
}

/* Async mode, lock held, after appending: wake the progress thread if it sleeps idle. Returns
 * whether to ring it (after the unlock). */
static bool async_wake_needed(struct tw_primary *p)
{
	if (!p->pt_idle)
		return false;
	p->pt_idle = false;
	PSTAT_ADD(p, wakeups, 1);
	return true;
}

/* Async mode: copy under the lock and hand over to the progress thread. */
static int append_async_mode(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
			     void *arg, uint64_t *lsn_out, uint64_t *idx_out)
{
	struct room_wait rw = { .me_init = false };
	bool wake = false;
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = async_room(p, len, &rw);
	if (rw.me_init)
		pthread_cond_destroy(&rw.me.cv); /* dequeued: nobody signals it any more */
	if (rc == 0)
		rc = append_rec(p, p->cur, data, len, cb, arg, lsn_out, idx_out);
	if (rc == 0)
		wake = async_wake_needed(p);
	pthread_mutex_unlock(&p->lock);
	if (wake)
		tw__fab_wakeup(p->fab);
	return rc;
}

/* Async mode: the whole batch in one lock round, released only where an entry must wait
 * (back-pressure, rollover); the progress thread is rung once. */
static int append_batch_async_mode(struct tw_primary *p, const struct iovec *entries, size_t n,
				   tw_append_cb cb, void *arg, uint64_t *lsns_out)
{
	struct room_wait rw = { .me_init = false };
	bool wake = false;
	uint64_t lsn, idx;
	size_t i;
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < n; i++) {
		uint32_t len = (uint32_t)entries[i].iov_len;

		rc = async_room(p, len, &rw);
		if (rc == 0)
			rc = append_rec(p, p->cur, entries[i].iov_base, len, i + 1 == n ? cb : NULL,
					arg, &lsn, &idx);
		if (rc < 0)
			break;
		if (lsns_out)
			lsns_out[i] = lsn;
	}
	if (rw.me_init)
		pthread_cond_destroy(&rw.me.cv);
	if (i)
		wake = async_wake_needed(p); /* what was copied goes out as usual */
	pthread_mutex_unlock(&p->lock);
	if (wake)
		tw__fab_wakeup(p->fab);
	if (rc < 0)
		batch_unfilled(lsns_out, i, n);
	return rc;
}

/* A caller of tw_primary_append waiting for its entry's acknowledgement. */
struct sync_wait {
	struct tw_primary *p;
	int status;
	struct pwaiter wt; /* async mode: woken alone by complete_recs_async */
};

static void sync_cb(void *arg, int status, uint64_t lsn)
{
	struct sync_wait *w = arg;

	(void)lsn;
	w->status = status;
}

/* Async mode: progress thread, lock not held. complete_recs_async signals the waiter once
 * rec_tail moved past the entry (the waiter cannot return before that). */
static void sync_cb_queue(void *arg, int status, uint64_t lsn)
{
	struct sync_wait *w = arg;

	sync_cb(arg, status, lsn);
	w->wt.next = w->p->acked;
	w->p->acked = &w->wt;
}

/*
 * Sync mode, before a caller's append or flush returns: nothing runs until its next call, so
 * the newest acknowledged position must be on its way to the replicas (readers of the live log
 * wait for it). When a replica's SetAcked rounds were all in flight at the last reap, drive until an
 * answer sends it: about one round trip, bounded by the RPC timeout.
 */
static void settle_published(struct tw_primary *p)
{
	uint64_t end = tw_now_ns() + (uint64_t)p->ctx->cfg.rpc_timeout_ms * 1000000u;

	while (tw__packed_capped(p) && !p->err && tw_now_ns() < end)
		drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
}

/* Sync mode: drive until the entry is acknowledged. */
static int append_wait_sync_mode(struct tw_primary *p, const void *data, uint32_t len,
				 uint64_t *lsn_out)
{
	struct sync_wait w = { .p = p };
	uint64_t idx;
	int rc = append_sync_mode(p, data, len, sync_cb, &w, lsn_out, &idx);

	if (rc < 0)
		return rc;
	while (p->rec_tail <= idx)
		drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
	settle_published(p);
	return w.status;
}

/* Async mode: sleep until the progress thread acknowledged the entry. */
static int append_wait_async_mode(struct tw_primary *p, const void *data, uint32_t len,
				  uint64_t *lsn_out)
{
	struct sync_wait w = { .p = p };
	uint64_t idx;
	int rc;

	if (on_progress_thread(p))
		return -EDEADLK; /* from a callback: would wait for itself */
	pthread_cond_init(&w.wt.cv, NULL);
	rc = append_async_mode(p, data, len, sync_cb_queue, &w, lsn_out, &idx);
	if (rc < 0) {
		pthread_cond_destroy(&w.wt.cv);
		return rc;
	}
	/* Our own condition variable: an acknowledgement of other threads' entries does not
	 * wake us (docs/primary.md, "Appends from many threads"). */
	pthread_mutex_lock(&p->lock);
	while (p->rec_tail <= idx)
		pthread_cond_wait(&w.wt.cv, &p->lock);
	rc = w.status;
	pthread_mutex_unlock(&p->lock);
	pthread_cond_destroy(&w.wt.cv);
	return rc;
}

static int flush_sync_mode(struct tw_primary *p)
{
	uint64_t target = p->rec_head;

	while (p->rec_tail < target)
		drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
	settle_published(p);
	return p->err;
}

static int flush_async_mode(struct tw_primary *p)
{
	uint64_t target;
	int rc;

	if (on_progress_thread(p))
		return -EDEADLK; /* from a callback: would wait for itself */
	pthread_mutex_lock(&p->lock);
	target = p->rec_head;
	if (p->pt_idle && p->rec_tail < target) {
		p->pt_idle = false;
		pthread_mutex_unlock(&p->lock);
		tw__fab_wakeup(p->fab);
		pthread_mutex_lock(&p->lock);
	}
	while (p->rec_tail < target) {
		p->app_waiting++;
		pthread_cond_wait(&p->cv_app, &p->lock);
		p->app_waiting--;
	}
	rc = p->err;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

static const struct pmode_ops sync_ops = {
	.append = append_sync_mode,
	.append_batch = append_batch_sync_mode,
	.append_wait = append_wait_sync_mode,
	.flush = flush_sync_mode,
	.complete = complete_recs_sync,
};

static const struct pmode_ops async_ops = {
	.append = append_async_mode,
	.append_batch = append_batch_async_mode,
	.append_wait = append_wait_async_mode,
	.flush = flush_async_mode,
	.complete = complete_recs_async,
};

static const struct pmode_ops *mode_ops(bool threaded)
{
	return threaded ? &async_ops : &sync_ops;
}

int tw_primary_append_async(struct tw_primary *p, const void *data, uint32_t len,
			    tw_append_cb cb, void *arg, uint64_t *lsn_out)
{
	uint64_t idx;

	if (!p || (!data && len))
		return -EINVAL;
	if (check_len(p, len) < 0)
		return -EINVAL;
	return p->mode_ops->append(p, data, len, cb, arg, lsn_out, &idx);
}

int tw_primary_append_batch(struct tw_primary *p, const struct iovec *entries, size_t n,
			    tw_append_cb cb, void *arg, uint64_t *lsns_out)
{
	/* Every length first: a bad one refuses the whole batch before anything is copied. */
	if (!p || !entries || !n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!entries[i].iov_base || entries[i].iov_len > UINT32_MAX ||
		    check_len(p, (uint32_t)entries[i].iov_len) < 0)
			return -EINVAL;
	return p->mode_ops->append_batch(p, entries, n, cb, arg, lsns_out);
}

int tw_primary_append(struct tw_primary *p, const void *data, uint32_t len, uint64_t *lsn_out)
{
	if (!p || !data)
		return -EINVAL;
	if (check_len(p, len) < 0)
		return -EINVAL;
	return p->mode_ops->append_wait(p, data, len, lsn_out);
}

int tw_primary_flush(struct tw_primary *p)
{
	if (!p)
		return -EINVAL;
	return p->mode_ops->flush(p);
}

int tw_primary_progress(struct tw_primary *p, int timeout_ms)
{
	if (!p || p->threaded)
		return -EINVAL;
	return drive(p, timeout_ms);
}

int tw_primary_read_pos(struct tw_primary *p, struct tw_pos pos, const void **data_out,
			uint32_t *len_out)
{
	struct tw_entry_iter it;
	const void *payload;
	struct pseg *s;
	size_t off;
	uint32_t len;
	int rc = 0;

	if (!p || !data_out || !len_out)
		return -EINVAL;
	tw__primary_lock(p);
	if (pos.segment < p->seg_base || pos.segment - p->seg_base >= p->nsegs ||
	    !p->segs[pos.segment - p->seg_base]) {
		rc = -TW_ENOTFOUND;
		goto out;
	}
	s = p->segs[pos.segment - p->seg_base];
	/* The format's own iterator checks the header (type, flags, header check, length within
	 * what was written); a position that is not the start of a data entry is not found, and
	 * the payload CRC guards against a position that only looks like one. */
	it.buf = s->buf;
	it.len = s->w.pos;
	it.pos = pos.offset;
	if (pos.offset >= it.len || tw_entry_next(&it, &payload, &len, &off) != 1 ||
	    off != pos.offset ||
	    tw_crc32c(0, payload, len) != tw_load_le32(s->buf + off + 8)) {
		rc = -TW_ENOTFOUND;
		goto out;
	}
	*data_out = payload;
	*len_out = len;
out:
	tw__primary_unlock(p);
	return rc;
}

int tw_primary_read(struct tw_primary *p, uint64_t lsn, const void **data_out, uint32_t *len_out)
{
	return tw_primary_read_pos(p, tw_lsn_to_pos(lsn), data_out, len_out);
}

int tw_primary_unload(struct tw_primary *p, uint32_t below_segment)
{
	struct pseg *now = NULL;
	bool handed;
	int n = 0;

	if (!p)
		return -EINVAL;
	tw__primary_lock(p);
	handed = pserved(p); /* the progress thread frees them */
	/* Segments below the current one are closed: the current one changes only after the
	 * close of its predecessor succeeded. (released counts from seg_base.) */
	if (p->cur && below_segment > p->cur->id)
		below_segment = p->cur->id;
	below_segment = below_segment > p->seg_base ? below_segment - p->seg_base : 0;
	for (; p->released < below_segment; p->released++) {
		struct pseg *s = p->segs[p->released];

		p->segs[p->released] = NULL;
		if (!s)
			continue;
		if (handed) {
			s->next_free = p->free_list;
			p->free_list = s;
		} else {
			s->next_free = now;
			now = s;
		}
		n++;
	}
	tw__primary_unlock(p);
	if (n && handed)
		tw__fab_wakeup(p->fab);
	while (now) {
		struct pseg *nx = now->next_free;

		seg_free(p, now);
		now = nx;
	}
	return n;
}

uint64_t tw_primary_acked_lsn(struct tw_primary *p)
{
	return p ? __atomic_load_n(&p->acked_lsn, __ATOMIC_ACQUIRE) : 0;
}

const char *tw_primary_errmsg(const struct tw_primary *p)
{
	if (!p)
		return "no primary";
	return p->errmsg[0] ? p->errmsg : "no error";
}

const char *tw_primary_replica_addr(const struct tw_primary *p, unsigned i)
{
	if (!p || !p->cur || i >= p->cur->nrep)
		return NULL;
	return p->bk[p->cur->rep[i]].addr;
}

static void primary_stats(struct tw_primary *p, struct tw_primary_stats *out)
{
	const uint64_t *src = (const uint64_t *)&p->st;
	uint64_t *dst = (uint64_t *)out;

	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	tw__arena_get_stats(p->ctx->arena, &out->arena);
}

void tw_primary_get_stats_sized(struct tw_primary *p, struct tw_primary_stats *out, size_t size)
{
	struct tw_primary_stats full;

	primary_stats(p, &full);
	tw__out_copy(out, size, &full, sizeof(full));
}

int tw_primary_finish(struct tw_primary *p)
{
	bool driving = false;
	int rc, rc2;

	if (!p)
		return -EINVAL;
	if (pstate(p) >= PSTATE_FINISHING)
		return p->finish_rc; /* again, or from a callback during the last drain (sync) */
	rc = tw_primary_flush(p);
	if (pserved(p)) {
		/* The context's thread lets go of the log once nothing is in flight: STOPPING
		 * refuses appends, the thread moves it on to FINISHING. */
		pthread_mutex_lock(&p->lock);
		tw__primary_set_state(p, PSTATE_STOPPING);
		pthread_mutex_unlock(&p->lock);
		tw__fab_wakeup(p->fab);
		pthread_mutex_lock(&p->lock);
		while (pstate(p) != PSTATE_FINISHING)
			pthread_cond_wait(&p->cv_app, &p->lock);
		pthread_mutex_unlock(&p->lock);
		if (p->ctx->shared) {
			tw__ctx_drive_enter(p->ctx); /* the last steps below drive the fabric */
			driving = true;
		} else {
			tw__ctx_stop(p->ctx);
		}
	} else {
		tw__primary_set_state(p, PSTATE_FINISHING); /* sync: no appends from now on */
	}
	if (!p->err && p->cur) {
		drain(p);
		rc2 = tw__pctl_close_segment(p, p->cur);
		if (rc2 < 0 && !rc)
			rc = rc2;
		if (!p->err && p->rr_dirty)
			tw__pfo_background(p, true); /* no later driver round: copy what is owed now */
	}
	if (p->next) {
		tw__pctl_preopen_abandon(p, p->next);
		seg_free(p, p->next);
		p->next = NULL;
	}
	if (driving)
		tw__ctx_drive_leave(p->ctx);
	if (!rc)
		rc = p->err;
	p->finish_rc = rc;
	tw__primary_lock(p);
	tw__primary_set_state(p, PSTATE_FINISHED);
	tw__primary_unlock(p);
	return rc;
}

int tw_primary_close(struct tw_primary *p)
{
	int rc;

	if (!p)
		return 0;
	rc = tw_primary_finish(p);
	primary_free(p);
	return rc;
}
