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
 * entries wait, a slot is free and the primary is healthy). Returns the slot, or NULL when the
 * seal failed (the caller then fails the primary with *rc_out). */
struct pslot *tw__primary_seal_locked(struct tw_primary *p, int *rc_out)
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
	tw__primary_room_wake_one(p); /* back-pressure released (async mode; the queue is empty in sync) */
	return s;
}

/* Post a sealed write to every replica of its segment. Driver thread, lock not held. */
void tw__primary_post_slot(struct tw_primary *p, struct pslot *s, uint64_t n)
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
bool tw__primary_seal_ready(const struct tw_primary *p)
{
	return pending_entries(p) && slot_free(p) && !p->err && !p->need_roll && !p->fo_pending &&
	       tw__primary_batch_due(p);
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
	if (!n || p->err || !slot_free(p) || (ready && (p->need_roll || !tw__primary_batch_due(p)))) {
		tw__primary_unlock(p);
		return p->err;
	}
	s = tw__primary_seal_locked(p, &rc);
	tw__primary_unlock(p);
	if (!s) {
		tw__primary_fail(p, rc, "seal failed: %s", tw_strerror(rc));
		return p->err;
	}
	tw__primary_post_slot(p, s, n);
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
	if (p->fo_pending && !p->fo_running)
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
		more = p->slot_tail < p->slot_head || (p->err && p->rec_tail < p->rec_head);
		tw__primary_unlock(p);
		if (!more)
			break;
		tw__primary_drive(p, PWAIT_SLICE_MS);
	}
}
