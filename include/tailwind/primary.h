/*
 * tailwind/primary.h — the primary side of Tailwind: an append-only log held in the primary's own
 * registered memory, cut into fixed-size segments, each replicated to `r` backups with one-sided
 * writes (one RDMA write per batch of entries, closed by one checksum entry).
 *
 * Life of a log:
 *   tw_ctx_config_init(&tc); tc.backups = addrs; tc.n_backups = n;   the transport
 *                                            (tailwind/context.h)
 *   tw_primary_config_init(&cfg); cfg.log_id = ...;                  the log
 *   tw_primary_open(&tc, &cfg, &p, err, sizeof(err));   connect, handshake, open segment 0
 *                                            on r backups (-TW_ELOGEXISTS: the log exists, take
 *                                            it over); or tw_primary_open_on(ctx, &cfg, ...)
 *                                            on a context shared by many logs
 *   tw_primary_append(p, buf, len, &lsn);    returns when all r backups hold the entry
 *   tw_primary_append_async(p, buf, len, cb, arg, &lsn);  cb(arg, status, lsn) later
 *   tw_primary_append_batch(p, iov, n, cb, arg, lsns);    n entries, one cb for all
 *   tw_primary_read(p, lsn, &data, &len);    read an entry back from the primary's memory
 *   tw_primary_close(p);                     drain, close RPC for the open segment, disconnect
 *
 * Copies: the payload is copied exactly once, into the segment buffer (tw_log_writer_append()).
 * The RDMA write sends from there; nothing else copies it.
 *
 * Memory: an open log holds its open segment in this process, segment_size bytes (8 MiB by
 * default), allocated and registered at the open of the segment — two with preopen — and keeps
 * every closed segment too, so that tw_primary_read() can serve any entry, until
 * tw_primary_unload() drops the segments below an id (tw_primary_trim() does it with the
 * backups' copies) or tw_primary_close(). On each of its r backups an open segment takes one
 * buffer of the backup's pool (twd --buffer-size, at least segment_size), two with preopen.
 * A hundred logs on a context are thus at least 100 x segment_size here and 100 buffers on each
 * backup (docs/operations.md, "Sizing the buffer pool").
 *
 * Threading (see docs/primary.md):
 *   TW_PRIMARY_SYNC  (default) no thread of its own. The caller drives everything: every call on
 *       one primary is made from one thread at a time (the caller serialises). Asynchronous
 *       appends are allowed too; their callbacks run on the caller's thread, inside
 *       tw_primary_append*(), tw_primary_progress(), tw_primary_flush() or tw_primary_close().
 *       A callback may append again (asynchronously or not, also across a rollover); it must
 *       not call tw_primary_finish() or tw_primary_close().
 *       The hot path takes no lock and allocates nothing (preallocated write slots).
 *   TW_PRIMARY_ASYNC the primary runs a progress thread that posts writes, polls
 *       completions, rolls segments over and runs the callbacks. tw_primary_append(),
 *       tw_primary_append_async(), tw_primary_flush(), tw_primary_read() and the getters are
 *       thread-safe: the calling thread reserves its place in the log with one atomic
 *       compare-and-swap, copies the payload there without a lock, and wakes the progress
 *       thread (which seals and posts) only when that thread sleeps and a batch is due; a
 *       mutex is taken only on the slow path (back-pressure, rollover, failure, finish).
 *       Callbacks run on the progress thread and must not wait for it: from a callback,
 *       tw_primary_append and tw_primary_flush fail at once with -EDEADLK;
 *       tw_primary_append_async works unless it would have to wait (segment full, back-
 *       pressure), then it fails with -EAGAIN; tw_primary_close is not allowed.
 *   tw_primary_close() is never called concurrently with any other call on the same primary.
 *
 * Ordering: acknowledgements (the return of tw_primary_append, the callbacks) are delivered
 * strictly in log order, even when the completions of a later write arrive first. If any write
 * fails, that append and every later one fail: there are no holes in the acknowledged log.
 *
 * Errors: functions return 0 or a negative code (tw_strerror()); tw_primary_errmsg() gives the
 * detail. No call hangs: writes fail after op_timeout_ms, RPCs after rpc_timeout_ms.
 *
 * Backup failure (docs/failover.md): a backup is lost on a write error, FI_SHUTDOWN / connection
 * loss, a write not completed within op_timeout_ms, or an RPC without a reply within
 * rpc_timeout_ms. If it held a replica of the open segment, the primary suspends appends (they
 * are accepted and wait, nothing is acknowledged), opens the segment on a spare backup from
 * cfg.backups, copies the written prefix there with one-sided writes, raises the segment's
 * replica version on every replica by RPC (SetReplicaVersion), and resumes: appends that were in
 * flight are acknowledged only once the replacement holds them too, so an acknowledged append is
 * always on r backups. Closed segments that had a replica on the lost backup are copied to a
 * spare from the primary's memory in the background (rerep_rate). Without a usable spare the log
 * fails with -TW_ENOBACKUP (message naming every backup and why it cannot be used); a fenced log
 * (a recovery took over) fails with -TW_EFENCED. Failed logs stay failed: every later append
 * returns the error at once.
 */
#ifndef TAILWIND_PRIMARY_H
#define TAILWIND_PRIMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <tailwind/common.h>
#include <tailwind/context.h>
#include <tailwind/recovery.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TW_PRIMARY_DEFAULT_SEGMENT_SIZE (8u << 20) /* 8 MiB, as in the paper */
#define TW_PRIMARY_DEFAULT_BATCH_BYTES (1u << 20) /* 1 MiB (docs/primary.md) */
#define TW_PRIMARY_MAX_REPLICAS 16u
#define TW_PRIMARY_MAX_INFLIGHT 1024u

enum tw_primary_mode {
	TW_PRIMARY_SYNC = 0,  /* caller-driven, no internal thread */
	TW_PRIMARY_ASYNC = 1, /* internal progress thread, callbacks on it */
};

struct tw_primary_config {
	uint32_t size;  /* set by tw_primary_config_init (tailwind/common.h, the ABI rule) */
	uint64_t log_id;
	uint64_t epoch;               /* 0 (default): automatic, one past every epoch the backups
				       * know of the log. The owner of a log is (epoch, a random
				       * incarnation id per open): backups refuse older epochs and
				       * other incarnations at the same epoch (docs/recovery.md). */
	unsigned replicas;            /* r; default 3; at most TW_PRIMARY_MAX_REPLICAS */
	size_t segment_size;          /* bytes per segment; default 8 MiB; page multiple, < 4 GiB */
	unsigned max_batch;           /* most entries per write; default 1024 (with
				       * max_batch_bytes, below: a write is due at either) */
	unsigned max_inflight;        /* writes in flight per backup; default 8 */
	enum tw_primary_mode mode;    /* default TW_PRIMARY_SYNC; on a shared context it must be
				       * TW_PRIMARY_ASYNC (its progress thread serves every log):
				       * tw_primary_open_on refuses another value with -EINVAL */
	unsigned open_retry_ms;       /* keep retrying refused opens (back-off) for so
				       * long; default TW_DEFAULT_OPEN_RETRY_MS */
	bool preopen;                 /* open segment n + 1 on its backups as soon as n is open, so
				       * a rollover does not wait for the open round trip (holds a
				       * second buffer per backup); default off */
	uint64_t rerep_rate;          /* bytes/s for re-replicating closed segments after a backup
				       * loss (background, between driver rounds); default
				       * 64 MiB/s; 0: unlimited */
	size_t max_batch_bytes;       /* bytes of entries (each with its 12-byte header) after
				       * which a write is due, beside max_batch: small entries
				       * batch deep, large ones do not; a write ends at the entry
				       * that reaches it, so it holds at most this plus one entry
				       * (one entry alone when smaller than one); default
				       * TW_PRIMARY_DEFAULT_BATCH_BYTES; > 0 */
};

/* Fill `cfg` with the defaults above (log_id 0: set it). Never fails. */
TW_API void tw_primary_config_init_sized(struct tw_primary_config *cfg, size_t size);
#define tw_primary_config_init(cfg) tw_primary_config_init_sized((cfg), sizeof(*(cfg)))

struct tw_primary;

/*
 * Open a NEW log on a private context built from `transport` (tailwind/context.h: the backups,
 * provider, key, timeouts, coordinator and arena budget; the log alone uses it, and it is
 * closed with the log): open a fabric instance, connect and handshake with every backup in
 * transport->backups (unreachable ones are skipped with a warning), ask each whether it holds anything
 * of the log (a log that exists is never written over: -TW_ELOGEXISTS, take it over instead), then
 * open segment 0 on `replicas` of them, the first one alone (two primaries creating the same
 * log meet there; the second gets -TW_EFENCED or -TW_ELOGEXISTS).
 * A backup that refuses (RESOURCE_EXHAUSTED) is replaced by another from the list; when the list
 * is exhausted, the open is retried with exponential back-off for up to open_retry_ms.
 * `transport`, `cfg` and their strings are borrowed for the call (copied). Blocks (up to the
 * timeouts).
 * Returns 0 and *out (owned by the caller; release with tw_primary_close()), or:
 * -EINVAL (bad configuration), -TW_ENOBACKUP (fewer than r backups reachable or accepting; the
 * message, logged and in errmsg_out if given, names each backup and why), -TW_ENOPROV, -ENOMEM,
 * -TW_ELOGEXISTS (the log already has data on a backup: a restarted primary must take it over),
 * -TW_EFENCED (another owner holds the log at this epoch or later) / -TW_EVERSION /
 * -TW_EREMOTE from a backup's reply.
 * errmsg_out (may be NULL, errmsg_len bytes) receives the failure's detail.
 */
TW_API int tw_primary_open(const struct tw_ctx_config *transport,
			   const struct tw_primary_config *cfg, struct tw_primary **out,
			   char *errmsg_out, size_t errmsg_len);

/*
 * Open a new log on a shared context `ctx` (tailwind/context.h): as tw_primary_open(), with the
 * context's transport. cfg->mode must be TW_PRIMARY_ASYNC (-EINVAL and a message naming the
 * field otherwise, as from tw_primary_takeover_on): the context's thread serves its logs.
 * Thread-safe: any thread may open and close logs on one context while others append; an open
 * pauses the context's other logs for its round trips.
 */
TW_API int tw_primary_open_on(struct tw_ctx *ctx, const struct tw_primary_config *cfg,
			      struct tw_primary **out, char *errmsg_out, size_t errmsg_len);

/*
 * Take a log over and continue it (Tailwind §3.4; docs/recovery.md, "Takeover"): fence the log
 * on every reachable backup with a new epoch (cfg->epoch, or 0: automatic) as a fresh
 * incarnation, recover it — every entry is handed to `on_entry(arg, e)` in log order, as
 * tw_recover() does, so the service can rebuild its state — then return a primary that owns the
 * log and appends after the recovered tail, in new segments (the first after every segment any
 * backup holds), so LSNs keep growing across incarnations. The previous owner, if it still
 * runs, is fenced: its appends fail with -TW_EFENCED.
 * Racing takeovers: the fences go to the backups one at a time in transport->backups order and a
 * refused fence ends the call (-TW_EFENCED naming the winner's epoch), so among takeovers that
 * chose the same epoch exactly one wins; a later one with a higher epoch overtakes the earlier
 * (whose appends then fail). `transport` and `cfg` as tw_primary_open (borrowed); res_out (may be NULL) receives
 * the recovery's counts. Returns 0 and *out, or the errors of tw_recover() (-TW_ELOST: a segment
 * is lost on every backup, nothing delivered; -TW_EFENCED: another owner won) and of
 * tw_primary_open(). On failure no primary is returned; entries delivered stay delivered.
 */
TW_API int tw_primary_takeover(const struct tw_ctx_config *transport,
			       const struct tw_primary_config *cfg, tw_recover_entry_fn on_entry,
			       void *arg, struct tw_recover_result *res_out,
			       struct tw_primary **out, char *errmsg_out, size_t errmsg_len);

/* Take a log over on a shared context `ctx`: as tw_primary_takeover() (the recovery runs on its
 * own connections, the continued log on the context's). */
TW_API int tw_primary_takeover_on(struct tw_ctx *ctx, const struct tw_primary_config *cfg,
				  tw_recover_entry_fn on_entry, void *arg,
				  struct tw_recover_result *res_out, struct tw_primary **out,
				  char *errmsg_out, size_t errmsg_len);

/*
 * Log cleaning: free the log's segments below `below_segment` on every backup (FreeSegments:
 * files removed, buffers returned) and in the primary's memory (as tw_primary_unload). The
 * open segment is never freed (below_segment is capped at it). Recovery and takeover then start
 * at `below_segment`. Sync mode: blocking, returns the number of segments released from memory
 * or the first error of a backup (the others still freed theirs). Async mode: the RPCs are
 * handed to the progress thread (failures are logged); returns at once; after
 * tw_primary_finish() it blocks as in sync mode (the thread no longer serves the log). A backup that is down
 * keeps its copies until a later free reaches it (frees are cumulative); recovery ignores copies
 * below the highest mark any backup reports.
 */
TW_API int tw_primary_trim(struct tw_primary *p, uint32_t below_segment);

/* The epoch this primary owns the log at (resolved at open / takeover). */
TW_API uint64_t tw_primary_epoch(const struct tw_primary *p);
/* The first segment this primary wrote (0 for a new log; after the recovered tail for a
 * takeover). */
TW_API uint32_t tw_primary_first_segment(const struct tw_primary *p);

/*
 * Close the log: tw_primary_finish() (wait for every append to be acknowledged or failed, stop
 * the progress thread, close RPC with the final offset and checksum for the open segment to its
 * replicas) if not done yet, then disconnect and free the log memory. Pending callbacks have all run when it
 * returns. Returns 0, or the first error met (the primary is freed anyway). NULL is fine.
 */
TW_API int tw_primary_close(struct tw_primary *p);

/*
 * Finish the log without freeing it: wait for every append (as tw_primary_flush), stop the
 * progress thread, and send the close RPC (final offset and checksum) for the open segment to
 * its replicas. Afterwards appends fail with -TW_ECLOSED; tw_primary_read, the getters and
 * tw_primary_get_stats (which then include the final close RPCs) still work, from one thread.
 * tw_primary_close() calls it if it was not called. Returns 0 or the first error (kept: a
 * second call returns the same value). Not concurrent with any other call on `p`.
 */
TW_API int tw_primary_finish(struct tw_primary *p);

/* Acknowledgement of an asynchronous append: status 0 (all r backups hold the entry) or a
 * negative code; lsn is the entry's position (the one returned by tw_primary_append_async). */
typedef void (*tw_append_cb)(void *arg, int status, uint64_t lsn);

/*
 * Append one entry (len payload bytes, 1 <= len <= segment_size - 20) and wait until all r
 * backups hold it and every earlier append was acknowledged. `data` is borrowed for the call
 * (copied once into the log). Rolls the segment over when the entry does not fit.
 * Returns 0 and *lsn_out (may be NULL), or -EINVAL (len), -TW_ENOBACKUP (a backup was lost and
 * no spare could replace it, or a rollover found no r backups: errmsg names each backup and why),
 * -TW_EFENCED (a recovery fenced the log), -ETIMEDOUT, -TW_ECLOSED (after
 * tw_primary_finish), -EDEADLK (async mode, called from a callback), -ENOSPC (the entry needs
 * a new segment and the log arena's budget is exhausted: nothing was appended and the log goes
 * on; release segments with tw_primary_unload / tw_primary_trim and append again).
 * Sync mode: the caller's thread progresses the fabric and may run other appends' callbacks.
 * Async mode: thread-safe; waits on a condition variable while the progress thread works.
 */
TW_API int tw_primary_append(struct tw_primary *p, const void *data, uint32_t len,
			     uint64_t *lsn_out);

/*
 * Append one entry without waiting. `data` is borrowed for the call (copied into the log before
 * return); *lsn_out (may be NULL) receives its position at once. `cb` (may be NULL) runs exactly
 * once when the entry is acknowledged or failed, in log order, with `arg`. Returns 0, or a
 * negative code (the primary already failed, bad len, -TW_ECLOSED, or -EAGAIN from a callback in
 * async mode that would have to wait): then cb is never called.
 * May block briefly for back-pressure (a whole batch, max_batch entries or max_batch_bytes bytes
 * of them, waiting while max_inflight writes are in flight) and for a segment rollover.
 * Threading as tw_primary_append().
 */
TW_API int tw_primary_append_async(struct tw_primary *p, const void *data, uint32_t len,
				   tw_append_cb cb, void *arg, uint64_t *lsn_out);

/*
 * Append n >= 1 entries in one call, in order, with one callback for all of them.
 * entries[i] (iov_base, iov_len: 1 <= iov_len <= segment_size - 20, as tw_primary_append) is
 * borrowed for the call: each is copied once into the log before return. lsns_out (may be
 * NULL) is an array of n that receives each entry's LSN; they grow with i. The entries follow
 * one another in the log; only where the call had to wait (back-pressure, a segment rollover,
 * both as for tw_primary_append_async) may another thread's append, or one made by a callback
 * run meanwhile in sync mode, land between two of them. The batch may cross a segment
 * boundary: the segment rolls over between two of its entries.
 * `cb` (may be NULL) runs exactly once, after every entry of the batch is acknowledged or
 * failed, in log order with every other callback, as cb(arg, status, lsn of the LAST entry):
 * status 0 means all n entries are on r backups; an error means the last one is not, and
 * possibly earlier ones (acknowledgements are in log order and a failed write fails every
 * later entry, so the last entry's status is the batch's). Threading and back-pressure as
 * tw_primary_append_async; the batch is sealed into as few writes as back-pressure allows.
 * Returns 0, or:
 *   -EINVAL: p or entries NULL, n 0, or any entry's length out of range. Checked for every
 *       entry before anything is copied: nothing of the batch was appended.
 *   the errors of tw_primary_append_async (the primary's sticky error, -TW_ECLOSED, -ENOSPC,
 *       -EAGAIN) when the call stops at entry k. Entries 0..k-1 were appended already (k may
 *       be 0): they stay in the log and are replicated and acknowledged (or failed) like any
 *       other entry, without a callback; lsns_out[0..k-1] hold their LSNs and lsns_out[k..n-1] is
 *       TW_LSN_NONE, so the caller can tell which were appended (tw_primary_flush, then
 *       tw_primary_acked_lsn, says whether they were acknowledged).
 *   On any error return `cb` is never called.
 */
TW_API int tw_primary_append_batch(struct tw_primary *p, const struct iovec *entries, size_t n,
				   tw_append_cb cb, void *arg, uint64_t *lsns_out);

/*
 * Wait until every append made so far is acknowledged or failed (their callbacks ran), and
 * the last segment rolled over is closed on its backups (its close is answered while the next
 * segment fills: docs/primary.md, "Segment rollover"), so that every segment below the open
 * one is closed. Returns 0, or the primary's error if it failed, or -EDEADLK (async mode, from
 * a callback).
 */
TW_API int tw_primary_flush(struct tw_primary *p);

/*
 * Sync mode only: seal and post waiting entries, poll completions and run due callbacks.
 * timeout_ms: the longest wait for a completion (0: poll once; -1: no limit). Returns the
 * number of appends acknowledged or failed by this call (>= 0), or a negative code (-EINVAL in
 * async mode).
 */
TW_API int tw_primary_progress(struct tw_primary *p, int timeout_ms);

/*
 * Sync mode, driven from the caller's event loop instead of a blocking tw_primary_progress
 * (docs/primary.md, "Driving a log from an event loop"). Put tw_primary_wait_fd(p) into the
 * loop's poll or epoll set (readable, level-triggered); before every sleep call
 * tw_primary_wait_prepare(p, max_ms):
 *   0   call tw_primary_progress(p, 0) before sleeping (something is ready);
 *   > 0 sleep at most that many ms, then call tw_primary_progress(p, 0) whether or not the
 *       descriptor became readable (deadlines of writes and RPCs are checked there);
 *   < 0 an error (below).
 * max_ms: the caller's own limit (-1: none); the answer is never above 100 ms. The sleep counts
 * as the log's own wait: a write's deadline runs while the loop sleeps (a loop that does other
 * work for over a second between two calls is treated as a paused process, whose gap does not
 * count). prepare may seal and post waiting entries; it runs no callback.
 *   loop: n = tw_primary_wait_prepare(p, -1); epoll_wait(epfd, ev, N, n < 0 ? 0 : n);
 *         handle the loop's events; tw_primary_progress(p, 0);
 * wait_fd returns the descriptor (owned by the primary, valid until tw_primary_close; the
 * same for the log's life), or -ENOTSUP when its fabric has none (shm: drive those
 * with tw_primary_progress(p, timeout) or use async mode), -EINVAL (NULL, async mode).
 * prepare fails the same way, and a refused prepare leaves the log as it was (a plain
 * sync-mode log, with its SetAcked per reap: docs/readers.md).
 */
TW_API int tw_primary_wait_fd(struct tw_primary *p);
TW_API int tw_primary_wait_prepare(struct tw_primary *p, int max_ms);

/*
 * Read back the entry at `lsn` from the primary's memory. *data_out points into the log
 * (borrowed until tw_primary_close(), or until its segment is released by tw_primary_unload /
 * tw_primary_trim, whichever comes first; never modified), *len_out is its length. Any appended
 * entry can be read, acknowledged or not. Returns 0, -TW_ENOTFOUND (no entry starts there),
 * -EINVAL. Thread-safe in async mode.
 */
TW_API int tw_primary_read(struct tw_primary *p, uint64_t lsn, const void **data_out,
			   uint32_t *len_out);

/* The same with a struct tw_pos. */
TW_API int tw_primary_read_pos(struct tw_primary *p, struct tw_pos pos, const void **data_out,
			       uint32_t *len_out);

/*
 * Free the primary's memory of the closed segments below `below_segment` (the open segment is
 * never released, nor the one whose close is still being answered: after tw_primary_flush
 * there is none). Reads of their entries then return -TW_ENOTFOUND. The backups keep their
 * copies: tw_primary_trim() drops those too (log cleaning). Their memory goes back to the log
 * arena for later segments (in async mode the progress thread gives it back shortly after).
 * Returns the number of segments released by this call, or -EINVAL. Thread-safe in async mode.
 */
TW_API int tw_primary_unload(struct tw_primary *p, uint32_t below_segment);

/* lsn just past the last acknowledged entry (0 before the first). Thread-safe. */
TW_API uint64_t tw_primary_acked_lsn(const struct tw_primary *p);

/* Detail of the last failure (never NULL; borrowed until the next call on `p`). */
TW_API const char *tw_primary_errmsg(const struct tw_primary *p);

/* Address of the backup holding replica `i` (0 <= i < r) of the open segment, NULL past r. */
TW_API const char *tw_primary_replica_addr(const struct tw_primary *p, unsigned i);

struct tw_primary_stats {
	uint64_t appends;          /* entries appended */
	uint64_t acked;            /* entries acknowledged successfully */
	uint64_t failed;           /* entries failed */
	uint64_t bytes;            /* payload bytes appended */
	uint64_t writes;           /* sealed writes (each sent to r backups) */
	uint64_t write_bytes;      /* bytes of those writes (one copy) */
	uint64_t segments;         /* segments opened */
	uint64_t rpcs;             /* control RPCs sent, all kinds, all backups (rpc_set_acked
				    * included) */
	uint64_t rpc_open, rpc_close, rpc_handshake, rpc_other;
	uint64_t open_refused;     /* RESOURCE_EXHAUSTED replies */
	uint64_t max_batch_seen;   /* largest batch sealed into one write */
	uint64_t inflight_peak;    /* most writes in flight at once */
	uint64_t wakeups;          /* async mode: app thread woke the progress thread */
	/* Backup failure (docs/failover.md). */
	uint64_t backups_lost;     /* backups marked lost (never used again by this primary) */
	uint64_t failovers;        /* suspensions of the open segment that ended in a resume */
	uint64_t rereplications;   /* replicas re-created on a spare (open and closed segments) */
	uint64_t rerep_bytes;      /* bytes copied to spares for them */
	uint64_t rerep_pending;    /* closed segments still short of a replica (no spare yet) */
	uint64_t suspended_ns;     /* total time appends were suspended by failovers */
	uint64_t suspended_last_ns; /* length of the last suspension */
	struct tw_arena_stats arena; /* the arena its segments come from (its context's) */
	/* SetAcked sent (the acknowledged position for readers, docs/readers.md): about one per
	 * replica per second per busy log nobody reads, one per round trip with readers. */
	uint64_t rpc_set_acked;
	/* One-sided writes its context's fabric completed (all its logs', on a shared context;
	 * each replica counts), and of those the ones whose completion already meant "placed":
	 * shm's fast path, where the writer copies the bytes itself (docs/fabric.md "Passive shm
	 * backups"). 0 on other providers. */
	uint64_t fab_writes;
	uint64_t fab_fast_writes;
	/* Async mode: writes sealed by an appender that met a whole batch waiting, instead of
	 * the progress thread (docs/primary.md, "Who seals"); the rest of `writes` were sealed
	 * by the thread that drives the log. */
	uint64_t appender_seals;
	/* Where the acknowledged writes spent their time, summed in ns over `writes_timed` of
	 * them (docs/primary.md, "Where a write's time goes"): from its seal to its post, in the
	 * post calls to its r replicas (a transport that pushes back keeps the driver there), from
	 * their return to the last replica's completion as the driver read it, and from there to
	 * its acknowledgement (the reap, which also waits for every older write). Writes that
	 * failed or that a failover repaired are left out. */
	uint64_t writes_timed;
	uint64_t write_seal_post_ns;
	uint64_t write_posting_ns;
	uint64_t write_post_done_ns;
	uint64_t write_done_ack_ns;
	/* Time the log's driver spent in segment rollovers, summed in ns (docs/primary.md,
	 * "Segment rollover"): the drain of the full segment and the opens of the next (and the
	 * answers to the close before, if still out); the log's appends wait meanwhile. The full
	 * segment's close is answered while the next one fills, outside this time. */
	uint64_t roll_ns;
};

/* Copy the counters. Thread-safe (a consistent enough snapshot for reporting). */
TW_API void tw_primary_get_stats_sized(const struct tw_primary *p, struct tw_primary_stats *out,
				       size_t size);
#define tw_primary_get_stats(p, out) tw_primary_get_stats_sized((p), (out), sizeof(*(out)))

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_PRIMARY_H */
