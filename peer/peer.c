/*
 * peer/peer.c — a client's connection to a backup (peer/peer.h): connect, key challenge and
 * handshake (proto/auth.c), RPC client (proto/rpc_client.c), loss, reconnection.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "peer/peer.h"
#include "proto/auth.h"

/* A non-zero node id for this process: host id << 32 | pid. */
static uint64_t own_node_id(void)
{
	uint64_t node = (uint64_t)gethostid() << 32 | (uint64_t)getpid();

	return node ? node : 1;
}

void tw__peer_opts_init(struct tw_peer_opts *o, Tailwind__Role role)
{
	memset(o, 0, sizeof(*o));
	o->role = role;
	tw__rpc_config_init(&o->rpc);
}

void tw__peer_init(struct tw_peer *p, const char *addr, void *user)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->addr, sizeof(p->addr), "%s", addr ? addr : "");
	p->user = user;
	p->peer_minor = -1;
}

bool tw__peer_skip_has(const struct tw_peer_skip *s, const char *addr)
{
	for (unsigned i = 0; s && addr && i < s->n; i++)
		if (strcmp(s->addr[i], addr) == 0)
			return true;
	return false;
}

void tw__peer_skip_add(struct tw_peer_skip *s, const char *addr)
{
	if (!s || tw__peer_skip_has(s, addr) || s->n >= TW_PEER_SKIP_MAX)
		return;
	snprintf(s->addr[s->n++], sizeof(s->addr[0]), "%s", addr);
}

/* Write into `why` what a failed connect to `addr` means in an operator's terms (refused,
 * timeout, no route, not a twd). `fab` (may be NULL) for the provider's detail. */
static void connect_why(char *why, size_t len, struct tw_fab *fab, int err,
			unsigned timeout_ms, const char *timeout_hint)
{
	const char *detail = fab ? tw__fab_errmsg(fab) : "";
	const char *hint = timeout_hint && timeout_hint[0] ? timeout_hint : NULL;

	switch (-err) {
	case ETIMEDOUT:
		snprintf(why, len, "cannot connect: connect timeout, no answer within %u ms (is twd "
			 "running there, is the address reachable?%s%s)", timeout_ms,
			 hint ? " " : "", hint ? hint : "");
		break;
	case EHOSTUNREACH:
	case ENETUNREACH:
		snprintf(why, len, "cannot connect: no route to host (%s; check the address and this "
			 "machine's routes)", tw_strerror(err));
		break;
	case ENOPROTOOPT:
		/* libfabric tcp (prov/net/src/xnet_cm.c): the reply to its connect request was
		 * not its handshake (wrong version or malformed). */
		snprintf(why, len, "cannot connect: something accepted the TCP connection but did "
			 "not answer the libfabric handshake (not a twd, a twd with another "
			 "provider, or a proxy or firewall in between)");
		break;
	case ECONNREFUSED:
		snprintf(why, len, "cannot connect: connection refused (nothing listens there: is "
			 "twd running on that port, with the same provider? A twd that is out of "
			 "file descriptors also refuses: see its log)");
		break;
	default:
		snprintf(why, len, "cannot connect: %s%s%s (check the address, that twd runs there, "
			 "and that both sides use the same provider)", tw_strerror(err),
			 detail && detail[0] ? ": " : "", detail ? detail : "");
		break;
	}
}

/* The Handshake on p's fresh RPC client; the reply's figures into p. */
static int handshake(struct tw_peer *p, const struct tw_peer_opts *o)
{
	struct tw_rpc_reply rep;
	int rc;

	/* With a key: challenge, check the backup's MAC, prove ours (proto/auth.h). */
	rc = tw__auth_client_handshake(p->rpc, o->key, o->node_id ? o->node_id : own_node_id(),
				      o->role, o->node_name, &rep, p->why, sizeof(p->why));
	if (rc == 0 && rep.env && rep.env->handshake_reply) {
		const Tailwind__HandshakeReply *h = rep.env->handshake_reply;

		p->peer_minor = tw__rpc_client_peer_minor(p->rpc);
		p->peer_node_id = h->node_id;
		p->buffer_size = h->buffer_size;
		p->buffers_total = h->buffers_total;
		p->buffers_free = h->buffers_free;
		p->buffers_max = h->buffers_max ? h->buffers_max : h->buffers_total;
	}
	tw__rpc_reply_release(&rep);
	return rc; /* p->why says which: -EACCES, -TW_EVERSION, -ENOTSUP, no answer */
}

int tw__peer_connect(struct tw_peer *p, struct tw_fab *fab, const struct tw_peer_opts *o)
{
	int rc;

	p->up = false;
	p->failed = TW_PEER_CONNECT; /* p->lost stays until the Handshake is done (below) */
	if (tw__peer_skip_has(o->skip, p->addr)) {
		p->ch = NULL;
		snprintf(p->why, sizeof(p->why), "cannot connect: a connect to it timed out earlier "
			 "in this takeover; not waiting on it again (once the log is open, its context "
			 "probes it and takes it up when it answers)");
		return -ETIMEDOUT;
	}
	rc = tw__fab_connect(fab, p->addr, &p->ch);
	if (rc < 0) {
		p->ch = NULL;
		if (rc == -ETIMEDOUT)
			tw__peer_skip_add(o->skip, p->addr);
		connect_why(p->why, sizeof(p->why), fab, rc, o->connect_timeout_ms,
			    o->timeout_hint);
		return rc;
	}
	tw__chan_set_user(p->ch, p);
	p->failed = TW_PEER_RPC;
	rc = tw__rpc_client_create(p->ch, &o->rpc, &p->rpc);
	if (rc < 0) {
		p->rpc = NULL;
		snprintf(p->why, sizeof(p->why), "rpc client: %s", tw_strerror(rc));
		tw__peer_close(p);
		return rc;
	}
	if (o->incarnation)
		tw__rpc_client_set_incarnation(p->rpc, o->incarnation);
	p->failed = TW_PEER_HANDSHAKE;
	rc = o->no_handshake ? 0 : handshake(p, o);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			tw__peer_skip_add(o->skip, p->addr);
		tw__peer_close(p);
		return rc;
	}
	p->failed = TW_PEER_OK;
	p->up = true;
	p->lost = false;
	p->gen++;
	p->why[0] = '\0';
	return 0;
}

void tw__peer_close(struct tw_peer *p)
{
	if (p->ch)
		tw__chan_set_user(p->ch, NULL);
	tw__rpc_client_close(&p->rpc, &p->ch);
	p->up = false;
}

bool tw__peer_ok(const struct tw_peer *p)
{
	return p->up && !p->lost && p->rpc && p->ch && !tw__chan_is_lost(p->ch);
}

bool tw__peer_recv(struct tw_peer *p, const void *msg, size_t len)
{
	int rc;

	if (!p->rpc)
		return false;
	/* Replies are matched to their calls by request id (proto/rpc_client.c). */
	rc = tw__rpc_client_on_recv(p->rpc, msg, len);
	if (rc >= 0 || p->lost)
		return false;
	p->lost = true;
	snprintf(p->why, sizeof(p->why), "broken reply stream: %s", tw_strerror(rc));
	return true;
}

bool tw__peer_lost(struct tw_peer *p, int err)
{
	bool first = !p->lost;

	if (first)
		snprintf(p->why, sizeof(p->why), "connection lost: %s", tw_strerror(err));
	p->lost = true;
	if (p->rpc)
		tw__rpc_client_on_lost(p->rpc, err);
	return first;
}

void tw__peer_expire(struct tw_peer *p)
{
	if (p->rpc)
		tw__rpc_client_expire(p->rpc);
}

void tw__peer_fab_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_peer *p = tw__chan_user(ch);

	(void)arg;
	if (p)
		(void)tw__peer_recv(p, msg, len);
}

void tw__peer_fab_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct tw_peer *p = tw__chan_user(ch);

	(void)arg;
	if (p)
		(void)tw__peer_lost(p, err);
}
