/*
 * fabric/wmsg.c — writes sent as messages (cfg.write_mode = TW_FAB_WRITE_MSG): a wrapper of the
 * transport's one-sided write, in the way libfabric's hook providers (prov/hook/) wrap a
 * provider's operations. The initiator sends the bytes of tw__chan_write() as two-sided messages;
 * the target's fabric layer, below its user's callbacks, looks the registration up by its key,
 * checks the range and access, copies the bytes into the registered memory, runs the fab's write
 * check (tw__fab_set_write_check) over the whole write, and replies. The initiator completes the
 * write operation with the reply's status. This is the RPC-replication baseline (RAMCloud-style:
 * the backup's CPU receives, checks and copies every byte) that Tailwind's one-sided writes are
 * measured against (docs/benchmarks.md); callers above the fabric do not know which it is.
 *
 * Every fab serves these requests, whatever its own write mode: the mode is the initiator's.
 * Completion semantics are the one-sided write's: the operation is tracked by the generic layer
 * (fabric.c), so a lost or closed channel, or a reply not arrived within op_timeout_ms, completes
 * it with the same error a one-sided write would get; a reply for an operation already completed
 * is ignored. One difference: a refused write (unknown key, out of range, failed check) completes
 * with that error and the channel stays up, where a provider would fail the channel.
 *
 * Wire format (little-endian), on the channel of the control messages, told apart from them by
 * its first two bytes (tw__chan_send refuses user messages that begin with them):
 *
 *   [magic u16 = 0x4454 "TD"][version u8 = 1][kind u8][flags u8][pad 3]
 *   [data_len u32][status i32][tag u64][key u64][addr u64][write_addr u64][write_len u64][pad 8]
 *   = 64 bytes, then data_len bytes
 *
 * kind 1 (chunk): data_len bytes for remote address `addr` (as the peer's tw_rkey.addr counts),
 * part of the write [write_addr, write_addr + write_len); flags WMSG_LAST on its last chunk,
 * WMSG_UNCHECKED on every chunk of a TW_OP_UNCHECKED write. A
 * write longer than max_msg_size - 64 is split; the chunks of one write travel on one channel in
 * order (FI_EP_MSG; shm and rxm keep send order), and the check runs when the last one is placed.
 * kind 2 (reply): data_len 0, `tag` of the write, `status` 0 or a negative code; one per write
 * (a refused chunk before the last may produce an early one; later ones find no operation).
 *
 * Driver thread of the fab only, like the rest of fabric.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fab_int.h"

#define WMSG_MAGIC 0x4454u
#define WMSG_VERSION 1u
#define WMSG_CHUNK 1u
#define WMSG_REPLY 2u
#define WMSG_LAST 0x01u
#define WMSG_UNCHECKED 0x02u /* TW_OP_UNCHECKED: place without running the write check */

struct wmsg_hdr {
	uint8_t kind, flags;
	uint32_t data_len;
	int32_t status;
	uint64_t tag, key, addr, write_addr, write_len;
};

bool tw__wmsg_is(const void *msg, size_t len)
{
	const uint8_t *m = msg;

	return len >= 2 && (m[0] | (unsigned)m[1] << 8) == WMSG_MAGIC;
}

static void encode(const struct wmsg_hdr *h, uint8_t *m)
{
	memset(m, 0, TW_FAB_WMSG_HDR);
	tw_store_le16(m, WMSG_MAGIC);
	m[2] = WMSG_VERSION;
	m[3] = h->kind;
	m[4] = h->flags;
	tw_store_le32(m + 8, h->data_len);
	tw_store_le32(m + 12, (uint32_t)h->status);
	tw_store_le64(m + 16, h->tag);
	tw_store_le64(m + 24, h->key);
	tw_store_le64(m + 32, h->addr);
	tw_store_le64(m + 40, h->write_addr);
	tw_store_le64(m + 48, h->write_len);
}

static int decode(const uint8_t *m, size_t len, struct wmsg_hdr *h)
{
	if (len < TW_FAB_WMSG_HDR || !tw__wmsg_is(m, len) || m[2] != WMSG_VERSION)
		return -TW_EMALFORMED;
	h->kind = m[3];
	h->flags = m[4];
	h->data_len = tw_load_le32(m + 8);
	h->status = (int32_t)tw_load_le32(m + 12);
	h->tag = tw_load_le64(m + 16);
	h->key = tw_load_le64(m + 24);
	h->addr = tw_load_le64(m + 32);
	h->write_addr = tw_load_le64(m + 40);
	h->write_len = tw_load_le64(m + 48);
	if ((h->kind != WMSG_CHUNK && h->kind != WMSG_REPLY) ||
	    h->data_len != len - TW_FAB_WMSG_HDR || (h->kind == WMSG_REPLY && h->data_len))
		return -TW_EMALFORMED;
	return 0;
}

int tw__wmsg_init(struct tw_fab *fab)
{
	if (fab->cfg.write_mode != TW_FAB_WRITE_MSG)
		return 0;
	if (fab->cfg.max_msg_size <= TW_FAB_WMSG_HDR)
		return -EINVAL;
	fab->wmsg_buf = malloc(fab->cfg.max_msg_size);
	return fab->wmsg_buf ? 0 : -ENOMEM;
}

void tw__wmsg_fini(struct tw_fab *fab)
{
	free(fab->wmsg_buf);
	fab->wmsg_buf = NULL;
}

/*
 * Initiator: send the write as chunks, then track the operation (as the backends do after
 * posting). The reply cannot overtake the tracking: it is handled only by a later progress of
 * this fab, and the last send returns once its message is posted.
 */
int tw__wmsg_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
	       struct tw_mr *src_mr, uint64_t raddr, uint64_t key)
{
	struct tw_fab *fab = ch->fab;
	size_t chunk = fab->cfg.max_msg_size - TW_FAB_WMSG_HDR, done = 0;
	struct wmsg_hdr h = {
		.kind = WMSG_CHUNK,
		.tag = ++fab->wmsg_tag,
		.key = key,
		.write_addr = raddr,
		.write_len = len,
	};

	(void)src_mr; /* the bytes are copied into the message: no registration needed */
	while (done < len) {
		size_t n = TW_MIN(len - done, chunk);
		int rc;

		h.addr = raddr + done;
		h.data_len = (uint32_t)n;
		h.flags = (done + n == len ? WMSG_LAST : 0) |
			  (op->flags & TW_OP_UNCHECKED ? WMSG_UNCHECKED : 0);
		encode(&h, fab->wmsg_buf);
		memcpy(fab->wmsg_buf + TW_FAB_WMSG_HDR, (const uint8_t *)src + done, n);
		rc = fab->ops->send(ch, fab->wmsg_buf, TW_FAB_WMSG_HDR + n);
		if (rc < 0)
			return rc; /* chunks already sent land harmlessly; no reply will come */
		if (ch->lost || ch->closed)
			return ch->closed ? -TW_ECLOSED : ch->lost_err ? ch->lost_err : -TW_EPEERLOST;
		done += n;
	}
	op->fab_priv[0] = NULL; /* nothing for the backend to abandon */
	op->fab_tag = h.tag;
	tw__op_track(ch, op);
	fab->stats.wmsg_writes++;
	return 0;
}

static void reply(struct tw_chan *ch, const struct wmsg_hdr *q, int status)
{
	struct wmsg_hdr h = {.kind = WMSG_REPLY, .status = status, .tag = q->tag, .key = q->key,
			     .addr = q->write_addr, .write_addr = q->write_addr,
			     .write_len = q->write_len};
	uint8_t buf[TW_FAB_WMSG_HDR];
	int rc;

	encode(&h, buf);
	rc = ch->fab->ops->send(ch, buf, sizeof(buf));
	if (rc < 0)
		tw_log_ratelimited(TW_DIAG_WARN, "fabric %s: write reply to %s failed: %s",
				   ch->fab->prov, ch->peer, tw_strerror(rc));
}

/* The registration a chunk goes to: 0 and *dst_out / *wbuf_out, -EACCES or -ERANGE. */
static int target(struct tw_fab *fab, const struct wmsg_hdr *h, uint8_t **dst_out,
		  uint8_t **wbuf_out)
{
	struct tw_mr *mr = fab->wmsg_last;
	uint64_t woff, off;

	if (!mr || mr->rk.key != h->key) {
		for (mr = fab->mrs; mr && mr->rk.key != h->key; mr = mr->next)
			;
		if (!mr)
			return -EACCES;
		fab->wmsg_last = mr;
	}
	if (!(mr->access & TW_MR_REMOTE_WRITE))
		return -EACCES;
	if (h->write_addr < mr->rk.addr)
		return -ERANGE;
	woff = h->write_addr - mr->rk.addr;
	if (woff > mr->len || h->write_len > mr->len - woff || h->addr < h->write_addr)
		return -ERANGE;
	off = h->addr - h->write_addr;
	if (off > h->write_len || h->data_len > h->write_len - off)
		return -ERANGE;
	*wbuf_out = (uint8_t *)mr->buf + woff;
	*dst_out = *wbuf_out + off;
	return 0;
}

static void serve(struct tw_chan *ch, const struct wmsg_hdr *h, const uint8_t *data)
{
	struct tw_fab *fab = ch->fab;
	uint8_t *dst, *wbuf;
	int rc = target(fab, h, &dst, &wbuf);

	if (rc == 0) {
		memcpy(dst, data, h->data_len);
		fab->stats.wmsg_served_bytes += h->data_len;
		if (!(h->flags & WMSG_LAST))
			return; /* one reply per write, after its last chunk */
		fab->stats.wmsg_served++;
		if (fab->write_check && !(h->flags & WMSG_UNCHECKED))
			rc = fab->write_check(wbuf, h->write_len);
	}
	if (rc < 0)
		tw_log_ratelimited(TW_DIAG_WARN, "fabric %s: write of %llu bytes at 0x%llx (key "
				   "0x%llx) from %s refused: %s", fab->prov,
				   (unsigned long long)h->write_len,
				   (unsigned long long)h->write_addr, (unsigned long long)h->key,
				   ch->peer, tw_strerror(rc));
	reply(ch, h, rc);
}

static void complete(struct tw_chan *ch, const struct wmsg_hdr *h)
{
	struct tw_fab *fab = ch->fab;

	/* Replies come in order: the match is almost always the oldest operation. */
	for (struct tw_op *op = ch->ops_head; op; op = op->next) {
		if (op->fab_tag != h->tag)
			continue;
		if (h->status == 0) {
			__atomic_store_n(&fab->stats.writes, fab->stats.writes + 1,
					 __ATOMIC_RELAXED); /* tw__fab_write_counts */
			fab->stats.write_bytes += h->write_len;
		}
		tw__op_finish(op, h->status > 0 ? -TW_EMALFORMED : h->status);
		return;
	}
	/* Completed already (timeout, loss): nothing to do. */
}

void tw__wmsg_recv(struct tw_chan *ch, const void *msg, size_t len)
{
	struct wmsg_hdr h;

	if (ch->closed || ch->lost)
		return;
	if (decode(msg, len, &h) < 0) {
		tw__fab_set_errmsg(ch->fab, "malformed write message from %s", ch->peer);
		tw_log_warn("fabric %s: %s; failing the channel", ch->fab->prov, ch->fab->errmsg);
		tw__chan_set_lost(ch, -TW_EMALFORMED);
		return;
	}
	if (h.kind == WMSG_CHUNK)
		serve(ch, &h, (const uint8_t *)msg + TW_FAB_WMSG_HDR);
	else
		complete(ch, &h);
}
