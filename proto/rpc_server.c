/*
 * proto/rpc_server.c — RPC server: frame check, decode, validation, dispatch by request kind,
 * reply. Per-channel state is only kept for misbehaving channels (strike counts). Driven by the
 * fab's thread (the backup's progress thread); see rpc.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"

#define SERVER_ARENA_FIRST 32768u
#define STRIKE_SLOTS 64u

struct strike {
	struct tw_chan *ch;
	unsigned n;
};

struct tw_rpc_server {
	struct tw_rpc_config cfg;
	struct tw_rpc_server_ops ops;
	void *arg;
	struct tw_rpc_arena arena;
	unsigned char *arena_first;
	unsigned char *txbuf;
	int depth;
	uint64_t start_ns;
	struct strike strikes[STRIKE_SLOTS];
	struct tw_rpc_server_stats st;
	struct tw_rpc__chan_ops cops;
};

void tw__rpc__server_set_chan_ops(struct tw_rpc_server *srv, const struct tw_rpc__chan_ops *ops)
{
	srv->cops = *ops;
}

int tw__rpc_server_create(const struct tw_rpc_config *cfg, const struct tw_rpc_server_ops *ops,
			 void *arg, struct tw_rpc_server **out)
{
	struct tw_rpc_config c;
	void *block;
	struct tw_rpc_server *srv;
	int rc;

	rc = tw__rpc__alloc(cfg, sizeof(*srv), 0, SERVER_ARENA_FIRST, &c, &block);
	if (rc)
		return rc;
	srv = block;
	srv->cfg = c;
	if (ops)
		srv->ops = *ops;
	srv->arg = arg;
	srv->arena_first = (unsigned char *)(srv + 1);
	srv->txbuf = srv->arena_first + SERVER_ARENA_FIRST;
	tw__rpc_arena_init(&srv->arena, srv->arena_first, SERVER_ARENA_FIRST, srv->cfg.arena_limit);
	srv->start_ns = tw_now_ns();
	srv->cops.send = tw__chan_send;
	srv->cops.close = tw__chan_close;
	srv->cops.peer = tw__chan_peer;
	*out = srv;
	return 0;
}

void tw__rpc_server_destroy(struct tw_rpc_server *srv)
{
	if (!srv)
		return;
	tw__rpc_arena_fini(&srv->arena);
	free(srv); /* arena_first and txbuf are in the same block */
}

void tw__rpc_server_get_stats(const struct tw_rpc_server *srv, struct tw_rpc_server_stats *out)
{
	*out = srv->st;
}

size_t tw__rpc_list_max_entries(const struct tw_rpc_server *srv)
{
	size_t m = srv->cfg.max_msg_size;

	if (m <= TW_RPC__LIST_OVERHEAD)
		return 0;
	return (m - TW_RPC__LIST_OVERHEAD) / TW_RPC__SEGINFO_MAX;
}

size_t tw__rpc_server_max_msg(const struct tw_rpc_server *srv)
{
	return srv->cfg.max_msg_size;
}

/* ---- per-channel strikes */

static struct strike *strike_find(struct tw_rpc_server *srv, struct tw_chan *ch)
{
	unsigned i;

	for (i = 0; i < STRIKE_SLOTS; i++)
		if (srv->strikes[i].ch == ch)
			return &srv->strikes[i];
	return NULL;
}

/* Count a strike; true when the channel has used up its allowance. */
static bool strike(struct tw_rpc_server *srv, struct tw_chan *ch)
{
	struct strike *s = strike_find(srv, ch), *victim = NULL;
	unsigned i;

	if (!s) {
		for (i = 0; i < STRIKE_SLOTS; i++) {
			struct strike *c = &srv->strikes[i];

			if (!c->ch) {
				victim = c;
				break;
			}
			if (!victim || c->n < victim->n)
				victim = c;
		}
		s = victim;
		s->ch = ch;
		s->n = 0;
	}
	return ++s->n > srv->cfg.max_strikes;
}

void tw__rpc_server_on_lost(struct tw_rpc_server *srv, struct tw_chan *ch)
{
	struct strike *s = strike_find(srv, ch);

	if (s) {
		s->ch = NULL;
		s->n = 0;
	}
}

static int close_chan(struct tw_rpc_server *srv, struct tw_chan *ch, int reason, const char *why)
{
	tw_log_ratelimited(TW_DIAG_WARN, "rpc: closing channel to %s: %s", srv->cops.peer(ch), why);
	tw__rpc_server_on_lost(srv, ch);
	srv->st.closed++;
	if (srv->ops.on_close)
		srv->ops.on_close(srv->arg, ch, reason);
	srv->cops.close(ch);
	return -TW_EMALFORMED;
}

/* ---- replies */

static void send_env(struct tw_rpc_server *srv, struct tw_chan *ch, const Tailwind__Envelope *env,
		     unsigned char *buf)
{
	size_t len;
	int rc;

	rc = tw__rpc_encode(env, buf, srv->cfg.max_msg_size, srv->cfg.max_msg_size, &len);
	if (rc == -EMSGSIZE) {
		Tailwind__ErrorReply er = TAILWIND__ERROR_REPLY__INIT;
		Tailwind__Envelope e2 = TAILWIND__ENVELOPE__INIT;

		tw_log_error("rpc: %s reply to %s does not fit in %zu bytes",
			     tw__rpc_body_name(env->body_case), srv->cops.peer(ch),
			     srv->cfg.max_msg_size);
		er.status = TAILWIND__STATUS__STATUS_INTERNAL;
		er.message = (char *)"reply too large for the maximum message size";
		e2.request_id = env->request_id;
		e2.epoch = env->epoch;
		e2.body_case = TAILWIND__ENVELOPE__BODY_ERROR_REPLY;
		e2.error_reply = &er;
		rc = tw__rpc_encode(&e2, buf, srv->cfg.max_msg_size, srv->cfg.max_msg_size, &len);
	}
	if (rc) {
		srv->st.send_errors++;
		return;
	}
	rc = srv->cops.send(ch, buf, len);
	if (rc) {
		srv->st.send_errors++;
		tw_log_ratelimited(TW_DIAG_WARN, "rpc: reply to %s not sent: %s", srv->cops.peer(ch),
				   tw_strerror(rc));
		return;
	}
	srv->st.msgs_tx++;
	srv->st.bytes_tx += len;
}

static void send_error(struct tw_rpc_server *srv, struct tw_chan *ch, uint64_t request_id,
		       uint64_t epoch, Tailwind__Status status, uint32_t kind, const char *why,
		       unsigned char *buf)
{
	Tailwind__ErrorReply er = TAILWIND__ERROR_REPLY__INIT;
	Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT;
	char msg[TW_RPC_MESSAGE_MAX + 1];

	snprintf(msg, sizeof(msg), "%s", why);
	er.status = status;
	er.message = msg;
	er.kind = kind;
	env.request_id = request_id;
	env.epoch = epoch <= (uint64_t)TW_RPC_ID_MAX ? epoch : 0;
	env.body_case = TAILWIND__ENVELOPE__BODY_ERROR_REPLY;
	env.error_reply = &er;
	send_env(srv, ch, &env, buf);
}

/* ---- built-in parts of handshake / stats / ping */

static int prefill(struct tw_rpc_server *srv, struct tw__rpc_call *call, struct tw_rpc_arena *a)
{
	switch (call->op) {
	case TW_RPC_HANDSHAKE:
		call->reply.handshake.major = TW_RPC_MAJOR;
		call->reply.handshake.minor = TW_RPC_MINOR;
		call->reply.handshake.node_id = srv->ops.node_id;
		break;
	case TW_RPC_PING:
		call->reply.ping.nonce = call->req->ping->nonce;
		call->reply.ping.payload = call->req->ping->payload;
		break;
	case TW_RPC_STATS: {
		Tailwind__StatsReply *r = &call->reply.stats;
		Tailwind__HandlerCount *hc;
		Tailwind__HandlerCount **hp;
		unsigned i;

		hc = tw__rpc_arena_alloc(a, sizeof(*hc) * TW_RPC_OP_COUNT);
		hp = tw__rpc_arena_alloc(a, sizeof(*hp) * TW_RPC_OP_COUNT);
		if (!hc || !hp)
			return -ENOMEM;
		for (i = 0; i < TW_RPC_OP_COUNT; i++) {
			tailwind__handler_count__init(&hc[i]);
			hc[i].kind = (uint32_t)TW_RPC_OP_REQ_CASE(i);
			hc[i].calls = srv->st.calls[i]; /* this one included */
			hc[i].errors = srv->st.errors[i];
			hp[i] = &hc[i];
		}
		r->n_handlers = TW_RPC_OP_COUNT;
		r->handlers = hp;
		r->rpc_msgs_rx = srv->st.msgs_rx;
		r->rpc_msgs_tx = srv->st.msgs_tx;
		r->rpc_bytes_rx = srv->st.bytes_rx;
		r->rpc_bytes_tx = srv->st.bytes_tx;
		r->rpc_malformed = srv->st.malformed;
		r->rpc_closed = srv->st.closed;
		r->uptime_ms = (tw_now_ns() - srv->start_ns) / 1000000u;
		break;
	}
	default:
		break;
	}
	return 0;
}

/* ---- handler helpers */

void *tw__rpc_call_alloc(struct tw__rpc_call *call, size_t n)
{
	return tw__rpc_arena_alloc(call->priv_arena, n);
}

int tw__rpc_call_fail(struct tw__rpc_call *call, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(call->msgbuf, sizeof(call->msgbuf), fmt, ap);
	va_end(ap);
	/* the reply body's status/message are set after the handler returns */
	call->has_msg = true;
	call->fail_err = err;
	return err;
}

int tw__rpc_call_failed(struct tw__rpc_call *call, int err)
{
	if (!call->msgbuf[0])
		snprintf(call->msgbuf, sizeof(call->msgbuf), "%s", tw_strerror(err));
	call->has_msg = true;
	call->fail_err = err;
	return err;
}

/* Set status and message on the reply body generically (every reply: field 1 and 2). */
static void reply_set_status(struct tw__rpc_call *call, int status, const char *msg)
{
	const ProtobufCMessageDescriptor *d = tw__rpc__reply_desc((int)call->op);
	const ProtobufCFieldDescriptor *fs = protobuf_c_message_descriptor_get_field(d, 1);
	const ProtobufCFieldDescriptor *fm = protobuf_c_message_descriptor_get_field(d, 2);
	char *m = (char *)msg;

	memcpy((char *)&call->reply + fs->offset, &status, sizeof(status));
	memcpy((char *)&call->reply + fm->offset, &m, sizeof(m));
}

static int reply_get_status(struct tw__rpc_call *call, const char **msg_out)
{
	const ProtobufCMessageDescriptor *d = tw__rpc__reply_desc((int)call->op);
	const ProtobufCFieldDescriptor *fs = protobuf_c_message_descriptor_get_field(d, 1);
	const ProtobufCFieldDescriptor *fm = protobuf_c_message_descriptor_get_field(d, 2);
	int status;

	memcpy(&status, (char *)&call->reply + fs->offset, sizeof(status));
	memcpy(msg_out, (char *)&call->reply + fm->offset, sizeof(*msg_out));
	return status;
}

/* The admit hook refused a request: error reply (the hook's owner closes the channel). */
static int refuse(struct tw_rpc_server *srv, struct tw_chan *ch, const Tailwind__Envelope *env,
		  int err, const char *why, unsigned char *txbuf)
{
	Tailwind__Status st = tw__rpc_err_to_status(err);

	srv->st.refused++;
	if (st == TAILWIND__STATUS__STATUS_OK)
		st = TAILWIND__STATUS__STATUS_INTERNAL;
	send_error(srv, ch, env->request_id, env->epoch, st, (uint32_t)env->body_case,
		   why[0] ? why : tw_strerror(err), txbuf);
	return 0;
}

/* Status, message and epoch of a served call's reply (rc: the handler's result), then send it. */
static void send_reply(struct tw_rpc_server *srv, struct tw_chan *ch, struct tw__rpc_call *call,
		       int rc, uint64_t request_id, unsigned char *txbuf)
{
	Tailwind__Envelope renv = TAILWIND__ENVELOPE__INIT;
	const char *rmsg;
	int status, op = (int)call->op;

	status = reply_get_status(call, &rmsg);
	if (rc < 0) {
		int err = call->has_msg && call->fail_err < 0 ? call->fail_err : rc;

		if (status == TAILWIND__STATUS__STATUS_OK)
			status = tw__rpc_err_to_status(err);
		if (status == TAILWIND__STATUS__STATUS_OK)
			status = TAILWIND__STATUS__STATUS_INTERNAL;
		if (!call->has_msg && (!rmsg || !rmsg[0]))
			snprintf(call->msgbuf, sizeof(call->msgbuf), "%s", tw_strerror(rc));
		if (call->has_msg || !rmsg || !rmsg[0])
			rmsg = call->msgbuf;
	} else if (call->has_msg) {
		rmsg = call->msgbuf;
		if (status == TAILWIND__STATUS__STATUS_OK && call->fail_err < 0)
			status = tw__rpc_err_to_status(call->fail_err);
	}
	if (status < TAILWIND__STATUS__STATUS_OK || status > TAILWIND__STATUS__STATUS_UNAUTHENTICATED) {
		tw_log_error("rpc: %s handler set unknown status %d", tw__rpc_op_name(op), status);
		status = TAILWIND__STATUS__STATUS_INTERNAL;
	}
	if (!rmsg)
		rmsg = "";
	if (strnlen(rmsg, TW_RPC_MESSAGE_MAX + 1) > TW_RPC_MESSAGE_MAX) {
		if (rmsg != call->msgbuf)
			snprintf(call->msgbuf, sizeof(call->msgbuf), "%s", rmsg);
		call->msgbuf[TW_RPC_MESSAGE_MAX] = '\0';
		rmsg = call->msgbuf;
	}
	reply_set_status(call, status, rmsg);
	if (status != TAILWIND__STATUS__STATUS_OK)
		srv->st.errors[op]++;

	renv.request_id = request_id;
	renv.epoch = call->reply_epoch <= (uint64_t)TW_RPC_ID_MAX ? call->reply_epoch : 0;
	renv.body_case = TW_RPC_OP_REPLY_CASE(op);
	renv.handshake_reply = (Tailwind__HandshakeReply *)(void *)&call->reply;
	send_env(srv, ch, &renv, txbuf);
}

/* ---- serving one message */

static int serve(struct tw_rpc_server *srv, struct tw_chan *ch, const void *msg, size_t len,
		 struct tw_rpc_arena *a, unsigned char *txbuf)
{
	char why[TW_RPC_MESSAGE_MAX];
	struct tw__rpc_call call;
	Tailwind__Envelope *env;
	struct tw_rpc_hdr hdr;
	Tailwind__Status vs;
	tw_rpc_handler_fn fn;
	int rc, op;

	rc = tw__rpc_frame_check(msg, len, srv->cfg.max_msg_size, &hdr, why, sizeof(why));
	if (rc == -TW_EVERSION) {
		/* A frame of another major: do not decode it; say which version we speak. */
		srv->st.malformed++;
		if (strike(srv, ch))
			return close_chan(srv, ch, rc, why);
		send_error(srv, ch, 0, 0, TAILWIND__STATUS__STATUS_UNSUPPORTED, 0, why, txbuf);
		return 0;
	}
	if (rc) {
		srv->st.malformed++;
		return close_chan(srv, ch, rc, why);
	}
	srv->st.decodes++;
	rc = tw__rpc_decode(msg, len, srv->cfg.max_msg_size, a, &env, &hdr, why, sizeof(why));
	if (rc) {
		srv->st.malformed++;
		if (strike(srv, ch))
			return close_chan(srv, ch, rc, "too many malformed messages");
		send_error(srv, ch, 0, 0, TAILWIND__STATUS__STATUS_INVALID_ARGUMENT, 0, why, txbuf);
		return 0;
	}
	vs = tw__rpc_validate_request(env, why, sizeof(why));
	if (vs != TAILWIND__STATUS__STATUS_OK) {
		uint32_t kind = (uint32_t)env->body_case;

		if (vs == TAILWIND__STATUS__STATUS_UNSUPPORTED) {
			/* a newer peer's request kind or version: not a strike */
			srv->st.unsupported++;
			tw_log_info("rpc: unsupported request from %s: %s", srv->cops.peer(ch), why);
		} else {
			srv->st.malformed++;
			tw_log_ratelimited(TW_DIAG_WARN, "rpc: invalid request from %s: %s",
					   srv->cops.peer(ch), why);
			if (strike(srv, ch))
				return close_chan(srv, ch, -TW_EMALFORMED, "too many malformed messages");
		}
		send_error(srv, ch, env->request_id, env->epoch, vs, kind, why, txbuf);
		return 0;
	}

	op = tw__rpc_op_of_case(env->body_case);
	if (srv->ops.admit) {
		why[0] = '\0';
		rc = srv->ops.admit(srv->arg, ch, (enum tw_rpc_op)op, why, sizeof(why));
		if (rc < 0)
			return refuse(srv, ch, env, rc, why, txbuf);
	}
	fn = srv->ops.handlers[op];
	if (!fn && op != TW_RPC_HANDSHAKE && op != TW_RPC_STATS && op != TW_RPC_PING) {
		srv->st.unsupported++;
		snprintf(why, sizeof(why), "no handler for %s on this peer", tw__rpc_op_name(op));
		send_error(srv, ch, env->request_id, env->epoch, TAILWIND__STATUS__STATUS_UNSUPPORTED,
			   (uint32_t)env->body_case, why, txbuf);
		return 0;
	}

	memset(&call, 0, sizeof(call));
	call.srv = srv;
	call.ch = ch;
	call.op = (enum tw_rpc_op)op;
	call.req = env;
	call.reply_epoch = env->epoch;
	call.priv_arena = a;
	protobuf_c_message_init(tw__rpc__reply_desc(op), &call.reply);
	tailwind__rkey__init(&call.rkey);
	tailwind__segment_meta__init(&call.meta);

	/* Counted before it runs: a handler that publishes the server's counters (the backup's
	 * open and close do, before their answer) includes its own call. */
	srv->st.calls[op]++;
	rc = prefill(srv, &call, a);
	if (rc == 0 && fn)
		rc = fn(srv->arg, &call);
	if (rc == TW_RPC_DEFERRED)
		return 0; /* answered later (tw__rpc_server_answer) */
	if (rc > 0)
		rc = 0;
	send_reply(srv, ch, &call, rc, env->request_id, txbuf);
	return 0;
}

int tw__rpc_server_answer(struct tw_rpc_server *srv, struct tw_chan *ch, enum tw_rpc_op op,
			  uint64_t request_id, uint64_t epoch, tw_rpc_handler_fn fill, void *arg)
{
	struct tw_rpc_arena tmp, *a = &srv->arena;
	unsigned char *buf = srv->txbuf;
	struct tw__rpc_call call;
	int rc;

	if ((unsigned)op >= TW_RPC_OP_COUNT || !request_id)
		return -EINVAL;
	if (srv->depth > 0) {
		/* Inside a handler (or a send that progressed): the outer call owns the arena and
		 * the transmit buffer. */
		buf = malloc(srv->cfg.max_msg_size);
		if (!buf)
			return -ENOMEM;
		tw__rpc_arena_init(&tmp, NULL, 0, srv->cfg.arena_limit);
		a = &tmp;
	}
	srv->depth++;
	memset(&call, 0, sizeof(call));
	call.srv = srv;
	call.ch = ch;
	call.op = op;
	call.reply_epoch = epoch;
	call.priv_arena = a;
	protobuf_c_message_init(tw__rpc__reply_desc((int)op), &call.reply);
	tailwind__rkey__init(&call.rkey);
	tailwind__segment_meta__init(&call.meta);
	rc = fill(arg, &call);
	if (rc > 0)
		rc = 0;
	send_reply(srv, ch, &call, rc, request_id, buf);
	srv->depth--;
	if (a == &tmp) {
		tw__rpc_arena_fini(&tmp);
		free(buf);
	} else {
		tw__rpc_arena_reset(a);
	}
	return 0;
}

int tw__rpc_server_on_recv(struct tw_rpc_server *srv, struct tw_chan *ch, const void *msg,
			  size_t len)
{
	int rc;

	srv->st.msgs_rx++;
	srv->st.bytes_rx += len;
	if (srv->depth == 0) {
		srv->depth++;
		rc = serve(srv, ch, msg, len, &srv->arena, srv->txbuf);
		tw__rpc_arena_reset(&srv->arena);
		srv->depth--;
	} else {
		/* Re-entered (a send progressed the fab): the outer call still owns the arena
		 * and the transmit buffer. */
		struct tw_rpc_arena tmp;
		unsigned char *buf = malloc(srv->cfg.max_msg_size);

		if (!buf)
			return 0; /* dropped; the peer times out */
		tw__rpc_arena_init(&tmp, NULL, 0, srv->cfg.arena_limit);
		srv->depth++;
		rc = serve(srv, ch, msg, len, &tmp, buf);
		srv->depth--;
		tw__rpc_arena_fini(&tmp);
		free(buf);
	}
	return rc;
}
