/*
 * fabric/ofi_mr.c — memory registration.
 *
 * Keys: with FI_MR_PROV_KEY (verbs) the provider picks and we read fi_mr_key(); otherwise
 * (tcp, sockets, shm, rxm return mr_mode 0 or VIRT_ADDR only) we request our own: a random
 * per-fab seed mixed with a counter (tw__fab_gen_key), masked to mr_key_size, retried on
 * -FI_ENOKEY — unique per domain and not guessable by a stale peer.
 * Remote address of byte 0 (tw_rkey.addr): the virtual address with FI_MR_VIRT_ADDR, else 0
 * (offset addressing), so peers always compute rk.addr + offset.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/ofi_int.h"

uint64_t tw__mr_access_flags(unsigned access)
{
	uint64_t f = 0;

	if (access & TW_MR_SEND)
		f |= FI_SEND;
	if (access & TW_MR_WRITE_SRC)
		f |= FI_WRITE;
	if (access & TW_MR_READ_DST)
		f |= FI_READ;
	if (access & TW_MR_REMOTE_WRITE)
		f |= FI_REMOTE_WRITE;
	if (access & TW_MR_REMOTE_READ)
		f |= FI_REMOTE_READ;
	return f;
}

/* FI_MR_ALLOCATED (fi_mr(3): registered memory must be backed by pages when it is registered):
 * back every page of [buf, buf + len) without changing a byte. tw__fab_alloc no longer touches
 * its pages, so only the providers that ask pay for it, once per registration. */
static void back_pages(void *buf, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	volatile uint8_t *p = buf;

#ifdef MADV_POPULATE_WRITE
	if (madvise(buf, len, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	for (size_t off = 0; pg > 0 && off < len; off += (size_t)pg)
		p[off] = p[off]; /* a write fault backs the page; the byte stays */
}

static void back_if_asked(void *buf, size_t len, bool asked)
{
	if (asked)
		back_pages(buf, len);
}

static uint64_t request_key(uint64_t own, bool prov_key)
{
	return prov_key ? 0 : own;
}

static uint64_t publish_key(uint64_t provider, uint64_t requested)
{
	(void)requested;
	return provider;
}

const struct tw_fab_mr_rules tw__fab_mr_rules = {
	.back = back_if_asked,
	.request_key = request_key,
	.publish_key = publish_key,
};

int tw__mr_reg_internal(struct ofi_fab *of, void *buf, size_t len, uint64_t acc, struct fid_mr **mr_out,
		    void **desc_out)
{
	int rc = -FI_ENOKEY;

	*mr_out = NULL;
	of->mr_rules->back(buf, len, of->mr_allocated);
	if (of->strict && tw__strict_check_backed(of, buf, len) < 0)
		return -EFAULT;
	for (int tries = 0; tries < 16 && rc == -FI_ENOKEY; tries++) {
		uint64_t key = of->mr_rules->request_key(tw__fab_gen_key(&of->base, of->mr_key_size),
							 of->prov_key);

		of->req_key = key;
		rc = fi_mr_reg(of->domain, buf, len, acc, 0, key, 0, mr_out, NULL);
	}
	if (rc) {
		tw__fab_set_errmsg(&of->base, "fi_mr_reg(%zu bytes): %s", len, fi_strerror(-rc));
		*mr_out = NULL;
		return tw__ofi_errno(rc);
	}
	*desc_out = fi_mr_desc(*mr_out);
	if (of->strict && (rc = tw__strict_add_reg(of, *mr_out, *desc_out, buf, len, acc)) < 0) {
		fi_close(&(*mr_out)->fid);
		*mr_out = NULL;
		return rc;
	}
	return 0;
}

void tw__mr_close_internal(struct ofi_fab *of, struct fid_mr *mr)
{
	if (!mr)
		return;
	if (of->strict)
		tw__strict_del_reg(of, mr);
	fi_close(&mr->fid);
}

int tw__ofi_mr_reg(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out)
{
	struct ofi_fab *of = ofab(fab);
	struct ofi_mr *mr = calloc(1, sizeof(*mr));
	int rc;

	if (!mr)
		return -ENOMEM;
	rc = tw__mr_reg_internal(of, buf, len, tw__mr_access_flags(access), &mr->mr, &mr->desc);
	if (rc < 0) {
		free(mr);
		return rc;
	}
	mr->base.buf = buf;
	mr->base.len = len;
	mr->base.access = access;
	mr->base.rk.addr = of->virt_addr ? (uint64_t)(uintptr_t)buf : 0;
	mr->base.rk.key = of->mr_rules->publish_key(fi_mr_key(mr->mr), of->req_key);
	mr->base.rk.len = len;
	tw__mr_link(fab, &mr->base);
	*out = &mr->base;
	return 0;
}

void tw__ofi_mr_dereg(struct tw_mr *base)
{
	struct ofi_mr *mr = (struct ofi_mr *)base;
	struct ofi_fab *of = ofab(base->fab);

	tw__mr_unlink(base);
	tw__mr_close_internal(of, mr->mr);
	free(mr);
}
