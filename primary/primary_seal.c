/*
 * primary/primary_seal.c — sealing and posting: the waiting entries become one write (one
 * checksum entry closes them, tw_log_writer_seal), which takes a write slot and goes to every
 * replica of its segment; the driver's round (seal, poll, reap) and the drain. Driver thread.
 * See docs/primary.md, "Batching and pipelining".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "primary/primary_int.h"

/* Seal the waiting entries into one write (lock held in async mode; the caller checked that
 * entries wait, a slot is free and the primary is healthy): the slot is published (slot_head)
 * for the driver to post. Returns it, or NULL when the seal failed (the caller then fails the
 * primary with *rc_out). */
struct pslot *tw__primary_seal_locked(struct tw_primary *p, int *rc_out)
{
	struct pseg *seg = p->cur;
	uint64_t head = PLD(p->slot_head), rec_head = PLD(p->rec_head);
	struct pslot *s;
	size_t off, len;
	int rc = tw_log_writer_seal(&seg->w, &off, &len);

	if (rc < 0 || !len) {
		*rc_out = rc < 0 ? rc : -TW_EPROTO;
		return NULL;
	}
	s = &p->slots[head % p->nslots];
	s->seg = seg;
	s->off = off;
	s->len = len;
	s->remaining = 0; /* set when posted */
	s->rec_end = rec_head;
	s->nrec = rec_head - PLD(p->rec_sealed);
	s->repair = false;
	PST(p->rec_sealed, rec_head);
	PST(p->slot_head, head + 1); /* published: the slot's fields above are written */
	tw__primary_room_wake_one(p); /* back-pressure released (async mode; the queue is empty in sync) */
	return s;
}

/* Post one sealed write to every replica of its segment. Driver thread, lock not held. */
static void post_slot(struct tw_primary *p, struct pslot *s)
{
	struct pseg *seg = s->seg;
	uint64_t inflight = p->slot_posted - PLD(p->slot_tail);
	int rc;

	PSTAT_ADD(p, writes, 1);
	PSTAT_ADD(p, write_bytes, s->len);
	if (s->nrec > p->st.max_batch_seen)
		__atomic_store_n(&p->st.max_batch_seen, s->nrec, __ATOMIC_RELAXED);
	if (inflight > p->st.inflight_peak)
		__atomic_store_n(&p->st.inflight_peak, inflight, __ATOMIC_RELAXED);

	s->remaining = seg->nrep;
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

void tw__primary_post_pending(struct tw_primary *p)
{
	uint64_t head = PLD(p->slot_head);

	while (p->slot_posted < head) {
		struct pslot *s = &p->slots[p->slot_posted % p->nslots];

		if (p->err) {
			/* Failed log: nothing goes out; the reap fails its entries (repair + err). */
			s->remaining = 0;
			s->repair = true;
		} else if (PLD(p->fo_pending)) {
			return; /* suspended: posted after the failover (its copy covers them too) */
		}
		PST(p->slot_posted, p->slot_posted + 1);
		if (!p->err)
			post_slot(p, s);
	}
}

/* Whether waiting entries can be sealed now (lock held in async mode). */
bool tw__primary_seal_ready(const struct tw_primary *p)
{
	return pending_entries(p) && slot_free(p) && !p->err && !PLD(p->need_roll) &&
	       !PLD(p->fo_pending) && tw__primary_batch_due(p);
}

bool tw__primary_seal_by_appender(struct tw_primary *p)
{
	struct pslot *s;
	int rc = 0;

	/* Our rec_head store (append_rec), then the loads of slot_tail (batch_due) and pt_idle,
	 * all sequentially consistent: see PLD. */
	if (!tw__primary_seal_ready(p) || pstate(p) != PSTATE_RUNNING)
		return false;
	s = tw__primary_seal_locked(p, &rc);
	if (!s)
		return false; /* the progress thread's own seal meets the error and fails the log */
	if (!PLD(p->pt_idle))
		return false; /* awake: it posts on its next step */
	return __atomic_exchange_n(&p->pt_idle, false, __ATOMIC_SEQ_CST);
}

/* Seal the waiting entries into one write and post it to every replica. Driver thread, lock
 * not held; `ready`: only if seal_ready (the rollover seals while need_roll is set), checked
 * under the same lock as the seal. Writes sealed by appenders go out first, in order. Returns
 * 0 or a negative code (the primary is then failed). */
static int seal_post_if(struct tw_primary *p, bool ready)
{
	struct pslot *s;
	int rc = 0;

	if (ready && PLD(p->fo_pending))
		return p->err;
	if (PLD(p->fo_pending) && !p->fo_running)
		tw__pfo_run(p); /* a replica was lost: replace it before anything new goes out */
	if (PLD(p->fo_pending))
		return p->err;
	tw__primary_post_pending(p);
	/* Async mode: a look without the lock first; appenders seal whole batches themselves,
	 * so the lock is taken here only for what they leave (nothing in flight any more and
	 * a partial batch waits, or a batch they could not seal for want of a slot). */
	if (ready && p->threaded && !tw__primary_seal_ready(p))
		return p->err;
	tw__primary_lock(p);
	if (!pending_entries(p) || p->err || !slot_free(p) ||
	    (ready && (PLD(p->need_roll) || !tw__primary_batch_due(p)))) {
		tw__primary_unlock(p);
		return p->err;
	}
	s = tw__primary_seal_locked(p, &rc);
	tw__primary_unlock(p);
	if (!s) {
		tw__primary_fail(p, rc, "seal failed: %s", tw_strerror(rc));
		return p->err;
	}
	tw__primary_post_pending(p);
	return 0;
}

int tw__primary_seal_post(struct tw_primary *p)
{
	return seal_post_if(p, false);
}

/* Seal and post if seal_ready: one lock round for the check and the seal. */
void tw__primary_try_seal(struct tw_primary *p)
{
	seal_post_if(p, true);
}

/* One round of driver work: seal+post if possible, poll the fabric (blocking up to
 * timeout_ms), reap. Driver thread, lock not held. */
int tw__primary_drive(struct tw_primary *p, int timeout_ms)
{
	int rc;

	tw__primary_try_seal(p);
	rc = tw__fab_progress(p->fab, timeout_ms);
	if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIMEDOUT) {
		tw__primary_fail(p, rc, "fabric progress failed: %s: %s", tw_strerror(rc),
			     tw__fab_errmsg(p->fab));
	}
	if (PLD(p->fo_pending) && !p->fo_running)
		tw__pfo_run(p);
	rc = tw__primary_reap(p);
	tw__primary_try_seal(p);
	if (p->rr_dirty && !p->fo_running)
		tw__pfo_background(p, false);
	return rc;
}

/* Drive until every sealed write completed and was reaped. */
void tw__primary_drain(struct tw_primary *p)
{
	for (;;) {
		bool more;

		tw__primary_lock(p);
		more = PLD(p->slot_tail) < PLD(p->slot_head) ||
		       (p->err && PLD(p->rec_tail) < PLD(p->rec_head));
		tw__primary_unlock(p);
		if (!more)
			break;
		tw__primary_drive(p, PWAIT_SLICE_MS);
	}
}
