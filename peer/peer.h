/*
 * peer/peer.h — one connection from a client (recovery, a reader, the context and its probes,
 * twctl and twbench) to a backup: connect, authenticate, handshake, RPC client, loss and
 * reconnection, written once.
 *
 * A peer is a struct the caller owns (embedded or in an array; it must not move while
 * connected, since the channel's user pointer is the peer). The fab is the caller's: one fab
 * usually carries many peers. Route the fab's events to the peers:
 *
 *   on_recv(arg, ch, msg, len): struct tw_peer *p = tw__chan_user(ch);
 *                               if (p && tw__peer_recv(p, msg, len)) ... p became lost
 *   on_lost(arg, ch, err):      struct tw_peer *p = tw__chan_user(ch);
 *                               if (p && tw__peer_lost(p, err)) ... p became lost
 *
 * or use tw__peer_fab_on_recv / tw__peer_fab_on_lost as they are when nothing else must happen
 * on a loss, and call tw__peer_expire after every tw__fab_progress (the fab has no timers).
 *
 * Threading: as proto/rpc.h: everything on the thread that drives the fab.
 */
#ifndef TW_PEER_PEER_H
#define TW_PEER_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/fabric.h"
#include "proto/rpc.h"

struct tw_auth_key;

/*
 * The backups one takeover gave up on: an address goes in when a connect or Handshake to it made
 * with this table ends in -ETIMEDOUT (a paused process: its kernel may hold the TCP connection,
 * nothing answers). A connect made with the table fails at once, as the timeout did, for an
 * address in it. The table belongs to one takeover (a local of takeover() in
 * primary/primary_open.c and of takeover_recorded() in primary/primary_coord.c: its recovery,
 * then the new log's open and context) and ends with it: no other open, no later takeover and
 * no probe sees it, and nothing but a connect's own timeout (never an RPC on an open channel)
 * puts an address in. Full: an address that does not fit is not remembered (a later step of the
 * takeover waits on it again).
 */
#define TW_PEER_SKIP_MAX 32
struct tw_peer_skip {
	unsigned n;
	char addr[TW_PEER_SKIP_MAX][TW_ADDR_MAX];
};

/* Whether `addr` is in `s` (NULL: an empty table). */
bool tw__peer_skip_has(const struct tw_peer_skip *s, const char *addr);
/* Remember `addr` in `s` (NULL: nothing; a full table forgets it). For a connect made without
 * the table whose timeout the caller decides to count (recovery's first round, recovery/). */
void tw__peer_skip_add(struct tw_peer_skip *s, const char *addr);

/* How a client connects: the same for every peer of one client. */
struct tw_peer_opts {
	const struct tw_auth_key *key; /* cluster key (NULL: no authentication); borrowed */
	uint64_t node_id;              /* 0: host id << 32 | pid */
	Tailwind__Role role;           /* named in the Handshake (and the key's transcript) */
	const char *node_name;         /* NULL ok; borrowed */
	uint64_t incarnation;          /* owner id stamped on every request (0: none) */
	/* Connect and create the RPC client only, no Handshake: the caller's first call is its
	 * own (primary_ctl.c's probe; a backup with a key refuses anything before a Handshake). */
	bool no_handshake;
	struct tw_rpc_config rpc;      /* the RPC client's settings (tw__rpc_config_init) */
	/* For the messages of a failed connect: the connect timeout the fab was given (0: not
	 * said) and the option that raises it ("" or NULL: none named). */
	unsigned connect_timeout_ms;
	const char *timeout_hint;
	/* NULL, or the takeover's table (above): an address in it fails at once with -ETIMEDOUT,
	 * and a timed-out connect or Handshake adds its address. Borrowed; the caller's thread
	 * alone uses it. */
	struct tw_peer_skip *skip;
};

/* Defaults: no key, node id from the host and process, `role`, RPC defaults. */
void tw__peer_opts_init(struct tw_peer_opts *o, Tailwind__Role role);

/* The step of tw__peer_connect that failed (tw_peer.failed). */
enum tw_peer_step {
	TW_PEER_OK = 0,        /* the last connect succeeded (or none was tried) */
	TW_PEER_CONNECT,       /* the fab's connect: nothing was sent */
	TW_PEER_RPC,           /* creating the RPC client: nothing was sent */
	TW_PEER_HANDSHAKE,     /* the Handshake (with the key's challenge-response) */
};

struct tw_peer {
	char addr[TW_ADDR_MAX];
	struct tw_chan *ch;        /* NULL: not connected */
	struct tw_rpc_client *rpc; /* NULL: not connected */
	void *user;                /* the caller's (the channel's user pointer is the peer) */
	bool up;                   /* connected and handshaken (may since have been lost) */
	bool lost;                 /* the channel failed or its reply stream broke; kept by
				    * tw__peer_close and during a connect (a half-open
				    * connection is never taken for a usable one), cleared when
				    * a connect succeeds */
	enum tw_peer_step failed;  /* which step of the last connect failed */
	uint64_t gen;              /* successful connects so far */
	/* From the last HandshakeReply. */
	int peer_minor;            /* the backup's protocol minor (-1: none yet) */
	uint64_t peer_node_id;
	uint64_t buffer_size;
	uint32_t buffers_total, buffers_free, buffers_max;
	char why[320];             /* why it is down (connect, authentication, loss) */
};

/* Zero `p`, copy `addr` (truncated to TW_ADDR_MAX - 1), keep `user`. */
void tw__peer_init(struct tw_peer *p, const char *addr, void *user);

/*
 * Connect `p` on `fab`, create its RPC client, stamp the incarnation, and run the Handshake
 * (with the key's challenge-response when o->key is set; none with o->no_handshake). Returns 0
 * (p->up, p->lost cleared; a loss during the connect of a peer already lost is not reported
 * again), or a negative code with p->failed saying which step failed, p->why what went wrong
 * in an operator's terms, and nothing left open: the fab's connect error (-ETIMEDOUT,
 * -ECONNREFUSED, ...), -EACCES (authentication), or the Handshake's error (-ENOTSUP,
 * -TW_EVERSION, -ETIMEDOUT, ...). Blocking (progresses `fab`).
 */
int tw__peer_connect(struct tw_peer *p, struct tw_fab *fab, const struct tw_peer_opts *o);

/* Destroy the RPC client (pending calls complete with -TW_ECLOSED), then close the channel.
 * p->why, p->gen and p->lost are kept (a lost peer stays lost until it connects again); p->up
 * is cleared. NULL-safe on a closed peer. */
void tw__peer_close(struct tw_peer *p);

/* Connected, handshaken and not lost. */
bool tw__peer_ok(const struct tw_peer *p);

/* A message arrived on p's channel. True when it broke the reply stream (p is lost now, and
 * was not before). */
bool tw__peer_recv(struct tw_peer *p, const void *msg, size_t len);
/* p's channel failed. True when p was not lost before. */
bool tw__peer_lost(struct tw_peer *p, int err);
/* Expire p's calls past their deadline (after each tw__fab_progress). */
void tw__peer_expire(struct tw_peer *p);

/* tw_fab_events callbacks for a fab whose channels all belong to peers and whose owner needs no
 * hook of its own on a loss (arg unused). */
void tw__peer_fab_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len);
void tw__peer_fab_on_lost(void *arg, struct tw_chan *ch, int err);

#endif /* TW_PEER_PEER_H */
