/*
 * tests/unit/test_fabric_reset.c — tw__fab_reset and tw__fab_loss_blocks_others (fabric.h) on shm,
 * tcp and mem: which providers say a loss blocks the others (shm only); a reset is refused while
 * a channel is open and on a listening fab; after a reset the handle, its registrations (same
 * struct tw_mr) and a new connection work: a write from the same source registration lands,
 * also after several resets in a row; tw__fab_wakeup from another thread during the resets (run
 * under ThreadSanitizer in CI).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "fabric/fabric.h"
#include "fab_op.h"
#include "tap.h"


static atomic_int accepts;

static void on_accept(void *arg, struct tw_chan *ch)
{
	(void)arg;
	(void)ch;
	atomic_fetch_add(&accepts, 1);
}

/* The target listens and is driven by its own thread (MSG providers need the listener to
 * progress while tw__fab_connect waits); the initiator, driven by the main thread, is reset. */
static struct tw_fab *T, *I;
static atomic_bool stop_waker, stop_server;

static void *server(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_server))
		tw__fab_progress(T, 10);
	return NULL;
}

static void *waker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_waker))
		tw__fab_wakeup(I);
	return NULL;
}

static bool pump_until(const int *flag, int want)
{
	uint64_t end = tw_now_ns() + 10000000000ull;

	while (*flag < want && tw_now_ns() < end)
		tw__fab_progress(I, 1);
	return *flag >= want;
}

static bool wait_accepts(int want)
{
	uint64_t end = tw_now_ns() + 10000000000ull;

	while (atomic_load(&accepts) < want && tw_now_ns() < end)
		tw__fab_progress(I, 1);
	return atomic_load(&accepts) >= want;
}

/* Connect I to `addr`, write 4096 bytes from src + off to the target's region at `off`, close
 * the channel. True when they landed. */
static bool connect_write(const char *addr, struct tw_mr *src_mr, const struct tw_rkey *rk,
			  size_t off, const unsigned char *dst)
{
	struct tw_chan *ch;
	struct opres r;
	int a = atomic_load(&accepts);
	bool ok_ = false;
	unsigned char *src = tw__mr_base(src_mr);

	if (tw__fab_connect(I, addr, &ch) < 0)
		return false;
	if (wait_accepts(a + 1)) {
		memset(&r, 0, sizeof(r));
		r.op.cb = op_cb;
		for (size_t i = 0; i < 4096; i++)
			src[off + i] = (unsigned char)(i + off / 4096 + 1);
		if (tw__chan_write(ch, &r.op, src + off, 4096, src_mr, rk, off) == 0 &&
		    pump_until(&r.calls, 1))
			ok_ = r.status == 0 && !memcmp(dst + off, src + off, 4096);
	}
	tw__chan_close(ch);
	return ok_;
}

static void run(const char *prov, bool blocks)
{
	struct tw_fab_config cfg;
	struct tw_fab_events ev = {.on_accept = on_accept};
	char addr[TW_ADDR_MAX], addr2[TW_ADDR_MAX];
	struct tw_fab *L;
	pthread_t srv;
	size_t len = 1 << 20;
	unsigned char *dst, *src;
	struct tw_mr *dst_mr, *src_mr;
	struct tw_rkey rk;
	struct tw_chan *ch;
	pthread_t th;
	bool all = true;
	int rc;

	tw__fab_config_init(&cfg);
	cfg.provider = prov;
	if (tw__fab_open(&cfg, &ev, &T) < 0) {
		tap_skip(9, "%s: %s", prov, tw__fab_errmsg(NULL));
		return;
	}
	TAP_REQUIRE(tw__fab_open(&cfg, &ev, &I) == 0, "open %s", prov);
	TAP_REQUIRE(tw__fab_listen(T, addr, sizeof(addr)) == 0, "listen");
	dst = tw__fab_alloc(len);
	src = tw__fab_alloc(len);
	TAP_REQUIRE(dst && src, "alloc");
	TAP_REQUIRE(tw__mr_reg(T, dst, len, TW_MR_REMOTE_WRITE, &dst_mr) == 0, "reg dst");
	TAP_REQUIRE(tw__mr_reg(I, src, len, TW_MR_WRITE_SRC, &src_mr) == 0, "reg src");
	tw__mr_rkey(dst_mr, &rk);
	atomic_store(&stop_server, false);
	TAP_REQUIRE(pthread_create(&srv, NULL, server, NULL) == 0, "thread");
	ok(tw__fab_loss_blocks_others(I) == blocks, "%s: a loss blocks the others: %s", prov,
	   blocks ? "yes" : "no");
	ok(connect_write(addr, src_mr, &rk, 0, dst), "%s: write before any reset", prov);

	TAP_REQUIRE(tw__fab_connect(I, addr, &ch) == 0, "connect");
	is_int(tw__fab_reset(I), -EBUSY, "%s: refused while a channel is open", prov);
	tw__chan_close(ch);
	TAP_REQUIRE(tw__fab_open(&cfg, NULL, &L) == 0, "open %s", prov);
	rc = tw__fab_listen(L, addr2, sizeof(addr2));
	if (!strcmp(prov, "mem"))
		is_int(tw__fab_reset(L), 0, "%s: a listening fab: nothing to do", prov);
	else
		ok(rc == 0 && tw__fab_reset(L) == -ENOTSUP, "%s: a listening fab is not reset", prov);
	tw__fab_close(L);

	atomic_store(&stop_waker, false);
	TAP_REQUIRE(pthread_create(&th, NULL, waker, NULL) == 0, "thread");
	rc = tw__fab_reset(I);
	is_int(rc, 0, "%s: reset with every channel closed, another thread waking the fab", prov);
	ok(tw__mr_base(src_mr) == src && tw__mr_len(src_mr) == len,
	   "%s: the registration is the same object", prov);
	ok(rc == 0 && connect_write(addr, src_mr, &rk, 4096, dst),
	   "%s: a new connection writes from the same registration", prov);
	for (unsigned i = 2; i < 6 && all; i++)
		all = tw__fab_reset(I) == 0 && connect_write(addr, src_mr, &rk, 4096 * i, dst);
	ok(all, "%s: four more resets, each followed by a write that lands", prov);
	atomic_store(&stop_waker, true);
	pthread_join(th, NULL);
	atomic_store(&stop_server, true);
	pthread_join(srv, NULL);
	tw__fab_close(I);
	tw__fab_close(T);
	tw__fab_free(dst, len);
	tw__fab_free(src, len);
	ok(1, "%s: closed", prov);
}

/* argv[1], optional: one provider only (the verbs-semantics suite runs tcp in strict mode). */
int main(int argc, char **argv)
{
	if (argc > 1) {
		tap_plan(9);
		run(argv[1], !strcmp(argv[1], "shm"));
		return tap_exit();
	}
	tap_plan(27);
	run("mem", false);
	run("tcp", false);
	run("shm", true);
	return tap_exit();
}
