/*
 * tests/integration/fabric_stalled.c — on sockets, peers that stop reading must not wedge the
 * fab that sends to them (argv[1]: sockets).
 *
 * One listening fab, as twd's: ROUNDS times, a peer (this program re-executed as "peer ADDR
 * PROVIDER STOP") connects, says hello and stops (SIGSTOP); the fab sends it 60 KB messages
 * that nobody acknowledges, fails the channel at its operation timeout (2 s), closes it, and the
 * peer is killed. Then a healthy peer connects and must answer a ping.
 *
 * Regression (#28, bug 2): libfabric 1.17's sockets provider turns every posted transfer into
 * one of 128 progress entries per domain (SOCK_PE_MAX_ENTRIES), never gives back the entries of
 * an endpoint closed under them (sock_ep_close), and posts nothing while none is free
 * (sock_pe_progress_tx_ctx). The fabric closed a channel's endpoint 200 ms after it went down
 * even with sends still in the provider, so each stalled peer leaked its sends' entries: after
 * about four of them no send of the process ever left again ("healthy peer: lost" before the
 * fix, a twd that answers nobody). Now the endpoint stays open until the provider finishes the
 * transfers (the peer acknowledges them, or its connection breaks), and a channel has at most 16
 * transfers in the provider, so a stalled peer cannot hold every entry while it lives.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "fabric/fabric.h"
#include "proc.h"
#include "tap.h"

#define ROUNDS 8
#define MSG (60u * 1024u)

static int recvs, lost;
static struct tw_chan *accepted;

static void on_accept(void *arg, struct tw_chan *ch)
{
	accepted = ch;
}

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	recvs++;
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	lost++;
}

/* The peer: hello, then (stop) SIGSTOP, or answer every message with "pong" for 20 s. */
static int peer(const char *addr, const char *prov, bool stop)
{
	struct tw_fab_events ev = { .on_recv = on_recv, .on_lost = on_lost };
	struct tw_fab_config fc;
	struct tw_fab *f;
	struct tw_chan *ch;
	int answered = 0;

	tw__fab_config_init(&fc);
	fc.provider = prov;
	if (tw__fab_open(&fc, &ev, &f) || tw__fab_connect(f, addr, &ch) ||
	    tw__chan_send(ch, "hello", 5))
		return 3;
	if (stop) {
		for (int i = 0; i < 20; i++) /* the hello goes out */
			tw__fab_progress(f, 10);
		raise(SIGSTOP);
	}
	for (uint64_t end = tw_now_ns() + 20000000000ull; tw_now_ns() < end && !lost;) {
		tw__fab_progress(f, 100);
		for (; answered < recvs; answered++)
			tw__chan_send(ch, "pong", 4);
	}
	return 0;
}

static struct proc *spawn_peer(const char *self, const char *addr, const char *prov, bool stop)
{
	char *argv[] = { (char *)self, (char *)"peer", (char *)addr, (char *)prov,
			 (char *)(stop ? "1" : "0"), NULL };

	return proc_spawn(argv, NULL);
}

int main(int argc, char **argv)
{
	struct tw_fab_events ev = { .on_accept = on_accept, .on_recv = on_recv,
				    .on_lost = on_lost };
	static char big[MSG];
	struct tw_fab_config fc;
	struct tw_fab_stats st;
	char addr[TW_ADDR_MAX];
	const char *prov;
	struct tw_fab *s;
	struct proc *g;
	int before;

	if (argc > 4 && !strcmp(argv[1], "peer"))
		return peer(argv[2], argv[3], atoi(argv[4]) != 0);
	prov = argc > 1 ? argv[1] : "sockets";
	tap_plan(ROUNDS + 2);
	tw__fab_config_init(&fc);
	fc.provider = prov;
	fc.tx_depth = 1024;
	fc.op_timeout_ms = 2000;
	TAP_REQUIRE(tw__fab_open(&fc, &ev, &s) == 0, "fab: %s", tw__fab_errmsg(NULL));
	TAP_REQUIRE(tw__fab_listen(s, addr, sizeof(addr)) == 0, "listen");
	for (int r = 0; r < ROUNDS; r++) {
		int sent = 0;

		accepted = NULL;
		recvs = lost = 0;
		g = spawn_peer(argv[0], addr, prov, true);
		TAP_REQUIRE(g, "spawn a peer");
		for (uint64_t end = tw_now_ns() + 20000000000ull;
		     (!accepted || !recvs) && tw_now_ns() < end;)
			tw__fab_progress(s, 10);
		TAP_REQUIRE(accepted && recvs, "peer %d said hello", r);
		/* Sends to a peer that reads nothing: the channel fails at the op timeout. */
		while (!lost && sent < 300 && tw__chan_send(accepted, big, sizeof(big)) == 0)
			sent++;
		for (uint64_t end = tw_now_ns() + 20000000000ull; !lost && tw_now_ns() < end;)
			tw__fab_progress(s, 50);
		ok(lost == 1, "peer %d stopped; %d sends posted; the channel failed at the timeout",
		   r, sent);
		tw__chan_close(accepted);
		accepted = NULL;
		for (int i = 0; i < 10; i++) /* past the 200 ms an endpoint used to be kept */
			tw__fab_progress(s, 50);
		proc_kill(g, SIGKILL);
		proc_wait(g, 20000);
		proc_free(g);
	}
	accepted = NULL;
	recvs = lost = 0;
	g = spawn_peer(argv[0], addr, prov, false);
	TAP_REQUIRE(g, "spawn a healthy peer");
	for (uint64_t end = tw_now_ns() + 20000000000ull; (!accepted || !recvs) && tw_now_ns() < end;)
		tw__fab_progress(s, 10);
	TAP_REQUIRE(accepted && recvs, "healthy peer said hello");
	before = recvs;
	tw__chan_send(accepted, "ping", 4);
	for (uint64_t end = tw_now_ns() + 10000000000ull;
	     recvs == before && !lost && tw_now_ns() < end;)
		tw__fab_progress(s, 50);
	ok(recvs > before, "after %d stalled peers, a healthy one is still sent to and answers "
	   "(%s)", ROUNDS, recvs > before ? "pong" : lost ? "channel lost" : "no answer");
	tw__fab_get_stats(s, &st);
	ok(st.closes_forced == 0, "no endpoint was closed with transfers in the provider (%llu)",
	   (unsigned long long)st.closes_forced);
	proc_kill(g, SIGKILL);
	proc_wait(g, 20000);
	proc_free(g);
	tw__fab_close(s);
	return tap_exit();
}
