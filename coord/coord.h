/*
 * coord/coord.h — the coordinator: where backups register, and where a log's epochs and owner
 * live (docs/coordination.md). A small backend table in the manner of RAMCloud's
 * ExternalStorage: `static` (the address lists users pass today; no registry, epochs chosen by
 * asking the backups) and `zk` (ZooKeeper, through its threaded C client).
 *
 *   struct tw_coord *c;
 *   tw__coord_open("zk://127.0.0.1:2181/tailwind", 4000, &c, err, sizeof(err));
 *   tw__coord_register(c, &me);                       twd: ephemeral node, kept after expiry
 *   tw__coord_list_backups(c, &v, &n);                primary: live registrations
 *   tw__coord_take_log(c, log, 0, "host pid", true, &epoch);   next epoch + owner node
 *   tw__coord_close(c);                               deregisters, drops the owner node
 *
 * Thread-safe: every call may come from any thread (one mutex per coordinator; ZooKeeper calls
 * are synchronous and rare). Errors are negative errno / TW_E* codes; tw__coord_errmsg() says
 * what went wrong and what to do.
 */
#ifndef TW_COORD_COORD_H
#define TW_COORD_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TW_COORD_ADDR_MAX 128
#define TW_COORD_NAME_MAX 64 /* provider and zone labels, including the NUL */
#define TW_COORD_URL_MAX 512

enum tw__coord_kind {
	TW_COORD_STATIC = 0, /* "static:ADDR[,ADDR...]" (or no URL): the address list itself */
	TW_COORD_ZK = 1,     /* "zk://host:port[,host:port...][/chroot]" */
};

/* A parsed coordinator URL. */
struct tw_coord_url {
	enum tw__coord_kind kind;
	char hosts[TW_COORD_URL_MAX];  /* zk: "host:port,host:port"; static: the address list */
	char chroot[TW_COORD_URL_MAX]; /* zk: "/tailwind" when the URL names none; no trailing '/' */
};

/*
 * Parse `url`. Returns 0, or -EINVAL with a message in err (what is wrong and the expected
 * form). Accepted: "zk://H:P[,H:P...][/path]" (H a host name or IPv4 address or [IPv6], P
 * 1..65535, path components of [A-Za-z0-9._-]), "static:" followed by a comma-separated list.
 */
int tw__coord_url_parse(const char *url, struct tw_coord_url *out, char *err, size_t errlen);

/* A backup's registration: what its node holds. */
struct tw_coord_backup {
	char addr[TW_COORD_ADDR_MAX];     /* fabric address, as twd prints it */
	char provider[TW_COORD_NAME_MAX]; /* libfabric provider it listens on */
	char zone[TW_COORD_NAME_MAX];     /* failure domain ("" : none) */
	uint32_t buffers;                 /* buffers of its pool */
	uint32_t free_buffers;            /* free at the last update */
	uint64_t buffer_size;             /* bytes per buffer */
	char name[TW_COORD_NAME_MAX];     /* its node's name (filled by list; ignored on register) */
};

/*
 * The node encoding (text, one "key=value" per line after a "tailwind-backup 1" line):
 * readable with zkCli.sh `get`. Encode returns the length written (without the NUL), or
 * -ENOSPC / -EINVAL (a field holds a newline or '='; addr or provider empty). Decode returns 0,
 * or -EINVAL with a message naming the line (unknown version, missing or malformed field).
 * Unknown keys are ignored (a newer twd may add some).
 */
int tw__coord_backup_encode(const struct tw_coord_backup *b, char *buf, size_t len);
int tw__coord_backup_decode(const char *buf, size_t len, struct tw_coord_backup *out, char *err,
			   size_t errlen);

/* The node name of a registration: "b-" + 16 hex digits of a hash of provider and address
 * (deterministic, so a re-registration after a session expiry finds its own name). */
void tw__coord_backup_node_name(const struct tw_coord_backup *b, char *out, size_t len);

/*
 * Order registrations for replica choice (in place): zones interleaved round-robin, the zone
 * with the most free buffers first, and inside a zone most free buffers first (ties by address).
 * A primary that takes backups in this order and skips a zone it already uses puts the r
 * replicas of a segment in r zones whenever r zones exist.
 */
void tw__coord_backup_sort(struct tw_coord_backup *v, size_t n);

struct tw_coord;

/*
 * Open a coordinator from `url` (NULL or "": static with no addresses). zk: connect (up to
 * `timeout_ms`, also the session timeout asked for; 0: TW_DEFAULT_SESSION_TIMEOUT_MS), create the persistent folders
 * under the chroot. Returns 0 and *out, -EINVAL (bad URL), -ETIMEDOUT / -ECONNREFUSED (no
 * ZooKeeper server answered), -EIO (ZooKeeper refused), -ENOMEM. err receives the detail.
 */
int tw__coord_open(const char *url, unsigned timeout_ms, struct tw_coord **out, char *err,
		  size_t errlen);
/* Drop the owner nodes and the registration this handle holds, close. NULL is fine. */
void tw__coord_close(struct tw_coord *c);
enum tw__coord_kind tw__coord_kind(const struct tw_coord *c);
/* The last error's detail (empty when none). Valid until the next call on c. */
const char *tw__coord_errmsg(const struct tw_coord *c);

/*
 * Register `b` (an ephemeral node; zk) and keep it registered: after a session expiry the
 * coordinator reconnects and registers again. static: nothing. Returns 0 or an error.
 */
int tw__coord_register(struct tw_coord *c, const struct tw_coord_backup *b);
/* Update the registered free-buffer count (a no-op when unchanged or not registered). */
int tw__coord_update_free(struct tw_coord *c, uint32_t free_buffers);
/* Remove the registration now (clean shutdown). */
int tw__coord_deregister(struct tw_coord *c);

/*
 * The live registrations (zk) or the static list (addresses only), in tw__coord_backup_sort
 * order. *out is allocated (free() it); *n_out may be 0. A node that does not decode is skipped
 * with a warning naming it. Returns 0 or an error.
 */
int tw__coord_list_backups(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out);

/*
 * Allocate the next epoch of log `log_id`: max(stored + 1, floor), stored atomically (a
 * multi-op: version-checked set of the epoch node, and with `owner` also the owner node).
 * owner != NULL: also make this handle the log's owner: an ephemeral owner node holding the
 * epoch and `owner` (a description: host, pid). replace_owner: a live owner node of another
 * session is deleted in the same multi-op (a takeover); otherwise it makes the call fail with
 * -TW_EFENCED naming the owner. Concurrent calls get distinct epochs (the loser of a version
 * race retries). static: returns 0 with *epoch_out = 0 (automatic: the backups decide).
 */
int tw__coord_take_log(struct tw_coord *c, uint64_t log_id, uint64_t floor, const char *owner,
		      bool replace_owner, uint64_t *epoch_out);

/* Read a log's stored epoch and owner description (owner_out "" when no owner node). Returns
 * 0, -TW_ENOTFOUND (the coordinator knows no such log) or an error. static: -ENOTSUP. */
int tw__coord_log_info(struct tw_coord *c, uint64_t log_id, uint64_t *epoch_out, char *owner_out,
		      size_t owner_len);

/* Whether this handle still holds the owner node of `log_id` (false after a session expiry). */
bool tw__coord_owns(struct tw_coord *c, uint64_t log_id);

/*
 * Standby (docs/coordination.md, "Standby"): return once log `log_id` has no owner node. While
 * one exists, wait for its deletion with a ZooKeeper watch (no polling): the owner closed, or
 * its session expired. Returns 0 (no owner now; *waited_out true when an owner node was seen and
 * its deletion awaited, *gone_ns_out the CLOCK_REALTIME time the deletion was seen), -ETIMEDOUT
 * (timeout_ms passed; 0: wait for ever), or an error. A session expiry of our own handle
 * while waiting is survived (the keeper reconnects; the node is read again). on_wait (may be
 * NULL) is called on this thread each time the watch is set on an existing owner node, with
 * its text (newlines as spaces). static: returns 0 at once (no owners).
 */
int tw__coord_wait_owner_gone(struct tw_coord *c, uint64_t log_id, unsigned timeout_ms,
			     void (*on_wait)(void *arg, const char *owner), void *arg,
			     bool *waited_out, uint64_t *gone_ns_out);

/*
 * The per-log record of backups (logs/<id>/backups/<node name>, persistent): every backup that
 * was ever asked to open a segment of the log. tw__coord_log_add_backup records `b` (addr,
 * provider, zone are used) unless this handle already did; a primary calls it before it asks a
 * backup to open a segment, so the record always covers every backup that may hold a copy.
 * Returns 0 or an error (then the caller must not use that backup). static: 0, nothing kept.
 * tw__coord_log_backups returns the record (*out allocated, free() it; *n_out may be 0 for a log
 * recorded before this existed); -TW_ENOTFOUND for a log the coordinator does not know;
 * static: -ENOTSUP.
 */
int tw__coord_log_add_backup(struct tw_coord *c, uint64_t log_id, const struct tw_coord_backup *b);
int tw__coord_log_backups(struct tw_coord *c, uint64_t log_id, struct tw_coord_backup **out,
			 size_t *n_out);

/*
 * The registrations as tw__coord_list_backups, and (zk) a child watch on backups/ armed with
 * the listing: tw__coord_backups_changed then says whether a twd registered or went away
 * since (a new session, whose watches are gone, counts as a change), without asking the
 * server; false while no listing armed the watch (nothing to compare with). A primary
 * re-lists only when it changed. static: never changes.
 */
int tw__coord_watch_backups(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out);
bool tw__coord_backups_changed(struct tw_coord *c);
/* Wait (up to timeout_ms) until tw__coord_backups_changed would say true; returns it. */
bool tw__coord_wait_backups_changed(struct tw_coord *c, unsigned timeout_ms);

/* The logs the coordinator knows (ids ascending; *out allocated). static: -ENOTSUP. */
int tw__coord_list_logs(struct tw_coord *c, uint64_t **out, size_t *n_out);

/* ------------------------------------------------------------------ backends */

/*
 * A backend's table. Only scheme and list_backups are required; a NULL op gets the front end's
 * default (coord.c), which is the static coordinator's behaviour: open, close, register_backup,
 * update_free and deregister succeed doing nothing, take_log returns the floor as the epoch,
 * owns is true, wait_owner_gone and log_add_backup return 0, log_info, log_backups and list_logs
 * fail -ENOTSUP, watch_backups is list_backups, backups_changed is false.
 */
struct tw_coord_ops {
	const char *scheme;
	int (*open)(struct tw_coord *c, const struct tw_coord_url *u, unsigned timeout_ms);
	void (*close)(struct tw_coord *c);
	int (*register_backup)(struct tw_coord *c, const struct tw_coord_backup *b);
	int (*update_free)(struct tw_coord *c, uint32_t free_buffers);
	int (*deregister)(struct tw_coord *c);
	int (*list_backups)(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out);
	int (*take_log)(struct tw_coord *c, uint64_t log_id, uint64_t floor, const char *owner,
			bool replace_owner, uint64_t *epoch_out);
	int (*log_info)(struct tw_coord *c, uint64_t log_id, uint64_t *epoch_out, char *owner_out,
			size_t owner_len);
	bool (*owns)(struct tw_coord *c, uint64_t log_id);
	int (*wait_owner_gone)(struct tw_coord *c, uint64_t log_id, unsigned timeout_ms,
			       void (*on_wait)(void *arg, const char *owner), void *arg,
			       bool *waited_out, uint64_t *gone_ns_out);
	int (*log_add_backup)(struct tw_coord *c, uint64_t log_id, const struct tw_coord_backup *b);
	int (*log_backups)(struct tw_coord *c, uint64_t log_id, struct tw_coord_backup **out,
			   size_t *n_out);
	int (*list_logs)(struct tw_coord *c, uint64_t **out, size_t *n_out);
	bool (*backups_changed)(struct tw_coord *c);
	int (*watch_backups)(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out);
	bool (*wait_backups_changed)(struct tw_coord *c, unsigned timeout_ms);
};

struct tw_coord {
	const struct tw_coord_ops *ops;
	struct tw_coord_url url;
	char errmsg[512];
	void *impl; /* the backend's state */
};

extern const struct tw_coord_ops tw__coord_zk_ops;

/* For backends: set c->errmsg (printf-style). */
void tw__coord_err(struct tw_coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
