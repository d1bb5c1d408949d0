/*
 * proto/rpc_client.c — RPC client: one per channel, requests matched to replies by id through a
 * power-of-two slot table (id = sequence << bits | slot), so lookup is O(1) and a late reply to a
 * recycled slot is recognised by its sequence. Driven by the fab's thread (see rpc.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"

#define CLIENT_ARENA_FIRST 16384u

struct slot {
	uint64_t id; /* 0: free */
	uint64_t deadline_ns;
	tw_rpc_done_fn cb;
	void *arg;
	Tailwind__Envelope__BodyCase expect_case; /* reply body kind expected */
	bool sending;
	struct tw_rpc_arena *arena; /* blocking call: the reply is decoded straight into it */
};

struct tw_rpc_client {
	struct tw_chan *ch;
	struct tw_fab *fab;
	struct tw_rpc_config cfg;
	struct slot *slots;
	uint32_t *free_stack;
	unsigned nfree;
	unsigned mask;
	unsigned bits;
	unsigned inflight;
	uint64_t seq;
	uint64_t next_deadline_ns; /* lower bound of the earliest deadline (UINT64_MAX: none) */
	bool lost;
	bool broken;
	int peer_minor;
	uint64_t incarnation; /* stamped on requests that carry none */
	int depth;         /* nesting of on_recv (a callback's send may progress the fab) */
	bool tx_busy;
	unsigned char *txbuf;
	struct tw_rpc_arena arena;
	unsigned char *arena_first;
	char errmsg[TW_RPC_MESSAGE_MAX + 128];
	struct tw_rpc_client_stats st;
};

int tw__rpc_client_create(struct tw_chan *ch, const struct tw_rpc_config *cfg,
			 struct tw_rpc_client **out)
{
	struct tw_rpc_config c;
	void *block;
	struct tw_rpc_client *cl;
	unsigned i;
	int rc;

	rc = tw__rpc__alloc(cfg, sizeof(*cl), sizeof(*cl->slots) + sizeof(*cl->free_stack),
			    CLIENT_ARENA_FIRST, &c, &block);
	if (rc)
		return rc;
	cl = block;
	cl->cfg = c;
	cl->ch = ch;
	cl->fab = ch ? tw__chan_fab(ch) : NULL;
	cl->mask = c.max_inflight - 1;
	while ((1u << cl->bits) < c.max_inflight)
		cl->bits++;
	cl->slots = (struct slot *)(cl + 1);
	cl->free_stack = (uint32_t *)(cl->slots + c.max_inflight);
	cl->arena_first = (unsigned char *)(cl->free_stack + c.max_inflight);
	cl->txbuf = cl->arena_first + CLIENT_ARENA_FIRST;
	for (i = 0; i < cl->cfg.max_inflight; i++)
		cl->free_stack[i] = cl->cfg.max_inflight - 1 - i;
	cl->nfree = cl->cfg.max_inflight;
	tw__rpc_arena_init(&cl->arena, cl->arena_first, CLIENT_ARENA_FIRST, cl->cfg.arena_limit);
	cl->next_deadline_ns = UINT64_MAX;
	cl->peer_minor = -1;
	*out = cl;
	return 0;
}

static const char *peer(const struct tw_rpc_client *cl)
{
	return cl->ch ? tw__chan_peer(cl->ch) : "?";
}

/* Free the slot and run its callback (after freeing, so the callback may issue calls). */
static void complete(struct tw_rpc_client *cl, struct slot *s, int status,
		     const Tailwind__Envelope *reply)
{
	tw_rpc_done_fn cb = s->cb;
	void *arg = s->arg;

	s->id = 0;
	s->cb = NULL;
	s->arena = NULL;
	cl->free_stack[cl->nfree++] = (uint32_t)(s - cl->slots);
	cl->inflight--;
	if (status == 0)
		cl->st.ok++;
	else
		cl->st.failed++;
	if (status == -ETIMEDOUT)
		cl->st.timeouts++;
	cb(arg, status, reply);
}

static void fail_all(struct tw_rpc_client *cl, int status)
{
	unsigned i;

	for (i = 0; i < cl->cfg.max_inflight; i++) {
		struct slot *s = &cl->slots[i];

		if (s->id && !s->sending)
			complete(cl, s, status, NULL);
	}
}

static void set_errmsg(struct tw_rpc_client *cl, const char *fmt, ...) TW_PRINTF(2, 3);

static void set_errmsg(struct tw_rpc_client *cl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cl->errmsg, sizeof(cl->errmsg), fmt, ap);
	va_end(ap);
}

void tw__rpc__client_seterr(struct tw_rpc_client *cl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cl->errmsg, sizeof(cl->errmsg), fmt, ap);
	va_end(ap);
}

void tw__rpc_client_destroy(struct tw_rpc_client *cl)
{
	if (!cl)
		return;
	set_errmsg(cl, "client destroyed");
	/* Refuse new calls first: a callback that called again from fail_all would take a slot
	 * fail_all may have passed already, and its answer would never come. */
	cl->lost = true;
	fail_all(cl, -TW_ECLOSED);
	tw__rpc_arena_fini(&cl->arena);
	free(cl); /* slots, free_stack, arena_first and txbuf are in the same block */
}

void tw__rpc_client_close(struct tw_rpc_client **cl, struct tw_chan **ch)
{
	tw__rpc_client_destroy(*cl);
	*cl = NULL;
	tw__chan_close(*ch);
	*ch = NULL;
}

void tw__rpc_client_set_incarnation(struct tw_rpc_client *cl, uint64_t incarnation)
{
	cl->incarnation = incarnation & TW_RPC_ID_MAX;
}

static int call(struct tw_rpc_client *cl, Tailwind__Envelope *req, tw_rpc_done_fn cb, void *arg,
		struct tw_rpc_arena *arena);

int tw__rpc_call(struct tw_rpc_client *cl, Tailwind__Envelope *req, tw_rpc_done_fn cb, void *arg)
{
	return call(cl, req, cb, arg, NULL);
}

static int call(struct tw_rpc_client *cl, Tailwind__Envelope *req, tw_rpc_done_fn cb, void *arg,
		struct tw_rpc_arena *arena)
{
	unsigned char *buf = cl->txbuf;
	bool own_buf = false;
	struct slot *s;
	uint64_t id;
	size_t len;
	int op, rc;

	if (cl->broken)
		return -TW_EMALFORMED;
	if (cl->lost || !cl->ch)
		return -TW_EPEERLOST;
	op = tw__rpc_op_of_case(req->body_case);
	if (op < 0 || !cb)
		return -EINVAL;
	if (!cl->nfree)
		return -EBUSY;
	if (cl->tx_busy) {
		/* re-entered from a callback while our own send was progressing the fab */
		buf = malloc(cl->cfg.max_msg_size);
		if (!buf)
			return -ENOMEM;
		own_buf = true;
	}

	s = &cl->slots[cl->free_stack[cl->nfree - 1]];
	id = (++cl->seq << cl->bits) | (uint64_t)(s - cl->slots);
	req->request_id = id;
	if (!req->incarnation)
		req->incarnation = cl->incarnation;
	rc = tw__rpc_encode(req, buf, cl->cfg.max_msg_size, cl->cfg.max_msg_size, &len);
	if (rc) {
		if (own_buf)
			free(buf);
		return rc;
	}
	cl->nfree--;
	cl->inflight++;
	s->id = id;
	s->cb = cb;
	s->arg = arg;
	s->expect_case = TW_RPC_OP_REPLY_CASE(op);
	s->arena = arena;
	s->deadline_ns = tw_now_ns() + (uint64_t)cl->cfg.timeout_ms * 1000000u;
	s->sending = true;
	cl->st.calls++;

	if (!own_buf)
		cl->tx_busy = true;
	rc = tw__chan_send(cl->ch, buf, len);
	if (!own_buf)
		cl->tx_busy = false;
	else
		free(buf);

	if (s->id != id)
		return 0; /* completed (and maybe reused) while the send progressed the fab */
	s->sending = false;
	if (rc == 0 && cl->lost)
		rc = -TW_EPEERLOST;
	if (rc) {
		s->id = 0;
		s->cb = NULL;
		cl->free_stack[cl->nfree++] = (uint32_t)(s - cl->slots);
		cl->inflight--;
		cl->st.calls--;
		set_errmsg(cl, "send failed: %s", tw_strerror(rc));
		return rc;
	}
	cl->st.msgs_tx++;
	cl->st.bytes_tx += len;
	if (s->deadline_ns < cl->next_deadline_ns)
		cl->next_deadline_ns = s->deadline_ns;
	return 0;
}

/* ---- blocking form */

struct sync_state {
	struct tw_rpc_client *cl;
	struct tw_rpc_reply *rep;
	bool done;
	int status;
};

static void sync_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct sync_state *ss = arg;
	struct tw_rpc_client *cl = ss->cl;

	(void)cl;
	ss->done = true;
	ss->status = status;
	if (ss->rep && reply)
		ss->rep->env = reply; /* decoded into the caller's arena (the call's slot) */
}

int tw__rpc_call_sync(struct tw_rpc_client *cl, Tailwind__Envelope *req, struct tw_rpc_reply *rep)
{
	struct sync_state ss = { .cl = cl, .rep = rep };
	int rc;

	if (rep) {
		rep->env = NULL;
		rep->status = 0;
		tw__rpc_arena_init(&rep->arena, rep->storage, sizeof(rep->storage),
				  cl->cfg.arena_limit);
	}
	rc = call(cl, req, sync_done, &ss, rep ? &rep->arena : NULL);
	if (rc) {
		if (rep)
			rep->status = rc;
		return rc;
	}
	while (!ss.done) {
		int t = tw__rpc_client_next_timeout_ms(cl);

		if (t < 0 || t > 1000)
			t = 1000;
		if (cl->fab) {
			rc = tw__fab_progress(cl->fab, t);
			if (rc < 0)
				tw_log_ratelimited(TW_DIAG_WARN, "rpc: progress failed: %s",
						   tw_strerror(rc));
		}
		tw__rpc_client_expire(cl);
	}
	if (rep)
		rep->status = ss.status;
	return ss.status;
}

void tw__rpc_reply_release(struct tw_rpc_reply *rep)
{
	if (!rep)
		return;
	tw__rpc_arena_fini(&rep->arena);
	rep->env = NULL;
}

/* ---- receiving */

static void break_stream(struct tw_rpc_client *cl, const char *why)
{
	tw_log_warn("rpc: malformed stream from %s: %s; failing %u pending call(s)",
		    peer(cl), why, cl->inflight);
	set_errmsg(cl, "malformed stream from peer: %s", why);
	cl->broken = true;
	fail_all(cl, -TW_EMALFORMED);
}

static int deliver(struct tw_rpc_client *cl, const void *msg, size_t len, struct tw_rpc_arena *a)
{
	char why[256];
	Tailwind__Envelope *env;
	struct tw_rpc_hdr hdr;
	struct slot *s;
	const char *rmsg = "";
	uint64_t id = 0;
	int rc, status, err;

	rc = tw__rpc_frame_check(msg, len, cl->cfg.max_msg_size, &hdr, why, sizeof(why));
	if (rc) {
		cl->st.malformed++;
		break_stream(cl, why);
		return -TW_EMALFORMED;
	}
	/* A blocking call's reply goes straight into its caller's arena: decoded once. */
	if (tw__rpc_peek_request_id(msg, len, &id) == 0 && id) {
		s = &cl->slots[id & cl->mask];
		if (s->id == id && s->arena)
			a = s->arena;
	}
	cl->st.decodes++;
	rc = tw__rpc_decode(msg, len, cl->cfg.max_msg_size, a, &env, &hdr, why, sizeof(why));
	if (rc) {
		cl->st.malformed++;
		break_stream(cl, why);
		return -TW_EMALFORMED;
	}
	cl->peer_minor = hdr.minor;

	if (env->request_id == 0) {
		/* The peer answered something it could not attribute (e.g. a frame it could
		 * not decode): nothing to complete; keep the message for diagnosis. */
		status = tw__rpc_reply_status(env, &rmsg);
		cl->st.malformed++;
		if (status >= 0 && tw__rpc_validate_reply(env, NULL, 0) == TAILWIND__STATUS__STATUS_OK) {
			tw_log_ratelimited(TW_DIAG_WARN, "rpc: %s rejected a message: %s: %s",
					   peer(cl), tw__rpc_status_name(status), rmsg);
			set_errmsg(cl, "peer rejected a message: %s: %s", tw__rpc_status_name(status),
				   rmsg);
		}
		return 0;
	}

	s = &cl->slots[env->request_id & cl->mask];
	if (s->id != env->request_id) {
		cl->st.late_replies++;
		tw_log_debug("rpc: dropping reply %llu (timed out or unknown)",
			     (unsigned long long)env->request_id);
		return 0;
	}
	if (tw__rpc_validate_reply(env, why, sizeof(why)) != TAILWIND__STATUS__STATUS_OK) {
		cl->st.malformed++;
		tw_log_ratelimited(TW_DIAG_WARN, "rpc: bad reply from %s: %s", peer(cl),
				   why);
		set_errmsg(cl, "bad reply: %s", why);
		complete(cl, s, -TW_EMALFORMED, NULL);
		return 0;
	}
	status = tw__rpc_reply_status(env, &rmsg);
	if (env->body_case != s->expect_case &&
	    env->body_case != TAILWIND__ENVELOPE__BODY_ERROR_REPLY) {
		cl->st.malformed++;
		set_errmsg(cl, "reply of kind %s to a request expecting %s",
			   tw__rpc_body_name(env->body_case), tw__rpc_body_name(s->expect_case));
		complete(cl, s, -TW_EMALFORMED, NULL);
		return 0;
	}
	err = tw__rpc_status_to_err(status);
	if (env->body_case == TAILWIND__ENVELOPE__BODY_ERROR_REPLY && err == 0)
		err = -TW_EMALFORMED; /* an error reply must carry an error */
	if (err)
		set_errmsg(cl, "%s%s%s", tw__rpc_status_name(status), rmsg[0] ? ": " : "", rmsg);
	complete(cl, s, err, env);
	return 0;
}

int tw__rpc_client_on_recv(struct tw_rpc_client *cl, const void *msg, size_t len)
{
	int rc;

	if (cl->broken)
		return -TW_EMALFORMED;
	cl->st.msgs_rx++;
	cl->st.bytes_rx += len;
	if (cl->depth == 0) {
		cl->depth++;
		rc = deliver(cl, msg, len, &cl->arena);
		tw__rpc_arena_reset(&cl->arena);
		cl->depth--;
	} else {
		/* nested: the outer reply still lives in cl->arena */
		struct tw_rpc_arena tmp;

		tw__rpc_arena_init(&tmp, NULL, 0, cl->cfg.arena_limit);
		cl->depth++;
		rc = deliver(cl, msg, len, &tmp);
		cl->depth--;
		tw__rpc_arena_fini(&tmp);
	}
	return rc;
}

void tw__rpc_client_on_lost(struct tw_rpc_client *cl, int err)
{
	if (cl->lost)
		return;
	cl->lost = true;
	set_errmsg(cl, "channel lost: %s", tw_strerror(err));
	fail_all(cl, -TW_EPEERLOST);
}

int tw__rpc_client_expire(struct tw_rpc_client *cl)
{
	uint64_t now, next = UINT64_MAX;
	unsigned i;
	int n = 0;

	if (!cl->inflight) {
		cl->next_deadline_ns = UINT64_MAX;
		return 0;
	}
	now = tw_now_ns();
	if (now < cl->next_deadline_ns)
		return 0;
	for (i = 0; i < cl->cfg.max_inflight; i++) {
		struct slot *s = &cl->slots[i];

		if (!s->id || s->sending)
			continue;
		if (s->deadline_ns <= now) {
			set_errmsg(cl, "request %llu timed out after %u ms",
				   (unsigned long long)s->id, cl->cfg.timeout_ms);
			complete(cl, s, -ETIMEDOUT, NULL);
			n++;
		}
	}
	/* callbacks may have added calls: recompute from what is left */
	for (i = 0; i < cl->cfg.max_inflight; i++)
		if (cl->slots[i].id && cl->slots[i].deadline_ns < next)
			next = cl->slots[i].deadline_ns;
	cl->next_deadline_ns = next;
	return n;
}

int tw__rpc_client_next_timeout_ms(const struct tw_rpc_client *cl)
{
	uint64_t now, d;

	if (!cl->inflight || cl->next_deadline_ns == UINT64_MAX)
		return -1;
	now = tw_now_ns();
	if (cl->next_deadline_ns <= now)
		return 0;
	d = (cl->next_deadline_ns - now + 999999u) / 1000000u;
	return d > INT32_MAX ? INT32_MAX : (int)d;
}

unsigned tw__rpc_client_inflight(const struct tw_rpc_client *cl)
{
	return cl->inflight;
}

int tw__rpc_client_peer_minor(const struct tw_rpc_client *cl)
{
	return cl->peer_minor;
}

const char *tw__rpc_client_errmsg(const struct tw_rpc_client *cl)
{
	return cl->errmsg;
}

void tw__rpc_client_get_stats(const struct tw_rpc_client *cl, struct tw_rpc_client_stats *out)
{
	*out = cl->st;
}
