/*
 * fabric/ofi_int.h — the libfabric backend's objects. Files by object, like libfabric's tcp
 * provider: ofi_fab.c (provider choice, hints, fabric/domain, close), ofi_cm.c (FI_EP_MSG
 * connect/accept, EQ), ofi_rdm.c (FI_EP_RDM: AV, hello/bye, channel header), ofi_mr.c,
 * ofi_rma.c (write/read), ofi_msg.c (send ring, receive buffers), ofi_cq.c (contexts, CQ
 * dispatch, progress and wait objects).
 *
 * Operation contexts: libfabric gets a struct ofi_ctx, never the caller's tw_op, as op_context.
 * A channel that is lost or closed completes its caller ops at once (exactly once), and the
 * caller may reuse them; the ctx outlives them until the provider is done with it: on MSG until
 * the endpoint and its CQ are closed, on RDM (shared endpoint) until its completion arrives
 * ("orphan" ctxs, ch == NULL). ctxs come from a per-fab pool freed only at tw__fab_close.
 */
#ifndef TW_FABRIC_OFI_INT_H
#define TW_FABRIC_OFI_INT_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "fabric/fab_int.h"

#define OFI_VERSION FI_VERSION(1, 17)

enum ctx_kind { CTX_WRITE, CTX_READ, CTX_SEND, CTX_RECV };

struct ofi_chan;

/*
 * shm: one address-vector entry per peer endpoint name, shared by every channel to it
 * (ofi_rdm.c "AV entries on shm"). libfabric 1.17's shm AV holds 256 peers and its fi_av_remove
 * leaves stale state behind, so an entry is given back only on a fab that only accepts, once no
 * channel and no operation uses it and the peer's endpoint is gone (its process exited or its
 * region was removed), one CQ read after that was seen.
 */
struct rdm_peer {
	struct rdm_peer *next;
	fi_addr_t addr;
	unsigned refs;          /* channels using it */
	unsigned posted;        /* contexts posted to it that the provider has not completed */
	bool accepted;          /* made for a HELLO (the peer mapped us first): may be given back */
	int pidfd;              /* the peer process (accepted entries), -1: not known */
	dev_t dev;              /* its region's shm object when the entry was made */
	ino_t ino;
	uint64_t gone_polls;    /* != 0: seen gone when cq_polls was this; given back after a later read */
	bool region_known;      /* dev and ino are set */
	unsigned gen;           /* the entries made for this name before it (a restarted peer) */
	char name[TW_ADDR_MAX];
};

struct ofi_ctx {
	struct fi_context2 fctx; /* first: the provider's scratch space (FI_CONTEXT mode) */
	enum ctx_kind kind;
	struct ofi_chan *ch;     /* NULL: orphan (its channel is gone) */
	struct tw_op *op;        /* write/read: NULL once the generic layer completed it */
	size_t len;
	uint64_t deadline_ns;
	void *buf;               /* send slot / receive buffer */
	bool bye;                /* RDM goodbye: av_remove(bye_addr) when it completes */
	bool fast;               /* write posted without FI_DELIVERY_COMPLETE (shm CMA path) */
	fi_addr_t bye_addr;
	struct rdm_peer *peer;   /* shm: the AV entry it was posted to (counted in its `posted`) */
	struct ofi_ctx *next, *prev; /* channel's posted list, or a free list */
};

/* RDM channel header in front of every message on a shared endpoint (little-endian). */
#define RDM_HDR_LEN 16
#define RDM_MAGIC 0x54574600u /* "TWF\0" | type */
enum rdm_type { RDM_HELLO = 1, RDM_ACK = 2, RDM_DATA = 3, RDM_BYE = 4 };

/* Pre-posted receive buffers: n slots of slot_size bytes in one registration, ctx[i] each. */
struct ofi_rx {
	void *buf;
	size_t buf_len;
	unsigned n;
	struct fid_mr *mr;
	void *desc;
	struct ofi_ctx *ctx;
	unsigned posted;        /* MSG: receives posted now (strict mode's CQ accounting) */
};

/*
 * sockets (drain_close): the endpoint of a channel that went down while transfers posted on it
 * were still inside the provider, kept open with its CQ and receive buffers until the provider
 * has completed them (tw__cm_chan_down, docs/fabric.md "Closing under traffic"). Reaped by
 * progress without blocking (tw__cm_reap). Refers to no channel: the channel is gone already.
 */
/* sockets: transfers one channel may have inside the provider at once. libfabric 1.17's
 * sockets provider turns each posted transfer into one of 128 progress entries per domain
 * (SOCK_PE_MAX_ENTRIES) and posts nothing while none is free (sock_pe_progress_tx_ctx), so
 * one peer that stops acknowledging must not be able to hold them all (docs/fabric.md). */
#define OFI_SOCKETS_CHAN_TX_MAX 16u

struct ofi_closing {
	struct ofi_closing *next;
	struct fid_ep *ep;
	struct fid_cq *cq;
	int cq_fd;              /* stays in the epoll set: reading the CQ empty consumes it */
	struct ofi_rx rx;
	struct ofi_ctx *posted, *posted_tail; /* write/read/send ctxs still in the provider */
	uint64_t end_ns;        /* tw_now_ns() bound of the synchronous waits (tw__cm_reap_all);
				 * the asynchronous reap waits for every transfer */
	char peer[TW_ADDR_MAX]; /* for the log */
};

/*
 * shm doorbell (ofi_bell.c, docs/fabric.md "Idle shm backups sleep on a doorbell"): the start of
 * a small POSIX shm object per listening shm fab, mapped read-write by the fab and by every peer
 * that connects to it. The owner sets `sleeping` and then looks at its queue once more before
 * it sleeps on `seq` (futex); a peer that posted something and then sees `sleeping` set clears
 * it, bumps `seq` and wakes it. Every access to `sleeping` after the setup is a read-modify-
 * write.
 */
#define OFI_BELL_MAGIC 0x54574231u /* "TWB1" */
struct ofi_bell {
	uint32_t magic;           /* OFI_BELL_MAGIC once the owner has set it up */
	int32_t pid;              /* the owner's */
	_Atomic uint32_t seq;     /* the futex word: every ring bumps it */
	_Atomic uint32_t sleeping; /* 1: the owner sleeps or is about to (rings only then) */
};

struct ofi_fab {
	struct tw_fab base;
	struct fi_info *hints;  /* kept for connect-time fi_getinfo */
	struct fi_info *info;   /* what fi_getinfo returned for us (passive/RDM source) */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	/* MSG */
	struct fid_eq *eq;
	struct fid_pep *pep;
	/* RDM */
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	int cq_fd;
	/* shm: counts the one-sided writes peers made into our registrations (FI_REMOTE_WRITE,
	 * FI_RMA_EVENT), which give no completion; read only in the backoff (ofi_cq.c). NULL when
	 * the provider does not offer it. */
	struct fid_cntr *rw_cntr;
	uint64_t rw_seen;
	/* shm, listening: our doorbell (ofi_bell.c), NULL when there is none (then we poll as
	 * before). Atomic: tw__fab_wakeup reads it from other threads. */
	_Atomic(struct ofi_bell *) bell;
	size_t bell_len;
	char bell_name[TW_ADDR_MAX + 16];
	unsigned idle_rounds;   /* backoff rounds at its longest sleep since the last activity */
	unsigned bells_out;     /* channels with a peer_bell (ring while we wait for them) */
	char name[TW_ADDR_MAX]; /* our RDM address as a string */
	bool listening;
	bool named;             /* shm: our endpoint is named after cfg.service (fi_ns://SERVICE) */
	/* provider facts, read back from fi_getinfo */
	bool is_verbs, virt_addr, prov_key, mr_local, addr_str;
	/* Strict mode (ofi_strict.c, cfg.strict): the live registrations of the domain, with
	 * their descriptors and ranges. */
	bool strict;
	struct strict_reg *regs;
	size_t nregs, regs_cap;
	const struct tw_fab_mr_rules *mr_rules; /* cfg.mr_rules or tw__fab_mr_rules */
	uint64_t req_key;       /* the key the last fi_mr_reg asked for (mr_rules->publish_key) */
	bool shm;               /* the shm provider: AV entries per peer (rdm_peer), peer watch */
	/* shm: AV entries (struct rdm_peer), and whether this fab gives them back: it listens and
	 * has never connected out (ofi_rdm.c "AV entries on shm") */
	struct rdm_peer *peers;
	bool give_back, connected_out;
	/* shm: a channel of this fab was to another endpoint of this process (ofi_rdm.c "Peers
	 * in this process"): its progress takes the peers-in-this-process lock, its close keeps its region */
	bool local_peers;
	uint64_t sweep_ns;      /* next look at the entries no channel uses */
	bool mr_allocated; /* FI_MR_ALLOCATED: registered pages must be backed (tw__ofi_mr_reg) */
	bool drain_close;       /* sockets: close a channel's endpoint only once its transfers
				 * have completed (tw__cm_chan_down, docs/fabric.md "Closing under
				 * traffic"), from a closing record reaped by progress */
	struct ofi_closing *closing_head, *closing_tail; /* oldest (earliest end_ns) first */
	bool no_shutdown;       /* sockets: close without fi_shutdown (F10: its fi_shutdown may
				 * close a descriptor number libfabric already closed) */
	size_t inject_size, tx_size, rx_size, rma_iov_limit, max_msg_size, cq_data_size, mr_key_size;
	uint64_t write_flags;   /* FI_COMPLETION | DELIVERY or TRANSMIT complete */
	/* shm CMA fast path (ofi_rdm.c, docs/fabric.md "Passive shm backups"): the first bytes of
	 * our own shm region, mapped read-only, where shm 1.17 keeps the CMA capability it
	 * reads before every write; NULL when the fast path is never used. */
	const volatile unsigned char *shm_region;
	size_t shm_region_len;
	uint64_t shm_check_ns;  /* shm: next periodic liveness check of the watched peers */
	/* shm: our region's lock, watched by a thread of its own (ofi_wedge.c); NULL if not */
	struct shm_wedge *wedge;
	struct {
		uint64_t call;  /* the progress call in flight (its number), 0: none (atomic) */
		uint64_t calls; /* progress calls made (the progress thread's only) */
		int tid;        /* the thread that made the last one (atomic) */
		uint64_t resets; /* locks of dead holders freed (atomic) */
	} wmark;
	unsigned tx_max;        /* RDM: posts in flight on the shared endpoint */
	unsigned tx_inflight;
	/* send ring: slot i = sctx[i], buffer sbuf + i * slot_size, one registration */
	void *sbuf;
	size_t slot_size, sbuf_len;
	unsigned nslots;
	struct fid_mr *smr;
	void *sdesc;
	struct ofi_ctx *sctx, *sfree;
	struct ofi_rx rx;       /* RDM receive buffers (MSG ones belong to each channel) */
	/* write/read ctx pool */
	struct ofi_ctx *cfree;
	void **chunks;
	size_t nchunks;
	/* waiting: epoll over the EQ/CQ wait fds + an eventfd for tw__fab_wakeup */
	int epfd, evfd, eq_fd;
	atomic_bool woken;      /* a wakeup wrote evfd since tw__ofi_wait_fd last drained it */
	unsigned nofd;          /* waitable objects without a wait fd: poll with backoff instead */
	unsigned backoff_us;
	bool closing;
	/* Completions read from CQs but not yet handled. Handling runs callbacks that may
	 * progress again (a send waiting for a slot): a nested poll continues from this FIFO, so
	 * no completion is ever stuck in an outer frame's local array. */
	struct fi_cq_data_entry pend[256];
	unsigned pend_head, pend_count;
};

struct ofi_chan {
	struct tw_chan base;
	int fail_err;           /* handshake failure */
	struct ofi_ctx *posted; /* write/read/send ctxs in flight, oldest first */
	struct ofi_ctx *posted_tail;
	/* MSG: messages that overtook our FI_CONNECTED (the peer spoke first), handed to on_recv
	 * at the next progress after tw__fab_connect returned, in order */
	struct ofi_ctx *deferred, *deferred_tail;
	unsigned tx_inflight, tx_max;
	/* MSG */
	struct fid_ep *ep;
	struct fid_cq *cq;
	unsigned sq_size, cq_size; /* strict mode: the verbs-like limits of tw__strict_queue_full */
	int cq_fd;
	struct ofi_rx rx;
	/* RDM */
	fi_addr_t addr;
	bool have_addr;
	uint32_t peer_id;
	struct rdm_peer *peer;  /* shm: its AV entry (one reference), NULL once down */
	bool self;              /* the peer is our own endpoint (shm: cma_cap_self applies) */
	bool local;             /* shm: the peer is another endpoint of this process */
	bool wd_counted;        /* counted in tw__shm_local_chans (local, or its pid unknown) */
	unsigned local_seen;    /* the count of local closes when last checked (ofi_rdm.c) */
	/* shm: the peer process, watched so that nothing is posted to a dead one (ofi_rdm.c,
	 * docs/failover.md "shm: a killed backup"). Valid while `watched`. */
	bool watched;
	bool peer_gone;         /* its process exited: the channel is lost, post nothing more */
	bool going_down;        /* tw__rdm_chan_down runs or ran */
	int pidfd;              /* pidfd_open(2) of the peer, -1: none (its death is not seen) */
	int peer_pid;
	const volatile int *peer_lock; /* the spinlock word of the peer's region (read only), or
					* NULL when its layout is not known */
	int lock_free;          /* the word's value when free (glibc x86_64: 1, generic: 0) */
	void *peer_map;         /* our read-only mapping of the peer region's first page */
	size_t peer_map_len;
	uint64_t checked_ns;    /* last liveness check of the post path (rate limit) */
	/* shm doorbells (ofi_bell.c): the peer's, which we ring after our posts and while we wait
	 * for it (NULL: it has none); whether the peer said it rings ours (HELLO/ACK) */
	struct ofi_bell *peer_bell;
	size_t peer_bell_len;
	bool rings_us;
};

struct ofi_mr {
	struct tw_mr base;
	struct fid_mr *mr;
	void *desc;
};

static inline struct ofi_fab *ofab(struct tw_fab *f)
{
	return (struct ofi_fab *)f;
}

/* ofi_fab.c */
int tw__ofi_errno(int fi_rc); /* libfabric return → our negative code */

/* ofi_cm.c (MSG) */
int tw__cm_listen(struct tw_fab *fab, char *addr_out, size_t addr_len);
int tw__cm_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out);
int tw__cm_poll_eq(struct ofi_fab *of);
void tw__cm_chan_down(struct ofi_chan *ch, bool closing);
int tw__cm_check_handshakes(struct ofi_fab *of);
void tw__cm_drain_eq(struct ofi_fab *of);
/* Close the closing records whose transfers have completed or whose bound has passed; never
 * blocks. Returns the contexts given back. Called by progress when closing_head is set. */
int tw__cm_reap(struct ofi_fab *of);
/* Close every closing record, waiting on their CQs up to one shared 200 ms bound (fab close and
 * reset, and before a registration is closed: an open endpoint may still place a write). */
void tw__cm_reap_all(struct ofi_fab *of);
int tw__sockaddr_to_str(const void *sa, char *out, size_t len);

/* ofi_rdm.c */
int tw__rdm_open_ep(struct ofi_fab *of);
int tw__rdm_shm_name_ok(const char *service);
int tw__rdm_listen(struct tw_fab *fab, char *addr_out, size_t addr_len);
int tw__rdm_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out);
void tw__rdm_chan_down(struct ofi_chan *ch, bool closing);
/* Returns true when it kept ctx (message deferred until the channel is visible). */
bool tw__rdm_on_recv(struct ofi_fab *of, struct ofi_ctx *ctx, size_t len);
void tw__chan_defer(struct ofi_chan *ch, struct ofi_ctx *ctx, size_t len);
void tw__rdm_put_hdr(unsigned char *p, enum rdm_type type, uint32_t dst, uint32_t src, uint32_t len);
/* shm: unmap the region header ofi_rdm.c mapped at the open (when the CMA fast path was
 * possible), at close. */
void tw__rdm_shm_fast_fini(struct ofi_fab *of);
/* Whether a write posted now on `ch` takes shm's CMA fast path, whose completion means the
 * bytes are in the peer's memory, so it needs no FI_DELIVERY_COMPLETE. A memory load; also
 * records the answer in ch->base.fast_write. */
bool tw__rdm_shm_fast(struct ofi_fab *of, struct ofi_chan *ch);
/* Slow path of tw__rdm_shm_may_post: the peer's region lock is held or its oldest op is
 * stale. False: do not post now (the channel may have been marked lost: check it). */
bool tw__rdm_shm_may_post_slow(struct ofi_fab *of, struct ofi_chan *ch);
/* Progress round: every TW_SHM_CHECK_MS, one poll(2) over the watched peers' pidfds; on a fab
 * that gives AV entries back, also the sweep of unused entries. */
int tw__rdm_shm_check_peers(struct ofi_fab *of);
/* shm: a context posted to the channel's peer is done (completion, error): uncount it. */
static inline void tw__rdm_peer_done(struct ofi_ctx *ctx)
{
	if (ctx->peer)
		ctx->peer->posted--;
	ctx->peer = NULL;
}
/* shm: free every AV entry's bookkeeping (the AV itself is closed by the caller). */
void tw__rdm_peers_free(struct ofi_fab *of);

/* Before every post on a watched shm channel: a memory load and a compare, no syscall. Post
 * only when the peer's region lock is seen free (a peer killed holding it would make the post
 * spin forever inside libfabric), and check the peer's liveness first when the channel's oldest
 * operation is older than TW_SHM_STALE_MS. */
#define TW_SHM_STALE_MS 10
static inline bool tw__rdm_shm_may_post(struct ofi_fab *of, struct ofi_chan *ch)
{
	uint64_t stale = (uint64_t)of->base.cfg.op_timeout_ms * 1000000u;

	if (!ch->watched)
		return true;
	if ((!ch->peer_lock || *ch->peer_lock == ch->lock_free) && !ch->peer_gone &&
	    (!ch->posted ||
	     ch->posted->deadline_ns + TW_SHM_STALE_MS * 1000000ull > of->base.now_ns + stale))
		return true;
	return tw__rdm_shm_may_post_slow(of, ch);
}

/* shm peers in this process (ofi_rdm.c "Peers in this process"): an endpoint's close takes
 * the lock for writing; posts to such a peer and the progress of a fab that has one take it for
 * reading, around the libfabric call only (never across a callback). */
void tw__shm_local_rdlock(void);
void tw__shm_local_unlock(void);
static inline bool tw__shm_local_enter(bool use)
{
	if (use)
		tw__shm_local_rdlock();
	return use;
}
static inline void tw__shm_local_leave(bool held)
{
	if (held)
		tw__shm_local_unlock();
}
/* Under the read lock, before a post to a peer of this process: false (and the channel lost)
 * once that endpoint was closed. */
bool tw__rdm_local_may_post(struct ofi_fab *of, struct ofi_chan *ch);
/* Close the endpoint; shm with peers in this process: keep its region mapped (ofi_rdm.c). */
void tw__rdm_close_ep(struct ofi_fab *of);
/* A closed endpoint's region was removed: channels to peers of this process look again. */
void tw__rdm_local_bump(void);

/* ofi_keep.c: shm (1.17), the region of an endpoint closed with a connection request its peer
 * has not read stays under its name until the peer read it (docs/fabric.md "shm: a connection
 * request from a closed endpoint"). Before fi_close: NULL, or the unread requests found (the
 * region's name then survives fi_close). After fi_close: keep it (NULL: just sweep). */
struct tw__keep;
struct tw__keep *tw__keep_prepare(struct ofi_fab *of);
void tw__keep_add(struct tw__keep *k);
/* From progress: every KEEP_SWEEP_MS while regions are kept, remove those no longer needed. */
void tw__keep_poll(void);

/* ofi_wedge.c: a region lock left held by a killed peer (docs/fabric.md "A writer killed
 * holding a region lock"). The watchdog frees our region's lock when our progress has waited
 * TW_SHM_WEDGE_MS for it inside one call, and no live process that could hold it is paused. */
#define TW_SHM_WEDGE_MS 500
struct shm_wedge;
/* shm (1.17): watch our own region's lock (after the endpoint is enabled and named). */
void tw__wedge_watch(struct ofi_fab *of);
/* Stop watching it (before the endpoint is closed). */
void tw__wedge_unwatch(struct ofi_fab *of);
int tw__wedge_tid(void);
/* shm: open channels whose peer may be another endpoint of this process (its pid is ours, or
 * could not be told), counted by ofi_rdm.c; while none is open, no thread of ours posts to our
 * own region, so another shm endpoint in the process cannot be holding its lock (ofi_wedge.c). */
unsigned tw__shm_local_chans(void);
/* libfabric 1.17's struct smr_region: the pthread_spinlock_t lock, after uint32
 * max_sar_buf_per_peer (offset 12) and void *base_addr (offset 16, aligned for 4- and 8-byte
 * pointers). Trusted only where the version checks of ofi_rdm.c passed. */
#define TW_SMR_V117_OFF_LOCK (16 + sizeof(void *))
/* The value of a free pthread spinlock, asked of glibc (ofi_rdm.c). */
int tw__shm_spin_free_value(void);
/* Around every call that runs shm's progress (fi_cq_read, fi_cntr_read): a plain increment and
 * two relaxed stores, no syscall (the thread id is cached per thread). */
static inline void tw__wedge_enter(struct ofi_fab *of)
{
	if (!of->wedge)
		return;
	__atomic_store_n(&of->wmark.tid, tw__wedge_tid(), __ATOMIC_RELAXED);
	__atomic_store_n(&of->wmark.call, ++of->wmark.calls, __ATOMIC_RELEASE);
}
static inline void tw__wedge_leave(struct ofi_fab *of)
{
	if (of->wedge)
		__atomic_store_n(&of->wmark.call, 0, __ATOMIC_RELEASE);
}

/* ofi_bell.c: the doorbell of an idle shm listener (docs/fabric.md "Idle shm backups sleep on a
 * doorbell"). */
/* A listening shm fab: create and map our doorbell; on failure we keep polling (logged). */
void tw__bell_create(struct ofi_fab *of);
/* Unmap and remove our doorbell (fab close). */
void tw__bell_destroy(struct ofi_fab *of);
/* shm: map the doorbell of the peer of `ch`, if it has one (after shm_watch: its pid is known). */
void tw__bell_peer_open(struct ofi_fab *of, struct ofi_chan *ch);
void tw__bell_peer_close(struct ofi_chan *ch);
/* HELLO payload: our name, NUL, and "bell" NUL when we ring the peer's doorbell (a listener of
 * an older version reads the name only). Returns its length. */
size_t tw__bell_hello(const struct ofi_fab *of, const struct ofi_chan *ch, char *out, size_t cap);
/* Whether a HELLO payload (name NUL ...) or an ACK payload says the sender rings our doorbell. */
bool tw__bell_said(const unsigned char *payload, size_t plen, bool hello);
/* Our fab is idle: sleep on the doorbell until rung or up to timeout_ms (< 0: no bound but
 * OFI_BELL_MAX_MS). Returns -1 if a doorbell sleep is not safe now (the caller polls with its
 * backoff), 0 after the sleep or when the last look found work. */
int tw__bell_sleep(struct ofi_fab *of, int timeout_ms);
/* Wake a peer (or ourselves) sleeping on `b`. Returns true if it rang (a futex wake). */
bool tw__bell_ring_slow(struct ofi_bell *b);
/* After a post to the channel's peer (any result: a refused post may have queued a connection
 * request), and while we wait for it: ring its doorbell if it sleeps. The look at `sleeping`
 * is a read-modify-write (adding 0), as is every change of it, so that it orders our post
 * before the owner's next look at its queue (ofi_bell.c: no lost wake-up). */
static inline void tw__bell_ring(struct ofi_fab *of, struct ofi_bell *b)
{
	if (b && atomic_fetch_add(&b->sleeping, 0) && tw__bell_ring_slow(b))
		of->base.stats.bell_rings++;
}

/* ofi_mr.c */
uint64_t tw__mr_access_flags(unsigned access);
int tw__mr_reg_internal(struct ofi_fab *of, void *buf, size_t len, uint64_t acc, struct fid_mr **mr_out,
		    void **desc_out);
void tw__mr_close_internal(struct ofi_fab *of, struct fid_mr *mr); /* NULL: no-op */
int tw__ofi_mr_reg(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out);
void tw__ofi_mr_dereg(struct tw_mr *mr);

/* ofi_rma.c */
int tw__ofi_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len, struct tw_mr *src_mr,
	      uint64_t raddr, uint64_t key);
int tw__ofi_read(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
	     uint64_t raddr, uint64_t key);

/* ofi_msg.c */
int tw__msg_alloc_slots(struct ofi_fab *of);
void tw__msg_free_slots(struct ofi_fab *of);
/* Allocate, register and post rx->n receive buffers (of `ch`, NULL: the RDM fab's). */
int tw__msg_alloc_rx(struct ofi_fab *of, struct ofi_rx *rx, struct ofi_chan *ch);
void tw__msg_free_rx(struct ofi_fab *of, struct ofi_rx *rx); /* idempotent */
int tw__msg_post_recv(struct ofi_fab *of, struct ofi_ctx *ctx);
/* Send `len` bytes already placed in the slot of `ctx` (taken with tw__msg_get_slot). */
int tw__msg_post_send(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, size_t len,
		  uint64_t deadline_ns);
struct ofi_ctx *tw__msg_get_slot(struct ofi_fab *of, struct ofi_chan *ch, uint64_t deadline_ns, int *err);
void tw__msg_put_slot(struct ofi_fab *of, struct ofi_ctx *ctx);
int tw__ofi_send(struct tw_chan *ch, const void *msg, size_t len);

/* ofi_strict.c: strict mode (TW_FAB_STRICT_VERBS, docs/fabric.md "Verbs semantics without RDMA
 * hardware"). Every check fails with -EFAULT and a message naming `call`, or aborts the process
 * (TW_FAB_STRICT_VERBS_ABORT). */
/* The hints of strict mode: mr_mode FI_MR_BASIC, a TW_FAB_STRICT_SQ send queue (MSG only). */
void tw__strict_hints(struct fi_info *hints);
/* After fi_getinfo: the provider kept FI_MR_BASIC (else -ENOTSUP, message set); verbs' limits. */
int tw__strict_read_back(struct ofi_fab *of);
/* A registration: its pages are backed (FI_MR_ALLOCATED); then it is recorded / forgotten. */
int tw__strict_check_backed(struct ofi_fab *of, const void *buf, size_t len);
int tw__strict_add_reg(struct ofi_fab *of, struct fid_mr *mr, void *desc, const void *buf, size_t len,
		   uint64_t acc);
void tw__strict_del_reg(struct ofi_fab *of, struct fid_mr *mr);
/* A local buffer passed to `call` with `desc`, taken from registration `mr`: `mr` is a live
 * registration of this domain, `desc` is its descriptor, it covers [buf, buf + len) and, when
 * `local_write` (receives, read destinations), it lets the provider write into it. */
int tw__strict_check_local(struct ofi_fab *of, const char *call, const void *buf, size_t len, void *desc,
		       struct fid_mr *mr, bool local_write);
/* An RMA post: one local and one remote iov at most (verbs' rma_iov_limit is 1). */
int tw__strict_check_iov(struct ofi_fab *of, const char *call, size_t iov_count, size_t rma_iov_count);
/* Whether a post on `ch` finds its send queue or its CQ full: the post then returns -FI_EAGAIN,
 * as verbs' does (vrb_post_send: sq_credits, cq->credits; the CQ's context pool holds the
 * posted receives too). */
bool tw__strict_queue_full(struct ofi_fab *of, struct ofi_chan *ch);
/* Log what strict mode checked and free the registry (at fab close and reset, after the
 * fab's own registrations are closed). */
void tw__strict_fini(struct ofi_fab *of);

/* ofi_cq.c */
struct ofi_ctx *tw__ofi_ctx_get(struct ofi_fab *of);
void tw__ofi_ctx_put(struct ofi_fab *of, struct ofi_ctx *ctx);
void tw__ofi_ctx_unlink(struct ofi_chan *ch, struct ofi_ctx *ctx);
/* Release what a posted ctx holds (slot, pool) once the provider is done with it. */
void tw__ofi_ctx_release(struct ofi_fab *of, struct ofi_ctx *ctx);
int tw__cq_open(struct ofi_fab *of, size_t size, struct fid_cq **cq, int *fd_out, void *context);
void tw__cq_close(struct ofi_fab *of, struct fid_cq *cq, int fd);
int tw__ofi_poll(struct tw_fab *fab);
int tw__ofi_wait(struct tw_fab *fab, int timeout_ms);
int tw__ofi_wait_fd(struct tw_fab *fab, bool prepare);
void tw__ofi_wakeup(struct tw_fab *fab);
/* Post with credit and -FI_EAGAIN handling: progress and retry until `deadline_ns`. The ctx's
 * own deadline is tw__fab_op_deadline at the post (no clock read: fab->now_ns is fresh from the
 * API entry or the last stall). */
typedef ssize_t (*post_fn)(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, void *arg);
int tw__post_tx(struct ofi_fab *of, struct ofi_chan *ch, struct ofi_ctx *ctx, post_fn fn, void *arg,
	    uint64_t deadline_ns);
/* Active side: progress until the handshake of `ch` leaves CHAN_CONNECTING (0; the caller
 * reads the outcome from its state) or its deadline passes (-ETIMEDOUT, message set). */
int tw__ofi_await_connect(struct ofi_fab *of, struct ofi_chan *ch, const char *addr);
/* Progress a little while waiting inside an operation (connect, full queue). */
void tw__ofi_stall(struct ofi_fab *of);
void tw__ofi_op_abandon(struct tw_op *op);
/* fab_ops.chan_deadline: the oldest posted ctx's (writes, reads, sends; oldest first). */
uint64_t tw__ofi_chan_deadline(const struct tw_chan *ch);
/* Forget queued completions of a MSG channel whose endpoint is being closed. */
void tw__cq_purge_chan(struct ofi_fab *of, struct ofi_chan *ch);

#endif
