/*
 * replica/primary_rpcmode.c — the primary's half of the RPC-replication baseline
 * (cfg.data_path = TW_DATA_RPC, replica/rpcdata.h): a sealed write goes to each replica as
 * two-sided data messages (chunks of at most the fabric's message size), and completes when that
 * backup's reply arrives. Batching, pipelining (max_inflight slots), in-order acknowledgement,
 * segments and the open/close RPCs are the one-sided engine's own (primary.c): only the
 * transfer differs. Driver thread only (the caller in sync mode, the progress thread in async
 * mode); the lock is not needed (slots belong to the driver thread).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "replica/primary_int.h"
#include "replica/rpcdata.h"

#define SLOT_BITS 11u /* TW_PRIMARY_MAX_INFLIGHT = 1024 slots fit */
#define MSG_MAX 65536u /* the fabric's default max_msg_size, which the backups use too */

struct prpc {
	uint8_t *scratch;   /* one message: header + chunk (tw_chan_send copies it out) */
	size_t chunk;       /* data bytes per message */
	uint32_t *gen;      /* per slot: bumped at each post, so stale replies are ignored */
	bool *waiting;      /* [slot * r + rep]: a reply is due */
	uint64_t *deadline; /* [slot * r + rep]: when it fails with -ETIMEDOUT (op_timeout_ms) */
	uint64_t next_check; /* prpc_expire looks at the deadlines at most every millisecond */
};

int prpc_init(struct tw_primary *p)
{
	struct prpc *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->chunk = MSG_MAX - RPCDATA_HDR_SIZE;
	d->scratch = malloc(MSG_MAX);
	d->gen = calloc(p->nslots, sizeof(*d->gen));
	d->waiting = calloc((size_t)p->nslots * p->r, sizeof(*d->waiting));
	d->deadline = calloc((size_t)p->nslots * p->r, sizeof(*d->deadline));
	p->rpcd = d;
	if (!d->scratch || !d->gen || !d->waiting || !d->deadline) {
		prpc_fini(p);
		return -ENOMEM;
	}
	return 0;
}

void prpc_fini(struct tw_primary *p)
{
	struct prpc *d = p->rpcd;

	if (!d)
		return;
	free(d->scratch);
	free(d->gen);
	free(d->waiting);
	free(d->deadline);
	free(d);
	p->rpcd = NULL;
}

int prpc_post(struct tw_primary *p, struct pop *po)
{
	struct prpc *d = p->rpcd;
	struct pslot *s = po->slot;
	struct pseg *seg = s->seg;
	struct pbackup *b = &p->bk[seg->rep[po->rep]];
	unsigned idx = (unsigned)(s - p->slots);
	struct rpcdata_hdr h;
	size_t done = 0;
	int rc;

	if (!b->ch)
		return -TW_EPEERLOST;
	if (po->rep == 0)
		d->gen[idx]++;
	memset(&h, 0, sizeof(h));
	h.kind = RPCDATA_KIND_DATA;
	h.log_id = p->cfg.log_id;
	h.segment_id = seg->id;
	h.epoch = p->cfg.epoch;
	h.write_off = s->off;
	h.write_len = (uint32_t)s->len;
	h.tag = (d->gen[idx] << SLOT_BITS) | idx;
	/* Set before the last send: a send that has to progress the fab may deliver the reply. */
	d->waiting[idx * p->r + po->rep] = true;
	d->deadline[idx * p->r + po->rep] = tw_now_ns() +
		(uint64_t)(p->cfg.op_timeout_ms ? p->cfg.op_timeout_ms : 10000) * 1000000u;
	while (done < s->len) {
		size_t n = s->len - done < d->chunk ? s->len - done : d->chunk;

		h.offset = s->off + done;
		h.data_len = (uint32_t)n;
		h.flags = done + n == s->len ? RPCDATA_LAST : 0;
		rpcdata_encode(&h, d->scratch);
		memcpy(d->scratch + RPCDATA_HDR_SIZE, seg->buf + s->off + done, n);
		rc = tw_chan_send(b->ch, d->scratch, RPCDATA_HDR_SIZE + n);
		if (rc < 0) {
			d->waiting[idx * p->r + po->rep] = false;
			return rc;
		}
		done += n;
	}
	return 0;
}

/* Complete replica `rep` of slot `idx` if it waits. */
static void finish(struct tw_primary *p, unsigned idx, unsigned rep, int status)
{
	struct prpc *d = p->rpcd;
	struct pop *po = &p->slots[idx].ops[rep];

	if (!d->waiting[idx * p->r + rep])
		return;
	d->waiting[idx * p->r + rep] = false;
	po->op.cb(&po->op, status);
}

void prpc_on_reply(struct pbackup *b, const void *msg, size_t len)
{
	struct tw_primary *p = b->p;
	struct prpc *d = p->rpcd;
	struct rpcdata_hdr h;
	unsigned idx;
	struct pslot *s;

	if (!d || rpcdata_decode(msg, len, &h) < 0 || h.kind != RPCDATA_KIND_ACK) {
		tw_log_ratelimited(TW_LOG_WARN, "primary: malformed data reply from %s", b->addr);
		return;
	}
	idx = h.tag & ((1u << SLOT_BITS) - 1);
	if (idx >= p->nslots || (h.tag >> SLOT_BITS) != (d->gen[idx] & ((1u << (32 - SLOT_BITS)) - 1)))
		return; /* stale or unknown */
	s = &p->slots[idx];
	for (unsigned i = 0; s->seg && i < s->seg->nrep; i++) {
		if (s->seg->rep[i] == b->idx) {
			int st = (int32_t)h.write_len;

			finish(p, idx, i, st > 0 ? -TW_EPROTO : st);
			return;
		}
	}
}

void prpc_on_lost(struct pbackup *b, int err)
{
	struct tw_primary *p = b->p;
	struct prpc *d = p->rpcd;

	if (!d)
		return;
	for (unsigned idx = 0; idx < p->nslots; idx++) {
		struct pslot *s = &p->slots[idx];

		for (unsigned i = 0; s->seg && i < s->seg->nrep; i++)
			if (s->seg->rep[i] == b->idx && d->waiting[idx * p->r + i])
				finish(p, idx, i, err < 0 ? err : -TW_EPEERLOST);
	}
}

void prpc_expire(struct tw_primary *p)
{
	struct prpc *d = p->rpcd;
	uint64_t now;

	if (!d)
		return;
	now = tw_now_ns();
	if (now < d->next_check)
		return;
	d->next_check = now + 1000000u;
	for (unsigned idx = 0; idx < p->nslots; idx++)
		for (unsigned i = 0; i < p->r; i++)
			if (d->waiting[idx * p->r + i] && now >= d->deadline[idx * p->r + i])
				finish(p, idx, i, -ETIMEDOUT);
}
