/*
 * proto/rpc_msg.c — request builders (struct tw_rpc_req) and the typed blocking wrappers.
 */
#include <errno.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"

static void req_init(struct tw_rpc_req *r, uint64_t epoch, Tailwind__Envelope__BodyCase body_case,
		     const ProtobufCMessageDescriptor *desc)
{
	tailwind__envelope__init(&r->env);
	r->env.epoch = epoch;
	r->env.body_case = body_case;
	protobuf_c_message_init(desc, &r->body);
	/* All oneof members share storage; any of them points at the body. */
	r->env.handshake = (Tailwind__Handshake *)(void *)&r->body;
}

void tw__rpc_req_handshake(struct tw_rpc_req *r, uint64_t node_id, Tailwind__Role role,
			  const char *node_name)
{
	req_init(r, 0, TAILWIND__ENVELOPE__BODY_HANDSHAKE, &tailwind__handshake__descriptor);
	r->body.handshake.major = TW_RPC_MAJOR;
	r->body.handshake.minor = TW_RPC_MINOR;
	r->body.handshake.node_id = node_id;
	r->body.handshake.role = role;
	if (node_name)
		r->body.handshake.node_name = (char *)node_name;
}

void tw__rpc_req_open_segment(struct tw_rpc_req *r, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			     uint64_t replica_version, uint64_t length)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_OPEN_SEGMENT,
		 &tailwind__open_segment__descriptor);
	tw__rpc_meta_to_pb(m, &r->meta);
	r->body.open_segment.meta = &r->meta;
	r->body.open_segment.replica_version = replica_version;
	r->body.open_segment.length = length;
}

void tw__rpc_req_close_segment(struct tw_rpc_req *r, uint64_t epoch,
			      const struct tw_rpc_seg_meta *m, uint64_t replica_version)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_CLOSE_SEGMENT,
		 &tailwind__close_segment__descriptor);
	tw__rpc_meta_to_pb(m, &r->meta);
	r->body.close_segment.meta = &r->meta;
	r->body.close_segment.replica_version = replica_version;
}

void tw__rpc_req_list_segments(struct tw_rpc_req *r, uint64_t log_id, bool all_logs,
			      uint64_t from_segment_id)
{
	req_init(r, 0, TAILWIND__ENVELOPE__BODY_LIST_SEGMENTS,
		 &tailwind__list_segments__descriptor);
	r->body.list_segments.log_id = log_id;
	r->body.list_segments.all_logs = all_logs;
	r->body.list_segments.from_segment_id = from_segment_id;
}

void tw__rpc_req_set_replica_version(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
				    uint64_t segment_id, uint64_t version)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_SET_REPLICA_VERSION,
		 &tailwind__set_replica_version__descriptor);
	r->body.set_replica_version.log_id = log_id;
	r->body.set_replica_version.segment_id = segment_id;
	r->body.set_replica_version.version = version;
}

void tw__rpc_req_fence(struct tw_rpc_req *r, uint64_t log_id, uint64_t new_epoch)
{
	req_init(r, new_epoch, TAILWIND__ENVELOPE__BODY_FENCE, &tailwind__fence__descriptor);
	r->body.fence.log_id = log_id;
	r->body.fence.new_epoch = new_epoch;
}

void tw__rpc_req_free_segments(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			      uint64_t below_segment_id)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_FREE_SEGMENTS,
		 &tailwind__free_segments__descriptor);
	r->body.free_segments.log_id = log_id;
	r->body.free_segments.below_segment_id = below_segment_id;
}

/* The requests whose body is a SegmentRef (log_id, segment_id). */
static void req_segment_ref(struct tw_rpc_req *r, uint64_t epoch, int body_case, uint64_t log_id,
			    uint64_t segment_id)
{
	req_init(r, epoch, body_case, &tailwind__segment_ref__descriptor);
	r->body.segment_ref.log_id = log_id;
	r->body.segment_ref.segment_id = segment_id;
}

void tw__rpc_req_read_segment(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			      uint64_t segment_id)
{
	req_segment_ref(r, epoch, TAILWIND__ENVELOPE__BODY_READ_SEGMENT, log_id, segment_id);
}

void tw__rpc_req_release_segment(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
				 uint64_t segment_id)
{
	req_segment_ref(r, epoch, TAILWIND__ENVELOPE__BODY_RELEASE_SEGMENT, log_id, segment_id);
}

void tw__rpc_req_stats(struct tw_rpc_req *r)
{
	req_init(r, 0, TAILWIND__ENVELOPE__BODY_STATS, &tailwind__stats__descriptor);
}

void tw__rpc_req_recovered_offset(struct tw_rpc_req *r, uint64_t epoch,
				 const struct tw_rpc_seg_meta *m, uint64_t replica_version)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_RECOVERED_OFFSET,
		 &tailwind__recovered_offset__descriptor);
	r->body.recovered_offset.log_id = m->log_id;
	r->body.recovered_offset.segment_id = m->segment_id;
	r->body.recovered_offset.offset = m->offset;
	r->body.recovered_offset.checksum = m->checksum;
	r->body.recovered_offset.replica_version = replica_version;
}

void tw__rpc_req_ping(struct tw_rpc_req *r, uint64_t nonce, const void *payload, size_t len)
{
	req_init(r, 0, TAILWIND__ENVELOPE__BODY_PING, &tailwind__ping__descriptor);
	r->body.ping.nonce = nonce;
	r->body.ping.payload.data = (uint8_t *)(uintptr_t)payload;
	r->body.ping.payload.len = payload ? len : 0;
}

void tw__rpc_req_set_acked(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			   uint64_t segment_id, uint64_t acked, uint32_t hold_ms)
{
	req_init(r, epoch, TAILWIND__ENVELOPE__BODY_SET_ACKED, &tailwind__set_acked__descriptor);
	r->body.set_acked.log_id = log_id;
	r->body.set_acked.segment_id = segment_id;
	r->body.set_acked.acked = acked;
	r->body.set_acked.hold_ms = hold_ms;
}

void tw__rpc_req_read_entries(struct tw_rpc_req *r, uint64_t log_id, uint64_t segment_id,
			      uint64_t offset, uint32_t max_bytes, uint32_t wait_ms)
{
	req_init(r, 0, TAILWIND__ENVELOPE__BODY_READ_ENTRIES, &tailwind__read_entries__descriptor);
	r->body.read_entries.log_id = log_id;
	r->body.read_entries.segment_id = segment_id;
	r->body.read_entries.offset = offset;
	r->body.read_entries.max_bytes = max_bytes;
	r->body.read_entries.wait_ms = wait_ms;
}

/* ------------------------------------------------------------------ typed blocking wrappers */

/* Run a sync call and hand back the reply (caller releases) when the reply kind is right. */
static int run(struct tw_rpc_client *cl, struct tw_rpc_req *r, struct tw_rpc_reply *rep)
{
	return tw__rpc_call_sync(cl, &r->env, rep);
}

int tw__rpc_open_segment(struct tw_rpc_client *cl, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			uint64_t replica_version, uint64_t length, struct tw_rkey *rkey_out)
{
	return tw__rpc_open_segment_seeded(cl, epoch, m, replica_version, length, 0, rkey_out);
}

int tw__rpc_open_segment_seeded(struct tw_rpc_client *cl, uint64_t epoch,
			       const struct tw_rpc_seg_meta *m, uint64_t replica_version,
			       uint64_t length, uint32_t seed, struct tw_rkey *rkey_out)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_open_segment(&r, epoch, m, replica_version, length);
	r.body.open_segment.chain_seed = seed;
	rc = run(cl, &r, &rep);
	if (rc == 0) {
		const Tailwind__OpenSegmentReply *o = rep.env->open_segment_reply;

		/* validate_reply checked that an OK reply has an rkey */
		if (o->rkey->len < length) {
			tw_log_warn("rpc: open_segment granted %llu bytes, %llu asked",
				    (unsigned long long)o->rkey->len, (unsigned long long)length);
			rc = -TW_EMALFORMED;
		} else if (o->chain_seed != seed) {
			tw__rpc__client_seterr(cl, "open_segment: the backup (protocol %u.%d) "
					      "answered chain seed 0x%08x to seed 0x%08x: it would "
					      "scan the replica with another seed; upgrade it to "
					      "protocol 1.2", TW_RPC_MAJOR,
					      tw__rpc_client_peer_minor(cl), o->chain_seed, seed);
			rc = -TW_EMALFORMED;
		} else if (rkey_out) {
			tw__rpc_rkey_from_pb(o->rkey, rkey_out);
		}
	}
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__rpc_close_segment(struct tw_rpc_client *cl, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			 uint64_t replica_version, struct tw_rpc_seg_meta *scanned_out)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_close_segment(&r, epoch, m, replica_version);
	rc = run(cl, &r, &rep);
	if (scanned_out) {
		if (rep.env && rep.env->body_case == TAILWIND__ENVELOPE__BODY_CLOSE_SEGMENT_REPLY)
			tw__rpc_meta_from_pb(rep.env->close_segment_reply->scanned, scanned_out);
		else
			tw__rpc_meta_from_pb(NULL, scanned_out);
	}
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__rpc_set_replica_version(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			       uint64_t segment_id, uint64_t version)
{
	struct tw_rpc_req r;

	tw__rpc_req_set_replica_version(&r, epoch, log_id, segment_id, version);
	return tw__rpc_call_sync(cl, &r.env, NULL);
}

int tw__rpc_fence(struct tw_rpc_client *cl, uint64_t log_id, uint64_t new_epoch,
		 uint64_t *epoch_out, uint64_t *owner_out)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_fence(&r, log_id, new_epoch);
	rc = run(cl, &r, &rep);
	if (epoch_out)
		*epoch_out = rep.env && rep.env->body_case == TAILWIND__ENVELOPE__BODY_FENCE_REPLY ?
				     rep.env->fence_reply->epoch : 0;
	if (owner_out)
		*owner_out = rep.env && rep.env->body_case == TAILWIND__ENVELOPE__BODY_FENCE_REPLY ?
				     rep.env->fence_reply->owner : 0;
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__rpc_free_segments(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			 uint64_t below_segment_id, bool delete_log, uint64_t *freed_out)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_free_segments(&r, epoch, log_id, below_segment_id);
	r.body.free_segments.delete_log = delete_log;
	rc = run(cl, &r, &rep);
	if (freed_out)
		*freed_out = rc == 0 ? rep.env->free_segments_reply->freed : 0;
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__rpc_read_segment(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			uint64_t segment_id, struct tw_rpc_read_grant *out)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	memset(out, 0, sizeof(*out));
	tw__rpc_req_read_segment(&r, epoch, log_id, segment_id);
	rc = run(cl, &r, &rep);
	if (rc == 0) {
		const Tailwind__ReadSegmentReply *g = rep.env->read_segment_reply;

		tw__rpc_rkey_from_pb(g->rkey, &out->rkey);
		tw__rpc_meta_from_pb(g->meta, &out->meta);
		out->replica_version = g->replica_version;
		out->state = g->state;
		out->corrupt = g->corrupt;
	}
	tw__rpc_reply_release(&rep);
	return rc;
}

int tw__rpc_release_segment(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			   uint64_t segment_id)
{
	struct tw_rpc_req r;

	tw__rpc_req_release_segment(&r, epoch, log_id, segment_id);
	return tw__rpc_call_sync(cl, &r.env, NULL);
}

int tw__rpc_recovered_offset(struct tw_rpc_client *cl, uint64_t epoch,
			    const struct tw_rpc_seg_meta *m, uint64_t replica_version)
{
	struct tw_rpc_req r;

	tw__rpc_req_recovered_offset(&r, epoch, m, replica_version);
	return tw__rpc_call_sync(cl, &r.env, NULL);
}

int tw__rpc_recovered_repair(struct tw_rpc_client *cl, uint64_t epoch,
			     const struct tw_rpc_seg_meta *m, uint64_t replica_version,
			     uint64_t from, const void *bytes, size_t len)
{
	struct tw_rpc_req r;

	tw__rpc_req_recovered_offset(&r, epoch, m, replica_version);
	r.body.recovered_offset.repair_from = from;
	r.body.recovered_offset.repair.data = (uint8_t *)bytes; /* encoded, never written */
	r.body.recovered_offset.repair.len = len;
	return tw__rpc_call_sync(cl, &r.env, NULL);
}

int tw__rpc_ping(struct tw_rpc_client *cl, uint64_t nonce)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_ping(&r, nonce, NULL, 0);
	rc = run(cl, &r, &rep);
	if (rc == 0 && rep.env->ping_reply->nonce != nonce)
		rc = -TW_EMALFORMED;
	tw__rpc_reply_release(&rep);
	return rc;
}
