/*
 * backup/backup_ops.c — what the backup does for each RPC: open (admission), close (verify,
 * hand to the flusher), fence, set-version, free, read grants. Progress thread only. Every input
 * comes from the network: checked here even when the RPC layer already validated ranges.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/clock.h"
#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"


/* Ownership checks (backup_ops.c). check_epoch: epoch not older than the log's. check_owner:
 * also, at the log's current epoch, the same incarnation as its owner. -TW_EFENCED + msg. */
static int check_epoch(struct tw_backup *b, uint64_t log_id, uint64_t epoch, char *msg,
		       size_t msglen)
{
	struct logst *lg = tw__bk_log(b, log_id, false);

	if (lg && lg->unavail) {
		snprintf(msg, msglen, "log %016" PRIx64 " is unavailable on this backup: %s", log_id,
			 lg->unavail);
		return -TW_ECORRUPT;
	}
	if (lg && epoch < lg->epoch) {
		snprintf(msg, msglen, "log %016" PRIx64 " is fenced at epoch %" PRIu64 " (owner "
			 "incarnation %016" PRIx64 "); request carries epoch %" PRIu64, log_id,
			 lg->epoch, lg->owner, epoch);
		return -TW_EFENCED;
	}
	return 0;
}

int tw__bk_check_owner(struct tw_backup *b, uint64_t log_id, uint64_t epoch, uint64_t incarnation,
		   char *msg, size_t msglen)
{
	struct logst *lg = tw__bk_log(b, log_id, false);
	int rc = check_epoch(b, log_id, epoch, msg, msglen);

	if (rc)
		return rc;
	if (lg && lg->epoch > 0 && epoch == lg->epoch && incarnation != lg->owner) {
		snprintf(msg, msglen, "log %016" PRIx64 " is owned by incarnation %016" PRIx64 " at "
			 "epoch %" PRIu64 "; this request comes from incarnation %016" PRIx64 " at "
			 "the same epoch: another primary or recovery holds the log (take it over "
			 "with a newer epoch if its owner is dead)", log_id, lg->owner, lg->epoch,
			 incarnation);
		return -TW_EFENCED;
	}
	return 0;
}

void tw__bk_hold_touch(struct tw_backup *b, struct conn *c, uint64_t log_id)
{
	struct logst *lg = c ? tw__bk_log(b, log_id, false) : NULL;

	if (lg && lg->hold_conn == c->id)
		lg->hold_ns = tw__clock_mono(b->clock);
}

bool tw__bk_log_known(struct tw_backup *b, uint64_t log_id)
{
	struct logst *lg = tw__bk_log(b, log_id, false);
	size_t i = tw__bk_seg_lower_bound(b, log_id, 0);

	if (lg && lg->free_below > 0)
		return true;
	for (; i < b->nsegs && b->segs[i]->log_id == log_id; i++)
		if (!b->segs[i]->freed)
			return true;
	return false;
}

static size_t scan_len(const struct tw_backup *b, const struct seg *s)
{
	return s->length && s->length < b->pool.size ? (size_t)s->length : b->pool.size;
}

void tw__bk_scan_open(struct tw_backup *b, struct seg *s)
{
	struct tw_scan_result sr;

	if (!s->buf)
		return;
	/* Only [0, length) can hold bytes of this use: the rest of a reused buffer is stale. */
	tw_scan_seeded(s->buf->mem, scan_len(b, s), s->seed, &sr);
	s->valid_len = sr.valid_len;
	s->checksum = sr.last_checksum;
	s->entries = sr.entries;
}

/* Make pool buffer pb ready for a use under `seed`: zero it when its stale bytes could validate
 * under that seed (seed 0, or the seed of its last use), then record the seed. */
static void buf_prepare(struct tw_backup *b, struct pool_buf *pb, uint32_t seed)
{
	if (!pb->zeroed && (seed == 0 || seed == pb->seed)) {
		/* Its stale bytes were written under this very seed (or an unseeded open wants a
		 * zeroed buffer): they could validate. Zero it, on this thread: a 1.1 primary's
		 * opens, or a repeated seed (odds 2^-32 for a random one). */
		memset(pb->mem, 0, b->pool.size);
		pb->zeroed = true;
		pthread_mutex_lock(&b->st_lock);
		b->st.buffers_zeroed++;
		pthread_mutex_unlock(&b->st_lock);
	}
	pb->seed = seed;
	pb->zeroed = false; /* the use about to start writes into it */
	pb->moved = false;
}

static int refuse(struct tw_backup *b)
{
	pthread_mutex_lock(&b->st_lock);
	b->st.opens_refused++;
	pthread_mutex_unlock(&b->st_lock);
	return -TW_EREFUSED;
}

/* The refusal of an open (or a load) when every buffer is in use and the pool is at its cap. */
static void refuse_full(struct tw_backup *b, char *msg, size_t msglen)
{
	const struct pool *p = &b->pool;

	/* Short: the primary's -TW_ENOBACKUP message quotes it for each of its backups. */
	snprintf(msg, msglen, "no free buffer: all %u in use (%u open, %u closed, %u loaded), "
		 "pool at its cap (--max-buffers %u); raise --max-buffers or use another backup",
		 p->n, p->count[POOL_OPEN], p->count[POOL_CLOSED], p->count[POOL_LOADED], p->max);
}

/* A free buffer, growing the pool if none is (tw__pool_get). A refusal (RESOURCE_EXHAUSTED: the
 * primary tries another backup) when the pool is at its cap or cannot grow. */
static int take_buf(struct tw_backup *b, struct pool_buf **out, char *msg, size_t msglen)
{
	char why[320];
	int rc = tw__pool_get(&b->pool, out, why, sizeof(why));

	if (rc == -ENOSPC) {
		refuse_full(b, msg, msglen);
		return refuse(b);
	}
	if (rc) {
		snprintf(msg, msglen, "no free buffer and the pool cannot grow past %u buffers: %s; "
			 "start twd with more --buffers preallocated or use another backup",
			 b->pool.n, why);
		tw_log_warn("backup: %s", msg);
		return refuse(b);
	}
	return 0;
}

static const char *state_name(const struct seg *s)
{
	switch (s->state) {
	case SEG_OPEN: return "open";
	case SEG_CLOSED: return "closed";
	case SEG_FLUSHED: return s->disk_open ? "flushed while open" : "flushed";
	case SEG_LOST: return "lost (opened here, gone after a restart)";
	default: return "?";
	}
}

static unsigned revoke_log(struct tw_backup *b, struct conn *c, uint64_t log_id);

/* An open that must be refused before anything else is looked at: the log exists (create),
 * the segment is being freed, older, open for another owner, or open with another seed. */
static int open_refused(struct tw_backup *b, const struct bk_seg_req *r,
			const struct bk_open_req *o, const struct seg *s, const struct logst *lg,
			bool same_owner, char *msg, size_t msglen)
{
	if (o->create_log && !same_owner && tw__bk_log_known(b, r->log_id)) {
		snprintf(msg, msglen, "log %016" PRIx64 " already exists on this backup (epoch %"
			 PRIu64 "%s): a plain open only creates new logs; take it over to continue "
			 "it (tw_primary_takeover), or delete it (twctl delete)", r->log_id,
			 lg ? lg->epoch : 0, lg && lg->free_below ? ", a freed prefix" : "");
		return -EEXIST;
	}
	if (s && s->freed) {
		snprintf(msg, msglen, "segment " SEGF " is being freed; retry", r->log_id,
			 r->segment_id);
		return -EEXIST;
	}
	if (s && r->version < s->version) {
		snprintf(msg, msglen, "segment " SEGF ": replica version %" PRIu64 " is older than "
			 "the %" PRIu64 " held here", r->log_id, r->segment_id, r->version,
			 s->version);
		return -TW_ESTALE;
	}
	if (s && s->state == SEG_OPEN && !same_owner) {
		snprintf(msg, msglen, "segment " SEGF " is already open here (epoch %" PRIu64 ", "
			 "version %" PRIu64 "); a segment is never reused: a new owner continues "
			 "in a new segment", r->log_id, r->segment_id, s->epoch, s->version);
		return -EEXIST;
	}
	if (s && s->state == SEG_OPEN && o->seed != s->seed) {
		snprintf(msg, msglen, "segment " SEGF " is open here with chain seed 0x%08x; this "
			 "open asks for 0x%08x: all opens of one segment must carry its one seed",
			 r->log_id, r->segment_id, s->seed, o->seed);
		return -EINVAL;
	}
	return 0;
}

/* The writer's process (shm), for the guard a fence leaves (tw__pool_move); 0: unknown. */
static int writer_pid(const struct conn *c)
{
	return c && c->ch ? tw__chan_peer_pid(c->ch) : 0;
}

/* The owner's open segment asked for again: a retried open whose reply was lost, or a
 * reconnect. Hand out the same bytes. */
static int reopen_own(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		      const struct bk_open_req *o, struct seg *s, struct tw_rkey *rk_out,
		      char *msg, size_t msglen)
{
	int rc;

	/* The owner's segment again: a retried open whose reply was lost, or a reconnect.
	 * Hand out the same bytes. */
	rc = tw__pool_ensure_mr(&b->pool, s->buf);
	if (rc) {
		snprintf(msg, msglen, "cannot register the buffer again: %s",
			 tw_strerror(rc));
		return rc;
	}
	s->owner = c ? c->id : 0;
	if (s->writer_pid != writer_pid(c))
		s->writer_pid = 0; /* two processes wrote it: its guard (if fenced) is kept */
	s->version = r->version;
	if (r->epoch > s->epoch)
		s->epoch = r->epoch;
	if (o->length > s->length)
		s->length = o->length;
	tw__mr_rkey(s->buf->mr, rk_out);
	rk_out->len = s->length;
	return 0;
}

/* A segment this backup does not hold open: refused if it ever held it (or freed it), else a
 * buffer is admitted, recorded durably and granted. */
static int open_fresh(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		      const struct bk_open_req *o, struct seg *s, struct logst *lg,
		      struct tw_rkey *rk_out, char *msg, size_t msglen)
{
	struct pool *p = &b->pool;
	struct pool_buf *pb;
	int rc;

	/* Never overwrite a segment held here. The one exception: the log's owner re-creating
	 * a replica at a higher replica version over its own older flushed copy (a backup that
	 * restarted and rejoined, docs/failover.md); the older copy stays until the flush. */
	if (s && (s->buf || s->state != SEG_FLUSHED || r->version <= s->version || !lg ||
		  lg->epoch != r->epoch || lg->owner != r->incarnation)) {
		snprintf(msg, msglen, "segment " SEGF " already exists here (%s, epoch %" PRIu64
			 ", version %" PRIu64 "); segments are never reused or overwritten",
			 r->log_id, r->segment_id, state_name(s), s->epoch, s->version);
		return -EEXIST;
	}
	if (lg && r->segment_id < lg->free_below) {
		snprintf(msg, msglen, "segment " SEGF " was freed here (log cleaning: first live "
			 "segment %" PRIu64 "); segment ids are never reused", r->log_id,
			 r->segment_id, lg->free_below);
		return -EEXIST;
	}

	/* Admission: the pool's cap, then what this backup could flush on battery. */
	if (p->count[POOL_FREE] == 0 && p->n >= p->max) {
		refuse_full(b, msg, msglen);
		return refuse(b);
	}
	if (tw__pool_unflushed(p) >= b->cfg.unflushed_limit) {
		snprintf(msg, msglen, "unflushed limit reached: %u buffers open or awaiting flush "
			 "(--unflushed-limit %u: what this backup can flush on battery power); retry "
			 "later, raise --unflushed-limit or use another backup", tw__pool_unflushed(p),
			 b->cfg.unflushed_limit);
		return refuse(b);
	}
	lg = tw__bk_log(b, r->log_id, true);
	if (!lg) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	rc = take_buf(b, &pb, msg, msglen);
	if (rc)
		return rc;
	rc = tw__pool_ensure_mr(p, pb);
	if (rc) {
		snprintf(msg, msglen, "cannot register a buffer: %s", tw_strerror(rc));
		return rc;
	}
	if (!s) {
		s = tw__bk_seg_insert(b, r->log_id, r->segment_id);
		if (!s) {
			snprintf(msg, msglen, "out of memory");
			return -ENOMEM;
		}
	}
	/* Durable before the grant: after a restart that loses the buffer, the segment is listed
	 * LOST instead of silently missing (docs/recovery.md, "Loss is reported"). */
	{
		struct metalog_rec rec = { METALOG_OPEN, r->log_id, r->segment_id, r->epoch,
					   r->incarnation };

		rc = tw__bk_meta_append(b, &rec);
		if (rc) {
			if (s->state == 0)
				tw__bk_seg_delete(b, s);
			snprintf(msg, msglen, "cannot record the open of segment " SEGF " durably "
				 "in %s: %s", r->log_id, r->segment_id, b->cfg.dir, tw_strerror(rc));
			tw_log_error("backup: %s", msg);
			return rc;
		}
	}
	if (r->epoch > lg->epoch || (r->epoch == lg->epoch && lg->epoch == 0)) {
		/* A newer owner: as a fence would, stop the older one on this backup. */
		if (r->epoch > lg->epoch)
			revoke_log(b, c, r->log_id);
		lg->epoch = r->epoch;
		lg->owner = r->incarnation;
	}
	/* (A flushed older copy, if any, stays on disk until this replica's flush replaces it.) */
	s->state = SEG_OPEN;
	s->version = r->version;
	s->epoch = r->epoch;
	s->length = o->length;
	s->valid_len = 0;
	s->checksum = 0;
	s->entries = 0;
	s->seed = o->seed;
	s->corrupt = false;
	s->listed_open = false;
	s->flush_tries = 0;
	s->owner = c ? c->id : 0;
	s->writer_pid = writer_pid(c);
	/* Reused as it is (docs/log-format.md §7, "Reuse without zeroing"). */
	buf_prepare(b, pb, o->seed);
	s->buf = pb;
	pb->seg = s;
	tw__pool_set_state(p, pb, POOL_OPEN);
	b->index_dirty = true;
	tw__mr_rkey(pb->mr, rk_out);
	rk_out->len = o->length;
	tw_log_debug("backup: opened " SEGF " in buffer %u (epoch %" PRIu64 ", version %" PRIu64
		     ", chain seed 0x%08x)", r->log_id, r->segment_id, pb->idx, r->epoch,
		     r->version, o->seed);
	return 0;
}

int tw__bk_op_open(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		   const struct bk_open_req *o, struct tw_rkey *rk_out, char *msg, size_t msglen)
{
	struct pool *p = &b->pool;
	struct logst *lg;
	struct seg *s;
	bool same_owner;
	int rc;

	if (o->length == 0 || o->length > p->size) {
		snprintf(msg, msglen, "length %" PRIu64 ": must be between 1 and %zu (this backup's "
			 "buffer size)", o->length, p->size);
		return -EINVAL;
	}
	if (r->offset > o->length) {
		snprintf(msg, msglen, "offset %" PRIu64 " is past the requested length %" PRIu64,
			 r->offset, o->length);
		return -EINVAL;
	}
	if (r->epoch > TW_EPOCH_MAX) {
		snprintf(msg, msglen, "epoch %" PRIu64 " is above the maximum %" PRIu64, r->epoch,
			 (uint64_t)TW_EPOCH_MAX);
		return -EINVAL;
	}
	rc = tw__bk_check_owner(b, r->log_id, r->epoch, r->incarnation, msg, msglen);
	if (rc)
		return rc;

	s = tw__bk_seg_find(b, r->log_id, r->segment_id);
	lg = tw__bk_log(b, r->log_id, false);
	/* The owner's own open segment, asked for again (a retry, or after a reconnect). */
	same_owner = lg && lg->epoch == r->epoch && lg->owner == r->incarnation && s &&
		     s->state == SEG_OPEN && s->buf && s->epoch == r->epoch;
	rc = open_refused(b, r, o, s, lg, same_owner, msg, msglen);
	if (rc)
		return rc;
	if (s && s->state == SEG_OPEN)
		return reopen_own(b, c, r, o, s, rk_out, msg, msglen);
	return open_fresh(b, c, r, o, s, lg, rk_out, msg, msglen);
}

int tw__bk_op_close(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		struct tw_scan_result *sr, char *msg, size_t msglen, struct bk_scan *defer)
{
	struct seg *s;
	int rc;

	(void)c;
	memset(sr, 0, sizeof(*sr));
	if (r->offset > b->pool.size) {
		snprintf(msg, msglen, "offset %" PRIu64 " is past the buffer size %zu", r->offset,
			 b->pool.size);
		return -EINVAL;
	}
	rc = tw__bk_check_owner(b, r->log_id, r->epoch, r->incarnation, msg, msglen);
	if (rc)
		return rc;
	s = tw__bk_seg_find(b, r->log_id, r->segment_id);
	if (!s || s->freed || s->state == SEG_LOST) {
		snprintf(msg, msglen, "segment " SEGF " is not open here", r->log_id, r->segment_id);
		return -TW_ENOTFOUND;
	}
	if (s->state != SEG_OPEN) {
		sr->valid_len = s->valid_len;
		sr->last_checksum = s->checksum;
		sr->entries = s->entries;
		if (!s->corrupt && !s->disk_open && s->valid_len == r->offset &&
		    s->checksum == r->checksum)
			return 0; /* a retried close whose reply was lost */
		snprintf(msg, msglen, "segment " SEGF " is not open (%s)", r->log_id, r->segment_id,
			 state_name(s));
		return -EEXIST;
	}
	if (r->version < s->version) {
		snprintf(msg, msglen, "replica version %" PRIu64 " is older than the %" PRIu64
			 " held here", r->version, s->version);
		return -TW_ESTALE;
	}
	if (r->offset > s->length) {
		snprintf(msg, msglen, "offset %" PRIu64 " is past the length %" PRIu64 " granted at "
			 "open", r->offset, s->length);
		return -EINVAL;
	}
	/* No more writes: the key dies now (a fresh one is made when the buffer is reused). */
	tw__pool_revoke_mr(&b->pool, s->buf);
	/* One walk from 0 with the segment's seed, as for an open buffer: it ends at the last
	 * whole write of this use (in a reused buffer, at the latest at the checksum entry of the
	 * first stale write after it), so it costs a pass over the bytes the segment holds and
	 * proves them: every header check, payload CRC and the chain up to the claimed offset, and
	 * that no valid write of this use follows it (docs/recovery.md, "What is verified
	 * when"). */
	if (defer) {
		/* On the scanner thread: this thread goes on serving the writes of the other
		 * segments (tcp and sockets need it to) and answers when the result is in
		 * (backup_scan.c). */
		defer->s = s;
		defer->mem = s->buf->mem;
		defer->len = scan_len(b, s);
		defer->seed = s->seed;
		defer->offset = r->offset;
		defer->checksum = r->checksum;
		tw__bk_scan_submit(b, defer);
		return TW_RPC_DEFERRED;
	}
	tw_scan_seeded(s->buf->mem, scan_len(b, s), s->seed, sr);
	return tw__bk_close_apply(b, s, r->offset, r->checksum, sr, msg, msglen);
}

int tw__bk_close_apply(struct tw_backup *b, struct seg *s, uint64_t offset, uint32_t checksum,
		       const struct tw_scan_result *sr, char *msg, size_t msglen)
{
	int rc = 0;

	s->valid_len = sr->valid_len;
	s->checksum = sr->last_checksum;
	s->entries = sr->entries;
	s->state = SEG_CLOSED;
	tw__pool_set_state(&b->pool, s->buf, POOL_CLOSED);
	if (sr->valid_len != offset || sr->last_checksum != checksum) {
		s->corrupt = true;
		snprintf(msg, msglen, "segment " SEGF ": scan found valid length %zu and checksum "
			 "0x%08x (stopped: %s at %zu), close says offset %" PRIu64 " checksum 0x%08x; "
			 "replica kept and marked corrupt", s->log_id, s->segment_id, sr->valid_len,
			 sr->last_checksum, tw_scan_stop_str(sr->stop), sr->stop_offset, offset,
			 checksum);
		tw_log_warn("backup: %s", msg);
		rc = -TW_ECORRUPT;
	}
	b->index_dirty = true;
	tw__bk_flush_closed(b, s);
	tw__bk_readers_wake(b, s->log_id, s->segment_id); /* readable to its end now */
	return rc;
}

int tw__bk_op_fence(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t new_epoch,
		uint64_t incarnation, uint64_t *epoch_out, uint64_t *owner_out, char *msg,
		size_t msglen)
{
	struct metalog_rec rec = { METALOG_OWNER, log_id, new_epoch, incarnation, 0 };
	struct logst *lg;
	unsigned revoked = 0;
	int rc;

	if (new_epoch == 0) {
		snprintf(msg, msglen, "new epoch must be > 0");
		return -EINVAL;
	}
	if (new_epoch > TW_EPOCH_MAX) {
		snprintf(msg, msglen, "epoch %" PRIu64 " would leave no room to go on: epochs are at "
			 "most %" PRIu64 " (2^48 - 1)", new_epoch, (uint64_t)TW_EPOCH_MAX);
		return -EINVAL;
	}
	lg = tw__bk_log(b, log_id, true);
	if (!lg) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	if (lg->unavail)
		return check_epoch(b, log_id, new_epoch, msg, msglen); /* says why */
	*epoch_out = lg->epoch;
	*owner_out = lg->owner;
	if (lg->hold_conn && lg->hold_inc != incarnation && (!c || c->id != lg->hold_conn)) {
		/* Another recovery or takeover fenced the log and is still at work on its
		 * connection: a second one now would only cut it off half-way. */
		struct conn *h = tw__bk_conn_find(b, lg->hold_conn);
		uint64_t idle = tw__clock_mono(b->clock) - lg->hold_ns;

		if (h && !h->lost && !h->drop && idle < BK_HOLD_NS) {
			*epoch_out = lg->epoch;
			*owner_out = lg->owner;
			snprintf(msg, msglen, "log %016" PRIx64 " is being recovered or taken over by "
				 "incarnation %016" PRIx64 " at epoch %" PRIu64 " (connection from "
				 "%s, active %" PRIu64 " ms ago); retry when it is done", log_id,
				 lg->hold_inc, lg->epoch, tw__chan_peer(h->ch),
				 idle / 1000000u);
			return -TW_EFENCED;
		}
	}
	if (new_epoch < lg->epoch || (new_epoch == lg->epoch && incarnation != lg->owner)) {
		snprintf(msg, msglen, "log %016" PRIx64 " is already at epoch %" PRIu64 ", owned by "
			 "incarnation %016" PRIx64 " (this fence: epoch %" PRIu64 ", incarnation %016"
			 PRIx64 "): another primary or recovery took the log over", log_id,
			 lg->epoch, lg->owner, new_epoch, incarnation);
		return -TW_EFENCED;
	}
	if (new_epoch > lg->epoch || lg->epoch_unsaved) {
		/* Durable before the reply, so a restart still refuses the old epoch. One O_DSYNC
		 * record in the journal, not behind the flusher's data (backup/metalog.h). A
		 * record that failed is written again by the next fence at that epoch: the
		 * epoch holds in memory meanwhile (the old owner stays fenced), but a success is
		 * answered only once it is durable. */
		rc = tw__bk_meta_append(b, &rec);
		lg->epoch = new_epoch;
		lg->owner = incarnation;
		lg->epoch_unsaved = rc != 0;
		*epoch_out = new_epoch;
		*owner_out = incarnation;
		if (rc != 0) {
			snprintf(msg, msglen, "log %016" PRIx64 " fenced at epoch %" PRIu64 " in "
				 "memory, but storing the epoch in %s failed: %s", log_id, new_epoch,
				 b->cfg.dir, tw_strerror(rc));
			tw_log_error("backup: %s", msg);
			revoke_log(b, c, log_id);
			return rc;
		}
	}
	*epoch_out = new_epoch;
	*owner_out = incarnation;
	lg->hold_conn = c ? c->id : 0;
	lg->hold_inc = incarnation;
	lg->hold_ns = tw__clock_mono(b->clock);
	revoked = revoke_log(b, c, log_id);
	tw_log_info("backup: log %016" PRIx64 " fenced at epoch %" PRIu64 " by incarnation %016"
		    PRIx64 " (%u open buffers revoked)", log_id, new_epoch, incarnation, revoked);
	tw__bk_readers_wake(b, log_id, UINT64_MAX); /* readers learn the new epoch */
	return 0;
}

/* Revoke the keys of a log's open buffers and drop its old primaries' connections. Where a
 * writer checks no key (shm's CMA fast path), also take each buffer away from the address its
 * writers know (tw__bk_fence_buf). */
static unsigned revoke_log(struct tw_backup *b, struct conn *c, uint64_t log_id)
{
	unsigned revoked = 0;

	tw__pool_sweep_guards(&b->pool, true);
	for (size_t i = tw__bk_seg_lower_bound(b, log_id, 0); i < b->nsegs; i++) {
		struct seg *s = b->segs[i];
		struct conn *owner;

		if (s->log_id != log_id)
			break;
		if (s->state != SEG_OPEN || !s->buf)
			continue;
		/* Close the old primary's connection too (shm's fast path does not check keys),
		 * and shut it before the key dies: on sockets a write in flight to a closed
		 * registration crashes this process (tw__chan_shut, docs/fabric.md). */
		owner = s->owner ? tw__bk_conn_find(b, s->owner) : NULL;
		if (owner && owner != c) {
			tw_log_info("backup: fence of log %016" PRIx64 ": closing connection %" PRIu64
				    " (%s) of the old primary", log_id, owner->id,
				    tw__chan_peer(owner->ch));
			tw__chan_shut(owner->ch);
			owner->drop = true;
			b->reap = true;
		}
		tw__pool_revoke_mr(&b->pool, s->buf);
		tw__bk_fence_buf(b, s);
		revoked++;
		s->owner = 0;
	}
	return revoked;
}

void tw__bk_fence_buf(struct tw_backup *b, struct seg *s)
{
	struct pool_buf *pb = s->buf;

	if (!b->pool.move_on_fence || !pb || pb->moved)
		return;
	if (pb->in_flush) {
		/* Only tw_backup_flush_all flushes an open buffer, and it waits for its jobs
		 * before any request is served: not reached. Never move pages a flush reads. */
		tw_log_warn("backup: segment " SEGF ": its buffer is being flushed; not moved at "
			    "this fence", s->log_id, s->segment_id);
		return;
	}
	tw__pool_revoke_mr(&b->pool, pb);
	tw__pool_move(&b->pool, pb, s->writer_pid);
}

int tw__bk_op_set_version(struct tw_backup *b, uint64_t log_id, uint64_t segment_id, uint64_t epoch,
		      uint64_t incarnation, uint64_t version, char *msg, size_t msglen)
{
	struct seg *s;
	int rc = tw__bk_check_owner(b, log_id, epoch, incarnation, msg, msglen);

	if (rc)
		return rc;
	s = tw__bk_seg_find(b, log_id, segment_id);
	if (!s || s->freed || s->state == SEG_LOST) {
		snprintf(msg, msglen, "no segment " SEGF " here", log_id, segment_id);
		return -TW_ENOTFOUND;
	}
	if (version < s->version) {
		snprintf(msg, msglen, "version %" PRIu64 " is older than the %" PRIu64 " held here",
			 version, s->version);
		return -TW_ESTALE;
	}
	if (version == s->version)
		return 0;
	s->version = version;
	if (s->state == SEG_FLUSHED && s->on_disk && !s->corrupt) {
		/* The file carries the version too: rewrite it on the flusher. (A closed segment
		 * still in its flush gets this when the flush completes.) */
		struct job *j = calloc(1, sizeof(*j));

		if (!j) {
			snprintf(msg, msglen, "out of memory");
			return -ENOMEM;
		}
		j->kind = JOB_SETVER;
		j->hdr.log_id = log_id;
		j->hdr.segment_id = segment_id;
		j->hdr.replica_version = version;
		tw__bk_submit(b, j);
	}
	return 0;
}

/* Drop one segment (FreeSegments). */
static void drop_seg(struct tw_backup *b, struct seg *s)
{
	struct pool_buf *pb = s->buf;
	bool in_flush = pb && pb->in_flush;

	if (in_flush) {
		/* Its flush still runs: finish there (job_done in backup_flush.c removes the file). */
		s->freed = true;
		b->index_dirty = true;
		return;
	}
	if (pb) {
		s->buf = NULL;
		tw__bk_release_buf(b, pb);
	}
	if (s->on_disk) {
		struct job *j = calloc(1, sizeof(*j));

		if (j) {
			j->kind = JOB_REMOVE;
			j->hdr.log_id = s->log_id;
			j->hdr.segment_id = s->segment_id;
			tw__bk_submit(b, j);
		} else {
			/* No memory for a job: remove it here (a blocking unlink on the progress
			 * thread, rare). A restart would remove it anyway: the free is recorded. */
			int rc = tw__segfile_remove(b->dirfd, s->log_id, s->segment_id, &b->fio);

			if (rc != 0 && rc != -ENOENT)
				tw_log_warn("backup: removing freed segment " SEGF ": %s", s->log_id,
					    s->segment_id, tw_strerror(rc));
		}
	}
	tw__bk_seg_delete(b, s);
}

int tw__bk_op_free(struct tw_backup *b, uint64_t log_id, uint64_t below, uint64_t epoch,
	       uint64_t incarnation, bool delete_log, uint64_t *freed_out, char *msg,
	       size_t msglen)
{
	struct metalog_rec rec = { delete_log ? METALOG_DELETE : METALOG_FREE, log_id, below, 0,
				   0 };
	struct logst *lg = tw__bk_log(b, log_id, false);
	uint64_t n = 0;
	size_t i;
	int rc;

	*freed_out = 0;
	/* Deleting takes the log from its owner: only the owner, or a newer epoch (after a
	 * fence). Freeing a closed prefix is log cleaning: any peer at the current epoch. */
	rc = delete_log ? tw__bk_check_owner(b, log_id, epoch, incarnation, msg, msglen)
			: check_epoch(b, log_id, epoch, msg, msglen);
	if (rc)
		return rc;
	if (delete_log)
		below = UINT64_MAX;
	i = tw__bk_seg_lower_bound(b, log_id, 0);
	for (size_t k = i; !delete_log && k < b->nsegs; k++) {
		struct seg *s = b->segs[k];

		if (s->log_id != log_id || s->segment_id >= below)
			break;
		/* The owner's open segment is live; one left by a fenced owner is not. */
		if (s->state == SEG_OPEN && !s->freed && (!lg || s->epoch >= lg->epoch)) {
			snprintf(msg, msglen, "segment " SEGF " is still open (being written): free "
				 "only below it, or close or take over the log first", log_id,
				 s->segment_id);
			return -EINVAL;
		}
	}
	if (!delete_log && (!lg || below > lg->free_below) && below > 0) {
		/* Durable first: a restart then finishes the removal instead of bringing freed
		 * files back, and never reports them lost. */
		rc = tw__bk_meta_append(b, &rec);
		if (rc) {
			snprintf(msg, msglen, "cannot record the free durably in %s: %s", b->cfg.dir,
				 tw_strerror(rc));
			return rc;
		}
		lg = lg ? lg : tw__bk_log(b, log_id, true);
		if (!lg) {
			snprintf(msg, msglen, "out of memory");
			return -ENOMEM;
		}
		lg->free_below = below;
	}
	if (delete_log && (lg || tw__bk_log_known(b, log_id))) {
		rc = tw__bk_meta_append(b, &rec);
		if (rc) {
			snprintf(msg, msglen, "cannot record the delete durably in %s: %s", b->cfg.dir,
				 tw_strerror(rc));
			return rc;
		}
		if (lg)
			lg->free_below = 0;
		revoke_log(b, NULL, log_id);
	}
	while (i < b->nsegs) {
		struct seg *s = b->segs[i];

		if (s->log_id != log_id || s->segment_id >= below)
			break;
		if (s->freed) {
			i++;
			continue;
		}
		n++;
		drop_seg(b, s);
		if (i < b->nsegs && b->segs[i] == s)
			i++; /* kept (flush running) */
	}
	*freed_out = n;
	b->index_dirty = true;
	tw__bk_readers_wake(b, log_id, UINT64_MAX); /* held reads of freed segments: NOT_FOUND */
	if (n || delete_log)
		tw_log_info("backup: log %016" PRIx64 ": %s (%" PRIu64 " segments dropped)", log_id,
			    delete_log ? "deleted" : "prefix freed", n);
	return 0;
}

static int add_grant(struct conn *c, uint64_t log_id, uint64_t segment_id)
{
	const struct grant g = {.log_id = log_id, .segment_id = segment_id};

	return tw__push(&c->grants, &c->grants_cap, &c->ngrants, sizeof(g), 4, &g);
}

static void drop_reader(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	struct seg *s = tw__bk_seg_find(b, log_id, segment_id);

	if (!s || s->readers == 0)
		return;
	s->readers--;
	if (s->readers == 0 && s->buf && s->buf->state == POOL_LOADED) {
		struct pool_buf *pb = s->buf;

		s->buf = NULL;
		tw__bk_release_buf(b, pb);
	}
}

/* Load a flushed segment's file into a pool buffer (s->buf, POOL_LOADED). This reads the file
 * on the progress thread (the RPC server replies when the handler returns): recovery-only paths,
 * read grants and RecoveredOffset. */
int tw__bk_load(struct tw_backup *b, struct seg *s, char *msg, size_t msglen)
{
	struct pool_buf *pb;
	char name[SEGFILE_NAME_MAX];
	struct segfile_hdr h;
	int rc;

	rc = take_buf(b, &pb, msg, msglen);
	if (rc) {
		char why[320];

		snprintf(why, sizeof(why), "%s", msg);
		snprintf(msg, msglen, "cannot load segment " SEGF ": %s; or release "
			 "other read grants", s->log_id, s->segment_id, why);
		return -TW_EREFUSED;
	}
	tw__segfile_name(s->log_id, s->segment_id, name, sizeof(name));
	tw__pool_set_state(&b->pool, pb, POOL_LOADED);
	memset(&h, 0, sizeof(h));
	rc = tw__segfile_load(b->dirfd, name, pb->mem, b->pool.size, &h);
	/* It now holds bytes written under the file's seed (all of them, or some). */
	pb->zeroed = false;
	pb->seed = h.seed;
	if (rc == 0 && (h.log_id != s->log_id || h.segment_id != s->segment_id))
		rc = -TW_ECORRUPT;
	if (rc != 0) {
		tw__bk_release_buf(b, pb);
		if (rc == -TW_ECORRUPT) {
			if (!s->corrupt)
				b->index_dirty = true;
			s->corrupt = true;
		}
		if (rc == -EFBIG)
			snprintf(msg, msglen, "segment " SEGF " holds %" PRIu64 " bytes, more "
				 "than this backup's %zu-byte buffers: restart it with a larger "
				 "--buffer-size to serve it", s->log_id, s->segment_id, h.valid_len,
				 b->pool.size);
		else
			snprintf(msg, msglen, "cannot load segment " SEGF " from %s: %s",
				 s->log_id, s->segment_id, b->cfg.dir, tw_strerror(rc));
		tw_log_warn("backup: %s", msg);
		return rc;
	}
	pthread_mutex_lock(&b->st_lock);
	b->st.loads++;
	pthread_mutex_unlock(&b->st_lock);
	pb->seg = s;
	s->buf = pb;
	return 0;
}

int tw__bk_op_read(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t segment_id,
	       uint64_t epoch, struct tw_rkey *rk_out, struct seg **seg_out, char *msg,
	       size_t msglen)
{
	struct pool_buf *pb;
	struct seg *s;
	int rc = check_epoch(b, log_id, epoch, msg, msglen);

	if (rc)
		return rc;
	s = tw__bk_seg_find(b, log_id, segment_id);
	if (!s || s->freed || s->state == SEG_LOST) {
		snprintf(msg, msglen, "no segment " SEGF " here%s", log_id, segment_id,
			 s && s->state == SEG_LOST ? " (lost: opened here, gone after a restart)" : "");
		return -TW_ENOTFOUND;
	}
	if (!s->buf) {
		rc = tw__bk_load(b, s, msg, msglen);
		if (rc)
			return rc;
	}
	rc = tw__pool_ensure_mr(&b->pool, s->buf);
	if (rc == 0 && c)
		rc = add_grant(c, log_id, segment_id);
	if (rc != 0) {
		if (s->readers == 0 && s->buf->state == POOL_LOADED) {
			pb = s->buf;
			s->buf = NULL;
			tw__bk_release_buf(b, pb);
		}
		snprintf(msg, msglen, "cannot grant access: %s", tw_strerror(rc));
		return rc;
	}
	s->readers++;
	if (s->state == SEG_OPEN)
		tw__bk_scan_open(b, s);
	tw__mr_rkey(s->buf->mr, rk_out);
	rk_out->len = b->pool.size;
	*seg_out = s;
	return 0;
}

int tw__bk_op_release(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t segment_id,
		  char *msg, size_t msglen)
{
	for (size_t i = 0; c && i < c->ngrants; i++) {
		if (c->grants[i].log_id == log_id && c->grants[i].segment_id == segment_id) {
			c->grants[i] = c->grants[--c->ngrants];
			drop_reader(b, log_id, segment_id);
			return 0;
		}
	}
	snprintf(msg, msglen, "no read grant for segment " SEGF " on this connection", log_id,
		 segment_id);
	return -TW_ENOTFOUND;
}

void tw__bk_conn_release_grants(struct tw_backup *b, struct conn *c)
{
	while (c->ngrants > 0) {
		struct grant g = c->grants[--c->ngrants];

		drop_reader(b, g.log_id, g.segment_id);
	}
}
