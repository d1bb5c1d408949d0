/*
 * backup/backup_recovery.c — the backup's side of recovery (owner: recovery): the
 * RecoveredOffset RPC. After tw_recover() rebuilt a log it tells every backup holding a copy of a
 * segment that was still open the length it recovered. The backup closes its open copy at that
 * length, exactly like a CloseSegment from the primary (MR revoked, scanned, flushed to a segment
 * file as CLOSED), so a second recovery finds closed copies and gives the same answer:
 *   - copy longer than the recovered length (bytes no recovery delivered): cut at the length
 *     (the tail this copy wrote is zeroed) after checking that the prefix ends exactly there
 *     with the checksum;
 *   - copy shorter: it lacks bytes of a write that was never acknowledged, which the recovery
 *     delivered from a longer copy. The recovery sends those bytes along (protocol 1.3:
 *     repair_from, repair; in pieces that fit a message): each piece is stored after the bytes
 *     this copy already has, and the last one closes the copy at the recovered length once the
 *     walk verifies it, so the copy holds everything that was delivered and a later recovery
 *     without the longer copies still gives the same answer. Without the bytes (a 1.2
 *     recovery), or if they do not verify, the copy is closed at its own verified length (it
 *     still holds every acknowledged entry);
 *   - already closed at that length and checksum: nothing to do (a repeated recovery).
 * A copy this backup flushed while it was open (a shutdown, then a restart) is loaded from its
 * file and handled as an open copy when its length differs from the recovered one.
 * Progress thread only (it is an RPC handler); hooked into the dispatch table by tw__bk_rpc_init.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"


/* A copy flushed while open (shutdown, restart): back into a buffer as an open copy, so that it
 * can be cut, completed and closed like one. */
static int reopen(struct tw_backup *b, struct seg *s, char *msg, size_t msglen)
{
	int rc;

	if (s->readers) {
		snprintf(msg, msglen, "segment " SEGF " is being read (%u read grants): record its "
			 "recovered length once they are released", s->log_id, s->segment_id,
			 s->readers);
		return -EBUSY;
	}
	if (!s->buf && (rc = tw__bk_load(b, s, msg, msglen)) != 0)
		return rc;
	tw__pool_set_state(&b->pool, s->buf, POOL_OPEN);
	s->state = SEG_OPEN;
	s->repair_end = 0;
	tw_log_info("backup: segment " SEGF ": reopened from its file (flushed while open, %" PRIu64
		    " bytes) to record the recovered length", s->log_id, s->segment_id,
		    s->valid_len);
	return 0;
}

/*
 * Store one piece of a short copy's missing bytes, [repair_from, repair_from + len), behind
 * what the copy holds (its verified length or the pieces already stored: no byte before that
 * end is written twice, so a piece can never change what the copy verified). 1 when this was
 * the last piece (it ends at the recovered offset), 0 when more are to come, or a negative code.
 */
static int repair(struct tw_backup *b, struct seg *s, const Tailwind__RecoveredOffset *q, char *msg,
		  size_t msglen)
{
	uint64_t have = s->valid_len > s->repair_end ? s->valid_len : s->repair_end;
	uint64_t from = q->repair_from, end = from + q->repair.len; /* <= offset: rpc.c checks */
	uint64_t cap = s->length && s->length < b->pool.size ? s->length : b->pool.size;

	if (q->offset > cap) {
		snprintf(msg, msglen, "segment " SEGF ": recovered offset %" PRIu64 " is past the %"
			 PRIu64 " bytes this copy can hold", q->log_id, q->segment_id, q->offset, cap);
		return -EINVAL;
	}
	if (from > have) {
		snprintf(msg, msglen, "segment " SEGF ": repair bytes from %" PRIu64 " leave a gap "
			 "after the %" PRIu64 " bytes this copy holds", q->log_id, q->segment_id, from,
			 have);
		return -EINVAL;
	}
	if (end > have)
		memcpy(s->buf->mem + have, q->repair.data + (have - from), (size_t)(end - have));
	if (end > s->repair_end)
		s->repair_end = end;
	return end == q->offset;
}

int tw__bk_h_recovered_offset(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__RecoveredOffset *q = call->req->recovered_offset;
	uint64_t epoch = call->req->epoch;
	struct logst *lg = tw__bk_log(b, q->log_id, false);
	struct bk_seg_req r;
	struct tw_scan_result sr;
	struct seg *s;
	int rc;

	/* The reply's envelope epoch is the log's epoch here: recovery probes it (with an epoch
	 * of 0 and a segment that does not exist) to fence past every earlier fence. */
	call->reply_epoch = lg ? lg->epoch : 0;
	tw__bk_hold_touch(b, tw__chan_user(call->ch), q->log_id);
	rc = tw__bk_call_owned_seg(b, call, q->log_id, q->segment_id, epoch, &s);
	if (!s)
		return rc;
	if (q->replica_version < s->version)
		return tw__rpc_call_fail(call, -TW_ESTALE, "segment " SEGF ": version %" PRIu64
					" is older than the %" PRIu64 " held here", q->log_id,
					q->segment_id, q->replica_version, s->version);
	if (s->state != SEG_OPEN) {
		if (!s->corrupt && s->valid_len == q->offset && s->checksum == q->checksum)
			return 0; /* already closed there: a repeated recovery */
		if (s->state == SEG_FLUSHED && s->disk_open && !s->corrupt) {
			rc = reopen(b, s, call->msgbuf, sizeof(call->msgbuf));
			if (rc)
				return tw__rpc_call_failed(call, rc);
		}
	}
	if (s->state != SEG_OPEN) {
		return tw__rpc_call_fail(call, -TW_ECORRUPT, "segment " SEGF " is %s with %" PRIu64
					" bytes (checksum 0x%08x%s); recovery says %" PRIu64
					" bytes (checksum 0x%08x)", q->log_id, q->segment_id,
					s->state == SEG_CLOSED ? "closed" : "flushed", s->valid_len,
					s->checksum, s->corrupt ? ", corrupt" : "", q->offset,
					q->checksum);
	}
	if (!s->buf || q->offset > b->pool.size)
		return tw__rpc_call_fail(call, -EINVAL, "segment " SEGF ": offset %" PRIu64
					" is past the buffer", q->log_id, q->segment_id, q->offset);
	/* No more writes from anyone. The copy now carries the recovery's epoch, so the next
	 * automatic fence (1 + the highest epoch listed) goes past this one. */
	tw__pool_revoke_mr(&b->pool, s->buf);
	/* Its writer may still be alive and check no key (shm's fast path): if no fence here
	 * moved the buffer yet, do it now, before the close lets the pool hand it out again. */
	tw__bk_fence_buf(b, s);
	if (epoch > s->epoch)
		s->epoch = epoch;
	/* Between the pieces of a repair the copy's verified length cannot change (registration
	 * revoked, nothing else writes): walk it again only at the first piece and the last. */
	if (q->repair.len == 0 || s->repair_end <= s->valid_len)
		tw__bk_scan_open(b, s);
	if (q->repair.len > 0) {
		rc = repair(b, s, q, call->msgbuf, sizeof(call->msgbuf));
		if (rc < 0)
			return tw__rpc_call_failed(call, rc);
		if (rc == 0)
			return 0; /* a piece stored; the copy stays open for the next */
		tw__bk_scan_open(b, s); /* the last piece: walk what the copy now holds */
	}
	if (s->valid_len > q->offset) {
		/* Cut: the prefix must end exactly at the recovered length. */
		tw_scan_seeded(s->buf->mem, (size_t)q->offset, s->seed, &sr);
		if (sr.valid_len == q->offset && sr.last_checksum == q->checksum) {
			uint64_t end = s->length > s->valid_len ? s->length : s->valid_len;

			tw_log_info("backup: segment " SEGF ": cutting the open copy from %" PRIu64
				    " to the recovered %" PRIu64 " bytes", q->log_id, q->segment_id,
				    s->valid_len, q->offset);
			/* The bytes after the cut were written under this copy's own seed, so they
			 * would validate: zero what this use can have written, [offset, length)
			 * (docs/log-format.md §7, "Same-seed bytes"); older stale bytes beyond it
			 * cannot validate under this seed. */
			if (end > b->pool.size)
				end = b->pool.size;
			memset(s->buf->mem + q->offset, 0, (size_t)(end - q->offset));
		}
	}
	r.log_id = q->log_id;
	r.segment_id = q->segment_id;
	r.epoch = epoch;
	r.incarnation = call->req->incarnation;
	r.version = s->version;
	r.offset = q->offset;
	r.checksum = q->checksum;
	if (s->valid_len < q->offset) {
		/* Shorter: it lacks bytes of a write that was never acknowledged (an acknowledged
		 * write reached every replica). Close it at its own verified length: it still holds
		 * every acknowledged entry, and a later recovery prefers the longest closed copy. */
		tw_log_info("backup: segment " SEGF ": this copy holds %" PRIu64 " of the %" PRIu64
			    " recovered bytes; closing it at %" PRIu64, q->log_id, q->segment_id,
			    s->valid_len, q->offset, s->valid_len);
		r.offset = s->valid_len;
		r.checksum = s->checksum;
	}
	rc = tw__bk_op_close(b, NULL, &r, &sr, call->msgbuf, sizeof(call->msgbuf), NULL);
	if (rc == 0) {
		tw_log_info("backup: segment " SEGF " closed at the recovered length %" PRIu64
			    " (epoch %" PRIu64 ")", q->log_id, q->segment_id, q->offset, epoch);
		return 0;
	}
	tw__rpc_call_failed(call, rc);
	tw_log_warn("backup: recovered offset of segment " SEGF ": %s", q->log_id, q->segment_id,
		    call->msgbuf);
	return rc;
}
