/*
 * tailwind/context.h — the transport of a primary's logs: its settings (struct tw_ctx_config,
 * the one place for them) and a context that shares it between many logs of a process
 * (docs/primary.md, "Many logs: the context").
 *
 * tw_primary_open(&tc, &cfg, ...) builds a private context from `tc` for one log: its own
 * fabric instance, connection and RPC client to every backup and (in async mode) progress
 * thread. A storage service runs dozens to hundreds of logs per process; a shared context owns
 * those once for every log opened on it:
 *
 *   tw_ctx_config_init(&cc); cc.backups = addrs; cc.n_backups = n;
 *   tw_ctx_open(&cc, &ctx, err, sizeof(err));      fabric, one channel + RPC client per backup,
 *                                                   one progress thread
 *   tw_primary_config_init(&cfg); cfg.log_id = 7;  the log's own settings;
 *   cfg.mode = TW_PRIMARY_ASYNC;                    the only mode a context serves
 *   tw_primary_open_on(ctx, &cfg, &p, err, sizeof(err));   a log; as many as needed
 *   tw_primary_append(p, ...); ...                  everything in tailwind/primary.h works
 *   tw_primary_close(p);                            every log first,
 *   tw_ctx_close(ctx);                              then the context
 *
 * What is shared and what is not: the fabric instance (its queues, registrations and file
 * descriptors), one channel and one RPC client per backup, the cluster key and handshake, the
 * progress thread, and the log arena its logs' segments are carved from (arena_size below;
 * docs/primary.md, "Memory: the log arena"). Each log keeps its own segments, write slots,
 * ownership (epoch, incarnation), acknowledgements, failover state and statistics; its RPCs
 * carry its own incarnation and their replies reach its own calls. The handshakes are the
 * context's: a log on a shared context counts none in its tw_primary_stats.rpc_handshake.
 *
 * A shared context has no coordinator yet (cc.coordinator must be NULL or "": -ENOTSUP); a
 * private one (tw_primary_open) does.
 *
 * tx_depth and max_inflight: a log keeps at most max_inflight writes in flight per backup; on
 * a context they all share one channel per backup, whose operations in flight (the writes of
 * every log, and the RPC sends) are capped by tx_depth — and below it by the provider's own
 * queue: min(tx_depth, tx_size) per channel on FI_EP_MSG providers (tcp and sockets report 256),
 * min(tx_size, 4 x tx_depth) per fabric on shm (docs/fabric.md, "Hints and what we do with the
 * answer"). When the logs together want more, a post waits on the progress thread, which
 * polls meanwhile, until a completion frees a place: every log behind it waits too, and a post
 * that finds no place within op_timeout_ms fails that backup for its log (failover). Size
 * tx_depth, where the provider allows, to at least the sum of max_inflight over the logs plus
 * a few RPCs (the default 1024 covers 64 logs at the default 8 and more); each log still holds
 * its own segment memory (tailwind/primary.h, "Memory").
 *
 * Threads: a context always runs one progress thread, however many logs it serves; logs on a
 * context are in async mode (TW_PRIMARY_ASYNC semantics, cfg.mode is ignored). The thread
 * serves the logs round robin: each pass seals and posts for every log, polls the fabric once,
 * then reaps every log. A log's control steps (segment rollover, a failover's copy) run on
 * that thread and delay the other logs by their length. Callbacks of every log run on it: a
 * callback must not wait for any log of the same context (-EDEADLK / -EAGAIN as in
 * tailwind/primary.h).
 *
 * Failures: a backup's channel that is lost (connection loss, an operation timeout) is lost for
 * every log on the context; each log runs its own failover (docs/failover.md). The context
 * connects to the backup again (once per loss) so that the logs whose buffers there are intact
 * reopen them instead of needing a spare; a log that was fenced there gets -TW_EFENCED.
 */
#ifndef TAILWIND_CONTEXT_H
#define TAILWIND_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tw_ctx_config {
	uint32_t size;  /* set by tw_ctx_config_init (tailwind/common.h, the ABI rule) */
	const char *const *backups;  /* addresses of the candidate backups ("127.0.0.1:4000", as
				      * twd prints them) */
	size_t n_backups;
	const char *const *zones;    /* NULL, or n_backups failure-domain labels parallel to
				      * backups ("" or NULL: none): no two replicas of a segment
				      * are placed in one zone, spares included (-TW_ENOBACKUP
				      * when the zones run out). Filled from the registrations
				      * with a coordinator. */
	const char *provider;        /* NULL: $FI_PROVIDER if set, else "tcp" ("mem" for tests) */
	const char *key_file;        /* cluster key for peer authentication (tailwind/backup.h,
				      * docs/operations.md): the handshake with every backup then
				      * proves the key both ways, and a backup that cannot prove
				      * it is not used. NULL: $TW_KEY_FILE if set and not empty,
				      * else none; "": none. Read once at the open. */
	bool busy_poll;              /* poll completions instead of blocking waits */
	uint64_t node_id;            /* sent in the handshake; 0: derived from host and pid */
	unsigned op_timeout_ms;      /* a write not completed by then fails the channel;
				      * default TW_DEFAULT_OP_TIMEOUT_MS */
	unsigned rpc_timeout_ms;     /* an RPC without a reply by then fails; default
				      * TW_DEFAULT_RPC_TIMEOUT_MS */
	unsigned connect_timeout_ms; /* per backup; default TW_DEFAULT_CONNECT_TIMEOUT_MS */
	unsigned tx_depth;           /* operations in flight per channel, all logs; default 1024
				      * (with max_inflight: see above). A shared context's only:
				      * the private context of tw_primary_open sizes its own
				      * (the log's max_inflight + 32) */
	size_t arena_size;           /* budget of the log arena every log's segments come from
				      * (docs/primary.md, "Memory: the log arena"): memory
				      * registered once and reused after tw_primary_unload /
				      * tw_primary_trim. 0 (default): a quarter of the machine's
				      * memory. A rollover that would exceed it fails the append
				      * with -ENOSPC (the log stays usable: unload segments,
				      * append again). */
	const char *coordinator;     /* tw_primary_open only (a shared context: NULL or "").
				      * NULL or "": none (the backups as given, epochs from the
				      * backups). "zk://host:port[,host:port...][/chroot]"
				      * (docs/coordination.md): with n_backups 0 the backups are
				      * the live registrations of that provider, with their
				      * zones; open and takeover take the next epoch from the
				      * coordinator (cfg.epoch, if set, is the least one) and hold
				      * the log's owner node until tw_primary_close. A live owner
				      * node makes tw_primary_open fail with -TW_ELOGEXISTS (take it
				      * over). */
	unsigned session_timeout_ms; /* with a coordinator: the session timeout asked for (zk),
				      * how long the owner node of a process that died or froze
				      * outlives it, so how soon a standby may take its logs
				      * over; also the wait for the coordinator at the open.
				      * Default TW_DEFAULT_SESSION_TIMEOUT_MS. connect_timeout_ms
				      * is not it: that one bounds the connect to each backup,
				      * and a takeover's recovery waits that long (not a session
				      * timeout) on a backup that does not answer. */
};

/* Fill `cfg` with the defaults above (backups NULL: the caller must set them). */
TW_API void tw_ctx_config_init_sized(struct tw_ctx_config *cfg, size_t size);
#define tw_ctx_config_init(cfg) tw_ctx_config_init_sized((cfg), sizeof(*(cfg)))

struct tw_ctx;

/*
 * Open a context: open a fabric instance, connect and handshake with every backup in
 * cfg->backups (unreachable ones are skipped with a warning, as tw_primary_open does), start the
 * progress thread. `cfg` and its strings are borrowed for the call. Returns 0 and *out, or
 * -EINVAL, -ENOTSUP (a coordinator), -TW_ENOPROV, -ENOMEM, -TW_ENOBACKUP (no backup usable);
 * errmsg_out (may be NULL) receives the detail.
 */
TW_API int tw_ctx_open(const struct tw_ctx_config *cfg, struct tw_ctx **out, char *errmsg_out,
		       size_t errmsg_len);

/* Detail of the last failure of the context (never NULL). */
TW_API const char *tw_ctx_errmsg(const struct tw_ctx *ctx);

/*
 * Close the context: stop the thread, disconnect, close the fabric. Every log opened on it must
 * be closed first: with a log still open it returns -EBUSY and does nothing. NULL is fine (0).
 */
TW_API int tw_ctx_close(struct tw_ctx *ctx);

/* The log arena of a context (tw_ctx_get_stats) or of a log opened alone (tw_primary_get_stats;
 * on a context, the context's): bytes and segments. Its size is fixed for 1.x (new fields come
 * from `reserved`), so the stats that embed it can still grow at their end. */
struct tw_arena_stats {
	uint64_t budget;       /* bytes the arena may map in all (arena_size) */
	uint64_t mapped;       /* bytes mapped and registered, in `extents` registrations */
	uint64_t used;         /* bytes held by segments now */
	uint64_t peak;         /* most bytes held at once */
	uint64_t extents;      /* registrations made (each once, kept until the close) */
	uint64_t huge_extents; /* of those, on explicit huge pages (else 4 KiB pages with
				* transparent huge pages advised) */
	uint64_t segments;     /* segments handed out */
	uint64_t reused;       /* of those, in memory that held an earlier segment */
	uint64_t refused;      /* rollovers or opens refused: the budget was exhausted */
	uint64_t populated;    /* bytes backed ahead of the writers by the library's thread
				* (docs/primary.md, "Memory: the log arena") */
	uint64_t reserved[3];  /* 0 */
};

struct tw_ctx_stats {
	uint64_t logs;        /* logs open on the context now */
	uint64_t channels;    /* channels connected now (one per usable backup) */
	uint64_t reconnects;  /* channels connected again after a loss */
	uint64_t resets;      /* fabric resets (shm: a dead peer blocks the others) */
	uint64_t loop_passes; /* passes of the progress thread over every log */
	struct tw_arena_stats arena; /* the log arena (fixed-size: fields may follow it) */
};

/* Copy the counters. Thread-safe. */
TW_API void tw_ctx_get_stats_sized(const struct tw_ctx *ctx, struct tw_ctx_stats *out,
				   size_t size);
#define tw_ctx_get_stats(ctx, out) tw_ctx_get_stats_sized((ctx), (out), sizeof(*(out)))

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_CONTEXT_H */
