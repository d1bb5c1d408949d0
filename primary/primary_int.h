/*
 * primary/primary_int.h — internals of the primary (primary/primary*.c). Not installed.
 *
 * Files: primary.c   the log: segments, rollover, the sticky failure, the per-log steps of
 *                    the progress thread, getters, reads, unload, trim;
 *        primary_append.c   the append engine: records, room (back-pressure), the batch
 *                    append, the waits of append and flush, per mode (struct pmode_ops);
 *        primary_seal.c   sealing and posting: writes, slots, the driver's round, drain;
 *        primary_ack.c   acknowledgements: completions, the reap, callbacks in log order;
 *        primary_open.c   open and lifecycle: states, configuration, open as owner,
 *                    takeover, finish, close;
 *        ctx.c   the context: a connection (peer/peer.h) per backup, loss, reconnection,
 *                    fabric reset, the driving role, the progress thread's loop;
 *        primary_ctl.c   the control plane: open/close segment RPCs, backup choice and retry,
 *                    the taken-over probe;
 *        primary_rerep.c   backup failure: suspend, replace on a spare, replica versions,
 *                    background re-replication of closed segments (docs/failover.md).
 *        primary_engine.h   the engine's own internals (the reservation word, struct
 *                    pmode_ops, sealing and acknowledgement entry points), for the files
 *                    of the engine;
 *        primary_put.h   an entry's reservation, copy and publication in order, inline
 *                    (the appender's hot path), for primary_append.c.
 *
 * Driver thread: the thread that polls the fabric, seals, posts and reaps the writes and owns
 * the segment list and the open segment's writer (the caller in TW_PRIMARY_SYNC mode, the
 * progress thread in TW_PRIMARY_ASYNC mode). Appenders reserve, write and publish their
 * entries without a lock (p->res, p->pub_off, rec_head: docs/primary.md, "The append
 * engine"). In async mode `lock` is the slow path's mutex: it protects need_roll, the segment
 * array pointer and count, err, the waiters' queues, and the lifecycle state (enum pstate)
 * and the gate of p->res are written under it. The driver takes it only for control work and
 * wake-ups of sleepers; the counters it shares with the appenders are atomics (PLD/PST).
 */
#ifndef TW_PRIMARY_PRIMARY_INT_H
#define TW_PRIMARY_PRIMARY_INT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <tailwind/context.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>
#include <tailwind/reader.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "log/log_entry.h"
#include "peer/peer.h"

struct tw_auth_key;

/* One backup of a context (primary/ctx.c): the connection (peer/peer.h) every log on the
 * context shares. The channel's user pointer is the peer, whose `user` is this struct. */
struct cbackup {
	struct tw_peer peer;  /* address, channel, RPC client, gen (connections made so far;
			       * pbackup.gen: the one a log uses), buffer_size (from the
			       * handshake), why (it cannot be used); peer.lost: the channel
			       * failed, for every log, and was not connected again since */
	struct tw_ctx *ctx;
	unsigned idx;
	bool dead;            /* a connect to it failed: not tried again by tw__ctx_heal (the
			       * reviver probes it, primary/ctx_revive.c) */
	bool revive_asked;    /* down, and the reviver asked to probe it (driver only) */
	uint64_t node_gen;    /* the connection (peer.gen) on which the backup answered with
			       * another node id than before: a restarted process, which holds
			       * none of the buffers of the earlier connections (0: never) */
	unsigned acked_held;  /* SetAcked in flight on it with hold_ms, all logs (primary_acked.c;
			       * driver thread) */
	char zone[64];        /* failure domain ("": none; primary_coord.c) */
};

/* One candidate backup as one log sees it: the context's channel plus this log's state. */
struct pbackup {
	struct tw_primary *p;
	struct cbackup *c;    /* the context's backup (same index) */
	unsigned idx;
	char addr[TW_ADDR_MAX];
	bool lost;            /* lost for this log: the channel failed, or one of its writes or
			       * RPCs did (never used again by this log unless the context connects
			       * to it again: gen) */
	bool fo_seen;         /* its loss was handled by primary_rerep.c (counted, logged) */
	uint64_t gen;         /* the context connection (cbackup.gen) this log last used */
	uint64_t lost_ns;     /* when primary_rerep.c saw it lost */
	char why[320];        /* why it cannot be used (for -TW_ENOBACKUP messages) */
	char zone[64];        /* failure domain ("": none; primary_coord.c) */
	bool unregistered;    /* gone from the coordinator's registry: not chosen as a spare */
};

/* Whether a backup this log lost is connected again (a new context connection since): a log
 * may then reopen its own buffers there (primary_rerep.c). */
static inline bool pb_back(const struct pbackup *b)
{
	const struct tw_peer *c = &b->c->peer;

	return b->lost && c->ch && c->rpc && !c->lost && c->gen != b->gen &&
	       !tw__chan_is_lost(c->ch);
}

/*
 * A context (primary/ctx.c, tailwind/context.h): the fabric, one channel + RPC client per
 * backup, the progress thread, shared by the logs opened on it. tw_primary_open makes a private
 * one per log (shared false, owner the log, closed with it); tw_ctx_open a shared one.
 *
 * Driving: one thread at a time drives the fabric and runs every log's control plane: the
 * progress thread, or (private, sync mode) the log's caller. With a thread, any other thread
 * that must drive (a log's open, close, or the context's close) takes `drive` through
 * tw__ctx_drive_enter, which makes the progress thread step aside between two passes.
 */
/*
 * How a context calls its logs (as raft calls its raft_io, the other way round): ctx.c reaches
 * a log only through this table, never the engine's functions or fields; the engine calls the
 * context's functions (tw__ctx_*). One table, tw__primary_log_ops (primary.c). All on the
 * driving thread except `served`.
 */
struct tw__log_ops {
	/* Whether the progress thread serves the log now (async mode, RUNNING or STOPPING). */
	bool (*served)(const struct tw_primary *p);
	/* A progress pass: before the fabric poll (control work, seal+post; true when it did
	 * control work, *done when a stopping log has nothing left), and after it (failover,
	 * reap, seal+post). */
	bool (*step_pre)(struct tw_primary *p, bool *done);
	void (*step_post)(struct tw_primary *p);
	/* The pass found no work in any log and the thread is about to block in its poll:
	 * sleep_begin says so to the log's appenders (true: they publish without a fence, so
	 * the thread must call tw__membarrier, once for all logs); then sleep_check looks once
	 * more for work published meanwhile: true, and the thread does not block. */
	bool (*sleep_begin)(struct tw_primary *p);
	bool (*sleep_check)(struct tw_primary *p);
	/* Backup `b`'s connection failed (why: for messages): the log fails over on its own. */
	void (*lost)(struct tw_primary *p, unsigned b, const char *why);
	/* The context cannot go on for the log (fabric progress or reset failed). */
	void (*fail)(struct tw_primary *p, int err, const char *msg);
	/* After a fabric reset: again[i], whether backup i is connected again; first, the backup
	 * whose loss began it (-1: none); prev_ns, when the reset before was. */
	void (*reset)(struct tw_primary *p, const bool *again, int first, uint64_t prev_ns,
		      uint64_t now_ns);
	/* A private context's owner: its incarnation (the peers' stamp) and the handshake RPCs
	 * to count in its statistics. */
	uint64_t (*incarnation)(const struct tw_primary *p);
	void (*count_handshake)(struct tw_primary *p, unsigned rpcs);
	/* Backup `b`, lost, answers again and is connected again (primary/ctx_revive.c): closed
	 * segments left short of a replica for want of a spare are tried again. NULL: nothing. */
	void (*back)(struct tw_primary *p, unsigned b);
};
extern const struct tw__log_ops tw__primary_log_ops;

struct tw_ctx {
	struct tw_ctx_config cfg;    /* provider: our copy; backups, zones, key_file NULL */
	char *prov_copy;
	bool shared;
	struct tw_primary *owner;    /* private: its log (the handshake RPCs count there) */
	const struct tw__log_ops *log_ops; /* how it calls its logs (set by attach / set_owner) */
	struct tw_fab *fab;
	struct tw_arena *arena;      /* every segment of every log on it (primary/arena.c) */
	struct tw_auth_key *key;     /* cluster key (NULL: no authentication) */
	uint64_t node_id;
	struct cbackup *bk;
	size_t nbk, bk_cap;          /* bk_cap: room for backups added later (tw__pcoord_refresh) */
	unsigned rpc_max_inflight;

	/* Logs served (changed by the driver, under `lock`). */
	struct tw_primary **logs;
	size_t nlogs, logs_cap;
	size_t rr;                   /* round robin: the log the next pass starts with */

	bool threaded;
	bool thread_started;
	bool stop;                   /* under lock */
	pthread_t thread;
	pthread_mutex_t lock;        /* logs, stop, want_drive */
	pthread_cond_t cv;
	pthread_mutex_t drive;       /* held by the thread that drives (threaded contexts) */
	unsigned want_drive;         /* threads waiting for `drive` (under lock) */

	/* Failures (driver only). */
	bool resetting;              /* closing every channel for tw__fab_reset (losses not new) */
	uint64_t loss_gen;           /* channel losses so far */
	uint64_t reset_gen;          /* loss_gen covered by the last reset */
	uint64_t reset_ns;           /* when the last reset was */
	int first_lost;              /* first backup lost since the last reset (-1: none) */
	struct ctx_revive *revive;   /* the thread that probes lost backups (NULL: none yet) */
	/* The takeover's table of backups it gave up on (peer/peer.h, struct tw_peer_skip),
	 * while its log opens here: set by tw__ctx_create or by the open that drives a shared
	 * context, NULL again before that open returns (and before a progress thread or a
	 * reviver runs: they never see it). The context's connects skip what is in it. */
	struct tw_peer_skip *skip;
	char errmsg[1024];
	struct tw_ctx_stats st;      /* single writer per field; read with atomics */
};

/* primary/arena.c: the log arena of a context (docs/primary.md, "Memory: the log arena"). */
struct tw_arena;
/* budget 0: the default, a quarter of the machine's memory (at least 64 MiB). */
int tw__arena_create(struct tw_fab *fab, size_t budget, struct tw_arena **out);
/* Every segment must have been given back (the extents are deregistered and unmapped). */
void tw__arena_destroy(struct tw_arena *a);
/* A segment's memory: len bytes (a page multiple) inside a registration, *mr_out. Not zeroed.
 * -ENOSPC when the budget is exhausted, -ENOMEM, or a registration error; why says which. */
int tw__arena_get(struct tw_arena *a, size_t len, uint8_t **buf_out, struct tw_mr **mr_out,
		  char *why, size_t whylen);
void tw__arena_put(struct tw_arena *a, uint8_t *buf, size_t len);
void tw__arena_get_stats(struct tw_arena *a, struct tw_arena_stats *out);

/* primary/ctx.c. */
/* extra: room in bk[] for backups added after the open (tw__pcoord_refresh; bk[] never moves).
 * skip (NULL: none): a takeover's table (struct tw_ctx's skip), for the connects made here; the
 * caller sets ctx->skip to NULL once its open is done. */
int tw__ctx_create(const struct tw_ctx_config *cc, bool shared, unsigned tx_depth, size_t extra,
		   struct tw_peer_skip *skip, struct tw_ctx **out);
void tw__ctx_destroy(struct tw_ctx *ctx);
/* Connect and handshake `c` (again). 0 or a negative code (c->why says why). */
int tw__ctx_connect(struct tw_ctx *ctx, struct cbackup *c);
/* How this context's peers connect (key, node id, role, RPC timeout, the owner's incarnation). */
void tw__ctx_peer_opts(struct tw_ctx *ctx, struct tw_peer_opts *o);
/* Close `c`'s channel and RPC client (pending operations complete with errors). */
void tw__ctx_drop(struct cbackup *c);
/* Shared contexts: a lost channel is closed and, once per loss, connected again. */
void tw__ctx_heal(struct tw_ctx *ctx, struct cbackup *c);
/* Close every channel, tw__fab_reset, connect the backups again except `first` (the one whose
 * loss began it; -1: none); every log with an open segment then rewrites its writes in flight
 * (fo_recopy). 0 or a negative code. */
int tw__ctx_reset(struct tw_ctx *ctx, int first);
void tw__ctx_drive_enter(struct tw_ctx *ctx);
void tw__ctx_drive_leave(struct tw_ctx *ctx);
/* A log joins the context's list (ops: how the context calls it; every log of a context has
 * the engine's), or leaves it. */
int tw__ctx_attach(struct tw_ctx *ctx, struct tw_primary *p, const struct tw__log_ops *ops);
void tw__ctx_detach(struct tw_ctx *ctx, struct tw_primary *p);
/* A private context's owner: the log whose handshakes it counts and whose incarnation its
 * peers carry. */
void tw__ctx_set_owner(struct tw_ctx *ctx, struct tw_primary *p, const struct tw__log_ops *ops);
/* The progress thread of a context (end of ctx.c); on_thread: whether the caller is ctx's
 * progress thread (a callback of one of its logs). */
int tw__ctx_start(struct tw_ctx *ctx);
void tw__ctx_stop(struct tw_ctx *ctx);
bool tw__ctx_on_thread(const struct tw_ctx *ctx);
/* primary/ctx_revive.c: lost backups tried again in the background. The driver (each pass
 * of the progress thread) asks the reviver to probe every backup lost and closed, and connects
 * again those whose probe was answered; stop joins the reviver (tw__ctx_destroy). The back-off
 * between two probes of one backup: FIRST, doubling up to MAX. */
#define TW__REVIVE_FIRST_MS 100u
#define TW__REVIVE_MAX_MS 1000u
/* How long a failover or a segment's open short of backups waits for the probes it asks for
 * (tw__ctx_revive_now): one probe's own bound (1 s) and a little. */
#define TW__REVIVE_WAIT_MS 1200u
void tw__ctx_revive_step(struct tw_ctx *ctx);
/* A failover found no spare: probe the backups that are down and wanted (indexed like ctx->bk)
 * now and wait for those probes (at most max_ms); the number connected again (ctx_revive.c).
 * Driver thread. */
unsigned tw__ctx_revive_now(struct tw_ctx *ctx, const bool *want, unsigned max_ms);
void tw__ctx_revive_stop(struct tw_ctx *ctx);
/* Slice of a blocking wait: the fabric also fails operations past their deadline while we
 * progress, so never block longer than this without looking again. */
#define PWAIT_SLICE_MS 100

/* The log's RPC client of backup `b`, stamped with the log's incarnation (the client is shared;
 * the stamp is taken when a request is sent, on the driving thread). */
static inline struct tw_rpc_client *prpc(struct tw_primary *p, struct pbackup *b);

/* One segment of the log, in the primary's registered memory. */
struct pseg {
	uint32_t id;
	uint8_t *buf;
	size_t cap;
	struct tw_mr *mr;
	struct tw_log_writer w;
	uint32_t seed;          /* chain seed of all its replicas (random, never 0) */
	unsigned nrep;
	unsigned rep[TW_PRIMARY_MAX_REPLICAS]; /* backup indexes */
	struct tw_rkey rk[TW_PRIMARY_MAX_REPLICAS];
	bool closed;
	bool closing;           /* its close RPCs are out (primary_acked.c sends it no SetAcked) */
	struct pseg *next_free; /* async mode: released, waiting for the progress thread */
	uint64_t version;       /* replica version its current replicas hold (primary_rerep.c) */
};

struct pslot;

/* One write to one replica; the tw_op must stay first. */
struct pop {
	struct tw_op op;
	struct pslot *slot;
	unsigned rep; /* replica index in the segment */
	unsigned bk;  /* backup index it was posted to (the replica may be replaced meanwhile) */
};

/* One sealed write, sent to the segment's r replicas. */
struct pslot {
	struct tw_primary *p;
	struct pop *ops; /* r of them */
	struct pseg *seg;
	size_t off, len;
	unsigned remaining; /* completions still expected */
	uint64_t rec_end;   /* record index just past this write's last entry */
	uint64_t nrec;      /* entries in it */
	bool repair;        /* a replica's write failed: not acked until a failover copied the
			     * prefix to a replacement (primary_rerep.c) */
	/* tw_now_ns() at its seal (the sealing thread, before slot_head publishes it), before and
	 * after its posts and at its last replica's completion (the driver):
	 * tw_primary_stats.write_*_ns, unless `untimed` (set with `repair`: a failover's time is
	 * not the write's). */
	uint64_t t_seal, t_post, t_posted, t_done;
	bool untimed;
};

/* A thread waiting in the append path (async mode; docs/primary.md, "Appends from many
 * threads"): on its own stack, woken alone. Fields under the primary's lock. */
struct pwaiter {
	pthread_cond_t cv;
	struct pwaiter *next;
	bool queued; /* in the room queue: the waker dequeues it before signalling */
	bool done;   /* off the acked list (primary_ack.c): only then may its owner return */
};

/* One append waiting for its acknowledgement. */
struct prec {
	tw_append_cb cb;
	void *arg;
	uint64_t lsn;
	uint32_t len;
};

struct tw_auth_key;

struct tw_coord;
struct pmode_ops;

/*
 * The lifecycle of a log (docs/primary.md, "Lifecycle", has the diagram). tw__primary_set_state
 * is the only writer and checks each transition; readers use pstate() (an atomic load: the
 * context's progress thread and the application threads read it without the lock).
 *   OPENING    tw__primary_open_as: backups checked, first segment opened; on a shared context
 *              it is already in ctx->logs but not served. -> RUNNING, or CLOSED (open failed).
 *   RUNNING    appends accepted; in async mode served by the context's progress thread.
 *              -> STOPPING (finish, async), FINISHING (finish, sync).
 *   STOPPING   async finish asked the progress thread to let go: appends refused; the thread
 *              drains the writes in flight, then moves it on. -> FINISHING.
 *   FINISHING  not served: tw_primary_finish drives the last steps itself (drain, close the open
 *              segment). Appends refused. -> FINISHED.
 *   FINISHED   finish_rc is the answer of every later tw_primary_finish. -> CLOSED.
 *   CLOSED     being freed (primary_free).
 * A failure is not a state: p->err is sticky and may be set in any state before FINISHED; it
 * refuses appends (they return it) and a finish after it skips the close of the open segment.
 */
enum pstate {
	PSTATE_OPENING = 0, /* calloc's zero: the state a log is created in */
	PSTATE_RUNNING,
	PSTATE_STOPPING,
	PSTATE_FINISHING,
	PSTATE_FINISHED,
	PSTATE_CLOSED,
};

/*
 * What the engine runs a log with: the log's own settings (struct tw_primary_config) and its
 * transport's (struct tw_ctx_config: a private context's, or the shared one's), taken from the
 * caller's structs as far as they reach (the ABI rule) by tw__pcfg_make, in one struct that
 * the open, the coordinator's paths and the engine pass around.
 */
struct tw__pcfg {
	/* the log's (tw_primary_config) */
	uint64_t log_id;
	uint64_t epoch;
	unsigned replicas;
	size_t segment_size;
	unsigned max_batch;
	size_t max_batch_bytes;
	unsigned max_inflight;
	enum tw_primary_mode mode;
	unsigned open_retry_ms;
	bool preopen;
	uint64_t rerep_rate;
	/* the transport's (tw_ctx_config) */
	const char *const *backups;
	size_t n_backups;
	const char *const *zones;
	const char *provider;
	const char *key_file;
	bool busy_poll;
	uint64_t node_id;
	unsigned op_timeout_ms;
	unsigned rpc_timeout_ms;
	unsigned connect_timeout_ms;
	size_t arena_size;
	const char *coordinator;
	unsigned session_timeout_ms;
	/* A takeover's (primary_open.c, primary_coord.c): the backups its recovery gave up on
	 * after a connect timeout (peer/peer.h), not waited on again by the open; NULL otherwise.
	 * Only for the open: a primary's own copy has it NULL. */
	struct tw_peer_skip *skip;
};

/* Take `transport` (NULL: the defaults, for a log on a shared context) and `cfg` into `pc`:
 * 0, or -EINVAL / -ENOTSUP with errmsg (tw__cfg_adopt). */
int tw__pcfg_make(struct tw__pcfg *pc, const struct tw_ctx_config *transport,
		  const struct tw_primary_config *cfg, char *errmsg, size_t errmsg_len);

/* The span the engine's shared words are kept apart by (struct tw_primary): two cache lines,
 * since x86 cores fetch lines in adjacent pairs (Intel's spatial prefetcher). */
#define TW_PCACHE 128

struct tw_primary {
	struct tw__pcfg cfg; /* provider points to our copy; backups is NULL */
	struct tw_coord *coord;       /* cfg.coordinator: holds the owner node (primary_coord.c) */
	char *prov_copy;
	unsigned r;
	bool threaded;                     /* TW_PRIMARY_ASYNC: the context's thread drives */
	bool pub_light;                    /* async mode, tw__membarrier_ready(): appenders
					    * publish with a plain store, the progress thread
					    * fences for both before it sleeps (see PLD) */
	bool seal_self;                    /* async mode: an appender that meets a whole batch
					    * waiting seals it (TW_PRIMARY_APPENDER_SEAL) */
	bool looped;                       /* sync mode driven from an event loop (it asked
					    * tw_primary_wait_prepare): progressed all the time */
	const struct pmode_ops *mode_ops;  /* what the mode does differently (primary_append.c) */

	struct tw_ctx *ctx;      /* shared (tw_primary_open_on) or private (owned by this log) */
	struct tw_fab *fab;      /* ctx->fab */
	struct pbackup *bk;
	size_t nbk;
	size_t bk_cap;  /* room in bk[] (never moved): backups registered after the open are
			 * added as spares by tw__pcoord_refresh (driver thread) */
	/* Lifecycle (enum pstate): written by tw__primary_set_state only (under `lock` in async
	 * mode), read with pstate(). */
	enum pstate state;
	int finish_rc;           /* FINISHED: what tw_primary_finish returned */

	/* Not lifecycle: the context's list membership, flags of pending work and guards
	 * against re-entry. */
	bool on_ctx;             /* in ctx->logs (the context's failure hooks reach it) */
	bool fo_recopy;          /* a context reset dropped every write in flight: rewrite them */

	/* Owner (docs/recovery.md): cfg.epoch (resolved at open) and this incarnation. */
	uint64_t incarnation;
	/* Chain seeds of its segments (docs/log-format.md §7, "Reuse without zeroing"): a
	 * splitmix64 stream keyed by getrandom at create, so a new segment costs no syscall. */
	uint64_t seed_ctr;
	bool creating;          /* OPENING of a plain open: segment 0 of a new log
				 * (OpenSegment.create_log); an argument of the open, not a state */
	bool checking;          /* guard: inside tw__pctl_taken_over (no nesting) */

	/* Segments: segs[i]->id == seg_base + i (a takeover continues after the recovered tail).
	 * cur is the last. */
	uint32_t seg_base;
	struct pseg **segs;
	size_t nsegs, segs_cap;
	struct pseg *cur;

	/* Write slots ring (max_inflight). */
	struct pslot *slots;
	struct pop *pops;
	unsigned nslots;
	/* Append records ring (power of two). */
	struct prec *recs;
	uint64_t rec_mask;
	tw__chain_step_fn chain_step; /* tw__log_chain_step_fn(), chosen at open */

	/*
	 * The engine's shared words, in two groups by writer, each on cache lines of its own
	 * (TW_PCACHE): the appenders write theirs on every append, the driver its own about once
	 * per write, and each only reads the other's. Packed together, every append would wait for
	 * a line the other CPU had just taken (docs/primary.md, "The append engine").
	 */
	/* Written by the appenders. The reservation word: one compare-and-swap reserves an
	 * entry's room, record and place (or the sealer's checksum entry). Bits 0..31: the next
	 * free byte of p->cur; 32..61: records reserved, modulo 2^30 (res_idx); 62: flips at each
	 * new segment (no ABA); 63: the gate (closed: slow path, RES_GATE). */
	_Alignas(TW_PCACHE) uint64_t res;
	/* Publication in order: [0, pub_off) of p->cur is written. Whoever reserved [off, end)
	 * waits until pub_off == off, stores rec_head, then end: one thread at a time. */
	uint64_t pub_off;
	uint64_t rec_head; /* records published (their entries written, their fields set) */
	/* The header chain of p->cur over [0, pub_off) (tw__log_chain_step): advanced by each
	 * entry's publisher in its turn, before it stores pub_off (its header is in its cache
	 * then); set to the new segment's seed in tw__pseg_push; read by the sealer once its
	 * checksum entry is reserved, when nobody else can publish. */
	uint32_t pub_chain;
	/* st.appends and st.bytes, counted by the publisher in its turn, on this line. */
	uint64_t pub_appends, pub_bytes;

	/* Written by the driver (read by appenders). Sealed writes: [slot_tail, slot_posted)
	 * posted and in flight, [slot_posted, slot_head) sealed, not posted yet (a failover is
	 * pending). */
	_Alignas(TW_PCACHE) uint64_t slot_head, slot_posted, slot_tail;
	/* Where the entries not sealed yet begin in p->cur: the end of its last sealed write (0
	 * in a new segment). Written by the driver before rec_sealed, and in tw__pseg_push before
	 * the new segment's word (atomics, see PLD); pending_bytes reads it after the word. */
	uint64_t seal_off;
	uint64_t rec_sealed; /* covered by a sealed write (driver thread) */
	uint64_t rec_tail;   /* acknowledged or failed, callbacks ran (driver thread) */
	bool pt_idle;        /* the progress thread may sleep in its poll: an appender that
			      * publishes an entry due to be sealed wakes it (atomic, see PLD) */
	bool pt_idle_set;    /* progress thread only: its last step_pre set pt_idle */

	_Alignas(TW_PCACHE) bool reap_failed; /* an earlier write failed: every later entry fails */

	int err;             /* sticky failure; 0 while healthy */
	int seal_err;        /* async mode: an appender's seal failed; the driver fails the log */
	bool sealing;        /* async mode: the turn to seal, taken by the progress thread or an
			      * appender (primary_seal.c, seal_turn_take; atomic) */
	char errmsg[1024];
	uint64_t acked_lsn;  /* atomic */

	/* Async mode. */
	pthread_mutex_t lock;
	pthread_cond_t cv_app;  /* app threads wait here (back-pressure, roll, acks, finish) */
	/* Pending work for the progress thread, not lifecycle (a roll may be asked in RUNNING
	 * only, while a failover is pending too). */
	bool need_roll;
	int roll_rc;            /* the last rollover's result (-ENOSPC: arena exhausted) */
	uint64_t roll_gen;      /* rollovers tried */
	unsigned app_waiting;   /* on cv_app: a roll, a flush */
	/* Async mode, the lock-free hand-over (docs/primary.md, "The append engine"):
	 * n_sleep: application threads asleep under the lock (room queue, cv_app); the progress
	 * thread takes the lock after an acknowledgement only when it is non-zero (or a blocking
	 * appender was acknowledged). ctl_pending: a request for the progress thread's control
	 * step (need_roll, frees, STOPPING), set under the lock; it takes the lock for them only
	 * then. Both read and written with atomics. */
	unsigned n_sleep;
	int ctl_pending;
	/* Threads waiting for room (back-pressure), FIFO, under lock: each seal and each
	 * acknowledgement wakes the first one only (no thundering herd). */
	struct pwaiter *room_head, *room_tail;
	/* Blocking appenders whose entries were acknowledged by the callbacks being run: the
	 * progress thread signals each one under the lock once rec_tail moved past it. Progress
	 * thread only (the list is its own; the nodes live on the waiters' stacks). */
	struct pwaiter *acked;

	struct tw_primary_stats st; /* single writer per field; read with atomics */

	/* Released segments (tw_primary_unload): segs[i] is NULL for i < released (an index). */
	uint32_t released;
	struct pseg *free_list; /* async mode, under lock: to be freed by the progress thread */
	uint64_t free_req;      /* async mode, under lock: FreeSegments below this, for the
				 * progress thread (tw_primary_trim); 0: none */
	uint64_t free_done;     /* highest mark sent */

	/* Pre-opened next segment (cfg.preopen): its open RPCs, answered during progress. */
	struct pseg *next;
	struct pcall *next_calls; /* r of them */
	unsigned next_n;

	/* The rolled-over segment whose close RPCs are out (primary_ctl.c, close_begin): set and
	 * cleared by the driver under the lock (tw_primary_unload and _trim read it: it is not
	 * closed yet), its calls driver-only. */
	struct pseg *closing;
	struct pcall *close_calls; /* r of them */
	unsigned close_n;

	/* Backup failure (primary_rerep.c). Driver thread only. Pending work, not lifecycle:
	 * a failover runs inside RUNNING (or a roll, or the finish's drain) and ends there. */
	bool fo_pending;        /* a replica of the open segment is lost: appends suspended */
	bool fo_running;        /* inside tw__pfo_run (no recursion) */
	bool rr_dirty;          /* closed segments may have replicas on lost backups */
	uint64_t fo_since_ns;   /* when the suspension began */
	uint64_t rr_credit_ns;  /* rate limit of background re-replication: earliest next start */
	unsigned fo_first;      /* the backup whose loss began the suspension */

	/* The acknowledged position published to the replicas (primary_acked.c). */
	struct tw__packed *pub;
};

static inline enum pstate pstate(const struct tw_primary *p)
{
	return __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
}

/* Whether the context's progress thread serves the log (async mode, RUNNING or STOPPING): it
 * then owns the control plane (frees, released segments go to it). Any thread. */
static inline bool pserved(const struct tw_primary *p)
{
	enum pstate s = pstate(p);

	return p->threaded && (s == PSTATE_RUNNING || s == PSTATE_STOPPING);
}

/* The counters shared between the appenders and the progress thread (slot_*, rec_*, fo_pending,
 * pt_idle, n_sleep, ctl_pending) are read and written with sequentially consistent atomics:
 * the hand-over relies on store-then-load pairs (an appender stores rec_head, then loads
 * slot_tail and pt_idle; the progress thread stores slot_tail and pt_idle, then loads rec_head
 * and slot_head), so that of two threads racing, at least one sees the other (the Dekker
 * pattern). On x86-64 a load is a plain move; a store is an xchg. */
#define PLD(f) __atomic_load_n(&(f), __ATOMIC_SEQ_CST)
#define PST(f, v) __atomic_store_n(&(f), (v), __ATOMIC_SEQ_CST)

/* primary.c: segments and rollover. */
/* Wake the first thread waiting for room (lock held; async mode). */
void tw__primary_room_wake_one(struct tw_primary *p);
/* Segment `id`, its memory from the log arena (not opened on backups): 0, -ENOSPC (the arena
 * is exhausted; p->errmsg says so) or -ENOMEM. */
int tw__pseg_new(struct tw_primary *p, uint32_t id, struct pseg **out);
/* Give a segment's memory back to the arena and free it (NULL is fine). */
void tw__pseg_free(struct tw_primary *p, struct pseg *s);
/* Add `s` as the new current segment. Takes the lock. */
int tw__pseg_push(struct tw_primary *p, struct pseg *s);
/* Send the opens of the next segment now (cfg.preopen, or `now`: a rollover begins). */
void tw__primary_preopen_start(struct tw_primary *p, bool now);
/* Roll over to the next segment. Driver thread, lock not held. 0, -ENOSPC (arena exhausted,
 * the log goes on) or the primary's error. */
int tw__primary_roll(struct tw_primary *p);

/* The one writer of p->state (primary_open.c): checks that `to` may follow the current state (an
 * illegal transition is a bug: logged, then abort), logs it at debug level. With the lock held
 * in async mode (waiters on cv_app re-check under it; the caller broadcasts). */
void tw__primary_set_state(struct tw_primary *p, enum pstate to);

static inline struct tw_rpc_client *prpc(struct tw_primary *p, struct pbackup *b)
{
	if (b->c->peer.rpc)
		tw__rpc_client_set_incarnation(b->c->peer.rpc, p->incarnation);
	return b->c->peer.rpc;
}

/* Control plane (primary_ctl.c). All run on the driver thread with the lock not held. */
/* Copy the context's backups into the log's view, count those usable for its segment size;
 * -TW_ENOBACKUP (p->errmsg names each) below r. */
int tw__pctl_check_backups(struct tw_primary *p);
/* Choose r backups and open `seg` on them (retry / back-off); fills seg->rep, seg->rk. */
int tw__pctl_open_segment(struct tw_primary *p, struct pseg *seg);
/* Close RPC to every replica of `seg` with its final offset and checksum, and wait for the
 * answers (begin + end). */
int tw__pctl_close_segment(struct tw_primary *p, struct pseg *seg);
/* The close behind a rollover (docs/primary.md, "Segment rollover"): begin sends the close RPCs
 * of the rolled-over `seg` (every write of it completed) and returns; the answers are taken by
 * close_poll on the driver's rounds once all are in, or by close_end, which waits for them (the
 * next rollover, the finish). One such segment at a time (p->closing). end returns 0 or the
 * first error (the log failed, as a failed close always did). */
void tw__pctl_close_begin(struct tw_primary *p, struct pseg *seg);
int tw__pctl_close_end(struct tw_primary *p);
void tw__pctl_close_poll(struct tw_primary *p);
/* Plain open of a new log: ask every usable backup whether it knows the log (-TW_ELOGEXISTS) and
 * resolve cfg.epoch 0 to one past every epoch they report. p->errmsg says why on failure. */
int tw__pctl_probe_new_log(struct tw_primary *p);
/* After a failure that looks like lost backups: was the log taken over? Asks every backup on a
 * fresh connection (a fence closes the old owner's connections) for the log's epoch and
 * owner. Returns 1 and a message in why when another owner holds the log, else 0. */
int tw__pctl_taken_over(struct tw_primary *p, char *why, size_t len);
/* Free segments below `below` on every connected backup (FreeSegments). */
int tw__pctl_free(struct tw_primary *p, uint64_t below, uint64_t *freed_out);
/* Pre-open `seg` (send the opens, do not wait); finish: collect, fill up to r; abandon: give the
 * granted buffers back. */
void tw__pctl_preopen_begin(struct tw_primary *p, struct pseg *seg);
int tw__pctl_preopen_finish(struct tw_primary *p, struct pseg *seg);
void tw__pctl_preopen_abandon(struct tw_primary *p, struct pseg *seg);

/* One control RPC in flight to one backup (primary_ctl.c). */
struct pcall {
	struct pbackup *b;
	int status;
	bool done;
	struct tw_rkey rk; /* open: the grant */
	uint32_t seed;     /* open: the chain seed the backup echoed (0 from a 1.1 backup) */
	char msg[200];     /* the reply's message, or a local reason */
	uint64_t gen;      /* the connection it was sent on (peer.gen) */
};

/* The rule of reused segment memory (docs/log-format.md §7, "Reused segments on the primary"):
 * bytes [off, off + len) of `s` may be sent to a backup only if this use of the memory wrote
 * them, i.e. they lie below the writer's position. A sealed write's range is the writer's own
 * (tw_log_writer_seal); copies (failover, re-replication, rewrites after a reset) are checked
 * in pfo_copy (primary_rerep.c). Lock held in async mode (application threads move the writer). */
bool tw__pseg_sent_ok(const struct pseg *s, size_t off, size_t len);

/* Engine helpers used by the control plane and tests. */
void tw__primary_op_done(struct tw_op *op, int status);
void tw__primary_fail(struct tw_primary *p, int err, const char *fmt, ...) TW_PRINTF(3, 4);
void tw__primary_lock(struct tw_primary *p);
void tw__primary_unlock(struct tw_primary *p);
/* Whether backup `b` holds a replica of the open segment. */
bool tw__primary_is_replica(struct tw_primary *p, unsigned b);

/* tw__ctx_revive_now for the backups down that could take a replica of `s`: none of its
 * replicas, none of the open segment's. */
unsigned tw__pfo_revive(struct tw_primary *p, const struct pseg *s);
/* Backup failure (primary_rerep.c). Driver thread, lock not held.
 * tw__pfo_lost: backup `b` failed (why: for messages); suspends appends when it holds a replica of
 *   the open segment, marks closed segments for background re-replication. Idempotent.
 * tw__pfo_run: replace every lost replica of the open segment (open on a spare, copy the prefix,
 *   bump the replica version), then resume; fails the primary (-TW_ENOBACKUP, -TW_EFENCED) if
 *   it cannot. tw__pfo_background: re-replicate one closed segment if due (rate-limited);
 *   all: every one now. */
void tw__pfo_lost(struct tw_primary *p, unsigned b, const char *why);
/* After a fabric reset of the context (struct tw__log_ops.reset, primary_rerep.c). */
void tw__pfo_after_reset(struct tw_primary *p, const bool *again, int first, uint64_t prev_ns,
			 uint64_t now);

/* Readers (primary_acked.c, docs/readers.md): publish the acknowledged position to the replicas
 * of its segment when it moved (SetAcked, one round in flight at a time), after a reap; release
 * the publisher when the log is freed (calls still in flight complete harmlessly). */
struct tw__packed;
void tw__packed_publish(struct tw_primary *p);
void tw__packed_release(struct tw_primary *p);
/* Sync mode: the last publish left a replica behind the acknowledged position (all its rounds
 * in flight); an answer sends the newest, if someone drives the fabric. */
bool tw__packed_capped(const struct tw_primary *p);

/* Warm standby (standby_warm.c, docs/readers.md): a reader thread that hands the live log's
 * entries to on_entry while the standby waits; stop joins it and returns the position of the
 * first entry it did not deliver (0: none delivered). */
struct tw__warm {
	struct tw_reader_config rc;
	tw_recover_entry_fn on_entry;
	void *arg;
	pthread_t th;
	atomic_bool stop;
	bool started;
	bool refused;      /* on_entry returned non-zero: it stopped delivering there */
	uint64_t entries;  /* delivered */
	uint64_t pos;      /* position of the next entry (written by the thread; read after join) */
};
int tw__warm_start(struct tw__warm *w, const struct tw__pcfg *cfg,
		   tw_recover_entry_fn on_entry, void *arg);
uint64_t tw__warm_stop(struct tw__warm *w);

/* primary_open.c: open as owner (incarnation, first segment `start`) on ctx (NULL: a private
 * context); coord kept by the primary (not closed on failure). */
int tw__primary_open_as(struct tw_ctx *ctx, const struct tw__pcfg *cfg, uint64_t incarnation,
		    uint32_t start, bool creating, struct tw_coord *coord, struct tw_primary **out,
		    char *errmsg_out, size_t errmsg_len);
/* primary_open.c: the end of a takeover: continue cfg's log as the owner `incarnation` the recovery
 * fenced in at res->epoch, from segment `next` (the first after everything the backups held). */
int tw__primary_continue(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
			 uint64_t incarnation, uint64_t next, const struct tw_recover_result *res,
			 struct tw_coord *coord, struct tw_primary **out, char *errmsg_out,
			 size_t errmsg_len);
/* primary_coord.c: open or take over through cfg->coordinator; zone placement; the per-log
 * record of backups: tw__pcoord_note(p, bi) records backup bi for the log before a segment is
 * opened on it (0, or an error: do not use that backup; p->bk[bi].why says why). */
int tw__pcoord_note(struct tw_primary *p, unsigned bi);
/* Before a spare is chosen (driver thread): if the registry changed since the last look (a
 * ZooKeeper child watch), mark the candidates that are no longer registered and add (connect,
 * handshake) the backups registered since, up to PCOORD_EXTRA of them. */
#define PCOORD_EXTRA 16u
void tw__pcoord_refresh(struct tw_primary *p);
int tw__pcoord_open(const struct tw__pcfg *cfg, bool takeover, tw_recover_entry_fn on_entry,
		void *arg, struct tw_recover_result *res_out, struct tw_primary **out,
		char *errmsg_out, size_t errmsg_len);
/* Whether backup `bi` may hold a replica of `seg`: its zone is not the zone of a live replica
 * of seg nor of one of the n backups in pending[] (being asked at the same time). */
bool tw__pzone_ok(const struct tw_primary *p, const struct pseg *seg, unsigned bi,
	      const struct pcall *pending, unsigned n);
void tw__pfo_run(struct tw_primary *p);
void tw__pfo_background(struct tw_primary *p, bool all);
/* This log lets go of backup `b`: a private context closes its channel (pending operations
 * complete with errors); a shared one only when the channel itself is lost (tw__ctx_heal). */
void tw__pctl_drop(struct tw_primary *p, struct pbackup *b);
/* Per-log steps of the driver (primary.c): before the fabric poll (control work: rollover,
 * frees, seal+post; returns true when it did control work, so the poll should not block; sets
 * *done when a stopping log has nothing left), and after it (failover, reap, seal+post). */
bool tw__primary_step_pre(struct tw_primary *p, bool *done);
void tw__primary_step_post(struct tw_primary *p);
bool tw__primary_sleep_begin(struct tw_primary *p);
bool tw__primary_sleep_check(struct tw_primary *p);

#define PSTAT_ADD(p, f, n) __atomic_store_n(&(p)->st.f, (p)->st.f + (n), __ATOMIC_RELAXED)

#endif /* TW_PRIMARY_PRIMARY_INT_H */
