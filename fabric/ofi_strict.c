/*
 * fabric/ofi_strict.c — strict mode (tw_fab_config.strict): verbs semantics on tcp and sockets.
 *
 * The verbs provider is the reason this library exists and no machine here has an RDMA device,
 * so what verbs requires is made to happen on the software providers (docs/fabric.md "Verbs
 * semantics without RDMA hardware"):
 *   - mr_mode FI_MR_BASIC in the hints. tcp and sockets keep it (libfabric 1.17 ofi_check_mr_mode
 *     and fi_alter_domain_attr, prov/util/src/util_attr.c), and their MR map then works as
 *     OFI_MR_BASIC_MAP = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY
 *     (prov/util/src/util_mr_map.c): the provider hands out the keys (1, 2, 3, ...) and a target
 *     resolves the remote address as a virtual address, so a peer that sends a requested key or
 *     an offset is refused by the target's provider, as on verbs.
 *   - FI_MR_LOCAL, which no software provider checks (sockets has sock_mr_verify_desc but never
 *     calls it): every local buffer of fi_writemsg, fi_readmsg, fi_send and fi_recv must come
 *     with the descriptor of a live registration of this domain that covers it; receives and
 *     read destinations need a registration the provider may write into (verbs registers local
 *     write access for FI_RECV, FI_READ and FI_REMOTE_WRITE only: vrb_mr_ofi2ibv_access,
 *     prov/verbs/src/verbs_mr.c). The registry below is what verbs' lkeys are to the HCA.
 *   - FI_MR_ALLOCATED: no registration of memory without pages behind it (mincore(2)).
 *   - verbs' limits: rma_iov_limit 1; small queues where a post returns -FI_EAGAIN when the send
 *     queue or the CQ has no free entry, exactly where vrb_post_send does
 *     (prov/verbs/src/verbs_ep.c: sq_credits, cq->credits; the CQ's context pool, sized as the
 *     CQ, holds the posted receives too, vrb_post_recv).
 * Off by default: the data path then pays one predictable branch per post.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/ofi_int.h"

struct strict_reg {
	struct fid_mr *mr;
	void *desc;
	uintptr_t base;
	size_t len;
	uint64_t acc;
};

/* A failed check: the message names the libfabric call; abort in TW_FAB_STRICT_VERBS_ABORT. */
TW_PRINTF(2, 3) static int violation(struct ofi_fab *of, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(of->base.errmsg, sizeof(of->base.errmsg), fmt, ap);
	va_end(ap);
	of->base.stats.strict_violations++;
	tw_log_error("fabric %s: strict (verbs): %s", of->base.prov, of->base.errmsg);
	if (of->base.cfg.strict == TW_FAB_STRICT_VERBS_ABORT) {
		/* libpsm2 and libinfinipath, which libfabric loads for its psm providers, install a
		 * SIGABRT handler that exits with status 1: die of the signal, as a test expects. */
		signal(SIGABRT, SIG_DFL);
		abort();
	}
	return -EFAULT;
}

void tw__strict_hints(struct fi_info *hints)
{
	hints->domain_attr->mr_mode = FI_MR_BASIC;
	hints->tx_attr->size = TW_FAB_STRICT_SQ;
}

int tw__strict_read_back(struct ofi_fab *of)
{
	const struct fi_info *i = of->info;

	if (of->base.rdm || i->domain_attr->mr_mode != FI_MR_BASIC) {
		tw__fab_open_errmsg("strict mode (verbs semantics) covers the FI_EP_MSG providers that "
				"keep mr_mode FI_MR_BASIC (tcp, sockets); '%s' returned %s mr_mode 0x%x",
				i->fabric_attr->prov_name, of->base.rdm ? "FI_EP_RDM," : "",
				(unsigned)i->domain_attr->mr_mode);
		return -ENOTSUP;
	}
	of->strict = true;
	of->mr_local = true; /* every local buffer gets its descriptor, as verbs needs */
	of->rma_iov_limit = 1;
	/* verbs' strongest completion. tcp and sockets acknowledge after placement for it too
	 * (tcpx_set_ack_flags, prov/tcp/src/tcpx.h; sock_pe_process_rx_write), so nothing is
	 * acknowledged earlier than in normal mode. */
	of->write_flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE;
	return 0;
}

int tw__strict_check_backed(struct ofi_fab *of, const void *buf, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)buf & ~((uintptr_t)pg - 1), end = (uintptr_t)buf + len;
	unsigned char vec[1024];

	while (a < end) {
		size_t n = TW_MIN((end - a + (uintptr_t)pg - 1) / (uintptr_t)pg, sizeof(vec));

		if (mincore((void *)a, n * (size_t)pg, vec) < 0)
			return violation(of, "fi_mr_reg: [%p, +%zu): mincore: %s", buf, len,
					 strerror(errno));
		for (size_t i = 0; i < n; i++)
			if (!(vec[i] & 1))
				return violation(of, "fi_mr_reg: [%p, +%zu) is not backed by memory at "
						 "%p (FI_MR_ALLOCATED: touch every page before "
						 "registering it)", buf, len,
						 (void *)(a + i * (size_t)pg));
		a += n * (size_t)pg;
	}
	return 0;
}

int tw__strict_add_reg(struct ofi_fab *of, struct fid_mr *mr, void *desc, const void *buf, size_t len,
		   uint64_t acc)
{
	if (of->nregs == of->regs_cap) {
		size_t cap = of->regs_cap ? 2 * of->regs_cap : 16;
		struct strict_reg *r = realloc(of->regs, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		of->regs = r;
		of->regs_cap = cap;
	}
	of->regs[of->nregs++] = (struct strict_reg){
		.mr = mr, .desc = desc, .base = (uintptr_t)buf, .len = len, .acc = acc,
	};
	return 0;
}

void tw__strict_del_reg(struct ofi_fab *of, struct fid_mr *mr)
{
	for (size_t i = 0; i < of->nregs; i++)
		if (of->regs[i].mr == mr) {
			of->regs[i] = of->regs[--of->nregs];
			return;
		}
}

int tw__strict_check_local(struct ofi_fab *of, const char *call, const void *buf, size_t len, void *desc,
		       struct fid_mr *mr, bool local_write)
{
	const struct strict_reg *r = NULL;
	uintptr_t a = (uintptr_t)buf;

	of->base.stats.strict_checks++;
	if (!desc)
		return violation(of, "%s: local buffer [%p, +%zu) without a descriptor (FI_MR_LOCAL: "
				 "pass fi_mr_desc() of its registration)", call, buf, len);
	/* By the registration the descriptor was taken from: sockets' descriptors are its keys,
	 * which every domain hands out from 1, so the value alone cannot tell domains apart. */
	for (size_t i = 0; i < of->nregs && !r; i++)
		if (of->regs[i].mr == mr)
			r = &of->regs[i];
	if (!r)
		return violation(of, "%s: descriptor %p of local buffer [%p, +%zu) is not a live "
				 "registration of this domain", call, desc, buf, len);
	if (r->desc != desc)
		return violation(of, "%s: descriptor %p of local buffer [%p, +%zu) is not its "
				 "registration's (%p)", call, desc, buf, len, r->desc);
	if (a < r->base || a - r->base > r->len || len > r->len - (a - r->base))
		return violation(of, "%s: local buffer [%p, +%zu) is not covered by the registration "
				 "of its descriptor [%p, +%zu)", call, buf, len, (void *)r->base,
				 r->len);
	if (local_write && !(r->acc & (FI_RECV | FI_READ | FI_REMOTE_WRITE)))
		return violation(of, "%s: the registration [%p, +%zu) of local buffer [%p, +%zu) does "
				 "not let the provider write into it (verbs: register it with FI_RECV, "
				 "FI_READ or FI_REMOTE_WRITE)", call, (void *)r->base, r->len, buf,
				 len);
	return 0;
}

int tw__strict_check_iov(struct ofi_fab *of, const char *call, size_t iov_count, size_t rma_iov_count)
{
	if (iov_count > of->rma_iov_limit || rma_iov_count > of->rma_iov_limit)
		return violation(of, "%s: %zu local and %zu remote iovs, verbs' rma_iov_limit is %zu",
				 call, iov_count, rma_iov_count, of->rma_iov_limit);
	return 0;
}

bool tw__strict_queue_full(struct ofi_fab *of, struct ofi_chan *ch)
{
	if (ch->tx_inflight + ch->rx.posted >= ch->cq_size) {
		of->base.stats.cq_full++;
		return true;
	}
	return ch->tx_inflight >= ch->sq_size;
}

void tw__strict_fini(struct ofi_fab *of)
{
	const struct tw_fab_stats *st = &of->base.stats;

	if (of->strict)
		tw_log_info("fabric %s: strict (verbs): %llu local buffers checked, %llu violations, "
			    "%llu posts refused with -FI_EAGAIN (%llu with the CQ full)", of->base.prov,
			    (unsigned long long)st->strict_checks,
			    (unsigned long long)st->strict_violations,
			    (unsigned long long)st->eagain_retries, (unsigned long long)st->cq_full);
	free(of->regs);
	of->regs = NULL;
	of->nregs = of->regs_cap = 0;
}
