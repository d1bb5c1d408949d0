/*
 * fabric/mem.c — the in-memory backend ("mem"): channels between fabs of one process, for unit
 * tests of the layers above. Deterministic: a write lands (memcpy into the target MR, found by
 * key) during tw__chan_write itself, like verbs or shm's fast path, so the target needs no
 * progress; the initiator's completion is queued and delivered by its own tw__fab_progress.
 *
 * Threading: two fabs may be driven by two threads. Everything shared between fabs (listener
 * registry, MR registry, event queues, a channel's peer link) is protected by one global mutex
 * (adaptive: held for a few instructions or one write's memcpy, so a thread that finds it taken
 * spins briefly before it sleeps); each fab has a condition variable for blocking waits and a
 * count of its queued events that its poll reads without the mutex, so an idle fab's poll
 * (a backup's, between the writes it does not see) takes no lock. A fab's own generic state (channel
 * list, in-flight ops) is touched only by its own thread, so a connect does not link the new
 * passive channel into the listener's list: the ACCEPT event carries it, and the listener's
 * thread links it.
 *
 * Faults (tw__mem_inject) apply to the next write on a channel; see fabric.h.
 *
 * No allocation per operation once warm: events (a completion, a control message of up to
 * MEM_EV_SMALL bytes, an accept) come from a cache of the fab that posts or sends them and go
 * back to the cache of the fab whose poll handles them, both touched only by that fab's own
 * thread (so a primary's SetAcked goes out in the event its last answer came in); "mem-null"'s
 * copy orders go back to their target fab's list of free orders, under mem_lock.
 * tw__mem_allocs() counts the allocations, for the test that holds this.
 *
 * A descriptor for the caller's event loop (tw__fab_wait_fd; tw_primary_wait_fd): an eventfd,
 * made on the first request. tw__fab_wait_prepare arms it under mem_lock when nothing is
 * queued; the next event queued for the fab (or a wakeup, or the copy orders that would wake
 * mem_wait) writes it once and disarms it. So a loop that does not sleep costs no syscall
 * per event, and one that sleeps costs one write per sleep, as a NIC's interrupt would.
 *
 * "mem-null" (benchmarks only: tools/twbench_engine.c, docs/twbench.md): the same fabric, but
 * the initiator does not copy a write's bytes. The write completes at once (its completion
 * queued as above) and leaves a copy order (source, target, length) on the target fab, which
 * the target's own thread carries out, as a NIC's DMA would, before it handles any event (a
 * control message, a completion), when it polls with orders pending, and before one of its
 * registrations closes; a read of the target carries them out first, and so does the close
 * of the source's registration (from the closing thread). So every control RPC (segment open,
 * close and its scan, SetAcked) still sees the bytes, and what the initiator's CPU pays is the
 * fabric's bookkeeping, not the copy. Faults and lost peers behave as on "mem". The source
 * must stay as it is until the copy is done: true of the primary's segments, which it frees
 * only after the segment's close, whose RPC the target handles after the orders before it.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fab_int.h"

enum mev_kind {
	MEV_ACCEPT, /* ch: a new passive channel, not yet linked */
	MEV_RECV,   /* ch: a control message (data[len]) */
	MEV_DONE,   /* ch, op, status: a write/read completed */
	MEV_LOST,   /* ch, status: the peer is gone */
};

struct mem_ev {
	struct mem_ev *next;
	enum mev_kind kind;
	struct mem_chan *ch;
	struct tw_op *op;
	int status;
	bool is_read;
	size_t len; /* RECV: message length; DONE: bytes */
	size_t cap; /* data[]'s size: MEM_EV_SMALL (cached when freed) or a larger message's */
	unsigned char data[];
};

/* A write's bytes still to be placed ("mem-null"): in the target fab's list, under mem_lock. */
struct mem_copy {
	struct mem_copy *next;
	unsigned char *dst;
	const unsigned char *src;
	size_t len;
};

struct mem_fab {
	struct tw_fab base;
	bool null_writes;           /* "mem-null": writes leave copy orders (above) */
	struct mem_copy *cp_head, *cp_tail; /* copy orders for our MRs, oldest first; mem_lock */
	size_t ncp;                 /* their count: atomic stores under mem_lock, read without */
	size_t cp_bytes;            /* their bytes (under mem_lock): from MEM_NULL_WAKE on, the
				     * target's thread is woken to place them */
	bool copying;               /* a thread places a detached list of them (copies_drain) */
	struct mem_fab *next_fab;   /* all fabs with null_writes (all_null), under mem_lock */
	struct mem_copy *cp_free;   /* spent copy orders for reuse, under mem_lock */
	struct mem_ev *ev_free;     /* spent events of data size MEM_EV_SMALL: the fab's own
				     * thread only (its posts, sends and polls) */
	unsigned n_ev_free;         /* their count, at most MEM_EV_CACHE */
	pthread_cond_t cond;
	struct mem_ev *head, *tail; /* under mem_lock */
	size_t nq;                  /* events queued: written under mem_lock (atomic stores),
				     * read by mem_poll without it (set_nq) */
	bool woken;                 /* under mem_lock */
	int evfd;                   /* the caller's loop's descriptor (wait_fd); -1: none yet */
	bool armed;                 /* under mem_lock: a loop sleeps on evfd (mem_wait_fd) */
	uint32_t listen_id;         /* 0: not listening */
	struct mem_fab *next_listener;
};

struct mem_chan {
	struct tw_chan base;
	struct mem_chan *peer; /* under mem_lock; NULL once either side is gone */
	struct mem_fab *peer_fab;
	struct tw_mem_fault fault;
	bool stopped; /* TW_MEM_FAULT_STOP: under mem_lock (the peer's sends read it) */
	struct mem_ev *lost; /* our LOST event, allocated with the channel (a peer's departure
			      * needs no memory, as on a real fabric); NULL once queued */
};

struct mem_mr {
	struct tw_mr base;
	struct mem_mr *gnext; /* global registry, under mem_lock */
	struct mem_fab *owner;
};

static pthread_mutex_t mem_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static struct mem_fab *listeners;
static uint32_t next_listen_id = 1;
static struct mem_mr *all_mrs;
static struct mem_fab *all_null; /* the "mem-null" fabs, for a source's registration closing */
static unsigned copiers;         /* threads in copies_drain's copy, outside mem_lock */
static pthread_cond_t cp_done = PTHREAD_COND_INITIALIZER; /* copiers or a `copying` went down */

#define MEM_NULL_WAKE (1u << 20)
#define MEM_EV_SMALL 256u /* message bytes an event holds without an allocation of its own */
#define MEM_EV_CACHE 256u /* spent events a fab keeps */

static uint64_t mem_allocs; /* events and copy orders allocated (tw__mem_allocs): atomic */

static const struct fab_ops mem_ops;

/* The count of queued events (mem_lock held). */
static void set_nq(struct mem_fab *mf, size_t n)
{
	__atomic_store_n(&mf->nq, n, __ATOMIC_RELEASE);
}

/* "mem-null": carry out, under mem_lock, the copy orders of target `mf`, all of them, or only
 * those whose source lies in [lo, hi) when `lo` is not NULL (a source's registration closing).
 * Another thread copying `mf`'s earlier orders (copies_drain) finishes first: orders land in
 * their order. */
static void copies_apply(struct mem_fab *mf, const unsigned char *lo, const unsigned char *hi)
{
	struct mem_copy **pp = &mf->cp_head;

	while (mf->copying)
		pthread_cond_wait(&cp_done, &mem_lock);
	mf->cp_tail = NULL;
	while (*pp) {
		struct mem_copy *c = *pp;

		if (lo && (c->src < lo || c->src >= hi)) {
			mf->cp_tail = c;
			pp = &c->next;
			continue;
		}
		memcpy(c->dst, c->src, c->len);
		*pp = c->next;
		mf->cp_bytes -= c->len;
		c->next = mf->cp_free;
		mf->cp_free = c;
		__atomic_store_n(&mf->ncp, mf->ncp - 1, __ATOMIC_RELEASE);
	}
}

/* "mem-null": every copy order of `mf` queued so far placed (mem_lock held; dropped while the
 * bulk of them is copied, so that the initiators' writes do not wait for the copy). */
static void copies_drain(struct mem_fab *mf)
{
	struct mem_copy *list;

	while (mf->copying)
		pthread_cond_wait(&cp_done, &mem_lock);
	list = mf->cp_head;
	if (list) {
		mf->cp_head = mf->cp_tail = NULL;
		mf->cp_bytes = 0;
		__atomic_store_n(&mf->ncp, 0, __ATOMIC_RELEASE);
		mf->copying = true;
		copiers++;
		struct mem_copy *first = list, *last = NULL;

		pthread_mutex_unlock(&mem_lock);
		for (; list; list = list->next) {
			memcpy(list->dst, list->src, list->len);
			last = list;
		}
		pthread_mutex_lock(&mem_lock);
		last->next = mf->cp_free; /* the spent orders, for the next writes */
		mf->cp_free = first;
		mf->copying = false;
		copiers--;
		pthread_cond_broadcast(&cp_done);
	}
	copies_apply(mf, NULL, NULL); /* those queued meanwhile: a few, under the lock */
}

/* A loop sleeping on `mf`'s descriptor (armed by mem_wait_fd) has work now: write it once
 * (mem_lock held). */
static void ring_fd(struct mem_fab *mf)
{
	uint64_t one = 1;
	ssize_t n;

	if (!mf->armed)
		return;
	mf->armed = false;
	n = write(mf->evfd, &one, sizeof(one)); /* fails only with the counter full: readable */
	(void)n;
}

/* Queue an event on `mf` (mem_lock held) and wake its thread. */
static void push_ev(struct mem_fab *mf, struct mem_ev *ev)
{
	TW_SLIST_APPEND(mf->head, mf->tail, ev);
	set_nq(mf, mf->nq + 1);
	pthread_cond_signal(&mf->cond);
	ring_fd(mf);
}

/* An event with room for `data_len` bytes: from `own`'s cache when it fits (`own`: the fab
 * whose thread calls, or NULL), else allocated. */
static struct mem_ev *new_ev(struct mem_fab *own, enum mev_kind kind, struct mem_chan *ch,
			     size_t data_len)
{
	struct mem_ev *ev;
	size_t cap = TW_MAX(data_len, (size_t)MEM_EV_SMALL);

	if (own && own->ev_free && data_len <= MEM_EV_SMALL) {
		ev = own->ev_free;
		own->ev_free = ev->next;
		own->n_ev_free--;
		memset(ev, 0, offsetof(struct mem_ev, cap));
	} else {
		ev = malloc(sizeof(*ev) + cap);
		if (!ev)
			return NULL;
		memset(ev, 0, sizeof(*ev));
		ev->cap = cap;
		__atomic_fetch_add(&mem_allocs, 1, __ATOMIC_RELAXED);
	}
	ev->kind = kind;
	ev->ch = ch;
	return ev;
}

/* An event handled by `own`'s thread: back to its cache, or freed. */
static void put_ev(struct mem_fab *own, struct mem_ev *ev)
{
	if (ev->cap == MEM_EV_SMALL && own->n_ev_free < MEM_EV_CACHE) {
		ev->next = own->ev_free;
		own->ev_free = ev;
		own->n_ev_free++;
	} else {
		free(ev);
	}
}

uint64_t tw__mem_allocs(void)
{
	return __atomic_load_n(&mem_allocs, __ATOMIC_RELAXED);
}

/* Remove (and free) every queued event of `mf` about channel `ch` (mem_lock held). */
static void purge_chan_events(struct mem_fab *mf, struct mem_chan *ch)
{
	struct mem_ev **pp = &mf->head;

	mf->tail = NULL;
	while (*pp) {
		struct mem_ev *ev = *pp;

		if (ev->ch == ch && ev->kind != MEV_ACCEPT) {
			*pp = ev->next;
			free(ev);
			set_nq(mf, mf->nq - 1);
			continue;
		}
		mf->tail = ev;
		pp = &ev->next;
	}
}

/* Cut the link between `mc` and its peer and tell the peer (mem_lock held). */
static void sever(struct mem_chan *mc, int err)
{
	struct mem_chan *peer = mc->peer;

	if (!peer)
		return;
	mc->peer = NULL;
	peer->peer = NULL;
	if (peer->lost) {
		peer->lost->status = err;
		push_ev(mc->peer_fab, peer->lost);
		peer->lost = NULL;
	}
}

/* Both ends lose the channel (mem_lock held); our own op completes through the LOST event. */
static void lose_both(struct mem_chan *mc)
{
	struct mem_ev *ev = mc->lost;

	sever(mc, -TW_EPEERLOST);
	if (ev) {
		mc->lost = NULL;
		ev->status = -TW_EPEERLOST;
		push_ev((struct mem_fab *)mc->base.fab, ev);
	}
}

static int mem_listen(struct tw_fab *fab, char *addr_out, size_t addr_len)
{
	struct mem_fab *mf = (struct mem_fab *)fab;

	pthread_mutex_lock(&mem_lock);
	if (!mf->listen_id) {
		mf->listen_id = next_listen_id++;
		mf->next_listener = listeners;
		listeners = mf;
	}
	pthread_mutex_unlock(&mem_lock);
	if ((size_t)snprintf(addr_out, addr_len, "mem://%u", mf->listen_id) >= addr_len)
		return -ENAMETOOLONG;
	return 0;
}

static int mem_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out)
{
	struct mem_fab *mf = (struct mem_fab *)fab;
	struct mem_chan *lc, *rc;
	struct mem_fab *target = NULL;
	unsigned long id;
	char *end;
	char name[TW_ADDR_MAX];
	struct mem_ev *ev;

	if (strncmp(addr, "mem://", 6) != 0) {
		tw__fab_set_errmsg(fab, "bad mem address '%s' (want mem://N)", addr);
		return -EINVAL;
	}
	id = strtoul(addr + 6, &end, 10);
	if (*end || !id) {
		tw__fab_set_errmsg(fab, "bad mem address '%s' (want mem://N)", addr);
		return -EINVAL;
	}
	lc = calloc(1, sizeof(*lc));
	rc = calloc(1, sizeof(*rc));
	ev = new_ev(NULL, MEV_ACCEPT, rc, 0);
	if (lc)
		lc->lost = new_ev(NULL, MEV_LOST, lc, 0);
	if (rc)
		rc->lost = new_ev(NULL, MEV_LOST, rc, 0);
	if (!lc || !rc || !ev || !lc->lost || !rc->lost) {
		if (lc)
			free(lc->lost);
		if (rc)
			free(rc->lost);
		free(lc);
		free(rc);
		free(ev);
		return -ENOMEM;
	}
	pthread_mutex_lock(&mem_lock);
	for (struct mem_fab *l = listeners; l; l = l->next_listener)
		if (l->listen_id == id)
			target = l;
	if (!target) {
		pthread_mutex_unlock(&mem_lock);
		free(lc->lost);
		free(rc->lost);
		free(lc);
		free(rc);
		free(ev);
		tw__fab_set_errmsg(fab, "nobody listens on %s", addr);
		return -ECONNREFUSED;
	}
	lc->peer = rc;
	lc->peer_fab = target;
	rc->peer = lc;
	rc->peer_fab = mf;
	/* The passive side's name for us: our listen address if we listen, else a pseudo name. */
	if (mf->listen_id)
		snprintf(name, sizeof(name), "mem://%u", mf->listen_id);
	else
		snprintf(name, sizeof(name), "mem-client@%p", (void *)mf);
	snprintf(rc->base.peer, sizeof(rc->base.peer), "%s", name);
	push_ev(target, ev);
	pthread_mutex_unlock(&mem_lock);

	tw__chan_init(fab, &lc->base, addr);
	lc->base.state = CHAN_UP;
	*out = &lc->base;
	return 0;
}

static void mem_chan_down(struct tw_chan *ch, bool closing)
{
	struct mem_chan *mc = (struct mem_chan *)ch;
	struct mem_fab *mf = (struct mem_fab *)ch->fab;

	pthread_mutex_lock(&mem_lock);
	purge_chan_events(mf, mc);
	sever(mc, -TW_EPEERLOST);
	pthread_mutex_unlock(&mem_lock);
}

static void mem_chan_free(struct tw_chan *ch)
{
	free(((struct mem_chan *)ch)->lost);
	free(ch);
}

static void mem_op_abandon(struct tw_op *op)
{
	/* Completion events of a channel are purged in chan_down, before ops are failed. */
}

static int mem_mr_reg(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out)
{
	struct mem_mr *mr = calloc(1, sizeof(*mr));

	if (!mr)
		return -ENOMEM;
	mr->base.buf = buf;
	mr->base.len = len;
	mr->base.access = access;
	mr->owner = (struct mem_fab *)fab;
	mr->base.rk.addr = 0; /* offset addressing, like tcp/sockets */
	mr->base.rk.len = len;
	pthread_mutex_lock(&mem_lock);
	mr->base.rk.key = tw__fab_gen_key(fab, 8);
	mr->gnext = all_mrs;
	all_mrs = mr;
	tw__mr_link(fab, &mr->base);
	pthread_mutex_unlock(&mem_lock);
	*out = &mr->base;
	return 0;
}

static void mem_mr_close(struct tw_mr *base)
{
	struct mem_mr *mr = (struct mem_mr *)base;
	const unsigned char *lo = base->buf, *hi = lo + base->len;

	pthread_mutex_lock(&mem_lock);
	/* "mem-null": orders into this region land before it goes, and orders out of it before
	 * its memory may be freed. */
	if (mr->owner->null_writes)
		copies_drain(mr->owner);
	for (struct mem_fab *f = all_null; f; f = f->next_fab)
		copies_apply(f, lo, hi);
	while (copiers) /* a copy out of this region may be under way */
		pthread_cond_wait(&cp_done, &mem_lock);
	for (struct mem_mr **pp = &all_mrs; *pp; pp = &(*pp)->gnext) {
		if (*pp == mr) {
			*pp = mr->gnext;
			break;
		}
	}
	tw__mr_unlink(base);
	pthread_mutex_unlock(&mem_lock);
	free(mr);
}

/* The target region of a remote access (mem_lock held): 0, -EACCES or -ERANGE. */
static int find_target(struct mem_fab *owner, uint64_t key, uint64_t raddr, size_t len, unsigned need,
		       unsigned char **p_out)
{
	for (struct mem_mr *mr = all_mrs; mr; mr = mr->gnext) {
		if (mr->owner != owner || mr->base.rk.key != key)
			continue;
		if (!(mr->base.access & need))
			return -EACCES;
		if (raddr > mr->base.len || len > mr->base.len - raddr)
			return -ERANGE;
		*p_out = (unsigned char *)mr->base.buf + raddr;
		return 0;
	}
	return -EACCES;
}

/* Queue a completion for our own op (mem_lock held) in `ev`, allocated when the op was posted
 * (so a post without memory fails at once instead of losing its completion). */
static void push_done(struct mem_chan *mc, struct mem_ev *ev, struct tw_op *op, int status,
		      size_t len, bool is_read)
{
	ev->op = op;
	ev->status = status;
	ev->len = len;
	ev->is_read = is_read;
	push_ev((struct mem_fab *)mc->base.fab, ev);
}

static int mem_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
		     struct tw_mr *src_mr, uint64_t raddr, uint64_t key)
{
	struct mem_chan *mc = (struct mem_chan *)ch;
	struct tw_mem_fault f = mc->fault;
	struct mem_ev *ev = new_ev((struct mem_fab *)ch->fab, MEV_DONE, mc, 0);
	unsigned char *dst = NULL;
	int rc;

	if (!ev)
		return -ENOMEM;
	mc->fault.kind = TW_MEM_FAULT_NONE;
	tw__op_track(ch, op);
	pthread_mutex_lock(&mem_lock);
	if (!mc->peer) { /* the peer went away; its LOST event is on our queue */
		push_done(mc, ev, op, -TW_EPEERLOST, 0, false);
		goto out;
	}
	if (mc->stopped)
		f.kind = TW_MEM_FAULT_DROP;
	switch (f.kind) {
	case TW_MEM_FAULT_FAIL:
		push_done(mc, ev, op, -EIO, 0, false);
		goto out;
	case TW_MEM_FAULT_DROP:
		free(ev);
		goto out; /* no completion: the op deadline fails the channel */
	case TW_MEM_FAULT_VANISH:
		free(ev);
		lose_both(mc);
		goto out;
	default:
		break;
	}
	rc = find_target(mc->peer_fab, key, raddr, len, TW_MR_REMOTE_WRITE, &dst);
	if (rc < 0) {
		push_done(mc, ev, op, rc, 0, false);
		goto out;
	}
	if (f.kind == TW_MEM_FAULT_PREFIX) {
		memcpy(dst, src, TW_MIN(f.prefix, len));
	} else if (f.kind == TW_MEM_FAULT_CHUNKS) {
		for (unsigned i = 0; i < 64 && (size_t)i * 64 < len; i++)
			if (f.chunk_mask & (1ull << i))
				memcpy(dst + (size_t)i * 64, (const unsigned char *)src + (size_t)i * 64,
				       TW_MIN((size_t)64, len - (size_t)i * 64));
	} else if (mc->peer_fab->null_writes && len) {
		struct mem_copy *c = mc->peer_fab->cp_free;

		if (c) {
			mc->peer_fab->cp_free = c->next;
		} else if ((c = malloc(sizeof(*c)))) {
			__atomic_fetch_add(&mem_allocs, 1, __ATOMIC_RELAXED);
		} else {
			push_done(mc, ev, op, -ENOMEM, 0, false);
			goto out;
		}
		c->next = NULL;
		c->dst = dst;
		c->src = src;
		c->len = len;
		TW_SLIST_APPEND(mc->peer_fab->cp_head, mc->peer_fab->cp_tail, c);
		__atomic_store_n(&mc->peer_fab->ncp, mc->peer_fab->ncp + 1, __ATOMIC_RELEASE);
		mc->peer_fab->cp_bytes += len;
		if (mc->peer_fab->cp_bytes >= MEM_NULL_WAKE &&
		    mc->peer_fab->cp_bytes - len < MEM_NULL_WAKE) {
			pthread_cond_signal(&mc->peer_fab->cond); /* once per MEM_NULL_WAKE bytes */
			ring_fd(mc->peer_fab);
		}
		push_done(mc, ev, op, 0, len, false);
		goto out;
	} else {
		memcpy(dst, src, len);
		push_done(mc, ev, op, 0, len, false);
		goto out;
	}
	/* PREFIX / CHUNKS: a torn write, then the channel dies on both sides. */
	free(ev);
	lose_both(mc);
out:
	pthread_mutex_unlock(&mem_lock);
	return 0;
}

static int mem_read(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
		    uint64_t raddr, uint64_t key)
{
	struct mem_chan *mc = (struct mem_chan *)ch;
	struct mem_ev *ev = new_ev((struct mem_fab *)ch->fab, MEV_DONE, mc, 0);
	unsigned char *src = NULL;
	int rc;

	if (!ev)
		return -ENOMEM;
	tw__op_track(ch, op);
	pthread_mutex_lock(&mem_lock);
	if (mc->peer && mc->peer_fab->null_writes) /* "mem-null": the writes before it land first */
		copies_drain(mc->peer_fab);
	if (!mc->peer) {
		push_done(mc, ev, op, -TW_EPEERLOST, 0, true);
	} else if (mc->stopped) {
		free(ev); /* no completion: the op deadline fails the channel */
	} else if ((rc = find_target(mc->peer_fab, key, raddr, len, TW_MR_REMOTE_READ, &src)) < 0) {
		push_done(mc, ev, op, rc, 0, true);
	} else {
		memcpy(dst, src, len);
		push_done(mc, ev, op, 0, len, true);
	}
	pthread_mutex_unlock(&mem_lock);
	return 0;
}

static int mem_send(struct tw_chan *ch, const void *msg, size_t len)
{
	struct mem_chan *mc = (struct mem_chan *)ch;
	struct mem_ev *ev = new_ev((struct mem_fab *)ch->fab, MEV_RECV, NULL, len);

	if (!ev)
		return -ENOMEM;
	if (len)
		memcpy(ev->data, msg, len);
	ev->len = len;
	pthread_mutex_lock(&mem_lock);
	if (!mc->peer) {
		pthread_mutex_unlock(&mem_lock);
		free(ev);
		return -TW_EPEERLOST;
	}
	if (mc->stopped || mc->peer->stopped) {
		free(ev); /* sent (a socket buffer takes it), never received */
	} else {
		ev->ch = mc->peer;
		push_ev(mc->peer_fab, ev);
	}
	pthread_mutex_unlock(&mem_lock);
	ch->fab->stats.sends++;
	ch->fab->stats.send_bytes += len;
	return 0;
}

static void handle_ev(struct mem_fab *mf, struct mem_ev *ev)
{
	struct tw_fab *fab = &mf->base;
	struct tw_chan *ch = &ev->ch->base;

	switch (ev->kind) {
	case MEV_ACCEPT:
		tw__chan_init(fab, ch, ch->peer);
		ch->state = CHAN_ACCEPTING;
		tw__chan_announce(ch); /* without on_accept the channel still serves on_recv */
		break;
	case MEV_RECV:
		if (ch->closed || ch->lost)
			break;
		fab->stats.recvs++;
		fab->stats.recv_bytes += ev->len;
		if (fab->ev.on_recv)
			fab->ev.on_recv(fab->ev.arg, ch, ev->data, ev->len);
		break;
	case MEV_DONE:
		if (ev->status == 0) {
			if (ev->is_read) {
				fab->stats.reads++;
				fab->stats.read_bytes += ev->len;
			} else {
				__atomic_store_n(&fab->stats.writes, fab->stats.writes + 1,
						 __ATOMIC_RELAXED); /* tw__fab_write_counts */
				fab->stats.write_bytes += ev->len;
			}
		}
		tw__op_finish(ev->op, ev->status);
		break;
	case MEV_LOST:
		tw__chan_set_lost(ch, ev->status ? ev->status : -TW_EPEERLOST);
		break;
	}
}

static int mem_poll(struct tw_fab *fab)
{
	struct mem_fab *mf = (struct mem_fab *)fab;
	int n = 0;

	fab->stats.cq_polls++;
	if (mf->null_writes && __atomic_load_n(&mf->ncp, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&mem_lock);
		copies_drain(mf);
		pthread_mutex_unlock(&mem_lock);
	}
	/* One event at a time: a callback may close a channel, which purges its queued events. */
	while (n < 256) {
		struct mem_ev *ev;

		/* Nothing queued: no lock (an event queued meanwhile is seen by the next poll or
		 * by mem_wait, which looks under the lock). */
		if (!__atomic_load_n(&mf->nq, __ATOMIC_ACQUIRE))
			break;
		pthread_mutex_lock(&mem_lock);
		if (mf->null_writes && mf->ncp) /* the writes posted before this event land first */
			copies_drain(mf);
		ev = mf->head;
		if (ev) {
			mf->head = ev->next;
			if (!mf->head)
				mf->tail = NULL;
			set_nq(mf, mf->nq - 1);
		}
		pthread_mutex_unlock(&mem_lock);
		if (!ev)
			break;
		handle_ev(mf, ev);
		put_ev(mf, ev);
		n++;
	}
	fab->stats.cq_entries += (uint64_t)n;
	return n;
}

static int mem_wait(struct tw_fab *fab, int timeout_ms)
{
	struct mem_fab *mf = (struct mem_fab *)fab;
	struct timespec ts;
	int woken = 0;

	if (timeout_ms == 0)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (timeout_ms > 0) {
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&mem_lock);
	while (!mf->head && !mf->woken && mf->cp_bytes < MEM_NULL_WAKE) {
		int rc = timeout_ms < 0 ? pthread_cond_wait(&mf->cond, &mem_lock)
					: pthread_cond_timedwait(&mf->cond, &mem_lock, &ts);
		if (rc == ETIMEDOUT)
			break;
	}
	if (mf->woken) {
		mf->woken = false;
		woken = 1;
	}
	pthread_mutex_unlock(&mem_lock);
	return woken;
}

static void mem_wakeup(struct tw_fab *fab)
{
	struct mem_fab *mf = (struct mem_fab *)fab;

	pthread_mutex_lock(&mem_lock);
	mf->woken = true;
	pthread_cond_signal(&mf->cond);
	ring_fd(mf);
	pthread_mutex_unlock(&mem_lock);
}

/* The caller's loop (fab_int.h): the eventfd, made on the first request; with `prepare`,
 * -EAGAIN while anything is queued (events, a wakeup, copy orders at mem_wait's threshold),
 * else armed and the descriptor. Read empty here: a write that woke an earlier sleep is
 * consumed by the next prepare, which looks at the queue itself. */
static int mem_wait_fd(struct tw_fab *fab, bool prepare)
{
	struct mem_fab *mf = (struct mem_fab *)fab;
	uint64_t v;
	int rc;

	if (mf->evfd < 0) {
		mf->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (mf->evfd < 0)
			return -errno;
	}
	if (!prepare)
		return mf->evfd;
	if (read(mf->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	pthread_mutex_lock(&mem_lock);
	if (mf->head || mf->woken || mf->cp_bytes >= MEM_NULL_WAKE) {
		mf->woken = false; /* its reason is for the next poll, as ofi's */
		rc = -EAGAIN;
	} else {
		mf->armed = true;
		rc = mf->evfd;
	}
	pthread_mutex_unlock(&mem_lock);
	return rc;
}

static int mem_inject(struct tw_chan *ch, const struct tw_mem_fault *fault)
{
	struct mem_chan *mc = (struct mem_chan *)ch;

	if (!fault || fault->kind > TW_MEM_FAULT_STOP)
		return -EINVAL;
	if (fault->kind == TW_MEM_FAULT_STOP) {
		pthread_mutex_lock(&mem_lock);
		mc->stopped = true;
		pthread_mutex_unlock(&mem_lock);
		return 0;
	}
	mc->fault = *fault;
	return 0;
}

static int mem_reset(struct tw_fab *fab)
{
	(void)fab; /* nothing wedges here: the registrations and the listener stay as they are */
	return 0;
}

static void mem_close(struct tw_fab *fab)
{
	struct mem_fab *mf = (struct mem_fab *)fab;
	struct mem_ev *ev;

	pthread_mutex_lock(&mem_lock);
	for (struct mem_fab **pp = &listeners; *pp; pp = &(*pp)->next_listener) {
		if (*pp == mf) {
			*pp = mf->next_listener;
			break;
		}
	}
	while ((ev = mf->head)) {
		mf->head = ev->next;
		if (ev->kind == MEV_ACCEPT) { /* never linked: tell its peer and free it */
			sever(ev->ch, -TW_EPEERLOST);
			free(ev->ch->lost);
			free(ev->ch);
		}
		free(ev);
	}
	mf->tail = NULL;
	set_nq(mf, 0);
	while (mf->copying) /* another thread placing our orders (a read of ours) ends first */
		pthread_cond_wait(&cp_done, &mem_lock);
	for (struct mem_fab **pp = &all_null; *pp; pp = &(*pp)->next_fab) {
		if (*pp == mf) {
			*pp = mf->next_fab;
			break;
		}
	}
	while (mf->cp_head) { /* its registrations are closed: nothing is left to place */
		struct mem_copy *c = mf->cp_head;

		mf->cp_head = c->next;
		free(c);
	}
	while (mf->cp_free) {
		struct mem_copy *c = mf->cp_free;

		mf->cp_free = c->next;
		free(c);
	}
	pthread_mutex_unlock(&mem_lock);
	while ((ev = mf->ev_free)) {
		mf->ev_free = ev->next;
		free(ev);
	}
	pthread_cond_destroy(&mf->cond);
	if (mf->evfd >= 0)
		close(mf->evfd);
	free(mf);
}

static const struct fab_ops mem_ops = {
	.name = "mem",
	TW__FAB_OPS_INIT(mem)
	.inject = mem_inject,
	.wait_fd = mem_wait_fd,
};

int tw__mem_fab_open(const struct tw_fab_config *cfg, const struct tw_fab_events *ev,
		 bool null_writes, struct tw_fab **out)
{
	struct mem_fab *mf = calloc(1, sizeof(*mf));
	pthread_condattr_t ca;

	if (!mf)
		return -ENOMEM;
	tw__fab_init_common(&mf->base, &mem_ops, cfg, ev);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&mf->cond, &ca);
	pthread_condattr_destroy(&ca);
	mf->evfd = -1;
	mf->base.rdm = false;
	if (null_writes) {
		mf->null_writes = true;
		pthread_mutex_lock(&mem_lock);
		mf->next_fab = all_null;
		all_null = mf;
		pthread_mutex_unlock(&mem_lock);
	}
	*out = &mf->base;
	return 0;
}
