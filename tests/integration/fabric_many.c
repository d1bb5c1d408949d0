/*
 * tests/integration/fabric_many.c — blocking progress with more channels than one fi_trywait
 * batch: `fabric_many <provider>` (MSG providers: tcp, sockets).
 *
 * Spawns fab_peer --listen and connects 100 channels to it from one fab, so the fab's epoll set
 * holds 100 CQ wait fds plus its EQ's. Then, one channel at a time (the oldest, which the wait
 * asks fi_trywait about last, past the first batch of 64; one in the middle; the newest), the
 * only pending completions are made to belong to that channel — a message echoed by the peer,
 * then a write — and one blocking tw__fab_progress(fab, 10000) loop must handle them before its
 * 10 s run out. A wait that asked fi_trywait about only some CQs (the first 62, until the
 * release before this test) may sleep over the others' completions: fi_poll(3) allows the
 * sleep only when every wait object agreed (docs/fabric.md "Blocking").
 */
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proc.h"
#include "child.h"
#include "fab_op.h"
#include "tap.h"

#define NCH 100
#define WAIT_MS 10000

static struct tw_rkey rks[NCH];
static int nrkey;
static int echoed[NCH];
static int stale;

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	intptr_t i = (intptr_t)tw__chan_user(ch) - 1;
	char s[128];

	(void)arg;
	if (i < 0 || i >= NCH) {
		stale++;
		return;
	}
	snprintf(s, sizeof(s), "%.*s", (int)TW_MIN(len, sizeof(s) - 1), (const char *)msg);
	if (!strncmp(s, "RKEY ", 5) &&
	    sscanf(s + 5, "%" SCNu64 " %" SCNu64 " %" SCNu64, &rks[i].addr, &rks[i].key,
		   &rks[i].len) == 3)
		nrkey++;
	else if (!strncmp(s, "ECHO", 4) && atoi(s + 4) == (int)i)
		echoed[i]++;
	else
		stale++;
}

/* Block in tw__fab_progress(fab, WAIT_MS - elapsed) until *flag is set; false when the WAIT_MS
 * ran out first (a wait that slept over the completion returns only at its timeout). */
static bool blocking_wait(struct tw_fab *fab, const int *flag, int *calls)
{
	uint64_t t0 = tw_now_ns();

	*calls = 0;
	while (!*flag) {
		uint64_t el = (tw_now_ns() - t0) / 1000000u;

		if (el >= WAIT_MS)
			return false;
		(*calls)++;
		if (tw__fab_progress(fab, (int)(WAIT_MS - el)) < 0)
			return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	static char a_listen[] = "--listen", a_prov[] = "--provider";
	char path[4096], pv[64], addr[TW_ADDR_MAX];
	char *pargv[] = {path, a_listen, a_prov, pv, NULL};
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct tw_fab_events ev = {.on_recv = on_recv};
	struct tw_chan *ch[NCH];
	struct tw_fab_config cfg;
	struct tw_fab *fab;
	struct tw_mr *src_mr;
	struct proc *p;
	void *src;
	int rc, n = 0;

	tw__fab_config_init(&cfg);
	cfg.provider = prov;
	cfg.op_timeout_ms = 20000;
	rc = tw__fab_open(&cfg, &ev, &fab);
	if (rc == -TW_ENOPROV)
		tap_plan_skip_all("provider %s not available: %s", prov, tw__fab_errmsg(NULL));
	TAP_REQUIRE(rc == 0, "open %s: %s", prov, tw__fab_errmsg(NULL));
	TAP_REQUIRE(!tw__fab_is_rdm(fab), "%s is a MSG provider (one CQ per channel)", prov);
	src = tw__fab_alloc(4096);
	TAP_REQUIRE(src && tw__mr_reg(fab, src, 4096, TW_MR_WRITE_SRC, &src_mr) == 0, "reg");

	snprintf(pv, sizeof(pv), "%s", prov);
	TAP_REQUIRE(proc_find_tool("tests/integration/fab_peer", path, sizeof(path)) == 0,
		    "fab_peer found (TW_BUILD_ROOT=%s)", getenv("TW_BUILD_ROOT"));
	p = child_ready(pargv, NULL, 10000, addr, sizeof(addr), NULL);
	TAP_REQUIRE(p, "peer ready");

	for (n = 0; n < NCH; n++) {
		rc = tw__fab_connect(fab, addr, &ch[n]);
		if (rc < 0) {
			tap_diag("connect %d: %s (%s)", n, tw_strerror(rc), tw__fab_errmsg(fab));
			break;
		}
		tw__chan_set_user(ch[n], (void *)(intptr_t)(n + 1));
	}
	TAP_REQUIRE(n == NCH, "%d channels connected to %s", NCH, addr);
	for (uint64_t end = tw_now_ns() + 20000000000ull; nrkey < NCH && tw_now_ns() < end;)
		tw__fab_progress(fab, 100);
	TAP_REQUIRE(nrkey == NCH, "each channel got the peer's first message (%d)", nrkey);
	while (tw__fab_progress(fab, 0) > 0) /* nothing else pending */
		;

	/* ch[0] is the oldest: the fab asks about it in the last fi_trywait batch. */
	const int which[] = {0, NCH / 2, NCH - 1};
	for (size_t k = 0; k < TW_ARRAY_SIZE(which); k++) {
		int i = which[k], calls = 0;
		char msg[32];
		struct opres w = {.op.cb = op_cb};

		snprintf(msg, sizeof(msg), "ECHO%d", i);
		is_int(tw__chan_send(ch[i], msg, strlen(msg)), 0, "channel %d: message sent", i);
		bool got = blocking_wait(fab, &echoed[i], &calls);
		ok(got, "channel %d of %d: the peer's answer handled by a blocking progress before its %d ms "
		   "ran out (%d call(s))", i, NCH, WAIT_MS, calls);
		is_int(tw__chan_write(ch[i], &w.op, src, 4096, src_mr, &rks[i], 0), 0,
		       "channel %d: write posted", i);
		got = blocking_wait(fab, &w.calls, &calls) && w.status == 0;
		ok(got, "channel %d: the write's completion handled by a blocking progress before its %d ms "
		   "ran out (%d call(s))", i, WAIT_MS, calls);
	}
	is_int(stale, 0, "no message on an unexpected channel");

	for (int i = 0; i < NCH; i++)
		tw__chan_close(ch[i]);
	tw__mr_close(src_mr);
	tw__fab_close(fab);
	tw__fab_free(src, 4096);
	ok(proc_kill(p, SIGTERM) == 0 && proc_wait(p, 10000) == 0, "peer exits cleanly");
	proc_free(p);
	tap_done_testing();
	return tap_exit();
}
