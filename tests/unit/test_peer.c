/*
 * tests/unit/test_peer.c — the peer layer (peer/peer.h) over the in-memory fabric with an
 * in-process backup:
 *
 *   - a connect to nobody fails at the fab's connect (failed = TW_PEER_CONNECT), says so in an
 *     operator's terms and leaves nothing open;
 *   - a connect to a backup handshakes: up, gen 1, the reply's buffer size and minor kept, an
 *     RPC works;
 *   - with no_handshake the channel and RPC client are there and nothing was asked (no minor, no
 *     buffer size), the caller's own first call works;
 *   - a backup that answers nothing: the fab's connect succeeds, the Handshake times out
 *     (failed = TW_PEER_HANDSHAKE), nothing left open;
 *   - a loss is reported once; lost survives tw__peer_close and a failed connect, a connect
 *     that succeeds clears it;
 *   - a takeover's skip table (struct tw_peer_skip): the silent backup's timed-out Handshake
 *     puts it in, a connect with the table then fails at once (no wait, nothing sent), one
 *     without the table still tries; a refused connect puts nothing in; a full table forgets.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fabric/fabric.h"
#include "peer/peer.h"
#include "proto/rpc.h"
#include "core/util.h"
#include "tap.h"
#include "tbackup.h"

#define SEG (64u * 1024u)

static int stats_call(struct tw_peer *p)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	int rc;

	tw__rpc_req_stats(&req);
	rc = tw__rpc_call_sync(p->rpc, &req.env, &rep);
	tw__rpc_reply_release(&rep);
	return rc;
}

int main(void)
{
	struct tbackups s;
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = tw__peer_fab_on_recv,
				    .on_lost = tw__peer_fab_on_lost };
	struct tw_fab *fab;
	struct tw_peer_opts o;
	struct tw_peer p, q;
	int rc;

	tbackups_start(&s, "test_peer", 1, "mem", 4, SEG);
	tw__fab_config_init(&fc);
	fc.provider = "mem";
	fc.connect_timeout_ms = 500;
	TAP_REQUIRE(tw__fab_open(&fc, &ev, &fab) == 0, "client fab open");
	tw__peer_opts_init(&o, TAILWIND__ROLE__ROLE_ADMIN);
	o.node_name = "test_peer";
	o.rpc.timeout_ms = 500;
	o.connect_timeout_ms = fc.connect_timeout_ms;

	/* Nobody there. */
	tw__peer_init(&p, "mem://999999", NULL);
	rc = tw__peer_connect(&p, fab, &o);
	is_int(rc, -ECONNREFUSED, "nobody: refused");
	is_int(p.failed, TW_PEER_CONNECT, "nobody: failed at the fab's connect");
	ok(strstr(p.why, "connection refused") != NULL, "nobody: why: %s", p.why);
	ok(!p.ch && !p.rpc && !p.up, "nobody: nothing left open");
	is_int(p.gen, 0, "nobody: no connection counted");

	/* A backup. */
	tw__peer_init(&p, s.addrs[0], &s);
	rc = tw__peer_connect(&p, fab, &o);
	is_int(rc, 0, "backup: connected (%s)", p.why);
	is_int(p.failed, TW_PEER_OK, "backup: no step failed");
	ok(p.up && tw__peer_ok(&p), "backup: up");
	is_int(p.gen, 1, "backup: first connection");
	ok(p.buffer_size == SEG, "backup: buffer size %llu from the handshake",
	   (unsigned long long)p.buffer_size);
	ok(p.peer_minor >= 0 && p.peer_node_id != 0, "backup: minor %d, node %llx", p.peer_minor,
	   (unsigned long long)p.peer_node_id);
	ok(tw__chan_user(p.ch) == &p && p.user == &s, "backup: the channel's user is the peer");
	is_int(stats_call(&p), 0, "backup: an RPC works");

	/* No Handshake: the caller's own call is the first. */
	{
		struct tw_peer_opts o2 = o;

		o2.no_handshake = true;
		tw__peer_init(&q, s.addrs[0], NULL);
		rc = tw__peer_connect(&q, fab, &o2);
		is_int(rc, 0, "no handshake: connected (%s)", q.why);
		ok(q.up && q.rpc && q.ch, "no handshake: channel and RPC client");
		ok(q.peer_minor == -1 && q.buffer_size == 0, "no handshake: nothing asked");
		is_int(stats_call(&q), 0, "no handshake: the caller's call works (no key)");
		tw__peer_close(&q);
		ok(!q.ch && !q.rpc && !q.up, "no handshake: closed");
	}

	/* A loss: reported once, kept by close, cleared by the next connect. */
	ok(tw__peer_lost(&p, -ECONNRESET), "loss: first report is new");
	ok(!tw__peer_lost(&p, -EPIPE), "loss: second report is not");
	ok(strstr(p.why, "connection lost") != NULL, "loss: why: %s", p.why);
	ok(!tw__peer_ok(&p), "loss: not ok");
	tw__peer_close(&p);
	ok(p.lost && !p.up && !p.ch && !p.rpc, "loss: close keeps lost");
	tw__peer_close(&p);
	ok(p.lost, "loss: a second close is harmless");
	tw__peer_init(&q, "mem://999999", NULL);
	q.lost = true;
	ok(tw__peer_connect(&q, fab, &o) < 0 && q.lost, "loss: a failed connect keeps lost");
	rc = tw__peer_connect(&p, fab, &o);
	is_int(rc, 0, "loss: connected again (%s)", p.why);
	ok(!p.lost && tw__peer_ok(&p), "loss: the connect cleared lost");
	is_int(p.gen, 2, "loss: second connection");
	is_int(stats_call(&p), 0, "loss: an RPC works again");
	tw__peer_close(&p);

	/* A backup that answers nothing (its thread stopped): the Handshake times out. */
	tbackup_pause(&s.b[0]);
	tw__peer_init(&q, s.addrs[0], NULL);
	rc = tw__peer_connect(&q, fab, &o);
	is_int(rc, -ETIMEDOUT, "silent: the Handshake timed out");
	/* (mem connects in process: the listener's thread is not needed for it.) */
	is_int(q.failed, TW_PEER_HANDSHAKE, "silent: at the Handshake (%s)", q.why);
	ok(!q.ch && !q.rpc && !q.up, "silent: nothing left open");
	ok(q.why[0] != '\0', "silent: why: %s", q.why);

	/* The takeover's table: one wait on the silent backup, then none. */
	{
		static struct tw_peer_skip sk;
		struct tw_peer_opts os = o;
		uint64_t t0, t1;

		sk.n = 0;
		os.skip = &sk;
		tw__peer_init(&q, "mem://999999", NULL);
		ok(tw__peer_connect(&q, fab, &os) < 0 && sk.n == 0,
		   "skip: a refused connect puts nothing in");
		tw__peer_init(&q, s.addrs[0], NULL);
		rc = tw__peer_connect(&q, fab, &os);
		ok(rc == -ETIMEDOUT && tw__peer_skip_has(&sk, s.addrs[0]) && sk.n == 1,
		   "skip: the timed-out Handshake put it in (%d, %u)", rc, sk.n);
		t0 = tw_now_ns();
		rc = tw__peer_connect(&q, fab, &os);
		t1 = tw_now_ns();
		is_int(rc, -ETIMEDOUT, "skip: the next connect with the table fails as it did");
		ok(t1 - t0 < 200u * 1000000u, "skip: at once (%llu ms)",
		   (unsigned long long)((t1 - t0) / 1000000u));
		is_int(q.failed, TW_PEER_CONNECT, "skip: before the fab's connect (%s)", q.why);
		ok(!q.ch && !q.rpc && !q.up, "skip: nothing left open");
		t0 = tw_now_ns();
		rc = tw__peer_connect(&q, fab, &o);
		t1 = tw_now_ns();
		ok(rc == -ETIMEDOUT && t1 - t0 >= 400u * 1000000u, "skip: without the table a "
		   "connect still tries (%d after %llu ms)", rc,
		   (unsigned long long)((t1 - t0) / 1000000u));
		ok(!tw__peer_skip_has(NULL, s.addrs[0]), "skip: no table, nothing skipped");
		for (unsigned i = 0; i < TW_PEER_SKIP_MAX; i++) /* fill it: addresses that time out */
			snprintf(sk.addr[i], sizeof(sk.addr[i]), "mem://%u", 500000 + i);
		sk.n = TW_PEER_SKIP_MAX;
		tw__peer_init(&q, s.addrs[0], NULL);
		rc = tw__peer_connect(&q, fab, &os);
		ok(rc == -ETIMEDOUT && !tw__peer_skip_has(&sk, s.addrs[0]) &&
		   sk.n == TW_PEER_SKIP_MAX, "skip: a full table tries and forgets (%d)", rc);
	}
	tbackup_resume(&s.b[0]);

	tw__fab_close(fab);
	tbackups_stop(&s);
	tap_done_testing();
	return tap_exit();
}
