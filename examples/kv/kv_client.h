/*
 * examples/kv/kv_client.h — the twkv client library (docs/kv.md, "Clients").
 *
 *   struct kvc *c;
 *   kvc_open(servers, n, &c, err, sizeof(err));     fetches the cluster map from a server
 *   kvc_put(c, key, klen, val, vlen, done, arg);    asynchronous: done(arg, status, ...) later
 *   kvc_get(c, key, klen, done, arg);
 *   while (kvc_inflight(c)) kvc_poll(c, -1);        callbacks run inside kvc_poll
 *   kvc_close(c);
 *
 * Requests are pipelined: many may be in flight on one connection per server, and replies come
 * in any order. The client sends a key's request to the server that served its partition last
 * (at first the owner in the map); a server that does not serve it answers NOT_OWNER and the
 * client asks the server that answer names ("owner N", from the lease's holder), else the next;
 * a lost connection sends the request on to the next server too (not a PUT, below);
 * RETRY (log memory full) asks the same server again later. When every server was asked once,
 * it waits (1 ms, doubling to 100 ms) before the next round, until the request's deadline. So
 * a failover shows as a pause, never as an error, unless it outlasts the deadline. The deadline
 * holds whatever the servers do: a request that a paused server, a half-open connection or a
 * peer that does not read keeps unanswered fails with -ETIMEDOUT when it passes (kvc_poll
 * never waits beyond the earliest deadline), and every socket is non-blocking. A server that
 * leaves a request unanswered for a quarter of the deadline (at least 250 ms, at most 1 s) is
 * passed over as if it had said NOT_OWNER: a paused old owner does not hold its clients up once
 * a standby serves the partition. Such a server is suspect until it answers anything: it gets
 * one request at a time (a probe, at most one per attempt time), the others go round it.
 *
 * A PUT is never sent again once any of its bytes went out to a server that then did not
 * acknowledge it: the connection was lost, the server left it unanswered for the quarter of the
 * deadline, or it answered UNKNOWN (it tried to append it and failed). That server may have
 * appended it, and a second attempt elsewhere would apply it twice (docs/kv.md, "Guarantees"):
 * the PUT fails with -KVC_EUNKNOWN instead. A PUT that timed out (-ETIMEDOUT) may have been
 * applied too. A PUT refused before any append (NOT_OWNER, RETRY) goes on to another server.
 *
 * One thread uses a client at a time; callbacks run on it, inside kvc_poll (they may submit
 * more requests). Not async-signal-safe.
 */
#ifndef TWKV_CLIENT_H
#define TWKV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "kv_cluster.h"
#include "kv_wire.h"

struct kvc;

/* A PUT's outcome is unknown: it may or may not have been applied (see above). Not an errno;
 * kvc_strerror() says it in words. */
#define KVC_EUNKNOWN 1000

/*
 * Result of a request: status 0 (done), -ENOENT (GET: no such key), -ETIMEDOUT (no server
 * answered it within the deadline), -KVC_EUNKNOWN (PUT: outcome unknown), -EINVAL (the server refused it as malformed or too large;
 * `value` then holds its reason as text), -EIO (the server failed). version: the record's
 * version (GET, PUT). value, vlen: GET's value, borrowed until the callback returns.
 */
typedef void (*kvc_cb)(void *arg, int status, uint64_t version, const uint8_t *value,
		       uint32_t vlen);

/*
 * Connect to a cluster: ask the servers in `servers` (kv addresses, host:port) in turn for the
 * cluster map; the first that has one gives the client every server and the partition owners.
 * timeout_ms: a request's deadline, retries included (0: 30 s). Returns 0 and *out, or -errno
 * with err set.
 */
int kvc_open(const char *const *servers, size_t n, unsigned timeout_ms, struct kvc **out,
	     char *err, size_t errlen);
void kvc_close(struct kvc *c);

/* A new deadline for the requests submitted from now on (ms; 0 counts as 1). */
void kvc_set_timeout(struct kvc *c, unsigned timeout_ms);

/* The map the client works from. */
const struct kv_cluster *kvc_map(const struct kvc *c);

/* Submit a request (key and value are copied before return). 0, or -EINVAL (sizes), -ENOMEM:
 * then cb is never called. */
int kvc_get(struct kvc *c, const void *key, uint16_t klen, kvc_cb cb, void *arg);
int kvc_put(struct kvc *c, const void *key, uint16_t klen, const void *value, uint32_t vlen,
	    kvc_cb cb, void *arg);

/* Send, receive, run due callbacks; wait up to timeout_us microseconds for something to arrive
 * (-1: no limit). Returns the number of callbacks run, or -errno. */
int kvc_poll(struct kvc *c, long timeout_us);
size_t kvc_inflight(const struct kvc *c);

struct kvc_stats {
	uint64_t not_owner;   /* NOT_OWNER answers (a request sent on to another server) */
	uint64_t redirects;   /* of which named the current owner ("owner N"), asked next */
	uint64_t retries;     /* RETRY answers */
	uint64_t resent;      /* requests sent again after a lost connection */
	uint64_t connects;    /* connections opened */
	uint64_t timeouts;    /* requests failed with -ETIMEDOUT */
	uint64_t unanswered;  /* attempts a server left unanswered (sent on to the next) */
	uint64_t unknown;     /* PUTs failed with -KVC_EUNKNOWN (outcome unknown, not resent) */
};
void kvc_get_stats(const struct kvc *c, struct kvc_stats *out);

/* A callback's or call's status in words: strerror(-status), or for -KVC_EUNKNOWN "outcome
 * unknown: the PUT may or may not have been applied". */
const char *kvc_strerror(int status);

/* Synchronous GET and PUT (they poll until done). Return the callback's status; GET copies at
 * most cap bytes of the value into buf and sets *vlen to its length. */
int kvc_get_sync(struct kvc *c, const void *key, uint16_t klen, void *buf, uint32_t cap,
		 uint32_t *vlen, uint64_t *version);
int kvc_put_sync(struct kvc *c, const void *key, uint16_t klen, const void *value,
		 uint32_t vlen, uint64_t *version);

/*
 * One request to the server at `addr` on a connection of its own (administration: MAP, STATS,
 * CONFIGURE, TAKEOVER). Waits up to timeout_ms for the reply. Returns 0 with *status and the
 * reply's body in *body (malloc'd, NUL-terminated, *len bytes; free it), or -errno.
 */
int kv_call(const char *addr, uint8_t op, const void *req, uint32_t req_len, unsigned timeout_ms,
	    uint8_t *status, char **body, uint32_t *len);

/*
 * Configure every server of `map` (CONFIGURE, "you <id>" and the map): first the servers that
 * own partitions, one after the other, each once its partitions serve, then the others (a
 * standby must find the owners in place, or it would take their logs over at once). Returns 0,
 * or -errno with err naming the server and its answer.
 */
int kv_configure(const struct kv_cluster *map, unsigned timeout_ms, char *err, size_t errlen);

#endif
