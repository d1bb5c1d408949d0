/*
 * tests/unit/test_rpc.c — the RPC client and server over the in-memory fabric ("mem"): a server
 * fab driven by its own thread with backup-like handlers, a client fab driven by the test thread.
 * Every typed call, handler errors mapped to codes, paging, stats, many calls in flight, -EBUSY,
 * timeouts, late replies dropped, lost channels, destroy with pending calls, malformed replies
 * fed to the client, and a server closing a channel that sends garbage while serving others.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"
#include "rpc_fixture.h"
#include "tap.h"
#include "wire_ref.h"

enum srv_mode { MODE_SERVE, MODE_DROP, MODE_DELAY, MODE_CLOSE };

/* ------------------------------------------------------------------ server side (own thread) */

static struct {
	struct tw_fab *fab;
	struct tw_rpc_server *srv;
	pthread_t th;
	atomic_bool stop;
	atomic_int mode;
	atomic_int closed_by_server;
	char addr[TW_ADDR_MAX];
	/* delayed message (MODE_DELAY) */
	unsigned char *delayed;
	size_t delayed_len;
	struct tw_chan *delayed_ch;
	uint64_t delay_until;
	/* handler state */
	uint64_t fence_epoch;
	uint64_t version;
} S;

#define TOTAL_SEGS 3000u

static int h_handshake(void *arg, struct tw__rpc_call *c)
{
	c->reply.handshake.node_name = (char *)"backup-1";
	c->reply.handshake.buffer_size = 8u << 20;
	c->reply.handshake.buffers_total = 16;
	c->reply.handshake.buffers_free = 15;
	return 0;
}

static int h_open(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__OpenSegment *o = c->req->open_segment;

	if (o->meta->log_id == 666)
		return tw__rpc_call_fail(c, -TW_EREFUSED, "no free buffer (log %llu)",
					(unsigned long long)o->meta->log_id);
	c->rkey.addr = 0x10000;
	c->rkey.key = 0xabc0000 + o->meta->segment_id;
	c->rkey.len = o->length;
	c->reply.open_segment.rkey = &c->rkey;
	/* Echo the chain seed as a 1.2 backup does; log 777 plays a 1.1 backup (no echo). */
	if (o->meta->log_id != 777)
		c->reply.open_segment.chain_seed = o->chain_seed;
	return 0;
}

static int h_close(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__CloseSegment *o = c->req->close_segment;

	c->meta = *o->meta;
	c->meta.base.unknown_fields = NULL;
	c->meta.base.n_unknown_fields = 0;
	c->reply.close_segment.scanned = &c->meta;
	if (o->meta->offset != 100) {
		c->meta.offset = 100;
		c->meta.checksum = 0x1234;
		return tw__rpc_call_fail(c, -TW_ECORRUPT, "scan found 100 bytes, primary says %llu",
					(unsigned long long)o->meta->offset);
	}
	return 0;
}

static int h_list(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__ListSegments *l = c->req->list_segments;
	Tailwind__ListSegmentsReply *r = &c->reply.list_segments;
	size_t max = tw__rpc_list_max_entries(c->srv), n, i;
	uint64_t from = l->from_segment_id;
	Tailwind__SegmentInfo **segs;

	if (l->log_id != 5)
		return tw__rpc_call_fail(c, -TW_ENOTFOUND, "no log %llu", (unsigned long long)l->log_id);
	n = from >= TOTAL_SEGS ? 0 : TW_MIN(max, TOTAL_SEGS - from);
	segs = rpc_list_reply(c, n);
	if (!segs)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		Tailwind__SegmentInfo *s = segs[i];

		/* worst-case sized values, to check the max-entries bound */
		s->log_id = (uint64_t)TW_RPC_ID_MAX;
		s->segment_id = from + i;
		s->state = TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED;
		s->valid_len = TW_RPC_LEN_MAX;
		s->checksum = UINT32_MAX;
		s->replica_version = (uint64_t)TW_RPC_ID_MAX;
		s->epoch = (uint64_t)TW_RPC_ID_MAX;
		s->corrupt = true;
		s->entries = TW_RPC_LEN_MAX;
		s->length = TW_RPC_LEN_MAX;
	}
	r->more = from + n < TOTAL_SEGS;
	r->next_log_id = 5;
	r->next_segment_id = from + n;
	return 0;
}

static int h_set_version(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__SetReplicaVersion *v = c->req->set_replica_version;

	if (v->version < S.version)
		return tw__rpc_call_fail(c, -TW_ESTALE, "version %llu < %llu",
					(unsigned long long)v->version, (unsigned long long)S.version);
	S.version = v->version;
	return 0;
}

static int h_fence(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__Fence *f = c->req->fence;

	if (f->new_epoch < S.fence_epoch) {
		c->reply.fence.epoch = S.fence_epoch;
		/* set the status directly instead of returning an error */
		c->reply.fence.status = TAILWIND__STATUS__STATUS_FENCED;
		c->reply.fence.message = (char *)"older epoch";
		return 0;
	}
	S.fence_epoch = f->new_epoch;
	c->reply.fence.epoch = S.fence_epoch;
	return 0;
}

static int h_free(void *arg, struct tw__rpc_call *c)
{
	c->reply.free_segments.freed = c->req->free_segments->below_segment_id;
	return 0;
}

static int h_read(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__SegmentRef *r = c->req->read_segment;

	c->rkey.addr = 0x20000;
	c->rkey.key = 77;
	c->rkey.len = 4096;
	c->meta.log_id = r->log_id;
	c->meta.segment_id = r->segment_id;
	c->meta.offset = 1000;
	c->meta.checksum = 0x55;
	c->reply.read_segment.rkey = &c->rkey;
	c->reply.read_segment.meta = &c->meta;
	c->reply.read_segment.replica_version = 3;
	c->reply.read_segment.state = TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED;
	return 0;
}

static int h_stats(void *arg, struct tw__rpc_call *c)
{
	c->reply.stats.buffers_total = 16;
	c->reply.stats.buffers_free = 12;
	return 0;
}

static int h_recovered(void *arg, struct tw__rpc_call *c)
{
	return c->req->recovered_offset->offset > 1000 ? -ERANGE : 0;
}

static void s_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	switch (atomic_load(&S.mode)) {
	case MODE_DROP:
		return;
	case MODE_DELAY:
		free(S.delayed);
		S.delayed = malloc(len);
		TAP_REQUIRE(S.delayed, "malloc");
		memcpy(S.delayed, msg, len);
		S.delayed_len = len;
		S.delayed_ch = ch;
		S.delay_until = tw_now_ns() + 300000000u;
		atomic_store(&S.mode, MODE_SERVE);
		return;
	case MODE_CLOSE:
		tw__rpc_server_on_lost(S.srv, ch);
		tw__chan_close(ch);
		atomic_store(&S.mode, MODE_SERVE);
		return;
	default:
		break;
	}
	if (tw__rpc_server_on_recv(S.srv, ch, msg, len) == -TW_EMALFORMED && ch == S.delayed_ch)
		S.delayed_ch = NULL;
}

static void s_on_lost(void *arg, struct tw_chan *ch, int err)
{
	tw__rpc_server_on_lost(S.srv, ch);
	if (ch == S.delayed_ch)
		S.delayed_ch = NULL;
	tw__chan_close(ch);
}

static void s_on_close(void *arg, struct tw_chan *ch, int reason)
{
	atomic_fetch_add(&S.closed_by_server, 1);
	if (ch == S.delayed_ch)
		S.delayed_ch = NULL;
}

static void s_on_accept(void *arg, struct tw_chan *ch)
{
	(void)ch; /* the channel stays with the fab until lost */
}

static void *server_main(void *arg)
{
	while (!atomic_load(&S.stop)) {
		tw__fab_progress(S.fab, 20);
		if (S.delayed && tw_now_ns() >= S.delay_until) {
			if (S.delayed_ch)
				tw__rpc_server_on_recv(S.srv, S.delayed_ch, S.delayed, S.delayed_len);
			free(S.delayed);
			S.delayed = NULL;
		}
	}
	return NULL;
}

static void server_start(void)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_accept = s_on_accept, .on_recv = s_on_recv,
				    .on_lost = s_on_lost };
	struct tw_rpc_server_ops ops = {
		.handlers = {
			[TW_RPC_HANDSHAKE] = h_handshake,
			[TW_RPC_OPEN_SEGMENT] = h_open,
			[TW_RPC_CLOSE_SEGMENT] = h_close,
			[TW_RPC_LIST_SEGMENTS] = h_list,
			[TW_RPC_SET_REPLICA_VERSION] = h_set_version,
			[TW_RPC_FENCE] = h_fence,
			[TW_RPC_FREE_SEGMENTS] = h_free,
			[TW_RPC_READ_SEGMENT] = h_read,
			[TW_RPC_STATS] = h_stats,
			[TW_RPC_RECOVERED_OFFSET] = h_recovered,
			/* RELEASE_SEGMENT: none (UNSUPPORTED); PING: built-in echo */
		},
		.on_close = s_on_close,
		.node_id = 4242,
	};
	int rc;

	tw__fab_config_init(&fc);
	fc.provider = "mem";
	rc = tw__fab_open(&fc, &ev, &S.fab);
	TAP_REQUIRE(rc == 0, "server fab: %s", tw_strerror(rc));
	rc = tw__rpc_server_create(NULL, &ops, NULL, &S.srv);
	TAP_REQUIRE(rc == 0, "server: %s", tw_strerror(rc));
	rc = tw__fab_listen(S.fab, S.addr, sizeof(S.addr));
	TAP_REQUIRE(rc == 0, "listen: %s", tw_strerror(rc));
	TAP_REQUIRE(pthread_create(&S.th, NULL, server_main, NULL) == 0, "thread");
}

static void server_stop(void)
{
	atomic_store(&S.stop, true);
	tw__fab_wakeup(S.fab);
	pthread_join(S.th, NULL);
	tw__fab_close(S.fab);
	tw__rpc_server_destroy(S.srv);
	free(S.delayed);
}

/* ------------------------------------------------------------------ client side (test thread) */

static struct {
	struct tw_fab *fab;
	struct tw_chan *ch;
	struct tw_rpc_client *cl;
	bool lost;
	/* raw capture (a channel without client) */
	struct tw_chan *raw_ch;
	unsigned char raw[4096];
	size_t raw_len;
	int raw_count;
	bool raw_lost;
} C;

static void c_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	if (ch == C.raw_ch) {
		C.raw_len = TW_MIN(len, sizeof(C.raw));
		memcpy(C.raw, msg, C.raw_len);
		C.raw_count++;
		return;
	}
	if (ch == C.ch && C.cl)
		tw__rpc_client_on_recv(C.cl, msg, len);
}

static void c_on_lost(void *arg, struct tw_chan *ch, int err)
{
	if (ch == C.raw_ch) {
		C.raw_lost = true;
		return;
	}
	if (ch == C.ch) {
		C.lost = true;
		if (C.cl)
			tw__rpc_client_on_lost(C.cl, err);
	}
}

static void client_connect(const struct tw_rpc_config *cfg)
{
	int rc;

	C.lost = false;
	rc = tw__fab_connect(C.fab, S.addr, &C.ch);
	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	rc = tw__rpc_client_create(C.ch, cfg, &C.cl);
	TAP_REQUIRE(rc == 0, "client: %s", tw_strerror(rc));
}

static void client_disconnect(void)
{
	tw__rpc_client_close(&C.cl, &C.ch);
}

static void progress_until(bool *flag, int *counter, int want, unsigned ms)
{
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;

	while (tw_now_ns() < end) {
		if (flag && *flag)
			return;
		if (counter && *counter >= want)
			return;
		tw__fab_progress(C.fab, 10);
		if (C.cl)
			tw__rpc_client_expire(C.cl);
	}
}

/* ------------------------------------------------------------------ tests */

static void test_typed_calls(void)
{
	struct tw_rpc_seg_meta m = { .log_id = 5, .segment_id = 3, .checksum = 9, .offset = 100 };
	struct tw_rpc_seg_meta scanned;
	struct tw_rpc_read_grant g;
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	struct tw_rkey rk;
	uint64_t v;
	int rc;

	tw__rpc_req_handshake(&r, 1, TAILWIND__ROLE__ROLE_PRIMARY, "primary-0");
	rc = tw__rpc_call_sync(C.cl, &r.env, &rep);
	is_int(rc, 0, "handshake");
	ok(rc == 0 && rep.env->handshake_reply->major == TW_RPC_MAJOR &&
	   rep.env->handshake_reply->node_id == 4242 &&
	   strcmp(rep.env->handshake_reply->node_name, "backup-1") == 0 &&
	   rep.env->handshake_reply->buffer_size == 8u << 20, "handshake reply: built-in and "
	   "handler fields");
	ok(rep.env && rep.env->request_id == r.env.request_id, "reply carries the request id");
	tw__rpc_reply_release(&rep);
	is_int(tw__rpc_client_peer_minor(C.cl), TW_RPC_MINOR, "peer minor learnt");
	{
		struct tw_rpc_client_stats s0, s1;

		tw__rpc_client_get_stats(C.cl, &s0);
		for (int i = 0; i < 10; i++) {
			tw__rpc_req_handshake(&r, 1, TAILWIND__ROLE__ROLE_PRIMARY, "primary-0");
			TAP_REQUIRE(tw__rpc_call_sync(C.cl, &r.env, &rep) == 0, "handshake %d", i);
			tw__rpc_reply_release(&rep);
		}
		tw__rpc_client_get_stats(C.cl, &s1);
		is_int((long long)(s1.decodes - s0.decodes), 10, "10 blocking calls: 10 reply "
		       "decodes (each reply once, into the caller's arena)");
	}

	rc = tw__rpc_open_segment(C.cl, 1, &m, 0, 8u << 20, &rk);
	ok(rc == 0 && rk.len == 8u << 20 && rk.key == 0xabc0003 && rk.addr == 0x10000,
	   "open_segment grants an rkey");
	m.log_id = 666;
	rc = tw__rpc_open_segment(C.cl, 1, &m, 0, 4096, &rk);
	is_int(rc, -TW_EREFUSED, "RESOURCE_EXHAUSTED -> -TW_EREFUSED");
	ok(strstr(tw__rpc_client_errmsg(C.cl), "no free buffer (log 666)") != NULL,
	   "handler message reaches the client: %s", tw__rpc_client_errmsg(C.cl));
	rc = tw__rpc_open_segment_seeded(C.cl, 1, &m, 0, 4096, 0x5eed0001, &rk);
	is_int(rc, -TW_EREFUSED, "seeded open: RESOURCE_EXHAUSTED -> -TW_EREFUSED");
	m.log_id = 5;
	rc = tw__rpc_open_segment_seeded(C.cl, 1, &m, 0, 4096, 0x5eed0001, &rk);
	ok(rc == 0 && rk.len == 4096, "seeded open: the backup echoes the chain seed");
	m.log_id = 777;
	rc = tw__rpc_open_segment_seeded(C.cl, 1, &m, 0, 4096, 0x5eed0001, &rk);
	is_int(rc, -TW_EMALFORMED, "seeded open, reply without the seed (a 1.1 backup): -TW_EMALFORMED");
	ok(strstr(tw__rpc_client_errmsg(C.cl), "upgrade it to protocol 1.2") != NULL,
	   "the message says what to do: %s", tw__rpc_client_errmsg(C.cl));
	rc = tw__rpc_open_segment(C.cl, 1, &m, 0, 4096, &rk);
	is_int(rc, 0, "an unseeded open needs no echo (1.1 behaviour)");
	m.log_id = 5;

	rc = tw__rpc_close_segment(C.cl, 1, &m, 0, &scanned);
	ok(rc == 0 && scanned.offset == 100 && scanned.log_id == 5, "close_segment ok");
	m.offset = 150;
	rc = tw__rpc_close_segment(C.cl, 1, &m, 0, &scanned);
	is_int(rc, -TW_ECORRUPT, "CORRUPT -> -TW_ECORRUPT");
	ok(scanned.offset == 100 && scanned.checksum == 0x1234, "scan result also on CORRUPT");
	m.offset = 100;

	is_int(tw__rpc_set_replica_version(C.cl, 1, 5, 3, 7), 0, "set_replica_version 7");
	is_int(tw__rpc_set_replica_version(C.cl, 1, 5, 3, 6), -TW_ESTALE,
	       "STALE_VERSION -> -TW_ESTALE");

	rc = tw__rpc_fence(C.cl, 5, 10, &v, NULL);
	ok(rc == 0 && v == 10, "fence to 10");
	rc = tw__rpc_fence(C.cl, 5, 9, &v, NULL);
	ok(rc == -TW_EFENCED && v == 10, "handler-set FENCED status -> -TW_EFENCED, epoch %llu",
	   (unsigned long long)v);
	ok(strstr(tw__rpc_client_errmsg(C.cl), "older epoch") != NULL, "status message kept");

	rc = tw__rpc_free_segments(C.cl, 10, 5, 4, false, &v);
	ok(rc == 0 && v == 4, "free_segments");

	rc = tw__rpc_read_segment(C.cl, 10, 5, 3, &g);
	ok(rc == 0 && g.rkey.key == 77 && g.meta.offset == 1000 && g.replica_version == 3 &&
	   g.state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED, "read_segment grant");

	is_int(tw__rpc_release_segment(C.cl, 10, 5, 3), -ENOTSUP,
	       "no handler -> UNSUPPORTED -> -ENOTSUP");
	is_int(tw__rpc_recovered_offset(C.cl, 10, &m, 0), 0, "recovered_offset");
	m.offset = 5000;
	is_int(tw__rpc_recovered_offset(C.cl, 10, &m, 0), -EINVAL,
	       "handler -ERANGE -> INVALID_ARGUMENT -> -EINVAL");
	is_int(tw__rpc_ping(C.cl, 99), 0, "built-in ping");
}

static void test_list_paging(void)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	uint64_t from = 0, seen = 0, calls = 0;
	bool more = true, inorder = true;
	int rc = 0;

	while (more && calls < 1000) {
		size_t i;

		tw__rpc_req_list_segments(&r, 5, false, from);
		rc = tw__rpc_call_sync(C.cl, &r.env, &rep);
		calls++;
		if (rc) {
			tw__rpc_reply_release(&rep);
			break;
		}
		for (i = 0; i < rep.env->list_segments_reply->n_segments; i++)
			inorder &= rep.env->list_segments_reply->segments[i]->segment_id == seen + i;
		seen += rep.env->list_segments_reply->n_segments;
		more = rep.env->list_segments_reply->more;
		from = rep.env->list_segments_reply->next_segment_id;
		tw__rpc_reply_release(&rep);
	}
	is_int(rc, 0, "list pages served");
	is_int(seen, TOTAL_SEGS, "all %u worst-case entries listed in %llu pages", TOTAL_SEGS,
	       (unsigned long long)calls);
	ok(inorder, "in order, none lost at page boundaries");
	ok(calls > 1, "more than one page under the 64 KiB limit");
	tw__rpc_req_list_segments(&r, 6, false, 0);
	is_int(tw__rpc_call_sync(C.cl, &r.env, NULL), -TW_ENOTFOUND, "NOT_FOUND -> -TW_ENOTFOUND");
}

struct acall {
	int done;
	int status;
	uint64_t nonce;
	bool nonce_ok;
	bool aligned; /* the decoded reply and its body are 8-aligned */
};

static void async_done(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct acall *a = arg;

	a->done++;
	a->status = status;
	a->nonce_ok = reply && reply->body_case == TAILWIND__ENVELOPE__BODY_PING_REPLY &&
		      reply->ping_reply->nonce == a->nonce;
	a->aligned = reply && (uintptr_t)reply % 8 == 0 && (uintptr_t)reply->ping_reply % 8 == 0;
}

static int count_done;
static void count_cb(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct acall *a = arg;

	a->done++;
	a->status = status;
	count_done++;
}

static void test_async_many(void)
{
	static struct acall calls[64];
	struct tw_rpc_req r;
	unsigned i, n_ok = 0, twice = 0, nonce_ok = 0;
	int rc;

	count_done = 0;
	for (i = 0; i < 64; i++) {
		calls[i] = (struct acall){ .nonce = 1000 + i };
		tw__rpc_req_ping(&r, calls[i].nonce, &i, sizeof(i));
		rc = tw__rpc_call(C.cl, &r.env, async_done, &calls[i]);
		if (rc)
			break;
	}
	is_int(i, 64, "64 calls in flight");
	is_int(tw__rpc_client_inflight(C.cl), 64, "inflight = 64");
	tw__rpc_req_ping(&r, 1, NULL, 0);
	is_int(tw__rpc_call(C.cl, &r.env, async_done, &calls[0]), -EBUSY, "65th: -EBUSY");
	for (;;) {
		unsigned d = 0;

		for (i = 0; i < 64; i++)
			d += calls[i].done != 0;
		if (d == 64)
			break;
		tw__fab_progress(C.fab, 100);
		tw__rpc_client_expire(C.cl);
	}
	for (i = 0; i < 64; i++) {
		n_ok += calls[i].status == 0;
		twice += calls[i].done > 1;
		nonce_ok += calls[i].nonce_ok;
	}
	is_int(n_ok, 64, "all 64 replies OK");
	is_int(twice, 0, "each callback ran once");
	is_int(nonce_ok, 64, "each reply matched to its own request");
	is_int(tw__rpc_client_inflight(C.cl), 0, "nothing in flight");
}

/* A client of one call in flight: its memory is one block (object, slot, free stack, arena,
 * transmit buffer, a 4-byte free stack before the arena) and the arena aligns its start, so the
 * reply decoded into it is aligned. libprotobuf-c, which stores into it, is not built with
 * UBSan: the test checks the addresses itself. */
static void test_one_inflight(void)
{
	struct tw_rpc_config cfg;
	struct acall a = {.nonce = 77};
	struct tw_rpc_req r;

	client_disconnect();
	tw__rpc_config_init(&cfg);
	cfg.max_inflight = 1;
	client_connect(&cfg);
	tw__rpc_req_ping(&r, a.nonce, "abc", 3);
	is_int(tw__rpc_call(C.cl, &r.env, async_done, &a), 0, "one inflight: call sent");
	is_int(tw__rpc_call(C.cl, &r.env, async_done, &a), -EBUSY, "one inflight: second -EBUSY");
	for (int i = 0; i < 500 && !a.done; i++)
		tw__fab_progress(C.fab, 10);
	ok(a.done == 1 && a.status == 0 && a.nonce_ok, "one inflight: the reply is decoded");
	ok(a.aligned, "one inflight: the decoded reply is 8-aligned");
	client_disconnect();
	client_connect(NULL);
}

static void test_timeout_and_late(void)
{
	struct tw_rpc_config cfg;
	struct tw_rpc_client_stats st;
	struct tw_rpc_req r;
	struct acall a = { 0 };
	uint64_t t0;
	int rc;

	client_disconnect();
	tw__rpc_config_init(&cfg);
	cfg.timeout_ms = 100;
	client_connect(&cfg);

	atomic_store(&S.mode, MODE_DROP);
	t0 = tw_now_ns();
	rc = tw__rpc_ping(C.cl, 1);
	is_int(rc, -ETIMEDOUT, "dropped request times out");
	ok(tw_now_ns() - t0 >= 100000000u, "not before the timeout (%llu ms)",
	   (unsigned long long)((tw_now_ns() - t0) / 1000000u));
	atomic_store(&S.mode, MODE_SERVE);

	/* callback form, reply delayed 300 ms, timeout 100 ms: times out, reply dropped later */
	atomic_store(&S.mode, MODE_DELAY);
	a.nonce = 5;
	tw__rpc_req_ping(&r, 5, NULL, 0);
	rc = tw__rpc_call(C.cl, &r.env, count_cb, &a);
	is_int(rc, 0, "delayed call posted");
	ok(tw__rpc_client_next_timeout_ms(C.cl) >= 0 && tw__rpc_client_next_timeout_ms(C.cl) <= 100,
	   "next timeout within 100 ms");
	progress_until(NULL, &a.done, 1, 2000);
	ok(a.done == 1 && a.status == -ETIMEDOUT, "callback: -ETIMEDOUT");
	/* the reply comes ~300 ms after the request: wait for it (bounded) */
	t0 = tw_now_ns();
	do {
		tw__fab_progress(C.fab, 20);
		tw__rpc_client_get_stats(C.cl, &st);
	} while (st.late_replies == 0 && tw_now_ns() - t0 < 5000000000u);
	is_int(st.late_replies, 1, "the late reply arrived and was dropped");
	is_int(a.done, 1, "callback did not run again");
	is_int(tw__rpc_ping(C.cl, 2), 0, "next call served normally");
	ok(st.timeouts == 2, "two timeouts counted");
}

static void test_lost(void)
{
	struct acall a = { 0 }, b = { 0 };
	struct tw_rpc_req r;
	int rc;

	count_done = 0;
	atomic_store(&S.mode, MODE_CLOSE);
	tw__rpc_req_ping(&r, 1, NULL, 0);
	rc = tw__rpc_call(C.cl, &r.env, count_cb, &a);
	is_int(rc, 0, "call posted");
	tw__rpc_req_ping(&r, 2, NULL, 0);
	/* the server thread may already have closed it: then the call fails at once */
	rc = tw__rpc_call(C.cl, &r.env, count_cb, &b);
	if (rc == -TW_EPEERLOST) {
		b.done = 1;
		b.status = rc;
	}
	progress_until(&C.lost, NULL, 0, 3000);
	progress_until(NULL, &count_done, rc ? 1 : 2, 1000);
	ok(C.lost, "channel lost after the server closed it");
	ok(a.done == 1 && a.status == -TW_EPEERLOST && b.done == 1 && b.status == -TW_EPEERLOST,
	   "pending calls complete with -TW_EPEERLOST (%d, %d)", a.status, b.status);
	tw__rpc_req_ping(&r, 3, NULL, 0);
	is_int(tw__rpc_call(C.cl, &r.env, count_cb, &a), -TW_EPEERLOST, "new calls fail at once");
	client_disconnect();
	client_connect(NULL);
	is_int(tw__rpc_ping(C.cl, 4), 0, "a new connection is served");
}

/* A callback that calls again, as the owner's SetAcked publisher does on every answer. */
struct again {
	struct acall first[2], second[2];
	int second_rc[2];
};
static struct again again_st;

static void again_cb(void *arg, int status, const Tailwind__Envelope *reply)
{
	struct acall *a = arg;
	int i = a == &again_st.first[0] ? 0 : 1;
	struct tw_rpc_req r;

	count_cb(arg, status, reply);
	tw__rpc_req_ping(&r, 3, NULL, 0);
	again_st.second_rc[i] = tw__rpc_call(C.cl, &r.env, count_cb, &again_st.second[i]);
}

static void test_destroy_pending(void)
{
	struct acall a = { 0 };
	struct tw_rpc_req r;

	atomic_store(&S.mode, MODE_DROP);
	tw__rpc_req_ping(&r, 1, NULL, 0);
	is_int(tw__rpc_call(C.cl, &r.env, count_cb, &a), 0, "call posted");
	/* Two more whose callbacks call again while the client is being destroyed: refused at
	 * once (before the fix, a new call took a slot fail_all had passed: never answered). */
	memset(&again_st, 0, sizeof(again_st));
	for (int i = 0; i < 2; i++) {
		tw__rpc_req_ping(&r, 2, NULL, 0);
		is_int(tw__rpc_call(C.cl, &r.env, again_cb, &again_st.first[i]), 0,
		       "call %d with a callback that calls again posted", i);
	}
	tw__rpc_client_destroy(C.cl);
	C.cl = NULL;
	ok(a.done == 1 && a.status == -TW_ECLOSED, "destroy completes it with -TW_ECLOSED");
	for (int i = 0; i < 2; i++)
		ok(again_st.first[i].done == 1 && again_st.first[i].status == -TW_ECLOSED &&
		   again_st.second_rc[i] == -TW_EPEERLOST && again_st.second[i].done == 0,
		   "call %d completed once; the call its callback made during the destroy is "
		   "refused (%d), never left unanswered", i, again_st.second_rc[i]);
	atomic_store(&S.mode, MODE_SERVE);
	tw__chan_close(C.ch);
	C.ch = NULL;
	client_connect(NULL);
}

/* Replies fed to the client by hand (the server drops the requests). */
static void test_client_bad_replies(void)
{
	unsigned char buf[512];
	Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT;
	Tailwind__FenceReply fr = TAILWIND__FENCE_REPLY__INIT;
	Tailwind__PingReply pr = TAILWIND__PING_REPLY__INIT;
	Tailwind__ErrorReply er = TAILWIND__ERROR_REPLY__INIT;
	struct acall a = { 0 }, b = { 0 };
	struct tw_rpc_req r;
	struct tw_rpc_client_stats st;
	size_t len;

	atomic_store(&S.mode, MODE_DROP);
	tw__rpc_req_ping(&r, 1, NULL, 0);
	TAP_REQUIRE(tw__rpc_call(C.cl, &r.env, count_cb, &a) == 0, "call");

	/* unknown id: dropped */
	env.request_id = r.env.request_id + 1000;
	env.body_case = TAILWIND__ENVELOPE__BODY_PING_REPLY;
	env.ping_reply = &pr;
	tw__rpc_encode(&env, buf, sizeof(buf), 65536, &len);
	is_int(tw__rpc_client_on_recv(C.cl, buf, len), 0, "reply with an unknown id: ignored");
	is_int(a.done, 0, "no callback");

	/* wrong kind for the request */
	env.request_id = r.env.request_id;
	env.body_case = TAILWIND__ENVELOPE__BODY_FENCE_REPLY;
	env.fence_reply = &fr;
	tw__rpc_encode(&env, buf, sizeof(buf), 65536, &len);
	is_int(tw__rpc_client_on_recv(C.cl, buf, len), 0, "reply of the wrong kind");
	ok(a.done == 1 && a.status == -TW_EMALFORMED, "call fails with -TW_EMALFORMED");

	/* ErrorReply carrying OK is not a success */
	tw__rpc_req_ping(&r, 1, NULL, 0);
	TAP_REQUIRE(tw__rpc_call(C.cl, &r.env, count_cb, &b) == 0, "call");
	env.request_id = r.env.request_id;
	env.body_case = TAILWIND__ENVELOPE__BODY_ERROR_REPLY;
	env.error_reply = &er;
	tw__rpc_encode(&env, buf, sizeof(buf), 65536, &len);
	tw__rpc_client_on_recv(C.cl, buf, len);
	ok(b.done == 1 && b.status == -TW_EMALFORMED, "error reply with status OK -> -TW_EMALFORMED");

	/* an unattributed error reply (id 0) is logged, nothing completes */
	env.request_id = 0;
	er.status = TAILWIND__STATUS__STATUS_INVALID_ARGUMENT;
	er.message = (char *)"could not decode";
	tw__rpc_encode(&env, buf, sizeof(buf), 65536, &len);
	is_int(tw__rpc_client_on_recv(C.cl, buf, len), 0, "error reply with id 0 accepted");
	ok(strstr(tw__rpc_client_errmsg(C.cl), "could not decode") != NULL, "and its message kept");

	/* broken stream: pending calls fail, new ones too */
	a = (struct acall){ 0 };
	tw__rpc_req_ping(&r, 1, NULL, 0);
	TAP_REQUIRE(tw__rpc_call(C.cl, &r.env, count_cb, &a) == 0, "call");
	memset(buf, 0x41, 32);
	is_int(tw__rpc_client_on_recv(C.cl, buf, 32), -TW_EMALFORMED, "bad magic breaks the stream");
	ok(a.done == 1 && a.status == -TW_EMALFORMED, "pending call failed with -TW_EMALFORMED");
	is_int(tw__rpc_call(C.cl, &r.env, count_cb, &a), -TW_EMALFORMED, "new calls refused");
	tw__rpc_client_get_stats(C.cl, &st);
	ok(st.malformed >= 3, "malformed replies counted (%llu)", (unsigned long long)st.malformed);
	atomic_store(&S.mode, MODE_SERVE);
	client_disconnect();
	client_connect(NULL);
}

static int raw_exchange(const void *msg, size_t len)
{
	int before = C.raw_count;
	int rc = tw__chan_send(C.raw_ch, msg, len);

	if (rc)
		return rc;
	progress_until(&C.raw_lost, &C.raw_count, before + 1, 3000);
	return C.raw_count > before ? 1 : (C.raw_lost ? 0 : -1);
}

/* Garbage on one channel: error replies, then closed after max_strikes; others unaffected. */
static void test_server_garbage(void)
{
	unsigned char buf[256];
	Tailwind__Envelope *out;
	struct tw_rpc_arena a;
	int i, rc, replies = 0;
	const char *m;

	rc = tw__fab_connect(C.fab, S.addr, &C.raw_ch);
	TAP_REQUIRE(rc == 0, "raw connect");
	C.raw_lost = false;
	C.raw_count = 0;
	tw__rpc_arena_init(&a, NULL, 0, 0);

	put_frame_hdr(buf, TW_RPC_MAJOR, 0, 16);
	memset(buf + 8, 0xff, 16);
	rc = raw_exchange(buf, 24);
	is_int(rc, 1, "undecodable envelope answered");
	ok(tw__rpc_decode(C.raw, C.raw_len, 65536, &a, &out, NULL, NULL, 0) == 0 &&
	   out->body_case == TAILWIND__ENVELOPE__BODY_ERROR_REPLY && out->request_id == 0 &&
	   tw__rpc_reply_status(out, &m) == TAILWIND__STATUS__STATUS_INVALID_ARGUMENT,
	   "ErrorReply INVALID_ARGUMENT, request id 0");
	tw__rpc_arena_reset(&a);
	for (i = 0; i < 20 && !C.raw_lost; i++)
		replies += raw_exchange(buf, 24) == 1;
	ok(C.raw_lost, "channel closed after repeated garbage");
	is_int(replies, 7, "max_strikes (8) error replies in all, then closed");
	tw__chan_close(C.raw_ch);
	C.raw_ch = NULL;

	/* unframeable: closed at once */
	rc = tw__fab_connect(C.fab, S.addr, &C.raw_ch);
	TAP_REQUIRE(rc == 0, "raw connect");
	C.raw_lost = false;
	memset(buf, 0x00, 16);
	rc = raw_exchange(buf, 16);
	is_int(rc, 0, "bad magic: closed without reply");
	tw__chan_close(C.raw_ch);
	C.raw_ch = NULL;
	tw__rpc_arena_fini(&a);

	is_int(tw__rpc_ping(C.cl, 77), 0, "the well-behaved client is still served");
	ok(atomic_load(&S.closed_by_server) == 2, "on_close hook ran twice");
}

static void test_stats(void)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	const Tailwind__StatsReply *s;
	uint64_t open_calls = 0, open_errors = 0, stats_calls = 0;
	size_t i;
	int rc;

	tw__rpc_req_stats(&r);
	rc = tw__rpc_call_sync(C.cl, &r.env, &rep);
	is_int(rc, 0, "stats");
	if (rc) {
		tw__rpc_reply_release(&rep);
		return;
	}
	s = rep.env->stats_reply;
	for (i = 0; i < s->n_handlers; i++) {
		if (s->handlers[i]->kind == TAILWIND__ENVELOPE__BODY_OPEN_SEGMENT) {
			open_calls = s->handlers[i]->calls;
			open_errors = s->handlers[i]->errors;
		}
		if (s->handlers[i]->kind == TAILWIND__ENVELOPE__BODY_STATS)
			stats_calls = s->handlers[i]->calls;
	}
	ok(open_calls == 6 && open_errors == 2, "open_segment: 6 calls, 2 errors (RESOURCE_EXHAUSTED; "
	   "a reply without the seed is an OK reply)");
	is_int(stats_calls, 1, "this stats call counted");
	ok(s->rpc_msgs_rx >= 90 && s->rpc_bytes_rx > 1000 && s->rpc_bytes_tx > s->rpc_bytes_rx,
	   "control message counters (%llu msgs, %llu B in, %llu B out)",
	   (unsigned long long)s->rpc_msgs_rx, (unsigned long long)s->rpc_bytes_rx,
	   (unsigned long long)s->rpc_bytes_tx);
	ok(s->rpc_malformed >= 9 && s->rpc_closed == 2, "malformed %llu, closed %llu",
	   (unsigned long long)s->rpc_malformed, (unsigned long long)s->rpc_closed);
	ok(s->buffers_total == 16 && s->buffers_free == 12, "handler's own counters");
	tw__rpc_reply_release(&rep);
}

int main(void)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = c_on_recv, .on_lost = c_on_lost };
	int rc;

	server_start();
	tw__fab_config_init(&fc);
	fc.provider = "mem";
	rc = tw__fab_open(&fc, &ev, &C.fab);
	TAP_REQUIRE(rc == 0, "client fab: %s", tw_strerror(rc));
	client_connect(NULL);

	test_typed_calls();
	test_list_paging();
	test_async_many();
	test_one_inflight();
	test_timeout_and_late();
	test_lost();
	test_destroy_pending();
	test_client_bad_replies();
	test_server_garbage();
	test_stats();

	client_disconnect();
	tw__fab_close(C.fab);
	server_stop();
	tap_done_testing();
	return tap_exit();
}
