/*
 * primary/primary.c — the log of one primary: its segments in registered memory (allocation
 * from the log arena, chain seeds, pre-opening), segment rollover, the sticky failure and the
 * wake-ups of waiting application threads, the per-log steps the context's progress thread runs
 * (and the ops table it calls them through; its loop is in ctx.c), and the getters, reads,
 * unload and trim of tailwind/primary.h. The append paths are in primary_append.c, sealing and
 * posting in primary_seal.c, acknowledgements in primary_ack.c, open and lifecycle in
 * primary_open.c. See docs/primary.md.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/random.h>

#include "primary/primary_engine.h"

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

/* ------------------------------------------------------------------ small helpers */

/* Wake the first thread waiting for room (lock held). One per event that makes room (a seal,
 * an acknowledgement): it appends at least once, which leads to another seal and so to the
 * next wake-up, so every waiter gets its turn while the others stay asleep; with T threads a
 * batch costs one sleep and one wake-up, not T (docs/primary.md, "Appends from many threads"). */
void tw__primary_room_wake_one(struct tw_primary *p)
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
		tw__primary_room_wake_one(p);
}

void tw__primary_gate(struct tw_primary *p)
{
	bool open = p->threaded && !p->err && !p->need_roll && pstate(p) == PSTATE_RUNNING;

	if (open)
		__atomic_and_fetch(&p->res, ~RES_GATE, __ATOMIC_SEQ_CST);
	else
		__atomic_or_fetch(&p->res, RES_GATE, __ATOMIC_SEQ_CST);
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
	tw__primary_gate(p); /* appenders take the slow path, which returns the error */
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

/* ------------------------------------------------------------------ segments */

/* Give a segment's memory back to the arena (nothing is unmapped or deregistered). */
void tw__pseg_free(struct tw_primary *p, struct pseg *s)
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
int tw__pseg_new(struct tw_primary *p, uint32_t id, struct pseg **out)
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
int tw__pseg_push(struct tw_primary *p, struct pseg *s)
{
	int rc;

	tw__primary_lock(p);
	rc = tw__push(&p->segs, &p->segs_cap, &p->nsegs, sizeof(s), 16, &s);
	if (rc == 0) {
		/* Every entry of the old segment was sealed (the rollover drained it, and the gate
		 * kept appenders out). The new one starts empty: its reservation word keeps the
		 * record count and the gate, flips RES_FLIP (an appender that read the old word
		 * cannot succeed on the new one) and is stored after cur, which an appender reads
		 * after the word. */
		uint64_t r = PLD(p->res), n = rec_reserved(p);

		__atomic_store_n(&p->cur, s, __ATOMIC_RELEASE);
		p->pub_chain = s->w.chain; /* the seed: nobody publishes while the gate is shut */
		__atomic_store_n(&p->pub_off, 0, __ATOMIC_RELEASE);
		PST(p->seal_off, 0);
		PST(p->res, res_make(r ^ RES_FLIP, n, 0));
	}
	tw__primary_unlock(p);
	return rc;
}

/* Allocate the next segment and send its opens now, without waiting for the answers: with
 * cfg.preopen as soon as a segment is open; always at the start of a rollover (`now`), so that
 * the opens travel and are answered while the current segment drains and closes. Failures
 * here are not fatal: the rollover then opens the usual way. */
void tw__primary_preopen_start(struct tw_primary *p, bool now)
{
	struct pseg *s;

	if ((!p->cfg.preopen && !now) || p->next || !p->cur || p->err)
		return;
	if (tw__pseg_new(p, p->cur->id + 1, &s) < 0)
		return; /* e.g. the arena is exhausted: the rollover tries again */
	p->next = s;
	tw__pctl_preopen_begin(p, s);
}

/* Roll over: seal and drain the current segment, open the next one, send the old one's close
 * RPCs (answered later: close behind). Driver thread, lock not held. Returns 0 or the
 * primary's error. */
static int roll(struct tw_primary *p);

int tw__primary_roll(struct tw_primary *p)
{
	uint64_t t0 = tw_now_ns();
	int rc = roll(p);

	PSTAT_ADD(p, roll_ns, tw_now_ns() - t0);
	return rc;
}

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
				tw__primary_seal_post(p);
			else
				tw__primary_drive(p, PWAIT_SLICE_MS);
		}
		tw__primary_drain(p);
	} while (pending_entries(p) && !p->err && p->cur == old);
	if (p->err)
		return p->err;
	if (p->cur != old)
		return 0; /* a nested call rolled over already */
	/* The close of the segment before, long answered as a rule (one closing at a time). */
	rc = tw__pctl_close_end(p);
	if (rc < 0 || p->err)
		return p->err ? p->err : rc;
	/* The next segment's opens go out first: after the drain, which noticed any backup lost
	 * meanwhile (docs/primary.md, "Segment rollover"). */
	tw__primary_preopen_start(p, true);
	/* The next segment's memory first: an exhausted arena refuses the rollover before the
	 * segment is closed, so the log goes on once the application releases segments. */
	if (p->next) {
		s = p->next;
		p->next = NULL;
	} else {
		rc = tw__pseg_new(p, old->id + 1, &s);
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
	/* Close behind: every write of the old segment completed (the drain), so its close RPCs
	 * go out now and are answered while the new segment fills (tw__pctl_close_poll), not
	 * before it opens: the replicas' scan of the whole buffer is off the appends' path. */
	tw__pctl_close_begin(p, old);
	rc = preopened ? tw__pctl_preopen_finish(p, s) : tw__pctl_open_segment(p, s);
	if (rc < 0) {
		tw__pseg_free(p, s);
		char why[sizeof(p->errmsg)];

		snprintf(why, sizeof(why), "%s", p->errmsg[0] ? p->errmsg : "cannot open the next segment");
		tw__primary_fail(p, rc, "%s", why);
		return p->err;
	}
	rc = tw__pseg_push(p, s);
	if (rc < 0) {
		tw__pseg_free(p, s);
		tw__primary_fail(p, rc, "out of memory");
		return p->err;
	}
	tw__primary_preopen_start(p, false);
	PSTAT_ADD(p, segments, 1);
	return 0;
}

/* ------------------------------------------------------------ per-log steps (progress thread) */

/* The control part of a pass (async mode): a rollover, frees, released segments, a stopping
 * log drained. Under the lock, taken only when ctl_pending says one was asked for. Returns
 * whether it did control work (*work: the poll must not block). */
static bool step_control(struct tw_primary *p, bool *done, bool *work)
{
	pthread_mutex_lock(&p->lock);
	if (p->need_roll && !p->err) {
		int rc;

		pthread_mutex_unlock(&p->lock);
		rc = tw__primary_roll(p);
		pthread_mutex_lock(&p->lock);
		PST(p->need_roll, false);
		tw__primary_gate(p); /* appenders on the new segment without the lock again */
		p->roll_rc = rc; /* -ENOSPC: the appends that asked for it fail (append_async_mode) */
		p->roll_gen++;
		pthread_cond_broadcast(&p->cv_app);
		pthread_mutex_unlock(&p->lock);
		return true;
	}
	if (p->need_roll && p->err) {
		PST(p->need_roll, false); /* the gate stays closed: the log failed */
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

			tw__pseg_free(p, f);
			f = nx;
		}
		return true;
	}
	if (pstate(p) == PSTATE_STOPPING)
		tw__primary_gate(p); /* closed: what was reserved before is drained below */
	if (pstate(p) == PSTATE_STOPPING && p->slot_tail == PLD(p->slot_head) &&
	    p->rec_tail == rec_reserved(p)) {
		/* Drained: let go of it (tw_primary_finish waits for this). */
		tw__primary_set_state(p, PSTATE_FINISHING);
		PST(p->ctl_pending, 0);
		pthread_cond_broadcast(&p->cv_app);
		pthread_mutex_unlock(&p->lock);
		*done = true;
		return true;
	}
	if (pstate(p) == PSTATE_STOPPING && p->slot_tail == PLD(p->slot_head))
		*work = true;
	/* Nothing asked any more (a stopping log is looked at on every pass until drained). */
	if (!p->need_roll && p->free_req <= p->free_done && !p->free_list &&
	    pstate(p) != PSTATE_STOPPING)
		PST(p->ctl_pending, 0);
	pthread_mutex_unlock(&p->lock);
	return false;
}

/* Work for the progress thread on this log now: sealed writes to post (a failover ended),
 * control work asked for, or entries to seal. */
static bool pt_work_left(const struct tw_primary *p)
{
	return PLD(p->slot_head) != p->slot_posted || PLD(p->ctl_pending) ||
	       tw__primary_seal_now(p);
}

bool tw__primary_step_pre(struct tw_primary *p, bool *done)
{
	bool work = false;

	if (PLD(p->ctl_pending) && step_control(p, done, &work))
		return true;
	/* Seal a batch if one is due and post it. No lock in steady state (primary_seal.c). */
	tw__primary_try_seal(p);
	/* Work left: the poll does not block. pt_idle, on the driver's line that every appender
	 * reads, is written only when the thread may sleep (tw__primary_sleep_begin). */
	return work || pt_work_left(p);
}

/* About to block in the poll: say so first (the context then fences for all its logs, where
 * appenders publish without a fence), then look once more for entries to seal. The last
 * appender to publish stores pub_off, then loads pt_idle; we store pt_idle, then load pub_off
 * and res: one of us sees the other (see PLD). A completion ends the poll anyway. */
bool tw__primary_sleep_begin(struct tw_primary *p)
{
	PST(p->pt_idle, true);
	p->pt_idle_set = true;
	/* The fence only when nothing is in flight. With writes in flight their completions end
	 * the poll anyway, and a ring lost to the store-buffer race would only make a batch that
	 * is due wait for the next one (the idle-log rule needs nothing in flight): the fence,
	 * a few microseconds of interrupts, would cost more than that rare wait. */
	return p->pub_light && PLD(p->slot_tail) == p->slot_posted;
}

bool tw__primary_sleep_check(struct tw_primary *p)
{
	if (pt_work_left(p)) {
		PST(p->pt_idle, false);
		p->pt_idle_set = false;
		return true;
	}
	return false;
}

void tw__primary_step_post(struct tw_primary *p)
{
	if (PLD(p->fo_pending) && !p->fo_running)
		tw__pfo_run(p);
	tw__primary_reap(p);
	tw__pctl_close_poll(p);
	tw__primary_try_seal(p);
	if (p->rr_dirty && !p->fo_running)
		tw__pfo_background(p, false);
	if (p->pt_idle_set) {
		p->pt_idle_set = false;
		PST(p->pt_idle, false);
	}
}

/* ------------------------------------------------------------------ the context's ops table */

static bool log_served(const struct tw_primary *p)
{
	return pserved(p);
}

static void log_fail(struct tw_primary *p, int err, const char *msg)
{
	tw__primary_fail(p, err, "%s", msg);
}

static uint64_t log_incarnation(const struct tw_primary *p)
{
	return p->incarnation;
}

static void log_count_handshake(struct tw_primary *p, unsigned rpcs)
{
	PSTAT_ADD(p, rpcs, rpcs);
	PSTAT_ADD(p, rpc_handshake, rpcs);
}

static void log_back(struct tw_primary *p, unsigned b)
{
	(void)b; /* a spare for any of them now: the next background round scans them all */
	if (__atomic_load_n(&p->st.rerep_pending, __ATOMIC_RELAXED))
		p->rr_dirty = true;
}

const struct tw__log_ops tw__primary_log_ops = {
	.served = log_served,
	.step_pre = tw__primary_step_pre,
	.step_post = tw__primary_step_post,
	.sleep_begin = tw__primary_sleep_begin,
	.sleep_check = tw__primary_sleep_check,
	.lost = tw__pfo_lost,
	.fail = log_fail,
	.reset = tw__pfo_after_reset,
	.incarnation = log_incarnation,
	.count_handshake = log_count_handshake,
	.back = log_back,
};

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
	if (p->closing && below_segment > p->closing->id)
		below_segment = p->closing->id; /* not closed yet */
	tw__primary_unlock(p);
	released = tw_primary_unload(p, below_segment);
	if (released < 0)
		return released;
	if (pserved(p)) {
		/* The control plane belongs to the progress thread: hand the RPCs to it. */
		tw__primary_lock(p);
		if (below_segment > p->free_req)
			p->free_req = below_segment;
		PST(p->ctl_pending, 1);
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
	/* The open segment: what is published (appenders write without the lock, in order);
	 * a closed one: everything its writer wrote. */
	it.len = s == p->cur ? (size_t)__atomic_load_n(&p->pub_off, __ATOMIC_ACQUIRE) : s->w.pos;
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
	/* Segments below the current one are closed, but for the one whose close is still out
	 * (close behind): its answers may yet ask for a copy from our memory. (released counts
	 * from seg_base.) */
	if (p->cur && below_segment > p->cur->id)
		below_segment = p->cur->id;
	if (p->closing && below_segment > p->closing->id)
		below_segment = p->closing->id;
	below_segment = below_segment > p->seg_base ? below_segment - p->seg_base : 0;
	for (; p->released < below_segment; p->released++) {
		struct pseg *s = p->segs[p->released];

		p->segs[p->released] = NULL;
		if (!s)
			continue;
		if (handed) {
			s->next_free = p->free_list;
			p->free_list = s;
			PST(p->ctl_pending, 1);
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

		tw__pseg_free(p, now);
		now = nx;
	}
	return n;
}

uint64_t tw_primary_acked_lsn(const struct tw_primary *p)
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

static void primary_stats(const struct tw_primary *p, struct tw_primary_stats *out)
{
	const uint64_t *src = (const uint64_t *)&p->st;
	uint64_t *dst = (uint64_t *)out;

	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	/* Counted on the appenders' own line (struct tw_primary). */
	out->appends = __atomic_load_n(&p->pub_appends, __ATOMIC_RELAXED);
	out->bytes = __atomic_load_n(&p->pub_bytes, __ATOMIC_RELAXED);
	tw__arena_get_stats(p->ctx->arena, &out->arena);
	tw__fab_write_counts(p->ctx->fab, &out->fab_writes, &out->fab_fast_writes);
}

void tw_primary_get_stats_sized(const struct tw_primary *p, struct tw_primary_stats *out,
				size_t size)
{
	struct tw_primary_stats full;

	primary_stats(p, &full);
	tw__out_copy(out, size, &full, sizeof(full));
}
