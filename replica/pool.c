/*
 * replica/pool.c — the backup's pool of registered segment buffers. They are zero-filled once,
 * here, and then reused as they are: each use writes under a fresh chain seed, which makes the
 * stale bytes of the previous use unable to validate (docs/log-format.md §7).
 * Progress thread only (the flusher touches a buffer's bytes, never this bookkeeping).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "log/check.h"
#include "replica/backup_int.h"

#define POOL_ACCESS (TW_MR_REMOTE_WRITE | TW_MR_REMOTE_READ)

int pool_init(struct pool *p, struct tw_fab *fab, unsigned n, size_t size)
{
	memset(p, 0, sizeof(*p));
	p->fab = fab;
	/* A primary whose writes arrive as messages (the RPC baseline) has our CPU place them:
	 * then check each sealed write before it is acknowledged, as an RPC backup would. */
	tw_fab_set_write_check(fab, tw__log_check_write);
	p->size = size;
	p->bufs = calloc(n, sizeof(*p->bufs));
	if (!p->bufs)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		struct pool_buf *b = &p->bufs[i];
		int rc;

		b->idx = i;
		b->mem = tw_fab_alloc(size); /* mmap: zero-filled */
		if (!b->mem) {
			tw_log_error("backup: cannot allocate buffer %u of %zu bytes (%u buffers "
				     "requested): lower --buffers or --buffer-size", i, size, n);
			pool_fini(p);
			return -ENOMEM;
		}
		p->n = i + 1;
		/* Touch every page so FI_MR_ALLOCATED providers see backed memory. */
		memset(b->mem, 0, size);
		rc = tw_mr_reg(fab, b->mem, size, POOL_ACCESS, &b->mr);
		if (rc < 0) {
			tw_log_error("backup: registering buffer %u (%zu bytes) failed: %s (%s)%s", i,
				     size, tw_strerror(rc), tw_fab_errmsg(fab),
				     (rc == -ENOMEM || rc == -EAGAIN || rc == -EPERM || rc == -EFAULT) ?
				     "; on verbs raise the locked-memory limit (ulimit -l unlimited, "
				     "or LimitMEMLOCK=infinity in the systemd unit)" : "");
			b->mr = NULL;
			pool_fini(p);
			return rc;
		}
		b->state = POOL_FREE;
		b->zeroed = true;
		p->count[POOL_FREE]++;
	}
	return 0;
}

void pool_fini(struct pool *p)
{
	if (!p->bufs)
		return;
	for (unsigned i = 0; i < p->n; i++) {
		struct pool_buf *b = &p->bufs[i];

		if (b->mr)
			tw_mr_close(b->mr);
		b->mr = NULL;
	}
	for (unsigned i = 0; i < p->n; i++)
		if (p->bufs[i].mem)
			tw_fab_free(p->bufs[i].mem, p->size);
	free(p->bufs);
	memset(p, 0, sizeof(*p));
}

struct pool_buf *pool_take(struct pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->bufs[i].state == POOL_FREE)
			return &p->bufs[i];
	return NULL;
}

void pool_set_state(struct pool *p, struct pool_buf *b, enum pool_state st)
{
	p->count[b->state]--;
	b->state = st;
	p->count[st]++;
}

int pool_ensure_mr(struct pool *p, struct pool_buf *b)
{
	if (b->mr)
		return 0;
	return tw_mr_reg(p->fab, b->mem, p->size, POOL_ACCESS, &b->mr);
}

void pool_revoke_mr(struct pool *p, struct pool_buf *b)
{
	(void)p;
	if (b->mr) {
		tw_mr_close(b->mr);
		b->mr = NULL;
	}
}

unsigned pool_unflushed(const struct pool *p)
{
	return p->count[POOL_OPEN] + p->count[POOL_CLOSED];
}
