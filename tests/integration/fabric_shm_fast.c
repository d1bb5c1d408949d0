/*
 * tests/integration/fabric_shm_fast.c — the guarantee behind shm writes without
 * FI_DELIVERY_COMPLETE: `fabric_shm_fast cma|nocma`.
 *
 * Spawns fab_peer --listen --provider shm and connects to it. `cma`: the channel must be in fast
 * mode (tw__chan_fast_writes); `nocma` runs both processes with FI_SHM_DISABLE_CMA=1 and the
 * channel must keep FI_DELIVERY_COMPLETE. Then writes of 1 B .. 8 MiB, one at a time and a burst
 * of 100 in flight, and inside every write's completion callback reads the peer's buffer with
 * process_vm_readv: the bytes must already be there. In fast mode the peer is SIGSTOPped for the
 * whole write phase, so it cannot have run any fabric code (with delivery-complete the peer
 * must run to complete a write, so there it keeps running; the check at the completion is the
 * same). Before each write the test makes sure the target range does not already hold the
 * bytes, so a write that is not placed at its completion is caught.
 *
 * Forcing fast mode where shm does not take its CMA path (`nocma` with tw__rdm_shm_fast and the
 * write's `a.fast` made true in the source, fabric/ofi_rdm.c and ofi_rma.c) makes this test
 * fail (completions before placement): that is how the check was shown to catch a violation
 * (docs/fabric.md). The library has no switch for it.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "fab_events.h"
#include "fab_pattern.h"
#include "fabric/fabric.h"
#include "core/util.h"
#include "proc.h"
#include "child.h"
#include "tap.h"

#define BUF_LEN (8u * 1024 * 1024 + 65536)
#define BURST 100

static struct fab_rec R;
static pid_t peer_pid;
static bool peer_stopped;
static unsigned char *src, *check;
static struct tw_mr *src_mr;
static struct tw_rkey rk;

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	tap_diag("channel lost: %s", tw_strerror(err));
}

/* Read the peer's buffer [off, off+len) into check[off..]; returns bytes read or -errno. */
static ssize_t peek(uint64_t off, size_t len)
{
	struct iovec l = {.iov_base = check + off, .iov_len = len};
	struct iovec r = {.iov_base = (void *)(uintptr_t)(rk.addr + off), .iov_len = len};
	ssize_t n = process_vm_readv(peer_pid, &l, 1, &r, 1, 0);

	return n < 0 ? -errno : n;
}

struct wop {
	struct tw_op op;
	uint64_t off;
	size_t len;
	int done, status;
	bool placed; /* the peer's memory held the bytes when the completion ran */
};

static void wop_cb(struct tw_op *op, int status)
{
	struct wop *w = (struct wop *)op;

	w->done++;
	w->status = status;
	/* No fabric call between the provider's completion and this read. */
	w->placed = status == 0 && peek(w->off, w->len) == (ssize_t)w->len &&
		    !memcmp(check + w->off, src + w->off, w->len);
}

static void stop_peer(void)
{
	int st;

	TAP_REQUIRE(kill(peer_pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	TAP_REQUIRE(waitpid(peer_pid, &st, WUNTRACED) == peer_pid && WIFSTOPPED(st),
		    "peer did not stop");
	peer_stopped = true;
}

/* State letter of the peer in /proc/PID/stat ('T': stopped), or '?'. */
static char peer_state(void)
{
	char path[64], buf[512], *rp;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)peer_pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' ? rp[2] : '?';
}

static void cont_peer(void)
{
	if (peer_stopped)
		kill(peer_pid, SIGCONT);
	peer_stopped = false;
}

/* Fill src[off..off+len) with a pattern the peer's range does not already hold. */
static void prepare(uint64_t off, size_t len, uint64_t *seed)
{
	for (;;) {
		fab_pattern(src + off, len, ++*seed);
		TAP_REQUIRE(peek(off, len) == (ssize_t)len, "process_vm_readv of the peer");
		if (memcmp(check + off, src + off, len))
			return;
	}
}

static int post(struct tw_chan *ch, struct wop *w, uint64_t off, size_t len)
{
	memset(w, 0, sizeof(*w));
	w->op.cb = wop_cb;
	w->off = off;
	w->len = len;
	return tw__chan_write(ch, &w->op, src + off, len, src_mr, &rk, off);
}

int main(int argc, char **argv)
{
	static char a_listen[] = "--listen", a_prov[] = "--provider", a_shm[] = "shm";
	struct tw_fab_events ev = fab_rec_events(&R);
	static const size_t sizes[] = {1, 7, 64, 4095, 4096, 4097, 65536, 1048579, 8u << 20};
	static struct wop burst[BURST];
	struct tw_fab_config cfg;
	struct tw_fab_stats st;
	char path[4096], addr[TW_ADDR_MAX];
	char *pargv[] = {path, a_listen, a_prov, a_shm, NULL};
	struct tw_chan *ch = NULL;
	struct proc *p;
	uint64_t seed = 1;
	unsigned nwrites = 0;
	bool cma;
	int rc;

	if (argc != 2 || (strcmp(argv[1], "cma") && strcmp(argv[1], "nocma"))) {
		fprintf(stderr, "usage: fabric_shm_fast cma|nocma\n");
		return 2;
	}
	cma = !strcmp(argv[1], "cma");
	/* Before the first fi_getinfo (the provider reads it then) and inherited by the peer. */
	if (cma)
		unsetenv("FI_SHM_DISABLE_CMA");
	else
		setenv("FI_SHM_DISABLE_CMA", "1", 1);
	setenv("TW_FAB_SHM_FAST", "on", 1); /* the default, said */

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.op_timeout_ms = 15000;
	ev.on_lost = on_lost; /* a diagnostic saying why */
	rc = tw__fab_open(&cfg, &ev, &R.fab);
	if (rc == -TW_ENOPROV)
		tap_plan_skip_all("shm not available: %s", tw__fab_errmsg(NULL));
	TAP_REQUIRE(rc == 0, "open shm: %s", tw__fab_errmsg(NULL));
	src = tw__fab_alloc(BUF_LEN);
	check = malloc(BUF_LEN);
	TAP_REQUIRE(src && check, "alloc");
	TAP_REQUIRE(tw__mr_reg(R.fab, src, BUF_LEN, TW_MR_WRITE_SRC, &src_mr) == 0, "reg");

	TAP_REQUIRE(proc_find_tool("tests/integration/fab_peer", path, sizeof(path)) == 0,
		    "fab_peer not found");
	p = child_ready(pargv, NULL, 10000, addr, sizeof(addr), NULL);
	TAP_REQUIRE(p, "peer ready");
	peer_pid = proc_pid(p);
	atexit(cont_peer); /* runs before proc.c's cleanup: a stopped peer could not exit */

	/* CMA between these two processes at all (ptrace rules); without it there is nothing to
	 * test in `cma` mode. */
	{
		unsigned char b;
		struct iovec l = {.iov_base = &b, .iov_len = 1};
		struct iovec r = {.iov_base = &b, .iov_len = 1}; /* any mapped address of the peer */
		if (process_vm_readv(peer_pid, &l, 1, &r, 1, 0) < 0 && errno == EPERM) {
			proc_free(p);
			tap_plan_skip_all("process_vm_readv on the peer: EPERM (CMA not permitted)");
		}
	}

	rc = tw__fab_connect(R.fab, addr, &ch);
	TAP_REQUIRE(rc == 0, "connect %s: %s", addr, tw__fab_errmsg(R.fab));
	TAP_REQUIRE(fab_peer_rkey(&R, 0, &rk, 10000) && rk.len >= BUF_LEN && rk.addr != 0,
		    "RKEY from the peer (got '%s')", R.last);

	bool fast = tw__chan_fast_writes(ch);
	if (cma)
		ok(fast, "CMA available: the channel writes without delivery-complete (fast mode)");
	else
		ok(!fast, "FI_SHM_DISABLE_CMA=1: the channel keeps delivery-complete");

	if (fast) {
		stop_peer();
		tap_diag("peer %d stopped for the write phase", (int)peer_pid);
	}
	for (size_t i = 0; i < TW_ARRAY_SIZE(sizes); i++) {
		size_t len = sizes[i];
		uint64_t off = (uint64_t)(i * 4099) % (BUF_LEN - len + 1);
		struct wop w;

		prepare(off, len, &seed);
		rc = post(ch, &w, off, len);
		if (rc == 0)
			fab_progress_until(R.fab, &w.done, 1, 20000);
		ok(rc == 0 && w.done == 1 && w.status == 0 && w.placed,
		   "write of %zu B at %" PRIu64 ": placed at its completion (posted %d, done %d, "
		   "status %d, placed %d)", len, off, rc, w.done, w.status, w.placed);
		nwrites++;
	}
	{
		int posted = 0, done, placed = 0, failed = 0;
		uint64_t end;

		for (int i = 0; i < BURST; i++)
			prepare((uint64_t)i * 4096 + 3, 4096, &seed);
		for (int i = 0; i < BURST; i++)
			if (post(ch, &burst[i], (uint64_t)i * 4096 + 3, 4096) == 0)
				posted++;
		end = tw_now_ns() + 20000ull * 1000000u;
		do {
			done = 0;
			tw__fab_progress(R.fab, 50);
			for (int i = 0; i < BURST; i++)
				done += burst[i].done;
		} while (done < posted && tw_now_ns() < end);
		for (int i = 0; i < BURST; i++) {
			placed += burst[i].placed;
			failed += burst[i].done && burst[i].status;
		}
		ok(posted == BURST && done == BURST && failed == 0 && placed == BURST,
		   "%d writes of 4 KiB in flight: %d posted, %d completed, %d failed, %d placed at "
		   "their completion", BURST, posted, done, failed, placed);
		nwrites += BURST;
	}
	if (peer_stopped)
		ok(peer_state() == 'T', "the peer stayed stopped through the writes (state %c)",
		   peer_state());
	cont_peer();

	tw__fab_get_stats(R.fab, &st);
	if (fast)
		ok(st.fast_writes == nwrites && st.writes == nwrites,
		   "stats: %" PRIu64 " of %" PRIu64 " writes without delivery-complete", st.fast_writes,
		   st.writes);
	else
		ok(st.fast_writes == 0 && st.writes == nwrites,
		   "stats: no write without delivery-complete (%" PRIu64 " of %" PRIu64 ")",
		   st.fast_writes, st.writes);

	/* The peer, running again, sees the last burst's bytes through its own checksum too. */
	ok(fab_peer_sum(&R, ch, 3, BURST * 4096u) == fab_fnv1a(src + 3, BURST * 4096u),
	   "the resumed peer's checksum of the burst matches");

	tw__chan_close(ch);
	ok(proc_kill(p, SIGTERM) == 0 && proc_wait(p, 10000) == 0, "peer exits cleanly");
	proc_free(p);
	tw__mr_close(src_mr);
	tw__fab_close(R.fab);
	tw__fab_free(src, BUF_LEN);
	free(check);
	tap_done_testing();
	return tap_exit();
}
