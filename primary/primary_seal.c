/*
 * primary/primary_seal.c — sealing and posting: the waiting entries become one write (one
 * checksum entry closes them, tw_log_writer_seal), which takes a write slot and goes to every
 * replica of its segment; the driver's round (seal, poll, reap) and the drain. Driver thread,
 * except tw__primary_seal_appender (an async appender, under the lock). See docs/primary.md,
 * "Batching and pipelining", "Who seals".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log/log_entry.h"
#include "primary/primary_engine.h"

/* Spins of a seal that does not wait for copies in progress before it gives up. */
#define SEAL_SPINS 32

/*
 * Seal the waiting entries into one write (driver thread, lock not held; the caller checked
 * that entries wait, a slot is free and the primary is healthy). The checksum entry goes right
 * after the last entry, where the next append would go: the sealer takes the checksum entry's
 * 8 bytes with the same compare-and-swap as an appender, but only while nothing is reserved
 * past what is published (the reservation word's offset equals pub_off): then every entry
 * before the checksum entry is written, and the turn to publish is the sealer's at once. It
 * advances the writer over the entries of the write with the chain their publishers computed
 * (pub_chain: no header is read again here, tw__log_writer_take), writes the checksum entry,
 * publishes it like an entry and publishes the slot (slot_head) for the driver to post. While an appender is copying, the
 * seal spins briefly and then, unless `wait` (a rollover: the gate is closed, the copies end),
 * gives up: NULL with *rc_out 0; the appender that publishes last rings the progress thread
 * if it sleeps (append_kick). NULL with *rc_out < 0: the seal failed (the caller fails the
 * primary).
 */
static struct pslot *seal(struct tw_primary *p, int *rc_out, bool wait, bool appender)
{
	struct pseg *seg = __atomic_load_n(&p->cur, __ATOMIC_ACQUIRE);
	uint64_t head = PLD(p->slot_head), sealed = PLD(p->rec_sealed), idx, r, pos;
	struct pslot *s;
	size_t off, len;
	/* An appender holds the appenders' mutex: it looks once and gives up (it then sleeps for
	 * room, and the copier that publishes last rings the progress thread). */
	unsigned spins = 0, limit = appender ? 1 : SEAL_SPINS;
	int rc;

	*rc_out = 0;
	for (;;) {
		pos = __atomic_load_n(&p->pub_off, __ATOMIC_ACQUIRE);
		r = PLD(p->res);
		idx = res_idx(r, sealed);
		if (res_off(r) == pos) {
			if (idx == sealed)
				return NULL; /* nothing waits */
			/* at + 8 fits: every entry leaves room for the checksum entry after it. */
			if (!p->threaded) {
				__atomic_store_n(&p->res, r + TW_CKSUM_ENTRY_SIZE, __ATOMIC_RELAXED);
				break;
			}
			if (__atomic_compare_exchange_n(&p->res, &r, r + TW_CKSUM_ENTRY_SIZE, false,
							__ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
				break;
			continue; /* an appender reserved meanwhile: take it once published */
		}
		/* An appender is copying (on another CPU: nanoseconds; preempted: until it runs). */
		if (++spins < limit)
			cpu_relax();
		else if (wait)
			sched_yield();
		else
			return NULL;
	}
	/* The entries of the write are the records [sealed, idx): all published (rec_head), and
	 * pub_chain is the chain after the last of them (its publisher stored it before the
	 * pub_off we loaded; nobody publishes after it until our checksum entry is). */
	tw__log_writer_take(&seg->w, (size_t)pos, p->pub_chain, (uint32_t)(idx - sealed));
	rc = tw_log_writer_seal(&seg->w, &off, &len);
	/* Our turn ends: the entry reserved after the checksum entry may publish. */
	__atomic_store_n(&p->pub_off, (uint64_t)seg->w.pos, __ATOMIC_RELEASE);
	if (rc < 0 || !len || seg->w.pos != (size_t)res_off(r) + TW_CKSUM_ENTRY_SIZE) {
		*rc_out = rc < 0 ? rc : -TW_EMALFORMED;
		return NULL;
	}
	s = &p->slots[head % p->nslots];
	s->seg = seg;
	s->off = off;
	s->len = len;
	s->remaining = 0; /* set when posted */
	s->rec_end = idx;
	s->nrec = idx - sealed;
	s->repair = false;
	s->untimed = false;
	s->t_seal = tw_now_ns();
	PST(p->seal_off, (uint64_t)seg->w.pos); /* before rec_sealed: the same wake-up (PLD) */
	PST(p->rec_sealed, idx);
	PST(p->slot_head, head + 1); /* published: the slot's fields above are written */
	/* Back-pressure released (async mode): a sleeper counted itself in n_sleep before it
	 * looked at rec_sealed (see PLD). The queue is empty in sync mode. */
	if (p->threaded && PLD(p->n_sleep)) {
		if (!appender)
			pthread_mutex_lock(&p->lock);
		tw__primary_room_wake_one(p);
		if (!appender)
			pthread_mutex_unlock(&p->lock);
	}
	return s;
}

/* Async mode: the turn to seal, which the progress thread and an appender may both want
 * (p->sealing). `wait`: until it is ours (a rollover: appenders do not seal while the gate is
 * closed, so the one that may hold it is finishing); otherwise false at once if it is taken. */
static bool seal_turn_take(struct tw_primary *p, bool wait)
{
	while (__atomic_exchange_n(&p->sealing, true, __ATOMIC_ACQUIRE)) {
		if (!wait)
			return false;
		sched_yield();
	}
	return true;
}

static void seal_turn_give(struct tw_primary *p)
{
	__atomic_store_n(&p->sealing, false, __ATOMIC_RELEASE);
}

/*
 * Async mode: an appender stopped by a whole batch waiting unsealed seals it itself, under the
 * appenders' lock, instead of ringing the progress thread and sleeping until it has (docs/primary.md,
 * "The append engine", "Who seals"). Not while the gate is closed (a rollover, a failure, a
 * finish), a failover is pending, another appender sleeps for room, no slot is free, the
 * progress thread is sealing (the turn, p->sealing) or an appender is copying; the failover
 * takes the lock once before it reads the open segment's writer. Returns whether a write was sealed (the progress thread, rung if it
 * sleeps, posts it); on a failed seal the error is left in seal_err for the progress thread,
 * which fails the log.
 */
bool tw__primary_seal_appender(struct tw_primary *p)
{
	struct pslot *s;
	int rc = 0; /* stays 0 when the slot went to the progress thread meanwhile */

	/* Not while other appenders sleep for room either: the pipeline is full then, and an
	 * appender that goes on only adds a runnable thread (8 threads on 2 vCPUs: 15 % fewer
	 * appends, from copiers preempted before they publish; docs/benchmarks.md). */
	if ((PLD(p->res) & RES_GATE) || PLD(p->fo_pending) || p->err || PLD(p->seal_err) ||
	    PLD(p->n_sleep) || !slot_free(p) || !pending_entries(p))
		return false;
	if (!seal_turn_take(p, false))
		return false; /* the progress thread is sealing: it wakes the sleepers after */
	s = slot_free(p) ? seal(p, &rc, false, true) : NULL;
	seal_turn_give(p);
	if (!s) {
		if (rc < 0)
			PST(p->seal_err, rc);
		return false;
	}
	__atomic_fetch_add(&p->st.appender_seals, 1, __ATOMIC_RELAXED);
	return true;
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
	s->t_post = tw_now_ns();
	s->t_done = 0;
	for (unsigned i = 0; i < seg->nrep; i++) {
		struct pop *po = &s->ops[i];
		struct pbackup *b = &p->bk[seg->rep[i]];

		memset(&po->op, 0, sizeof(po->op));
		po->op.cb = tw__primary_op_done;
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
			s->untimed = true;
			s->remaining--;
			snprintf(why, sizeof(why), "cannot post write: %s", tw_strerror(rc));
			tw__pfo_lost(p, seg->rep[i], why);
		}
	}
	s->t_posted = tw_now_ns();
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

/* Whether waiting entries can be sealed now (driver thread; exact in sync mode, a hint in async
 * mode, where an appender may seal a whole batch meanwhile: seal_post_if looks again once the
 * turn to seal is its). */
static bool seal_ready(const struct tw_primary *p)
{
	return pending_entries(p) && slot_free(p) && !p->err && !PLD(p->need_roll) &&
	       !PLD(p->fo_pending) && tw__primary_batch_due(p);
}

bool tw__primary_seal_now(const struct tw_primary *p)
{
	return seal_ready(p) && res_off(PLD(p->res)) == PLD(p->pub_off);
}

/* Seal the waiting entries into one write and post it to every replica. Driver thread, lock
 * not held; `ready`: only if seal_ready (the rollover seals while need_roll is set). Writes
 * sealed before and not posted yet (a failover) go out first, in order. Returns
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
	/* An appender's seal that failed: its error fails the log here, on the driver. */
	if (PLD(p->seal_err)) {
		tw__primary_fail(p, p->seal_err, "seal failed: %s", tw_strerror(p->seal_err));
		return p->err;
	}
	if (!pending_entries(p) || p->err || !slot_free(p) ||
	    (ready && (PLD(p->need_roll) || !tw__primary_batch_due(p))))
		return p->err;
	/* Appenders seal too in async mode (tw__primary_seal_appender): the turn to seal keeps us
	 * apart. Taken by an appender, it rings us when it is done; the slot looked at above may
	 * be its by now, and what waits may be sealed already (then seal finds nothing). */
	if (p->threaded && !seal_turn_take(p, !ready))
		return p->err;
	s = slot_free(p) ? seal(p, &rc, !ready, false) : NULL;
	if (p->threaded)
		seal_turn_give(p);
	if (!s && !rc)
		return p->err; /* a copy in progress: its appender rings us when it is done */
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
	tw__pctl_close_poll(p);
	tw__primary_try_seal(p);
	if (p->rr_dirty && !p->fo_running)
		tw__pfo_background(p, false);
	/* Sync mode: this thread is the context's driver, as the progress thread is in async mode
	 * (ctx.c): lost backups that answer again come back, usable as spares. Not inside a
	 * failover, which is walking the backups. */
	if (!p->threaded && !p->fo_running)
		tw__ctx_revive_step(p->ctx);
	return rc;
}

/* Drive until every sealed write completed and was reaped. */
void tw__primary_drain(struct tw_primary *p)
{
	for (;;) {
		bool more;

		tw__primary_lock(p);
		more = PLD(p->slot_tail) < PLD(p->slot_head) ||
		       (p->err && PLD(p->rec_tail) < rec_reserved(p));
		tw__primary_unlock(p);
		if (!more)
			break;
		tw__primary_drive(p, PWAIT_SLICE_MS);
	}
}
