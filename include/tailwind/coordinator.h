/*
 * tailwind/coordinator.h — the coordinator (docs/coordination.md) as an operator's tool or a
 * backup's host program sees it: register a backup, list the registered backups and the logs,
 * read a log's epoch and owner, take a log's next epoch. twd and twctl are built on it; the
 * library's own primaries and standbys use the coordinator through tw_ctx_config.coordinator.
 *
 *   struct tw_coordinator *c;
 *   tw_coordinator_open("zk://127.0.0.1:2181/tailwind", 0, &c, err, sizeof(err));
 *   tw_coordinator_register(c, addr, "tcp", "rack1", 64, 60, 8 << 20);     twd
 *   tw_coordinator_list(c, NULL, &l);  ... tw_registrations_at(l, i)->addr ...
 *   tw_registrations_free(l);
 *   tw_coordinator_close(c);          deregisters, drops the owner nodes it holds
 *
 * URLs: "zk://HOST:PORT[,HOST:PORT...][/chroot]" (ZooKeeper), or "static:ADDR[,ADDR...]"
 * (no registry: the list itself). Thread-safe: any call from any thread. Errors are negative
 * errno or TW_E* codes; tw_coordinator_errmsg() says what went wrong and what to do. Strings
 * handed out are the library's, borrowed as each call says.
 */
#ifndef TAILWIND_COORDINATOR_H
#define TAILWIND_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether `url` is a coordinator URL; 0, or -EINVAL with why_out saying what is wrong and the
 * expected form. Thread-safe. */
TW_API int tw_coordinator_check_url(const char *url, char *why_out, size_t why_len);

/* The longest zone or provider label a registration holds, without its NUL. */
#define TW_COORDINATOR_LABEL_MAX 63

struct tw_coordinator;

/*
 * Connect (zk: up to timeout_ms, also the session timeout asked for; 0:
 * TW_DEFAULT_SESSION_TIMEOUT_MS) and create the
 * folders under the chroot. Returns 0 and *out, -EINVAL (bad URL), -ETIMEDOUT / -ECONNREFUSED
 * (no ZooKeeper server answered), -EIO (ZooKeeper refused), -ENOMEM; errmsg_out says why.
 */
TW_API int tw_coordinator_open(const char *url, unsigned timeout_ms,
			       struct tw_coordinator **out, char *errmsg_out, size_t errmsg_len);

/* Drop the owner nodes and the registration this session holds, and close. NULL: 0. Always 0. */
TW_API int tw_coordinator_close(struct tw_coordinator *c);

/* The last failure's detail ("" when none); valid until the next call on c. */
TW_API const char *tw_coordinator_errmsg(const struct tw_coordinator *c);

/*
 * Register this backup (zk: an ephemeral node, registered again after a session expiry; static:
 * nothing): its address as twd printed it, provider, zone ("" or NULL: none; at most
 * TW_COORDINATOR_LABEL_MAX bytes, no newline or '='), its pool's capacity in buffers, how many
 * an open can still get, and the buffer size. Returns 0 or an error.
 */
TW_API int tw_coordinator_register(struct tw_coordinator *c, const char *addr,
				   const char *provider, const char *zone, uint32_t buffers,
				   uint32_t free_buffers, uint64_t buffer_size);
/* The registration's free-buffer count (written only when it changed). */
TW_API int tw_coordinator_update_free(struct tw_coordinator *c, uint32_t free_buffers);
/* Remove the registration now (a clean shutdown). */
TW_API int tw_coordinator_deregister(struct tw_coordinator *c);

/* One backup's registration (the library's: a later 1.x may add fields at the end). */
struct tw_registration {
	const char *node;       /* its node's name ("" for a static list) */
	const char *addr;       /* fabric address */
	const char *provider;   /* libfabric provider it listens on ("" when unknown) */
	const char *zone;       /* failure domain ("": none) */
	uint32_t buffers;       /* its pool's capacity */
	uint32_t free_buffers;  /* what an open could still get at the last update */
	uint64_t buffer_size;
};

struct tw_registrations;

/*
 * log_id NULL: the live registrations (zk) or the static list; else the record of the backups
 * ever asked to hold a segment of *log_id (-TW_ENOTFOUND: the coordinator knows no such log;
 * static: -ENOTSUP). Returns 0 and *out (free it with tw_registrations_free), or an error.
 */
TW_API int tw_coordinator_list(struct tw_coordinator *c, const uint64_t *log_id,
			       struct tw_registrations **out);
TW_API size_t tw_registrations_count(const struct tw_registrations *l);
/* Entry i (NULL past the end); borrowed until tw_registrations_free. */
TW_API const struct tw_registration *tw_registrations_at(const struct tw_registrations *l,
							 size_t i);
/* NULL is fine. Always 0. */
TW_API int tw_registrations_free(struct tw_registrations *l);

/* The logs the coordinator knows, ascending, into *ids_out (free() it) and *n_out (may be 0).
 * static: -ENOTSUP. */
TW_API int tw_coordinator_logs(struct tw_coordinator *c, uint64_t **ids_out, size_t *n_out);

/* A log's stored epoch and its owner's description (owner_out "" when it has no owner). 0,
 * -TW_ENOTFOUND (no such log there) or an error; static: -ENOTSUP. */
TW_API int tw_coordinator_log_info(struct tw_coordinator *c, uint64_t log_id, uint64_t *epoch_out,
				   char *owner_out, size_t owner_len);

/*
 * The next epoch of log_id: max(stored + 1, floor), stored atomically, and this session made
 * the log's owner (an ephemeral node holding the epoch and `owner`, a description: host, pid)
 * until it closes. replace_owner: a live owner of another session is replaced (a takeover);
 * otherwise -TW_EFENCED naming it. static: 0 with *epoch_out 0 (the backups decide).
 */
TW_API int tw_coordinator_take_log(struct tw_coordinator *c, uint64_t log_id, uint64_t floor,
				   const char *owner, int replace_owner, uint64_t *epoch_out);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_COORDINATOR_H */
