/*
 * fabric/fab_int.h — internals shared by the generic layer (fabric.c) and the two backends
 * (libfabric: ofi_*.c, in-memory: mem.c). No <rdma/...> here.
 *
 * Object model: every backend object starts with the generic struct (struct tw_fab, tw_chan,
 * tw_mr below), so a backend converts with a plain cast. The generic layer owns the in-flight
 * list of user operations per channel (struct tw_op next/prev/deadline_ns), deadlines, loss
 * handling ("exactly once" completion), and deferred freeing of channels closed from inside
 * callbacks.
 */
#ifndef TW_FABRIC_FAB_INT_H
#define TW_FABRIC_FAB_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/fabric.h"
#include "core/util.h"

struct fab_ops {
	const char *name; /* "ofi" or "mem" */
	void (*close)(struct tw_fab *fab);
	int (*listen)(struct tw_fab *fab, char *addr_out, size_t addr_len);
	int (*connect)(struct tw_fab *fab, const char *addr, struct tw_chan **out);
	/* Stop all provider activity of the channel so no completion for it arrives later
	 * (MSG: close the endpoint; RDM: orphan its contexts). Idempotent. `closing`: the user
	 * closes it (say goodbye to the peer where possible). */
	void (*chan_down)(struct tw_chan *ch, bool closing);
	/* Free the channel's memory; it is down and unlinked. */
	void (*chan_free)(struct tw_chan *ch);
	/* The generic layer is about to complete `op` itself (loss, close, timeout): forget it so a
	 * later provider completion does not touch it. */
	void (*op_abandon)(struct tw_op *op);
	int (*mr_reg)(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out);
	void (*mr_close)(struct tw_mr *mr);
	int (*write)(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
		     struct tw_mr *src_mr, uint64_t raddr, uint64_t key);
	int (*read)(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
		    uint64_t raddr, uint64_t key);
	int (*send)(struct tw_chan *ch, const void *msg, size_t len);
	/* Poll everything once and run callbacks; returns events handled or a negative code. */
	int (*poll)(struct tw_fab *fab);
	/* Block up to timeout_ms (>= 0) for activity or a wakeup; 0 or a negative code. */
	int (*wait)(struct tw_fab *fab, int timeout_ms);
	void (*wakeup)(struct tw_fab *fab);
	int (*inject)(struct tw_chan *ch, const struct tw_mem_fault *fault);
	/* tw__fab_reset: every channel is closed and freed; rebuild the provider state in place
	 * and register every registration of fab->mrs again (same structs). */
	int (*reset)(struct tw_fab *fab);
	/* Earliest deadline of what the backend itself has in flight on the channel beyond the
	 * user's writes and reads (ofi: sends, whose ctxs share the posted list), or UINT64_MAX.
	 * NULL: nothing. The generic layer checks it with the ops' (tw__fab_check_deadlines): one
	 * deadline tracker for every backend. */
	uint64_t (*chan_deadline)(const struct tw_chan *ch);
	/* The caller's event loop waits (tw__fab_wait_fd, tw__fab_wait_prepare): with `prepare`
	 * false the descriptor; with it true also the check that a sleep on it is safe now
	 * (fi_trywait on every wait object, a pending wakeup taken): the descriptor, -EAGAIN
	 * (poll again first), -EINPROGRESS (poll again soon: activity the descriptor does not
	 * signal), or -ENOTSUP (no descriptor). NULL: -ENOTSUP. */
	int (*wait_fd)(struct tw_fab *fab, bool prepare);
};

/*
 * The ops every backend implements, one list: TW__FAB_OPS_INIT(prefix) expands to the designated
 * initializers `.op = prefix_op,` of all of them, so a backend's table is built from its function
 * names and one that lacks an op does not compile. The optional ops (inject: only mem can inject
 * faults; chan_deadline: only ofi has sends of its own in flight; wait_fd: ofi's epoll
 * set, mem's eventfd; shm has none) are not in the list: a backend
 * sets them by hand or leaves them NULL.
 */
#define TW__FAB_OPS(X, prefix) \
	X(prefix, close) X(prefix, listen) X(prefix, connect) X(prefix, chan_down) \
	X(prefix, chan_free) X(prefix, op_abandon) X(prefix, mr_reg) X(prefix, mr_close) \
	X(prefix, write) X(prefix, read) X(prefix, send) X(prefix, poll) X(prefix, wait) \
	X(prefix, wakeup) X(prefix, reset)
#define TW__FAB_OP_INIT(prefix, op) .op = prefix##_##op,
#define TW__FAB_OPS_INIT(prefix) TW__FAB_OPS(TW__FAB_OP_INIT, prefix)

struct tw_fab {
	/* The backend's table, or hook_ops: a copy of it with `write` replaced by tw__wmsg_write
	 * (cfg.write_mode TW_FAB_WRITE_MSG), as libfabric's hook providers wrap a provider. */
	const struct fab_ops *ops;
	struct fab_ops hook_ops;
	/* ev.on_recv is recv_hook (fabric.c), which serves write messages (wmsg.c) and passes
	 * every other message to the user's callback, kept here. */
	void (*user_on_recv)(void *arg, struct tw_chan *ch, const void *msg, size_t len);
	/* writes sent as messages (wmsg.c) */
	uint8_t *wmsg_buf;          /* initiator: one message, header + chunk */
	uint64_t wmsg_tag;          /* initiator: last tag used (tags start at 1) */
	struct tw_mr *wmsg_last;    /* target: registration of the last chunk (lookup cache) */
	tw_write_check_fn write_check; /* target: tw__fab_set_write_check */
	struct tw_fab_config cfg;
	struct tw_fab_events ev;
	char prov[64];        /* resolved name as typed ("tcp", "tcp;ofi_rxm", "mem") */
	bool rdm;
	bool loss_blocks;     /* tw__fab_loss_blocks_others (set by the backend: shm) */
	char errmsg[512];
	struct tw_fab_stats stats;
	/* The fab's time (cfg.clock_ns or CLOCK_MONOTONIC) as read by tw__fab_clock: at the entry of
	 * every write, read and send, once per progress round and once per stall round. Every
	 * deadline is computed from it; a deadline is checked against it, so a check may come
	 * late by one round, never early. */
	uint64_t now_ns;
	/* Time not observed (tw__fab_clock): the raw clock of the last reading, the gaps left out
	 * so far (now_ns = raw - unobserved_ns), and whether the fab's wait ran since. */
	uint64_t clock_raw, unobserved_ns;
	bool waited;
	struct tw_chan *chans; /* every channel not yet freed (closed ones until the sweep) */
	struct tw_mr *mrs;
	unsigned depth;        /* nesting of API calls that may run callbacks */
	bool need_sweep;       /* a closed channel waits for depth 0 to be freed */
	uint64_t key_seed;     /* random, for our own MR keys */
	uint64_t key_ctr;
	uint32_t next_chan_id;
};

enum chan_state {
	CHAN_CONNECTING, /* active side, handshake running */
	CHAN_ACCEPTING,  /* passive side, not yet announced with on_accept */
	CHAN_UP,
	CHAN_FAILED,     /* handshake failed (not visible to the user) */
};

struct tw_chan {
	struct tw_fab *fab;
	struct tw_chan *next, *prev;
	void *user;
	char peer[TW_ADDR_MAX];
	enum chan_state state;
	bool visible;  /* the user knows it (connect returned it / on_accept ran) */
	bool lost;
	bool closed;   /* tw__chan_close ran; freed at the next sweep */
	bool is_down;  /* chan_down ran */
	bool fast_write; /* writes go without delivery-complete (tw__chan_fast_writes) */
	int lost_err;
	uint32_t id;   /* unique per fab, never reused */
	uint64_t hs_deadline_ns; /* handshake deadline while CONNECTING/ACCEPTING */
	struct tw_op *ops_head, *ops_tail; /* user writes/reads in flight, oldest first */
	unsigned nops;
};

struct tw_mr {
	struct tw_fab *fab;
	struct tw_mr *next, *prev;
	void *buf;
	size_t len;
	unsigned access;
	struct tw_rkey rk;
};

/* fabric.c */
void tw__fab_set_errmsg(struct tw_fab *fab, const char *fmt, ...) TW_PRINTF(2, 3);
void tw__fab_open_errmsg(const char *fmt, ...) TW_PRINTF(1, 2);
void tw__fab_init_common(struct tw_fab *fab, const struct fab_ops *ops, const struct tw_fab_config *cfg,
		     const struct tw_fab_events *ev);
void tw__chan_init(struct tw_fab *fab, struct tw_chan *ch, const char *peer);
void tw__mr_link(struct tw_fab *fab, struct tw_mr *mr);
void tw__mr_unlink(struct tw_mr *mr);
void tw__op_track(struct tw_chan *ch, struct tw_op *op);
void tw__op_finish(struct tw_op *op, int status);
void tw__chan_set_lost(struct tw_chan *ch, int err);
void tw__chan_announce(struct tw_chan *ch); /* ACCEPTING → UP + on_accept */
void tw__fab_enter(struct tw_fab *fab);
void tw__fab_leave(struct tw_fab *fab);
/* Read the fab's clock once into fab->now_ns and return it. */
uint64_t tw__fab_clock(struct tw_fab *fab);
/* A gap between two clock readings longer than this (or a quarter of op_timeout_ms, if less),
 * outside the fab's wait, is not counted against deadlines beyond this much (tw__fab_clock).
 * Our loops look at least every 100 ms. */
#define TW_FAB_GAP_NS 1000000000ull
/* fab->now_ns + op_timeout_ms: the deadline of an operation posted now. */
uint64_t tw__fab_op_deadline(const struct tw_fab *fab);
/* Fail the channels whose earliest deadline (ops, backend's sends) is <= fab->now_ns. */
int tw__fab_check_deadlines(struct tw_fab *fab);
/* Our own MR key: a bijective mix of a random seed and a counter, masked to key_bytes. */
uint64_t tw__fab_gen_key(struct tw_fab *fab, size_t key_bytes);
struct tw_chan *tw__fab_find_chan(struct tw_fab *fab, uint32_t id);

/* wmsg.c: writes sent as messages (cfg.write_mode TW_FAB_WRITE_MSG) */
bool tw__wmsg_is(const void *msg, size_t len); /* starts with the write messages' magic */
int tw__wmsg_init(struct tw_fab *fab);         /* after the backend opened */
void tw__wmsg_fini(struct tw_fab *fab);
int tw__wmsg_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
	       struct tw_mr *src_mr, uint64_t raddr, uint64_t key);
void tw__wmsg_recv(struct tw_chan *ch, const void *msg, size_t len); /* a message tw__wmsg_is() */

/* Backend constructors: fill *out (already common-initialised) or return a negative code. */
int tw__ofi_fab_open(const struct tw_fab_config *cfg, const struct tw_fab_events *ev, const char *prov,
		 struct tw_fab **out);
/* null_writes: the "mem-null" variant (benchmarks only; fabric/mem.c). */
int tw__mem_fab_open(const struct tw_fab_config *cfg, const struct tw_fab_events *ev,
		     bool null_writes, struct tw_fab **out);

#endif
