/*
 * replica/backup_rpcdata.c — the backup's half of the RPC-replication baseline
 * (cfg.data_path = TW_DATA_RPC on the primary, replica/rpcdata.h): receive a data message,
 * check it against the open segment it names, copy it into that segment's buffer, and, on the
 * last chunk of a write, check the whole write (entries, payload CRCs, checksum entry) and reply.
 * This is the per-write CPU work that Tailwind's one-sided path avoids. Progress thread only.
 */
#include <errno.h>
#include <string.h>

#include "core/util.h"
#include "replica/backup_int.h"
#include "replica/rpcdata.h"

static void reply(struct conn *c, const struct rpcdata_hdr *q, int status)
{
	struct rpcdata_hdr h = *q;
	uint8_t buf[RPCDATA_HDR_SIZE];
	int rc;

	h.kind = RPCDATA_KIND_ACK;
	h.flags = 0;
	h.data_len = 0;
	h.write_len = (uint32_t)status;
	rpcdata_encode(&h, buf);
	rc = tw_chan_send(c->ch, buf, sizeof(buf));
	if (rc < 0)
		tw_log_ratelimited(TW_LOG_WARN, "backup: data reply to %s failed: %s",
				   tw_chan_peer(c->ch), tw_strerror(rc));
}

/* 0 when connection `c` may write `h`'s range of the segment; *s_out is the segment. */
static int admit(struct tw_backup *b, struct conn *c, const struct rpcdata_hdr *h,
		 struct seg **s_out)
{
	struct seg *s = bk_seg_find(b, h->log_id, h->segment_id);
	struct logst *l = bk_log(b, h->log_id, false);

	if (l && h->epoch < l->epoch)
		return -TW_EFENCED;
	if (!s || s->state != SEG_OPEN || !s->buf || s->owner != c->id)
		return -TW_ENOTFOUND;
	if (h->offset > s->length || h->data_len > s->length - h->offset ||
	    s->length > b->pool.size || h->write_off > h->offset ||
	    h->offset + h->data_len > h->write_off + h->write_len)
		return -EINVAL;
	*s_out = s;
	return 0;
}

bool bk_data_recv(struct tw_backup *b, struct conn *c, const void *msg, size_t len)
{
	struct rpcdata_hdr h;
	struct seg *s = NULL;
	int rc;

	if (!rpcdata_is(msg, len))
		return false;
	if (rpcdata_decode(msg, len, &h) < 0 || h.kind != RPCDATA_KIND_DATA) {
		tw_log_warn("backup: closing connection from %s: malformed data message",
			    tw_chan_peer(c->ch));
		c->drop = true;
		b->reap = true;
		return true;
	}
	rc = admit(b, c, &h, &s);
	if (rc == 0) {
		memcpy(s->buf->mem + h.offset, (const uint8_t *)msg + RPCDATA_HDR_SIZE, h.data_len);
		if (!(h.flags & RPCDATA_LAST))
			return true; /* one reply per write, after its last chunk */
		rc = rpcdata_check_write(s->buf->mem + h.write_off, h.write_len);
	}
	if (rc < 0)
		tw_log_ratelimited(TW_LOG_WARN, "backup: data message for log %llu segment %llu "
				   "offset %llu from %s refused: %s",
				   (unsigned long long)h.log_id, (unsigned long long)h.segment_id,
				   (unsigned long long)h.offset, tw_chan_peer(c->ch),
				   tw_strerror(rc));
	reply(c, &h, rc);
	return true;
}
