/*
 * tests/fuzz/fuzz_proto.c — libFuzzer target for the control-message decoder and the RPC server,
 * and the check function that the corpus replay test (tests/unit/test_proto_fuzz_replay.c) runs
 * on every checked-in input.
 *
 * fuzz_proto_check() takes the input twice: as a whole message (header included), and with a
 * correct header put in front of its body (bytes 8..), so that mutations reach protobuf decoding.
 * For each it checks:
 *   - tw__rpc_decode either fails with one of its documented codes or returns an envelope;
 *   - a decoded envelope validates (request and reply) to a known status with a message, and
 *     re-encodes; decoding that and re-encoding again gives the same bytes (canonical form);
 *   - the RPC server, given the message (handlers like a backup's), never crashes, sends at most
 *     one reply, and every reply it sends is a frame that decodes and validates as a reply with
 *     the request's id (or 0) — or it closes the channel, and only for unframeable input or after
 *     too many strikes.
 *
 * Built with -DTW_FUZZ_NO_ENTRY the file only provides fuzz_proto_check() and fuzz_proto_done().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"
#include "replay.h"
#include "rpc_fixture.h"
#include "wire_ref.h"

const char *fuzz_proto_check(const uint8_t *data, size_t size);
void fuzz_proto_done(void);

#define MAXMSG TW_RPC_MAX_MSG_DEFAULT

static char msg[512];

#define FAIL(...)                                          \
	do {                                               \
		snprintf(msg, sizeof(msg), __VA_ARGS__);   \
		return msg;                                \
	} while (0)

/* ------------------------------------------------------------------ a server with fake channels */

static struct tw_rpc_server *srv;
static unsigned replies, closes;
static const char *reply_err;
static uint64_t want_id;
static bool want_id_known;
static struct tw_rpc_arena reply_arena;

static int fake_send(struct tw_chan *ch, const void *m, size_t len)
{
	Tailwind__Envelope *env;
	char why[256];
	int rc;

	(void)ch;
	replies++;
	tw__rpc_arena_reset(&reply_arena);
	rc = tw__rpc_decode(m, len, MAXMSG, &reply_arena, &env, NULL, why, sizeof(why));
	if (rc) {
		reply_err = "server sent a reply that does not decode";
		return 0;
	}
	if (tw__rpc_validate_reply(env, why, sizeof(why)) != TAILWIND__STATUS__STATUS_OK) {
		static char e[300];

		snprintf(e, sizeof(e), "server sent an invalid reply: %s", why);
		reply_err = e;
		return 0;
	}
	if (env->request_id != 0 && (!want_id_known || env->request_id != want_id))
		reply_err = "reply carries a request id that was not asked";
	return 0;
}

static void fake_close(struct tw_chan *ch)
{
	(void)ch;
	closes++;
}

static const char *fake_peer(const struct tw_chan *ch)
{
	(void)ch;
	return "fuzz";
}

static int h_open(void *arg, struct tw__rpc_call *c)
{
	if (c->req->open_segment->meta->log_id & 1)
		return tw__rpc_call_fail(c, -TW_EREFUSED, "odd log %llu",
					(unsigned long long)c->req->open_segment->meta->log_id);
	c->rkey.addr = 4096;
	c->rkey.key = 1;
	c->rkey.len = c->req->open_segment->length;
	c->reply.open_segment.rkey = &c->rkey;
	return 0;
}

static int h_close(void *arg, struct tw__rpc_call *c)
{
	tw__rpc_meta_to_pb(&(struct tw_rpc_seg_meta){ .log_id = c->req->close_segment->meta->log_id,
						      .offset = 64 },
			  &c->meta);
	c->reply.close_segment.scanned = &c->meta;
	return c->req->close_segment->meta->offset == 64 ? 0 : -TW_ECORRUPT;
}

static int h_list(void *arg, struct tw__rpc_call *c)
{
	size_t n = (size_t)(c->req->list_segments->from_segment_id % 5);
	Tailwind__SegmentInfo **segs = rpc_list_reply(c, n);

	if (!segs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		segs[i]->log_id = c->req->list_segments->log_id;
		segs[i]->segment_id = i;
		segs[i]->state = TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
	}
	return 0;
}

static int h_fence(void *arg, struct tw__rpc_call *c)
{
	c->reply.fence.epoch = c->req->fence->new_epoch;
	return c->req->fence->new_epoch < 5 ? tw__rpc_call_fail(c, -TW_EFENCED, "epoch") : 0;
}

static int h_read(void *arg, struct tw__rpc_call *c)
{
	c->rkey.len = 4096;
	c->reply.read_segment.rkey = &c->rkey;
	c->meta.offset = 100;
	c->reply.read_segment.meta = &c->meta;
	return 0;
}

static int h_error(void *arg, struct tw__rpc_call *c)
{
	/* status set directly, and a message longer than the limit (the server truncates) */
	static char longmsg[TW_RPC_MESSAGE_MAX * 2];

	memset(longmsg, 'm', sizeof(longmsg) - 1);
	c->reply.set_replica_version.status = TAILWIND__STATUS__STATUS_STALE_VERSION;
	c->reply.set_replica_version.message = longmsg;
	return 0;
}

static void server_init(void)
{
	struct tw_rpc_server_ops ops = {
		.handlers = {
			[TW_RPC_OPEN_SEGMENT] = h_open,
			[TW_RPC_CLOSE_SEGMENT] = h_close,
			[TW_RPC_LIST_SEGMENTS] = h_list,
			[TW_RPC_FENCE] = h_fence,
			[TW_RPC_READ_SEGMENT] = h_read,
			[TW_RPC_SET_REPLICA_VERSION] = h_error,
		},
		.node_id = 1,
	};
	struct tw_rpc__chan_ops cops = { fake_send, fake_close, fake_peer };

	if (srv)
		return;
	tw_diag_set_level(TW_DIAG_ERROR);
	if (tw__rpc_server_create(NULL, &ops, NULL, &srv) != 0)
		abort();
	tw__rpc__server_set_chan_ops(srv, &cops);
	tw__rpc_arena_init(&reply_arena, NULL, 0, 0);
}

void fuzz_proto_done(void)
{
	tw__rpc_server_destroy(srv);
	srv = NULL;
	tw__rpc_arena_fini(&reply_arena);
}

/* ------------------------------------------------------------------ checks */

static const char *check_one(const uint8_t *m, size_t len)
{
	static uint8_t re1[4 * MAXMSG + 64], re2[4 * MAXMSG + 64];
	struct tw_rpc_arena a, b;
	Tailwind__Envelope *env, *env2;
	struct tw_rpc_hdr hdr;
	char why[TW_RPC_MESSAGE_MAX];
	size_t l1 = 0, l2 = 0;
	int rc, st;
	static uintptr_t chan_no;
	struct tw_chan *fake;

	tw__rpc_arena_init(&a, NULL, 0, 64 * MAXMSG);
	tw__rpc_arena_init(&b, NULL, 0, 0);
	why[0] = 0;
	rc = tw__rpc_decode(m, len, MAXMSG, &a, &env, &hdr, why, sizeof(why));
	want_id_known = false;
	if (rc) {
		if (rc != -TW_EMALFORMED && rc != -EMSGSIZE && rc != -TW_EVERSION)
			FAIL("decode returned %d", rc);
		if (!why[0])
			FAIL("decode failed without a message");
	} else {
		st = tw__rpc_validate_request(env, why, sizeof(why));
		if (st != TAILWIND__STATUS__STATUS_OK && st != TAILWIND__STATUS__STATUS_INVALID_ARGUMENT &&
		    st != TAILWIND__STATUS__STATUS_UNSUPPORTED)
			FAIL("validate_request returned %d", st);
		if (st == TAILWIND__STATUS__STATUS_OK && tw__rpc_op_of_case(env->body_case) < 0)
			FAIL("valid request without a known op");
		st = tw__rpc_validate_reply(env, why, sizeof(why));
		if (st != TAILWIND__STATUS__STATUS_OK && st != TAILWIND__STATUS__STATUS_INVALID_ARGUMENT &&
		    st != TAILWIND__STATUS__STATUS_UNSUPPORTED)
			FAIL("validate_reply returned %d", st);
		want_id = env->request_id;
		want_id_known = true;

		/* canonical re-encoding is stable */
		if (tw__rpc_encode(env, re1, sizeof(re1), sizeof(re1), &l1) != 0)
			FAIL("re-encode failed");
		if (tw__rpc_decode(re1, l1, sizeof(re1), &b, &env2, NULL, why, sizeof(why)) != 0)
			FAIL("re-encoded message does not decode: %s", why);
		if (tw__rpc_encode(env2, re2, sizeof(re2), sizeof(re2), &l2) != 0)
			FAIL("second re-encode failed");
		if (l1 != l2 || memcmp(re1, re2, l1) != 0)
			FAIL("re-encoding is not stable (%zu vs %zu bytes)", l1, l2);
		if (env2->request_id != env->request_id || env2->epoch != env->epoch ||
		    env2->body_case != env->body_case)
			FAIL("re-decoded envelope differs");
	}
	tw__rpc_arena_fini(&a);
	tw__rpc_arena_fini(&b);

	/* the server on this message, on a fresh fake channel */
	fake = (struct tw_chan *)(0x1000 + 16 * (++chan_no % 1000000));
	replies = closes = 0;
	reply_err = NULL;
	rc = tw__rpc_server_on_recv(srv, fake, m, len);
	if (reply_err)
		FAIL("%s", reply_err);
	if (replies + closes != 1)
		FAIL("server sent %u replies and closed %u times", replies, closes);
	if ((rc == -TW_EMALFORMED) != (closes == 1))
		FAIL("server return %d does not match closes %u", rc, closes);
	if (closes) {
		struct tw_rpc_hdr h;
		int fr = tw__rpc_frame_check(m, len, MAXMSG, &h, NULL, 0);

		if (fr != -TW_EMALFORMED && fr != -EMSGSIZE)
			FAIL("server closed a fresh channel on a framed message (%d)", fr);
	}
	tw__rpc_server_on_lost(srv, fake);
	return NULL;
}

const char *fuzz_proto_check(const uint8_t *data, size_t size)
{
	static uint8_t framed[MAXMSG];
	const char *err;
	size_t body;

	server_init();
	err = check_one(data, size);
	if (err)
		return err;
	if (size < TW_RPC_HDR_SIZE)
		return NULL;
	body = TW_MIN(size - TW_RPC_HDR_SIZE, (size_t)MAXMSG - TW_RPC_HDR_SIZE);
	return check_one(framed, put_frame(framed, TW_RPC_MAJOR, data[3], data + TW_RPC_HDR_SIZE,
					   body));
}

#ifndef TW_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_verdict("fuzz_proto", fuzz_proto_check(data, size));
}
#endif
