/*
 * replica/primary_acked.c — the owner publishes how far its log is acknowledged to the
 * replicas of the segment that position is in (SetAcked, protocol 1.4; docs/readers.md), so
 * that readers of the live log, served by the backups, return acknowledged entries only.
 *
 * Async mode (a progress thread drives the log all the time): self-clocked, one SetAcked per
 * replica in flight at a time; when the round is answered and the acknowledged position moved
 * meanwhile, the next round carries the newest position. Under load one message covers every
 * acknowledgement of a round trip; when the log goes idle, the last round carries its final
 * position. Sync mode (the caller drives, and only inside its calls): a round per reap that
 * moved the position, up to SYNC_ROUNDS rounds in flight, without waiting for the previous
 * one, since nothing would send the final position of an idle log before the caller's next
 * call. Past that (a burst of asynchronous appends), the position waits for a round's answer,
 * and in the worst case for the caller's next call. The bound keeps the shared RPC client's
 * slots for the primary's own control RPCs (an unbounded number took them all: -EBUSY). A backup that does not know the request (protocol
 * 1.3: UNSUPPORTED) is not asked again; readers see only its closed segments.
 *
 * Driver thread (the one that reaps). The state lives apart from the primary, so that a call
 * still in flight on a shared context when the log is freed completes harmlessly.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rpc.h"
#include "replica/primary_int.h"

struct pub_call {
	struct tw__packed *pub;
	unsigned bk;
};

struct tw__packed {
	struct tw_primary *p;  /* NULL once the log is freed (orphan) */
	uint64_t sent_lsn;     /* the last position sent */
	unsigned inflight;     /* calls of the round not answered yet */
	struct pub_call calls[TW_PRIMARY_MAX_REPLICAS];
	size_t nbk;
	bool *unsupported;     /* per backup index: answered UNSUPPORTED (protocol 1.3) */
};

#define SYNC_ROUNDS 4u

static void publish(struct tw__packed *pub);

static void pub_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct pub_call *pc = arg;
	struct tw__packed *pub = pc->pub;

	(void)reply;
	pub->inflight--;
	if (!pub->p) {
		if (pub->inflight == 0) {
			free(pub->unsupported);
			free(pub);
		}
		return;
	}
	if (status == -ENOTSUP && pc->bk < pub->nbk && !pub->unsupported[pc->bk]) {
		pub->unsupported[pc->bk] = true;
		tw_log_info("primary: log %016" PRIx64 ": backup %s does not take acknowledged "
			    "positions (protocol 1.3; 1.4 needed): readers reading from it see only "
			    "closed segments; upgrade twd there", (uint64_t)pub->p->cfg.log_id,
			    pub->p->bk[pc->bk].addr);
	}
	/* Other failures: the backup is lost (failover) or the log fenced (its appends fail). */
	if (pub->inflight == 0 || !pub->p->threaded)
		publish(pub);
}

static void publish(struct tw__packed *pub)
{
	struct tw_primary *p = pub->p;
	uint64_t lsn = __atomic_load_n(&p->acked_lsn, __ATOMIC_ACQUIRE);
	struct tw_pos pos = tw_lsn_to_pos(lsn);
	struct pseg *seg = NULL;

	if (lsn <= pub->sent_lsn || p->err)
		return;
	/* The segment array is changed under the lock by releases from other threads. */
	tw__primary_lock(p);
	if (pos.segment >= p->seg_base && pos.segment - p->seg_base < p->nsegs)
		seg = p->segs[pos.segment - p->seg_base];
	tw__primary_unlock(p);
	if (!seg || seg->closed)
		return; /* closed: readable to its end on every replica already */
	if (pub->inflight >= (p->threaded ? 1u : SYNC_ROUNDS * seg->nrep))
		return; /* an answer sends the newest position (pub_done) */
	pub->sent_lsn = lsn;
	for (unsigned i = 0; i < seg->nrep; i++) {
		unsigned bi = seg->rep[i];
		struct pbackup *b = &p->bk[bi];
		struct tw_rpc_client *cl;
		struct tw_rpc_req req;

		if (b->lost || (bi < pub->nbk && pub->unsupported[bi]))
			continue;
		cl = prpc(p, b);
		if (!cl)
			continue;
		tw__rpc_req_set_acked(&req, p->cfg.epoch, p->cfg.log_id, seg->id, pos.offset);
		pub->calls[i].pub = pub;
		pub->calls[i].bk = bi;
		if (tw__rpc_call(cl, &req.env, pub_done, &pub->calls[i]) == 0)
			pub->inflight++;
	}
}

void tw__packed_publish(struct tw_primary *p)
{
	struct tw__packed *pub = p->pub;

	if (!pub) {
		pub = calloc(1, sizeof(*pub));
		if (!pub)
			return; /* readers see the segment once it is closed */
		pub->nbk = p->bk_cap ? p->bk_cap : p->nbk;
		pub->unsupported = calloc(pub->nbk ? pub->nbk : 1, sizeof(bool));
		if (!pub->unsupported) {
			free(pub);
			return;
		}
		pub->p = p;
		p->pub = pub;
	}
	publish(pub);
}

void tw__packed_release(struct tw_primary *p)
{
	struct tw__packed *pub = p->pub;

	if (!pub)
		return;
	p->pub = NULL;
	pub->p = NULL;
	if (pub->inflight == 0) {
		free(pub->unsupported);
		free(pub);
	}
}
