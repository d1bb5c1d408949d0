/*
 * primary/primary_ack.c — acknowledgements: the completion of one replica's write, the reap
 * of finished writes strictly from the oldest slot, and the callbacks of their entries in log
 * order (per mode: the caller's thread in sync mode, the progress thread in async mode, which
 * then wakes the blocking appenders those callbacks acknowledged). See docs/primary.md,
 * "Acknowledgements in log order".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "primary/primary_engine.h"

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
		s->untimed = true;
		snprintf(why, sizeof(why), "write of %zu bytes at segment %u offset %zu failed: %s",
			 s->len, s->seg->id, s->off, tw_strerror(status));
		tw__pfo_lost(p, b, why);
	}
	if (--s->remaining == 0)
		s->t_done = tw_now_ns();
}

/* A write acknowledged at `now`: where its time went (tw_primary_stats.write_*_ns). */
static void time_write(struct tw_primary *p, const struct pslot *s, uint64_t now)
{
	PSTAT_ADD(p, writes_timed, 1);
	PSTAT_ADD(p, write_seal_post_ns, s->t_post - s->t_seal);
	PSTAT_ADD(p, write_posting_ns, s->t_posted - s->t_post);
	/* A completion read inside a later replica's post (its stall polls) ends before it. */
	PSTAT_ADD(p, write_post_done_ns, s->t_done > s->t_posted ? s->t_done - s->t_posted : 0);
	PSTAT_ADD(p, write_done_ack_ns, now - s->t_done);
}

/* The acknowledgement of records [rec_tail, end), one write's, before their callbacks
 * (acknowledgements in batches): the acknowledged position moves once to the end of the write,
 * which all r replicas hold, so a callback reads at least its own entry's end. Nothing when
 * the write failed. */
static void ack_range(struct tw_primary *p, uint64_t end, int status)
{
	const struct prec *last;

	if (status || end == p->rec_tail)
		return;
	last = &p->recs[(end - 1) & p->rec_mask];
	__atomic_store_n(&p->acked_lsn, last->lsn + TW_ENTRY_HDR_SIZE + last->len,
			 __ATOMIC_RELEASE);
}

static void ack_count(struct tw_primary *p, uint64_t n, int status)
{
	if (status)
		PSTAT_ADD(p, failed, n);
	else
		PSTAT_ADD(p, acked, n);
}

/* Sync mode (pmode_ops.complete). Advance before each callback: a callback may append, which
 * may drive and reap (nested) again; the nested call continues where this one is (and counts
 * what it ran). */
void tw__primary_complete_sync(struct tw_primary *p, uint64_t end, int status)
{
	uint64_t n = 0;

	ack_range(p, end, status);
	while (p->rec_tail < end) {
		const struct prec *r = &p->recs[p->rec_tail & p->rec_mask];
		tw_append_cb cb = r->cb;
		void *arg = r->arg;
		uint64_t lsn = r->lsn;

		/* Read before rec_tail moves: a callback's append may reuse the record. */
		__atomic_store_n(&p->rec_tail, p->rec_tail + 1, __ATOMIC_RELAXED);
		n++;
		if (cb)
			cb(arg, status, lsn);
	}
	ack_count(p, n, status);
}

/* Async mode (pmode_ops.complete): callbacks run on the progress thread only (app threads
 * never reap), so the records stay ours until rec_tail moves. rec_tail moves without the lock;
 * the lock is taken only when somebody sleeps on it: the blocking appenders acknowledged here
 * (put on p->acked by sync_cb_queue: each is woken alone, under the lock, after rec_tail moved
 * past its entry), or a thread counted in n_sleep (room queue, cv_app), which looked at
 * rec_tail and slot_tail after counting itself (see PLD). */
void tw__primary_complete_async(struct tw_primary *p, uint64_t end, int status)
{
	ack_range(p, end, status);
	ack_count(p, end - p->rec_tail, status);
	for (uint64_t i = p->rec_tail; i < end; i++) {
		const struct prec *r = &p->recs[i & p->rec_mask];

		if (r->cb)
			r->cb(r->arg, status, r->lsn);
	}
	PST(p->rec_tail, end);
	if (!p->acked && !PLD(p->n_sleep))
		return;
	pthread_mutex_lock(&p->lock);
	while (p->acked) {
		struct pwaiter *w = p->acked;

		p->acked = w->next;
		w->done = true; /* under the lock: the waiter may leave (and free w) only now */
		pthread_cond_signal(&w->cv);
	}
	tw__primary_room_wake_one(p); /* the record ring or a slot has room again */
	if (p->app_waiting)
		pthread_cond_broadcast(&p->cv_app); /* tw_primary_flush */
	pthread_mutex_unlock(&p->lock);
}

/* Acknowledge finished writes in log order and run their callbacks. Driver thread, lock not
 * held. Returns the number of appends completed. */
int tw__primary_reap(struct tw_primary *p)
{
	uint64_t before = p->rec_tail, now = 0;

	if (p->err)
		tw__primary_post_pending(p); /* sealed, not posted: failed at once */
	while (p->slot_tail < p->slot_posted) {
		struct pslot *s = &p->slots[p->slot_tail % p->nslots];
		uint64_t end;
		int st;

		if (s->remaining || (s->repair && !p->err))
			break; /* a repair waits for the failover (primary_rerep.c) */
		st = s->repair ? p->err : 0;
		if (p->reap_failed)
			st = p->err ? p->err : -TW_EPEERLOST;
		if (st)
			p->reap_failed = true;
		else if (!s->untimed) /* one clock read per reap */
			time_write(p, s, now ? now : (now = tw_now_ns()));
		end = s->rec_end; /* read first: once free, the slot may be sealed into again */
		PST(p->slot_tail, p->slot_tail + 1); /* the slot is free: before the wake-ups */
		p->mode_ops->complete(p, end, st);
	}
	if (p->err) {
		uint64_t end;

		tw__primary_lock(p);
		end = PLD(p->rec_head);
		if (p->slot_tail == PLD(p->slot_head)) /* nothing will be sealed any more */
			PST(p->rec_sealed, end);
		else
			end = p->rec_tail; /* the reap above fails the sealed ones first */
		tw__primary_unlock(p);
		if (end > p->rec_tail) {
			p->reap_failed = true;
			p->mode_ops->complete(p, end, p->err);
		}
	}
	if (p->rec_tail != before)
		tw__packed_publish(p); /* readers (primary_acked.c) */
	return (int)(p->rec_tail - before);
}
