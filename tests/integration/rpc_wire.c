/*
 * tests/integration/rpc_wire.c — hostile and well-behaved peers against a running rpc_server
 * process over a real provider (argv[1]: tcp, sockets, shm). Spawns the server, waits for its
 * "ready <address>" line, then over separate connections sends garbage, truncated frames, huge
 * declared lengths, bad magic and major, reply kinds as requests, unknown body kinds,
 * out-of-range ids and enum values: each is answered with an error reply or the connection is
 * closed. A well-behaved client connected before all that is served correctly afterwards, on
 * the same connection, and the server process is still alive; it exits 0 on SIGTERM.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proc.h"
#include "proto/rpc.h"
#include "child.h"
#include "tap.h"
#include "wire_ref.h"

#define MAXMSG TW_RPC_MAX_MSG_DEFAULT

static struct tw_fab *fab;
static char addr[TW_ADDR_MAX];
static struct proc *server;

/* The well-behaved client. */
static struct tw_chan *good_ch;
static struct tw_rpc_client *good;
static bool good_lost;

/* A raw channel, on its own fab (its own endpoint, as a separate hostile process would have):
 * replies are captured, not interpreted. */
static const char *provider;
static struct tw_fab *raw_fab;
static struct tw_chan *raw_ch;
static unsigned char raw_buf[MAXMSG];
static size_t raw_len;
static int raw_count;
static bool raw_lost;

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	if (ch == raw_ch) {
		raw_len = TW_MIN(len, sizeof(raw_buf));
		memcpy(raw_buf, msg, raw_len);
		raw_count++;
	} else if (ch == good_ch && good) {
		tw__rpc_client_on_recv(good, msg, len);
	}
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	if (ch == raw_ch) {
		raw_lost = true;
	} else if (ch == good_ch) {
		good_lost = true;
		if (good)
			tw__rpc_client_on_lost(good, err);
	}
}

/* A fab of its own (`what` in messages) connected to the server. */
static void open_connected(struct tw_fab **f, struct tw_chan **ch, const char *what)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = on_recv, .on_lost = on_lost };
	int rc;

	tw__fab_config_init(&fc);
	fc.provider = provider;
	rc = tw__fab_open(&fc, &ev, f);
	TAP_REQUIRE(rc == 0, "%s fab: %s", what, tw_strerror(rc));
	rc = tw__fab_connect(*f, addr, ch);
	TAP_REQUIRE(rc == 0, "%s: connect to %s: %s (%s)", what, addr, tw_strerror(rc),
		    tw__fab_errmsg(*f));
}

static void raw_open(void)
{
	open_connected(&raw_fab, &raw_ch, "raw");
	raw_lost = false;
	raw_count = 0;
}

static void raw_close(void)
{
	tw__chan_close(raw_ch);
	raw_ch = NULL;
	tw__fab_close(raw_fab);
	raw_fab = NULL;
}

/* Send and wait for a reply (1), the channel lost (0), or nothing within ms (-1). */
static int raw_exchange(const void *msg, size_t len, unsigned ms)
{
	int before = raw_count;
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;
	int rc;

	if (raw_lost)
		return 0;
	rc = tw__chan_send(raw_ch, msg, len);
	if (rc)
		return raw_lost || rc == -TW_EPEERLOST || rc == -TW_ECLOSED ? 0 : rc;
	while (raw_count == before && !raw_lost && tw_now_ns() < end)
		tw__fab_progress(raw_fab, 20);
	if (raw_count > before)
		return 1;
	return raw_lost ? 0 : -1;
}

/* The captured reply: an ErrorReply (or other reply) with this status and request id? */
static bool reply_is(int status, uint64_t request_id, const char *what)
{
	struct tw_rpc_arena a;
	Tailwind__Envelope *env;
	const char *m = "";
	char why[256];
	bool res = false;

	tw__rpc_arena_init(&a, NULL, 0, 0);
	if (tw__rpc_decode(raw_buf, raw_len, MAXMSG, &a, &env, NULL, why, sizeof(why)) != 0) {
		tap_diag("%s: reply does not decode: %s", what, why);
	} else if (tw__rpc_validate_reply(env, why, sizeof(why)) != TAILWIND__STATUS__STATUS_OK) {
		tap_diag("%s: reply invalid: %s", what, why);
	} else {
		int st = tw__rpc_reply_status(env, &m);

		res = st == status && env->request_id == request_id;
		tap_diag("%s -> %s (id %llu): %s", what, tw__rpc_status_name(st),
			 (unsigned long long)env->request_id, m);
	}
	tw__rpc_arena_fini(&a);
	return res;
}

static size_t enc(struct tw_rpc_req *r, uint64_t id, unsigned char *buf)
{
	size_t len = 0;

	r->env.request_id = id;
	TAP_REQUIRE(tw__rpc_encode(&r->env, buf, MAXMSG, MAXMSG, &len) == 0, "encode");
	return len;
}

#define INV TAILWIND__STATUS__STATUS_INVALID_ARGUMENT
#define UNS TAILWIND__STATUS__STATUS_UNSUPPORTED

/* One channel: every framed-but-bad message gets an error reply; a good request in between is
 * served; after max_strikes (8) bad ones the channel is closed. */
static void test_error_replies(void)
{
	static unsigned char buf[MAXMSG], body[256];
	struct tw_rpc_seg_meta m = { 5, 1, 0, 0 };
	struct tw_rpc_req r;
	size_t len, n;
	int i, rc, extra = 0;

	raw_open();

	memset(body, 0xff, 40);
	len = put_frame(buf, TW_RPC_MAJOR, 0, body, 40);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 0, "garbage protobuf"),
	   "garbage inside a frame: INVALID_ARGUMENT, id 0");

	{
		Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT;
		Tailwind__StatsReply sr = TAILWIND__STATS_REPLY__INIT;

		env.request_id = 5;
		env.body_case = TAILWIND__ENVELOPE__BODY_STATS_REPLY;
		env.stats_reply = &sr;
		TAP_REQUIRE(tw__rpc_encode(&env, buf, MAXMSG, MAXMSG, &len) == 0, "encode");
	}
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 5, "reply kind as a request"),
	   "a reply kind sent as a request: INVALID_ARGUMENT");

	n = put_uint_field(body, 1, 6);
	n += put_bytes_field(body + n, 200, (const unsigned char[]){ 1 << 3, 1 }, 2);
	len = put_frame(buf, TW_RPC_MAJOR, 0, body, n);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(UNS, 6, "unknown body kind 200"),
	   "unknown body kind (a newer minor's request): UNSUPPORTED");

	tw__rpc_req_read_segment(&r, 1, UINT64_MAX, 3);
	len = enc(&r, 7, buf);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 7, "log_id 2^64-1"),
	   "out-of-range id: INVALID_ARGUMENT");

	tw__rpc_req_handshake(&r, 1, (Tailwind__Role)77, NULL);
	len = enc(&r, 8, buf);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 8, "role 77"),
	   "unknown enum value: INVALID_ARGUMENT");

	tw__rpc_req_open_segment(&r, 1, &m, 0, 1ull << 50);
	len = enc(&r, 9, buf);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 9, "open length 2^50"),
	   "out-of-range length: INVALID_ARGUMENT");

	tw__rpc_req_stats(&r);
	len = enc(&r, 10, buf);
	buf[2] = TW_RPC_MAJOR + 1;
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(UNS, 0, "major + 1"),
	   "another major version: UNSUPPORTED naming our version");

	tw__rpc_req_fence(&r, 5, 0);
	len = enc(&r, 11, buf);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 11, "fence to epoch 0"),
	   "epoch 0 in a fence: INVALID_ARGUMENT");

	/* a good request on the same channel is still served (and a newer minor is accepted) */
	tw__rpc_req_ping(&r, 4242, "abc", 3);
	len = enc(&r, 12, buf);
	buf[3] = TW_RPC_MINOR + 1;
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(TAILWIND__STATUS__STATUS_OK, 12, "ping"),
	   "a good request (minor + 1) on that channel is served");

	/* strikes so far: 7 (unknown body kind is not one). Bad request 8 is answered, 9 closes. */
	tw__rpc_req_stats(&r);
	len = enc(&r, 0, buf);
	ok(raw_exchange(buf, len, 5000) == 1 && reply_is(INV, 0, "request id 0"),
	   "request id 0: INVALID_ARGUMENT (8th strike)");
	for (i = 0; i < 5 && !raw_lost; i++) {
		rc = raw_exchange(buf, len, 5000);
		if (rc == 1)
			extra++;
		else if (rc < 0)
			break;
	}
	ok(raw_lost, "the 9th malformed message closes the channel");
	is_int(extra, 0, "no reply after the limit");
	raw_close();
}

/* Messages that cannot be framed: the connection is closed, no reply. */
static void test_closed(const char *what, const void *msg, size_t len)
{
	int rc;

	raw_open();
	rc = raw_exchange(msg, len, 5000);
	ok(rc == 0 && raw_lost, "%s: connection closed without a reply (%d)", what, rc);
	raw_close();
}

static void test_unframeable(void)
{
	static unsigned char buf[MAXMSG];
	struct tw_rpc_req r;
	size_t len;

	memset(buf, 0x5a, 64);
	test_closed("random bytes", buf, 64);
	test_closed("3 bytes", "TW\x01", 3);

	tw__rpc_req_ping(&r, 1, "0123456789abcdef", 16);
	len = enc(&r, 1, buf);
	test_closed("truncated message (declared length > received)", buf, len - 5);

	len = enc(&r, 1, buf);
	memset(buf + len, 0, 7);
	test_closed("trailing bytes (declared length < received)", buf, len + 7);

	put_frame_hdr(buf, TW_RPC_MAJOR, 0, 0xfffffff0u);
	memset(buf + 8, 0, 24);
	test_closed("huge declared length", buf, 32);

	len = enc(&r, 1, buf);
	buf[0] = 'X';
	test_closed("bad magic", buf, len);
}

/* The good client also gets its own fab per connection: on shm (RDM) the fabric shares one
 * address-vector entry between channels to the same peer, and closing one channel and
 * connecting again from the same fab crashed in libfabric (reported to fabric/). */
static void good_connect(void)
{
	int rc;

	open_connected(&fab, &good_ch, "good");
	good_lost = false;
	rc = tw__rpc_client_create(good_ch, NULL, &good);
	TAP_REQUIRE(rc == 0, "client: %s", tw_strerror(rc));
}

static void good_disconnect(void)
{
	tw__rpc_client_close(&good, &good_ch);
	tw__fab_close(fab);
	fab = NULL;
}

static void test_good_client(const char *when)
{
	struct tw_rpc_seg_meta m = { 5, 2, 0x1234, 0 }, scanned;
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	struct tw_rkey rk;
	uint64_t e;
	int rc;

	tw__rpc_req_handshake(&r, 1, TAILWIND__ROLE__ROLE_PRIMARY, "rpc_wire");
	rc = tw__rpc_call_sync(good, &r.env, &rep);
	ok(rc == 0 && rep.env->handshake_reply->node_id == 77 &&
	   strcmp(rep.env->handshake_reply->node_name, "rpc_server") == 0,
	   "%s: handshake (%s)", when, tw_strerror(rc));
	tw__rpc_reply_release(&rep);
	rc = tw__rpc_open_segment(good, 1, &m, 0, 4096, &rk);
	ok(rc == 0 && rk.key == 0x1002 && rk.len == 4096, "%s: open_segment", when);
	m.offset = 4000;
	rc = tw__rpc_close_segment(good, 1, &m, 0, &scanned);
	ok(rc == 0 && scanned.offset == 4000 && scanned.checksum == 0x1234, "%s: close_segment",
	   when);
	tw__rpc_req_list_segments(&r, 5, false, 0);
	rc = tw__rpc_call_sync(good, &r.env, &rep);
	ok(rc == 0 && rep.env->list_segments_reply->n_segments == 3 &&
	   rep.env->list_segments_reply->segments[2]->state ==
		   TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED &&
	   rep.env->list_segments_reply->segments[1]->valid_len == 2000,
	   "%s: list_segments", when);
	tw__rpc_reply_release(&rep);
	rc = tw__rpc_fence(good, 5, 3, &e, NULL);
	ok(rc == 0 && e == 3, "%s: fence", when);
	rc = tw__rpc_fence(good, 5, 2, &e, NULL);
	ok(rc == -TW_EFENCED && e == 3, "%s: fence to an older epoch: -TW_EFENCED", when);
	is_int(tw__rpc_ping(good, 9), 0, "%s: ping", when);
}

static void test_stats_after(void)
{
	struct tw_rpc_req r;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_stats(&r);
	rc = tw__rpc_call_sync(good, &r.env, &rep);
	ok(rc == 0, "stats after the abuse");
	if (rc == 0) {
		const Tailwind__StatsReply *s = rep.env->stats_reply;

		tap_diag("server: %llu msgs in, %llu B in, %llu B out, %llu malformed, %llu closed",
			 (unsigned long long)s->rpc_msgs_rx, (unsigned long long)s->rpc_bytes_rx,
			 (unsigned long long)s->rpc_bytes_tx, (unsigned long long)s->rpc_malformed,
			 (unsigned long long)s->rpc_closed);
		ok(s->rpc_closed == 7, "server closed exactly the 7 misbehaving channels (%llu)",
		   (unsigned long long)s->rpc_closed);
		ok(s->rpc_malformed >= 15, "malformed messages counted (%llu)",
		   (unsigned long long)s->rpc_malformed);
	}
	tw__rpc_reply_release(&rep);
}

int main(int argc, char **argv)
{
	char path[4096];
	int rc;

	provider = argc > 1 ? argv[1] : "tcp";
	child_tool("tests/integration/rpc_server", path, sizeof(path));
	{
		char *args[] = { path, (char *)provider, NULL };

		server = child_ready(args, NULL, 20000, addr, sizeof(addr), &rc);
	}
	if (rc == -EPIPE)
		tap_plan_skip_all("rpc_server could not start on provider %s", provider);
	TAP_REQUIRE(server, "rpc_server ready: %s", strerror(-rc));
	tap_diag("rpc_server (%s) ready at %s", provider, addr);

	good_connect();
	test_good_client("before");
	test_error_replies();
	test_unframeable();
	ok(proc_alive(server), "server process still alive");
	ok(!good_lost, "the good client's connection was never touched");
	test_good_client("after, same connection");
	test_stats_after();
	good_disconnect();
	good_connect();
	is_int(tw__rpc_ping(good, 1), 0, "a new connection is served");
	good_disconnect();

	is_int(child_stop(server, SIGTERM, 10000), 0,
	       "server exits 0 on SIGTERM (no leak, no crash)");
	tap_done_testing();
	return tap_exit();
}
