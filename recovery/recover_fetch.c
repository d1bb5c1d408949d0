/*
 * recovery/recover_fetch.c — the fetch pipeline of tw_recover(): a window of registered slot
 * buffers; each slot takes the next segment in log order, asks a backup for a read grant
 * (ReadSegment RPC, asynchronous), reads the segment's valid prefix with several one-sided
 * reads in flight, and releases the grant. Segments are fetched from different backups at
 * once (at most cfg->segs_per_backup per backup, least loaded first among equivalent copies).
 * Each fetched segment is verified (tw_scan_seeded with the copy's listed chain seed over the
 * fetched bytes: valid length, checksum and entry count must equal what the backup listed;
 * otherwise the copy is marked failed and the segment fetched from another one); the delivery
 * side hands the entries of the next segment in log order to the callback, then frees the slot.
 *
 * Two threads: a fetch thread drives the fab (RPCs, reads, the slot state machines) and
 * verifies what arrived, while the calling thread delivers, so the application's callback
 * never stalls the data flow (on tcp the initiator must poll for incoming data to move). Callbacks (RPC
 * replies, read completions) only record what happened; every state transition is made under
 * the lock by one of the two loops, so nothing runs re-entrantly (tw__chan_read may progress the
 * fab while it waits for queue space). After the fetch thread is joined, the calling thread
 * drives the fab again.
 */
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"
#include "recovery/recover_int.h"

enum slot_state {
	SLOT_FREE = 0,
	SLOT_PICK,    /* has a segment, needs a copy and a grant */
	SLOT_GRANT,   /* ReadSegment in flight */
	SLOT_READ,    /* reads being posted / in flight */
	SLOT_VERIFY,  /* bytes fetched: the fetch thread scans them (lock not held) */
	SLOT_FAIL,    /* the copy failed: wait for in-flight reads, then pick another copy */
	SLOT_READY,   /* fetched and verified, waiting for its turn to be delivered */
	SLOT_DELIVER, /* the delivering thread delivers it (lock not held) */
};

struct rread {
	struct tw_op op;
	struct rslot *slot;
	size_t len;
	bool busy;
};

struct rslot {
	struct rctx *c;
	enum slot_state state;
	uint8_t *buf;
	size_t cap;
	struct tw_mr *mr;
	size_t si;   /* segment index */
	int copy;    /* index into the segment's copies, -1 none */
	bool granted;
	bool grant_done;
	int grant_status;
	struct tw_rkey rk;
	uint64_t len;     /* bytes to read (listed valid length) */
	uint64_t next_off;
	uint64_t done_bytes;
	unsigned inflight;
	int err;
	char why[200];
	char last_why[256]; /* the last copy that failed for this segment, and why */
	struct rread *reads;
	uint64_t t_grant, t_read; /* for the debug log */
};

struct fetch {
	struct rctx *c;
	struct rslot *slots;
	unsigned nslots;
	unsigned nreads;
	size_t chunk;
	size_t next_issue;   /* next segment to give a slot */
	size_t next_deliver; /* next segment to deliver */
	uint64_t index;      /* entries delivered */
	/* The fetch thread drives the fab (RPCs, reads, state machines) and verifies what
	 * arrived; the calling thread delivers, so the callback never stops the data flow. `lock`
	 * protects slot states, copy flags, backup loads and the counters both threads touch. */
	pthread_mutex_t lock;
	pthread_cond_t ready; /* the next slot to deliver became READY */
	bool stop;            /* set by the delivering thread: the fetch thread returns */
};

static struct rseg *slot_seg(struct rslot *s);

static void grant_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct rslot *s = arg;
	const Tailwind__ReadSegmentReply *r = reply ? reply->read_segment_reply : NULL;

	s->grant_done = true;
	s->grant_status = status;
	if (status) {
		/* This call's own answer: the client's last error message may belong to another
		 * of the calls in flight on it (another segment). */
		const char *msg = "";

		if (reply)
			(void)tw__rpc_reply_status(reply, &msg);
		snprintf(s->why, sizeof(s->why), "read grant: %s%s%s", tw_strerror(status),
			 msg && msg[0] ? ": " : "", msg ? msg : "");
		return;
	}
	if (!r || !r->rkey || !r->meta) {
		s->grant_status = -TW_EMALFORMED;
		return;
	}
	s->granted = true;
	tw__rpc_rkey_from_pb(r->rkey, &s->rk);
	if (r->corrupt) {
		s->grant_status = -TW_ECORRUPT;
		snprintf(s->why, sizeof(s->why), "backup says the copy is corrupt");
	} else if (r->chain_seed != slot_seg(s)->copies[s->copy].seed) {
		s->grant_status = -TW_ECORRUPT;
		snprintf(s->why, sizeof(s->why), "read grant names chain seed 0x%08x, the listing "
			 "said 0x%08x", r->chain_seed, slot_seg(s)->copies[s->copy].seed);
	} else if (r->meta->offset < s->len || s->rk.len < s->len) {
		s->grant_status = -TW_ECORRUPT;
		snprintf(s->why, sizeof(s->why), "read grant covers %" PRIu64 " valid bytes (rkey "
			 "%" PRIu64 "), the listing said %" PRIu64, (uint64_t)r->meta->offset,
			 (uint64_t)s->rk.len, s->len);
	}
}

static void release_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	(void)arg;
	(void)status;
	(void)reply;
}

static void read_done(struct tw_op *op, int status)
{
	struct rread *rr = op->arg;
	struct rslot *s = rr->slot;

	rr->busy = false;
	s->inflight--;
	if (status) {
		if (!s->err)
			snprintf(s->why, sizeof(s->why), "one-sided read failed: %s",
				 tw_strerror(status));
		s->err = status;
	} else {
		s->done_bytes += rr->len;
	}
}

static struct rseg *slot_seg(struct rslot *s)
{
	return &s->c->segs[s->si];
}

static struct rbk *slot_bk(struct rslot *s)
{
	return &s->c->bks[slot_seg(s)->copies[s->copy].bk];
}

static void release_grant(struct rslot *s)
{
	struct rctx *c = s->c;
	struct rbk *b = slot_bk(s);
	struct tw_rpc_req req;

	if (!s->granted)
		return;
	s->granted = false;
	if (b->peer.lost || !b->peer.rpc)
		return;
	tw__rpc_req_release_segment(&req, c->epoch, c->cfg->log_id, slot_seg(s)->id);
	(void)tw__rpc_call(b->peer.rpc, &req.env, release_done, s);
}

/* Pick a copy for the slot's segment: the first not-failed copy's equivalence class (same
 * state class, length and checksum), least loaded backup in it. Returns 1 picked, 0 all
 * candidates busy (try later), -1 none left. */
static int pick_copy(struct fetch *f, struct rslot *s)
{
	struct rctx *c = f->c;
	struct rseg *g = slot_seg(s);
	const struct rcopy *best = NULL;
	int pick = -1;
	bool busy = false;

	for (unsigned k = 0; k < g->usable; k++) {
		const struct rcopy *cp = &g->copies[k];
		const struct rbk *b = &c->bks[cp->bk];

		if (cp->failed || !b->peer.up || b->peer.lost)
			continue;
		if (!best)
			best = cp;
		else if ((cp->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN) !=
				 (best->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN) ||
			 cp->valid_len != best->valid_len || cp->checksum != best->checksum)
			break;
		if (b->active >= c->cfg->segs_per_backup) {
			busy = true;
			continue;
		}
		if (pick < 0 || b->active < c->bks[g->copies[pick].bk].active)
			pick = (int)k;
	}
	if (pick >= 0) {
		s->copy = pick;
		return 1;
	}
	return busy ? 0 : -1;
}

static void slot_fail(struct fetch *f, struct rslot *s, int err)
{
	struct rctx *c = f->c;
	struct rseg *g = slot_seg(s);
	struct rcopy *cp = &g->copies[s->copy];

	tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": copy on backup %s (%s, "
		    "%" PRIu64 " bytes): %s: %s; trying another copy", c->cfg->log_id, g->id,
		    c->bks[cp->bk].peer.addr,
		    cp->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN ? "open" : "closed",
		    cp->valid_len, tw_strerror(err), s->why[0] ? s->why : "failed");
	cp->failed = true;
	snprintf(s->last_why, sizeof(s->last_why), "%.96s: %.150s", c->bks[cp->bk].peer.addr,
		 s->why[0] ? s->why : tw_strerror(err));
	if (err == -ETIMEDOUT && !c->bks[cp->bk].peer.lost) {
		/* A backup that lets a grant or a read time out is stopped or cut off: picking it
		 * again for each later segment would cost one timeout per segment (a recovery
		 * that seemed never to end). Its other copies are skipped from now on. */
		struct rbk *b = &c->bks[cp->bk];

		b->peer.lost = true;
		snprintf(b->peer.why, sizeof(b->peer.why), "timed out during the fetch (%.100s)",
			 s->why[0] ? s->why : "no answer");
		tw_log_warn("recover: backup %s: %s; fetching the remaining segments from the "
			    "others", b->peer.addr, b->peer.why);
	}
	if (err == -TW_ECORRUPT)
		c->res->copies_corrupt++;
	c->res->refetches++;
	s->err = 0;
	s->why[0] = '\0';
	s->state = SLOT_PICK;
	s->copy = -1;
}

static int start_grant(struct fetch *f, struct rslot *s)
{
	struct rctx *c = f->c;
	struct rseg *g = slot_seg(s);
	struct rcopy *cp;
	struct tw_rpc_req req;
	int rc = pick_copy(f, s);

	if (rc <= 0)
		return rc;
	cp = &g->copies[s->copy];
	s->len = cp->valid_len;
	s->next_off = 0;
	s->done_bytes = 0;
	s->err = 0;
	s->why[0] = '\0';
	s->granted = false;
	s->grant_done = false;
	if (s->len > s->cap) {
		snprintf(s->why, sizeof(s->why), "valid length larger than any buffer here");
		s->state = SLOT_READ;
		s->err = -TW_ECORRUPT;
		c->bks[cp->bk].active++;
		return 1;
	}
	c->bks[cp->bk].active++;
	if (s->len == 0) {
		s->state = SLOT_READ; /* nothing to read */
		return 1;
	}
	tw__rpc_req_read_segment(&req, c->epoch, c->cfg->log_id, g->id);
	rc = tw__rpc_call(c->bks[cp->bk].peer.rpc, &req.env, grant_done, s);
	if (rc) {
		snprintf(s->why, sizeof(s->why), "read grant request: %s", tw_strerror(rc));
		s->err = rc;
		s->state = SLOT_READ;
		return 1;
	}
	s->state = SLOT_GRANT;
	s->t_grant = tw_now_ns();
	return 1;
}

/* Post reads while there is room. Returns whether something happened. */
static bool post_reads(struct fetch *f, struct rslot *s)
{
	struct rbk *b = slot_bk(s);
	bool did = false;

	while (!s->err && s->next_off < s->len && s->inflight < f->nreads) {
		struct rread *rr = NULL;
		size_t n = (size_t)TW_MIN((uint64_t)f->chunk, s->len - s->next_off);
		int rc;

		for (unsigned i = 0; i < f->nreads; i++) {
			if (!s->reads[i].busy) {
				rr = &s->reads[i];
				break;
			}
		}
		if (!rr)
			break;
		memset(&rr->op, 0, sizeof(rr->op));
		rr->op.cb = read_done;
		rr->op.arg = rr;
		rr->slot = s;
		rr->len = n;
		rr->busy = true;
		s->inflight++;
		rc = tw__chan_read(b->peer.ch, &rr->op, s->buf + s->next_off, n, s->mr, &s->rk,
				  s->next_off);
		if (rc) {
			rr->busy = false;
			s->inflight--;
			snprintf(s->why, sizeof(s->why), "posting a read: %s", tw_strerror(rc));
			s->err = rc;
			break;
		}
		s->next_off += n;
		did = true;
	}
	return did;
}

/* Advance one slot's state machine. Returns whether it changed something. */
static bool step(struct fetch *f, struct rslot *s)
{
	struct rctx *c = f->c;

	switch (s->state) {
	case SLOT_FREE:
	case SLOT_VERIFY:
	case SLOT_READY:
	case SLOT_DELIVER:
		return false;
	case SLOT_PICK: {
		int rc = start_grant(f, s);

		if (rc < 0) {
			/* No copy left: the delivery side reports it. */
			s->err = -TW_ENOBACKUP;
			s->state = SLOT_READY;
			return true;
		}
		return rc > 0;
	}
	case SLOT_GRANT:
		if (!s->grant_done)
			return false;
		if (s->grant_status) {
			if (!s->why[0])
				snprintf(s->why, sizeof(s->why), "read grant: %s",
					 tw__rpc_client_errmsg(slot_bk(s)->peer.rpc));
			s->err = s->grant_status;
			if (s->err == -TW_EFENCED) {
				/* Another owner fenced the log after us: no other copy helps. */
				c->taken_over = true;
				release_grant(s);
				c->bks[slot_seg(s)->copies[s->copy].bk].active--;
				s->state = SLOT_READY;
				return true;
			}
		}
		s->state = SLOT_READ;
		s->t_read = tw_now_ns();
		return true;
	case SLOT_READ:
		if (s->err) {
			s->state = SLOT_FAIL;
			return true;
		}
		if (post_reads(f, s))
			return true;
		if (s->inflight == 0 && s->done_bytes == s->len && !s->err) {
			release_grant(s);
			c->bks[slot_seg(s)->copies[s->copy].bk].active--;
			s->state = SLOT_VERIFY;
			tw_log_debug("recover: segment %" PRIu64 " from %s: grant %.2f ms, %" PRIu64
				     " bytes read in %.2f ms", slot_seg(s)->id, slot_bk(s)->peer.addr,
				     (double)(s->t_read - s->t_grant) / 1e6, s->len,
				     (double)(tw_now_ns() - s->t_read) / 1e6);
			return true;
		}
		return false;
	case SLOT_FAIL:
		if (s->inflight > 0)
			return false;
		release_grant(s);
		c->bks[slot_seg(s)->copies[s->copy].bk].active--;
		slot_fail(f, s, s->err);
		return true;
	}
	return false;
}

/* Verify the fetched bytes against the listing: tw_scan_seeded() with the listed chain seed must
 * end exactly at the listed valid length with the listed checksum and entry count. Fetch thread,
 * lock not held (the slot is in SLOT_VERIFY: no operation is pending on it and the delivering
 * thread does not touch it).
 * Returns 0, or -TW_ECORRUPT with s->why set. */
static int verify(struct fetch *f, struct rslot *s)
{
	struct rctx *c = f->c;
	const struct rcopy *cp = &slot_seg(s)->copies[s->copy];
	struct tw_scan_result sr;
	uint64_t t0 = tw_now_ns();

	tw_scan_seeded(s->buf, (size_t)s->len, cp->seed, &sr);
	c->res->phase_ns[TW_RECOVER_PHASE_VERIFY] += tw_now_ns() - t0;
	if (sr.valid_len == s->len && sr.last_checksum == cp->checksum &&
	    sr.entries == cp->entries)
		return 0;
	snprintf(s->why, sizeof(s->why), "fetched bytes fail verification: valid %zu of %" PRIu64
		 " bytes, checksum 0x%08x (listed 0x%08x), %" PRIu64 " entries (listed %" PRIu64
		 "), scan stopped: %s at %zu", sr.valid_len, s->len, sr.last_checksum, cp->checksum,
		 sr.entries, cp->entries, tw_scan_stop_str(sr.stop), sr.stop_offset);
	return -TW_ECORRUPT;
}

/* Keep what the shorter open copies of a delivered segment lack, for the record step
 * (recover.c, record_all): from the shortest such copy's length to the delivered length. */
static void keep_tail(struct rctx *c, struct rseg *g, const uint8_t *buf)
{
	uint64_t from = g->len;

	if (!g->any_open || c->cfg->no_record || c->cfg->no_fence)
		return;
	for (unsigned k = 0; k < g->usable; k++) {
		const struct rcopy *cp = &g->copies[k];

		if (cp->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN && cp->valid_len < from)
			from = cp->valid_len;
	}
	if (from == g->len)
		return;
	g->tail = malloc((size_t)(g->len - from));
	if (!g->tail) {
		tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": no memory to keep the "
			    "%" PRIu64 " bytes its shorter copies lack; they will be closed short",
			    c->cfg->log_id, g->id, g->len - from);
		return;
	}
	memcpy(g->tail, buf + from, (size_t)(g->len - from));
	g->tail_from = from;
}

/* Deliver the entries of a verified segment. Delivering thread, lock not held (the slot is in
 * SLOT_DELIVER: nobody else touches it). 1 delivered, < 0 stop. */
static int deliver(struct fetch *f, struct rslot *s)
{
	struct rctx *c = f->c;
	struct rseg *g = slot_seg(s);
	struct rcopy *cp;
	struct tw_entry_iter it;
	uint64_t t1;
	int rc;

	if (s->err == -TW_EFENCED) {
		tw__rc_seterr(c, "log %016" PRIx64 " was taken over during this recovery (segment %"
			  PRIu64 " on backup %s: %s)", c->cfg->log_id, g->id, slot_bk(s)->peer.addr,
			  s->why);
		return -TW_EFENCED;
	}
	if (s->err == -TW_ENOBACKUP) {
		tw__rc_seterr(c, "log %016" PRIx64 " segment %" PRIu64 ": no usable copy left (every "
			  "copy failed to load, read or verify%s%s)", c->cfg->log_id, g->id,
			  s->last_why[0] ? "; the last, on " : "", s->last_why);
		return -TW_ENOBACKUP;
	}
	cp = &g->copies[s->copy];
	t1 = tw_now_ns();
	it.buf = s->buf;
	it.len = (size_t)s->len;
	it.pos = 0;
	for (;;) {
		struct tw_recovered_entry e;
		const void *p;
		uint32_t len;
		size_t off;

		if (it.pos + 2048 < it.len)
			__builtin_prefetch(it.buf + it.pos + 2048);
		rc = tw_entry_next(&it, &p, &len, &off);
		if (rc <= 0)
			break;
		if ((g->id << 32 | (uint64_t)off) < c->cfg->from_lsn)
			continue; /* the caller has it (cfg.from_lsn) */
		e.index = f->index++;
		e.segment_id = g->id;
		e.offset = off;
		e.lsn = g->id << 32 | (uint64_t)off;
		e.data = p;
		e.len = len;
		c->res->entries++;
		c->res->payload_bytes += len;
		if (c->cb && c->cb(c->cb_arg, &e) != 0) {
			tw__rc_seterr(c, "the entry callback stopped the recovery at entry %" PRIu64,
				  e.index);
			return -ECANCELED;
		}
	}
	c->res->phase_ns[TW_RECOVER_PHASE_DELIVER] += tw_now_ns() - t1;
	if (rc < 0) {
		tw__rc_seterr(c, "segment %" PRIu64 ": entries not well formed after a good scan",
			  g->id);
		return -TW_ECORRUPT;
	}
	g->len = s->len;
	g->checksum = cp->checksum;
	g->version = cp->version;
	g->done = true;
	keep_tail(c, g, s->buf);
	if (c->res->segments == 0)
		c->res->first_segment = g->id;
	c->res->last_segment = g->id;
	c->res->segments++;
	c->res->log_bytes += s->len;
	return 1; /* the caller frees the slot */
}

static void fetch_fini(struct fetch *f)
{
	struct rctx *c = f->c;

	/* Let in-flight reads and RPCs finish so no callback points at freed memory. */
	for (int spins = 0; spins < 10000; spins++) {
		bool busy = false;

		for (unsigned i = 0; i < f->nslots; i++)
			if (f->slots[i].inflight || f->slots[i].state == SLOT_GRANT)
				busy = true;
		if (!busy)
			break;
		for (unsigned i = 0; i < f->nslots; i++)
			if (f->slots[i].state == SLOT_GRANT && f->slots[i].grant_done)
				f->slots[i].state = SLOT_FREE;
		tw__rc_progress(c, 10);
	}
	for (unsigned i = 0; i < f->nslots; i++) {
		struct rslot *s = &f->slots[i];

		if (s->state == SLOT_GRANT || s->inflight) {
			/* Still not done (peer stuck): dropping the clients completes them. */
			for (unsigned k = 0; k < c->nbk; k++) {
				if (c->bks[k].peer.rpc)
					tw__rpc_client_destroy(c->bks[k].peer.rpc);
				c->bks[k].peer.rpc = NULL;
				if (c->bks[k].peer.ch)
					tw__chan_close(c->bks[k].peer.ch);
				c->bks[k].peer.ch = NULL;
			}
			break;
		}
	}
	for (unsigned i = 0; i < f->nslots; i++) {
		struct rslot *s = &f->slots[i];

		if (s->mr)
			tw__mr_close(s->mr);
		if (s->buf)
			tw__fab_free(s->buf, s->cap);
		free(s->reads);
	}
	free(f->slots);
}

/* The fetch thread: hands free slots the next segments, advances every slot, drives the fab. */
static void *fetch_main(void *arg)
{
	struct fetch *f = arg;
	struct rctx *c = f->c;

	pthread_mutex_lock(&f->lock);
	while (!f->stop) {
		bool did = false, wake = false;

		for (unsigned i = 0; i < f->nslots && f->next_issue < c->nsegs; i++) {
			struct rslot *s = &f->slots[i];

			if (s->state != SLOT_FREE)
				continue;
			s->si = f->next_issue++;
			s->copy = -1;
			s->last_why[0] = '\0';
			s->state = SLOT_PICK;
			did = true;
		}
		for (unsigned i = 0; i < f->nslots; i++) {
			struct rslot *s = &f->slots[i];

			did |= step(f, s);
			if (s->state == SLOT_READY && s->si == f->next_deliver)
				wake = true;
		}
		/* Scan what arrived, without the lock, then hand it to the delivering thread. */
		for (unsigned i = 0; i < f->nslots; i++) {
			struct rslot *s = &f->slots[i];
			int vrc;

			if (s->state != SLOT_VERIFY)
				continue;
			pthread_mutex_unlock(&f->lock);
			vrc = verify(f, s);
			pthread_mutex_lock(&f->lock);
			if (vrc) {
				slot_fail(f, s, vrc);
			} else {
				s->state = SLOT_READY;
				if (s->si == f->next_deliver)
					wake = true;
			}
			did = true;
		}
		if (wake)
			pthread_cond_signal(&f->ready);
		pthread_mutex_unlock(&f->lock);
		/* Callbacks run here without the lock: they touch only slots that are being
		 * fetched, never one the delivering thread holds. */
		tw__rc_progress(c, did ? 0 : 50);
		pthread_mutex_lock(&f->lock);
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

int tw__rc_fetch_all(struct rctx *c)
{
	const struct tw_recover_config *cfg = c->cfg;
	struct fetch f;
	size_t cap = 0;
	unsigned up = 0;
	pthread_t thr;
	int rc = 0;

	memset(&f, 0, sizeof(f));
	f.c = c;
	if (c->nsegs == 0)
		return 0;
	pthread_mutex_init(&f.lock, NULL);
	pthread_cond_init(&f.ready, NULL);
	for (size_t i = 0; i < c->nsegs; i++)
		for (unsigned k = 0; k < c->segs[i].usable; k++)
			if (c->segs[i].copies[k].valid_len > cap)
				cap = (size_t)c->segs[i].copies[k].valid_len;
	cap = (cap + 4095) & ~(size_t)4095;
	if (cap == 0)
		cap = 4096;
	for (unsigned i = 0; i < c->nbk; i++)
		up += c->bks[i].peer.up && !c->bks[i].peer.lost;
	f.nslots = cfg->window ? cfg->window : 3 * (up ? up : 1);
	if (f.nslots > c->nsegs)
		f.nslots = (unsigned)c->nsegs;
	f.nreads = cfg->reads_per_seg ? cfg->reads_per_seg : 4;
	f.chunk = cfg->chunk_size ? cfg->chunk_size : (1u << 20);
	f.slots = calloc(f.nslots, sizeof(*f.slots));
	if (!f.slots) {
		f.nslots = 0;
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < f.nslots; i++) {
		struct rslot *s = &f.slots[i];

		s->c = c;
		s->copy = -1;
		s->cap = cap;
		s->buf = tw__fab_alloc(cap);
		s->reads = calloc(f.nreads, sizeof(*s->reads));
		if (!s->buf || !s->reads) {
			rc = -ENOMEM;
			goto out;
		}
		rc = tw__mr_reg(c->fab, s->buf, cap, TW_MR_READ_DST, &s->mr);
		if (rc) {
			tw__rc_seterr(c, "cannot register a %zu-byte read buffer: %s", cap,
				  tw_strerror(rc));
			goto out;
		}
	}
	if (pthread_create(&thr, NULL, fetch_main, &f) != 0) {
		tw__rc_seterr(c, "cannot start the fetch thread");
		rc = -EAGAIN;
		goto out;
	}
	pthread_mutex_lock(&f.lock);
	while (f.next_deliver < c->nsegs) {
		struct rslot *s = NULL;

		for (unsigned i = 0; i < f.nslots; i++) {
			if (f.slots[i].state == SLOT_READY && f.slots[i].si == f.next_deliver) {
				s = &f.slots[i];
				break;
			}
		}
		if (!s) {
			pthread_cond_wait(&f.ready, &f.lock);
			continue;
		}
		s->state = SLOT_DELIVER;
		pthread_mutex_unlock(&f.lock);
		rc = deliver(&f, s);
		pthread_mutex_lock(&f.lock);
		if (rc < 0)
			break;
		s->state = SLOT_FREE;
		f.next_deliver++;
		rc = 0;
		tw__fab_wakeup(c->fab);
	}
	f.stop = true;
	pthread_mutex_unlock(&f.lock);
	tw__fab_wakeup(c->fab);
	pthread_join(thr, NULL);
out:
	fetch_fini(&f);
	pthread_cond_destroy(&f.ready);
	pthread_mutex_destroy(&f.lock);
	return rc;
}
