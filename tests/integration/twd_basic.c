/*
 * tests/integration/twd_basic.c — a real twd process over a real provider (argv[1]: tcp,
 * sockets, shm, ...). Start twd, wait for its ready line, open/write/close through a small test
 * client, check that replicated writes cost the backup zero handler invocations, exhaust its
 * pool, send it malformed requests and garbage, SIGTERM it (exit 0, open buffers flushed),
 * restart it on the same directory and list the segments.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "child.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

#define BUF (256 * 1024)
#define LOG 0x7777ull
#define NWRITES 500

static const char *prov;
static char twd_path[1024];
static char dir[256];

static struct proc *start_twd(char *addr, size_t len)
{
	char *argv[] = { twd_path, (char *)"-p", (char *)prov, (char *)"-d", dir,
			 (char *)"--buffers", (char *)"4", (char *)"--buffer-size", (char *)"256K",
			 (char *)"--unflushed-limit", (char *)"3", NULL };
	struct proc *p = child_ready(argv, NULL, 20000, addr, len, NULL);

	TAP_REQUIRE(p, "twd ready");
	return p;
}

static bool ready_line_is_exact(struct proc *p)
{
	char line[64];

	/* No further stdout output is expected (one line only): a short wait must time out. */
	return proc_wait_line(p, NULL, line, sizeof(line), 200) == -ETIMEDOUT;
}

int main(int argc, char **argv)
{
	char addr[256];
	struct proc *p;
	struct twc c, d, bad;
	struct twc_stats s0, s1;
	struct twc_info li[16];
	size_t open_len;
	int rc, n, accepted = 0, refused = 0;

	prov = argc > 1 ? argv[1] : "tcp";
	child_tool("tools/twd", twd_path, sizeof(twd_path));
	tmpdir_make(dir, sizeof(dir), NULL, "tw-twd");
	tap_diag("provider %s, dir %s", prov, dir);

	p = start_twd(addr, sizeof(addr));
	ok(addr[0] != '\0', "twd is ready at %s", addr);
	ok(ready_line_is_exact(p), "exactly one line on stdout");

	rc = twc_connect(&c, prov, addr);
	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
	{
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		const Tailwind__HandshakeReply *h;

		tw__rpc_req_handshake(&req, 4242, TAILWIND__ROLE__ROLE_PRIMARY, "twd_basic");
		rc = tw__rpc_call_sync(c.rpc, &req.env, &rep);
		h = rc == 0 ? rep.env->handshake_reply : NULL;
		ok(h && h->buffer_size == BUF && h->buffers_total == 4 && h->buffers_free == 4 &&
		   h->node_id != 0, "handshake: buffer size, pool and node id");
		tw__rpc_reply_release(&rep);
	}

	/* segment 0: written and closed */
	is_int(twc_open(&c, LOG, 0, 1, 1, BUF), 0, "open segment 0");
	for (int i = 0; i < 20; i++)
		TAP_REQUIRE(twc_write(&c, 2, 100, (uint32_t)i) == 0, "write %d", i);
	is_int(twc_close_seg(&c, UINT64_MAX, 0, NULL), 0, "close segment 0 (scan matches)");

	/* segment 1: N one-sided writes, zero handler invocations */
	TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "seg");
	is_int(twc_open(&c, LOG, 1, 1, 1, BUF), 0, "open segment 1");
	TAP_REQUIRE(twc_stats(&c, &s0) == 0, "stats before");
	for (int i = 0; i < NWRITES; i++) {
		rc = twc_write(&c, 1, 100, (uint32_t)(1000 + i));
		if (rc) {
			ok(0, "write %d: %s", i, tw_strerror(rc));
			break;
		}
	}
	TAP_REQUIRE(twc_stats(&c, &s1) == 0, "stats after");
	is_int((long long)(s1.handler_calls_non_stats - s0.handler_calls_non_stats), 0,
	       "%d replicated writes: 0 handler invocations on the backup", NWRITES);
	ok(s1.cq_entries - s0.cq_entries < 10,
	   "backup CQ entries +%llu over %d writes (only the stats RPC itself)",
	   (unsigned long long)(s1.cq_entries - s0.cq_entries), NWRITES);
	tap_diag("handler invocations per replicated write: %.3f; backup cq_polls +%llu",
		 (double)(s1.handler_calls_non_stats - s0.handler_calls_non_stats) / NWRITES,
		 (unsigned long long)(s1.cq_polls - s0.cq_polls));
	open_len = c.w.pos;

	/* admission: open until refused (never a crash or hang) */
	for (int k = 2; k < 10; k++) {
		struct twc tmp = c;

		rc = twc_open(&tmp, LOG, (uint64_t)k, 1, 1, BUF);
		if (rc == 0) {
			accepted++;
		} else {
			is_int(rc, -TW_EREFUSED, "open of segment %d refused: RESOURCE_EXHAUSTED", k);
			tap_diag("%s", tw__rpc_client_errmsg(c.rpc));
			refused++;
			break;
		}
	}
	ok(refused == 1 && accepted >= 1, "%d more opens accepted, then refused", accepted);

	/* malformed requests and a misbehaving peer on another connection */
	{
		struct tw_rpc_seg_meta m = { LOG, 50, 0, 0 };
		struct tw_rkey rk;

		is_int(tw__rpc_open_segment(c.rpc, 1, &m, 1, BUF * 2, &rk), -EINVAL,
		       "open longer than the buffer: INVALID_ARGUMENT");
		m.segment_id = 0;
		m.offset = 10;
		is_int(tw__rpc_close_segment(c.rpc, 1, &m, 1, NULL), -EEXIST,
		       "close of an already closed segment with other metadata: ALREADY_EXISTS");
		is_int(tw__rpc_close_segment(c.rpc, 0, &m, 1, NULL), -TW_EFENCED,
		       "close with an epoch older than the log's: FENCED");
		m.segment_id = 1;
		m.offset = BUF + 1;
		is_int(tw__rpc_close_segment(c.rpc, 1, &m, 1, NULL), -EINVAL,
		       "close with an offset past the buffer: INVALID_ARGUMENT");
		m.segment_id = 99;
		m.offset = 0;
		is_int(tw__rpc_close_segment(c.rpc, 1, &m, 1, NULL), -TW_ENOTFOUND,
		       "close of a segment never opened: NOT_FOUND");
	}
	rc = twc_connect(&bad, prov, addr);
	TAP_REQUIRE(rc == 0, "second connection");
	ok(twc_send_garbage(&bad, 32, 0x5a), "garbage: the backup closed that connection");
	twc_close(&bad);
	rc = twc_connect(&d, prov, addr);
	ok(rc == 0 && twc_stats(&d, &s1) == 0, "a new connection is served");
	if (rc == 0)
		twc_close(&d);
	ok(twc_stats(&c, &s1) == 0 && s1.buffers_open >= 2, "the first connection still works");

	twc_close(&c);
	child_stop_ok(p, SIGTERM, 30000, "SIGTERM", "twd flushed and exited 0");

	/* restart on the same directory */
	p = start_twd(addr, sizeof(addr));
	rc = twc_connect(&c, prov, addr);
	TAP_REQUIRE(rc == 0, "reconnect: %s", tw_strerror(rc));
	n = twc_list(&c, LOG, false, li, 16);
	ok(n >= 2, "restart: list shows %d segments", n);
	if (n >= 2) {
		ok(li[0].segment_id == 0 &&
		   li[0].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED && !li[0].corrupt &&
		   li[0].entries == 40, "segment 0: flushed, 40 entries");
		ok(li[1].segment_id == 1 &&
		   li[1].state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN &&
		   li[1].valid_len == open_len && li[1].entries == NWRITES,
		   "segment 1: flushed at SIGTERM while open, valid length %llu == %zu",
		   (unsigned long long)li[1].valid_len, open_len);
	}
	is_int(n, 2 + accepted, "the empty open segments are listed too");
	twc_close(&c);
	child_stop_ok(p, SIGPWR, 30000, "SIGPWR (power failure: battery flush)", "exit 0");

	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
