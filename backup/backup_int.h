/*
 * backup/backup_int.h — internals of the backup (include/tailwind/backup.h): buffer pool,
 * segment index, connections, flusher jobs. Everything here is touched only by the progress
 * thread (the one in tw_backup_run, or the owner thread while run is not running), except the
 * fields marked "flusher lock" and "stats lock".
 */
#ifndef TW_BACKUP_BACKUP_INT_H
#define TW_BACKUP_BACKUP_INT_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/backup.h>

#include <tailwind/log_format.h>

#include "fabric/fabric.h"
#include "backup/metalog.h"
#include "backup/segfile.h"

/* A segment in messages: log-segment, both hex. */
#define SEGF "%016" PRIx64 "-%016" PRIx64

/* ------------------------------------------------------------------ buffer pool (pool.c) */

enum pool_state {
	POOL_FREE = 0, /* available (holds stale bytes of its last use, or zeros: `zeroed`) */
	POOL_OPEN,     /* holds an open segment; peers write into it */
	POOL_CLOSED,   /* closed segment waiting for (or in) its flush */
	POOL_LOADED,   /* clean copy of a flushed segment, for read grants */
	POOL_ZEROING,  /* unused since buffers are reused without zeroing (stats keep the slot) */
};

struct seg;
struct tw_rpc_server;
struct tw_auth_key;
struct tw_auth_transcript;

struct pool_buf {
	unsigned idx;
	uint8_t *mem;
	struct tw_mr *mr; /* NULL after a fence revoked it; registered again when handed out */
	enum pool_state state;
	struct seg *seg;  /* segment whose bytes it holds (NULL when free or zeroing) */
	bool in_flush;    /* a flush job reads it right now */
	bool flush_failed; /* the last flush of its closed segment failed (retried later) */
	/* What its stale bytes were written under (docs/log-format.md §7, "Reuse without
	 * zeroing"): the chain seed of its last use, and whether it holds only zeros (fresh, or
	 * zeroed for an unseeded open). An open must use a seed other than `seed` unless zeroed. */
	uint32_t seed;
	bool zeroed;
	/* Moved away from the address its writers knew since its last open (tw__pool_move). */
	bool moved;
};

/* The old address of a buffer moved at a fence (tw__pool_move): mapped PROT_NONE so that the
 * fenced writer's late process_vm_writev there fails, and so that nothing else is ever placed
 * there while that writer lives. pidfd: the writer's process (readable once it has exited), or
 * -1 when unknown (the guard then stays until the pool is closed). */
struct pool_guard {
	void *addr;
	int pidfd;
};

struct pool {
	struct tw_fab *fab;
	struct pool_buf **bufs; /* each allocated on its own: growth never moves a buffer */
	unsigned n;             /* buffers allocated and registered */
	unsigned slots;         /* length of bufs */
	unsigned max;           /* cap: n never exceeds it */
	unsigned grown;         /* buffers added by tw__pool_get since start */
	size_t size;
	unsigned count[POOL_ZEROING + 1]; /* buffers per state */
	/* Fencing writers that check no key (shm's CMA fast path: tw__fab_keyless_writes): a
	 * fence moves the log's open buffers (tw__pool_move) and guards their old addresses. */
	bool move_on_fence;
	struct pool_guard *guards;
	unsigned nguards, guards_cap;
	uint64_t guard_check_ns; /* next look at the guards' writers (tw__pool_sweep_guards) */
	uint64_t moved;          /* buffers moved since start */
	uint64_t guards_freed;   /* guards released after their writer exited */
};

/* Allocate `initial` zeroed buffers of `size` bytes and register them (remote write + read);
 * the pool may grow to `max` (raised to `initial` if below). 0 or a negative code (logged). */
int tw__pool_init(struct pool *p, struct tw_fab *fab, unsigned initial, unsigned max, size_t size);
/* Deregister and free everything (MRs first). */
void tw__pool_fini(struct pool *p);
/* A free buffer, growing the pool by one (allocate, zero, register: milliseconds for 8 MiB)
 * when none is free and it is below its cap. 0 and *out, or -ENOSPC (at the cap) or the
 * allocation's or registration's code, with `why` saying which limit and what raises it. */
int tw__pool_get(struct pool *p, struct pool_buf **out, char *why, size_t whylen);
void tw__pool_set_state(struct pool *p, struct pool_buf *b, enum pool_state st);
/* Make sure the buffer has a registration (after a fence). 0 or a negative code. */
int tw__pool_ensure_mr(struct pool *p, struct pool_buf *b);
/* Revoke remote access: close the registration (peers' writes with the old key then fail). */
void tw__pool_revoke_mr(struct pool *p, struct pool_buf *b);
/* Take a buffer away from the address its writers know (its registration must be revoked
 * already): pages moved to a new address (contents kept, b->mem updated), the old address
 * guarded until the writer's process (pid, 0: unknown) has exited. Logged; the registration is
 * made again at the new address when the buffer is next handed out (tw__pool_ensure_mr).
 * 0 or a negative code (the buffer stays where it was, logged as an error). */
int tw__pool_move(struct pool *p, struct pool_buf *b, int writer_pid);
/* Release the guards whose writer has exited; at most once a second unless `now`. */
void tw__pool_sweep_guards(struct pool *p, bool now);
/* Buffers holding unflushed data: open + closed (the admission limit counts these). */
unsigned tw__pool_unflushed(const struct pool *p);

/* ------------------------------------------------------------------ segment index */

struct seg {
	uint64_t log_id, segment_id;
	uint64_t version, epoch;
	uint64_t length;    /* granted at open */
	uint64_t valid_len; /* closed/flushed: verified; open: last scan */
	uint64_t entries;
	uint32_t checksum;
	uint32_t seed;      /* chain seed of this replica (OpenSegment.chain_seed; 0: unseeded) */
	int state;          /* TAILWIND__SEGMENT_STATE__* numbering: 1 open, 2 closed, 3 flushed */
	bool corrupt;
	bool on_disk;       /* a segment file exists (state flushed, or an older copy) */
	bool disk_open;     /* that file was written while the segment was open (battery flush) */
	bool freed;         /* dropped by FreeSegments while its flush still runs */
	struct pool_buf *buf; /* bytes in memory (open, closed, loaded) */
	uint64_t owner;     /* connection id that opened it (fencing closes it) */
	int writer_pid;     /* the process that opened it, on shm (tw__chan_peer_pid); 0: unknown
			     * (or opened from two processes): a fence's guard then stays */
	unsigned readers;   /* live read grants */
	unsigned flush_tries;
	bool listed_open;   /* OPEN in listings although on disk (flushed while open) */
	uint64_t repair_end; /* RecoveredOffset repair: end of the bytes received so far */
	uint64_t acked;     /* open: the acknowledged position its owner published (SetAcked,
			     * backup_readers.c); what readers may read of it */
};

#define SEG_OPEN 1
#define SEG_CLOSED 2
#define SEG_FLUSHED 3
#define SEG_LOST 4 /* opened here (journal record) but neither in memory nor on disk */

/* What the backup knows of a log besides its segments (docs/recovery.md, "Ownership"). */
struct logst {
	uint64_t log_id;
	uint64_t epoch;      /* highest epoch seen (fence or open); kept after a delete */
	uint64_t owner;      /* incarnation owning the log at `epoch` (0: none / 1.0 peer) */
	/* A fence raised `epoch` in memory but its journal record failed: the next fence at the
	 * same epoch writes it again before it answers success (a restart must not forget it). */
	bool epoch_unsaved;
	uint64_t free_below; /* segments below were freed (log cleaning); 0 after a delete */
	/* The last accepted fence's connection: while it is open and active (a recovery or a
	 * takeover at work), fences from other incarnations are refused (BK_HOLD_NS). */
	uint64_t hold_conn, hold_inc, hold_ns;
	/* A file about this log that could not be trusted at start (an epoch above TW_EPOCH_MAX in
	 * its epoch file, its journal records or a segment file's header): why, and every request
	 * about the log is refused with it (backup_ops.c's check_epoch, fence) while the other
	 * logs are served. NULL: usable. bad_epoch: such an epoch from the journal, which a
	 * rewrite keeps. */
	char *unavail;
	uint64_t bad_epoch;
	/* Last reader request about the log (ReadEntries, ReadSegment), tw_now_ns; 0: none. While
	 * recent (BK_READER_ACTIVE_NS) the owner's SetAcked are answered at once (backup_readers.c). */
	uint64_t reader_ns;
};

/* A fencer's hold on a log lapses after this long without a request from it. */
#define BK_HOLD_NS ((uint64_t)TW_FENCE_HOLD_MS * 1000000u)

/* ------------------------------------------------------------------ connections */

struct grant {
	uint64_t log_id, segment_id;
};

struct conn {
	uint64_t id;
	struct tw_chan *ch;
	bool lost;   /* the fabric reported it lost */
	bool drop;   /* we decided to close it (protocol violation, fenced zombie) */
	struct grant *grants;
	size_t ngrants, grants_cap;
	struct conn *next;
	/* Peer authentication (backup_rpc.c), when the backup has a key. */
	int auth;                   /* CONN_AUTH_* */
	struct tw_auth_transcript *auth_t; /* the pending challenge (CONN_AUTH_CHALLENGED) */
	uint64_t auth_close_ns;     /* CONN_AUTH_REFUSED: close it then (the reply left first) */
	/* A reader's load of a flushed segment, kept while it reads it (backup_readers.c). */
	struct grant rd;
	bool has_rd;
};

enum {
	CONN_AUTH_NONE = 0,   /* nothing yet: only a Handshake is served */
	CONN_AUTH_CHALLENGED, /* our nonce and MAC were sent; waiting for the client's proof */
	CONN_AUTH_OK,         /* the client proved the key */
	CONN_AUTH_REFUSED,    /* refused: closed at auth_close_ns or at its next message */
};

/* ------------------------------------------------------------------ flusher */

enum job_kind {
	JOB_FLUSH,  /* write buf's valid bytes as a segment file (hdr) */
	JOB_REMOVE, /* unlink a segment file */
	JOB_SETVER, /* rewrite a segment file with hdr.replica_version */
};

/* Handed to the flusher under fl_lock, handed back the same way; never shared. */
struct job {
	enum job_kind kind;
	struct pool_buf *buf;   /* FLUSH */
	struct segfile_hdr hdr; /* FLUSH: what to write; REMOVE/SETVER: ids and version */
	int result;
	struct job *next;
};

/* ------------------------------------------------------------------ close scans (backup_scan.c) */

/* A close whose scan of the segment's buffer runs on the scanner thread, off the progress
 * thread (which on tcp and sockets must go on receiving the writes of the next segment). The
 * request is answered when the result is applied (progress thread). */
struct bk_scan {
	struct seg *s;            /* progress thread only */
	const uint8_t *mem;       /* what the scanner reads: the buffer, its registration revoked */
	size_t len;
	uint32_t seed;
	struct tw_scan_result sr; /* the scanner's result */
	uint64_t offset;          /* what the close claims */
	uint32_t checksum;
	uint64_t conn_id;         /* who asked: answered only while it is connected */
	struct tw_chan *ch;
	uint64_t request_id, reply_epoch;
	struct bk_scan *next;
};

/* ------------------------------------------------------------------ the backup */

struct tw_backup {
	struct tw_backup_config cfg;
	char *strs; /* the strings of cfg (copy_strings) */
	int dirfd;
	struct tw_fab *fab;
	char addr[TW_ADDR_MAX];
	struct pool pool;
	uint64_t node_id;
	uint64_t start_ns;

	struct seg **segs; /* sorted by (log_id, segment_id) */
	size_t nsegs, segs_cap;
	struct logst *logs;
	size_t nlogs, logs_cap;
	struct metalog ml;   /* durable owners, opens, frees (backup/metalog.h) */

	struct conn *conns;
	uint64_t next_conn_id;

	struct tw_rpc_server *srv;
	/* Held answers (backup_readers.c): nwaiters reads at the readable end (long-poll) and
	 * naholds SetAcked while no reader of their log is active, in one list. */
	struct bk_rwait *waiters;
	unsigned nwaiters, naholds;
	uint64_t set_acked_served, set_acked_held; /* counters, copied into st by stats_sync */
	struct tw_auth_key *key; /* cluster key, or NULL: peers are not authenticated */
	unsigned auth_refused;   /* connections in CONN_AUTH_REFUSED */

	atomic_bool stop;
	bool running;
	bool index_dirty;  /* recount segments_on_disk / segments_corrupt */
	bool reap;         /* a connection was lost or dropped: close it after progress */
	int flush_err;     /* first flush error since tw_backup_flush_all started */
	bool flush_retry;  /* a closed buffer's flush failed FLUSH_RETRIES times: retry later */
	uint64_t flush_retry_ns;
	uint64_t fd_check_ns;  /* next probe for a free file descriptor (check_fds) */
	uint64_t fd_warn_ns;   /* next warning while none is free */

	/* Flusher (flusher lock). */
	pthread_t flusher;
	bool flusher_started;
	pthread_mutex_t fl_lock;
	pthread_cond_t fl_cond;      /* work queued, or quit */
	pthread_cond_t fl_done_cond; /* a job finished */
	struct job *todo_head, *todo_tail;
	struct job *done_head, *done_tail;
	unsigned jobs_pending; /* queued or running */
	bool fl_quit;
	/* Close scans (backup_scan.c): queues under sc_lock; sc_pending is the progress
	 * thread's (handed out and not applied yet). */
	pthread_t scanner;
	bool scanner_started;
	pthread_mutex_t sc_lock;
	pthread_cond_t sc_cond;      /* work queued, hold lifted, or quit */
	pthread_cond_t sc_done_cond; /* a scan finished */
	struct bk_scan *sc_todo, *sc_todo_tail, *sc_done, *sc_done_tail;
	unsigned sc_running;         /* queued or scanning */
	unsigned sc_pending;
	bool sc_quit, sc_hold;
	/* How segment files are written (flusher thread only, like the jobs it runs). */
	struct segfile_io fio;
	bool fio_reported; /* the O_DIRECT refusal was logged (once per backup) */
	uint32_t meta_cap; /* the journal's capacity in records (tw__backup_opts) */
	const struct tw__clock *clock; /* the fence hold's time (tw__backup_opts; never NULL) */

	/* Counters (stats lock; written by the progress thread, read by any thread). */
	pthread_mutex_t st_lock;
	struct tw_backup_stats st;
	uint64_t rpc_calls[TW_BACKUP_RPC_KINDS]; /* per kind (tw_backup_get_rpc_calls), st_lock */

	char errmsg[256];
};

/* backup.c: life cycle and the progress loop. */
void tw__bk_seterr(struct tw_backup *b, const char *fmt, ...) TW_PRINTF(2, 3);

/* backup_index.c: the segment index, and its rebuild at open. */
struct seg *tw__bk_seg_find(struct tw_backup *b, uint64_t log_id, uint64_t segment_id);
struct seg *tw__bk_seg_insert(struct tw_backup *b, uint64_t log_id, uint64_t segment_id);
void tw__bk_seg_delete(struct tw_backup *b, struct seg *s);
/* Index of the first segment >= (log_id, segment_id). */
size_t tw__bk_seg_lower_bound(struct tw_backup *b, uint64_t log_id, uint64_t segment_id);
/* Records of the metadata journal (backup/metalog.h); tests lower it to force compactions. */
/*
 * What a backup takes besides its public configuration, for tests: its segment files and
 * metadata journal written through `storage` (backup/storage.h; NULL: the system calls), the
 * journal's capacity in records when it creates or compacts one (0: METALOG_DEFAULT_CAP), the
 * clock its fence hold is measured on (core/clock.h; NULL: the system clock). The seams tests
 * inject faults, force compactions and move time on through, with no global.
 */
struct tw__storage;
struct tw__clock;
struct tw__backup_opts {
	const struct tw__storage *storage;
	uint32_t meta_cap;
	const struct tw__clock *clock;
};

/* tw_backup_open with `opts` (NULL: the defaults, as tw_backup_open). */
int tw__backup_open_on(const struct tw_backup_config *config, const struct tw__backup_opts *opts,
		       struct tw_backup **out, char *errmsg_out, size_t errmsg_len);
struct logst *tw__bk_log(struct tw_backup *b, uint64_t log_id, bool create);
/* Logs marked unavailable. */
size_t tw__bk_logs_unavailable(const struct tw_backup *b);
/* At open, on an empty index: replay the metadata journal, scan the storage directory
 * (segment files verified, leftover tmp files removed), mark the segments opened here whose
 * bytes are gone LOST. 0 or a negative code (b->errmsg set when the journal is unreadable). */
int tw__bk_rebuild_index(struct tw_backup *b);
/* Append a journal record durably, rewriting the journal from the current state when it is
 * full. 0 or a negative code. Blocking (one O_DSYNC write): progress thread. */
int tw__bk_meta_append(struct tw_backup *b, const struct metalog_rec *r);

/* backup_conn.c: connections. The three fabric callbacks (arg: the backup); lost or dropped
 * connections are closed by reap_conns, outside the callbacks; conn_free forgets one (its
 * grants, reads and authentication), closing its channel when close_chan. */
struct conn *tw__bk_conn_find(struct tw_backup *b, uint64_t id);
void tw__bk_on_accept(void *arg, struct tw_chan *ch);
void tw__bk_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len);
void tw__bk_on_lost(void *arg, struct tw_chan *ch, int err);
void tw__bk_reap_conns(struct tw_backup *b);
void tw__bk_conn_free(struct tw_backup *b, struct conn *c, bool close_chan);

/* backup_flush.c: the flusher thread (tw__bk_flusher_main, arg: the backup) and its jobs. */
void *tw__bk_flusher_main(void *arg);
void tw__bk_submit(struct tw_backup *b, struct job *j);
/* Take the finished jobs and apply them (progress / owner thread); how many there were. */
unsigned tw__bk_drain_done(struct tw_backup *b);
/* Queue again the closed buffers whose flush failed (b->flush_retry is due). */
void tw__bk_retry_failed_flushes(struct tw_backup *b);
/* Release a buffer: revoke its key and return it to the pool as it is (not zeroed: the next
 * open's seed makes its stale bytes unable to validate). */
void tw__bk_release_buf(struct tw_backup *b, struct pool_buf *pb);
/* Queue the flush of a closed segment's buffer. */
void tw__bk_flush_closed(struct tw_backup *b, struct seg *s);

/* backup_stats.c: publish the counters under the stats lock (progress thread). */
void tw__bk_stats_sync(struct tw_backup *b);

/* backup_ops.c: the operations behind the RPCs. Each returns 0 or a negative code
 * (-EINVAL, -TW_EREFUSED, -TW_ENOTFOUND, -TW_EFENCED, -TW_ESTALE, -TW_ECORRUPT, -EEXIST,
 * -EAGAIN, ...) and, on failure, writes a human-readable reason into msg. */
/* The segment a request names: its SegmentMeta, replica_version and envelope. */
struct bk_seg_req {
	uint64_t log_id, segment_id, epoch, version, offset;
	uint64_t incarnation; /* Envelope.incarnation of the request */
	uint32_t checksum;
};
/* What an open adds to the segment it names. */
struct bk_open_req {
	uint64_t length;
	bool create_log;      /* OpenSegment.create_log */
	uint32_t seed;        /* OpenSegment.chain_seed (0: a 1.1 primary; the buffer is zeroed) */
};
int tw__bk_op_open(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		   const struct bk_open_req *o, struct tw_rkey *rk_out, char *msg, size_t msglen);
/* `defer` (NULL: scan here): where the close reaches its scan, the scan goes to the scanner
 * thread with `defer` (filled; the caller set its conn_id, ch, request_id, reply_epoch) and the
 * call returns TW_RPC_DEFERRED; backup_scan.c applies the result (tw__bk_close_apply) and
 * answers. */
int tw__bk_op_close(struct tw_backup *b, struct conn *c, const struct bk_seg_req *r,
		struct tw_scan_result *scanned_out, char *msg, size_t msglen, struct bk_scan *defer);
/* The end of a close once its buffer is scanned: the copy closed (or kept and marked corrupt),
 * its flush queued, its readers woken. 0, -TW_ECORRUPT + msg. */
int tw__bk_close_apply(struct tw_backup *b, struct seg *s, uint64_t offset, uint32_t checksum,
		       const struct tw_scan_result *sr, char *msg, size_t msglen);

/* backup_scan.c: the scanner thread (started with the flusher, stopped before it). */
int tw__bk_scanner_start(struct tw_backup *b);
void tw__bk_scanner_stop(struct tw_backup *b);
void tw__bk_scan_submit(struct tw_backup *b, struct bk_scan *sc);
/* Apply the finished scans and answer their closes (progress thread). How many. */
unsigned tw__bk_scans_drain(struct tw_backup *b);
/* Wait for every scan handed out and apply it. Before any request is served, and before
 * anything else touches segments (a flush of every buffer, the close of the backup): no one
 * sees a segment between its close's revocation and its scan's result. */
void tw__bk_scans_settle(struct tw_backup *b);
/* Tests: hold the scanner before its next scan, until lifted here or by a settle. */
void tw__bk_scan_hold(struct tw_backup *b, bool hold);
int tw__bk_op_fence(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t new_epoch,
		uint64_t incarnation, uint64_t *epoch_out, uint64_t *owner_out, char *msg,
		size_t msglen);
int tw__bk_op_set_version(struct tw_backup *b, uint64_t log_id, uint64_t segment_id, uint64_t epoch,
		      uint64_t incarnation, uint64_t version, char *msg, size_t msglen);
int tw__bk_op_free(struct tw_backup *b, uint64_t log_id, uint64_t below, uint64_t epoch,
	       uint64_t incarnation, bool delete_log, uint64_t *freed_out, char *msg,
	       size_t msglen);
/* Ownership check: the epoch not older than the log's and, at the log's current epoch, the same
 * incarnation as its owner. 0, or -TW_EFENCED (-TW_ECORRUPT: the log is unavailable) + msg. */
int tw__bk_check_owner(struct tw_backup *b, uint64_t log_id, uint64_t epoch, uint64_t incarnation,
		   char *msg, size_t msglen);
/* The RPC form for an owner's request about one segment (backup_rpc.c): the owner check at
 * `epoch`, then the segment's live copy here (not freed, not LOST). 0 and *out; or the call
 * failed (FENCED, NOT_FOUND; its message set), *out NULL, and the negative code the handler
 * returns. */
struct tw__rpc_call;
int tw__bk_call_owned_seg(struct tw_backup *b, struct tw__rpc_call *call, uint64_t log_id,
			  uint64_t segment_id, uint64_t epoch, struct seg **out);
/* A request about log_id from connection c: keep c's hold on the log alive. */
void tw__bk_hold_touch(struct tw_backup *b, struct conn *c, uint64_t log_id);
/* Whether the backup holds anything of the log: segments (any state) or a freed prefix. */
bool tw__bk_log_known(struct tw_backup *b, uint64_t log_id);
/* Read grant. A flushed segment is loaded into a pool buffer first, synchronously (the RPC
 * server has no deferred replies; see docs/operations.md). */
/* Load a flushed segment's file into a pool buffer (s->buf, POOL_LOADED). 0 or a negative code
 * with msg set (-TW_EREFUSED: no buffer free; -TW_ECORRUPT: the file fails its checks, the copy
 * is marked corrupt). */
int tw__bk_load(struct tw_backup *b, struct seg *s, char *msg, size_t msglen);
int tw__bk_op_read(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t segment_id,
	       uint64_t epoch, struct tw_rkey *rk_out, struct seg **seg_out, char *msg,
	       size_t msglen);
int tw__bk_op_release(struct tw_backup *b, struct conn *c, uint64_t log_id, uint64_t segment_id,
		  char *msg, size_t msglen);
/* A fence (or a recovery's close) of an open segment whose writer may check no key: its buffer
 * (registration revoked) is moved away from the address the writer knows, once per open
 * (tw__pool_move; nothing where tw__fab_keyless_writes is false). */
void tw__bk_fence_buf(struct tw_backup *b, struct seg *s);
/* Refresh an open segment's valid_len/checksum/entries by scanning its buffer. */
void tw__bk_scan_open(struct tw_backup *b, struct seg *s);
/* Drop the read grants of a connection that went away. */
void tw__bk_conn_release_grants(struct tw_backup *b, struct conn *c);

/* backup_rpc.c: decode a control message, dispatch, reply. */
/* A replica's state as listings and read replies name it (TAILWIND__SEGMENT_STATE__*). */
int tw__bk_pb_state(const struct seg *s);
int tw__bk_rpc_init(struct tw_backup *b);
void tw__bk_rpc_fini(struct tw_backup *b);
void tw__bk_rpc_recv(struct tw_backup *b, struct conn *c, const void *msg, size_t len);
/* A connection goes away: count an unfinished key handshake as an authentication failure. */
void tw__bk_auth_conn_gone(struct tw_backup *b, struct conn *c);
/* Drop refused connections whose grace period passed (progress loop). */
void tw__bk_auth_sweep(struct tw_backup *b);
/* backup_readers.c (owner: readers; docs/readers.md): SetAcked and ReadEntries (protocol 1.4),
 * reads held at the readable end, SetAcked answers held while no reader is active. wake: after
 * a segment changed (segment_id UINT64_MAX: every segment of the log): closed, fenced, freed,
 * answer its held reads and held SetAcked. reader_seen: a reader's request about the log
 * (ReadSegment; ReadEntries calls it itself): the log's readers are active, its held SetAcked
 * are answered (readers true). tick: answer the held reads and SetAcked whose time ran out;
 * returns the milliseconds until the next one is due (-1: none). conn_gone: forget a
 * connection's held reads and SetAcked. */
#define BK_MAX_READ_WAITS 4096u
#define BK_MAX_ACK_HOLDS 4096u
#define BK_ACK_HOLD_MAX_MS 60000u
#define BK_READER_ACTIVE_NS 1000000000ull /* a reader request keeps its log active so long */
#define BK_FRESH_MS 500u /* a read that released a held SetAcked waits so long for the next */
struct bk_rwait;
struct tw__rpc_call;
int tw__bk_h_set_acked(void *arg, struct tw__rpc_call *call);
int tw__bk_h_read_entries(void *arg, struct tw__rpc_call *call);
void tw__bk_readers_wake(struct tw_backup *b, uint64_t log_id, uint64_t segment_id);
void tw__bk_reader_seen(struct tw_backup *b, uint64_t log_id);
int tw__bk_readers_tick(struct tw_backup *b);
void tw__bk_readers_conn_gone(struct tw_backup *b, struct conn *c);
void tw__bk_readers_fini(struct tw_backup *b);
/* backup_recovery.c (owner: recovery): the RecoveredOffset handler. */
struct tw__rpc_call;
int tw__bk_h_recovered_offset(void *arg, struct tw__rpc_call *call);
#endif /* TW_BACKUP_BACKUP_INT_H */
