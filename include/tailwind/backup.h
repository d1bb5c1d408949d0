/*
 * tailwind/backup.h — the backup side of Tailwind: a pool of registered buffers (zeroed once, then
 * reused as they are under a fresh chain seed per segment) that primaries fill with one-sided
 * writes, the control RPCs that open, close, list, fence and free segment replicas, and a flusher
 * thread that writes closed buffers to segment files.
 *
 * The same object runs inside the `twd` daemon or inside a test process on a thread.
 *
 * Threading: one thread calls tw_backup_run(), the progress loop; every RPC handler runs on it.
 * The backup also owns a flusher thread (file writes never run on the progress thread: the tcp
 * provider moves incoming RMA data only while the backup polls its completion queue).
 * tw_backup_stop() and tw_backup_get_stats() are safe from any thread. Every other call is made
 * from the thread that owns the object, never concurrently with tw_backup_run(). The backup
 * lends nothing across calls: every pointer argument is borrowed for the call (copied where
 * kept), and every returned string is owned by the backup.
 *
 * No application code runs per replicated write: writes are one-sided and produce no completion
 * at the backup. The statistics make that visible (handler invocations per RPC kind).
 *
 * Errors: functions return 0 or a negative code (tw_strerror()); tw_backup_errmsg() gives the
 * detail of the last failure. Segment files are described in docs/operations.md.
 */
#ifndef TAILWIND_BACKUP_H
#define TAILWIND_BACKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TW_BACKUP_DEFAULT_BUFFER_SIZE (8u << 20) /* 8 MiB, as in the paper */
#define TW_BACKUP_DEFAULT_BUFFERS 16u
/* Most buffers the pool grows to by default (2 GiB of 8 MiB buffers): docs/operations.md,
 * "Sizing the buffer pool". */
#define TW_BACKUP_DEFAULT_MAX_BUFFERS 256u

struct tw_backup;

struct tw_backup_config {
	uint32_t size;  /* set by tw_backup_config_init (tailwind/common.h, the ABI rule) */
	/* libfabric provider as users type it ("tcp", "sockets", "shm", "verbs", "mem", ...);
	 * NULL: $FI_PROVIDER if set, else "tcp". */
	const char *provider;
	/* Listen address; NULL: 127.0.0.1 for IP providers. */
	const char *node;
	/* Listen port; NULL or "0": ephemeral (tw_backup_listen_addr() gives the real one). */
	const char *service;
	/* Directory of segment files; created if missing (its parent must exist). Required. */
	const char *dir;
	/* Buffers allocated and registered at open (default TW_BACKUP_DEFAULT_BUFFERS). The pool
	 * grows past them on demand, one buffer per open that finds none free, up to
	 * `max_buffers`; buffers that come back stay registered for reuse (never returned). */
	unsigned buffers;
	/* Size of each buffer in bytes, a multiple of the page size (default 8 MiB). */
	size_t buffer_size;
	/* Most buffers that may hold unflushed data at once (open + closed-but-not-yet-flushed):
	 * what this machine could flush on battery power. An open beyond it is refused with
	 * RESOURCE_EXHAUSTED. 0: equal to the pool's cap (`max_buffers`). */
	unsigned unflushed_limit;
	/* Busy-poll the fabric instead of blocking waits (lower latency, one core at 100%). */
	bool busy_poll;
	/* This backup's identity, reported in handshakes. 0: derived from the host and pid. */
	uint64_t node_id;
	/* Cluster key file for peer authentication (docs/operations.md, "Peer authentication"):
	 * 32 to 4096 random bytes, mode 0600 or stricter (group/world access is refused). With a
	 * key, a connection must complete the authenticated handshake before any other request;
	 * other requests are refused (UNAUTHENTICATED) and the connection closed. NULL:
	 * $TW_KEY_FILE if set and not empty, else none; "": none. Without a key every peer that
	 * can reach the address is served (as before). */
	const char *key_file;
	/* Cap of the pool: the most buffers it grows to (default TW_BACKUP_DEFAULT_MAX_BUFFERS).
	 * An open that finds every buffer in use and the pool at its cap is refused with
	 * RESOURCE_EXHAUSTED. Below `buffers` (0 included): equal to `buffers`, no growth. */
	unsigned max_buffers;
};

/* Fill `cfg` with the defaults above (dir NULL: the caller must set it). Never fails. */
TW_API void tw_backup_config_init_sized(struct tw_backup_config *cfg, size_t size);
#define tw_backup_config_init(cfg) tw_backup_config_init_sized((cfg), sizeof(*(cfg)))

/*
 * Create a backup: rebuild the segment index from cfg->dir (temporary files from an interrupted
 * flush are removed; corrupt segment files are reported with a warning and listed as corrupt),
 * allocate and register the pool's initial buffers, open the fabric, start listening and start
 * the flusher thread. `cfg` and its strings are borrowed for the call (copied). Returns 0 and
 * *out (owned by the caller, release with tw_backup_close()), or a negative code with a message
 * logged and in errmsg_out (may be NULL, errmsg_len bytes):
 * -EINVAL (bad configuration), -ENOMEM / -EAGAIN (pool allocation or registration failed; on
 * verbs usually RLIMIT_MEMLOCK), -TW_ENOPROV, -EBUSY (another backup holds the directory's
 * lock), or an errno from the storage directory. Blocking (reads every segment file once);
 * any thread, which then owns the object.
 */
TW_API int tw_backup_open(const struct tw_backup_config *cfg, struct tw_backup **out,
			  char *errmsg_out, size_t errmsg_len);

/* Address primaries connect to ("127.0.0.1:40123", "fi_shm://..."). Borrowed; valid until
 * tw_backup_close(). */
TW_API const char *tw_backup_listen_addr(const struct tw_backup *b);

/*
 * The progress loop: polls the fabric, serves RPCs, hands closed buffers to the flusher and
 * returns finished flushes to the pool. Returns 0 when tw_backup_stop() was called, or a negative
 * code if the fabric failed. Call it from one thread; it may be called again after it returned.
 */
TW_API int tw_backup_run(struct tw_backup *b);

/* Make tw_backup_run() return soon: sets an atomic flag and wakes the loop. Thread-safe.
 * Async-signal-safe with the libfabric providers (the wakeup is an eventfd write), not with the
 * in-process "mem" provider (a mutex); twd calls it from a sigwait() thread anyway. A stop
 * requested before tw_backup_run() starts makes it return at once; each run consumes it. */
TW_API void tw_backup_stop(struct tw_backup *b);

/*
 * The battery case: write every buffer that holds data to its segment file, open buffers
 * included (scanned first; their files say "open at shutdown" with the scanned valid length),
 * and wait until the flusher wrote them all. Every connection is shut first, so that no
 * write lands (and is acknowledged) after the scan; open buffers stay open in memory. Call
 * when tw_backup_run() is not running (typically after it returned).
 * Returns 0, or the first flush error (the other buffers are still attempted).
 */
TW_API int tw_backup_flush_all(struct tw_backup *b);

/* Stop the flusher (after finishing queued flushes), close every connection, deregister and
 * free the pool, free `b`. Unflushed open buffers are lost: call tw_backup_flush_all() first
 * when that matters. Returns 0, or -EIO when closed segments were still unflushed (their flush
 * failed: the copies here are lost; logged with the count). `b` is freed either way. NULL is
 * fine (0). */
TW_API int tw_backup_close(struct tw_backup *b);

/* Last failure's detail (never NULL; borrowed until the next call on `b`). */
TW_API const char *tw_backup_errmsg(const struct tw_backup *b);

/* RPC kinds counted by tw_backup_get_rpc_calls(). A later 1.x may add kinds before
 * TW_BACKUP_RPC_KINDS; the values here stay. */
enum tw_backup_rpc {
	TW_BACKUP_RPC_HANDSHAKE = 0,
	TW_BACKUP_RPC_OPEN,
	TW_BACKUP_RPC_CLOSE,
	TW_BACKUP_RPC_FREE,
	TW_BACKUP_RPC_LIST,
	TW_BACKUP_RPC_STATS,
	TW_BACKUP_RPC_SET_VERSION,
	TW_BACKUP_RPC_FENCE,
	TW_BACKUP_RPC_READ,
	TW_BACKUP_RPC_RELEASE,
	TW_BACKUP_RPC_PING,
	TW_BACKUP_RPC_RECOVERED, /* RecoveredOffset: recovery closes an open copy at its length */
	TW_BACKUP_RPC_OTHER, /* malformed or unknown messages, kinds a backup does not serve */
	TW_BACKUP_RPC_KINDS,
};

/* Short name of an RPC kind ("open", "close", ...). Static string, never NULL. */
TW_API const char *tw_backup_rpc_name(enum tw_backup_rpc kind);

/*
 * Filled up to the caller's size (tw_backup_get_stats): a later 1.x adds fields at the end
 * only. The per-kind RPC counts are behind tw_backup_get_rpc_calls(), so that a new kind does
 * not move the fields.
 */
struct tw_backup_stats {
	/* Control plane: every handler invocation. Replicated writes add nothing here. */
	uint64_t handler_calls;  /* sum of the per-kind counts */
	uint64_t rpc_errors;     /* replies with a status other than OK */
	uint64_t ctrl_msgs_in, ctrl_bytes_in;   /* control messages received */
	uint64_t ctrl_msgs_out, ctrl_bytes_out; /* control messages sent (replies) */
	/* Fabric work done by the progress thread (the fabric layer's own counters). */
	uint64_t cq_polls, cq_entries;
	uint64_t connections, connections_lost, connections_dropped; /* dropped: misbehaving peers */
	/* Pool. buffers: allocated and registered now (the initial ones plus those grown on
	 * demand; never shrinks); buffers_max: the cap it may grow to. */
	uint64_t buffers, buffer_size, unflushed_limit;
	/* free: available (reused as they are, not zeroed: docs/log-format.md §7); open: being
	 * written; closed: closed, waiting for or in their flush; loaded: clean copies of flushed
	 * segments held for read grants. */
	uint64_t buffers_free, buffers_open, buffers_closed, buffers_loaded;
	uint64_t opens_refused; /* RESOURCE_EXHAUSTED replies */
	/* Storage. */
	uint64_t segments_on_disk, segments_corrupt;
	uint64_t flushes, bytes_flushed, flush_errors;
	uint64_t loads; /* flushed segments loaded into a buffer for a read grant */
	/* CPU time of the whole process, microseconds (user + system). */
	uint64_t cpu_user_us, cpu_sys_us;
	/* Peer authentication (key configured): handshakes and requests refused because the peer
	 * had no key, a wrong one, or replayed a proof; each cost the peer its connection. */
	uint64_t auth_failures;
	uint64_t auth_ok; /* connections that proved the key */
	/* Buffers zeroed at an open because their stale bytes could have validated: opens
	 * without a chain seed (1.1 primaries) and seeds equal to the buffer's previous one. */
	uint64_t buffers_zeroed;
	uint64_t buffers_max;
	uint64_t buffers_grown; /* buffers added on demand since start (pool growths) */
	/* Readers (docs/readers.md): SetAcked served (also counted as TW_BACKUP_RPC_OTHER), of
	 * those, answers held because no reader of the log was active here, and held right now. */
	uint64_t set_acked, set_acked_held, set_acked_holding;
	/* Spare files (docs/operations.md, "Spare files"): freed segment files the flusher kept
	 * to write over instead of unlinking them, and segment files written over one. */
	uint64_t spares_kept, spares_reused;
};

/* Copy a consistent snapshot of the counters. Thread-safe. */
TW_API void tw_backup_get_stats_sized(const struct tw_backup *b, struct tw_backup_stats *out,
				      size_t size);
#define tw_backup_get_stats(b, out) tw_backup_get_stats_sized((b), (out), sizeof(*(out)))

/*
 * Handler invocations per RPC kind: calls_out[k] for k < n (kinds this library does not know
 * get 0), the same snapshot rules as tw_backup_get_stats. Returns the number of kinds this
 * library counts (TW_BACKUP_RPC_KINDS of its header). Thread-safe.
 *   uint64_t calls[TW_BACKUP_RPC_KINDS];
 *   tw_backup_get_rpc_calls(b, calls, TW_BACKUP_RPC_KINDS);
 */
TW_API size_t tw_backup_get_rpc_calls(const struct tw_backup *b, uint64_t *calls_out, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_BACKUP_H */
