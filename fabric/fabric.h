/*
 * fabric/fabric.h — the internal transport: one "channel to a peer" type over libfabric
 * FI_EP_MSG (verbs, tcp, sockets), FI_EP_RDM (shm; tcp;ofi_rxm and verbs;ofi_rxm are refused,
 * docs/fabric.md), and an in-memory backend for tests. Only fabric/ *.c include <rdma/...>;
 * everything above uses this.
 *
 * Threading: a struct tw_fab and its channels are driven by one thread at a time (the caller
 * serialises). All callbacks run inside tw__fab_progress() — or inside an operation call that had
 * to progress while waiting for queue space — on that thread. tw__fab_wakeup() is the one call
 * that is safe from any thread.
 *
 * Completion semantics: a write completes successfully only once the data is placed at the
 * target (FI_DELIVERY_COMPLETE via fi_writemsg on tcp, sockets, shm, rxm; FI_TRANSMIT_COMPLETE
 * on verbs, which 1.17 offers as its strongest level). Plain fi_write is never used. One
 * exception keeps the guarantee without the flag: on shm, when libfabric 1.17 takes its CMA
 * fast path, the initiator itself copies every byte into the target before it writes the
 * completion; such writes go without FI_DELIVERY_COMPLETE, so the target process does no work
 * for them (tw__chan_fast_writes, docs/fabric.md "Passive shm backups").
 */
#ifndef TW_FABRIC_FABRIC_H
#define TW_FABRIC_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <tailwind/common.h>

struct tw_fab;  /* provider, domain, CQ, EQ/AV, listening endpoint; owns its channels */
struct tw_chan; /* a channel to one peer */
struct tw_mr;   /* a registered memory region */

#define TW_ADDR_MAX 128 /* longest address string, including the NUL */

/* How tw__chan_write moves the bytes (the initiator's choice; every fab serves both). */
enum tw_fab_write_mode {
	TW_FAB_WRITE_ONESIDED = 0, /* one-sided RDMA write (fi_writemsg): the target's CPU idle */
	/* The RPC-replication baseline: the bytes travel as messages; the target's fabric layer
	 * checks the key and range, copies them into the registration, runs its write check
	 * (tw__fab_set_write_check) and replies. Same completion semantics as a one-sided write
	 * (fabric/wmsg.c, docs/fabric.md "Writes sent as messages"). */
	TW_FAB_WRITE_MSG = 1,
};
/* Header of a write message; a write's bytes travel in chunks of max_msg_size minus this. */
#define TW_FAB_WMSG_HDR 64u

/* Strict mode (tw_fab_config.strict): a test mode that behaves as the verbs provider requires,
 * on providers that do not enforce it (docs/fabric.md "Verbs semantics without RDMA hardware"). */
enum tw_fab_strict {
	TW_FAB_STRICT_OFF = 0,
	/* tcp and sockets (FI_EP_MSG) only; -ENOTSUP on any other backend. The provider is asked for
	 * mr_mode FI_MR_BASIC, so it hands out keys and checks virtual addresses itself; the layer
	 * passes a descriptor with every local buffer and checks that a live registration of this
	 * domain covers it (and, for receives and read destinations, allows local writes, as
	 * verbs does), refuses to register memory that is not backed by pages (FI_MR_ALLOCATED),
	 * posts one iov (rma_iov_limit 1), writes with verbs' FI_TRANSMIT_COMPLETE, and keeps the
	 * send queue at TW_FAB_STRICT_SQ entries and each CQ at that plus the receives, where a
	 * post gets -FI_EAGAIN as on verbs (vrb_post_send). A violation fails the call with -EFAULT
	 * and a message naming the libfabric call (tw__fab_errmsg). */
	TW_FAB_STRICT_VERBS = 1,
	/* The same, but a violation aborts the process after logging it, so that it cannot pass
	 * for a lost peer. TW_FAB_STRICT=verbs in the environment sets this for every fab of the
	 * process (how the verbs-semantics test suite runs twd's and primaries). */
	TW_FAB_STRICT_VERBS_ABORT = 2,
};
#define TW_FAB_STRICT_SQ 1u /* strict mode: send queue entries per endpoint (verbs: 384) */

/* Check run by a target over a whole write sent as a message, once placed: 0, or a negative code
 * that fails the write at the initiator. `buf` is the registered memory, borrowed for the call. */
typedef int (*tw_write_check_fn)(const void *buf, size_t len);

struct tw_fab_config {
	/* As users type it: "tcp", "sockets", "shm", "verbs", or "mem" (in-process backend);
	 * names with ";ofi_rxm" are refused (-ENOTSUP). NULL: $FI_PROVIDER if set, else "tcp". */
	const char *provider;
	/* Local address to listen on (passive side); NULL: 127.0.0.1 for IP providers. */
	const char *node;
	/* Port to listen on; NULL or "0": ephemeral (read the real one from tw__fab_listen).
	 * shm: the endpoint's name, fi_ns://SERVICE, the same in every process (a restarted
	 * backup keeps its address); NULL or "0": unique per endpoint (docs/fabric.md "Named shm
	 * endpoints"). */
	const char *service;
	bool busy_poll;              /* progress by polling instead of blocking waits */
	unsigned connect_timeout_ms; /* connect/accept handshake deadline; default
				      * TW_DEFAULT_CONNECT_TIMEOUT_MS */
	unsigned op_timeout_ms;      /* a write/read/send not completed by then fails the channel
				      * with -ETIMEDOUT (covers shm's silent drops); default
				      * TW_DEFAULT_OP_TIMEOUT_MS */
	size_t max_msg_size;         /* largest control message; default 65536 */
	unsigned rx_depth;           /* receive buffers pre-posted per channel; default 32 */
	unsigned tx_depth;           /* operations in flight per channel; default 128 */
	/* TW_FAB_WRITE_ONESIDED (default) or TW_FAB_WRITE_MSG. With MSG, a write's chunks are
	 * max_msg_size bytes long, which the peers' max_msg_size must accept. */
	enum tw_fab_write_mode write_mode;
	/* The clock of every deadline the fab keeps (operation and handshake timeouts, the
	 * timeout of tw__fab_progress): monotonic nanoseconds. NULL: CLOCK_MONOTONIC. A test
	 * passes a virtual clock it advances itself, so timeouts fire without waiting (as raft's
	 * raft_io->time). tw__fab_progress's timeout stays real time (it bounds how long the
	 * thread blocks). Read once per write, read or send and once per progress round
	 * (docs/fabric.md "Deadlines and the clock"). */
	uint64_t (*clock_ns)(void *clock_arg);
	void *clock_arg;
	enum tw_fab_strict strict; /* TW_FAB_STRICT_OFF (default); $TW_FAB_STRICT=verbs overrides */
	/* How registrations meet the provider's memory-registration rules (libfabric backends;
	 * below). NULL: tw__fab_mr_rules, the rules. A test passes a table that breaks one on
	 * purpose, for strict mode to catch (tests/lib/fab_rules.h). */
	const struct tw_fab_mr_rules *mr_rules;
};

/*
 * The memory-registration rules of fi_mr(3) as the libfabric backend applies them, one call per
 * rule, so that a test can commit a mistake through a table of its own instead of a fault flag
 * in the library (as raft's fixture replaces raft_io). Every registration (tw__mr_reg and the
 * registrations of a reset) goes through them:
 *   back:        FI_MR_ALLOCATED: back every page of [buf, buf + len) before fi_mr_reg,
 *                where the provider asks (`asked`);
 *   request_key: the key asked of fi_mr_reg: 0 where the provider picks the keys
 *                (FI_MR_PROV_KEY: `prov_key`), else `own`, a fresh key of ours;
 *   publish_key: the key peers get (struct tw_rkey): fi_mr_key()'s `provider` key, not the
 *                `requested` one.
 */
struct tw_fab_mr_rules {
	void (*back)(void *buf, size_t len, bool asked);
	uint64_t (*request_key)(uint64_t own, bool prov_key);
	uint64_t (*publish_key)(uint64_t provider, uint64_t requested);
};
extern const struct tw_fab_mr_rules tw__fab_mr_rules;

/* Fill `cfg` with the defaults above. */
void tw__fab_config_init(struct tw_fab_config *cfg);

/* Callbacks, run on the thread driving the fab. `arg` is tw_fab_events.arg. */
struct tw_fab_events {
	void *arg;
	/* Passive side: a new peer is connected. The channel belongs to the fab until the user
	 * calls tw__chan_close(). */
	void (*on_accept)(void *arg, struct tw_chan *ch);
	/* A control message arrived on `ch`. `msg` is borrowed until the callback returns. */
	void (*on_recv)(void *arg, struct tw_chan *ch, const void *msg, size_t len);
	/* The channel failed: peer gone, FI_SHUTDOWN, CQ error, op timeout. Pending operations
	 * complete with an error (before or after this call); new ones fail. Called once per
	 * channel; the user still calls tw__chan_close(). */
	void (*on_lost)(void *arg, struct tw_chan *ch, int err);
};

/*
 * Open a fabric instance. Resolves the provider (a missing one gives -TW_ENOPROV and an error
 * message naming the providers this machine offers, see tw__fab_errmsg). `cfg` and `ev` are
 * copied. Returns 0 and *out, or a negative code; on failure a message is logged.
 */
int tw__fab_open(const struct tw_fab_config *cfg, const struct tw_fab_events *ev,
		struct tw_fab **out);

/* Close every channel (without callbacks), the MRs still registered, and the fab. */
void tw__fab_close(struct tw_fab *fab);

/* Target side of TW_FAB_WRITE_MSG: run `check` (NULL: none) over every whole write a peer sends
 * as messages into this fab's registrations, before the reply. One-sided writes never run it. */
void tw__fab_set_write_check(struct tw_fab *fab, tw_write_check_fn check);

/* Resolved provider name ("tcp", "shm", "mem", ...) and whether it uses FI_EP_RDM. */
const char *tw__fab_provider(const struct tw_fab *fab);
bool tw__fab_is_rdm(const struct tw_fab *fab);

/* Human-readable detail of the last failure on this fab (never NULL). With fab == NULL: the
 * message of the last failed tw__fab_open on the calling thread (e.g. -TW_ENOPROV names the
 * providers this machine offers). */
const char *tw__fab_errmsg(const struct tw_fab *fab);

/*
 * Whether a peer that stops answering with operations in flight can hold up the completions of
 * this fab's operations to every other peer, so that after a loss the caller must close every
 * channel, tw__fab_reset() and connect again for the others to make progress. True for shm in
 * libfabric 1.17 (a sender consumes its writes' responses in order; docs/fabric.md "Resetting
 * after a peer loss"); false for tcp, sockets, verbs and mem.
 */
bool tw__fab_loss_blocks_others(const struct tw_fab *fab);

/*
 * Rebuild the provider state (fabric, domain, endpoint, queues) in place. Every channel must be
 * closed (-EBUSY otherwise, and from inside a callback); operations on them completed when they
 * were closed. The handle stays valid (tw__fab_wakeup from other threads stays safe throughout),
 * and so does every registration: same struct tw_mr, registered again (its key may change: read
 * tw__mr_rkey again before sending it to a peer). A listening fab cannot be reset (-ENOTSUP: its
 * peers know the old address). Returns 0, or a negative code, after which the fab can only be
 * closed. No-op on mem.
 */
int tw__fab_reset(struct tw_fab *fab);

/*
 * Passive side: start accepting connections. Writes the address peers pass to tw__fab_connect
 * (e.g. "127.0.0.1:40123", "fi_shm://1234:0:0", "mem://1") into addr_out.
 */
int tw__fab_listen(struct tw_fab *fab, char *addr_out, size_t addr_len);

/*
 * Active side: connect to a listener and return a channel. Blocks up to connect_timeout_ms,
 * progressing the fab meanwhile (callbacks may run). A refused or unreachable peer is an error
 * (-ECONNREFUSED, -ETIMEDOUT, ...), never a hang.
 */
int tw__fab_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out);

/* The connect timeout of the next tw__fab_connect calls (0: the default). Recovery's first,
 * shorter round of connects (docs/recovery.md, "Connects in two rounds"). */
void tw__fab_set_connect_timeout(struct tw_fab *fab, unsigned ms);

/* Close a channel: shuts the endpoint down (MSG) or forgets the peer (RDM). Pending operations
 * complete with -TW_ECLOSED before it returns. `ch` is invalid afterwards. */
void tw__chan_close(struct tw_chan *ch);

/* Stop every transfer on a channel now, before memory its peer could reach is deregistered:
 * the endpoint is closed (MSG) or the peer forgotten (RDM), pending operations complete with
 * -TW_ECLOSED, no on_lost callback runs. The channel stays valid (sends fail) until
 * tw__chan_close(). Why it exists: libfabric 1.17's sockets provider looks a registration up
 * and then uses it after dropping its lock, so closing one while a write to it is in flight
 * crashes the target; closing the writer's endpoint first waits for its progress thread
 * (docs/fabric.md, "Closing a registration under traffic"). */
void tw__chan_shut(struct tw_chan *ch);

void tw__chan_set_user(struct tw_chan *ch, void *user);
void *tw__chan_user(const struct tw_chan *ch);
const char *tw__chan_peer(const struct tw_chan *ch); /* peer address, for messages */
bool tw__chan_is_lost(const struct tw_chan *ch);
/* Whether the channel's writes currently go without FI_DELIVERY_COMPLETE because the provider's
 * completion already means "placed" (shm's CMA fast path, checked before every write; false
 * on every other provider and whenever that is not certain). */
bool tw__chan_fast_writes(const struct tw_chan *ch);
struct tw_fab *tw__chan_fab(const struct tw_chan *ch);

/* Page-aligned, zero-filled memory (anonymous mmap; pages are backed on first touch, nothing is
 * touched here). NULL on failure. Free with tw__fab_free(p, len). */
void *tw__fab_alloc(size_t len);
void tw__fab_free(void *p, size_t len);
/*
 * Fencing a writer that checks no key (fabric/guard.c; docs/fabric.md "Passive shm backups").
 * tw__fab_keyless_writes: whether a peer's one-sided write may reach this fab's registered
 * memory without any key check at the target (shm: its CMA fast path places the bytes with the
 * writer's own process_vm_writev), so that closing a registration does not stop that writer.
 * tw__chan_peer_pid: the peer's process on shm (the fabric's peer watch), else 0 (unknown).
 * tw__fab_move_away: take the pages of [*mem, *mem + len) (a tw__fab_alloc mapping, not
 * registered any more) to a new address, contents kept, and leave a PROT_NONE guard at the old
 * one: a later process_vm_writev to the old address fails with EFAULT, and nothing else is
 * mapped there while the guard stays. *mem is the new address afterwards. Returns 0 (moved,
 * guarded), 1 (moved, but the guard could not be placed: *why_out says why), or a negative
 * errno with *why_out naming the step that failed (the pages stay where they were).
 * tw__fab_guard_free: unmap a guard (len: the buffer's length) once no writer can aim at it.
 */
bool tw__fab_keyless_writes(const struct tw_fab *fab);
int tw__chan_peer_pid(const struct tw_chan *ch);
int tw__fab_move_away(void **mem, size_t len, const char **why_out);
/* The same with the memory calls it makes given (the seam of tests/unit/test_fabric_guard.c:
 * a kernel that refuses MREMAP_DONTUNMAP, a range taken in the window that path has). */
struct tw_vm_ops {
	void *(*mremap)(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
	void *(*mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
};
int tw__fab_move_away_vm(const struct tw_vm_ops *vm, void **mem, size_t len,
			 const char **why_out);
void tw__fab_guard_free(void *guard, size_t len);
/* Huge page size the large mappings use (x86-64 and arm64 with 4 KiB base pages: 2 MiB). */
#define TW_FAB_HUGE_PAGE ((size_t)2 << 20)
/* A large region for a registration that lives long (the primary's log arena): explicit huge
 * pages (MAP_HUGETLB) when len is a multiple of TW_FAB_HUGE_PAGE and the system has some
 * reserved (*huge_out true); else 4 KiB pages aligned to TW_FAB_HUGE_PAGE and advised for
 * transparent huge pages (MADV_HUGEPAGE). Zero-filled, nothing touched. NULL on failure. Free
 * with tw__fab_free(p, len). */
void *tw__fab_map_large(size_t len, bool *huge_out);

/* Access rights of a registration. */
enum {
	TW_MR_SEND = 1u << 0,         /* local source of sends */
	TW_MR_WRITE_SRC = 1u << 1,    /* local source of one-sided writes */
	TW_MR_READ_DST = 1u << 2,     /* local destination of one-sided reads */
	TW_MR_REMOTE_WRITE = 1u << 3, /* peers may write into it */
	TW_MR_REMOTE_READ = 1u << 4,  /* peers may read from it */
};

/* What a peer needs to access a region: remote address of byte 0 (a virtual address or 0,
 * as the provider's mr_mode says), key, and length. Sent to peers in RPC replies. */
struct tw_rkey {
	uint64_t addr;
	uint64_t key;
	uint64_t len;
};

/*
 * Register `len` bytes at `buf` (page-aligned). A provider that wants the pages backed before
 * registration (FI_MR_ALLOCATED: verbs) gets every page of the range touched first (read, so
 * the contents stay as they are).
 * Keys are provider keys, or our own unique and unguessable per domain.
 */
int tw__mr_reg(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out);
/* Deregister. Afterwards writes with its key fail at the target on providers that check keys
 * (tcp, sockets, verbs; not shm's fast path, see docs). */
void tw__mr_close(struct tw_mr *mr);
void tw__mr_rkey(const struct tw_mr *mr, struct tw_rkey *out);
void *tw__mr_base(const struct tw_mr *mr);
size_t tw__mr_len(const struct tw_mr *mr);

/* Caller-owned operation state; must stay valid and untouched until its callback ran. */
struct tw_op;
typedef void (*tw_op_cb)(struct tw_op *op, int status);
struct tw_op {
	void *fab_priv[1]; /* the backend's in-flight state (ofi: its struct ofi_ctx) */
	tw_op_cb cb;       /* status 0 on success, negative code on failure */
	void *arg;         /* for the caller */
	struct tw_chan *chan;
	uint64_t deadline_ns; /* set by the fabric */
	struct tw_op *next;   /* fabric's in-flight list */
	struct tw_op *prev;
	uint64_t fab_tag;     /* fabric's: the tag of a write sent as messages, else 0 */
	unsigned flags;       /* TW_OP_*, set by the caller (0 when zeroed) */
};
/* The bytes of this write are not a unit the target's write check understands (a copy cut at
 * arbitrary offsets): a target that places them itself (TW_FAB_WRITE_MSG) skips the check. */
#define TW_OP_UNCHECKED 0x1u

/*
 * One-sided write of `len` bytes from `src` (inside the registered `src_mr`) to byte
 * `remote_off` of the peer region `rk`. Checks remote_off + len <= rk->len locally (-ERANGE).
 * Returns 0 when posted (op->cb will run exactly once), or a negative code (cb will not run).
 * When the queue is full it progresses the fab and retries (other callbacks may run meanwhile).
 * With cfg.write_mode TW_FAB_WRITE_MSG the bytes go as messages instead (same contract; a write
 * the target refuses completes with its code, e.g. -EACCES, -ERANGE or the check's, and the
 * channel stays up).
 */
int tw__chan_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
		  struct tw_mr *src_mr, const struct tw_rkey *rk, uint64_t remote_off);

/* One-sided read of `len` bytes from the peer region into `dst` (inside `dst_mr`). */
int tw__chan_read(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
		 const struct tw_rkey *rk, uint64_t remote_off);

/*
 * A one-sided read (`read` true: into `local`) or write (from `local`) as above, then progress of
 * the channel's fab until it completes, for a caller with nothing else to do meanwhile (a
 * reader's one-sided read, tests); other callbacks run meanwhile. Returns 0, the post's negative
 * code, or the operation's (a failed or revoked access, a lost channel, the deadline).
 */
int tw__chan_rma_sync(struct tw_chan *ch, bool read, void *local, size_t len, struct tw_mr *mr,
		      const struct tw_rkey *rk, uint64_t remote_off);

/*
 * Send a control message (len <= max_msg_size; one that begins with the bytes 0x54 0x44, which
 * mark the fabric's own write messages, is refused with -EINVAL). The bytes are copied into an internal
 * registered buffer before return, so `msg` is borrowed only for the call. Delivery failures
 * surface as on_lost. Returns 0 or a negative code.
 */
int tw__chan_send(struct tw_chan *ch, const void *msg, size_t len);

/*
 * Poll the completion and event queues and run callbacks. timeout_ms 0: poll once; > 0: wait
 * up to that long for something to happen; -1: wait until something happens or tw__fab_wakeup().
 * Busy-polls instead of blocking when cfg.busy_poll is set. Also fails operations past their
 * deadline. Returns the number of events handled (>= 0) or a negative code.
 */
int tw__fab_progress(struct tw_fab *fab, int timeout_ms);

/* Make a tw__fab_progress() blocked in another thread return. Thread-safe. */
void tw__fab_wakeup(struct tw_fab *fab);

/*
 * Waiting in the caller's event loop instead of in tw__fab_progress (tw_primary_wait_fd):
 * tw__fab_wait_fd gives a descriptor that becomes readable when the fab has work (the epoll set
 * of its wait objects), or -ENOTSUP when the backend has none (mem; shm, whose completions come
 * from polling the peers' regions; a queue opened without a wait fd). Before every sleep on it
 * the caller asks tw__fab_wait_prepare, which checks that every wait object agrees to the sleep
 * (fi_trywait) and takes a pending tw__fab_wakeup: it returns 0 (poll again first: something is
 * ready, or a handshake is in progress, which tcp 1.17 does not signal on the fd) or the longest
 * the caller may sleep in ms (max_ms, or less for the next deadline; -1 and max_ms -1: no
 * limit). The time until the next tw__fab_progress counts as the fab's own wait (deadlines,
 * tw__fab_clock) when the caller keeps to it.
 */
int tw__fab_wait_fd(struct tw_fab *fab);
int tw__fab_wait_prepare(struct tw_fab *fab, int max_ms);

struct tw_fab_stats {
	uint64_t writes, write_bytes;  /* one-sided writes completed successfully, as initiator */
	uint64_t fast_writes;          /* of those, without delivery-complete (tw__chan_fast_writes) */
	uint64_t reads, read_bytes;
	uint64_t sends, send_bytes;
	uint64_t recvs, recv_bytes;    /* messages received (write messages included) */
	uint64_t cq_polls, cq_entries; /* progress work done */
	uint64_t eagain_retries;
	uint64_t errors;
	uint64_t wmsg_writes;          /* writes posted as messages (TW_FAB_WRITE_MSG), as initiator */
	uint64_t wmsg_served, wmsg_served_bytes; /* writes (whole) and bytes placed for peers */
	uint64_t shm_peer_checks;      /* shm: liveness checks on the post path (slow path only) */
	uint64_t shm_lock_waits;       /* shm: posts deferred: the peer's region lock was held */
	uint64_t shm_av_peers;         /* shm: address-vector entries held now (not a counter) */
	uint64_t shm_av_given_back;    /* shm: entries removed once their peer's endpoint was gone */
	uint64_t shm_remote_writes;    /* shm: one-sided writes peers made into our registrations,
					* as last read by a polling backoff round (its counter;
					* 0 without one) */
	/* sockets: channels that went down with transfers in the provider hand their endpoint to a
	 * closing record, closed by progress once the provider is done (docs/fabric.md "Closing a
	 * registration under traffic") */
	uint64_t closes_deferred;      /* records made */
	uint64_t closes_forced;        /* records closed at the 200 ms bound, transfers unacknowledged */
	uint64_t closing_eps;          /* records held now (not a counter) */
	/* strict mode (TW_FAB_STRICT_VERBS) */
	uint64_t strict_checks;        /* local buffers checked against the domain's registrations */
	uint64_t strict_violations;    /* calls failed by a check */
	uint64_t cq_full;              /* posts refused with -FI_EAGAIN because their CQ had no free
					* entry (counted in eagain_retries too) */
	/* shm doorbells (docs/fabric.md "Idle shm backups sleep on a doorbell") */
	uint64_t bell_sleeps;          /* sleeps on our doorbell (a listener gone idle) */
	uint64_t bell_rings;           /* futex wakes of a peer's doorbell after our posts */
	uint64_t unobserved_ns;        /* time left out of every deadline: gaps of more than 1 s
					* between two looks outside the fab's own wait (a
					* descheduled thread; docs/fabric.md "Deadlines and the
					* clock") */
};
void tw__fab_get_stats(const struct tw_fab *fab, struct tw_fab_stats *out);
/* shm: how many regions of this process's closed endpoints are kept for a connection request
 * their peer has not read yet (libfabric 1.17, docs/fabric.md "shm: a connection request from
 * a closed endpoint"), after removing those no longer needed. Thread-safe. */
unsigned tw__fab_shm_kept(void);
/* stats.writes and stats.fast_writes, from any thread (the stats are the progress thread's). */
void tw__fab_write_counts(const struct tw_fab *fab, uint64_t *writes, uint64_t *fast_writes);

/*
 * In-memory backend fault injection ("mem" provider only; -ENOTSUP elsewhere).
 * Applies to the next one-sided write posted on `ch`, except TW_MEM_FAULT_STOP, which lasts.
 */
enum tw_mem_fault_kind {
	TW_MEM_FAULT_NONE = 0,
	TW_MEM_FAULT_PREFIX, /* only the first `prefix` bytes land, then the channel is lost */
	TW_MEM_FAULT_CHUNKS, /* only the 64-byte chunks whose bit is set in `chunk_mask` land
			      * (bit i = bytes 64i..64i+63; bits past 63 never land), then lost */
	TW_MEM_FAULT_FAIL,   /* nothing lands; the write completes with -EIO */
	TW_MEM_FAULT_DROP,   /* nothing lands, no completion until the op timeout */
	TW_MEM_FAULT_VANISH, /* the peer vanishes: nothing lands, the channel is lost */
	TW_MEM_FAULT_STOP,   /* from now on the peer is stopped (SIGSTOP): every message either
			      * way is accepted and never delivered, every write or read posted
			      * on `ch` never lands nor completes (until the op timeout) */
};
struct tw_mem_fault {
	enum tw_mem_fault_kind kind;
	size_t prefix;
	uint64_t chunk_mask;
};
int tw__mem_inject(struct tw_chan *ch, const struct tw_mem_fault *fault);

/* Events and copy orders the mem backends have allocated so far, in this process (a test's
 * check that a warm channel allocates nothing per write, read, send or completion). */
uint64_t tw__mem_allocs(void);

#endif /* TW_FABRIC_FABRIC_H */
