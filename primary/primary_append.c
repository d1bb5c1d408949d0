/*
 * primary/primary_append.c — the append engine: the record of each append, room for it
 * (back-pressure, rollover), the batch append, the waits of tw_primary_append and
 * tw_primary_flush, per mode (struct pmode_ops: TW_PRIMARY_SYNC, the caller drives;
 * TW_PRIMARY_ASYNC, the progress thread does), and their public entry points. An entry's
 * reservation, copy and publication themselves are in primary_put.h.
 * See docs/primary.md, "Threading", "Appends from many threads", "Batch appends".
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
#include "primary/primary_put.h"

static int check_len(struct tw_primary *p, uint32_t len)
{
	if (len == 0 || (size_t)len + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > p->cfg.segment_size)
		return -EINVAL;
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
	struct resv v;
	int rc;

again:
	if (p->err)
		return p->err;
	if (pstate(p) != PSTATE_RUNNING)
		return -TW_ECLOSED; /* finishing (a callback during the last drain) */
	/* Back-pressure: at most a whole batch (batch_full) waits while all slots are busy. One
	 * thread: every entry reserved is published (rec_head). */
	while (!p->err && (batch_full(p) || p->rec_head - p->rec_tail > p->rec_mask)) {
		if (slot_free(p))
			tw__primary_seal_post(p);
		else
			tw__primary_drive(p, PWAIT_SLICE_MS);
	}
	if (p->err)
		return p->err;
	if (!reserve_sync(p, len, &v)) {
		/* The segment is full. Callbacks run by the rollover may append (into the new
		 * segment): look at everything again. */
		rc = tw__primary_roll(p);
		if (rc < 0)
			return rc;
		goto again;
	}
	put_publish(p, &v, data, len, cb, arg, lsn_out);
	*idx_out = v.idx;
	return 0;
}

/* Sync mode, after an append (or a batch of them): batching for a caller that appends
 * asynchronously and drives the log itself. An entry goes out at once when no write is in
 * flight (an idle log: no added latency); under load the entries wait until a whole batch
 * (max_batch entries or max_batch_bytes: batch_full) is there, which then takes the first
 * free slot (polled for without blocking when none looks free). Full writes, as a bare
 * benchmark posts them, instead of one entry per free slot (docs/benchmarks.md,
 * "Caller-driven appends"). tw_primary_append, _flush and _progress seal whatever waits. */
static void sync_kick(struct tw_primary *p)
{
	if (PLD(p->slot_head) == PLD(p->slot_tail) || batch_full(p)) {
		if (!slot_free(p))
			tw__primary_drive(p, 0);
		if (slot_free(p))
			tw__primary_seal_post(p);
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
	uint64_t lsn = TW_LSN_NONE, idx; /* set by sync_room_append when it succeeds */

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

/* The record ring is full: every record is still waiting for its acknowledgement. */
static bool ring_full(const struct tw_primary *p)
{
	uint64_t tail = PLD(p->rec_tail);

	return rec_reserved(p) - tail > p->rec_mask;
}

/* Whether an entry of `len` bytes fits after what is reserved in the open segment, with room
 * for the checksum entry after it (tw_log_writer_fits on the reservation word). */
static bool res_fits(const struct tw_primary *p, uint32_t len)
{
	const struct pseg *s = p->cur;
	uint32_t off = res_off(PLD(p->res));

	return s->cap - off >= TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE &&
	       len <= s->cap - off - TW_ENTRY_HDR_SIZE - TW_CKSUM_ENTRY_SIZE;
}

/* Whether an appender stopped by back-pressure can go on: the ring has room and no whole
 * batch waits unsealed (sealed by the progress thread, or by an appender while a slot is
 * free). */
static bool room_now(const struct tw_primary *p)
{
	return !ring_full(p) && !batch_full(p);
}

/* Ring the progress thread if it said it may sleep (pt_idle; see PLD). Any thread. */
static void wake_pt(struct tw_primary *p)
{
	if (PLD(p->pt_idle) && __atomic_exchange_n(&p->pt_idle, false, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&p->st.wakeups, 1, __ATOMIC_RELAXED);
		tw__fab_wakeup(p->fab);
	}
}

/* Sleep on `cv` (lock held); the caller counted itself in n_sleep and looked again, so that
 * the progress thread takes the lock to wake us after it moved what we wait for. */
static void sleep_counted(struct tw_primary *p, pthread_cond_t *cv)
{
	pthread_cond_wait(cv, &p->lock);
}

/*
 * Async mode, lock held: wait until an entry of `len` bytes can be appended to p->cur now
 * (back-pressure, rollover), dropping the lock while it waits. A whole batch waiting is sealed
 * by the progress thread, rung here if it sleeps. Returns 0 (lock held, room for it; the
 * caller then reserves, which may still fail: appenders on the fast path race with it, and it
 * calls again), or an error (lock held): the primary's,
 * -TW_ECLOSED, -EAGAIN (a callback on the progress thread that would have to wait), -ENOSPC
 * (the rollover asked for found the arena exhausted).
 */
static int async_room(struct tw_primary *p, uint32_t len, struct room_wait *rw)
{
	bool asked = false;
	uint64_t gen = 0;

	for (;;) {
		if (p->err || pstate(p) != PSTATE_RUNNING)
			return p->err ? p->err : -TW_ECLOSED;
		if (p->need_roll) { /* rare: once per segment; the roll wakes everyone */
			if (on_progress_thread(p))
				return -EAGAIN; /* a callback appending: would wait for ourselves */
			p->app_waiting++;
			__atomic_add_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
			if (p->need_roll)
				sleep_counted(p, &p->cv_app);
			__atomic_sub_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
			p->app_waiting--;
			continue;
		}
		if (batch_full(p) || ring_full(p)) {
			if (on_progress_thread(p))
				return -EAGAIN;
			/* A whole batch waits and a slot is free: seal it here and go on, rather
			 * than wait for the progress thread to run (it posts what we sealed). */
			if (p->seal_self && !ring_full(p) && tw__primary_seal_appender(p)) {
				wake_pt(p);
				continue;
			}
			/* Back-pressure: count ourselves, look again (the progress thread stores the
			 * tails, then loads n_sleep: see PLD), queue up and sleep until an
			 * acknowledgement or a seal hands us the turn (room_wake_one), or a failure,
			 * the end of a failover or a rollover wakes everyone (wake_apps). */
			__atomic_add_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
			if (!room_now(p) && !p->err) {
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
				/* The batch waiting is sealed (when a slot is free) by the progress
				 * thread: ring it if it sleeps. */
				wake_pt(p);
				while (rw->me.queued)
					sleep_counted(p, &rw->me.cv);
			}
			__atomic_sub_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		if (!res_fits(p, len)) {
			if (on_progress_thread(p))
				return -EAGAIN;
			if (asked && p->roll_gen != gen && p->roll_rc == -ENOSPC)
				return -ENOSPC; /* the rollover we asked for found the arena exhausted */
			asked = true;
			gen = p->roll_gen;
			PST(p->need_roll, true);
			tw__primary_gate(p); /* closed: appenders come here until the roll is done */
			PST(p->ctl_pending, 1);
			pthread_mutex_unlock(&p->lock);
			tw__fab_wakeup(p->fab);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		return 0;
	}
}

/* Async mode, after the entry `v` (of `len` bytes) was published: ring the progress thread if
 * it may sleep, nobody reserved after this entry (the last appender to publish does it: the
 * seal waits for every copy in progress) and a batch is due (nothing in flight, or a whole
 * batch waiting: tw__primary_batch_due's test). The publication's store came before these
 * loads (see PLD). */
static inline void async_kick(struct tw_primary *p, const struct resv *v, uint32_t len)
{
	uint64_t r;

	if (tw_unlikely(PLD(p->pt_idle)) &&
	    res_off(r = PLD(p->res)) == v->off + TW_ENTRY_HDR_SIZE + len &&
	    (PLD(p->slot_head) == PLD(p->slot_tail) ||
	     v->idx + 1 - PLD(p->rec_sealed) >= p->cfg.max_batch ||
	     pending_bytes_at(p, r) >= p->cfg.max_batch_bytes))
		wake_pt(p);
}

/* Publish the k entries reserved from `v` (entries[0..k), in order: each one's turn comes when
 * the one before it is published), LSNs into lsns[0..k) (lsns may be NULL: then *scratch),
 * `cb` on entries[last] if it is among them; v ends as the last one's room. */
static inline __attribute__((always_inline)) void publish_run(struct tw_primary *p,
							       struct resv *v,
							       const struct iovec *e, size_t k,
							       size_t last, tw_append_cb cb,
							       void *arg, uint64_t *lsns,
							       uint64_t *scratch)
{
	for (size_t j = 0; j < k; j++) {
		uint32_t len = (uint32_t)e[j].iov_len;

		put_publish(p, v, e[j].iov_base, len, j == last ? cb : NULL, arg,
			    lsns ? &lsns[j] : scratch);
		if (j + 1 < k) {
			v->off += TW_ENTRY_HDR_SIZE + len;
			v->idx++;
		}
	}
}

/* Async mode, the slow path: under the lock, wait for room for entries[0] (back-pressure,
 * rollover, failure), then reserve as many of entries[0..n) as fit at once (the gate may be
 * closed: the log was checked under the lock) and publish them as publish_run. The number
 * appended (at least 1), or the error (nothing appended). */
static int append_async_slow(struct tw_primary *p, const struct iovec *e, size_t n, size_t last,
			     tw_append_cb cb, void *arg, uint64_t *lsns, uint64_t *scratch,
			     struct resv *v)
{
	struct room_wait rw = { .me_init = false };
	size_t k;
	int rc;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		rc = async_room(p, (uint32_t)e[0].iov_len, &rw);
		if (rc < 0)
			break;
		k = reserve_many(p, e, n, true, v);
		if (k) {
			publish_run(p, v, e, k, last, cb, arg, lsns, scratch);
			rc = (int)k;
			break;
		}
		/* Appenders on the fast path took the room meanwhile: look again. */
	}
	if (rw.me_init)
		pthread_cond_destroy(&rw.me.cv); /* dequeued: nobody signals it any more */
	pthread_mutex_unlock(&p->lock);
	return rc;
}

/* Async mode: reserve with one compare-and-swap, copy and publish without a lock (the common
 * case); anything else (back-pressure, a rollover, a failure, a finish) takes the slow path. */
static inline __attribute__((always_inline)) int
append_async_one(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb, void *arg,
		 uint64_t *lsn_out, struct resv *v)
{
	struct iovec e = { (void *)(uintptr_t)data, len };
	uint64_t lsn;
	int rc;

	if (tw_likely(reserve(p, len, false, v))) {
		put_publish(p, v, data, len, cb, arg, lsn_out);
		return 0;
	}
	rc = append_async_slow(p, &e, 1, 0, cb, arg, NULL, lsn_out ? lsn_out : &lsn, v);
	return rc < 0 ? rc : 0;
}

static int append_async_mode(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
			     void *arg, uint64_t *lsn_out, uint64_t *idx_out)
{
	struct resv v;
	int rc = append_async_one(p, data, len, cb, arg, lsn_out, &v);

	if (rc == 0) {
		*idx_out = v.idx;
		async_kick(p, &v, len);
	}
	return rc;
}

/* Async mode: the entries in as few reservations as the log allows (reserve_many: without a
 * wait, in one piece), those that must wait through the slow path, which reserves what follows
 * the waiting entry with it; the progress thread is rung once, at the end (an entry that waits
 * for back-pressure rings it in async_room). */
static int append_batch_async_mode(struct tw_primary *p, const struct iovec *entries, size_t n,
				   tw_append_cb cb, void *arg, uint64_t *lsns_out)
{
	struct resv v = { 0 }; /* the last entry appended */
	uint64_t lsn;
	size_t i = 0;
	int rc = 0;

	while (i < n) {
		/* The LSNs are stored before the entries are published (put_publish): the
		 * batch's callback may run on the progress thread before this call returns. */
		size_t k = reserve_many(p, entries + i, n - i, false, &v);

		if (k) {
			publish_run(p, &v, entries + i, k, n - 1 - i, cb, arg,
				    lsns_out ? lsns_out + i : NULL, &lsn);
		} else {
			rc = append_async_slow(p, entries + i, n - i, n - 1 - i, cb, arg,
					       lsns_out ? lsns_out + i : NULL, &lsn, &v);
			if (rc < 0)
				break;
			k = (size_t)rc;
			rc = 0;
		}
		i += k;
	}
	if (i) /* what was copied goes out as usual */
		async_kick(p, &v, (uint32_t)entries[i - 1].iov_len);
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

	if (p->looped)
		return; /* the caller's loop progresses the log all the time: the answer comes */
	while (tw__packed_capped(p) && !p->err && tw_now_ns() < end)
		tw__primary_drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
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
		tw__primary_drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
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
	 * wake us (docs/primary.md, "Appends from many threads"). Wait for `done`, not for
	 * rec_tail: rec_tail moves before the progress thread takes the lock to take us off its
	 * acked list, and leaving in between would leave our stack frame on that list. */
	pthread_mutex_lock(&p->lock);
	while (!w.wt.done)
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
		tw__primary_drive(p, p->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
	/* And the close of the last segment rolled over answered (close behind): after a flush
	 * every segment below the open one is closed, as before. */
	(void)tw__pctl_close_end(p);
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
	target = PLD(p->rec_head);
	/* Counted before looking (see PLD): the acknowledgement that reaches target sees us. */
	p->app_waiting++;
	__atomic_add_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
	/* And the close of a segment rolled over answered (close behind: the progress thread
	 * takes it and broadcasts), unless the log failed. */
	while (PLD(p->rec_tail) < target || (p->closing && !p->err))
		sleep_counted(p, &p->cv_app);
	__atomic_sub_fetch(&p->n_sleep, 1, __ATOMIC_SEQ_CST);
	p->app_waiting--;
	rc = p->err;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

static const struct pmode_ops sync_ops = {
	.append = append_sync_mode,
	.append_batch = append_batch_sync_mode,
	.append_wait = append_wait_sync_mode,
	.flush = flush_sync_mode,
	.complete = tw__primary_complete_sync,
};

static const struct pmode_ops async_ops = {
	.append = append_async_mode,
	.append_batch = append_batch_async_mode,
	.append_wait = append_wait_async_mode,
	.flush = flush_async_mode,
	.complete = tw__primary_complete_async,
};

const struct pmode_ops *tw__primary_mode_ops(bool threaded)
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
	return tw__primary_drive(p, timeout_ms);
}

int tw_primary_wait_fd(struct tw_primary *p)
{
	if (!p || p->threaded)
		return -EINVAL;
	return tw__fab_wait_fd(p->fab);
}

int tw_primary_wait_prepare(struct tw_primary *p, int max_ms)
{
	int cap = max_ms < 0 || max_ms > PWAIT_SLICE_MS ? PWAIT_SLICE_MS : max_ms;

	if (!p || p->threaded)
		return -EINVAL;
	/* A fabric without a descriptor (shm) cannot be slept on: the caller goes on
	 * driving the log the plain way, so it keeps sync mode's SetAcked per reap. */
	if (tw__fab_wait_fd(p->fab) == -ENOTSUP)
		return -ENOTSUP;
	p->looped = true; /* SetAcked as in async mode (primary_acked.c) */
	if (cap == 0)
		return 0;
	/* What a drive would do before it sleeps: a batch that is due goes out now. */
	tw__primary_try_seal(p);
	if (PLD(p->fo_pending) && !p->fo_running)
		return 0;
	return tw__fab_wait_prepare(p->fab, cap);
}
