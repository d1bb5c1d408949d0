/*
 * fabric/ofi_msg.c — two-sided control messages: a bounded ring of registered send slots per
 * fab (tw__chan_send copies into a slot, so the caller's buffer is borrowed only for the call;
 * when every slot is in flight we progress until one completes), and pre-posted receive
 * buffers (rx_depth per MSG channel; one pool for an RDM fab), reposted after on_recv returns.
 * On RDM every message starts with the channel header (ofi_rdm.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/ofi_int.h"

int tw__msg_alloc_slots(struct ofi_fab *of)
{
	unsigned n = TW_MIN(of->base.cfg.tx_depth, 32u);
	int rc;

	if (n < 2)
		n = 2;
	of->slot_size = (of->base.cfg.max_msg_size + RDM_HDR_LEN + 63) & ~(size_t)63;
	of->sbuf_len = (of->slot_size * n + 4095) & ~(size_t)4095;
	of->sbuf = tw__fab_alloc(of->sbuf_len);
	of->sctx = calloc(n, sizeof(*of->sctx));
	if (!of->sbuf || !of->sctx)
		return -ENOMEM;
	rc = tw__mr_reg_internal(of, of->sbuf, of->sbuf_len, FI_SEND, &of->smr, &of->sdesc);
	if (rc < 0)
		return rc;
	of->nslots = n;
	for (unsigned i = 0; i < n; i++) {
		of->sctx[i].kind = CTX_SEND;
		of->sctx[i].buf = (char *)of->sbuf + (size_t)i * of->slot_size;
		of->sctx[i].next = of->sfree;
		of->sfree = &of->sctx[i];
	}
	return 0;
}

void tw__msg_free_slots(struct ofi_fab *of)
{
	tw__mr_close_internal(of, of->smr);
	tw__fab_free(of->sbuf, of->sbuf_len);
	free(of->sctx);
}

struct ofi_ctx *tw__msg_get_slot(struct ofi_fab *of, struct ofi_chan *ch, uint64_t deadline_ns, int *err)
{
	struct ofi_ctx *c;

	while (!of->sfree) {
		if (ch && (ch->base.lost || ch->base.closed || ch->base.is_down)) {
			*err = ch->base.closed ? -TW_ECLOSED : -TW_EPEERLOST;
			return NULL;
		}
		if (of->base.now_ns >= deadline_ns) { /* read by the last stall */
			*err = -ETIMEDOUT;
			return NULL;
		}
		tw__ofi_stall(of);
	}
	c = of->sfree;
	of->sfree = c->next;
	c->next = c->prev = NULL;
	c->ch = NULL;
	c->op = NULL;
	c->bye = false;
	c->peer = NULL;
	return c;
}

void tw__msg_put_slot(struct ofi_fab *of, struct ofi_ctx *ctx)
{
	ctx->ch = NULL;
	ctx->bye = false;
	ctx->prev = NULL;
	ctx->next = of->sfree;
	of->sfree = ctx;
}

int tw__msg_alloc_rx(struct ofi_fab *of, struct ofi_rx *rx, struct ofi_chan *ch)
{
	size_t sz = of->slot_size;
	int rc;

	rx->buf_len = (sz * rx->n + 4095) & ~(size_t)4095;
	rx->buf = tw__fab_alloc(rx->buf_len);
	rx->ctx = calloc(rx->n, sizeof(*rx->ctx));
	if (!rx->buf || !rx->ctx)
		return -ENOMEM;
	rc = tw__mr_reg_internal(of, rx->buf, rx->buf_len, FI_RECV, &rx->mr, &rx->desc);
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < rx->n; i++) {
		rx->ctx[i].kind = CTX_RECV;
		rx->ctx[i].ch = ch;
		rx->ctx[i].buf = (char *)rx->buf + (size_t)i * sz;
	}
	for (unsigned i = 0; i < rx->n; i++)
		if ((rc = tw__msg_post_recv(of, &rx->ctx[i])) < 0)
			return rc;
	return 0;
}

void tw__msg_free_rx(struct ofi_fab *of, struct ofi_rx *rx)
{
	tw__mr_close_internal(of, rx->mr);
	rx->mr = NULL;
	tw__fab_free(rx->buf, rx->buf_len);
	rx->buf = NULL;
	free(rx->ctx);
	rx->ctx = NULL;
}

int tw__msg_post_recv(struct ofi_fab *of, struct ofi_ctx *ctx)
{
	struct fid_ep *ep = of->base.rdm ? of->ep : ctx->ch->ep;
	void *desc = of->base.rdm ? of->rx.desc : ctx->ch->rx.desc;
	ssize_t rc;
	int tries = 0;

	if (of->strict && (rc = tw__strict_check_local(of, "fi_recv", ctx->buf, of->slot_size, desc,
						       of->base.rdm ? of->rx.mr : ctx->ch->rx.mr,
						       true)) < 0)
		return (int)rc;
	/* Receive queues are sized by us (rx_depth <= rx_size), so EAGAIN is rare: retry briefly. */
	do {
		rc = fi_recv(ep, ctx->buf, of->slot_size, desc, FI_ADDR_UNSPEC, ctx);
	} while (rc == -FI_EAGAIN && ++tries < 1000);
	if (rc) {
		tw_log_ratelimited(TW_DIAG_WARN, "fabric %s: fi_recv: %s", of->base.prov,
				   fi_strerror((int)-rc));
		return tw__ofi_errno((int)rc);
	}
	if (!of->base.rdm)
		ctx->ch->rx.posted++;
	return 0;
}

struct send_arg {
	size_t len;
};

static ssize_t do_send(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, void *arg)
{
	const struct send_arg *a = arg;
	struct fid_ep *ep = of->base.rdm ? of->ep : ch->ep;
	fi_addr_t dest = of->base.rdm ? ch->addr : FI_ADDR_UNSPEC;

	if (of->strict && tw__strict_queue_full(of, ch))
		return -FI_EAGAIN;
	return fi_send(ep, ctx->buf, a->len, of->sdesc, dest, ctx);
}

int tw__msg_post_send(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, size_t len,
		  uint64_t deadline_ns)
{
	struct send_arg a = {.len = len};
	int rc;

	if (of->strict && (rc = tw__strict_check_local(of, "fi_send", ctx->buf, len, of->sdesc, of->smr,
						       false)) < 0)
		return rc;
	ctx->len = len;
	return tw__post_tx(of, ch, ctx, do_send, &a, deadline_ns);
}

int tw__ofi_send(struct tw_chan *base, const void *msg, size_t len)
{
	struct ofi_chan *ch = (struct ofi_chan *)base;
	struct ofi_fab *of = ofab(base->fab);
	uint64_t deadline = tw__fab_op_deadline(&of->base); /* now_ns: read at the API entry */
	struct ofi_ctx *ctx;
	size_t off = 0;
	int rc;

	ctx = tw__msg_get_slot(of, ch, deadline, &rc);
	if (!ctx)
		return rc;
	if (of->base.rdm) {
		tw__rdm_put_hdr(ctx->buf, RDM_DATA, ch->peer_id, ch->base.id, (uint32_t)len);
		off = RDM_HDR_LEN;
	}
	if (len)
		memcpy((char *)ctx->buf + off, msg, len);
	rc = tw__msg_post_send(of, ch, ctx, off + len, deadline);
	if (rc < 0) {
		tw__msg_put_slot(of, ctx);
		return rc;
	}
	ctx->len = len; /* stats count payload bytes */
	return 0;
}
