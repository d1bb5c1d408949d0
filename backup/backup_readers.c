/*
 * backup/backup_readers.c — what a backup does for readers of a live log (protocol 1.4,
 * docs/readers.md): it keeps the acknowledged position the owner publishes for each open
 * segment (SetAcked), serves the readable entries of a segment (ReadEntries), and holds a read
 * at the readable end until there is more (long-poll: a SetAcked, the close, a fence or free,
 * or the reader's wait runs out). Progress thread only, like every handler.
 *
 * Demand-driven SetAcked (docs/readers.md, "What SetAcked costs"): the owner sends its next
 * position when the previous SetAcked to this backup is answered. While no reader of the log is
 * active here (no ReadEntries or ReadSegment about it within BK_READER_ACTIVE_NS, no read of it
 * held), a SetAcked with hold_ms is applied at once but answered only when a reader comes (reply
 * `readers` true), at its deadline, when a newer SetAcked of the log arrives on the connection,
 * when the segment closes or the log is fenced or freed; a lost connection drops it unanswered.
 * So a log nobody reads costs the backup about one SetAcked per hold_ms. The position here may
 * then be up to a hold old: a ReadEntries that released a held SetAcked waits (BK_FRESH_MS at
 * most) for the owner's next SetAcked of the log, which a 1.5 owner sends at once, so a reader
 * (its tail included) sees the log as acknowledged when it asked, one round trip later.
 *
 * Why the backup must be told: it runs no code for a one-sided write, so it cannot see new
 * entries by itself, and an entry it holds may still be missing on another replica (a recovery
 * could then drop it). The readable end of a segment is therefore
 *   open:             the acknowledged position its owner published (0 until the first),
 *   closed / flushed: its closed length (the owner closes a segment once every write of it
 *                     completed on every replica; a recovery closes it at the length it
 *                     recovered, which never drops an acknowledged entry).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"

#define MSGBUF(call) (call)->msgbuf, sizeof((call)->msgbuf)

/* Room the rest of a ReadEntriesReply takes in a frame besides `data`, frame header and
 * envelope included, with every field at its largest encoding and a full message. */
#define READ_REPLY_OVERHEAD 640u

/* A deferred answer: a ReadEntries held at the readable end (long-poll), or a SetAcked held
 * while no reader of its log is active here. */
struct bk_rwait {
	bool set_acked;     /* a SetAcked (else a ReadEntries) */
	bool fresh;         /* ReadEntries: waits for the owner's next SetAcked of the log */
	bool readers;       /* SetAcked: the answer's `readers`, set when it is released */
	uint64_t conn_id;
	struct tw_chan *ch;
	uint64_t request_id, epoch; /* epoch: of a SetAcked's reply */
	uint64_t log_id, segment_id, offset;
	uint32_t max_bytes;
	uint64_t deadline_ns;
	struct bk_rwait *next;
};

static void wake_reads(struct tw_backup *b, uint64_t log_id, uint64_t segment_id);

static uint64_t seg_readable(const struct seg *s)
{
	if (s->state == SEG_OPEN)
		return s->acked;
	if (s->listed_open) /* flushed while open: its length came from a scan, not a close */
		return s->acked < s->valid_len ? s->acked : s->valid_len;
	return s->valid_len;
}

/* ---- SetAcked */

/* Whether a reader of the log is active here: a reader request about it lately, or a read of
 * it held. */
static bool readers_active(struct tw_backup *b, uint64_t log_id, uint64_t now)
{
	const struct logst *lg = tw__bk_log(b, log_id, false);

	if (lg && lg->reader_ns && now - lg->reader_ns < BK_READER_ACTIVE_NS)
		return true;
	for (const struct bk_rwait *w = b->waiters; w; w = w->next)
		if (!w->set_acked && w->log_id == log_id)
			return true;
	return false;
}

/* Hold the answer to `call` from connection c until deadline_ns: the caller fills the rest. */
static struct bk_rwait *defer(struct tw_backup *b, struct conn *c, struct tw__rpc_call *call,
			      bool set_acked, uint64_t deadline_ns)
{
	struct bk_rwait *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->set_acked = set_acked;
	w->conn_id = c->id;
	w->ch = call->ch;
	w->request_id = call->req->request_id;
	w->epoch = call->reply_epoch;
	w->deadline_ns = deadline_ns;
	w->next = b->waiters;
	b->waiters = w;
	if (set_acked)
		b->naholds++;
	else
		b->nwaiters++;
	return w;
}

/* Which held answers: of one kind, of a log (and one connection, one segment; only the reads
 * waiting for a fresh position). */
struct wkey {
	bool set_acked;
	uint64_t conn_id;            /* 0: any connection */
	uint64_t log_id, segment_id; /* segment_id UINT64_MAX: every segment of the log */
	bool fresh;
};

static bool pick_key(const struct bk_rwait *w, const void *arg)
{
	const struct wkey *k = arg;

	return w->set_acked == k->set_acked && w->log_id == k->log_id &&
	       (!k->conn_id || w->conn_id == k->conn_id) &&
	       (k->segment_id == UINT64_MAX || w->segment_id == k->segment_id) &&
	       (!k->fresh || w->fresh);
}

static void answer_where(struct tw_backup *b,
			 bool (*pick)(const struct bk_rwait *w, const void *arg), const void *arg,
			 bool readers);

/* The held SetAcked of the log, answered now with `readers` true; how many. */
static unsigned release_holds(struct tw_backup *b, uint64_t log_id)
{
	struct logst *lg = tw__bk_log(b, log_id, false);
	struct wkey k = { true, 0, log_id, UINT64_MAX, false };
	unsigned before = b->naholds;

	if (lg)
		lg->reader_ns = tw_now_ns();
	if (b->naholds)
		answer_where(b, pick_key, &k, true);
	return before - b->naholds;
}

void tw__bk_reader_seen(struct tw_backup *b, uint64_t log_id)
{
	(void)release_holds(b, log_id);
}

int tw__bk_h_set_acked(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__SetAcked *q = call->req->set_acked;
	struct conn *c = tw__chan_user(call->ch);
	struct bk_rwait *w;
	struct seg *s;
	uint64_t now;
	int rc;

	b->set_acked_served++;
	if (c && b->naholds) {
		/* One held per (connection, log): a newer one answers the older now. */
		struct wkey k = { true, c->id, q->log_id, UINT64_MAX, false };

		answer_where(b, pick_key, &k, false);
	}
	rc = tw__bk_call_owned_seg(b, call, q->log_id, q->segment_id, call->req->epoch, &s);
	if (!s)
		return rc;
	now = tw_now_ns();
	call->reply.set_acked.readers = readers_active(b, q->log_id, now);
	if (s->state != SEG_OPEN)
		return 0; /* closed: all of it is readable already */
	if (q->acked > s->length)
		return tw__rpc_call_fail(call, -EINVAL, "acked %" PRIu64 " beyond the segment's "
					 "length %" PRIu64, q->acked, s->length);
	if (q->acked > s->acked) {
		s->acked = q->acked;
		wake_reads(b, q->log_id, q->segment_id);
	}
	if (b->nwaiters) {
		/* Reads that released a held SetAcked wait for this one (tw__bk_h_read_entries). */
		struct wkey k = { false, 0, q->log_id, UINT64_MAX, true };

		answer_where(b, pick_key, &k, false);
	}
	if (!q->hold_ms || call->reply.set_acked.readers || !c || b->naholds >= BK_MAX_ACK_HOLDS)
		return 0;
	w = defer(b, c, call, true, now + (uint64_t)(q->hold_ms < BK_ACK_HOLD_MAX_MS ? q->hold_ms :
						     BK_ACK_HOLD_MAX_MS) * 1000000u);
	if (!w)
		return 0; /* answer now: the owner sends its next position sooner, that is all */
	w->log_id = q->log_id;
	w->segment_id = q->segment_id;
	b->set_acked_held++;
	return TW_RPC_DEFERRED;
}

/* ---- ReadEntries */

/* The reader's cached load of a flushed segment (one per connection): released when it reads
 * another flushed segment, or when it goes away (its grants). */
static int load_for(struct tw_backup *b, struct conn *c, struct seg *s, char *msg, size_t len)
{
	struct tw_rkey rk;
	struct seg *got;
	struct logst *lg = tw__bk_log(b, s->log_id, false);
	int rc;

	if (c->has_rd && (c->rd.log_id != s->log_id || c->rd.segment_id != s->segment_id)) {
		char tmp[128];

		(void)tw__bk_op_release(b, c, c->rd.log_id, c->rd.segment_id, tmp, sizeof(tmp));
		c->has_rd = false;
	}
	if (s->buf)
		return 0;
	rc = tw__bk_op_read(b, c, s->log_id, s->segment_id, lg ? lg->epoch : 0, &rk, &got, msg,
			    len);
	if (rc)
		return rc;
	c->rd.log_id = s->log_id;
	c->rd.segment_id = s->segment_id;
	c->has_rd = true;
	return 0;
}

/* Fill a ReadEntriesReply for [offset, readable end) of (log_id, segment_id). Returns 0, or a
 * negative code with the message set; *wait_out: nothing readable yet (the caller may hold it). */
static int fill_read(struct tw_backup *b, struct conn *c, struct tw__rpc_call *call,
		     uint64_t log_id, uint64_t segment_id, uint64_t offset, uint32_t max_bytes,
		     bool *wait_out)
{
	Tailwind__ReadEntriesReply *r = &call->reply.read_entries;
	struct logst *lg = tw__bk_log(b, log_id, false);
	size_t frame = tw__rpc_server_max_msg(b->srv) - READ_REPLY_OVERHEAD;
	uint64_t end, pos, cap;
	struct seg *s;
	size_t i;
	int rc;

	*wait_out = false;
	r->free_below = lg ? lg->free_below : 0;
	r->log_epoch = lg ? lg->epoch : 0;
	call->reply_epoch = r->log_epoch;
	s = tw__bk_seg_find(b, log_id, segment_id);
	if (!s || s->freed || s->state == SEG_LOST) {
		if (lg && segment_id < lg->free_below)
			return tw__rpc_call_fail(call, -TW_ENOTFOUND, "segment %" PRIu64 " of log "
						 "%016" PRIx64 " was freed (log cleaning): the log "
						 "now starts at segment %" PRIu64, segment_id,
						 log_id, lg->free_below);
		return tw__rpc_call_fail(call, -TW_ENOTFOUND, "no segment " SEGF " here%s", log_id,
					 segment_id, s && s->state == SEG_LOST ?
					 " (lost: opened here, gone after a restart)" : "");
	}
	if (s->corrupt)
		return tw__rpc_call_fail(call, -TW_ECORRUPT, "the copy of segment " SEGF " here is "
					 "corrupt; read it from another backup", log_id,
					 segment_id);
	/* The next segment of the log this backup holds. */
	i = tw__bk_seg_lower_bound(b, log_id, segment_id + 1);
	for (; i < b->nsegs && b->segs[i]->log_id == log_id; i++) {
		if (!b->segs[i]->freed) {
			r->next_segment_id = b->segs[i]->segment_id;
			break;
		}
	}
	end = seg_readable(s);
	r->readable = end;
	r->segment_epoch = s->epoch;
	r->state = (Tailwind__SegmentState)tw__bk_pb_state(s);
	if (offset > end) {
		if (r->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN) {
			*wait_out = true; /* not readable yet (this backup was told less so far) */
			return 0;
		}
		return tw__rpc_call_fail(call, -EINVAL, "offset %" PRIu64 " is past the end of "
					 "segment " SEGF " (%" PRIu64 " bytes)", offset, log_id,
					 segment_id, end);
	}
	if (offset == end) {
		*wait_out = r->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
		return 0;
	}
	rc = load_for(b, c, s, MSGBUF(call));
	if (rc)
		return tw__rpc_call_failed(call, rc);
	if (!s->buf || end > b->pool.size)
		return tw__rpc_call_fail(call, -TW_EREMOTE, "segment " SEGF " has no bytes here",
					 log_id, segment_id);
	cap = max_bytes && max_bytes < frame ? max_bytes : frame;
	/* Whole entries only: walk the headers (the scan verified them up to the readable end,
	 * which is always an entry boundary; the reader checks every header and payload again). */
	for (pos = offset; pos < end;) {
		const uint8_t *e = s->buf->mem + pos;
		uint64_t n;

		if (e[0] == TW_ENTRY_CHECKSUM && end - pos >= TW_CKSUM_ENTRY_SIZE) {
			n = TW_CKSUM_ENTRY_SIZE;
		} else if (e[0] == TW_ENTRY_DATA && end - pos >= TW_ENTRY_HDR_SIZE) {
			n = TW_ENTRY_HDR_SIZE + tw_load_le32(e + 4);
			if (n > end - pos)
				return tw__rpc_call_fail(call, -TW_ECORRUPT, "entry at %" PRIu64
							 " of segment " SEGF " runs past the "
							 "readable end", pos, log_id, segment_id);
		} else {
			return tw__rpc_call_fail(call, -EINVAL, "no entry at offset %" PRIu64 " of "
						 "segment " SEGF " (give the position of an entry)",
						 pos, log_id, segment_id);
		}
		if (pos + n - offset > cap) {
			if (pos == offset)
				r->entry_len = (uint32_t)(n > UINT32_MAX ? UINT32_MAX : n);
			break;
		}
		pos += n;
	}
	r->data.data = s->buf->mem + offset; /* packed after the handler returns, no copy */
	r->data.len = (size_t)(pos - offset);
	return 0;
}

int tw__bk_h_read_entries(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__ReadEntries *q = call->req->read_entries;
	struct conn *c = tw__chan_user(call->ch);
	struct bk_rwait *w;
	bool wait, fresh;
	int rc;

	if (!c)
		return -TW_EPEERLOST;
	/* Held SetAcked of the log are answered now. Then the position here may be up to a hold
	 * old: a 1.5 owner sends its newest one at once (primary_acked.c), and this read waits
	 * for it (at most BK_FRESH_MS), so that even the first read of a reader, e.g. for the
	 * tail, sees the log as acknowledged now. */
	fresh = release_holds(b, q->log_id) > 0;
	rc = fill_read(b, c, call, q->log_id, q->segment_id, q->offset, q->max_bytes, &wait);
	if (rc || (!wait && !fresh) || (q->wait_ms == 0 && !fresh) ||
	    b->nwaiters >= BK_MAX_READ_WAITS)
		return rc;
	w = defer(b, c, call, false, tw_now_ns() + (fresh ? BK_FRESH_MS :
							  (uint64_t)q->wait_ms) * 1000000u);
	if (!w)
		return 0; /* answer now: the reader asks again */
	w->fresh = fresh;
	w->log_id = q->log_id;
	w->segment_id = q->segment_id;
	w->offset = q->offset;
	w->max_bytes = q->max_bytes;
	return TW_RPC_DEFERRED;
}

struct answer_ctx {
	struct tw_backup *b;
	struct bk_rwait *w;
};

static int answer_fill(void *arg, struct tw__rpc_call *call)
{
	struct answer_ctx *a = arg;
	struct conn *c = tw__bk_conn_find(a->b, a->w->conn_id);
	bool wait;

	if (a->w->set_acked) {
		call->reply.set_acked.readers = a->w->readers;
		return 0;
	}
	if (!c)
		return -TW_EPEERLOST;
	return fill_read(a->b, c, call, a->w->log_id, a->w->segment_id, a->w->offset,
			 a->w->max_bytes, &wait);
}

/* Unlink every held answer for which `pick` says so; returns them as a list. */
static struct bk_rwait *unlink_where(struct tw_backup *b,
				     bool (*pick)(const struct bk_rwait *w, const void *arg),
				     const void *arg)
{
	struct bk_rwait **pp = &b->waiters, *done = NULL;

	while (*pp) {
		struct bk_rwait *w = *pp;

		if (pick(w, arg)) {
			*pp = w->next;
			w->next = done;
			done = w;
			if (w->set_acked)
				b->naholds--;
			else
				b->nwaiters--;
		} else {
			pp = &w->next;
		}
	}
	return done;
}

/* Answer and forget every held answer for which `pick` says so (SetAcked: with `readers`). */
static void answer_where(struct tw_backup *b,
			 bool (*pick)(const struct bk_rwait *w, const void *arg), const void *arg,
			 bool readers)
{
	/* Unlink first: answering may progress the fab and re-enter the handlers. */
	struct bk_rwait *done = unlink_where(b, pick, arg);

	while (done) {
		struct bk_rwait *w = done;
		struct answer_ctx a = { b, w };
		struct conn *c = tw__bk_conn_find(b, w->conn_id);

		done = w->next;
		w->readers = readers;
		if (c && !c->lost && !c->drop && c->ch == w->ch)
			(void)tw__rpc_server_answer(b->srv, w->ch, w->set_acked ? TW_RPC_SET_ACKED :
						    TW_RPC_READ_ENTRIES, w->request_id,
						    w->set_acked ? w->epoch : 0, answer_fill, &a);
		free(w);
	}
}

static void wake_reads(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	struct wkey k = { false, 0, log_id, segment_id, false };

	if (b->nwaiters)
		answer_where(b, pick_key, &k, false);
}

void tw__bk_readers_wake(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	struct wkey k = { true, 0, log_id, segment_id, false };

	wake_reads(b, log_id, segment_id);
	if (b->naholds)
		answer_where(b, pick_key, &k, readers_active(b, log_id, tw_now_ns()));
}

static bool pick_due(const struct bk_rwait *w, const void *arg)
{
	return w->deadline_ns <= *(const uint64_t *)arg;
}

int tw__bk_readers_tick(struct tw_backup *b)
{
	uint64_t now = tw_now_ns(), next = UINT64_MAX;

	if (!b->waiters)
		return -1;
	answer_where(b, pick_due, &now, false); /* a SetAcked due: no reader came */
	for (struct bk_rwait *w = b->waiters; w; w = w->next)
		if (w->deadline_ns < next)
			next = w->deadline_ns;
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)((next - now + 999999u) / 1000000u);
}

static bool pick_conn(const struct bk_rwait *w, const void *arg)
{
	return w->conn_id == *(const uint64_t *)arg;
}

void tw__bk_readers_conn_gone(struct tw_backup *b, struct conn *c)
{
	struct bk_rwait *done = unlink_where(b, pick_conn, &c->id);

	while (done) {
		struct bk_rwait *w = done;

		done = w->next;
		free(w);
	}
	c->has_rd = false; /* its grants go with it */
}

void tw__bk_readers_fini(struct tw_backup *b)
{
	while (b->waiters) {
		struct bk_rwait *w = b->waiters;

		b->waiters = w->next;
		free(w);
	}
	b->nwaiters = 0;
	b->naholds = 0;
}
