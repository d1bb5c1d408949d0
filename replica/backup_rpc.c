/*
 * replica/backup_rpc.c — the backup's RPC handlers: proto/rpc.h's server decodes, validates
 * and dispatches; these functions turn a request into a backup_ops.c call and fill the reply.
 * Progress thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fabric/util.h"
#include "proto/rpc.h"
#include "replica/backup_int.h"

#define MSGLEN (TW_RPC_MESSAGE_MAX + 1)

static struct conn *call_conn(struct tw_rpc_call *call)
{
	return tw_chan_user(call->ch);
}

static int fail(struct tw_rpc_call *call, int rc, const char *msg)
{
	return tw_rpc_call_fail(call, rc, "%s", msg[0] ? msg : tw_strerror(rc));
}

static Tailwind__SegmentState pb_state(const struct seg *s)
{
	switch (s->state) {
	case SEG_OPEN:
		return TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
	case SEG_CLOSED:
		return TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED;
	case SEG_LOST:
		return TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST;
	default:
		/* A file flushed while its segment was open (battery / shutdown) is still an open
		 * replica for recovery: its valid length came from a scan, not from a close. */
		return s->listed_open ? TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN :
					TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED;
	}
}

static int h_handshake(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	Tailwind__HandshakeReply *r = &call->reply.handshake;
	const Tailwind__Handshake *q = call->req->handshake;

	if (q->major != TW_RPC_MAJOR)
		return tw_rpc_call_fail(call, -ENOTSUP, "protocol major %u is not supported (this "
					"backup speaks %u.%u)", q->major, TW_RPC_MAJOR, TW_RPC_MINOR);
	r->major = TW_RPC_MAJOR;
	r->minor = TW_RPC_MINOR;
	r->node_id = b->node_id;
	r->buffer_size = b->pool.size;
	r->buffers_total = b->pool.n;
	r->buffers_free = b->pool.count[POOL_FREE];
	return 0;
}

static int h_open(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__OpenSegment *q = call->req->open_segment;
	struct bk_open_req r;
	struct tw_rkey rk;
	char msg[MSGLEN] = "";
	int rc;

	if (!q->meta)
		return tw_rpc_call_fail(call, -EINVAL, "open: meta is required");
	r.log_id = q->meta->log_id;
	r.segment_id = q->meta->segment_id;
	r.checksum = q->meta->checksum;
	r.offset = q->meta->offset;
	r.epoch = call->req->epoch;
	r.incarnation = call->req->incarnation;
	r.create_log = q->create_log;
	r.version = q->replica_version;
	r.length = q->length;
	rc = bk_op_open(b, call_conn(call), &r, &rk, msg, sizeof(msg));
	if (rc)
		return fail(call, rc, msg);
	tw_rpc_rkey_to_pb(&rk, &call->rkey);
	call->reply.open_segment.rkey = &call->rkey;
	return 0;
}

static int h_close(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__CloseSegment *q = call->req->close_segment;
	struct bk_close_req r;
	struct tw_scan_result sr;
	struct tw_rpc_seg_meta m;
	char msg[MSGLEN] = "";
	int rc;

	if (!q->meta)
		return tw_rpc_call_fail(call, -EINVAL, "close: meta is required");
	r.log_id = q->meta->log_id;
	r.segment_id = q->meta->segment_id;
	r.checksum = q->meta->checksum;
	r.offset = q->meta->offset;
	r.epoch = call->req->epoch;
	r.incarnation = call->req->incarnation;
	r.version = q->replica_version;
	rc = bk_op_close(b, call_conn(call), &r, &sr, msg, sizeof(msg));
	if (rc == 0 || rc == -TW_ECORRUPT || rc == -EEXIST) {
		m.log_id = r.log_id;
		m.segment_id = r.segment_id;
		m.checksum = sr.last_checksum;
		m.offset = sr.valid_len;
		tw_rpc_meta_to_pb(&m, &call->meta);
		call->reply.close_segment.scanned = &call->meta;
	}
	return rc ? fail(call, rc, msg) : 0;
}

static void fill_info(struct tw_backup *b, struct seg *s, Tailwind__SegmentInfo *in)
{
	tailwind__segment_info__init(in);
	if (s->state == SEG_OPEN)
		bk_scan_open(b, s); /* Algorithm 1 on the live buffer, for this reply */
	in->log_id = s->log_id;
	in->segment_id = s->segment_id;
	in->state = pb_state(s);
	in->valid_len = s->valid_len;
	in->checksum = s->checksum;
	in->replica_version = s->version;
	in->epoch = s->epoch;
	in->corrupt = s->corrupt;
	in->entries = s->entries;
	in->length = s->length;
}

static int h_list(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__ListSegments *q = call->req->list_segments;
	Tailwind__ListSegmentsReply *r = &call->reply.list_segments;
	size_t max = tw_rpc_list_max_entries(call->srv);
	size_t i = bk_seg_lower_bound(b, q->log_id, q->from_segment_id), n = 0, cnt = 0;
	Tailwind__SegmentInfo *infos;

	if (!q->all_logs) {
		const struct logst *lg = bk_log(b, q->log_id, false);

		r->log_known = bk_log_known(b, q->log_id);
		r->log_epoch = lg ? lg->epoch : 0;
		r->log_owner = lg ? lg->owner : 0;
		r->free_below = lg ? lg->free_below : 0;
		call->reply_epoch = r->log_epoch;
		bk_hold_touch(b, call_conn(call), q->log_id);
	}
	/* Count first so one allocation holds them all. */
	for (size_t k = i; k < b->nsegs && cnt <= max; k++) {
		struct seg *s = b->segs[k];

		if (!q->all_logs && s->log_id != q->log_id)
			break;
		cnt += !s->freed;
	}
	if (cnt > max)
		cnt = max;
	if (cnt == 0)
		return 0;
	infos = tw_rpc_call_alloc(call, cnt * sizeof(*infos));
	r->segments = tw_rpc_call_alloc(call, cnt * sizeof(*r->segments));
	if (!infos || !r->segments)
		return tw_rpc_call_fail(call, -ENOMEM, "list: reply too large");
	for (; i < b->nsegs; i++) {
		struct seg *s = b->segs[i];

		if (!q->all_logs && s->log_id != q->log_id)
			break;
		if (s->freed)
			continue;
		if (n == cnt) {
			r->more = true;
			r->next_log_id = s->log_id;
			r->next_segment_id = s->segment_id;
			break;
		}
		fill_info(b, s, &infos[n]);
		r->segments[n] = &infos[n];
		n++;
	}
	r->n_segments = n;
	return 0;
}

static int h_set_version(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__SetReplicaVersion *q = call->req->set_replica_version;
	char msg[MSGLEN] = "";
	int rc;

	rc = bk_op_set_version(b, q->log_id, q->segment_id, call->req->epoch,
			       call->req->incarnation, q->version, msg, sizeof(msg));
	return rc ? fail(call, rc, msg) : 0;
}

static int h_fence(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__Fence *q = call->req->fence;
	char msg[MSGLEN] = "";
	uint64_t epoch = 0, owner = 0;
	int rc;

	rc = bk_op_fence(b, call_conn(call), q->log_id, q->new_epoch, call->req->incarnation,
			 &epoch, &owner, msg, sizeof(msg));
	call->reply.fence.epoch = epoch;
	call->reply.fence.owner = owner;
	call->reply_epoch = epoch;
	return rc ? fail(call, rc, msg) : 0;
}

static int h_free(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__FreeSegments *q = call->req->free_segments;
	char msg[MSGLEN] = "";
	uint64_t freed = 0;
	int rc;

	rc = bk_op_free(b, q->log_id, q->below_segment_id, call->req->epoch,
			call->req->incarnation, q->delete_log, &freed, msg, sizeof(msg));
	call->reply.free_segments.freed = freed;
	return rc ? fail(call, rc, msg) : 0;
}

static int h_read(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__ReadSegment *q = call->req->read_segment;
	Tailwind__ReadSegmentReply *r = &call->reply.read_segment;
	struct tw_rpc_seg_meta m;
	struct tw_rkey rk;
	struct seg *s = NULL;
	char msg[MSGLEN] = "";
	int rc;

	bk_hold_touch(b, call_conn(call), q->log_id);
	rc = bk_op_read(b, call_conn(call), q->log_id, q->segment_id, call->req->epoch, &rk, &s,
			msg, sizeof(msg));
	if (rc)
		return fail(call, rc, msg);
	tw_rpc_rkey_to_pb(&rk, &call->rkey);
	r->rkey = &call->rkey;
	m.log_id = s->log_id;
	m.segment_id = s->segment_id;
	m.checksum = s->checksum;
	m.offset = s->valid_len;
	tw_rpc_meta_to_pb(&m, &call->meta);
	r->meta = &call->meta;
	r->replica_version = s->version;
	r->state = pb_state(s);
	r->corrupt = s->corrupt;
	return 0;
}

static int h_release(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__ReleaseSegment *q = call->req->release_segment;
	char msg[MSGLEN] = "";
	int rc;

	bk_hold_touch(b, call_conn(call), q->log_id);
	rc = bk_op_release(b, call_conn(call), q->log_id, q->segment_id, msg, sizeof(msg));
	return rc ? fail(call, rc, msg) : 0;
}

static int h_stats(void *arg, struct tw_rpc_call *call)
{
	struct tw_backup *b = arg;
	Tailwind__StatsReply *r = &call->reply.stats;
	struct tw_backup_stats st;
	char *msg;

	bk_stats_sync(b);
	tw_backup_get_stats(b, &st);
	r->buffers_total = (uint32_t)st.buffers;
	r->buffers_free = (uint32_t)st.buffers_free;
	r->buffers_open = (uint32_t)st.buffers_open;
	r->buffers_closed = (uint32_t)st.buffers_closed;
	r->buffers_flushed = (uint32_t)st.segments_on_disk;
	r->flushes = st.flushes;
	r->bytes_flushed = st.bytes_flushed;
	r->cpu_seconds = (double)(st.cpu_user_us + st.cpu_sys_us) / 1e6;
	r->uptime_ms = (tw_now_ns() - b->start_ns) / 1000000u;
	/* Counters StatsReply has no field for, as key=value text (docs/operations.md). */
	msg = tw_rpc_call_alloc(call, 256);
	if (msg) {
		snprintf(msg, 256, "cq_polls=%" PRIu64 " cq_entries=%" PRIu64 " flush_errors=%"
			 PRIu64 " loads=%" PRIu64 " opens_refused=%" PRIu64 " buffers_loaded=%"
			 PRIu64 " buffers_zeroing=%" PRIu64 " segments_corrupt=%" PRIu64
			 " connections=%" PRIu64, st.cq_polls, st.cq_entries, st.flush_errors,
			 st.loads, st.opens_refused, st.buffers_loaded, st.buffers_zeroing,
			 st.segments_corrupt, st.connections);
		r->message = msg;
	}
	return 0;
}

/* The server closes `ch` for a protocol violation: forget our connection state. */
static void on_server_close(void *arg, struct tw_chan *ch, int reason)
{
	struct conn *c = tw_chan_user(ch);

	tw_log_warn("backup: closing connection from %s: %s (protocol violation)",
		    tw_chan_peer(ch), tw_strerror(reason));
	if (!c)
		return;
	c->ch = NULL; /* the server closes it */
	c->drop = true;
	((struct tw_backup *)arg)->reap = true;
	tw_chan_set_user(ch, NULL);
}

int bk_rpc_init(struct tw_backup *b)
{
	struct tw_rpc_server_ops ops;

	memset(&ops, 0, sizeof(ops));
	ops.handlers[TW_RPC_HANDSHAKE] = h_handshake;
	ops.handlers[TW_RPC_OPEN_SEGMENT] = h_open;
	ops.handlers[TW_RPC_CLOSE_SEGMENT] = h_close;
	ops.handlers[TW_RPC_LIST_SEGMENTS] = h_list;
	ops.handlers[TW_RPC_SET_REPLICA_VERSION] = h_set_version;
	ops.handlers[TW_RPC_FENCE] = h_fence;
	ops.handlers[TW_RPC_FREE_SEGMENTS] = h_free;
	ops.handlers[TW_RPC_READ_SEGMENT] = h_read;
	ops.handlers[TW_RPC_RELEASE_SEGMENT] = h_release;
	ops.handlers[TW_RPC_STATS] = h_stats;
	ops.handlers[TW_RPC_RECOVERED_OFFSET] = bk_h_recovered_offset; /* backup_recovery.c */
	ops.on_close = on_server_close;
	ops.node_id = b->node_id;
	return tw_rpc_server_create(NULL, &ops, b, &b->srv);
}

void bk_rpc_fini(struct tw_backup *b)
{
	if (b->srv)
		tw_rpc_server_destroy(b->srv);
	b->srv = NULL;
}

void bk_rpc_recv(struct tw_backup *b, struct conn *c, const void *msg, size_t len)
{
	tw_rpc_server_on_recv(b->srv, c->ch, msg, len);
}
