/*
 * reader/reader.c — a reader of a live log (tailwind/reader.h, docs/readers.md).
 *
 * State: the position of the next entry (segment, offset), the bytes of the last ReadEntries
 * reply not yet returned, which backups hold the current segment (from their listings), and
 * the backup being read. Everything runs on the caller's thread: ReadEntries is a blocking RPC
 * (tw__rpc_call_sync) that the backup may hold up to poll_ms at the readable end.
 *
 * Moving on: a segment is finished when a reply says it is closed and the position reached its
 * readable end; the next segment is the lowest one above it that any backup lists (segment ids
 * may skip after a takeover). A backup is left for another holder of the segment when its
 * connection fails, it says its copy is corrupt or lost, or it keeps the segment open while a
 * later segment of the log exists (it missed the close: a recovery that could not reach it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>
#include <tailwind/reader.h>

#include "coord/coord.h"
#include "core/util.h"
#include "peer/peer.h"
#include "proto/auth.h"
#include "proto/rpc.h"

#define RECONNECT_NS 1000000000ull /* a lost backup is tried again after this long */
#define OS_CAP (1u << 20)          /* one-sided reads: bytes per read */
#define NEXT_SEG_WAIT_MS 20u       /* no next segment listed yet: look again after this */

struct rdbk {
	struct tw_peer peer;
	uint64_t retry_ns;  /* down: connect again from then on */
	bool holds;         /* lists the current segment (state usable) */
	bool stale;         /* missed the current segment's close: read elsewhere */
};

struct tw_reader {
	uint64_t log_id;
	char **addrs;
	size_t nbk;
	struct rdbk *bks;
	struct tw_fab *fab;
	struct tw_auth_key *key;
	struct tw_peer_opts po;
	unsigned poll_ms;
	uint32_t max_bytes;

	uint64_t seg, off;  /* the next entry */
	bool seg_known;     /* seg is a segment some backup holds */
	uint64_t look_from; /* the current segment finished: the next is the lowest >= this */
	int cur;            /* backup being read (-1: choose) */
	int last;           /* the backup read last (-1: none yet): switches are counted from it */
	uint64_t epoch;

	/* The last reply's bytes: buf[0] is segment offset buf_off; buf_pos bytes are consumed. */
	uint8_t *buf;
	size_t buf_cap, buf_len, buf_pos;
	uint64_t buf_off;
	bool seg_closed;    /* the current segment is closed: its readable end is final */
	bool seg_fenced;    /* its owner was fenced (segment epoch below the log's): a recovery
			     * closed it, and copies may have been closed at different lengths */
	bool seg_checked;   /* its end was compared with the other copies' (seg_fenced only) */
	uint64_t seg_end;   /* its readable end, as last reported */

	/* One-sided reads (cfg.one_sided): a registered landing buffer, and the read grant held
	 * for the current segment on one backup. */
	bool one_sided;
	uint8_t *os_buf;
	struct tw_mr *os_mr;
	bool granted;
	int grant_bk;
	uint64_t grant_seg, grant_epoch;
	struct tw_rkey grant_rk;

	struct tw_reader_stats st;
	char errmsg[512];
};

static int seterr(struct tw_reader *r, int err, const char *fmt, ...) TW_PRINTF(3, 4);

static int seterr(struct tw_reader *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
	va_end(ap);
	return err;
}

/* The other fields zero (NULL provider and key_file: their defaults, tailwind/reader.h). */
static const struct tw_reader_config reader_defaults = {
	.from = TW_READ_OLDEST,
	.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS,
	.rpc_timeout_ms = TW_DEFAULT_RPC_TIMEOUT_MS,
	.poll_ms = 1000,
};

void tw_reader_config_init_sized(struct tw_reader_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &reader_defaults, sizeof(reader_defaults));
}

/* ------------------------------------------------------------------ connections */

static bool bk_up(struct tw_reader *r, struct rdbk *b)
{
	if (tw__peer_ok(&b->peer))
		return true;
	if (b->peer.ch || b->peer.rpc)
		tw__peer_close(&b->peer);
	if (tw_now_ns() < b->retry_ns)
		return false;
	if (tw__peer_connect(&b->peer, r->fab, &r->po) == 0) {
		if (b->peer.gen > 1)
			r->st.reconnects++;
		return true;
	}
	b->retry_ns = tw_now_ns() + RECONNECT_NS;
	return false;
}

/* A handshake refused with INVALID_ARGUMENT by a backup that does not know the reader role. */
static bool too_old(const struct rdbk *b, int rc)
{
	return rc == -EINVAL && strstr(b->peer.why, "role") != NULL;
}

static int connect_all(struct tw_reader *r)
{
	int reached = 0, acc = 0, old = 0;
	size_t i;

	for (i = 0; i < r->nbk; i++) {
		struct rdbk *b = &r->bks[i];
		int rc = tw__peer_connect(&b->peer, r->fab, &r->po);

		if (rc == 0) {
			reached++;
			continue;
		}
		b->retry_ns = tw_now_ns() + RECONNECT_NS;
		acc += rc == -EACCES;
		if (too_old(b, rc)) {
			old++;
			snprintf(b->peer.why, sizeof(b->peer.why), "the backup does not serve readers "
				 "(protocol older than 1.4): upgrade twd there");
		}
		tw_log_warn("reader: backup %s: %s", b->peer.addr, b->peer.why);
	}
	if (reached)
		return 0;
	if (acc)
		return seterr(r, -EACCES, "no backup accepted the reader (first: %s: %s)",
			      r->bks[0].peer.addr, r->bks[0].peer.why);
	if (old)
		return seterr(r, -TW_EVERSION, "no backup serves readers (first: %s: %s)",
			      r->bks[0].peer.addr, r->bks[0].peer.why);
	return seterr(r, -TW_ENOBACKUP, "no backup reachable (first: %s: %s)", r->bks[0].peer.addr,
		      r->bks[0].peer.why);
}

/* ------------------------------------------------------------------ where segments are */

/*
 * The lowest segment >= from that a backup lists as usable, and which backups hold it.
 * Returns 1 (found: *seg_out, holds flags set), 0 (none listed yet), or a negative code.
 * *free_below_out: the highest first live segment any backup reports.
 */
static int locate(struct tw_reader *r, uint64_t from, uint64_t *seg_out, uint64_t *free_below_out)
{
	uint64_t best = UINT64_MAX, free_below = 0;
	int asked = 0;
	size_t i, k;

	for (i = 0; i < r->nbk; i++)
		r->bks[i].holds = false;
	for (i = 0; i < r->nbk; i++) {
		struct rdbk *b = &r->bks[i];
		const Tailwind__ListSegmentsReply *l;
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		int rc;

		if (!bk_up(r, b))
			continue;
		tw__rpc_req_list_segments(&req, r->log_id, false, from);
		rc = tw__rpc_call_sync(b->peer.rpc, &req.env, &rep);
		if (rc == 0 && rep.env->list_segments_reply) {
			asked++;
			l = rep.env->list_segments_reply;
			if (l->free_below > free_below)
				free_below = l->free_below;
			for (k = 0; k < l->n_segments; k++) {
				const Tailwind__SegmentInfo *in = l->segments[k];

				if (in->log_id != r->log_id || in->segment_id < from || in->corrupt ||
				    in->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST)
					continue;
				if (in->segment_id < best) {
					best = in->segment_id;
					for (size_t j = 0; j < i; j++)
						r->bks[j].holds = false;
				}
				if (in->segment_id == best)
					b->holds = true;
				break; /* sorted: the first usable one is this backup's lowest */
			}
		} else {
			tw_log_info("reader: backup %s: list failed: %s (%s)", b->peer.addr,
				    tw_strerror(rc), b->peer.rpc ? tw__rpc_client_errmsg(b->peer.rpc) :
				    "");
		}
		tw__rpc_reply_release(&rep);
	}
	*free_below_out = free_below;
	if (!asked)
		return seterr(r, -TW_ENOBACKUP, "no backup of log %016" PRIx64 " reachable (first: "
			      "%s: %s)", r->log_id, r->bks[0].peer.addr, r->bks[0].peer.why);
	if (best == UINT64_MAX)
		return 0;
	*seg_out = best;
	return 1;
}

/* Enter segment `seg` at offset `off` (holders already set by locate). */
static void enter(struct tw_reader *r, uint64_t seg, uint64_t off)
{
	r->seg = seg;
	r->off = off;
	r->look_from = seg + 1;
	r->seg_known = true;
	r->seg_closed = false;
	r->seg_fenced = false;
	r->seg_checked = false;
	r->seg_end = 0;
	r->buf_len = r->buf_pos = 0;
	r->buf_off = off;
	for (size_t i = 0; i < r->nbk; i++)
		r->bks[i].stale = false;
	if (r->cur >= 0 && !r->bks[r->cur].holds)
		r->cur = -1;
	r->st.segments++;
}

/* A backup to read the current segment from: the one in use if it still fits, else the next
 * holder after it (round robin spreads readers' switches). -1: none reachable. */
static int choose(struct tw_reader *r)
{
	size_t n = r->nbk, start = r->cur >= 0 ? (size_t)r->cur : r->last >= 0 ? (size_t)r->last : 0;

	if (r->cur >= 0) {
		struct rdbk *b = &r->bks[r->cur];

		if (b->holds && !b->stale && bk_up(r, b))
			return r->cur;
	}
	for (size_t k = 1; k <= n; k++) {
		size_t i = (start + k) % n;
		struct rdbk *b = &r->bks[i];

		if (b->holds && !b->stale && bk_up(r, b)) {
			if (r->last >= 0 && (size_t)r->last != i)
				r->st.switches++;
			r->cur = r->last = (int)i;
			return r->cur;
		}
	}
	return -1;
}

/* ------------------------------------------------------------------ reading */

/*
 * A segment a recovery closed: a copy closed shorter than the others (a repair that did not
 * verify) must not end the reader's walk early. Compare this copy's end with every closed copy
 * listed and move to a longer one if there is (returns 1: go on reading this segment there).
 */
static int check_end(struct tw_reader *r)
{
	uint64_t best = r->seg_end;
	int best_i = -1;

	r->seg_checked = true;
	for (size_t i = 0; i < r->nbk; i++) {
		struct rdbk *b = &r->bks[i];
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;

		if (!bk_up(r, b))
			continue;
		tw__rpc_req_list_segments(&req, r->log_id, false, r->seg);
		if (tw__rpc_call_sync(b->peer.rpc, &req.env, &rep) == 0 &&
		    rep.env->list_segments_reply) {
			const Tailwind__ListSegmentsReply *l = rep.env->list_segments_reply;

			for (size_t k = 0; k < l->n_segments; k++) {
				const Tailwind__SegmentInfo *in = l->segments[k];

				if (in->log_id == r->log_id && in->segment_id == r->seg &&
				    !in->corrupt && in->state !=
				    TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
				    in->state != TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST &&
				    in->valid_len > best) {
					best = in->valid_len;
					best_i = (int)i;
				}
			}
		}
		tw__rpc_reply_release(&rep);
	}
	if (best_i < 0)
		return 0;
	tw_log_warn("reader: segment %" PRIu64 " of log %016" PRIx64 " was closed at %" PRIu64
		    " bytes on the backup read, %" PRIu64 " on %s: reading the rest there", r->seg,
		    r->log_id, r->seg_end, best, r->bks[best_i].peer.addr);
	for (size_t i = 0; i < r->nbk; i++)
		r->bks[i].holds = (int)i == best_i;
	r->cur = -1;
	r->seg_closed = false;
	return 1;
}

/* The next finished segment: move past it, or say that nothing is listed yet (0). */
static int next_segment(struct tw_reader *r)
{
	uint64_t seg, fb;
	int rc = locate(r, r->look_from, &seg, &fb);

	if (rc == 1)
		enter(r, seg, 0);
	else if (rc == 0 && r->seg_known && r->look_from <= fb)
		rc = seterr(r, -TW_EFREED, "segment %" PRIu64 " of log %016" PRIx64 " was freed "
			    "(log cleaning): the log now starts at segment %" PRIu64, r->look_from,
			    r->log_id, fb);
	return rc;
}

/* ------------------------------------------------------------------ one-sided reads */

static void grant_release(struct tw_reader *r)
{
	struct rdbk *b;

	if (!r->granted)
		return;
	r->granted = false;
	b = &r->bks[r->grant_bk];
	if (tw__peer_ok(&b->peer))
		(void)tw__rpc_release_segment(b->peer.rpc, r->grant_epoch, r->log_id, r->grant_seg);
}

/*
 * Read [off, end) of the current segment from backup i one-sided (up to OS_CAP, trimmed to whole
 * entries) into the reader's buffer. Returns 1 (bytes buffered), or 0 when it could not (no
 * grant, a failed read, an entry larger than OS_CAP): the caller reads over RPC instead.
 */
static int os_read(struct tw_reader *r, int i, uint64_t end, uint64_t epoch)
{
	struct rdbk *b = &r->bks[i];
	struct tw_rpc_read_grant g;
	uint64_t n, pos;
	int rc;

	if (!r->granted || r->grant_bk != i || r->grant_seg != r->seg) {
		grant_release(r);
		rc = tw__rpc_read_segment(b->peer.rpc, epoch, r->log_id, r->seg, &g);
		if (rc)
			return 0;
		r->granted = true;
		r->grant_bk = i;
		r->grant_seg = r->seg;
		r->grant_epoch = epoch;
		r->grant_rk = g.rkey;
	}
	n = end - r->off;
	if (n > OS_CAP)
		n = OS_CAP;
	if (r->off + n > r->grant_rk.len)
		return 0;
	rc = tw__chan_rma_sync(b->peer.ch, true, r->os_buf, (size_t)n, r->os_mr, &r->grant_rk,
			       r->off);
	if (rc) {
		r->granted = false; /* revoked (a fence) or lost: the RPC path decides */
		return 0;
	}
	/* Whole entries only (the last one may be cut at OS_CAP); the checks come in take(). */
	for (pos = 0; pos < n;) {
		const uint8_t *e = r->os_buf + pos;
		uint64_t len = e[0] == TW_ENTRY_CHECKSUM ? TW_CKSUM_ENTRY_SIZE :
			       n - pos >= TW_ENTRY_HDR_SIZE ? TW_ENTRY_HDR_SIZE + tw_load_le32(e + 4) :
			       UINT64_MAX;

		if (e[0] != TW_ENTRY_CHECKSUM && e[0] != TW_ENTRY_DATA)
			break;
		if (len > n - pos)
			break;
		pos += len;
	}
	if (pos == 0)
		return 0;
	if (pos > r->buf_cap) {
		uint8_t *nb = realloc(r->buf, (size_t)pos);

		if (!nb)
			return 0;
		r->buf = nb;
		r->buf_cap = (size_t)pos;
	}
	memcpy(r->buf, r->os_buf, (size_t)pos);
	r->buf_len = (size_t)pos;
	r->buf_pos = 0;
	r->buf_off = r->off;
	r->st.one_sided_reads++;
	return 1;
}

/*
 * One ReadEntries on the current segment, waiting up to wait_ms at its readable end. Returns
 * 1 (bytes buffered), 0 (nothing new; the segment may have closed), or a negative code.
 */
/* A ReadEntries answer (m, from backup b): its entries into r->buf (1), nothing yet (0: at the
 * readable end; b left when it missed the segment's close), or an entry too big (-EMSGSIZE). */
static int take_entries(struct tw_reader *r, struct rdbk *b, const Tailwind__ReadEntriesReply *m)
{
	int rc;

	if (m->data.len == 0 && m->entry_len) {
		rc = seterr(r, -EMSGSIZE, "the entry at LSN %016" PRIx64 " takes %u bytes, more "
			    "than one read carries (max_bytes %u or the control message): "
			    "read it with tw_recover", tw_pos_to_lsn((struct tw_pos){
			    (uint32_t)r->seg, (uint32_t)r->off }), m->entry_len,
			    r->max_bytes);
	} else if (m->data.len) {
		if (m->data.len > r->buf_cap) {
			uint8_t *nb = realloc(r->buf, m->data.len);

			if (!nb)
				return seterr(r, -ENOMEM, "out of memory");
			r->buf = nb;
			r->buf_cap = m->data.len;
		}
		memcpy(r->buf, m->data.data, m->data.len);
		r->buf_len = m->data.len;
		r->buf_pos = 0;
		r->buf_off = r->off;
		rc = 1;
	} else {
		if (!r->seg_closed)
			r->st.waits++;
		/* Open here, its owner fenced, and a later segment exists: this backup
		 * missed the close (a recovery that did not reach it). Read the rest
		 * elsewhere. (A later segment alone means nothing: the owner pre-opens.) */
		if (!r->seg_closed && m->next_segment_id > r->seg &&
		    m->log_epoch > m->segment_epoch) {
			b->stale = true;
			r->cur = -1;
		}
		rc = 0;
	}
	return rc;
}

/* A failed ReadEntries (rc; m, the answer, may be NULL): say why, and leave backup b for this
 * segment when it cannot serve it. Returns the error for the caller, or 0 to read elsewhere. */
static int read_failed(struct tw_reader *r, struct rdbk *b, int rc,
		       const Tailwind__ReadEntriesReply *m)
{
	if (rc == -TW_ENOTFOUND && m && m->free_below > r->seg) {
		rc = seterr(r, -TW_EFREED, "segment %" PRIu64 " of log %016" PRIx64 " was freed (log "
			    "cleaning): the log now starts at segment %" PRIu64, r->seg, r->log_id,
			    m->free_below);
	} else if (rc == -EINVAL) {
		rc = seterr(r, -EINVAL, "backup %s: %s", b->peer.addr,
			    tw__rpc_client_errmsg(b->peer.rpc));
	} else if (rc == -ETIMEDOUT || rc == -TW_EPEERLOST || rc == -TW_EMALFORMED ||
		   rc == -TW_ECLOSED) {
		tw_log_warn("reader: backup %s: %s (%s); reading elsewhere", b->peer.addr,
			    tw_strerror(rc), b->peer.lost ? b->peer.why : "no answer");
		tw__peer_close(&b->peer);
		b->retry_ns = tw_now_ns() + RECONNECT_NS;
		r->cur = -1;
		rc = 0;
	} else {
		/* NOT_FOUND, CORRUPT, LOST, ...: this copy cannot serve; another may. */
		tw_log_info("reader: backup %s: segment %" PRIu64 ": %s (%s); reading elsewhere",
			    b->peer.addr, r->seg, tw_strerror(rc), tw__rpc_client_errmsg(b->peer.rpc));
		b->holds = false;
		r->cur = -1;
		rc = 0;
	}
	return rc;
}

static int fetch(struct tw_reader *r, unsigned wait_ms)
{
	const Tailwind__ReadEntriesReply *m;
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	struct rdbk *b;
	int i, rc;

	i = choose(r);
	if (i < 0) {
		uint64_t seg, fb;

		/* Nobody reachable lists it any more (or the listing is old): look again. */
		rc = locate(r, r->seg, &seg, &fb);
		if (rc < 0)
			return rc;
		if (rc == 0 || seg != r->seg) {
			if (r->seg < fb)
				return seterr(r, -TW_EFREED, "segment %" PRIu64 " of log %016" PRIx64
					      " was freed (log cleaning): the log now starts at "
					      "segment %" PRIu64, r->seg, r->log_id, fb);
			if (rc == 1 && r->off == 0) {
				enter(r, seg, 0); /* a position before a gap in the segment ids */
				return 0;
			}
			return seterr(r, -TW_ENOBACKUP, "no reachable backup holds segment %" PRIu64
				      " of log %016" PRIx64 " (first backup: %s: %s)", r->seg,
				      r->log_id, r->bks[0].peer.addr, r->bks[0].peer.why);
		}
		i = choose(r);
		if (i < 0)
			return seterr(r, -TW_ENOBACKUP, "no reachable backup holds segment %" PRIu64
				      " of log %016" PRIx64, r->seg, r->log_id);
	}
	b = &r->bks[i];
	/* One-sided: the RPC carries no bytes (one is less than any entry), only the readable
	 * end, and waits for it like any read. */
	tw__rpc_req_read_entries(&req, r->log_id, r->seg, r->off, r->one_sided ? 1 : r->max_bytes,
				 wait_ms);
	rc = tw__rpc_call_sync(b->peer.rpc, &req.env, &rep);
	m = rep.env ? rep.env->read_entries_reply : NULL;
	if (rc == 0 && m) {
		r->st.reads++;
		r->epoch = m->log_epoch;
		r->seg_fenced = m->segment_epoch && m->log_epoch > m->segment_epoch;
		r->seg_end = m->readable;
		r->seg_closed = m->state != TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
		if (r->one_sided && m->data.len == 0 && m->readable > r->off) {
			uint64_t end = m->readable, epoch = m->log_epoch;

			tw__rpc_reply_release(&rep);
			if (os_read(r, i, end, epoch) == 1)
				return 1;
			/* Over RPC this time. */
			r->st.one_sided_fallbacks++;
			tw__rpc_req_read_entries(&req, r->log_id, r->seg, r->off, r->max_bytes, 0);
			rc = tw__rpc_call_sync(b->peer.rpc, &req.env, &rep);
			m = rep.env ? rep.env->read_entries_reply : NULL;
			if (rc || !m) {
				tw__rpc_reply_release(&rep);
				return rc ? rc : -TW_EMALFORMED;
			}
		}
		rc = take_entries(r, b, m);
		tw__rpc_reply_release(&rep);
		return rc;
	}
	rc = read_failed(r, b, rc, m);
	tw__rpc_reply_release(&rep);
	return rc;
}

/* The next data entry of the buffer: 1 and *e, 0 when the buffer is used up, or -TW_ECORRUPT. */
static int take(struct tw_reader *r, struct tw_reader_entry *e)
{
	struct tw_entry_iter it = { r->buf + r->buf_pos, r->buf_len - r->buf_pos, 0 };
	const void *payload;
	uint32_t len;
	size_t at;
	int rc;

	rc = tw_entry_next(&it, &payload, &len, &at);
	if (rc < 0 || (rc == 1 && tw_crc32c(0, payload, len) !=
				  tw_load_le32(r->buf + r->buf_pos + at + 8))) {
		uint64_t bad = r->buf_off + r->buf_pos + (rc < 0 ? it.pos : at);

		r->buf_len = r->buf_pos = 0;
		if (r->cur >= 0)
			r->bks[r->cur].holds = false; /* read this segment elsewhere */
		r->cur = -1;
		return seterr(r, -TW_ECORRUPT, "bytes at offset %" PRIu64 " of segment %" PRIu64
			      " of log %016" PRIx64 " fail their checks (not an entry position, or "
			      "a damaged copy)", bad, r->seg, r->log_id);
	}
	if (rc == 0) {
		r->off = r->buf_off + r->buf_len;
		r->buf_len = r->buf_pos = 0;
		return 0;
	}
	memset(e, 0, sizeof(*e)); /* the reserved tail too */
	e->lsn = tw_pos_to_lsn((struct tw_pos){ (uint32_t)r->seg,
						(uint32_t)(r->buf_off + r->buf_pos + at) });
	e->data = payload;
	e->len = len;
	e->epoch = r->epoch;
	r->buf_pos += it.pos;
	r->off = r->buf_off + r->buf_pos;
	if (r->buf_pos >= r->buf_len) {
		r->buf_pos = r->buf_len = 0;
		r->buf_off = r->off;
	}
	r->st.entries++;
	r->st.bytes += len;
	return 1;
}

int tw_reader_next(struct tw_reader *r, struct tw_reader_entry *e, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX :
			    tw_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int corrupt = 0;

	if (!r || !e)
		return -EINVAL;
	for (;;) {
		uint64_t now;
		unsigned wait;
		int rc;

		if (r->buf_len > r->buf_pos) {
			rc = take(r, e);
			if (rc == 1)
				return 0;
			if (rc < 0) {
				tw_log_warn("reader: %s", r->errmsg);
				if (++corrupt > (int)r->nbk)
					return rc;
			}
			continue;
		}
		if (r->seg_closed && r->off >= r->seg_end && r->seg_fenced && !r->seg_checked &&
		    check_end(r) == 1)
			continue;
		if (r->seg_closed && r->off >= r->seg_end) {
			rc = next_segment(r);
			if (rc < 0)
				return rc;
			if (rc == 1)
				continue;
		}
		now = tw_now_ns();
		if (now >= deadline && timeout_ms != 0)
			return seterr(r, -ETIMEDOUT, "no new entry within %d ms", timeout_ms);
		if (r->seg_closed && r->off >= r->seg_end) {
			/* The next segment is not listed yet (a roll in progress). */
			if (timeout_ms == 0)
				return seterr(r, -ETIMEDOUT, "no new entry yet");
			tw__fab_progress(r->fab, (int)NEXT_SEG_WAIT_MS);
			continue;
		}
		wait = timeout_ms == 0 ? 0 : deadline == UINT64_MAX ? r->poll_ms :
		       (unsigned)((deadline - now) / 1000000u);
		if (wait > r->poll_ms)
			wait = r->poll_ms;
		rc = fetch(r, wait);
		if (rc < 0)
			return rc;
		if (rc == 0 && timeout_ms == 0 && !(r->seg_closed && r->off >= r->seg_end))
			return seterr(r, -ETIMEDOUT, "no new entry yet");
	}
}

int tw_reader_run(struct tw_reader *r, tw_reader_fn fn, void *arg, int timeout_ms)
{
	struct tw_reader_entry e;

	for (;;) {
		int rc = tw_reader_next(r, &e, timeout_ms);

		if (rc)
			return rc;
		rc = fn(arg, &e);
		if (rc)
			return rc;
	}
}

/* ------------------------------------------------------------------ open, close */

static int find_start(struct tw_reader *r, const struct tw_reader_config *cfg)
{
	uint64_t seg, fb;
	int rc;

	switch (cfg->from) {
	case TW_READ_LSN: {
		struct tw_pos pos = tw_lsn_to_pos(cfg->lsn);

		rc = locate(r, pos.segment, &seg, &fb);
		if (rc < 0)
			return rc;
		if (pos.segment < fb)
			return seterr(r, -TW_EFREED, "LSN %016" PRIx64 " is in segment %" PRIu32
				      ", freed by log cleaning: the log now starts at segment %"
				      PRIu64, cfg->lsn, pos.segment, fb);
		if (rc == 1 && seg == pos.segment) {
			enter(r, seg, pos.offset);
			return 0;
		}
		if (pos.offset != 0)
			return seterr(r, -TW_ENOTFOUND, "no backup holds segment %" PRIu32 " of log "
				      "%016" PRIx64 " (LSN %016" PRIx64 ")", pos.segment, r->log_id,
				      cfg->lsn);
		/* The start of a segment nobody holds yet (the next one): wait for it (or any
		 * later one) as at the end of a finished segment. */
		r->seg = pos.segment;
		r->off = 0;
		r->look_from = pos.segment;
		r->seg_closed = true;
		r->seg_end = 0;
		return 0;
	}
	case TW_READ_TAIL:
	case TW_READ_OLDEST:
		rc = locate(r, 0, &seg, &fb);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return seterr(r, -TW_ENOTFOUND, "no backup holds log %016" PRIx64, r->log_id);
		enter(r, seg, 0);
		if (cfg->from == TW_READ_OLDEST)
			return 0;
		/* The last segment, at its readable end. */
		for (;;) {
			rc = locate(r, r->seg + 1, &seg, &fb);
			if (rc < 0)
				return rc;
			if (rc == 0)
				break;
			enter(r, seg, 0);
		}
		for (int tries = 0; tries < 3; tries++) {
			uint32_t keep = r->max_bytes;

			r->max_bytes = 1; /* nothing fits: only the readable end comes back */
			rc = fetch(r, 0);
			r->max_bytes = keep;
			if (rc < 0 && rc != -EMSGSIZE)
				return rc;
			if (r->seg_end || r->seg_closed || rc == -EMSGSIZE)
				break;
		}
		r->off = r->buf_off = r->seg_end;
		r->buf_len = r->buf_pos = 0;
		return 0;
	}
	return seterr(r, -EINVAL, "unknown starting point %d", (int)cfg->from);
}

static int backups_from_coord(struct tw_reader *r, const struct tw_reader_config *cfg)
{
	struct tw_coord_backup *v = NULL;
	struct tw_coord *c = NULL;
	size_t n = 0;
	int rc;

	rc = tw__coord_open(cfg->coordinator, cfg->connect_timeout_ms ? cfg->connect_timeout_ms :
			    TW_DEFAULT_CONNECT_TIMEOUT_MS, &c, r->errmsg, sizeof(r->errmsg));
	if (rc)
		return rc;
	rc = tw__coord_log_backups(c, cfg->log_id, &v, &n);
	if (rc || n == 0) {
		free(v);
		v = NULL;
		rc = tw__coord_list_backups(c, &v, &n);
	}
	tw__coord_close(c);
	if (rc) {
		free(v);
		return seterr(r, rc, "coordinator %s: cannot list the backups: %s", cfg->coordinator,
			      tw_strerror(rc));
	}
	if (n > TW_READER_MAX_BACKUPS)
		n = TW_READER_MAX_BACKUPS;
	r->addrs = calloc(n ? n : 1, sizeof(*r->addrs));
	for (size_t i = 0; r->addrs && i < n; i++) {
		r->addrs[i] = strdup(v[i].addr);
		if (!r->addrs[i]) {
			free(v);
			return -ENOMEM;
		}
		r->nbk++;
	}
	free(v);
	if (!r->addrs)
		return -ENOMEM;
	if (r->nbk == 0)
		return seterr(r, -TW_ENOBACKUP, "coordinator %s lists no backup", cfg->coordinator);
	return 0;
}

int tw_reader_open(const struct tw_reader_config *config, struct tw_reader **out,
		   char *errmsg_out, size_t errmsg_len)
{
	struct tw_reader_config c, *cfg = &c;
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	struct tw_reader *r;
	const char *kp;
	int rc = 0;

	if (errmsg_out && errmsg_len)
		errmsg_out[0] = '\0';
	if (!config || !out)
		return -EINVAL;
	*out = NULL;
	rc = TW__CFG_TAKE(c, config, tw_reader_config_init, "tw_reader_config", errmsg_out,
			  errmsg_len);
	if (rc < 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->log_id = cfg->log_id;
	r->cur = r->last = -1;
	r->poll_ms = cfg->poll_ms ? cfg->poll_ms : 1000;
	r->max_bytes = cfg->max_bytes;
	if (cfg->log_id > TW_RPC_ID_MAX) {
		rc = seterr(r, -EINVAL, "log id must be below 2^63");
	} else if (cfg->coordinator && cfg->coordinator[0]) {
		rc = backups_from_coord(r, cfg);
	} else if (!cfg->backups || cfg->n_backups == 0 || cfg->n_backups > TW_READER_MAX_BACKUPS) {
		rc = seterr(r, -EINVAL, "give between 1 and %u backup addresses, or a coordinator",
			    TW_READER_MAX_BACKUPS);
	} else {
		r->addrs = calloc(cfg->n_backups, sizeof(*r->addrs));
		rc = r->addrs ? 0 : -ENOMEM;
		for (size_t i = 0; rc == 0 && i < cfg->n_backups; i++) {
			if (!cfg->backups[i] || !cfg->backups[i][0]) {
				rc = seterr(r, -EINVAL, "backup address %zu is empty", i);
				break;
			}
			r->addrs[i] = strdup(cfg->backups[i]);
			if (!r->addrs[i])
				rc = -ENOMEM;
			else
				r->nbk++;
		}
	}
	if (rc == 0) {
		r->bks = calloc(r->nbk, sizeof(*r->bks));
		if (!r->bks)
			rc = -ENOMEM;
		for (size_t i = 0; r->bks && i < r->nbk; i++)
			tw__peer_init(&r->bks[i].peer, r->addrs[i], r);
	}
	kp = rc == 0 ? tw__auth_key_path(cfg->key_file) : NULL;
	if (kp)
		rc = tw__auth_key_load(kp, &r->key, r->errmsg, sizeof(r->errmsg));
	if (rc == 0) {
		tw__fab_config_init(&fc);
		fc.provider = cfg->provider;
		if (cfg->connect_timeout_ms)
			fc.connect_timeout_ms = cfg->connect_timeout_ms;
		/* The peer layer's callbacks as they are: nothing else happens on a message or a
		 * loss (the peers are the channels' users). */
		ev = (struct tw_fab_events){ .arg = r, .on_recv = tw__peer_fab_on_recv,
					     .on_lost = tw__peer_fab_on_lost };
		rc = tw__fab_open(&fc, &ev, &r->fab);
		if (rc)
			seterr(r, rc, "cannot open the fabric (%s): %s", cfg->provider ? cfg->provider :
			       "default provider", rc == -TW_ENOPROV ? tw__fab_errmsg(NULL) :
			       tw_strerror(rc));
	}
	if (rc == 0 && cfg->one_sided) {
		r->one_sided = true;
		if (posix_memalign((void **)&r->os_buf, 4096, OS_CAP))
			r->os_buf = NULL;
		rc = r->os_buf ? tw__mr_reg(r->fab, r->os_buf, OS_CAP, TW_MR_READ_DST, &r->os_mr) :
				 -ENOMEM;
		if (rc)
			seterr(r, rc, "cannot register the one-sided read buffer: %s", tw_strerror(rc));
	}
	if (rc == 0) {
		tw__peer_opts_init(&r->po, TAILWIND__ROLE__ROLE_READER);
		r->po.key = r->key;
		r->po.node_name = "reader";
		/* A read may be held poll_ms at the backup: the call waits that much longer. */
		r->po.rpc.timeout_ms = (cfg->rpc_timeout_ms ? cfg->rpc_timeout_ms :
				    TW_DEFAULT_RPC_TIMEOUT_MS) + r->poll_ms;
		r->po.connect_timeout_ms = fc.connect_timeout_ms;
		rc = connect_all(r);
	}
	if (rc == 0)
		rc = find_start(r, cfg);
	if (rc) {
		if (!r->errmsg[0])
			seterr(r, rc, "%s", tw_strerror(rc));
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "%s", r->errmsg);
		tw_reader_close(r);
		return rc;
	}
	r->errmsg[0] = '\0';
	*out = r;
	return 0;
}

uint64_t tw_reader_position(const struct tw_reader *r)
{
	return r ? tw_pos_to_lsn((struct tw_pos){ (uint32_t)r->seg, (uint32_t)r->off }) : 0;
}

static void reader_stats(const struct tw_reader *r, struct tw_reader_stats *out)
{
	memset(out, 0, sizeof(*out)); /* NULL r: zeros, as tw_ctx_get_stats */
	out->backup = -1;
	if (r) {
		*out = r->st;
		out->backup = r->cur;
	}
}

void tw_reader_get_stats_sized(const struct tw_reader *r, struct tw_reader_stats *out, size_t size)
{
	struct tw_reader_stats full;

	reader_stats(r, &full);
	tw__out_copy(out, size, &full, sizeof(full));
}

const char *tw_reader_errmsg(const struct tw_reader *r)
{
	return r ? r->errmsg : "";
}

int tw_reader_close(struct tw_reader *r)
{
	if (!r)
		return 0;
	grant_release(r);
	for (size_t i = 0; r->bks && i < r->nbk; i++)
		tw__peer_close(&r->bks[i].peer);
	if (r->os_mr)
		tw__mr_close(r->os_mr);
	if (r->fab)
		tw__fab_close(r->fab);
	for (size_t i = 0; r->addrs && i < r->nbk; i++)
		free(r->addrs[i]);
	free(r->addrs);
	free(r->bks);
	free(r->buf);
	free(r->os_buf);
	tw__auth_key_free(r->key);
	free(r);
	return 0;
}
