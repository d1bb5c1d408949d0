/*
 * fabric/ofi_cm.c — FI_EP_MSG connection management (verbs, tcp, sockets).
 *
 * Passive: fi_passive_ep + fi_listen on the fab's EQ. FI_CONNREQ → endpoint on the fab's
 * domain, its own CQ, bind EQ+CQ, enable, post receives, fi_accept (fi_reject on any failure);
 * the channel is announced (on_accept) at FI_CONNECTED — or at its first message, which can
 * overtake the event. Accepts are asynchronous: a peer that vanishes mid-handshake only leaves
 * a half-open channel that is dropped after connect_timeout_ms, the listener never blocks.
 * Active: fi_getinfo(host, port) → endpoint → fi_connect, then progress (CQs and EQ: tcp
 * delivers CM events only when its CQ is polled) until FI_CONNECTED, an error, or the timeout.
 * Events are matched to channels by endpoint fid against the fab's live channels, so an event
 * that arrives for an endpoint already closed is ignored.
 * The EQ is read into a buffer with room for the connect data a peer may attach (fi_eq(3):
 * struct fi_eq_cm_entry ends in `data[]`, and the returned length includes that data): the
 * sockets provider answers a too small buffer with -FI_ETOOSMALL and leaves the event at the
 * head of the EQ, so one stranger's connect data would block every later event. Tailwind sends
 * no connect data; a request that carries some is treated like any other.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fabric/ofi_int.h"

/* Room for connect data after the entry in an EQ read. Providers' limits (FI_OPT_CM_DATA_SIZE,
 * fi_endpoint(3)) are 256 bytes (tcp, sockets) or less (verbs: 55); cm_data_fits() checks it
 * for every endpoint we listen or connect on. */
#define CM_DATA_ROOM 4096

union eq_buf {
	struct fi_eq_cm_entry e;
	uint8_t b[sizeof(struct fi_eq_cm_entry) + CM_DATA_ROOM];
};

/* Whether an event of `fid` (passive or active endpoint) fits an eq_buf. Providers that cannot
 * tell (the option is optional) are trusted. */
static int cm_data_fits(struct ofi_fab *of, struct fid *fid)
{
	size_t max = 0, len = sizeof(max);

	if (fi_getopt(fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max, &len) != 0 || max <= CM_DATA_ROOM)
		return 0;
	tw__fab_set_errmsg(&of->base, "provider %s allows %zu bytes of connect data, more than the %u this "
		   "build reads (raise CM_DATA_ROOM in fabric/ofi_cm.c)", of->base.prov, max,
		   (unsigned)CM_DATA_ROOM);
	return -ENOTSUP;
}

int tw__sockaddr_to_str(const void *sa_, char *out, size_t len)
{
	const struct sockaddr *sa = sa_;
	char ip[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = sa_;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(s4->sin_port));
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = sa_;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
		return 0;
	}
	snprintf(out, len, "?");
	return -EAFNOSUPPORT;
}

int tw__cm_listen(struct tw_fab *fab, char *addr_out, size_t addr_len)
{
	struct ofi_fab *of = ofab(fab);
	char name[128];
	size_t nlen = sizeof(name);
	int rc;

	if (!of->pep) {
		rc = fi_passive_ep(of->fabric, of->info, &of->pep, NULL);
		if (!rc)
			rc = fi_pep_bind(of->pep, &of->eq->fid, 0);
		if (!rc)
			rc = fi_listen(of->pep);
		if (rc) {
			tw__fab_set_errmsg(fab, "listen: %s", fi_strerror(-rc));
			rc = tw__ofi_errno(rc);
		} else {
			rc = cm_data_fits(of, &of->pep->fid);
		}
		if (rc) {
			if (of->pep)
				fi_close(&of->pep->fid);
			of->pep = NULL;
			return rc;
		}
	}
	rc = fi_getname(&of->pep->fid, name, &nlen);
	if (rc) {
		tw__fab_set_errmsg(fab, "fi_getname: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	char s[TW_ADDR_MAX];
	tw__sockaddr_to_str(name, s, sizeof(s));
	if ((size_t)snprintf(addr_out, addr_len, "%s", s) >= addr_len)
		return -ENAMETOOLONG;
	of->listening = true;
	return 0;
}

static struct ofi_chan *chan_by_fid(struct ofi_fab *of, fid_t fid)
{
	for (struct tw_chan *c = of->base.chans; c; c = c->next) {
		struct ofi_chan *ch = (struct ofi_chan *)c;
		if (!c->is_down && ch->ep && &ch->ep->fid == fid)
			return ch;
	}
	return NULL;
}

/* Endpoint, CQ, bindings, receive buffers. Undone by tw__cm_chan_down. */
static int setup_ep(struct ofi_fab *of, struct ofi_chan *ch, struct fi_info *info)
{
	size_t tx = info->tx_attr->size ? info->tx_attr->size : of->tx_size;
	size_t rx = info->rx_attr->size ? info->rx_attr->size : of->rx_size;
	size_t cq;
	int rc;

	ch->rx.n = (unsigned)TW_MIN((size_t)of->base.cfg.rx_depth, rx);
	ch->tx_max = (unsigned)TW_MIN((size_t)of->base.cfg.tx_depth, tx);
	cq = tx + rx;
	if (of->strict) {
		/* verbs' limits (ofi_strict.c): our credits do not hide the small send queue, and the
		 * CQ holds exactly what can be outstanding, so posts meet -FI_EAGAIN and a full CQ. */
		ch->tx_max = of->base.cfg.tx_depth;
		ch->sq_size = (unsigned)tx;
		ch->cq_size = (unsigned)tx + ch->rx.n;
		cq = ch->cq_size;
	}
	if (of->drain_close && ch->tx_max > OFI_SOCKETS_CHAN_TX_MAX)
		ch->tx_max = OFI_SOCKETS_CHAN_TX_MAX; /* a share of the domain's 128 entries */
	rc = tw__cq_open(of, cq, &ch->cq, &ch->cq_fd, ch);
	if (rc < 0)
		return rc;
	rc = fi_endpoint(of->domain, info, &ch->ep, ch);
	if (rc) {
		ch->ep = NULL;
		tw__fab_set_errmsg(&of->base, "fi_endpoint: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	rc = fi_ep_bind(ch->ep, &of->eq->fid, 0);
	if (!rc)
		rc = fi_ep_bind(ch->ep, &ch->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(ch->ep);
	if (rc) {
		tw__fab_set_errmsg(&of->base, "endpoint bind/enable: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	if ((rc = cm_data_fits(of, &ch->ep->fid)) < 0)
		return rc;
	/* Receives before accept/connect: verbs would otherwise RNR-stall forever (fi_verbs(7); docs/fabric.md, Connections). */
	return tw__msg_alloc_rx(of, &ch->rx, ch);
}

/*
 * sockets: an endpoint is closed only once the provider is done with every transfer posted on
 * it. libfabric 1.17's sockets provider completes a send, write or read when the peer's
 * acknowledgement arrives, in its progress thread, through the endpoint's transmit context
 * (sock_pe_handle_ack → sock_pe_report_send_completion, reading comp->send_cntr).
 * sock_ep_close() frees the transmit context *before* it takes the receive context (which reads
 * those acknowledgements) off the progress engine's list, so an acknowledgement handled in that
 * window makes the thread read freed memory (twd's died of it: docs/fabric.md). Lost channels
 * count too: a peer that has gone may have sent its acknowledgements before it closed, and they
 * sit unread in the socket while the CM thread already reports the shutdown; once the provider
 * reads the end of the stream it fails the remaining entries (sock_pe_progress_tx_entry →
 * FI_EIO). Completions read after the channel went down finish nothing: their operations are
 * failed by the caller (chan_fail_ops, fabric.c) as for any closed channel; only the contexts are
 * given back.
 *
 * Waiting for that used to block the closing thread (a daemon's progress loop: every other peer
 * waited too) for 2-3 ms at the median and 200 ms for a stalled peer. Now the channel hands its
 * endpoint, CQ, receive buffers and posted contexts to a closing record (struct ofi_closing) and
 * goes down at once; progress reads the record's CQ without blocking (tw__cm_reap) and closes
 * the endpoint when nothing is left in the provider or at the same 200 ms bound as before.
 * Three things stay synchronous, through tw__cm_reap_all: tw__chan_shut (its promise is that no
 * write of that peer is handled once it returns: a backup revoking a writer, the shutdown
 * flush), the close of any registration (a record's endpoint may still place an incoming write
 * into it: the sock_pe_report_mr_completion race, docs/fabric.md), and the fab's close/reset.
 */
static void give_back(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx)
{
	tw__ofi_ctx_unlink(ch, ctx);
	if (ctx->op)
		ctx->op->fab_priv[0] = NULL;
	tw__ofi_ctx_release(of, ctx);
}

/* A transfer of a closing record completed (or failed) in the provider. */
static void closing_give_back(struct ofi_fab *of, struct ofi_closing *cr, struct ofi_ctx *ctx)
{
	TW_DLIST_REMOVE(cr->posted, cr->posted_tail, ctx);
	tw__ofi_ctx_release(of, ctx);
}

/* Handle n entries read from a closing record's CQ: receives (flushed, or messages that
 * arrived after the close) are dropped with their buffers later. */
static int closing_entries(struct ofi_fab *of, struct ofi_closing *cr,
			   const struct fi_cq_data_entry *e, ssize_t n)
{
	int done = 0;

	for (ssize_t i = 0; i < n; i++) {
		struct ofi_ctx *ctx = e[i].op_context;

		if (ctx && ctx->kind != CTX_RECV) {
			closing_give_back(of, cr, ctx);
			done++;
		}
	}
	return done;
}

/* One read of a closing record's CQ: entries handled (>= 0), -FI_EAGAIN when empty, or another
 * negative code (stop reading it). timeout_ms > 0: fi_cq_sread when the CQ has a wait fd. */
static ssize_t closing_read(struct ofi_fab *of, struct ofi_closing *cr, int timeout_ms, int *done)
{
	struct fi_cq_data_entry e[16];
	ssize_t n = timeout_ms > 0 && cr->cq_fd >= 0 ? fi_cq_sread(cr->cq, e, 16, NULL, timeout_ms)
						      : fi_cq_read(cr->cq, e, 16);

	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		if (fi_cq_readerr(cr->cq, &err, 0) != 1)
			return -FI_EOTHER;
		n = 1;
		e[0].op_context = err.op_context;
	}
	if (n > 0)
		*done += closing_entries(of, cr, e, n);
	return n;
}

static void closing_finish(struct ofi_fab *of, struct ofi_closing *cr)
{
	if (cr->posted) {
		of->base.stats.closes_forced++;
		tw_log_debug("fabric %s: closing the endpoint to %s with transfers unacknowledged",
			     of->base.prov, cr->peer);
	}
	fi_close(&cr->ep->fid);
	tw__cq_close(of, cr->cq, cr->cq_fd);
	/* Endpoint and CQ are gone: nothing refers to these contexts any more. */
	while (cr->posted)
		closing_give_back(of, cr, cr->posted);
	tw__msg_free_rx(of, &cr->rx);
}

int tw__cm_reap(struct ofi_fab *of)
{
	struct ofi_closing **pp = &of->closing_head, *prev = NULL;
	int done = 0;

	while (*pp) {
		struct ofi_closing *cr = *pp;

		/* Read until empty: that also consumes the wait fd's readiness (sockets resets its
		 * signal on an empty read), so the epoll set does not stay ready. Bounded: the
		 * receives are not reposted, so at most rx.n + posted entries arrive. */
		for (int round = 0; round < 64; round++)
			if (closing_read(of, cr, 0, &done) <= 0)
				break;
		/* Not at the bound while transfers are posted: libfabric 1.17's sockets provider
		 * never gives back the progress entries of an endpoint closed under them (the
		 * endpoint's close removes its contexts from the progress engine, the entries stay
		 * busy), and a domain has 128: a few peers that stopped reading, closed on, made
		 * every later send of the process impossible (docs/fabric.md, "A stalled peer must
		 * not wedge the others"). The transfers end when the peer acknowledges them or its
		 * connection breaks (FI_EIO), which the record's CQ (in the epoll set) reports;
		 * until then only this record waits. */
		if (cr->posted) {
			prev = cr;
			pp = &cr->next;
			continue;
		}
		closing_finish(of, cr);
		*pp = cr->next;
		if (of->closing_tail == cr)
			of->closing_tail = prev;
		of->base.stats.closing_eps--;
		free(cr);
	}
	return done;
}

/* Wait (on the CQ, until `end`) for the transfers of `cr`, then close it. */
static void closing_wait(struct ofi_fab *of, struct ofi_closing *cr, uint64_t end)
{
	int done = 0;

	/* Wait on the CQ rather than spin: the provider's thread must run for the wait to end
	 * (docs/fabric.md: 2-3 ms at the median instead of 6-15 ms spinning). */
	while (cr->posted && tw_now_ns() < end) {
		ssize_t n = closing_read(of, cr, 1, &done);

		if (n < 0 && n != -FI_EAGAIN)
			break;
	}
	closing_finish(of, cr);
}

/* Every record, then `extra` (not in the list) if given, under one bound. */
static void reap_all_with(struct ofi_fab *of, struct ofi_closing *extra)
{
	uint64_t end = tw_now_ns() + 200000000u;

	while (of->closing_head) {
		struct ofi_closing *cr = of->closing_head;

		closing_wait(of, cr, end);
		of->closing_head = cr->next;
		if (!of->closing_head)
			of->closing_tail = NULL;
		of->base.stats.closing_eps--;
		free(cr);
	}
	if (extra)
		closing_wait(of, extra, end);
}

void tw__cm_reap_all(struct ofi_fab *of)
{
	reap_all_with(of, NULL);
}

/* Give what the provider has already completed back, then move the endpoint, CQ, receive
 * buffers and the transfers still posted from `ch` to `cr`. */
static void closing_take(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_closing *cr)
{
	/* Completions already moved into the fab's FIFO are done in the provider. */
	for (unsigned i = 0; i < of->pend_count; i++) {
		struct fi_cq_data_entry *e = &of->pend[(of->pend_head + i) % TW_ARRAY_SIZE(of->pend)];
		struct ofi_ctx *ctx = e->op_context;

		if (ctx && ctx->kind != CTX_RECV && ctx->ch == ch) {
			give_back(of, ch, ctx);
			e->op_context = NULL;
		}
	}
	tw__cq_purge_chan(of, ch); /* the receives' */
	memset(cr, 0, sizeof(*cr));
	cr->ep = ch->ep;
	cr->cq = ch->cq;
	cr->cq_fd = ch->cq_fd;
	cr->rx = ch->rx;
	snprintf(cr->peer, sizeof(cr->peer), "%s", ch->base.peer);
	cr->end_ns = tw_now_ns() + 200000000u; /* 200 ms: a stalled peer costs this much */
	for (struct ofi_ctx *ctx = ch->posted; ctx; ctx = ctx->next) {
		ctx->ch = NULL;
		if (ctx->op) /* the caller fails it (chan_fail_ops, fabric.c); the ctx is ours */
			ctx->op->fab_priv[0] = NULL;
		ctx->op = NULL;
	}
	for (unsigned i = 0; cr->rx.ctx && i < cr->rx.n; i++)
		cr->rx.ctx[i].ch = NULL;
	cr->posted = ch->posted;
	cr->posted_tail = ch->posted_tail;
	ch->posted = ch->posted_tail = NULL;
	ch->tx_inflight = 0;
	ch->deferred = ch->deferred_tail = NULL; /* their buffers went with rx */
	memset(&ch->rx, 0, sizeof(ch->rx));
	ch->ep = NULL;
	ch->cq = NULL;
	ch->cq_fd = -1;
}

void tw__cm_chan_down(struct ofi_chan *ch, bool closing)
{
	struct ofi_fab *of = ofab(ch->base.fab);

	/* tw__chan_shut (closing, not closed): no endpoint of ours stays open after it. */
	bool shut = closing && !ch->base.closed;

	if (of->drain_close && ch->ep && ch->cq && ch->posted) {
		struct ofi_closing *cr = shut ? NULL : malloc(sizeof(*cr));
		struct ofi_closing local;

		if (closing && ch->base.state == CHAN_UP && !ch->base.lost && !of->no_shutdown)
			fi_shutdown(ch->ep, 0);
		closing_take(of, ch, cr ? cr : &local);
		if (cr) {
			if (of->closing_tail)
				of->closing_tail->next = cr;
			else
				of->closing_head = cr;
			of->closing_tail = cr;
			of->base.stats.closes_deferred++;
			of->base.stats.closing_eps++;
			return;
		}
		/* tw__chan_shut, or out of memory: wait here, for the older records too (a
		 * shut promises that none of them places a write after it returned). */
		reap_all_with(of, &local);
		return;
	}
	if (shut && of->closing_head)
		tw__cm_reap_all(of);
	if (ch->ep) {
		if (closing && ch->base.state == CHAN_UP && !ch->base.lost && !of->no_shutdown)
			fi_shutdown(ch->ep, 0); /* the peer sees FI_SHUTDOWN */
		fi_close(&ch->ep->fid);
		ch->ep = NULL;
	}
	if (ch->cq) {
		tw__cq_close(of, ch->cq, ch->cq_fd);
		ch->cq = NULL;
	}
	/* Endpoint and CQ are gone: nothing refers to our contexts any more, except
	 * completions already read into the fab's FIFO. */
	tw__cq_purge_chan(of, ch);
	ch->deferred = ch->deferred_tail = NULL; /* buffers are freed below */
	while (ch->posted) {
		give_back(of, ch, ch->posted);
	}
	tw__msg_free_rx(of, &ch->rx);
}

/* Drop a channel the user never saw (failed handshake). */
static void discard(struct ofi_chan *ch)
{
	ch->base.closed = true;
	tw__cm_chan_down(ch, false);
	ch->base.is_down = true;
	ch->base.fab->need_sweep = true;
}

static struct ofi_chan *new_chan(struct ofi_fab *of, const char *peer, enum chan_state st)
{
	struct ofi_chan *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->cq_fd = -1;
	tw__chan_init(&of->base, &ch->base, peer);
	ch->base.state = st;
	ch->base.hs_deadline_ns = tw__fab_clock(&of->base) +
				  (uint64_t)of->base.cfg.connect_timeout_ms * 1000000u;
	return ch;
}

static void on_connreq(struct ofi_fab *of, struct fi_info *info)
{
	char peer[TW_ADDR_MAX] = "?";
	struct ofi_chan *ch;
	int rc;

	if (info->dest_addr)
		tw__sockaddr_to_str(info->dest_addr, peer, sizeof(peer));
	if (!of->listening) {
		fi_reject(of->pep, info->handle, NULL, 0);
		fi_freeinfo(info);
		return;
	}
	tw__fab_enter(&of->base);
	ch = new_chan(of, peer, CHAN_ACCEPTING);
	rc = ch ? setup_ep(of, ch, info) : -ENOMEM;
	if (!rc) {
		rc = fi_accept(ch->ep, NULL, 0);
		if (rc)
			tw__fab_set_errmsg(&of->base, "fi_accept: %s", fi_strerror(-rc));
	}
	if (rc) {
		tw_log_warn("fabric %s: rejecting connection from %s: %s", of->base.prov, peer,
			    of->base.errmsg);
		fi_reject(of->pep, info->handle, NULL, 0);
		if (ch)
			discard(ch);
	}
	fi_freeinfo(info);
	tw__fab_leave(&of->base);
}

int tw__cm_poll_eq(struct ofi_fab *of)
{
	union eq_buf buf;
	struct fi_eq_cm_entry *entry = &buf.e;
	uint32_t event;
	int n = 0;

	if (!of->eq)
		return 0;
	for (int i = 0; i < 16; i++) {
		ssize_t rc = fi_eq_read(of->eq, &event, &buf, sizeof(buf), 0);
		struct ofi_chan *ch;

		if (rc == -FI_EAGAIN)
			break;
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err;

			memset(&err, 0, sizeof(err));
			if (fi_eq_readerr(of->eq, &err, 0) < 0)
				break;
			n++;
			ch = chan_by_fid(of, err.fid);
			if (!ch)
				continue;
			int e = err.err ? -err.err : -ECONNREFUSED;
			tw__fab_set_errmsg(&of->base, "connection to %s: %s", ch->base.peer, fi_strerror(err.err));
			if (ch->base.state == CHAN_CONNECTING) {
				ch->fail_err = tw__ofi_errno(e);
				ch->base.state = CHAN_FAILED;
			} else if (ch->base.state == CHAN_ACCEPTING) {
				discard(ch);
			} else {
				tw__chan_set_lost(&ch->base, tw__ofi_errno(e));
			}
			continue;
		}
		if (rc < 0) {
			tw_log_ratelimited(TW_DIAG_WARN, "fabric: fi_eq_read: %s", fi_strerror((int)-rc));
			break;
		}
		n++;
		switch (event) {
		case FI_CONNREQ:
			on_connreq(of, entry->info);
			break;
		case FI_CONNECTED:
			ch = chan_by_fid(of, entry->fid);
			if (!ch)
				break;
			if (ch->base.state == CHAN_CONNECTING)
				ch->base.state = CHAN_UP;
			else if (ch->base.state == CHAN_ACCEPTING)
				tw__chan_announce(&ch->base);
			break;
		case FI_SHUTDOWN:
			ch = chan_by_fid(of, entry->fid);
			if (!ch)
				break;
			if (ch->base.state == CHAN_UP) {
				tw__fab_set_errmsg(&of->base, "peer %s shut the connection down", ch->base.peer);
				tw__chan_set_lost(&ch->base, -TW_EPEERLOST);
			} else if (ch->base.state == CHAN_CONNECTING) {
				ch->fail_err = -ECONNRESET;
				ch->base.state = CHAN_FAILED;
			} else {
				discard(ch);
			}
			break;
		default:
			if (event == FI_CONNREQ && entry->info)
				fi_freeinfo(entry->info);
			break;
		}
	}
	return n;
}

/*
 * At close, before the passive endpoint and the EQ go: reject every queued connection request
 * and free its fi_info (nobody else would). On tcp, reading the EQ is also what accepts a
 * pending connection (prov/tcp/src/tcpx_conn_mgr.c, v1.17.0: tcpx_eq_read runs
 * tcpx_conn_mgr_run, whose tcpx_accept allocates a connection handle and waits for the peer's
 * request on it); the request only becomes an FI_CONNREQ event on a later read, and closing
 * the EQ before that leaks the handle (ASan saw it in twd after a shutdown during which a
 * primary had connected). So a listener's EQ is read until it has been quiet for 2 ms
 * (at most 50 ms): connections accepted by the drain itself get their request read and
 * rejected. A fabric that does not listen reads until the first empty read.
 */
void tw__cm_drain_eq(struct ofi_fab *of)
{
	uint64_t now = tw_now_ns(), quiet = now + 2000000u, end = now + 50000000u;

	for (unsigned n = 0; n < 4096; n++) {
		union eq_buf buf;
		uint32_t event;
		ssize_t rc = fi_eq_read(of->eq, &event, &buf, sizeof(buf), 0);

		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err;

			memset(&err, 0, sizeof(err));
			if (fi_eq_readerr(of->eq, &err, 0) < 0)
				break;
			continue;
		}
		if (rc < 0) {
			now = tw_now_ns();
			if (rc != -FI_EAGAIN || !of->pep || now >= quiet || now >= end)
				break;
			continue;
		}
		quiet = tw_now_ns() + 2000000u;
		if (event == FI_CONNREQ && buf.e.info) {
			if (of->pep)
				fi_reject(of->pep, buf.e.info->handle, NULL, 0);
			fi_freeinfo(buf.e.info);
		}
	}
}

int tw__cm_check_handshakes(struct ofi_fab *of)
{
	uint64_t now = of->base.now_ns; /* read by this progress or stall round */
	int n = 0;

	for (struct tw_chan *c = of->base.chans; c; c = c->next) {
		if (c->closed || c->state != CHAN_ACCEPTING || c->hs_deadline_ns > now)
			continue;
		tw_log_warn("fabric %s: handshake with %s timed out; dropping it", of->base.prov,
			    c->peer);
		discard((struct ofi_chan *)c);
		n++;
	}
	return n;
}

/* "host:port" or "[v6]:port" → node, service. */
static int split_addr(const char *addr, char *node, size_t nlen, char *svc, size_t slen)
{
	const char *colon = strrchr(addr, ':');
	const char *h = addr;
	size_t hl;

	if (!colon || !colon[1])
		return -EINVAL;
	hl = (size_t)(colon - addr);
	if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= nlen || strlen(colon + 1) >= slen)
		return -EINVAL;
	memcpy(node, h, hl);
	node[hl] = '\0';
	snprintf(svc, slen, "%s", colon + 1);
	return 0;
}

int tw__cm_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out)
{
	struct ofi_fab *of = ofab(fab);
	char node[TW_ADDR_MAX], svc[32];
	struct fi_info *info = NULL;
	struct ofi_chan *ch;
	int rc;

	if (split_addr(addr, node, sizeof(node), svc, sizeof(svc)) < 0) {
		tw__fab_set_errmsg(fab, "bad address '%s' (want host:port)", addr);
		return -EINVAL;
	}
	rc = fi_getinfo(OFI_VERSION, node, svc, 0, of->hints, &info);
	if (rc || !info) {
		tw__fab_set_errmsg(fab, "cannot resolve %s: %s", addr, fi_strerror(-rc));
		return rc == -FI_ENODATA ? -EHOSTUNREACH : tw__ofi_errno(rc ? rc : -FI_ENODATA);
	}
	ch = new_chan(of, addr, CHAN_CONNECTING);
	if (!ch) {
		fi_freeinfo(info);
		return -ENOMEM;
	}
	rc = setup_ep(of, ch, info);
	if (!rc) {
		rc = fi_connect(ch->ep, info->dest_addr, NULL, 0);
		if (rc) {
			tw__fab_set_errmsg(fab, "fi_connect %s: %s", addr, fi_strerror(-rc));
			rc = tw__ofi_errno(rc);
		}
	}
	fi_freeinfo(info);
	if (!rc)
		rc = tw__ofi_await_connect(of, ch, addr);
	if (!rc && ch->base.state != CHAN_UP)
		rc = ch->fail_err ? ch->fail_err : -ECONNREFUSED;
	if (rc) {
		if (!ch->base.closed)
			discard(ch);
		return rc;
	}
	*out = &ch->base;
	return 0;
}
