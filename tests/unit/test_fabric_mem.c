/*
 * tests/unit/test_fabric_mem.c — the in-memory fabric backend: connect/accept, registration,
 * write/read/send, every fault kind, loss completing pending ops exactly once, close, wakeup
 * across threads, the missing-provider error, "mem-null" (writes whose bytes the target
 * places: benchmarks only), the descriptor for a caller's event loop (tw__fab_wait_fd), and no
 * allocation per operation on a warm channel.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "fab_events.h"
#include "fab_op.h"
#include "tap.h"

static struct fab_rec A, B; /* A listens, B connects */

/* A virtual clock (tw_fab_config.clock_ns): time moves only when the test says so, and every
 * read is counted. */
struct vclock {
	uint64_t now;
	uint64_t reads;
};
static struct vclock *use_clock; /* open_side passes it to the fabs it opens */
static const char *use_provider = "mem"; /* and this provider ("mem-null": test_null) */

static uint64_t vclock_read(void *arg)
{
	struct vclock *vc = arg;

	vc->reads++;
	return vc->now;
}

static void open_side(struct fab_rec *s, unsigned op_timeout_ms)
{
	struct tw_fab_config cfg;
	struct tw_fab_events ev = fab_rec_events(s);

	memset(s, 0, sizeof(*s));
	tw__fab_config_init(&cfg);
	cfg.provider = use_provider;
	cfg.op_timeout_ms = op_timeout_ms;
	if (use_clock) {
		cfg.clock_ns = vclock_read;
		cfg.clock_arg = use_clock;
	}
	TAP_REQUIRE(tw__fab_open(&cfg, &ev, &s->fab) == 0, "open mem");
}

static void pump(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		tw__fab_progress(A.fab, 0);
		tw__fab_progress(B.fab, 0);
	}
}

/* Progress both until *flag != 0 or ~2 s. */
static bool pump_until(const int *flag)
{
	uint64_t end = tw_now_ns() + 2000000000ull;
	while (!*flag && tw_now_ns() < end) {
		if (A.fab)
			tw__fab_progress(A.fab, 1);
		if (B.fab)
			tw__fab_progress(B.fab, 1);
	}
	return *flag != 0;
}

struct conn {
	struct tw_chan *b2a, *a2b;
	void *buf;
	size_t len;
	struct tw_mr *mr_a; /* target region on A */
	struct tw_mr *mr_b; /* source region on B */
	void *src;
	struct tw_rkey rk;
};

static void setup(struct conn *c, unsigned op_timeout_ms)
{
	char addr[TW_ADDR_MAX];

	open_side(&A, op_timeout_ms);
	open_side(&B, op_timeout_ms);
	TAP_REQUIRE(tw__fab_listen(A.fab, addr, sizeof(addr)) == 0, "listen");
	TAP_REQUIRE(tw__fab_connect(B.fab, addr, &c->b2a) == 0, "connect");
	TAP_REQUIRE(pump_until(&A.accepts), "accept");
	c->a2b = A.accepted;
	c->len = 1 << 20;
	c->buf = tw__fab_alloc(c->len);
	c->src = tw__fab_alloc(c->len);
	TAP_REQUIRE(c->buf && c->src, "alloc");
	TAP_REQUIRE(tw__mr_reg(A.fab, c->buf, c->len, TW_MR_REMOTE_WRITE | TW_MR_REMOTE_READ, &c->mr_a) == 0,
		    "reg a");
	TAP_REQUIRE(tw__mr_reg(B.fab, c->src, c->len, TW_MR_WRITE_SRC | TW_MR_READ_DST, &c->mr_b) == 0,
		    "reg b");
	tw__mr_rkey(c->mr_a, &c->rk);
}

static void teardown(struct conn *c)
{
	tw__fab_close(B.fab);
	tw__fab_close(A.fab);
	tw__fab_free(c->buf, c->len);
	tw__fab_free(c->src, c->len);
}

static void fill(void *p, size_t len, unsigned seed)
{
	unsigned char *b = p;
	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)(seed + i * 7 + (i >> 8));
}

static void test_basic(void)
{
	struct conn c;
	struct opres w, r;
	struct tw_fab_stats st;
	char errbuf[64];

	setup(&c, 10000);
	ok(A.accepts == 1 && c.a2b != NULL, "on_accept once");
	ok(!strcmp(tw__fab_provider(A.fab), "mem") && !tw__fab_is_rdm(A.fab), "provider mem");
	ok(c.rk.len == c.len && c.rk.key != 0, "rkey len and key");
	ok(((uintptr_t)c.buf & 4095) == 0 && ((unsigned char *)c.buf)[c.len - 1] == 0, "alloc aligned, zeroed");

	fill(c.src, 4096, 3);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 4096, c.mr_b, &c.rk, 8192), 0, "write posted");
	ok(pump_until(&w.calls), "write completed");
	is_int(w.status, 0, "write status 0");
	ok(!memcmp((char *)c.buf + 8192, c.src, 4096), "write landed at offset");
	ok(((unsigned char *)c.buf)[8191] == 0 && ((unsigned char *)c.buf)[8192 + 4096] == 0, "nothing around it");

	op_init(&r);
	memset(c.src, 0, 4096);
	is_int(tw__chan_read(c.b2a, &r.op, (char *)c.src + 65536, 4096, c.mr_b, &c.rk, 8192), 0, "read posted");
	ok(pump_until(&r.calls) && r.status == 0, "read completed");
	fill(errbuf, 0, 0);
	{
		unsigned char expect[4096];
		fill(expect, 4096, 3);
		ok(!memcmp((char *)c.src + 65536, expect, 4096), "read back the data");
	}

	/* control messages both ways */
	is_int(tw__chan_send(c.b2a, "hello", 6), 0, "send b->a");
	ok(pump_until(&A.recvs) && A.last_len == 6 && !strcmp(A.last, "hello"), "a got hello");
	is_int(tw__chan_send(c.a2b, "world!", 7), 0, "send a->b");
	ok(pump_until(&B.recvs) && !strcmp(B.last, "world!"), "b got world!");
	is_int(tw__chan_send(c.b2a, "x", 65537), -EMSGSIZE, "oversized send refused");

	/* local range checks, caught before anything is posted */
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 4096, c.mr_b, &c.rk, c.len - 100), -ERANGE,
	       "past the remote end: -ERANGE locally");
	is_int(tw__chan_write(c.b2a, &w.op, (char *)c.src + c.len - 10, 4096, c.mr_b, &c.rk, 0), -ERANGE,
	       "source outside its MR: -ERANGE");
	pump(4);
	is_int(w.calls, 0, "no callback for refused ops");

	/* remote checks: forged length, wrong key */
	struct tw_rkey forged = c.rk;
	forged.len = c.len * 2;
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 4096, c.mr_b, &forged, c.len - 100), 0, "forged len posted");
	ok(pump_until(&w.calls) && w.status == -ERANGE, "remote range check: -ERANGE (%d)", w.status);
	struct tw_rkey badkey = c.rk;
	badkey.key ^= 0x5a5a;
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &badkey, 0), 0, "bad key posted");
	ok(pump_until(&w.calls) && w.status == -EACCES, "bad key: -EACCES (%d)", w.status);
	ok(!tw__chan_is_lost(c.b2a), "channel survives remote errors on mem");

	/* a closed MR: its key no longer works */
	struct tw_mr *tmp;
	struct tw_rkey tk;
	TAP_REQUIRE(tw__mr_reg(A.fab, c.buf, 4096, TW_MR_REMOTE_WRITE, &tmp) == 0, "reg tmp");
	tw__mr_rkey(tmp, &tk);
	ok(tk.key != c.rk.key, "keys differ per registration");
	tw__mr_close(tmp);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &tk, 0), 0, "write to closed MR posted");
	ok(pump_until(&w.calls) && w.status == -EACCES, "closed MR: -EACCES");

	tw__fab_get_stats(B.fab, &st);
	ok(st.writes == 1 && st.write_bytes == 4096 && st.reads == 1 && st.sends == 1, "stats on B");
	tw__fab_get_stats(A.fab, &st);
	ok(st.recvs == 1 && st.recv_bytes == 6, "stats on A");
	teardown(&c);
}

static void test_faults(void)
{
	struct conn c;
	struct opres w;
	struct tw_mem_fault f;

	/* PREFIX */
	setup(&c, 10000);
	fill(c.src, 1000, 9);
	memset(&f, 0, sizeof(f));
	f.kind = TW_MEM_FAULT_PREFIX;
	f.prefix = 100;
	is_int(tw__mem_inject(c.b2a, &f), 0, "inject prefix");
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 1000, c.mr_b, &c.rk, 0), 0, "prefix write posted");
	ok(pump_until(&w.calls) && w.status < 0, "prefix write fails (%d)", w.status);
	is_int(w.calls, 1, "exactly once");
	ok(!memcmp(c.buf, c.src, 100) && ((unsigned char *)c.buf)[100] == 0, "only the prefix landed");
	ok(pump_until(&A.lost) && B.lost == 1, "both sides lost");
	ok(tw__chan_is_lost(c.b2a), "is_lost");
	op_init(&w);
	ok(tw__chan_write(c.b2a, &w.op, c.src, 10, c.mr_b, &c.rk, 0) < 0, "new ops fail after loss");
	tw__chan_close(c.b2a);
	tw__chan_close(c.a2b);
	teardown(&c);

	/* CHUNKS */
	setup(&c, 10000);
	fill(c.src, 640, 1);
	memset(&f, 0, sizeof(f));
	f.kind = TW_MEM_FAULT_CHUNKS;
	f.chunk_mask = (1u << 0) | (1u << 3) | (1u << 9);
	tw__mem_inject(c.b2a, &f);
	op_init(&w);
	tw__chan_write(c.b2a, &w.op, c.src, 640, c.mr_b, &c.rk, 0);
	ok(pump_until(&w.calls) && w.status < 0, "chunks write fails");
	bool good = true;
	for (int i = 0; i < 10; i++) {
		bool landed = !memcmp((char *)c.buf + i * 64, (char *)c.src + i * 64, 64);
		bool want = (f.chunk_mask >> i) & 1;
		char z[64] = {0};
		if (want != landed || (!want && memcmp((char *)c.buf + i * 64, z, 64)))
			good = false;
	}
	ok(good, "exactly the chosen chunks landed");
	ok(pump_until(&A.lost), "peer lost after chunks");
	teardown(&c);

	/* FAIL */
	setup(&c, 10000);
	f.kind = TW_MEM_FAULT_FAIL;
	tw__mem_inject(c.b2a, &f);
	fill(c.src, 64, 5);
	op_init(&w);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	ok(pump_until(&w.calls) && w.status == -EIO, "fail: -EIO");
	ok(((unsigned char *)c.buf)[0] == 0 && ((unsigned char *)c.buf)[63] == 0, "fail: nothing landed");
	ok(!tw__chan_is_lost(c.b2a), "fail: channel stays");
	op_init(&w);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	ok(pump_until(&w.calls) && w.status == 0, "fault was one-shot");
	teardown(&c);

	/* DROP: no completion until the op timeout, then the channel is lost, ops fail once */
	setup(&c, 200);
	f.kind = TW_MEM_FAULT_DROP;
	tw__mem_inject(c.b2a, &f);
	struct opres w2, w3;
	op_init(&w);
	op_init(&w2);
	op_init(&w3);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	tw__chan_write(c.b2a, &w2.op, c.src, 64, c.mr_b, &c.rk, 64);
	pump(10);
	is_int(w.calls, 0, "drop: no completion yet");
	uint64_t t0 = tw_now_ns();
	tw__chan_write(c.b2a, &w3.op, c.src, 64, c.mr_b, &c.rk, 128);
	ok(pump_until(&B.lost), "drop: channel lost at the deadline");
	is_int(B.lost_err, -ETIMEDOUT, "drop: lost with -ETIMEDOUT");
	ok((tw_now_ns() - t0) < 1000000000ull, "drop: within the op timeout");
	is_int(w.calls, 1, "dropped op completed once");
	is_int(w.status, -ETIMEDOUT, "dropped op -ETIMEDOUT");
	ok(w2.calls == 1 && w3.calls == 1, "others pending: completed once");
	ok(pump_until(&A.lost), "drop: peer told");
	pump(10);
	ok(w.calls == 1 && w2.calls == 1 && w3.calls == 1 && B.lost == 1, "still exactly once");
	teardown(&c);

	/* VANISH */
	setup(&c, 10000);
	f.kind = TW_MEM_FAULT_VANISH;
	tw__mem_inject(c.b2a, &f);
	op_init(&w);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	ok(pump_until(&w.calls) && w.status < 0, "vanish: write fails");
	ok(B.lost == 1 && pump_until(&A.lost), "vanish: both sides lost");
	ok(((unsigned char *)c.buf)[0] == 0, "vanish: nothing landed");
	teardown(&c);

	/* STOP: the peer is stopped (SIGSTOP), for good: messages either way are accepted and
	 * never delivered, a write neither lands nor completes until the op deadline fails it
	 * (on a virtual clock: no waiting). */
	{
		struct vclock vc = {.now = 1000000000u};

		use_clock = &vc;
		setup(&c, 1000);
		use_clock = NULL;
		f.kind = TW_MEM_FAULT_STOP;
		is_int(tw__mem_inject(c.b2a, &f), 0, "stop: injected");
		is_int(tw__chan_send(c.b2a, "ping", 4), 0, "stop: a send to the peer accepted");
		is_int(tw__chan_send(c.a2b, "pong", 4), 0, "stop: and one from it");
		fill(c.src, 64, 7);
		op_init(&w);
		is_int(tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0), 0,
		       "stop: write posted");
		pump(10);
		ok(A.recvs == 0 && B.recvs == 0, "stop: no message delivered either way");
		ok(w.calls == 0 && !tw__chan_is_lost(c.b2a), "stop: write pending, channel up");
		vc.now += 1000000000u;
		tw__fab_progress(B.fab, 0);
		ok(w.calls == 1 && w.status == -ETIMEDOUT && B.lost == 1 &&
		   B.lost_err == -ETIMEDOUT,
		   "stop: at the op timeout the write -ETIMEDOUT, the channel lost once");
		ok(((unsigned char *)c.buf)[0] == 0, "stop: nothing landed");
		teardown(&c);
	}
}

/*
 * The op timeout on a virtual clock: an hour-long op_timeout_ms fires as soon as the test moves
 * the clock past it, without waiting (before the fabric had a clock, this test would have
 * taken an hour). Also counts the clock reads: one per write, read or send, one per progress
 * round, none elsewhere on the data path.
 */
static void test_virtual_clock(void)
{
	const uint64_t hour_ns = 3600ull * 1000000000u;
	struct vclock vc = {.now = 1000000000u};
	struct tw_mem_fault f = {.kind = TW_MEM_FAULT_DROP};
	struct opres w, w2, r;
	struct conn c;
	uint64_t before;

	use_clock = &vc;
	setup(&c, 3600u * 1000u);
	use_clock = NULL;

	op_init(&w);
	before = vc.reads;
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0), 0, "vclock: write posted");
	is_int((int)(vc.reads - before), 1, "vclock: a write reads the clock once");
	before = vc.reads;
	is_int(tw__fab_progress(B.fab, 0), 1, "vclock: its completion");
	is_int((int)(vc.reads - before), 1, "vclock: a progress round reads the clock once");
	ok(w.calls == 1 && w.status == 0, "vclock: write completed");
	op_init(&r);
	before = vc.reads;
	tw__chan_read(c.b2a, &r.op, c.src, 64, c.mr_b, &c.rk, 0);
	is_int((int)(vc.reads - before), 1, "vclock: a read reads the clock once");
	before = vc.reads;
	tw__chan_send(c.b2a, "x", 1);
	is_int((int)(vc.reads - before), 1, "vclock: a send reads the clock once");
	tw__fab_progress(B.fab, 0);
	tw__fab_progress(A.fab, 0);

	/* DROP: the op stays pending while the virtual hour has not passed ... */
	tw__mem_inject(c.b2a, &f);
	op_init(&w);
	op_init(&w2);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	vc.now += 1000000u; /* 1 ms later: a second write, its deadline 1 ms after the first */
	tw__chan_write(c.b2a, &w2.op, c.src, 64, c.mr_b, &c.rk, 64);
	tw__fab_progress(B.fab, 0);
	ok(w2.calls == 1 && w2.status == 0, "vclock: the write after the dropped one completed");
	vc.now += hour_ns - 2000000u; /* 1 ms before the dropped write's deadline */
	tw__fab_progress(B.fab, 0);
	ok(w.calls == 0 && !tw__chan_is_lost(c.b2a) && B.lost == 0,
	   "vclock: 1 ms before the hour: still pending, channel up");
	/* ... and fails at once when it has: no waiting, the test takes no hour */
	vc.now += 1000000u;
	tw__fab_progress(B.fab, 0);
	ok(w.calls == 1 && w.status == -ETIMEDOUT, "vclock: at the hour: the dropped write -ETIMEDOUT");
	ok(B.lost == 1 && B.lost_err == -ETIMEDOUT && tw__chan_is_lost(c.b2a),
	   "vclock: the channel lost with -ETIMEDOUT, once");
	ok(strstr(tw__fab_errmsg(B.fab), "3600000 ms") != NULL, "vclock: the message names the timeout: %s",
	   tw__fab_errmsg(B.fab));
	tw__fab_progress(B.fab, 0);
	ok(w.calls == 1 && B.lost == 1, "vclock: still exactly once");
	teardown(&c);
}

static void test_close(void)
{
	struct conn c;
	struct opres w;
	struct tw_mem_fault f = {.kind = TW_MEM_FAULT_DROP};

	/* close with pending ops: -TW_ECLOSED before return, no on_lost for the closer */
	setup(&c, 10000);
	tw__mem_inject(c.b2a, &f);
	op_init(&w);
	tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0);
	tw__chan_close(c.b2a);
	ok(w.calls == 1 && w.status == -TW_ECLOSED, "close completes pending with -TW_ECLOSED");
	ok(pump_until(&A.lost) && A.lost_err == -TW_EPEERLOST, "peer sees the close");
	is_int(B.lost, 0, "no on_lost for our own close");
	pump(5);
	is_int(w.calls, 1, "once");
	teardown(&c);

	/* refused: nobody listens */
	open_side(&B, 1000);
	struct tw_chan *ch;
	is_int(tw__fab_connect(B.fab, "mem://999999", &ch), -ECONNREFUSED, "connect to nobody refused");
	is_int(tw__fab_connect(B.fab, "bogus", &ch), -EINVAL, "bad address");
	tw__fab_close(B.fab);

	/* close the fab with a live channel: peer told */
	setup(&c, 10000);
	tw__fab_close(B.fab);
	B.fab = NULL;
	ok(pump_until(&A.lost), "fab close tells the peer");
	tw__fab_close(A.fab);
	tw__fab_free(c.buf, c.len);
	tw__fab_free(c.src, c.len);
}

struct thr {
	struct tw_fab *fab;
	int started; /* atomic: the thread is about to block */
	int rc;
};

static void *blocker(void *arg)
{
	struct thr *t = arg;

	__atomic_store_n(&t->started, 1, __ATOMIC_RELEASE);
	t->rc = tw__fab_progress(t->fab, -1);
	return NULL;
}

/* Echo server on its own thread: A echoes every message back. */
static volatile int echo_stop;
static void echo_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	tw__chan_send(ch, msg, len);
}
static void *echo_thread(void *arg)
{
	struct tw_fab *fab = arg;
	while (!__atomic_load_n(&echo_stop, __ATOMIC_ACQUIRE))
		tw__fab_progress(fab, -1);
	return NULL;
}

static void test_threads(void)
{
	struct tw_fab_config cfg;
	struct tw_fab *fa, *fb;
	struct tw_fab_events eva = {.on_recv = echo_recv};
	struct tw_fab_events evb = fab_rec_events(&B);
	struct thr t = {0};
	pthread_t th;
	char addr[TW_ADDR_MAX];
	struct tw_chan *ch;

	tw__fab_config_init(&cfg);
	cfg.provider = "mem";
	TAP_REQUIRE(tw__fab_open(&cfg, &eva, &fa) == 0, "open");
	/* wakeup is sticky: one issued before the wait still ends the next progress(-1) */
	tw__fab_wakeup(fa);
	ok(tw__fab_progress(fa, -1) >= 0, "a wakeup issued before progress(-1) ends it");
	/* wakeup from another thread ends a progress(-1) blocked there (or about to block: the
	 * wakeup is sticky, so either order is a correct, deterministic test; no sleep) */
	t.fab = fa;
	pthread_create(&th, NULL, blocker, &t);
	while (!__atomic_load_n(&t.started, __ATOMIC_ACQUIRE))
		sched_yield();
	tw__fab_wakeup(fa);
	pthread_join(th, NULL);
	ok(t.rc >= 0, "tw__fab_wakeup from another thread unblocks progress(-1)");

	memset(&B, 0, sizeof(B));
	TAP_REQUIRE(tw__fab_open(&cfg, &evb, &fb) == 0, "open b");
	tw__fab_listen(fa, addr, sizeof(addr));
	__atomic_store_n(&echo_stop, 0, __ATOMIC_RELEASE);
	pthread_create(&th, NULL, echo_thread, fa);
	TAP_REQUIRE(tw__fab_connect(fb, addr, &ch) == 0, "connect");
	int n = 0;
	for (int i = 0; i < 2000; i++) {
		char m[32];
		int before = B.recvs;
		snprintf(m, sizeof(m), "ping %d", i);
		tw__chan_send(ch, m, strlen(m) + 1);
		uint64_t end = tw_now_ns() + 2000000000ull;
		while (B.recvs == before && tw_now_ns() < end)
			tw__fab_progress(fb, 100);
		if (B.recvs == before + 1 && !strcmp(B.last, m))
			n++;
	}
	is_int(n, 2000, "2000 pingpongs across threads");
	__atomic_store_n(&echo_stop, 1, __ATOMIC_RELEASE);
	tw__fab_wakeup(fa);
	pthread_join(th, NULL);
	tw__fab_close(fb);
	tw__fab_close(fa);
}

static void test_noprov(void)
{
	struct tw_fab_config cfg;
	struct tw_fab *f = NULL;

	tw__fab_config_init(&cfg);
	cfg.provider = "nosuchprov";
	tw_diag_set_level(TW_DIAG_ERROR);
	int rc = tw__fab_open(&cfg, NULL, &f);
	is_int(rc, -TW_ENOPROV, "unknown provider: -TW_ENOPROV");
	const char *m = tw__fab_errmsg(NULL);
	ok(strstr(m, "nosuchprov") && strstr(m, "tcp"), "message lists what exists: %s", m);
}

/*
 * A fab that was not looking (its thread preempted on a busy machine, or stopped) for longer
 * than op_timeout_ms does not declare its peers lost on its first look: the gap beyond a quarter
 * of the op timeout (at most 1 s, TW_FAB_GAP_NS) is left out of every deadline. A peer that stays silent while the fab looks is
 * still lost after op_timeout_ms. Before the rule the first look failed the channel at once.
 */
static void test_unobserved_gap(void)
{
	struct timespec nap = { .tv_sec = 1, .tv_nsec = 600000000 }; /* "descheduled": 1.6 s */
	struct tw_mem_fault f = { .kind = TW_MEM_FAULT_DROP };
	struct tw_fab_stats st;
	struct opres w;
	struct conn c;
	uint64_t t0;

	setup(&c, 400);
	tw__mem_inject(c.b2a, &f);
	op_init(&w);
	TAP_REQUIRE(tw__chan_write(c.b2a, &w.op, c.src, 64, c.mr_b, &c.rk, 0) == 0, "write");
	nanosleep(&nap, NULL); /* not a wait for an event: the time the fab does not look */
	tw__fab_progress(B.fab, 0);
	ok(!B.lost && !w.calls, "after 1.6 s without a look (op timeout 0.4 s), the first look "
	   "fails nothing");
	tw__fab_get_stats(B.fab, &st);
	ok(st.unobserved_ns >= 1400000000ull, "1.5 s left out of the deadlines (%" PRIu64 " ns)",
	   st.unobserved_ns);
	t0 = tw_now_ns();
	ok(pump_until(&B.lost) && w.calls == 1 && w.status == -ETIMEDOUT, "a peer that stays "
	   "silent while the fab looks is lost (-ETIMEDOUT)");
	ok(tw_now_ns() - t0 < 1000000000ull, "within the op timeout of looking (%.2f s)",
	   (double)(tw_now_ns() - t0) / 1e9);
	teardown(&c);
}

/* "mem-null" (benchmarks): a write completes at the initiator without its bytes; the target's
 * thread places them before it handles its next event, when it polls, and when a registration
 * of either side closes; a read of the target finds them. */
static void test_null(void)
{
	struct conn c;
	struct opres w, r;
	unsigned char expect[4096];
	struct tw_mr *tmp;

	use_provider = "mem-null";
	setup(&c, 10000);
	use_provider = "mem";
	ok(!strcmp(tw__fab_provider(A.fab), "mem-null"), "provider mem-null");
	fill(c.src, 4096, 5);
	fill(expect, 4096, 5);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 4096, c.mr_b, &c.rk, 8192), 0, "write posted");
	for (int i = 0; i < 100 && !w.calls; i++)
		tw__fab_progress(B.fab, 0); /* the initiator only */
	ok(w.calls == 1 && w.status == 0, "completed at the initiator alone");
	ok(((unsigned char *)c.buf)[8192] == 0 && ((unsigned char *)c.buf)[8192 + 4095] == 0,
	   "its bytes not placed yet (the target has not run)");
	is_int(tw__chan_send(c.b2a, "after", 6), 0, "a message after it");
	ok(pump_until(&A.recvs), "the target got the message");
	ok(!memcmp((char *)c.buf + 8192, expect, 4096), "the bytes were placed before it");

	/* the target's poll alone places them */
	fill(c.src, 4096, 9);
	fill(expect, 4096, 9);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 4096, c.mr_b, &c.rk, 0), 0, "second write");
	for (int i = 0; i < 100 && !w.calls; i++)
		tw__fab_progress(B.fab, 0);
	ok(w.calls == 1 && w.status == 0, "second write completed");
	tw__fab_progress(A.fab, 0);
	ok(!memcmp(c.buf, expect, 4096), "the target's poll placed it");

	/* a read of the target finds a write before it */
	fill(c.src, 512, 11);
	fill(expect, 512, 11);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, c.src, 512, c.mr_b, &c.rk, 65536), 0, "third write");
	op_init(&r);
	is_int(tw__chan_read(c.b2a, &r.op, (char *)c.src + 131072, 512, c.mr_b, &c.rk, 65536), 0,
	       "read posted");
	ok(pump_until(&r.calls) && r.status == 0 && w.status == 0, "write and read completed");
	ok(!memcmp((char *)c.src + 131072, expect, 512), "the read saw the write");

	/* the source's registration closing places what is left of it */
	TAP_REQUIRE(tw__mr_reg(B.fab, (char *)c.src + 262144, 4096, TW_MR_WRITE_SRC, &tmp) == 0,
		    "reg a second source");
	fill((char *)c.src + 262144, 1024, 13);
	fill(expect, 1024, 13);
	op_init(&w);
	is_int(tw__chan_write(c.b2a, &w.op, (char *)c.src + 262144, 1024, tmp, &c.rk, 196608), 0,
	       "write from it");
	for (int i = 0; i < 100 && !w.calls; i++)
		tw__fab_progress(B.fab, 0);
	ok(w.calls == 1 && ((unsigned char *)c.buf)[196608] == 0, "completed, not placed yet");
	tw__mr_close(tmp);
	ok(!memcmp((char *)c.buf + 196608, expect, 1024), "placed when its source closed");
	teardown(&c);
}

/* Readable within `ms`: 1, 0 (not), or -1. */
static int readable(int fd, int ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	return poll(&pf, 1, ms);
}

/*
 * The descriptor a caller's event loop sleeps on (tw__fab_wait_fd; tw_primary_wait_fd): made on
 * the first request and the same after; prepare hands it out armed when nothing is queued, and
 * says "poll first" (0) while something is; the next event queued for the fab (a message, a
 * wake-up from another thread) makes it readable, once per sleep.
 */
static void test_wait_fd(void)
{
	struct conn c;
	int fd, before;

	setup(&c, 1000);
	pump(4);
	fd = tw__fab_wait_fd(A.fab);
	ok(fd >= 0, "mem: a descriptor to wait on (%d)", fd);
	is_int(tw__fab_wait_fd(A.fab), fd, "the same descriptor when asked again");
	ok(tw__fab_wait_prepare(A.fab, 1000) > 0, "nothing queued: prepare allows a sleep");
	is_int(readable(fd, 0), 0, "armed, not readable while nothing comes");

	before = A.recvs;
	TAP_REQUIRE(tw__chan_send(c.b2a, "wake", 5) == 0, "send");
	is_int(readable(fd, 5000), 1, "a message for the fab makes the descriptor readable");
	is_int(tw__fab_wait_prepare(A.fab, 1000), 0, "prepare while it is queued: progress first");
	TAP_REQUIRE(fab_progress_until(A.fab, &A.recvs, before + 1, 5000), "received");
	ok(!strcmp(A.last, "wake"), "the message is there (%s)", A.last);
	ok(tw__fab_wait_prepare(A.fab, 1000) > 0, "handled: prepare allows a sleep again");
	is_int(readable(fd, 0), 0, "the earlier wake-up was consumed by the prepare");

	/* Disarmed after one write: a second message costs no write, and the prepare that
	 * follows consumes the one. */
	TAP_REQUIRE(tw__chan_send(c.b2a, "one", 4) == 0 && tw__chan_send(c.b2a, "two", 4) == 0,
		    "two sends");
	is_int(readable(fd, 5000), 1, "readable after two messages");
	is_int(tw__fab_wait_prepare(A.fab, 1000), 0, "both queued: progress first");
	pump(2);
	ok(tw__fab_wait_prepare(A.fab, 1000) > 0 && readable(fd, 0) == 0,
	   "both handled: armed again, not readable");

	/* A wake-up from another thread ends the loop's sleep as it ends progress(-1). */
	tw__fab_wakeup(A.fab);
	is_int(readable(fd, 5000), 1, "tw__fab_wakeup makes it readable");
	is_int(tw__fab_wait_prepare(A.fab, 1000), 0, "the wake-up's reason is for the next poll");
	ok(tw__fab_wait_prepare(A.fab, 1000) > 0, "taken once");
	teardown(&c);
}

/* One round of a primary's traffic: a write of 1 KiB B -> A (or a read back), a small message
 * B -> A and its answer A -> B; false if anything failed. */
static bool round_trip(struct conn *c, unsigned i)
{
	struct opres w;
	int ra = A.recvs, rb = B.recvs;
	char msg[48];

	op_init(&w);
	snprintf(msg, sizeof(msg), "set-acked %u", i);
	if ((i % 8 == 7 ? tw__chan_read(c->b2a, &w.op, c->src, 1024, c->mr_b, &c->rk, 0)
			: tw__chan_write(c->b2a, &w.op, c->src, 1024, c->mr_b, &c->rk,
					 (uint64_t)(i % 64) * 1024)) != 0 ||
	    tw__chan_send(c->b2a, msg, strlen(msg) + 1) != 0)
		return false;
	if (!fab_progress_until(A.fab, &A.recvs, ra + 1, 5000) ||
	    tw__chan_send(c->a2b, "ok", 3) != 0 || !fab_progress_until(B.fab, &B.recvs, rb + 1, 5000))
		return false;
	for (int k = 0; k < 1000 && !w.calls; k++) /* queued before the answer: there already */
		tw__fab_progress(B.fab, 0);
	return w.calls == 1 && w.status == 0 && !strcmp(A.last, msg);
}

/*
 * A warm channel allocates nothing per operation (docs/fabric.md, "mem"): its completions and
 * messages come from the fabs' caches and "mem-null"'s copy orders from their target's; a
 * message over the cached size is allocated (and counted: the counter works).
 */
static void test_no_alloc(const char *provider)
{
	struct conn c;
	uint64_t before;
	unsigned i;
	bool good = true;
	static char big[4096];

	use_provider = provider;
	setup(&c, 5000);
	use_provider = "mem";
	fill(c.src, 1024, 3);
	for (i = 0; i < 16 && good; i++) /* warm-up: the caches fill */
		good = round_trip(&c, i);
	before = tw__mem_allocs();
	for (; i < 3000 && good; i++)
		good = round_trip(&c, i);
	ok(good, "%s: 3,000 rounds of write or read, message and answer", provider);
	is_int((int)(tw__mem_allocs() - before), 0, "%s: none of them allocated", provider);
	ok(!memcmp(c.buf, c.src, 1024), "%s: the writes landed", provider);

	memset(big, 'x', sizeof(big) - 1);
	before = tw__mem_allocs();
	i = (unsigned)A.recvs;
	TAP_REQUIRE(tw__chan_send(c.b2a, big, sizeof(big)) == 0, "big send");
	ok(fab_progress_until(A.fab, &A.recvs, (int)i + 1, 5000) && A.last_len == sizeof(big),
	   "%s: a 4 KiB message arrives", provider);
	is_int((int)(tw__mem_allocs() - before), 1, "%s: it was allocated (over the cached size)",
	       provider);
	teardown(&c);
}

int main(void)
{
	test_basic();
	test_null();
	test_faults();
	test_virtual_clock();
	test_unobserved_gap();
	test_close();
	test_threads();
	test_noprov();
	test_wait_fd();
	test_no_alloc("mem");
	test_no_alloc("mem-null");
	tap_done_testing();
	return tap_exit();
}
