/*
 * fabric/ofi_cq.c — operation contexts, completion dispatch, progress and waiting.
 *
 * CQs: MSG channels have one CQ each (sized tx_size + rx_size of that endpoint), so closing a
 * lost channel's endpoint and CQ guarantees no late completion. RDM fabs have one CQ for the
 * shared endpoint.
 *
 * Waiting: every CQ and the EQ are opened with FI_WAIT_FD; their fds (fi_control FI_GETWAIT)
 * sit in one epoll set with an eventfd for tw__fab_wakeup, and we block only after fi_trywait
 * said yes. When an object has no wait fd (see docs/fabric.md for what each provider gives), the
 * fab falls back to polling with an exponential backoff (1 µs → OFI_BACKOFF_MAX_US) in ppoll on the eventfd.
 * A listening shm fab idle for OFI_BELL_IDLE_ROUNDS of those sleeps on its doorbell instead,
 * which its peers ring after their posts (ofi_bell.c).
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "fabric/ofi_int.h"

#define CTX_CHUNK 64
/* Longest sleep between polls when a provider has no wait fd (shm). Its peers need our
 * polls to move their data and acknowledgements, so this bounds their latency; measured with
 * bench_fabric (docs/fabric.md). */
#ifndef OFI_BACKOFF_MAX_US
#define OFI_BACKOFF_MAX_US 100
#endif
/* shm listener with a doorbell (ofi_bell.c): backoff rounds at OFI_BACKOFF_MAX_US without any
 * activity before it sleeps on the doorbell instead (about 10 ms idle): a busy backup keeps
 * polling, so its peers do not pay a wake-up per post. */
#ifndef OFI_BELL_IDLE_ROUNDS
#define OFI_BELL_IDLE_ROUNDS 100
#endif
/* Backoff rounds shorter than this yield (sched_yield) instead of sleeping in ppoll. */
#ifndef OFI_YIELD_BELOW_US
#define OFI_YIELD_BELOW_US 16
#endif

struct ofi_ctx *tw__ofi_ctx_get(struct ofi_fab *of)
{
	struct ofi_ctx *c;

	if (!of->cfree) {
		void **nc = realloc(of->chunks, (of->nchunks + 1) * sizeof(*nc));
		struct ofi_ctx *arr;

		if (!nc)
			return NULL;
		of->chunks = nc;
		arr = calloc(CTX_CHUNK, sizeof(*arr));
		if (!arr)
			return NULL;
		of->chunks[of->nchunks++] = arr;
		for (int i = 0; i < CTX_CHUNK; i++) {
			arr[i].next = of->cfree;
			of->cfree = &arr[i];
		}
	}
	c = of->cfree;
	of->cfree = c->next;
	memset(c, 0, sizeof(*c));
	return c;
}

void tw__ofi_ctx_put(struct ofi_fab *of, struct ofi_ctx *ctx)
{
	ctx->next = of->cfree;
	ctx->prev = NULL;
	ctx->op = NULL;
	ctx->ch = NULL;
	of->cfree = ctx;
}

static void ctx_link(struct ofi_chan *ch, struct ofi_ctx *ctx)
{
	ctx->ch = ch;
	if (ch->peer) { /* shm: the AV entry stays while the provider holds this */
		ctx->peer = ch->peer;
		ch->peer->posted++;
	}
	TW_DLIST_APPEND(ch->posted, ch->posted_tail, ctx);
	ch->tx_inflight++;
	if (ch->base.fab->rdm)
		ofab(ch->base.fab)->tx_inflight++;
}

void tw__ofi_ctx_unlink(struct ofi_chan *ch, struct ofi_ctx *ctx)
{
	TW_DLIST_REMOVE(ch->posted, ch->posted_tail, ctx);
	ch->tx_inflight--;
	if (ch->base.fab->rdm)
		ofab(ch->base.fab)->tx_inflight--;
}

void tw__ofi_ctx_release(struct ofi_fab *of, struct ofi_ctx *ctx)
{
	if (ctx->bye && of->av && !of->closing && !of->shm)
		fi_av_remove(of->av, &ctx->bye_addr, 1, 0);
	tw__rdm_peer_done(ctx);
	if (ctx->kind == CTX_SEND)
		tw__msg_put_slot(of, ctx);
	else
		tw__ofi_ctx_put(of, ctx);
}

void tw__ofi_op_abandon(struct tw_op *op)
{
	struct ofi_ctx *ctx = op->fab_priv[0];

	if (ctx)
		ctx->op = NULL;
	op->fab_priv[0] = NULL;
}

int tw__cq_open(struct ofi_fab *of, size_t size, struct fid_cq **cq, int *fd_out, void *context)
{
	struct fi_cq_attr ca = {.size = size, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD};
	int rc;

	*fd_out = -1;
	rc = fi_cq_open(of->domain, &ca, cq, context);
	if (rc) {
		tw_log_debug("fabric: fi_cq_open(FI_WAIT_FD): %s; polling instead", fi_strerror(-rc));
		ca.wait_obj = FI_WAIT_NONE;
		rc = fi_cq_open(of->domain, &ca, cq, context);
	}
	if (rc) {
		tw__fab_set_errmsg(&of->base, "fi_cq_open(size %zu): %s", size, fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	if (ca.wait_obj == FI_WAIT_FD && fi_control(&(*cq)->fid, FI_GETWAIT, fd_out) == 0 &&
	    *fd_out >= 0) {
		struct epoll_event ee = {.events = EPOLLIN, .data.ptr = of};
		epoll_ctl(of->epfd, EPOLL_CTL_ADD, *fd_out, &ee);
	} else {
		if (ca.wait_obj == FI_WAIT_FD)
			tw_log_debug("fabric: CQ has no wait fd (FI_GETWAIT failed); polling instead");
		*fd_out = -1;
		of->nofd++;
	}
	return 0;
}

void tw__cq_close(struct ofi_fab *of, struct fid_cq *cq, int fd)
{
	if (fd >= 0)
		epoll_ctl(of->epfd, EPOLL_CTL_DEL, fd, NULL);
	else
		of->nofd--;
	fi_close(&cq->fid);
}

static void handle_recv(struct ofi_fab *of, struct ofi_ctx *ctx, size_t len)
{
	struct tw_fab *fab = &of->base;
	struct ofi_chan *ch = ctx->ch;

	if (fab->rdm) {
		if (!tw__rdm_on_recv(of, ctx, len) && !of->closing)
			tw__msg_post_recv(of, ctx);
		return;
	}
	if (!ch || ch->base.is_down)
		return;
	ch->rx.posted--;
	/* The peer sends only once connected: a message can overtake our FI_CONNECTED event.
	 * Passive side: announce now. Active side: the connection is up, but tw__fab_connect has
	 * not returned the channel yet: keep the message for the next progress. */
	if (ch->base.state == CHAN_ACCEPTING)
		tw__chan_announce(&ch->base);
	if (ch->base.state == CHAN_CONNECTING || (ch->base.state == CHAN_UP && !ch->base.visible) ||
	    ch->deferred) {
		ch->base.state = CHAN_UP;
		tw__chan_defer(ch, ctx, len);
		return;
	}
	if (ch->base.state == CHAN_UP && !ch->base.lost && !ch->base.closed) {
		fab->stats.recvs++;
		fab->stats.recv_bytes += len;
		if (fab->ev.on_recv)
			fab->ev.on_recv(fab->ev.arg, &ch->base, ctx->buf, len);
	}
	if (!ch->base.is_down) /* the callback may have closed it */
		tw__msg_post_recv(of, ctx);
}

static void handle_comp(struct ofi_fab *of, const struct fi_cq_data_entry *e)
{
	struct ofi_ctx *ctx = e->op_context;
	struct ofi_chan *ch;
	struct tw_op *op;
	struct tw_fab_stats *st = &of->base.stats;

	if (!ctx)
		return;
	if (ctx->kind == CTX_RECV) {
		handle_recv(of, ctx, e->len);
		return;
	}
	ch = ctx->ch;
	op = ctx->op;
	if (ch)
		tw__ofi_ctx_unlink(ch, ctx);
	if (ctx->kind == CTX_SEND) {
		if (!ctx->bye) {
			st->sends++;
			st->send_bytes += ctx->len;
		}
		tw__ofi_ctx_release(of, ctx);
		return;
	}
	if (ctx->kind == CTX_WRITE) {
		/* writes and fast_writes: read by other threads (tw__fab_write_counts); one
		 * writer, so a relaxed store of the sum, no locked instruction. */
		__atomic_store_n(&st->writes, st->writes + 1, __ATOMIC_RELAXED);
		st->write_bytes += ctx->len;
		__atomic_store_n(&st->fast_writes, st->fast_writes + ctx->fast, __ATOMIC_RELAXED);
	} else {
		st->reads++;
		st->read_bytes += ctx->len;
	}
	tw__ofi_ctx_release(of, ctx);
	if (op) {
		op->fab_priv[0] = NULL;
		tw__op_finish(op, 0);
	}
}

/* An error entry: complete its op with the error, then the channel is lost. */
static void handle_err(struct ofi_fab *of, struct fid_cq *cq, struct ofi_chan *msg_ch,
		       const struct fi_cq_err_entry *err)
{
	struct ofi_ctx *ctx = err->op_context;
	struct ofi_chan *ch = msg_ch;
	struct tw_op *op = NULL;
	int status = err->err ? -err->err : -EIO;
	char pbuf[128] = "";

	of->base.stats.errors++;
	if (ctx && ctx->kind == CTX_RECV) {
		if (of->base.rdm) { /* e.g. truncation: drop it, keep the buffer going */
			if (!of->closing && err->err != FI_ECANCELED)
				tw__msg_post_recv(of, ctx);
			return;
		}
		ch = ctx->ch;
		if (err->err == FI_ECANCELED) /* flushed: the endpoint is going away */
			status = -TW_EPEERLOST;
	} else if (ctx) {
		ch = ctx->ch;
		op = ctx->op;
		if (ch)
			tw__ofi_ctx_unlink(ch, ctx);
		tw__ofi_ctx_release(of, ctx);
	}
	fi_cq_strerror(cq, err->prov_errno, err->err_data, pbuf, sizeof(pbuf));
	if (ctx && ctx->kind == CTX_RECV && err->err == FI_ECANCELED)
		/* Posted receives flushed because the peer went away: the normal end of a
		 * connection, reported through on_lost, not a warning. */
		tw_log_debug("fabric %s: receives flushed on channel to %s", of->base.prov,
			     ch ? ch->base.peer : "?");
	else
		tw_log_ratelimited(TW_DIAG_WARN, "fabric %s: completion error to %s: %s (%s)",
				   of->base.prov, ch ? ch->base.peer : "?", fi_strerror(err->err), pbuf);
	if (op) {
		op->fab_priv[0] = NULL;
		if (ch)
			tw__op_finish(op, status);
	}
	if (ch && !ch->base.is_down) {
		tw__fab_set_errmsg(&of->base, "completion error on channel to %s: %s (%s)", ch->base.peer,
			   fi_strerror(err->err), pbuf);
		tw__chan_set_lost(&ch->base, status);
	}
}

#define PEND_MAX TW_ARRAY_SIZE(((struct ofi_fab *)0)->pend)

void tw__cq_purge_chan(struct ofi_fab *of, struct ofi_chan *ch)
{
	for (unsigned i = 0; i < of->pend_count; i++) {
		struct fi_cq_data_entry *e = &of->pend[(of->pend_head + i) % PEND_MAX];
		struct ofi_ctx *ctx = e->op_context;

		if (ctx && ctx->ch == ch)
			e->op_context = NULL;
	}
}

/* Handle queued completions, oldest first (callbacks may nest another poll). */
static int process_pending(struct ofi_fab *of)
{
	int n = 0;

	while (of->pend_count) {
		struct fi_cq_data_entry e = of->pend[of->pend_head];

		of->pend_head = (of->pend_head + 1) % PEND_MAX;
		of->pend_count--;
		handle_comp(of, &e);
		n++;
	}
	return n;
}

/* Move completions from one CQ into the FIFO until the CQ is empty or the FIFO full. */
static int drain_cq(struct ofi_fab *of, struct fid_cq *cq, struct ofi_chan *msg_ch)
{
	struct fi_cq_data_entry e[16];
	int total = 0;

	for (int round = 0; round < 16; round++) {
		size_t space = PEND_MAX - of->pend_count;
		ssize_t n;

		if (!space)
			break;
		bool lk = tw__shm_local_enter(of->local_peers); /* ofi_rdm.c: peers in this process */

		tw__wedge_enter(of); /* shm: progress may wait for our region lock (ofi_wedge.c) */
		n = fi_cq_read(cq, e, TW_MIN(space, TW_ARRAY_SIZE(e)));
		tw__wedge_leave(of);
		tw__shm_local_leave(lk);
		of->base.stats.cq_polls++;
		if (n == -FI_EAGAIN)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;

			/* Earlier successes first, then the error (which may close the channel). */
			total += process_pending(of);
			if (msg_ch && msg_ch->base.is_down)
				break;
			memset(&err, 0, sizeof(err));
			if (fi_cq_readerr(cq, &err, 0) == 1) {
				handle_err(of, cq, msg_ch, &err);
				total++;
			}
			if (msg_ch && msg_ch->base.is_down)
				break;
			continue;
		}
		if (n < 0) {
			tw_log_ratelimited(TW_DIAG_WARN, "fabric: fi_cq_read: %s", fi_strerror((int)-n));
			if (msg_ch)
				tw__chan_set_lost(&msg_ch->base, tw__ofi_errno((int)n));
			break;
		}
		of->base.stats.cq_entries += (uint64_t)n;
		for (ssize_t i = 0; i < n; i++)
			of->pend[(of->pend_head + of->pend_count++) % PEND_MAX] = e[i];
		total += (int)n;
		if (n < (ssize_t)TW_ARRAY_SIZE(e))
			break;
	}
	return total;
}

/* Sends have deadlines too: the posted list holds them with the writes and reads, oldest first,
 * and the generic layer checks its head with the user's ops (tw__fab_check_deadlines). */
uint64_t tw__ofi_chan_deadline(const struct tw_chan *c)
{
	const struct ofi_chan *ch = (const struct ofi_chan *)c;

	return ch->posted ? ch->posted->deadline_ns : UINT64_MAX;
}

void tw__chan_defer(struct ofi_chan *ch, struct ofi_ctx *ctx, size_t len)
{
	ctx->len = len;
	TW_SLIST_APPEND(ch->deferred, ch->deferred_tail, ctx);
}

/* Hand over messages kept while tw__fab_connect was running. */
static int deliver_deferred(struct ofi_fab *of)
{
	struct tw_fab *fab = &of->base;
	int n = 0;

	for (struct tw_chan *c = fab->chans; c; c = c->next) {
		struct ofi_chan *ch = (struct ofi_chan *)c;

		while (ch->deferred && c->visible && !c->is_down) {
			struct ofi_ctx *ctx = ch->deferred;

			ch->deferred = ctx->next;
			if (!ch->deferred)
				ch->deferred_tail = NULL;
			ctx->next = NULL;
			fab->stats.recvs++;
			fab->stats.recv_bytes += ctx->len;
			size_t off = fab->rdm ? RDM_HDR_LEN : 0;
			if (fab->ev.on_recv)
				fab->ev.on_recv(fab->ev.arg, c, (char *)ctx->buf + off, ctx->len);
			n++;
			if (fab->rdm || !c->is_down) /* RDM buffers belong to the fab */
				tw__msg_post_recv(of, ctx);
		}
	}
	return n;
}

int tw__ofi_poll(struct tw_fab *fab)
{
	struct ofi_fab *of = ofab(fab);
	int n = 0;

	tw__fab_enter(fab);
	n += deliver_deferred(of);
	n += process_pending(of); /* left over by an outer frame */
	if (fab->rdm) {
		n += drain_cq(of, of->cq, NULL);
		process_pending(of);
	} else {
		/* Closed channels stay in the list until the sweep (tw__fab_leave), so `next` is safe. */
		for (struct tw_chan *c = fab->chans; c; c = c->next) {
			struct ofi_chan *ch = (struct ofi_chan *)c;

			if (!c->is_down && ch->cq)
				n += drain_cq(of, ch->cq, ch);
		}
		process_pending(of);
		/* EQ after the CQs: on tcp the CQ read is what notices a closed socket. */
		n += tw__cm_poll_eq(of);
		n += tw__cm_check_handshakes(of);
		if (of->closing_head) /* sockets: endpoints of channels already down */
			n += tw__cm_reap(of);
	}
	if (fab->rdm)
		n += tw__rdm_shm_check_peers(of);
	tw__fab_leave(fab);
	if (n > 0)
		of->backoff_us = 1;
	return n;
}

static int drain_eventfd(struct ofi_fab *of)
{
	uint64_t v;

	return read(of->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? 1 : 0;
}

/* tcp 1.17 (measured): the passive side's FI_CONNECTED does not wake the EQ's wait fd, so
 * while a handshake is pending we poll with backoff instead of sleeping. */
static bool handshake_pending(struct tw_fab *fab)
{
	for (struct tw_chan *c = fab->chans; c; c = c->next)
		if (!c->closed && (c->state == CHAN_ACCEPTING || c->state == CHAN_CONNECTING))
			return true;
	return false;
}

/* Every wait object in the epoll set must agree to the sleep (fi_poll(3), fi_trywait): a CQ
 * left out could hold a completion whose fd never fires again. Asked in batches, so any number
 * of channels is covered. False: something is ready, poll again. */
static bool trywait_all(struct ofi_fab *of)
{
	struct fid *fids[64];
	size_t nf = 0;
	struct tw_chan *c = of->base.chans;
	struct ofi_closing *cr = of->closing_head; /* their CQ fds are in the set too */

	if (of->eq)
		fids[nf++] = &of->eq->fid;
	if (of->cq)
		fids[nf++] = &of->cq->fid;
	for (;;) {
		for (; c && nf < TW_ARRAY_SIZE(fids); c = c->next) {
			struct ofi_chan *ch = (struct ofi_chan *)c;

			if (!c->is_down && ch->cq)
				fids[nf++] = &ch->cq->fid;
		}
		for (; !c && cr && nf < TW_ARRAY_SIZE(fids); cr = cr->next)
			if (cr->cq_fd >= 0)
				fids[nf++] = &cr->cq->fid;
		if (nf && fi_trywait(of->fabric, fids, (int)nf) != FI_SUCCESS)
			return false;
		if (!c && !cr)
			return true;
		nf = 0;
	}
}

int tw__ofi_wait_fd(struct tw_fab *fab, bool prepare)
{
	struct ofi_fab *of = ofab(fab);

	/* shm: completions and remote writes come from polling the peers' regions, and the
	 * peers' doorbells are futexes (ofi_bell.c): nothing a descriptor would signal. */
	if (of->nofd || fab->rdm)
		return -ENOTSUP;
	if (!prepare)
		return of->epfd;
	if (drain_eventfd(of))
		return -EAGAIN; /* woken (tw__fab_wakeup): its reason is for the next poll */
	if (handshake_pending(fab))
		return -EINPROGRESS;
	return trywait_all(of) ? of->epfd : -EAGAIN;
}

int tw__ofi_wait(struct tw_fab *fab, int timeout_ms)
{
	struct ofi_fab *of = ofab(fab);

	if (timeout_ms == 0)
		return drain_eventfd(of);
	if (!of->nofd && !handshake_pending(fab)) {
		struct epoll_event evs[8];
		int woken = 0;

		if (!trywait_all(of))
			return drain_eventfd(of); /* something is ready: poll again */
		int n = epoll_wait(of->epfd, evs, TW_ARRAY_SIZE(evs), timeout_ms);
		for (int i = 0; i < n; i++)
			if (evs[i].data.ptr == NULL)
				woken |= drain_eventfd(of);
		return woken;
	}
	/* No wait fd somewhere: poll with backoff, but wake at once on tw__fab_wakeup.
	 * shm: remote writes carried out in our polls count as activity, as completions do
	 * (tw__ofi_poll); fi_cntr_read progresses the endpoint once more. */
	if (of->rw_cntr) {
		uint64_t v;
		bool lk = tw__shm_local_enter(of->local_peers);

		tw__wedge_enter(of);
		v = fi_cntr_read(of->rw_cntr);
		tw__wedge_leave(of);
		tw__shm_local_leave(lk);

		if (v != of->rw_seen) {
			of->rw_seen = v;
			of->base.stats.shm_remote_writes = v;
			of->backoff_us = 1;
		}
	}
	/* shm: peers we wait for may sleep on their doorbells; idle long enough, sleep on ours. */
	if (of->bells_out)
		for (struct tw_chan *c = fab->chans; c; c = c->next) {
			struct ofi_chan *ch = (struct ofi_chan *)c;

			if (ch->posted)
				tw__bell_ring(of, ch->peer_bell);
		}
	if (of->backoff_us < OFI_BACKOFF_MAX_US)
		of->idle_rounds = 0;
	else if (++of->idle_rounds >= OFI_BELL_IDLE_ROUNDS && tw__bell_sleep(of, timeout_ms) == 0)
		return drain_eventfd(of);
	/* The shortest rounds yield the CPU instead of sleeping: a timed ppoll never sleeps less
	 * than the thread's timer slack (50 µs by default), and under load (a completion every few
	 * µs, backoff back at 1 µs) arming and firing its timer was half of a shm primary's samples
	 * (docs/benchmarks.md, "Fifth pass"). A yield lets the peers that our polls wait for run,
	 * and returns at once when nobody else wants this CPU. */
	unsigned us = of->backoff_us;
	if (us < OFI_YIELD_BELOW_US) {
		of->backoff_us *= 2;
		sched_yield();
		return drain_eventfd(of);
	}
	if (timeout_ms > 0 && (unsigned)timeout_ms * 1000u < us)
		us = (unsigned)timeout_ms * 1000u;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
	struct pollfd pfd = {.fd = of->evfd, .events = POLLIN};
	if (of->backoff_us < OFI_BACKOFF_MAX_US)
		of->backoff_us *= 2;
	if (ppoll(&pfd, 1, &ts, NULL) > 0)
		return drain_eventfd(of);
	return 0;
}

void tw__ofi_wakeup(struct tw_fab *fab)
{
	struct ofi_bell *b = atomic_load_explicit(&ofab(fab)->bell, memory_order_acquire);
	uint64_t one = 1;

	if (write(ofab(fab)->evfd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wakeup is pending anyway */
	}
	if (b && atomic_fetch_add(&b->sleeping, 0)) /* asleep on its doorbell (ofi_bell.c) */
		tw__bell_ring_slow(b);
}

void tw__ofi_stall(struct ofi_fab *of)
{
	int n;

	tw__fab_clock(&of->base); /* the stall round's one clock read */
	n = tw__ofi_poll(&of->base);

	n += tw__fab_check_deadlines(&of->base);
	if (n == 0) {
		int w = tw__ofi_wait(&of->base, 1);

		of->base.waited = true; /* looking: it counts (tw__fab_clock) */
		if (w == 1) /* keep the wakeup for the caller's progress loop */
			tw__ofi_wakeup(&of->base);
	}
}

static int chan_err(struct ofi_chan *ch)
{
	if (ch->base.closed)
		return -TW_ECLOSED;
	if (ch->base.lost || ch->base.is_down)
		return ch->base.lost_err ? ch->base.lost_err : -TW_EPEERLOST;
	return 0;
}

int tw__ofi_await_connect(struct ofi_fab *of, struct ofi_chan *ch, const char *addr)
{
	while (ch->base.state == CHAN_CONNECTING) {
		if (of->base.now_ns >= ch->base.hs_deadline_ns) { /* read by the last stall */
			tw__fab_set_errmsg(&of->base, "connect to %s: no answer within %u ms", addr,
				   of->base.cfg.connect_timeout_ms);
			return -ETIMEDOUT;
		}
		tw__ofi_stall(of);
	}
	return 0;
}

/*
 * A post refused because the connection is gone, before its FI_SHUTDOWN or completion error
 * was read: a loss like those, not an error of the caller's. libfabric 1.17's sockets provider
 * removes a connection as soon as its progress thread sees the peer's end of stream
 * (sock_pe_progress_tx_entry → sock_ep_remove_conn), and a later post on the endpoint fails
 * with -FI_ENOENT ("Unable to find connection entry", sock_ep_get_conn).
 */
static bool conn_gone(int r)
{
	return r == -FI_ENOENT || r == -FI_ENOTCONN || r == -FI_ECONNRESET ||
	       r == -FI_ECONNABORTED || r == -EPIPE;
}

int tw__post_tx(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, post_fn fn, void *arg,
	    uint64_t deadline_ns)
{
	int rc;

	for (;;) {
		if ((rc = chan_err(ch)) < 0)
			return rc;
		bool credit = ch->tx_inflight < ch->tx_max &&
			      (!of->base.rdm || of->tx_inflight < of->tx_max);
		if (credit && of->shm && !tw__rdm_shm_may_post(of, ch)) {
			if ((rc = chan_err(ch)) < 0) /* the peer is dead */
				return rc;
			if (ch->peer_gone) { /* dead, while the channel is being closed */
				tw__fab_set_errmsg(&of->base, "shm peer %s has exited", ch->base.peer);
				return -TW_EPEERLOST;
			}
			credit = false; /* its region is locked: progress and retry */
		}
		if (credit) {
			/* A peer endpoint of this process: not closed, and not while we post. */
			bool lk = tw__shm_local_enter(ch->local);
			ssize_t r;

			if (lk && !tw__rdm_local_may_post(of, ch)) {
				tw__shm_local_leave(lk);
				return chan_err(ch) < 0 ? chan_err(ch) : -TW_EPEERLOST;
			}
			r = fn(of, ch, ctx, arg);
			tw__shm_local_leave(lk);
			tw__bell_ring(of, ch->peer_bell); /* shm: a sleeping peer; -FI_EAGAIN too */
			if (r == 0) {
				ctx->deadline_ns = tw__fab_op_deadline(&of->base);
				ctx_link(ch, ctx);
				return 0;
			}
			if (r != -FI_EAGAIN) {
				tw__fab_set_errmsg(&of->base, "post to %s: %s", ch->base.peer,
					   fi_strerror((int)-r));
				if (!conn_gone((int)r))
					return tw__ofi_errno((int)r);
				/* The provider dropped the connection before we heard of it. */
				tw__chan_set_lost(&ch->base, -TW_EPEERLOST);
				return -TW_EPEERLOST;
			}
			of->base.stats.eagain_retries++;
		}
		if (of->base.now_ns >= deadline_ns) { /* read by the last stall */
			tw__fab_set_errmsg(&of->base, "queue to %s stayed full", ch->base.peer);
			return -ETIMEDOUT;
		}
		tw__ofi_stall(of);
	}
}
