/*
 * primary/primary_engine.h — the append engine's own internals, shared by the files of the
 * engine (primary.c, primary_append.c, primary_seal.c, primary_ack.c, primary_open.c): the
 * reservation word and the counters derived from it, the per-mode table (struct pmode_ops),
 * sealing and posting, acknowledgements. Not installed. The log's struct and the rest of the
 * primary's internals are in primary_int.h, which this header needs first.
 * See docs/primary.md, "The append engine".
 */
#ifndef TW_PRIMARY_PRIMARY_ENGINE_H
#define TW_PRIMARY_PRIMARY_ENGINE_H

#include "primary/primary_int.h"
/* The reservation word (p->res). */
#define RES_GATE (1ull << 63)
#define RES_FLIP (1ull << 62)
#define RES_IDX_MASK ((1ull << 30) - 1)
/* Records in flight are at most the ring's size, kept below 2^29 for res_idx. */
#define RES_RING_MAX (1ull << 29)

static inline uint32_t res_off(uint64_t r)
{
	return (uint32_t)r;
}

/* The record count that `r` holds modulo 2^30, given `base`, a count at most 2^30 - 1 below
 * it (rec_tail or rec_sealed: the ring never holds more). */
static inline uint64_t res_idx(uint64_t r, uint64_t base)
{
	return base + (((r >> 32) - base) & RES_IDX_MASK);
}

static inline uint64_t res_make(uint64_t keep, uint64_t idx, uint64_t off)
{
	return (keep & (RES_GATE | RES_FLIP)) | (idx & RES_IDX_MASK) << 32 | off;
}

/* Records reserved so far (appended or being copied). rec_sealed first: then it is not above
 * the count in res. */
static inline uint64_t rec_reserved(const struct tw_primary *p)
{
	uint64_t sealed = PLD(p->rec_sealed);

	return res_idx(PLD(p->res), sealed);
}

/* One turn of a spin-wait loop. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Entries reserved but not yet sealed into a write (exact on the driver thread while the gate
 * is closed; otherwise a lower bound). */
static inline uint64_t pending_entries(const struct tw_primary *p)
{
	uint64_t sealed = PLD(p->rec_sealed); /* one read: it may move meanwhile */

	return res_idx(PLD(p->res), sealed) - sealed;
}

/* Bytes of the entries not sealed yet (headers included), given the reservation word `r`:
 * seal_off is read after the word, so a new segment's word comes with its seal_off of 0; a
 * seal after the word was read (seal_off past it) counts as nothing waiting. Exact on the
 * driver thread and under the lock, otherwise an estimate (any thread). */
static inline uint64_t pending_bytes_at(const struct tw_primary *p, uint64_t r)
{
	uint64_t off = res_off(r), so = PLD(p->seal_off);

	return off > so ? off - so : 0;
}

static inline uint64_t pending_bytes(const struct tw_primary *p)
{
	return pending_bytes_at(p, PLD(p->res));
}

/* Whether a whole batch waits: max_batch entries or max_batch_bytes bytes of them. The write
 * that reaches either is due, and the next appender meets back-pressure. */
static inline bool batch_full(const struct tw_primary *p)
{
	return pending_entries(p) >= p->cfg.max_batch ||
	       pending_bytes(p) >= p->cfg.max_batch_bytes;
}

/* Whether a write slot is free (sealed writes not yet posted hold theirs). */
static inline bool slot_free(const struct tw_primary *p)
{
	return PLD(p->slot_head) - PLD(p->slot_tail) < p->nslots;
}

/*
 * Async mode: whether the waiting entries are due to be sealed, given a free slot (lock held):
 * writes as large as the slot allows under load (docs/primary.md, "Batching and pipelining").
 * An entry goes at once when no write is in flight (an idle log adds no latency); while a
 * write is in flight, entries wait until max_batch of them, or max_batch_bytes of their bytes,
 * are there (batch_full), or until the writes in flight completed (then nothing is in flight).
 * A rollover, a failover, a finish and sync mode's progress seal whatever waits (sync mode has
 * its own rule for appends: sync_kick). Any thread (atomics); exact with the lock held.
 */
static inline bool tw__primary_batch_due(const struct tw_primary *p)
{
	return !p->threaded || PLD(p->slot_head) == PLD(p->slot_tail) || batch_full(p);
}

/*
 * What the two modes do differently (docs/primary.md, "Threading"): who drives the fabric and
 * how a caller waits. TW_PRIMARY_SYNC: the caller drives, inside the calls. TW_PRIMARY_ASYNC:
 * the context's progress thread drives and seals; callers copy without a lock, seal a whole
 * batch they meet when a slot is free, and sleep on condition variables (slow path). One
 * table per mode, chosen at open (p->mode_ops).
 */
struct pmode_ops {
	/* Make room for one entry and append it (async: without a lock in the common case);
	 * *idx_out: its record index. */
	int (*append)(struct tw_primary *p, const void *data, uint32_t len, tw_append_cb cb,
		      void *arg, uint64_t *lsn_out, uint64_t *idx_out);
	/* tw_primary_append_batch: n entries (lengths checked), cb on the last one. */
	int (*append_batch)(struct tw_primary *p, const struct iovec *entries, size_t n,
			    tw_append_cb cb, void *arg, uint64_t *lsns_out);
	/* tw_primary_append: append and wait for the acknowledgement. */
	int (*append_wait)(struct tw_primary *p, const void *data, uint32_t len, uint64_t *lsn_out);
	/* tw_primary_flush. */
	int (*flush)(struct tw_primary *p);
	/* Run the callbacks of records [rec_tail, end) in order (driver thread, lock not held). */
	void (*complete)(struct tw_primary *p, uint64_t end, int status);
};

/* primary_append.c: the table of a mode (chosen at open). */
const struct pmode_ops *tw__primary_mode_ops(bool threaded);

/* primary_seal.c: sealing and posting. Driver thread. */
/* Whether waiting entries can be sealed now and no appender is copying (nothing reserved past
 * what is published): the progress thread's last look before it sleeps (the last appender to
 * publish looks at pt_idle after its publication: see PLD). */
bool tw__primary_seal_now(const struct tw_primary *p);
/* Async mode, an appender stopped by a whole batch waiting (lock held): seal it now. */
bool tw__primary_seal_appender(struct tw_primary *p);
/* Post every sealed write not posted yet, in order (lock not held; none while a failover is
 * pending; failed at once when the log has failed). */
void tw__primary_post_pending(struct tw_primary *p);
/* Set the gate of the reservation word (lock held): closed unless the log runs in async mode,
 * healthy, with no rollover asked. Appenders then take the slow path. */
void tw__primary_gate(struct tw_primary *p);
/* Seal and post what waits (lock not held): 0 or the primary's error. */
int tw__primary_seal_post(struct tw_primary *p);
/* The same only if seal_ready (one lock round for the check and the seal). */
void tw__primary_try_seal(struct tw_primary *p);
/* One round of driver work: seal+post, poll the fabric (up to timeout_ms), reap. Returns the
 * number of appends completed. */
int tw__primary_drive(struct tw_primary *p, int timeout_ms);
/* Drive until every sealed write completed and was reaped. */
void tw__primary_drain(struct tw_primary *p);

/* primary_ack.c: acknowledgements. Driver thread, lock not held. */
/* Acknowledge finished writes in log order and run their callbacks: the number completed. */
int tw__primary_reap(struct tw_primary *p);
/* pmode_ops.complete of each mode. */
void tw__primary_complete_sync(struct tw_primary *p, uint64_t end, int status);
void tw__primary_complete_async(struct tw_primary *p, uint64_t end, int status);


#endif /* TW_PRIMARY_PRIMARY_ENGINE_H */
