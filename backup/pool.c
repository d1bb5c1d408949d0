/*
 * backup/pool.c — the backup's pool of registered segment buffers. They are zero-filled once,
 * when allocated, and then reused as they are: each use writes under a fresh chain seed, which
 * makes the stale bytes of the previous use unable to validate (docs/log-format.md §7).
 *
 * Policy (docs/operations.md, "Sizing the buffer pool"): `initial` buffers are allocated and
 * registered at start; an open that finds none free grows the pool by one buffer, up to `max`.
 * Growth runs in the OpenSegment (or ReadSegment) handler, never on the data path: a one-sided
 * write lands in a buffer that was registered before its key was handed out. Buffers that come
 * back stay allocated and registered for the next open (the pool never shrinks), so a steady
 * load stops growing at its peak. Each buffer is a separate allocation: growing moves the array
 * of pointers, never a buffer (segments and flush jobs keep pointers to them).
 *
 * Progress thread only (the flusher touches a buffer's bytes, never this bookkeeping).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/util.h"
#include "log/check.h"
#include "backup/backup_int.h"

#define POOL_ACCESS (TW_MR_REMOTE_WRITE | TW_MR_REMOTE_READ)

static bool reg_hint(int rc)
{
	return rc == -ENOMEM || rc == -EAGAIN || rc == -EPERM || rc == -EFAULT;
}

/* Allocate, zero and register one more buffer. 0 or a negative code with `why` filled. */
static int pool_add(struct pool *p, char *why, size_t whylen)
{
	struct pool_buf *b;
	int rc;

	if (p->n == p->slots) {
		unsigned slots = p->slots ? p->slots * 2 : 16;
		struct pool_buf **v;

		if (slots > p->max)
			slots = p->max;
		v = realloc(p->bufs, slots * sizeof(*v));
		if (!v) {
			snprintf(why, whylen, "out of memory for the pool's index of %u buffers",
				 slots);
			return -ENOMEM;
		}
		p->bufs = v;
		p->slots = slots;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	b->idx = p->n;
	b->mem = tw__fab_alloc(p->size); /* mmap: zero-filled */
	if (!b->mem) {
		free(b);
		snprintf(why, whylen, "cannot allocate buffer %u of %zu bytes (out of memory)",
			 p->n + 1, p->size);
		return -ENOMEM;
	}
	/* Not touched: a page is backed when data first lands in it (on verbs, whose
	 * FI_MR_ALLOCATED wants backed pages, tw__mr_reg backs them). */
	rc = tw__mr_reg(p->fab, b->mem, p->size, POOL_ACCESS, &b->mr);
	if (rc < 0) {
		snprintf(why, whylen, "registering buffer %u (%zu bytes) failed: %s (%s)%s",
			 p->n + 1, p->size, tw_strerror(rc), tw__fab_errmsg(p->fab),
			 reg_hint(rc) ? "; on verbs raise the locked-memory limit (ulimit -l "
			 "unlimited, or LimitMEMLOCK=infinity in the systemd unit)" : "");
		tw__fab_free(b->mem, p->size);
		free(b);
		return rc;
	}
	b->state = POOL_FREE;
	b->zeroed = true;
	p->bufs[p->n++] = b;
	p->count[POOL_FREE]++;
	return 0;
}

int tw__pool_init(struct pool *p, struct tw_fab *fab, unsigned initial, unsigned max, size_t size)
{
	char why[320];

	memset(p, 0, sizeof(*p));
	p->fab = fab;
	/* A primary whose writes arrive as messages (the RPC baseline) has our CPU place them:
	 * then check each sealed write before it is acknowledged, as an RPC backup would. */
	tw__fab_set_write_check(fab, tw__log_check_write);
	p->size = size;
	p->max = max < initial ? initial : max;
	p->move_on_fence = tw__fab_keyless_writes(fab);
	for (unsigned i = 0; i < initial; i++) {
		int rc = pool_add(p, why, sizeof(why));

		if (rc < 0) {
			tw_log_error("backup: %s (%u initial buffers requested): lower --buffers or "
				     "--buffer-size", why, initial);
			tw__pool_fini(p);
			return rc;
		}
	}
	return 0;
}

void tw__pool_fini(struct pool *p)
{
	if (!p->bufs)
		return;
	for (unsigned i = 0; i < p->n; i++) {
		struct pool_buf *b = p->bufs[i];

		if (b->mr)
			tw__mr_close(b->mr);
		b->mr = NULL;
	}
	for (unsigned i = 0; i < p->n; i++) {
		if (p->bufs[i]->mem)
			tw__fab_free(p->bufs[i]->mem, p->size);
		free(p->bufs[i]);
	}
	free(p->bufs);
	for (unsigned i = 0; i < p->nguards; i++) {
		tw__fab_guard_free(p->guards[i].addr, p->size);
		if (p->guards[i].pidfd >= 0)
			close(p->guards[i].pidfd);
	}
	free(p->guards);
	memset(p, 0, sizeof(*p));
}

/* A free buffer, or NULL. The caller sets its state with tw__pool_set_state. */
static struct pool_buf *pool_take(struct pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->bufs[i]->state == POOL_FREE)
			return p->bufs[i];
	return NULL;
}

int tw__pool_get(struct pool *p, struct pool_buf **out, char *why, size_t whylen)
{
	int rc;

	tw__pool_sweep_guards(p, false);
	*out = pool_take(p);
	if (*out)
		return 0;
	if (p->n >= p->max) {
		snprintf(why, whylen, "the pool is at its cap of %u buffers (--max-buffers)",
			 p->max);
		return -ENOSPC;
	}
	rc = pool_add(p, why, whylen);
	if (rc < 0)
		return rc;
	p->grown++;
	tw_log_info("backup: pool grew to %u buffers of %zu bytes (cap %u)", p->n, p->size,
		    p->max);
	*out = p->bufs[p->n - 1];
	return 0;
}

void tw__pool_set_state(struct pool *p, struct pool_buf *b, enum pool_state st)
{
	p->count[b->state]--;
	b->state = st;
	p->count[st]++;
}

int tw__pool_ensure_mr(struct pool *p, struct pool_buf *b)
{
	if (b->mr)
		return 0;
	return tw__mr_reg(p->fab, b->mem, p->size, POOL_ACCESS, &b->mr);
}

void tw__pool_revoke_mr(struct pool *p, struct pool_buf *b)
{
	(void)p;
	if (b->mr) {
		tw__mr_close(b->mr);
		b->mr = NULL;
	}
}

/* The writer's process, to know when its guard may go: a pidfd (readable once it exited; no
 * reuse problem after the open), or -1 (unknown: kept). -2: the process is gone already. */
static int writer_pidfd(int pid)
{
#ifdef SYS_pidfd_open
	int fd;

	if (pid <= 0)
		return -1;
	fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (fd < 0)
		return errno == ESRCH ? -2 : -1;
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
#else
	(void)pid;
	return -1;
#endif
}

int tw__pool_move(struct pool *p, struct pool_buf *b, int writer_pid)
{
	void *mem = b->mem, *old = b->mem;
	const char *why = NULL;
	int rc, pidfd;

	if (b->mr) /* the caller revokes first; a registration must never outlive its pages */
		tw__pool_revoke_mr(p, b);
	if (p->nguards == p->guards_cap) {
		unsigned cap = p->guards_cap ? p->guards_cap * 2 : 8;
		struct pool_guard *v = realloc(p->guards, cap * sizeof(*v));

		if (!v) {
			tw_log_error("backup: buffer %u: out of memory to record a fence's guard; the "
				     "buffer stays at the address its fenced writer knows", b->idx);
			return -ENOMEM;
		}
		p->guards = v;
		p->guards_cap = cap;
	}
	rc = tw__fab_move_away(&mem, p->size, &why);
	b->mem = mem;
	if (rc < 0) {
		tw_log_error("backup: buffer %u: cannot move it away from its fenced writer (%s: %s); "
			     "that writer's late writes can still land in it (docs/fabric.md, "
			     "\"Passive shm backups\")", b->idx, why, tw_strerror(rc));
		return rc;
	}
	b->moved = true;
	p->moved++;
	if (rc == 1) {
		tw_log_warn("backup: buffer %u moved from %p to %p, but its old address is not "
			    "guarded (%s)", b->idx, old, mem, why);
		return 0;
	}
	pidfd = writer_pidfd(writer_pid);
	if (pidfd == -2) { /* its writer is gone: nobody aims at the old address */
		tw__fab_guard_free(old, p->size);
		p->guards_freed++;
	} else {
		p->guards[p->nguards].addr = old;
		p->guards[p->nguards].pidfd = pidfd;
		p->nguards++;
	}
	tw_log_info("backup: buffer %u moved from %p to %p (writer pid %d%s); %u guards", b->idx,
		    old, mem, writer_pid, pidfd == -2 ? ", gone" : pidfd < 0 ? ", guard kept" : "",
		    p->nguards);
	return 0;
}

void tw__pool_sweep_guards(struct pool *p, bool now)
{
	struct pollfd pfd[64];
	unsigned n = 0, at = 0;
	uint64_t t;

	if (p->nguards == 0)
		return;
	t = tw_now_ns();
	if (!now && t < p->guard_check_ns)
		return;
	p->guard_check_ns = t + 1000000000u;
	/* One poll(2) per 64 guards; a pidfd is readable once its process has exited (a guard
	 * without one, -1, is ignored by poll and kept). */
	while (at < p->nguards) {
		unsigned k = p->nguards - at < 64 ? p->nguards - at : 64, kept = 0;

		for (unsigned i = 0; i < k; i++) {
			pfd[i].fd = p->guards[at + i].pidfd;
			pfd[i].events = POLLIN;
			pfd[i].revents = 0;
		}
		if (poll(pfd, k, 0) <= 0) {
			at += k;
			continue;
		}
		for (unsigned i = 0; i < k; i++) {
			struct pool_guard g = p->guards[at + i];

			if (!(pfd[i].revents & (POLLIN | POLLHUP))) {
				p->guards[at + kept++] = g;
				continue;
			}
			close(g.pidfd);
			tw__fab_guard_free(g.addr, p->size);
			p->guards_freed++;
			n++;
		}
		/* Close the gap left by the released ones: the guards after this batch move up. */
		memmove(&p->guards[at + kept], &p->guards[at + k],
			(p->nguards - at - k) * sizeof(p->guards[0]));
		p->nguards -= k - kept;
		at += kept;
	}
	if (n)
		tw_log_debug("backup: %u guards released (their writers exited); %u left", n,
			     p->nguards);
}

unsigned tw__pool_unflushed(const struct pool *p)
{
	return p->count[POOL_OPEN] + p->count[POOL_CLOSED];
}
