/*
 * examples/kv/kv_lease.h — read leases of a twkv server's partitions, tied to a ZooKeeper
 * session of the server's own (docs/kv.md, "Leased reads").
 *
 *   kv_lease_open("zk://h:p/root", me, session_ms, &l, err, len);
 *   kv_lease_acquire(l, part, false, stop, arg, err, len);   before the log is opened or taken
 *   ... kv_lease_valid(l, part, now) on every GET ...
 *   kv_lease_release(l, part);                               the partition is no longer served
 *   kv_lease_close(l);
 *
 * A partition's lease is the ephemeral node <root>/twkv-leases/p<N> (its text: the holder's
 * server id) of this server's session. It is valid until t_send + T·(1 − ε) − δ, t_send being
 * the monotonic time at which the last request about that node was sent whose answer said the
 * node is still ours (a create, or a zoo_aget every T/3), T the session timeout ZooKeeper
 * negotiated, ε = KV_LEASE_DRIFT, δ = KV_LEASE_MARGIN_MS. ZooKeeper cannot end the session (and
 * delete the node) before T has passed since it received that request, and a standby takes a
 * partition over only after its lease node is gone: so while the lease is valid, no other server
 * serves the partition. After a session expiry the leases of that session are never valid
 * again: the server opens a new session (kv_server.c, "Rejoining") and stands by.
 *
 * Thread-safe: acquire/release from any thread; kv_lease_valid and kv_lease_holder are two
 * atomic loads (the serving thread's GET path: no lock, no system call beyond the clock's).
 */
#ifndef TWKV_LEASE_H
#define TWKV_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_LEASE_DRIFT 0.01      /* ε: clock-rate difference bound between us and ZooKeeper */
#define KV_LEASE_MARGIN_MS 100u  /* δ: scheduling margin (a check to the reply's send) */

struct kv_lease;

/* Open a session on the ZooKeeper of `url` (zk://HOST:PORT[,...][/root]) for server `me`,
 * asking for session_ms. Waits up to 2 x session_ms for it. 0, or -errno with err set. */
int kv_lease_open(const char *url, int me, unsigned session_ms, struct kv_lease **out,
		  char *err, size_t errlen);
void kv_lease_close(struct kv_lease *l);

/* Whether the session expired: no lease of it is ever valid again (open another). */
bool kv_lease_expired(const struct kv_lease *l);

/* The session timeout ZooKeeper granted (ms): T. */
unsigned kv_lease_session_ms(const struct kv_lease *l);

/*
 * Make partition `part`'s lease node ours. While another session holds it: steal false, wait
 * for its deletion (a watch; its owner released it or its session expired), asking stop(arg)
 * every second (true: give up, -ECANCELED); steal true (an operator's TAKEOVER), delete it and
 * wait T·(1 + ε) + δ, past any lease its holder may still count on. Returns 0 (the lease valid
 * from now) or -errno with err set.
 */
int kv_lease_acquire(struct kv_lease *l, unsigned part, bool steal, bool (*stop)(void *),
		     void *arg, char *err, size_t errlen);
/* Drop partition part's lease (delete the node if ours). */
void kv_lease_release(struct kv_lease *l, unsigned part);

/* Whether this server may answer a GET of `part` at monotonic time now_ns. */
bool kv_lease_valid(const struct kv_lease *l, unsigned part, uint64_t now_ns);
/* The server the last answer named as the lease's holder when it was not us, or -1. */
int kv_lease_holder(const struct kv_lease *l, unsigned part);

#endif
