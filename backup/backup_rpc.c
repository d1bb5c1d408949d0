/*
 * backup/backup_rpc.c — the backup's RPC handlers: proto/rpc.h's server decodes, validates
 * and dispatches; these functions turn a request into a backup_ops.c call and fill the reply.
 * Progress thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "proto/auth.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"


static struct conn *call_conn(struct tw__rpc_call *call)
{
	return tw__chan_user(call->ch);
}

/* Where a handler's operation writes why it failed: the reply's own message buffer. */
#define MSGBUF(call) (call)->msgbuf, sizeof((call)->msgbuf)

int tw__bk_call_owned_seg(struct tw_backup *b, struct tw__rpc_call *call, uint64_t log_id,
			  uint64_t segment_id, uint64_t epoch, struct seg **out)
{
	struct seg *s;
	int rc = tw__bk_check_owner(b, log_id, epoch, call->req->incarnation, MSGBUF(call));

	*out = NULL;
	if (rc)
		return tw__rpc_call_failed(call, rc);
	s = tw__bk_seg_find(b, log_id, segment_id);
	if (!s || s->freed || s->state == SEG_LOST)
		return tw__rpc_call_fail(call, -TW_ENOTFOUND, "no segment " SEGF " here", log_id,
					 segment_id);
	*out = s;
	return 0;
}

int tw__bk_pb_state(const struct seg *s)
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

/* ---- peer authentication (proto/auth.h; docs/wire-protocol.md "Authentication") */

static void auth_count(struct tw_backup *b, bool good)
{
	pthread_mutex_lock(&b->st_lock);
	if (good)
		b->st.auth_ok++;
	else
		b->st.auth_failures++;
	pthread_mutex_unlock(&b->st_lock);
}

/* The connection is refused: it is closed at its next message, or after a grace period that
 * lets the UNAUTHENTICATED reply leave (closing at once loses it on the sockets provider). */
#define AUTH_CLOSE_GRACE_NS 500000000ull

static void mark_refused(struct tw_backup *b, struct conn *c)
{
	free(c->auth_t);
	c->auth_t = NULL;
	if (c->auth != CONN_AUTH_REFUSED)
		b->auth_refused++;
	c->auth = CONN_AUTH_REFUSED;
	c->auth_close_ns = tw_now_ns() + AUTH_CLOSE_GRACE_NS;
}

void tw__bk_auth_sweep(struct tw_backup *b)
{
	uint64_t now;

	if (!b->auth_refused)
		return;
	now = tw_now_ns();
	for (struct conn *c = b->conns; c; c = c->next) {
		if (c->auth != CONN_AUTH_REFUSED || c->drop || now < c->auth_close_ns)
			continue;
		c->drop = true;
		b->reap = true;
	}
}

/* Refuse: count, log (rate-limited, with the peer's address), reply UNAUTHENTICATED and close
 * the connection once the reply is sent. Other connections are not touched. */
static int auth_refuse(struct tw_backup *b, struct tw__rpc_call *call, const char *why)
{
	struct conn *c = call_conn(call);

	auth_count(b, false);
	tw_log_ratelimited(TW_DIAG_WARN, "backup: authentication failed for %s: %s",
			   tw__chan_peer(call->ch), why);
	if (c)
		mark_refused(b, c);
	return tw__rpc_call_fail(call, -EACCES, "%s", why);
}

/* Step 1 (a nonce) or step 3 (a proof) of the handshake on a backup that has a key. Returns 0
 * when the reply may carry the usual handshake fields. */
static int auth_step(struct tw_backup *b, struct tw__rpc_call *call)
{
	const Tailwind__Handshake *q = call->req->handshake;
	Tailwind__HandshakeReply *r = &call->reply.handshake;
	struct conn *c = call_conn(call);
	unsigned char *mac;

	if (!c)
		return tw__rpc_call_fail(call, -TW_EREMOTE, "connection is being closed");
	if (q->auth_proof.len == TW_AUTH_MAC_LEN) {
		if (c->auth != CONN_AUTH_CHALLENGED || !c->auth_t)
			return auth_refuse(b, call, "key proof without a pending challenge on this "
					   "connection (a replayed handshake?)");
		if (q->node_id != c->auth_t->client_node_id ||
		    (uint32_t)q->role != c->auth_t->client_role)
			return auth_refuse(b, call, "key proof names another node or role than its "
					   "challenge");
		if (!tw__auth_verify(b->key, TW_AUTH_LABEL_CLIENT, c->auth_t, q->auth_proof.data,
				    q->auth_proof.len))
			return auth_refuse(b, call, "client did not prove the key (wrong key file?)");
		free(c->auth_t);
		c->auth_t = NULL;
		c->auth = CONN_AUTH_OK;
		auth_count(b, true);
		tw_log_info("backup: connection %" PRIu64 " from %s authenticated (node %" PRIx64
			    ")", c->id, tw__chan_peer(call->ch), q->node_id);
		return 0;
	}
	if (q->auth_nonce.len != TW_AUTH_NONCE_LEN)
		return auth_refuse(b, call, "backup requires authentication: give --key-file (or "
				   "TW_KEY_FILE) with the cluster key");
	/* A fresh challenge (also restarts an earlier one on this connection). */
	if (!c->auth_t) {
		c->auth_t = calloc(1, sizeof(*c->auth_t));
		if (!c->auth_t)
			return tw__rpc_call_fail(call, -ENOMEM, "out of memory");
	}
	c->auth = CONN_AUTH_CHALLENGED;
	memcpy(c->auth_t->client_nonce, q->auth_nonce.data, TW_AUTH_NONCE_LEN);
	tw__auth_nonce(c->auth_t->server_nonce);
	c->auth_t->client_node_id = q->node_id;
	c->auth_t->client_role = (uint32_t)q->role;
	c->auth_t->server_node_id = b->node_id;
	mac = tw__rpc_call_alloc(call, TW_AUTH_MAC_LEN);
	if (!mac)
		return tw__rpc_call_fail(call, -ENOMEM, "out of memory");
	tw__auth_mac(b->key, TW_AUTH_LABEL_SERVER, c->auth_t, mac);
	r->auth_nonce.data = c->auth_t->server_nonce;
	r->auth_nonce.len = TW_AUTH_NONCE_LEN;
	r->auth_mac.data = mac;
	r->auth_mac.len = TW_AUTH_MAC_LEN;
	return 0;
}

void tw__bk_auth_conn_gone(struct tw_backup *b, struct conn *c)
{
	if (c->auth == CONN_AUTH_REFUSED)
		b->auth_refused--;
	if (!b->key || c->auth != CONN_AUTH_CHALLENGED)
		return;
	/* The peer got our challenge and left without a proof: usually a client whose key
	 * differs (it refused our MAC). */
	auth_count(b, false);
	tw_log_ratelimited(TW_DIAG_WARN, "backup: authentication failed for %s: the peer closed "
			   "the connection during the key handshake (a different key file?)",
			   c->ch ? tw__chan_peer(c->ch) : "a peer");
}

/* Gate of the RPC server: with a key, only a Handshake is served before the proof. */
static int admit(void *arg, struct tw_chan *ch, enum tw_rpc_op op, char *why, size_t why_len)
{
	struct tw_backup *b = arg;
	struct conn *c = tw__chan_user(ch);

	/* Every request sees the segments as they are after the closes asked before it: a close
	 * scanning on the scanner thread (backup_scan.c) is finished and answered first. Only the
	 * one-sided writes, which are no requests, go on meanwhile, and the requests that change
	 * no segment's state or buffer: SetAcked (an owner in sync mode sends one per reap; it
	 * moves an open segment's readable mark, and a closing one is still open until its scan
	 * is applied), Stats and Ping. */
	if (op != TW_RPC_SET_ACKED && op != TW_RPC_STATS && op != TW_RPC_PING)
		tw__bk_scans_settle(b);
	if (!b->key || op == TW_RPC_HANDSHAKE || (c && c->auth == CONN_AUTH_OK))
		return 0;
	if (c)
		mark_refused(b, c);
	snprintf(why, why_len, "backup requires authentication: give --key-file (or TW_KEY_FILE) "
		 "with the cluster key; %s refused before the key handshake", tw__rpc_op_name(op));
	auth_count(b, false);
	tw_log_ratelimited(TW_DIAG_WARN, "backup: authentication failed for %s: %s refused before "
			   "the key handshake", tw__chan_peer(ch), tw__rpc_op_name(op));
	return -EACCES;
}

static int h_handshake(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	Tailwind__HandshakeReply *r = &call->reply.handshake;
	const Tailwind__Handshake *q = call->req->handshake;
	int rc;

	if (q->major != TW_RPC_MAJOR)
		return tw__rpc_call_fail(call, -ENOTSUP, "protocol major %u is not supported (this "
					"backup speaks %u.%u)", q->major, TW_RPC_MAJOR, TW_RPC_MINOR);
	if (b->key) {
		rc = auth_step(b, call);
		if (rc)
			return rc;
	} else if (q->auth_nonce.len) {
		tw_log_ratelimited(TW_DIAG_WARN, "backup: %s offers a key handshake but this backup "
				   "has no key: give --key-file (or TW_KEY_FILE) with the cluster "
				   "key; the peer will refuse us", tw__chan_peer(call->ch));
	}
	r->major = TW_RPC_MAJOR;
	r->minor = TW_RPC_MINOR;
	r->node_id = b->node_id;
	r->buffer_size = b->pool.size;
	r->buffers_total = b->pool.n;
	r->buffers_free = b->pool.count[POOL_FREE];
	r->buffers_max = b->pool.max;
	return 0;
}

/* The segment an open or a close names: its meta, version and the request's envelope. The meta
 * is there: tw__rpc_validate_request refuses an open or a close without one. */
static struct bk_seg_req seg_req(const struct tw__rpc_call *call)
{
	const Tailwind__Envelope *e = call->req;
	bool open = call->op == TW_RPC_OPEN_SEGMENT;
	const Tailwind__SegmentMeta *m = open ? e->open_segment->meta : e->close_segment->meta;

	return (struct bk_seg_req){
		.log_id = m->log_id, .segment_id = m->segment_id, .checksum = m->checksum,
		.offset = m->offset, .epoch = e->epoch, .incarnation = e->incarnation,
		.version = open ? e->open_segment->replica_version : e->close_segment->replica_version,
	};
}

static int h_open(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__OpenSegment *q = call->req->open_segment;
	const struct bk_seg_req r = seg_req(call);
	struct bk_open_req o = {.create_log = q->create_log, .length = q->length,
				.seed = q->chain_seed};
	struct tw_rkey rk;
	int rc;

	rc = tw__bk_op_open(b, call_conn(call), &r, &o, &rk, MSGBUF(call));
	/* Published before the answer: whoever got it sees the pool it left (tw_backup_get_stats
	 * otherwise catches up at the loop's next pass). */
	tw__bk_stats_sync(b);
	if (rc)
		return tw__rpc_call_failed(call, rc);
	tw__rpc_rkey_to_pb(&rk, &call->rkey);
	call->reply.open_segment.rkey = &call->rkey;
	call->reply.open_segment.chain_seed = o.seed; /* the primary checks the echo */
	return 0;
}

static int h_close(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const struct bk_seg_req r = seg_req(call);
	struct conn *c = call_conn(call);
	struct tw_scan_result sr;
	/* The scan goes to the scanner thread (backup_scan.c); without memory for that, here. */
	struct bk_scan *sc = b->scanner_started && c ? calloc(1, sizeof(*sc)) : NULL;
	int rc;

	if (sc) {
		sc->conn_id = c->id;
		sc->ch = call->ch;
		sc->request_id = call->req->request_id;
		sc->reply_epoch = call->reply_epoch;
	}
	rc = tw__bk_op_close(b, c, &r, &sr, MSGBUF(call), sc);
	if (rc == TW_RPC_DEFERRED)
		return rc; /* answered by tw__bk_scans_drain */
	free(sc);
	tw__bk_stats_sync(b); /* as in h_open */
	if (rc == 0 || rc == -TW_ECORRUPT || rc == -EEXIST) {
		const struct tw_rpc_seg_meta m = {.log_id = r.log_id, .segment_id = r.segment_id,
						  .checksum = sr.last_checksum,
						  .offset = sr.valid_len};

		tw__rpc_meta_to_pb(&m, &call->meta);
		call->reply.close_segment.scanned = &call->meta;
	}
	return rc ? tw__rpc_call_failed(call, rc) : 0;
}

static void fill_info(struct tw_backup *b, struct seg *s, Tailwind__SegmentInfo *in)
{
	tailwind__segment_info__init(in);
	if (s->state == SEG_OPEN)
		tw__bk_scan_open(b, s); /* Algorithm 1 on the live buffer, for this reply */
	in->log_id = s->log_id;
	in->segment_id = s->segment_id;
	in->state = (Tailwind__SegmentState)tw__bk_pb_state(s);
	in->valid_len = s->valid_len;
	in->checksum = s->checksum;
	in->replica_version = s->version;
	in->epoch = s->epoch;
	in->corrupt = s->corrupt;
	in->entries = s->entries;
	in->length = s->length;
	in->chain_seed = s->seed;
}

static int h_list(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__ListSegments *q = call->req->list_segments;
	Tailwind__ListSegmentsReply *r = &call->reply.list_segments;
	size_t max = tw__rpc_list_max_entries(call->srv);
	size_t i = tw__bk_seg_lower_bound(b, q->log_id, q->from_segment_id), n = 0, cnt = 0;
	Tailwind__SegmentInfo *infos;

	if (!q->all_logs) {
		const struct logst *lg = tw__bk_log(b, q->log_id, false);

		r->log_known = tw__bk_log_known(b, q->log_id);
		r->log_epoch = lg ? lg->epoch : 0;
		r->log_owner = lg ? lg->owner : 0;
		r->free_below = lg ? lg->free_below : 0;
		if (lg && lg->unavail) /* borrowed: the reply is packed before lg can change */
			r->log_unavailable = lg->unavail;
		call->reply_epoch = r->log_epoch;
		tw__bk_hold_touch(b, call_conn(call), q->log_id);
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
	infos = tw__rpc_call_alloc(call, cnt * sizeof(*infos));
	r->segments = tw__rpc_call_alloc(call, cnt * sizeof(*r->segments));
	if (!infos || !r->segments)
		return tw__rpc_call_fail(call, -ENOMEM, "list: reply too large");
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

static int h_set_version(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__SetReplicaVersion *q = call->req->set_replica_version;
	int rc;

	rc = tw__bk_op_set_version(b, q->log_id, q->segment_id, call->req->epoch,
			       call->req->incarnation, q->version, MSGBUF(call));
	return rc ? tw__rpc_call_failed(call, rc) : 0;
}

static int h_fence(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__Fence *q = call->req->fence;
	uint64_t epoch = 0, owner = 0;
	int rc;

	rc = tw__bk_op_fence(b, call_conn(call), q->log_id, q->new_epoch, call->req->incarnation,
			 &epoch, &owner, MSGBUF(call));
	call->reply.fence.epoch = epoch;
	call->reply.fence.owner = owner;
	call->reply_epoch = epoch;
	return rc ? tw__rpc_call_failed(call, rc) : 0;
}

static int h_free(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__FreeSegments *q = call->req->free_segments;
	uint64_t freed = 0;
	int rc;

	rc = tw__bk_op_free(b, q->log_id, q->below_segment_id, call->req->epoch,
			call->req->incarnation, q->delete_log, &freed, MSGBUF(call));
	call->reply.free_segments.freed = freed;
	return rc ? tw__rpc_call_failed(call, rc) : 0;
}

static int h_read(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__SegmentRef *q = call->req->read_segment;
	Tailwind__ReadSegmentReply *r = &call->reply.read_segment;
	struct tw_rpc_seg_meta m;
	struct tw_rkey rk;
	struct seg *s = NULL;
	int rc;

	tw__bk_hold_touch(b, call_conn(call), q->log_id);
	tw__bk_reader_seen(b, q->log_id); /* a one-sided reader's grant (docs/readers.md) */
	rc = tw__bk_op_read(b, call_conn(call), q->log_id, q->segment_id, call->req->epoch, &rk, &s,
			MSGBUF(call));
	if (rc)
		return tw__rpc_call_failed(call, rc);
	tw__rpc_rkey_to_pb(&rk, &call->rkey);
	r->rkey = &call->rkey;
	m.log_id = s->log_id;
	m.segment_id = s->segment_id;
	m.checksum = s->checksum;
	m.offset = s->valid_len;
	tw__rpc_meta_to_pb(&m, &call->meta);
	r->meta = &call->meta;
	r->replica_version = s->version;
	r->state = (Tailwind__SegmentState)tw__bk_pb_state(s);
	r->corrupt = s->corrupt;
	r->chain_seed = s->seed;
	return 0;
}

static int h_release(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	const Tailwind__SegmentRef *q = call->req->release_segment;
	int rc;

	tw__bk_hold_touch(b, call_conn(call), q->log_id);
	rc = tw__bk_op_release(b, call_conn(call), q->log_id, q->segment_id, MSGBUF(call));
	return rc ? tw__rpc_call_failed(call, rc) : 0;
}

static int h_stats(void *arg, struct tw__rpc_call *call)
{
	struct tw_backup *b = arg;
	Tailwind__StatsReply *r = &call->reply.stats;
	struct tw_backup_stats st;
	struct tw_fab_stats fs;
	char *msg;

	tw__bk_stats_sync(b);
	tw__fab_get_stats(b->fab, &fs);
	tw_backup_get_stats(b, &st);
	r->buffers_total = (uint32_t)st.buffers;
	r->buffers_free = (uint32_t)st.buffers_free;
	r->buffers_max = (uint32_t)st.buffers_max;
	r->buffers_open = (uint32_t)st.buffers_open;
	r->buffers_closed = (uint32_t)st.buffers_closed;
	r->buffers_flushed = (uint32_t)st.segments_on_disk;
	r->flushes = st.flushes;
	r->bytes_flushed = st.bytes_flushed;
	r->cpu_seconds = (double)(st.cpu_user_us + st.cpu_sys_us) / 1e6;
	r->uptime_ms = (tw_now_ns() - b->start_ns) / 1000000u;
	/* Counters StatsReply has no field for, as key=value text (docs/operations.md). */
	msg = tw__rpc_call_alloc(call, 768);
	if (msg) {
		snprintf(msg, 768, "cq_polls=%" PRIu64 " cq_entries=%" PRIu64 " flush_errors=%"
			 PRIu64 " loads=%" PRIu64 " opens_refused=%" PRIu64 " buffers_loaded=%"
			 PRIu64 " buffers_zeroing=%" PRIu64 " segments_corrupt=%" PRIu64
			 " connections=%" PRIu64 " auth_ok=%" PRIu64 " auth_failures=%" PRIu64
			 " buffers_zeroed=%" PRIu64 " buffers_grown=%" PRIu64 " shm_peers=%" PRIu64
			 " shm_peers_given_back=%" PRIu64 " logs_unavailable=%zu set_acked=%" PRIu64
			 " set_acked_held=%" PRIu64 " set_acked_holding=%" PRIu64
			 " spares_kept=%" PRIu64 " spares_reused=%" PRIu64,
			 st.cq_polls, st.cq_entries, st.flush_errors, st.loads, st.opens_refused,
			 st.buffers_loaded, (uint64_t)b->pool.count[POOL_ZEROING], st.segments_corrupt,
			 st.connections,
			 st.auth_ok, st.auth_failures, st.buffers_zeroed, st.buffers_grown,
			 fs.shm_av_peers, fs.shm_av_given_back, tw__bk_logs_unavailable(b),
			 st.set_acked, st.set_acked_held, st.set_acked_holding, st.spares_kept,
			 st.spares_reused);
		r->message = msg;
	}
	return 0;
}

/* The server closes `ch` for a protocol violation: forget our connection state. */
static void on_server_close(void *arg, struct tw_chan *ch, int reason)
{
	struct conn *c = tw__chan_user(ch);

	if (reason != -EACCES) /* authentication failures were logged already */
		tw_log_ratelimited(TW_DIAG_WARN, "backup: closing connection from %s: %s "
				   "(protocol violation)", tw__chan_peer(ch), tw_strerror(reason));
	if (!c)
		return;
	c->ch = NULL; /* the server closes it */
	c->drop = true;
	((struct tw_backup *)arg)->reap = true;
	tw__chan_set_user(ch, NULL);
}

int tw__bk_rpc_init(struct tw_backup *b)
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
	ops.handlers[TW_RPC_RECOVERED_OFFSET] = tw__bk_h_recovered_offset; /* backup_recovery.c */
	ops.handlers[TW_RPC_SET_ACKED] = tw__bk_h_set_acked;         /* backup_readers.c */
	ops.handlers[TW_RPC_READ_ENTRIES] = tw__bk_h_read_entries;   /* backup_readers.c */
	ops.on_close = on_server_close;
	ops.admit = admit;
	ops.node_id = b->node_id;
	return tw__rpc_server_create(NULL, &ops, b, &b->srv);
}

void tw__bk_rpc_fini(struct tw_backup *b)
{
	if (b->srv)
		tw__rpc_server_destroy(b->srv);
	b->srv = NULL;
}

void tw__bk_rpc_recv(struct tw_backup *b, struct conn *c, const void *msg, size_t len)
{
	if (c->auth == CONN_AUTH_REFUSED) {
		/* Refused already: anything more closes it, unanswered. */
		c->drop = true;
		b->reap = true;
		return;
	}
	tw__rpc_server_on_recv(b->srv, c->ch, msg, len);
}
