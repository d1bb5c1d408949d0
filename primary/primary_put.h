/*
 * primary/primary_put.h — an entry's way into the log, for the append paths of both modes
 * (primary_append.c, its only includer): the reservation of its room (one compare-and-swap in
 * async mode, for one entry or a batch; a plain store in sync mode), the copy, and the
 * publication in order. Inline: this is the appender's hot path. Not installed.
 * See docs/primary.md, "The append engine".
 */
#ifndef TW_PRIMARY_PRIMARY_PUT_H
#define TW_PRIMARY_PRIMARY_PUT_H

#include <sched.h>

#include "log/log_entry.h"
#include "primary/primary_engine.h"

/* Publication in order: wait until every byte before `off` of the open segment is written
 * (the threads that reserved them are copying; a few nanoseconds unless one was preempted:
 * then the CPU goes to it). */
static inline void pub_wait(const struct tw_primary *p, uint64_t off)
{
	unsigned spins = 0;

	while (__atomic_load_n(&p->pub_off, __ATOMIC_ACQUIRE) != off) {
		if (++spins < 64)
			cpu_relax();
		else
			sched_yield();
	}
}

/* One reservation: where an entry goes (segment, offset) and its record index. */
struct resv {
	struct pseg *s;
	uint64_t idx;
	uint32_t off;
};

/*
 * Reserve the room of one entry of `len` bytes in the open segment, its record and its place in
 * the log, with one compare-and-swap on p->res (docs/primary.md, "The append engine"). Fails
 * (false) when the entry must take the slow path: the gate is closed (unless `locked`: the
 * caller holds the lock and checked the log under it), the record ring is full, a whole batch
 * waits unsealed (max_batch entries or max_batch_bytes bytes: back-pressure), or the entry
 * does not fit in the segment (with room left for the checksum entry after it). Async mode
 * (sync mode: reserve_sync). The compare-and-swap is sequentially consistent: the appender's
 * half of the wake-up handshake with the progress thread (see PLD).
 */
static inline __attribute__((always_inline)) bool reserve(struct tw_primary *p, uint32_t len,
							  bool locked, struct resv *v)
{
	uint64_t r = __atomic_load_n(&p->res, __ATOMIC_ACQUIRE);
	uint64_t ring = p->rec_mask < RES_RING_MAX - 1 ? p->rec_mask : RES_RING_MAX - 1;

	for (;;) {
		uint64_t tail, idx, nr;
		struct pseg *s;
		uint32_t off = res_off(r);

		if ((r & RES_GATE) && !locked)
			return false;
		tail = PLD(p->rec_tail);
		idx = res_idx(r, tail);
		if (idx - tail > ring || idx - PLD(p->rec_sealed) >= p->cfg.max_batch ||
		    pending_bytes_at(p, r) >= p->cfg.max_batch_bytes)
			return false;
		/* After the word: a new segment's word is stored after cur (tw__pseg_push); with
		 * an older word the compare-and-swap fails. */
		s = __atomic_load_n(&p->cur, __ATOMIC_ACQUIRE);
		if (s->cap - off < TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE ||
		    len > s->cap - off - TW_ENTRY_HDR_SIZE - TW_CKSUM_ENTRY_SIZE)
			return false;
		nr = res_make(r, idx + 1, (uint64_t)off + TW_ENTRY_HDR_SIZE + len);
		if (!__atomic_compare_exchange_n(&p->res, &r, nr, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_ACQUIRE))
			continue; /* another appender or the sealer moved it: r is the new word */
		v->s = s;
		v->idx = idx;
		v->off = off;
		return true;
	}
}

/*
 * Async mode, a batch: reserve the room of as many of entries[0..n) as the tests of reserve()
 * let through, entry by entry, with one compare-and-swap for all of them, so that they lie in
 * the log in one piece (and a locked instruction, which waits until the stores before it have
 * left the core, is paid once per batch rather than per entry). The number reserved, from v
 * (the first one's room; the others follow it in order), or 0: the first entry must take the
 * slow path. `locked` as for reserve().
 */
static inline __attribute__((always_inline)) size_t reserve_many(struct tw_primary *p,
								  const struct iovec *e, size_t n,
								  bool locked, struct resv *v)
{
	uint64_t r = __atomic_load_n(&p->res, __ATOMIC_ACQUIRE);
	uint64_t ring = p->rec_mask < RES_RING_MAX - 1 ? p->rec_mask : RES_RING_MAX - 1;

	for (;;) {
		uint64_t tail, sealed, so, idx, end, nr;
		struct pseg *s;
		uint32_t off = res_off(r);
		size_t k;

		if ((r & RES_GATE) && !locked)
			return 0;
		tail = PLD(p->rec_tail);
		sealed = PLD(p->rec_sealed);
		idx = res_idx(r, tail);
		s = __atomic_load_n(&p->cur, __ATOMIC_ACQUIRE); /* after the word, as reserve() */
		so = PLD(p->seal_off);                          /* as pending_bytes_at() */
		for (k = 0, end = off; k < n; k++) {
			uint64_t len = e[k].iov_len;

			/* reserve()'s tests for the entry at (idx + k, end). */
			if (idx + k - tail > ring || idx + k - sealed >= p->cfg.max_batch ||
			    (end > so ? end - so : 0) >= p->cfg.max_batch_bytes ||
			    s->cap - end < TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE ||
			    len > s->cap - end - TW_ENTRY_HDR_SIZE - TW_CKSUM_ENTRY_SIZE)
				break;
			end += TW_ENTRY_HDR_SIZE + len;
		}
		if (k == 0)
			return 0;
		nr = res_make(r, idx + k, end);
		if (!__atomic_compare_exchange_n(&p->res, &r, nr, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_ACQUIRE))
			continue;
		v->s = s;
		v->idx = idx;
		v->off = off;
		return k;
	}
}

/* Sync mode: reserve with a plain store (one thread; the caller checked back-pressure, so only
 * the room in the segment is looked at). */
static inline __attribute__((always_inline)) bool reserve_sync(struct tw_primary *p, uint32_t len,
							       struct resv *v)
{
	uint64_t r = __atomic_load_n(&p->res, __ATOMIC_RELAXED);
	struct pseg *s = p->cur;
	uint32_t off = res_off(r);

	if (s->cap - off < TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE ||
	    len > s->cap - off - TW_ENTRY_HDR_SIZE - TW_CKSUM_ENTRY_SIZE)
		return false;
	v->s = s;
	v->idx = p->rec_head;
	v->off = off;
	__atomic_store_n(&p->res, res_make(r, v->idx + 1, (uint64_t)off + TW_ENTRY_HDR_SIZE + len),
			 __ATOMIC_RELAXED);
	return true;
}

/*
 * How far ahead of its entry an appender asks for the log's lines, for writing. Log memory is
 * written once, in order, by whichever thread reserved it, so the lines an entry is copied into
 * are seldom in the appender's cache: each store must first fetch its line, and until it has,
 * the store waits in the store buffer. In async mode the next reservation's locked
 * compare-and-swap waits for all of them: a miss per append, on the appender's path. In sync
 * mode nothing waits for them one by one, but the store buffer fills within a few entries
 * (their lines, their records, the published words) and the core stops. A prefetch for writing
 * 1 KiB ahead (about nine 100-byte entries) has the lines owned by the time they are written;
 * two lines per append cover the 112 bytes of a 100-byte entry. (On baseline x86-64 gcc emits
 * prefetcht0, which brings in a line no other core holds in the exclusive state, so the store
 * that follows needs no further request; prefetchw measured the same.) An entry of PUT_AHEAD
 * bytes or more skips it: its own copy runs ahead of the next entry, and the hardware's
 * streaming prefetch follows a copy that long. Sync mode also asks for the record PUT_REC_AHEAD
 * records ahead (512 bytes of the ring, which with the defaults is larger than a core's
 * first-level cache and is read back by the same thread at each completion); async mode
 * measured no gain from that. A prefetch never faults and never changes memory: past the end of
 * a segment it at most moves a line. Measured in docs/benchmarks.md, "Log lines owned ahead".
 */
#define PUT_AHEAD 1024
#define PUT_REC_AHEAD 16

/* Write the reserved entry (payload, its CRC, header) and its record outside any lock, then
 * publish it in order: wait until everything before it is written, advance the header chain
 * (pub_chain), store rec_head and the new end (release). Both modes; the statistics are counted while holding the turn (one thread). */
static inline __attribute__((always_inline)) void put_publish(struct tw_primary *p,
							      const struct resv *v,
							      const void *data, uint32_t len,
							      tw_append_cb cb, void *arg,
							      uint64_t *lsn_out)
{
	struct prec *r = &p->recs[v->idx & p->rec_mask];
	uint8_t *dst = v->s->buf + v->off;
	struct tw__hdr_words h;

	/* Own the lines the next appends will write before they reach them (PUT_AHEAD). */
	if (len < PUT_AHEAD) {
		uintptr_t ahead = (uintptr_t)dst + PUT_AHEAD; /* may be past the segment */

		__builtin_prefetch((const void *)ahead, 1, 3);
		__builtin_prefetch((const void *)(ahead + 64), 1, 3);
	}
	if (!p->threaded)
		__builtin_prefetch(&p->recs[(v->idx + PUT_REC_AHEAD) & p->rec_mask], 1, 3);
	h = tw__log_entry_put(dst, data, len);

	r->cb = cb;
	r->arg = arg;
	r->lsn = (uint64_t)v->s->id << 32 | v->off;
	r->len = len;
	if (lsn_out) /* before the publication: the callback may run right after it */
		*lsn_out = r->lsn;
	if (p->threaded)
		pub_wait(p, v->off);
	/* Our turn: the chain over our header, from the registers that stored it, instead of
	 * the sealer's walk over every header of the write from another CPU (pub_chain). */
	p->pub_chain = p->chain_step(p->pub_chain, h);
	__atomic_store_n(&p->pub_appends, p->pub_appends + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->pub_bytes, p->pub_bytes + len, __ATOMIC_RELAXED);
	__atomic_store_n(&p->rec_head, v->idx + 1, __ATOMIC_RELEASE);
	/* The first half of the appender's store-then-load pair with the progress thread
	 * (async_kick, see PLD). A release store (a plain move on x86-64) in sync mode, and in
	 * async mode where the progress thread fences for both before it sleeps (pub_light:
	 * tw__membarrier); otherwise sequentially consistent (an xchg, which waits until the
	 * entry's stores have left the core). The compiler barrier keeps async_kick's loads
	 * after it. */
	if (p->threaded && !p->pub_light)
		PST(p->pub_off, (uint64_t)v->off + TW_ENTRY_HDR_SIZE + len);
	else
		__atomic_store_n(&p->pub_off, (uint64_t)v->off + TW_ENTRY_HDR_SIZE + len,
				 __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

#endif /* TW_PRIMARY_PRIMARY_PUT_H */
