/*
 * tests/unit/test_fabric_wmsg.c — writes sent as messages (cfg.write_mode = TW_FAB_WRITE_MSG,
 * fabric/wmsg.c) over the in-memory backend, then over tcp and shm when this machine has them:
 * bytes land where a one-sided write would put them, in one completion also when split into
 * chunks; the target's fabric layer (not its on_recv) places them, runs the write check (not for
 * TW_OP_UNCHECKED writes) and refuses unknown keys, ranges outside the registration and
 * registrations without remote write; a refusal fails that write only; the user cannot send a
 * message that looks like a write message; a silent target fails the write with -ETIMEDOUT and a
 * lost one with an error, each exactly once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "fabric/fabric.h"
#include "fab_events.h"
#include "fab_op.h"
#include "tap.h"

static void op_init_flags(struct opres *r, unsigned flags)
{
	op_init(r);
	r->op.flags = flags;
}

static struct fab_rec T, I; /* target (listens), initiator (writes as messages) */
static int checks;

/* The write check: refuses writes whose first byte is 0xEE. */
static int check(const void *buf, size_t len)
{
	checks++;
	return len && *(const unsigned char *)buf == 0xEE ? -TW_ECORRUPT : 0;
}

static int open_side(struct fab_rec *s, const char *prov, enum tw_fab_write_mode mode,
		     unsigned op_timeout_ms)
{
	struct tw_fab_config cfg;
	struct tw_fab_events ev = fab_rec_events(s);

	memset(s, 0, sizeof(*s));
	tw__fab_config_init(&cfg);
	cfg.provider = prov;
	cfg.op_timeout_ms = op_timeout_ms;
	cfg.write_mode = mode;
	return tw__fab_open(&cfg, &ev, &s->fab);
}

/* Progress both until *flag != 0 or 10 s. */
static bool pump_until(const int *flag)
{
	uint64_t end = tw_now_ns() + 10000000000ull;

	while (!*flag && tw_now_ns() < end) {
		tw__fab_progress(T.fab, 0);
		tw__fab_progress(I.fab, 1);
	}
	return *flag != 0;
}

struct conn {
	struct tw_chan *i2t;
	uint8_t *dst, *src, *ro;
	size_t len;
	struct tw_mr *mr_dst, *mr_src, *mr_ro;
	struct tw_rkey rk, rk_ro;
};

static bool setup(struct conn *c, const char *prov, unsigned op_timeout_ms)
{
	char addr[TW_ADDR_MAX];
	int rc;

	memset(c, 0, sizeof(*c));
	if (!strcmp(prov, "mem")) {
		/* Two fabs: the target in the default mode (every fab serves write messages). */
		if (open_side(&T, prov, TW_FAB_WRITE_ONESIDED, op_timeout_ms) < 0)
			return false;
		rc = open_side(&I, prov, TW_FAB_WRITE_MSG, op_timeout_ms);
		TAP_REQUIRE(rc == 0, "open %s initiator: %s", prov, tw_strerror(rc));
	} else {
		/* One fab connected to itself (in-process providers need someone progressing the
		 * listener during tw__fab_connect). */
		if (open_side(&T, prov, TW_FAB_WRITE_MSG, op_timeout_ms) < 0)
			return false;
		memset(&I, 0, sizeof(I));
		I.fab = T.fab;
	}
	tw__fab_set_write_check(T.fab, check);
	TAP_REQUIRE(tw__fab_listen(T.fab, addr, sizeof(addr)) == 0, "listen");
	TAP_REQUIRE(tw__fab_connect(I.fab, addr, &c->i2t) == 0, "connect");
	TAP_REQUIRE(pump_until(&T.accepts), "accept");
	c->len = 1 << 20;
	c->dst = tw__fab_alloc(c->len);
	c->src = tw__fab_alloc(c->len);
	c->ro = tw__fab_alloc(4096);
	TAP_REQUIRE(c->dst && c->src && c->ro, "alloc");
	TAP_REQUIRE(tw__mr_reg(T.fab, c->dst, c->len, TW_MR_REMOTE_WRITE, &c->mr_dst) == 0, "reg dst");
	TAP_REQUIRE(tw__mr_reg(T.fab, c->ro, 4096, TW_MR_REMOTE_READ, &c->mr_ro) == 0, "reg ro");
	TAP_REQUIRE(tw__mr_reg(I.fab, c->src, c->len, TW_MR_WRITE_SRC, &c->mr_src) == 0, "reg src");
	tw__mr_rkey(c->mr_dst, &c->rk);
	tw__mr_rkey(c->mr_ro, &c->rk_ro);
	for (size_t i = 0; i < c->len; i++)
		c->src[i] = (uint8_t)(i * 7 + 1);
	checks = 0;
	return true;
}

static void teardown(struct conn *c)
{
	if (I.fab != T.fab)
		tw__fab_close(I.fab);
	tw__fab_close(T.fab);
	tw__fab_free(c->dst, c->len);
	tw__fab_free(c->src, c->len);
	tw__fab_free(c->ro, 4096);
	I.fab = T.fab = NULL;
}

/* Write src[off, off + len) to dst + off; the op's status, or -1000 when it never completed. */
static int write_wait(struct conn *c, struct opres *r, size_t off, size_t len,
		      const struct tw_rkey *rk)
{
	int rc = tw__chan_write(c->i2t, &r->op, c->src + off, len, c->mr_src, rk, off);

	if (rc < 0)
		return rc;
	return pump_until(&r->calls) ? r->status : -1000;
}

/* 14 results. */
static void test_basic(const char *prov)
{
	struct tw_fab_stats si, st;
	struct opres r;
	struct tw_rkey bad;
	struct conn c;
	int rc;

	if (!setup(&c, prov, 10000)) {
		tap_skip(14, "provider %s not available here", prov);
		return;
	}
	op_init_flags(&r, 0);
	c.src[100] = 0x11;
	rc = write_wait(&c, &r, 100, 3000, &c.rk);
	is_int(rc, 0, "%s: a 3000-byte write as messages completes", prov);
	ok(r.calls == 1 && !memcmp(c.dst + 100, c.src + 100, 3000) && c.dst[99] == 0 &&
	   c.dst[3100] == 0, "%s: the bytes are at the offset, nothing around them", prov);
	tw__fab_get_stats(I.fab, &si);
	tw__fab_get_stats(T.fab, &st);
	ok(si.writes == 1 && si.write_bytes == 3000 && si.wmsg_writes == 1 && st.wmsg_served == 1 &&
	   st.wmsg_served_bytes == 3000 && checks == 1 && T.recvs == 0,
	   "%s: counted as a write; the target's fabric placed and checked it, its on_recv saw "
	   "nothing", prov);

	op_init_flags(&r, 0);
	rc = write_wait(&c, &r, 4096, 300000, &c.rk);
	tw__fab_get_stats(T.fab, &st);
	ok(rc == 0 && r.calls == 1 && !memcmp(c.dst + 4096, c.src + 4096, 300000) && checks == 2 &&
	   st.wmsg_served == 2, "%s: a 300000-byte write (5 chunks) completes once, checked once",
	   prov);

	op_init_flags(&r, 0);
	c.src[400000] = 0xEE;
	rc = write_wait(&c, &r, 400000, 500, &c.rk);
	ok(rc == -TW_ECORRUPT && r.calls == 1 && checks == 3, "%s: the check refuses: %s", prov,
	   tw_strerror(rc));
	ok(!tw__chan_is_lost(c.i2t) && !I.lost, "%s: a refused write leaves the channel up", prov);
	op_init_flags(&r, TW_OP_UNCHECKED);
	rc = write_wait(&c, &r, 400000, 500, &c.rk);
	ok(rc == 0 && checks == 3 && !memcmp(c.dst + 400000, c.src + 400000, 500),
	   "%s: TW_OP_UNCHECKED: placed without the check", prov);

	bad = c.rk;
	bad.key ^= 0x5a5a;
	op_init_flags(&r, 0);
	is_int(write_wait(&c, &r, 0, 100, &bad), -EACCES, "%s: unknown key refused", prov);
	bad = c.rk;
	bad.len += 8192; /* the initiator believes in a longer region */
	op_init_flags(&r, 0);
	is_int(write_wait(&c, &r, c.len, 100, &bad), -ERANGE,
	       "%s: beyond the registration refused at the target", prov);
	op_init_flags(&r, 0);
	is_int(write_wait(&c, &r, 0, 100, &c.rk_ro), -EACCES,
	       "%s: a registration without remote write refused", prov);
	{
		bool zero = true;

		for (size_t i = 0; i < 4096; i++)
			zero &= c.ro[i] == 0;
		ok(zero, "%s: ... and left untouched", prov);
	}

	{
		unsigned char m[8] = { 0x54, 0x44, 1, 1 };

		is_int(tw__chan_send(c.i2t, m, sizeof(m)), -EINVAL,
		       "%s: a user message that looks like a write message is refused", prov);
		m[1] = 0x57; /* an RPC frame */
		is_int(tw__chan_send(c.i2t, m, sizeof(m)), 0, "%s: other messages pass", prov);
	}
	op_init_flags(&r, 0);
	is_int(write_wait(&c, &r, 8, 64, &c.rk), 0, "%s: writes go on after the refusals", prov);
	teardown(&c);
}

/* 4 results: a target that never progresses (no reply: timeout), a target that goes away. */
static void test_silent_and_lost(void)
{
	struct opres r;
	struct conn c;
	bool done;
	uint64_t t0;
	int rc;

	setup(&c, "mem", 300);
	op_init_flags(&r, 0);
	rc = tw__chan_write(c.i2t, &r.op, c.src, 1000, c.mr_src, &c.rk, 0);
	t0 = tw_now_ns();
	while (!r.calls && tw_now_ns() - t0 < 10000000000ull)
		tw__fab_progress(I.fab, 10); /* the target is not progressed: no reply */
	ok(rc == 0 && r.calls == 1 && r.status == -ETIMEDOUT && I.lost == 1,
	   "silent target: the write fails with -ETIMEDOUT (%s), the channel is lost",
	   tw_strerror(r.status));
	tw__fab_progress(T.fab, 0); /* now it serves and replies: nobody waits for that */
	tw__fab_progress(I.fab, 0);
	is_int(r.calls, 1, "the late reply completes nothing twice");
	teardown(&c);

	setup(&c, "mem", 10000);
	op_init_flags(&r, 0);
	rc = tw__chan_write(c.i2t, &r.op, c.src, 1000, c.mr_src, &c.rk, 0);
	tw__chan_close(T.accepted); /* before it served the write */
	done = pump_until(&r.calls);
	ok(rc == 0 && done && r.calls == 1 && r.status < 0, "lost target: the write fails once (%s)",
	   tw_strerror(r.status));
	ok(I.lost == 1, "and the channel is lost");
	teardown(&c);
}

int main(void)
{
	tap_plan(14 * 3 + 4);
	test_basic("mem");
	test_silent_and_lost();
	test_basic("tcp");
	test_basic("shm");
	return tap_exit();
}
