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

#include "primary/primary_int.h"

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
void tw__primary_complete_sync(struct tw_primary *p, uint64_t end, int status)
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
void tw__primary_complete_async(struct tw_primary *p, uint64_t end, int status)
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
	tw__primary_room_wake_one(p); /* the record ring has room again */
	if (p->app_waiting)
		pthread_cond_broadcast(&p->cv_app); /* tw_primary_flush */
	pthread_mutex_unlock(&p->lock);
}

/* Acknowledge finished writes in log order and run their callbacks. Driver thread, lock not
 * held. Returns the number of appends completed. */
int tw__primary_reap(struct tw_primary *p)
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
