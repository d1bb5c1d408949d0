/*
 * tests/lib/twd_client.c — see twd_client.h.
 */
#include "twd_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct twc *c = arg;

	(void)ch;
	if (c->rpc)
		tw__rpc_client_on_recv(c->rpc, msg, len);
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct twc *c = arg;

	(void)ch;
	c->lost = true;
	if (c->rpc)
		tw__rpc_client_on_lost(c->rpc, err);
}

int twc_connect(struct twc *c, const char *provider, const char *addr)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	int rc;

	memset(c, 0, sizeof(*c));
	tw__fab_config_init(&fc);
	fc.provider = provider;
	memset(&ev, 0, sizeof(ev));
	ev.arg = c;
	ev.on_recv = on_recv;
	ev.on_lost = on_lost;
	rc = tw__fab_open(&fc, &ev, &c->fab);
	if (rc)
		return rc;
	rc = tw__fab_connect(c->fab, addr, &c->ch);
	if (rc)
		return rc;
	return tw__rpc_client_create(c->ch, NULL, &c->rpc);
}

void twc_close(struct twc *c)
{
	tw__rpc_client_close(&c->rpc, &c->ch);
	if (c->mr)
		tw__mr_close(c->mr);
	c->mr = NULL;
	if (c->seg)
		tw__fab_free(c->seg, c->cap);
	c->seg = NULL;
	if (c->fab)
		tw__fab_close(c->fab);
	c->fab = NULL;
}

int twc_seg_init(struct twc *c, size_t cap)
{
	if (c->mr)
		tw__mr_close(c->mr);
	if (c->seg)
		tw__fab_free(c->seg, c->cap);
	c->mr = NULL;
	c->cap = cap;
	c->seg = tw__fab_alloc(cap);
	if (!c->seg)
		return -ENOMEM;
	tw_log_writer_init_seeded(&c->w, c->seg, cap, c->chain_seed);
	return tw__mr_reg(c->fab, c->seg, cap, TW_MR_WRITE_SRC | TW_MR_READ_DST, &c->mr);
}

int twc_open(struct twc *c, uint64_t log_id, uint64_t segment_id, uint64_t epoch,
	     uint64_t version, uint64_t length)
{
	struct tw_rpc_seg_meta m = { log_id, segment_id, 0, 0 };

	c->log_id = log_id;
	c->segment_id = segment_id;
	c->epoch = epoch;
	c->version = version;
	return tw__rpc_open_segment_seeded(c->rpc, epoch, &m, version, length, c->chain_seed,
					  &c->rk);
}

void twc_fill(uint8_t *p, uint32_t len, uint32_t seed, unsigned i)
{
	uint32_t x = seed * 2654435761u + i * 40503u + 1;

	for (uint32_t k = 0; k < len; k++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[k] = (uint8_t)x;
	}
}

int twc_write(struct twc *c, unsigned n, uint32_t len, uint32_t seed)
{
	uint8_t payload[4096];
	size_t off, wlen;
	int rc;

	if (len > sizeof(payload))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		twc_fill(payload, len, seed, i);
		rc = tw_log_writer_append(&c->w, payload, len, NULL);
		if (rc)
			return rc;
	}
	rc = tw_log_writer_seal(&c->w, &off, &wlen);
	if (rc)
		return rc;
	return tw__chan_rma_sync(c->ch, false, c->seg + off, wlen, c->mr, &c->rk, off);
}

int twc_close_seg(struct twc *c, uint64_t off_override, uint32_t ck_override,
		  struct tw_rpc_seg_meta *scanned_out)
{
	struct tw_rpc_seg_meta m = { c->log_id, c->segment_id, c->w.last_checksum, c->w.pos };

	if (off_override != UINT64_MAX) {
		m.offset = off_override;
		m.checksum = ck_override;
	}
	return tw__rpc_close_segment(c->rpc, c->epoch, &m, c->version, scanned_out);
}

int twc_list(struct twc *c, uint64_t log_id, bool all, struct twc_info *out, size_t max)
{
	uint64_t from_log = log_id, from_seg = 0;
	size_t n = 0;

	for (;;) {
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		const Tailwind__ListSegmentsReply *r;
		int rc;

		tw__rpc_req_list_segments(&req, from_log, all, from_seg);
		rc = tw__rpc_call_sync(c->rpc, &req.env, &rep);
		if (rc) {
			tw__rpc_reply_release(&rep);
			return rc;
		}
		r = rep.env->list_segments_reply;
		for (size_t i = 0; i < r->n_segments && n < max; i++, n++) {
			const Tailwind__SegmentInfo *s = r->segments[i];

			out[n].log_id = s->log_id;
			out[n].segment_id = s->segment_id;
			out[n].valid_len = s->valid_len;
			out[n].entries = s->entries;
			out[n].version = s->replica_version;
			out[n].epoch = s->epoch;
			out[n].checksum = s->checksum;
			out[n].state = s->state;
			out[n].corrupt = s->corrupt;
		}
		if (!r->more || n >= max) {
			tw__rpc_reply_release(&rep);
			return (int)n;
		}
		from_log = r->next_log_id;
		from_seg = r->next_segment_id;
		tw__rpc_reply_release(&rep);
	}
}

static uint64_t kv(const char *msg, const char *key)
{
	const char *p = strstr(msg, key);

	if (!p)
		return 0;
	return strtoull(p + strlen(key), NULL, 10);
}

int twc_stats(struct twc *c, struct twc_stats *out)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	const Tailwind__StatsReply *r;
	int rc;

	memset(out, 0, sizeof(*out));
	tw__rpc_req_stats(&req);
	rc = tw__rpc_call_sync(c->rpc, &req.env, &rep);
	if (rc) {
		tw__rpc_reply_release(&rep);
		return rc;
	}
	r = rep.env->stats_reply;
	for (size_t i = 0; i < r->n_handlers; i++) {
		uint32_t kind = r->handlers[i]->kind;

		if (kind == (uint32_t)TW_RPC_OP_REQ_CASE(TW_RPC_STATS))
			continue;
		out->handler_calls_non_stats += r->handlers[i]->calls;
		if (kind == (uint32_t)TW_RPC_OP_REQ_CASE(TW_RPC_OPEN_SEGMENT))
			out->calls_open = r->handlers[i]->calls;
		if (kind == (uint32_t)TW_RPC_OP_REQ_CASE(TW_RPC_CLOSE_SEGMENT))
			out->calls_close = r->handlers[i]->calls;
		if (kind == (uint32_t)TW_RPC_OP_REQ_CASE(TW_RPC_SET_ACKED))
			out->set_acked = r->handlers[i]->calls;
	}
	out->rpc_bytes_rx = r->rpc_bytes_rx;
	out->buffers_total = r->buffers_total;
	out->buffers_free = r->buffers_free;
	out->buffers_max = r->buffers_max;
	out->buffers_open = r->buffers_open;
	out->cq_entries = kv(r->message, "cq_entries=");
	out->cq_polls = kv(r->message, "cq_polls=");
	out->connections = kv(r->message, "connections=");
	out->shm_peers = kv(r->message, "shm_peers=");
	out->shm_peers_given_back = kv(r->message, "shm_peers_given_back=");
	out->logs_unavailable = kv(r->message, "logs_unavailable=");
	out->set_acked_held = kv(r->message, "set_acked_held=");
	out->set_acked_holding = kv(r->message, "set_acked_holding=");
	out->spares_kept = kv(r->message, "spares_kept=");
	out->spares_reused = kv(r->message, "spares_reused=");
	tw__rpc_reply_release(&rep);
	return 0;
}

int twc_read(struct twc *c, const struct tw_rkey *rk, uint64_t off, size_t len, void *dst,
	     struct tw_mr *dst_mr)
{
	return tw__chan_rma_sync(c->ch, true, dst, len, dst_mr, rk, off);
}

bool twc_send_garbage(struct twc *c, size_t len, int byte)
{
	char junk[256];

	if (len > sizeof(junk))
		len = sizeof(junk);
	memset(junk, byte, len);
	tw__chan_send(c->ch, junk, len);
	for (int i = 0; i < 500 && !c->lost; i++)
		tw__fab_progress(c->fab, 10);
	return c->lost;
}
