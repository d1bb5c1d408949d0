/*
 * fabric/ofi_rma.c — one-sided writes and reads.
 *
 * Writes always go through fi_writemsg with FI_COMPLETION | FI_DELIVERY_COMPLETE
 * (FI_TRANSMIT_COMPLETE on verbs): tcp 1.17's fi_write ignores op_flags and completes as soon as
 * the bytes are in the local socket buffer, which would acknowledge data the backup never got.
 * The one exception is shm's CMA fast path (ofi_rdm.c, tw__rdm_shm_fast): its completion already
 * means the bytes are in the target's memory, and delivery-complete would make the target
 * process pull them itself.
 * The local and remote range checks happened in fabric.c; here we only check the provider's
 * max_msg_size and post with credit/-FI_EAGAIN handling.
 */
#include <errno.h>
#include <string.h>

#include "fabric/ofi_int.h"

struct rma_arg {
	void *local;
	size_t len;
	void *desc;
	uint64_t raddr, key;
	bool read;
	bool fast;
};

static ssize_t do_rma(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, void *argp)
{
	struct rma_arg *a = argp;
	struct iovec iov = {.iov_base = a->local, .iov_len = a->len};
	struct fi_rma_iov riov = {.addr = a->raddr, .len = a->len, .key = a->key};
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &a->desc,
		.iov_count = 1,
		.addr = of->base.rdm ? ch->addr : FI_ADDR_UNSPEC,
		.rma_iov = &riov,
		.rma_iov_count = 1,
		.context = ctx,
		.data = 0,
	};
	struct fid_ep *ep = of->base.rdm ? of->ep : ch->ep;

	if (of->strict && tw__strict_queue_full(of, ch))
		return -FI_EAGAIN;
	if (a->read)
		return fi_readmsg(ep, &msg, FI_COMPLETION);
	return fi_writemsg(ep, &msg, a->fast ? FI_COMPLETION : of->write_flags);
}

static int rma(struct tw_chan *base, struct tw_op *op, void *local, size_t len, struct tw_mr *mr,
	       uint64_t raddr, uint64_t key, bool read)
{
	struct ofi_chan *ch = (struct ofi_chan *)base;
	struct ofi_fab *of = ofab(base->fab);
	struct ofi_mr *omr = (struct ofi_mr *)mr;
	struct rma_arg a = {
		.local = local,
		.len = len,
		.desc = of->mr_local ? omr->desc : NULL,
		.raddr = raddr,
		.key = key,
		.read = read,
	};
	struct ofi_ctx *ctx;
	int rc;

	if (len > of->max_msg_size)
		return -EMSGSIZE;
	if (of->strict) {
		const char *call = read ? "fi_readmsg" : "fi_writemsg";

		if ((rc = tw__strict_check_iov(of, call, 1, 1)) < 0 ||
		    (rc = tw__strict_check_local(of, call, local, len, a.desc, omr->mr, read)) < 0)
			return rc;
	}
	ctx = tw__ofi_ctx_get(of);
	if (!ctx)
		return -ENOMEM;
	/* shm: decided at every write, from the byte libfabric itself reads (ofi_rdm.c). */
	a.fast = !read && of->base.rdm && of->shm_region && tw__rdm_shm_fast(of, ch);
	ctx->fast = a.fast;
	ctx->kind = read ? CTX_READ : CTX_WRITE;
	ctx->op = op;
	ctx->len = len;
	rc = tw__post_tx(of, ch, ctx, do_rma, &a, tw__fab_op_deadline(&of->base)); /* queue-full bound */
	if (rc < 0) {
		tw__ofi_ctx_put(of, ctx);
		return rc;
	}
	op->fab_priv[0] = ctx;
	tw__op_track(base, op);
	return 0;
}

int tw__ofi_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len, struct tw_mr *src_mr,
	      uint64_t raddr, uint64_t key)
{
	return rma(ch, op, (void *)(uintptr_t)src, len, src_mr, raddr, key, false);
}

int tw__ofi_read(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
	     uint64_t raddr, uint64_t key)
{
	return rma(ch, op, dst, len, dst_mr, raddr, key, true);
}
