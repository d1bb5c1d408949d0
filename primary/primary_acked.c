/*
 * primary/primary_acked.c — the owner publishes how far its log is acknowledged to the
 * replicas of the segment that position is in (SetAcked, protocol 1.4; docs/readers.md), so
 * that readers of the live log, served by the backups, return acknowledged entries only.
 *
 * Demand-driven (protocol 1.5): each SetAcked carries hold_ms, and a backup on which no reader
 * of the log is active holds its answer up to then (a reader's request, the segment's close,
 * a fence or free answer it earlier; backup/backup_readers.c). The owner keeps SetAcked in
 * flight per replica, not per round, and sends a replica the newest position when its previous
 * one is answered and the position moved. So a log nobody reads costs each replica about one
 * SetAcked per hold_ms while it is busy (plus one per segment: the close answers the held one),
 * and none once idle; with a reader, the backup answers at once and the owner sends one per
 * round trip, as before. A reader's first request to a backup that held a SetAcked releases
 * it and waits there for the owner's next one: an answer saying `readers` after one saying
 * none makes the owner send its position even if it did not move. hold_ms = min(1000, rpc timeout / 4): a held answer always comes well before the
 * RPC times out. A connection already holding a quarter of its RPC slots in held SetAcked
 * (thousands of busy logs on one context) sends hold_ms 0: those logs self-clock as before
 * rather than starve the context's own control RPCs of slots (-EBUSY).
 *
 * Async mode (a progress thread drives the log all the time): at most one SetAcked per replica
 * in flight; its answer sends the newest position. Under load one message covers every
 * acknowledgement of a round trip (or of a hold); when the log goes idle, the answer of the
 * last one carries the final position.
 *
 * A sync-mode log driven from an event loop (tw_primary_wait_prepare) is progressed all the time
 * too, and behaves as in async mode.
 *
 * Sync mode (the caller drives, and only inside its calls): an answer is seen only during the
 * caller's next call, so the final position of an idle log would wait for it, and a reader
 * would stop short of the writer's last acknowledged entries for as long as the caller stays
 * idle. So the owner sends a SetAcked at each reap that moved the position, up to SYNC_ROUNDS
 * in flight to a replica, without waiting for the previous one, readers or not (as in 1.4):
 * sync mode is not demand-driven. And they carry hold_ms 0, so that the backups answer at once
 * (a held one would take one of the SYNC_ROUNDS until a newer one or a reader released it, and
 * its answer would wait for the caller's next call): sync mode behaves as in 1.4. The bound on rounds keeps the shared RPC client's slots for the primary's
 * own control RPCs. A backup that does not know the request (protocol 1.3: UNSUPPORTED) is not
 * asked again; readers see only its closed segments.
 *
 * Driver thread (the one that reaps). The state lives apart from the primary, so that a call
 * still in flight on a shared context when the log is freed completes harmlessly.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rpc.h"
#include "primary/primary_int.h"

#define SYNC_ROUNDS 4u
#define HOLD_MS_MAX 1000u

struct tw__packed;

struct pub_call {
	struct tw__packed *pub;
	unsigned bk;
	struct cbackup *c; /* held: the connection whose held count it is in */
	bool busy;
	bool held;
};

/* What one backup was told. */
struct pub_bk {
	uint64_t sent_lsn;  /* the last position sent to it */
	unsigned inflight;
	bool quiet;         /* no reader of the log active there (its last answer said so, 1.5;
			     * true before the first answer) */
	bool unsupported;   /* answered UNSUPPORTED (protocol 1.3) */
};

struct tw__packed {
	struct tw_primary *p; /* NULL once the log is freed (orphan) */
	unsigned inflight;    /* calls not answered yet, all backups */
	bool capped;          /* the last publish left a replica behind: its rounds were all out */
	size_t nbk;
	struct pub_bk *bk;      /* per backup index */
	struct pub_call *calls; /* SYNC_ROUNDS per backup index */
};

static void publish(struct tw__packed *pub);

static void pub_free(struct tw__packed *pub)
{
	free(pub->calls);
	free(pub->bk);
	free(pub);
}

static void pub_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct pub_call *pc = arg;
	struct tw__packed *pub = pc->pub;
	struct pub_bk *pb = &pub->bk[pc->bk];
	bool readers;

	pc->busy = false;
	if (pc->held)
		pc->c->acked_held--;
	pub->inflight--;
	pb->inflight--;
	if (!pub->p) {
		if (pub->inflight == 0)
			pub_free(pub);
		return;
	}
	if (status == -ENOTSUP && !pb->unsupported) {
		pb->unsupported = true;
		tw_log_info("primary: log %016" PRIx64 ": backup %s does not take acknowledged "
			    "positions (protocol 1.3; 1.4 needed): readers reading from it see only "
			    "closed segments; upgrade twd there", (uint64_t)pub->p->cfg.log_id,
			    pub->p->bk[pc->bk].addr);
	}
	readers = status == 0 && reply &&
		  reply->body_case == TAILWIND__ENVELOPE__BODY_SET_ACKED_REPLY &&
		  reply->set_acked_reply && reply->set_acked_reply->readers;
	/* A reader came where none was: its first read waits for our next SetAcked there
	 * (backup/backup_readers.c), so send the position even if it did not move. */
	if (readers && pb->quiet)
		pb->sent_lsn = 0;
	/* A 1.4 backup answers at once and never says `readers`: treat it as read. */
	pb->quiet = status == 0 && reply && !readers && pub->p->bk[pc->bk].c->peer.rpc &&
		    tw__rpc_client_peer_minor(pub->p->bk[pc->bk].c->peer.rpc) >= 5;
	/* Other failures: the backup is lost (failover) or the log fenced (its appends fail). */
	publish(pub);
}

static uint32_t hold_ms(struct tw_primary *p, struct cbackup *c)
{
	unsigned t = p->ctx->cfg.rpc_timeout_ms ? p->ctx->cfg.rpc_timeout_ms : 5000u;

	if (c->acked_held >= p->ctx->rpc_max_inflight / 4)
		return 0; /* see the file comment */
	return t / 4 < HOLD_MS_MAX ? t / 4 : HOLD_MS_MAX;
}

static void publish(struct tw__packed *pub)
{
	struct tw_primary *p = pub->p;
	uint64_t lsn = __atomic_load_n(&p->acked_lsn, __ATOMIC_ACQUIRE);
	bool steady = p->threaded || p->looped; /* progressed all the time */
	struct tw_pos pos = tw_lsn_to_pos(lsn);
	struct pseg *seg = NULL;

	if (p->err)
		return;
	/* Only the open segment is published; p->cur is the driver thread's (this one), so no
	 * lock: the acknowledging thread and the appenders share none per reap. */
	if (p->cur && p->cur->id == pos.segment)
		seg = p->cur;
	/* Closed, or closing, or rolled over (not the open one): its close, which follows its last
	 * writes, makes it readable to its end on every replica (a SetAcked after the close on
	 * the same connection would be answered for nothing). */
	pub->capped = false;
	if (!seg || seg->closed || seg->closing)
		return;
	for (unsigned i = 0; i < seg->nrep; i++) {
		unsigned bi = seg->rep[i];
		struct pbackup *b = &p->bk[bi];
		struct pub_bk *pb;
		struct pub_call *pc = NULL;
		struct tw_rpc_client *cl;
		struct tw_rpc_req req;
		uint32_t hold;

		if (bi >= pub->nbk)
			continue;
		pb = &pub->bk[bi];
		if (b->lost || pb->unsupported || lsn <= pb->sent_lsn)
			continue;
		if (pb->inflight >= (steady ? 1u : SYNC_ROUNDS)) {
			pub->capped = true;
			continue; /* its answer sends the newest position (pub_done) */
		}
		for (unsigned k = 0; k < SYNC_ROUNDS; k++) {
			if (!pub->calls[bi * SYNC_ROUNDS + k].busy) {
				pc = &pub->calls[bi * SYNC_ROUNDS + k];
				break;
			}
		}
		cl = prpc(p, b);
		if (!cl || !pc)
			continue;
		hold = steady ? hold_ms(p, b->c) : 0; /* sync mode: answered at once */
		tw__rpc_req_set_acked(&req, p->cfg.epoch, p->cfg.log_id, seg->id, pos.offset, hold);
		pc->pub = pub;
		pc->bk = bi;
		pc->c = b->c;
		pc->held = hold > 0;
		pc->busy = true;
		/* Counted before the call: its answer may in theory run inside it (rpc.h). */
		b->c->acked_held += pc->held;
		pb->inflight++;
		pub->inflight++;
		if (tw__rpc_call(cl, &req.env, pub_done, pc) != 0) {
			pc->busy = false;
			b->c->acked_held -= pc->held;
			pb->inflight--;
			pub->inflight--;
			continue;
		}
		pb->sent_lsn = lsn > pb->sent_lsn ? lsn : pb->sent_lsn;
		PSTAT_ADD(p, rpcs, 1);
		PSTAT_ADD(p, rpc_set_acked, 1);
	}
}

void tw__packed_publish(struct tw_primary *p)
{
	struct tw__packed *pub = p->pub;

	if (!pub) {
		size_t n = p->bk_cap ? p->bk_cap : p->nbk;

		pub = calloc(1, sizeof(*pub));
		if (!pub)
			return; /* readers see the segment once it is closed */
		pub->nbk = n;
		pub->bk = calloc(n ? n : 1, sizeof(*pub->bk));
		pub->calls = calloc((n ? n : 1) * SYNC_ROUNDS, sizeof(*pub->calls));
		if (!pub->bk || !pub->calls) {
			pub_free(pub);
			return;
		}
		for (size_t i = 0; i < n; i++)
			pub->bk[i].quiet = true;
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
	if (pub->inflight == 0)
		pub_free(pub);
}

bool tw__packed_capped(const struct tw_primary *p)
{
	return p->pub && p->pub->capped;
}
