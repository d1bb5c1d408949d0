/*
 * tests/lib/fab_events.h — what a fab's events did, for a fabric test to wait on and inspect;
 * the two requests every test of tests/integration/fab_peer makes (its RKEY, a SUM of its
 * buffer); n channels connected and closed in a row. Header-only: the benches use it too.
 *
 *   static struct fab_rec R;                     // one per fab: the events' arg
 *   struct tw_fab_events ev = fab_rec_events(&R);
 *   tw__fab_open(&cfg, &ev, &R.fab);
 *   ... int before = R.recvs; send ...; fab_progress_until(R.fab, &R.recvs, before + 1, 5000)
 *   ... !strcmp(R.last, "pong") ...
 */
#ifndef TW_TESTS_FAB_EVENTS_H
#define TW_TESTS_FAB_EVENTS_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "fabric/fabric.h"

struct fab_rec {
	struct tw_fab *fab;
	/* Set: messages on any other channel are stale (counted, not kept). */
	struct tw_chan *only;
	struct tw_chan *accepted; /* the last channel accepted */
	int accepts, recvs, lost, stale;
	int lost_err;             /* the last loss: its error and channel */
	struct tw_chan *lost_ch;
	size_t last_len;          /* the last message, cut to sizeof(last) - 1, NUL-terminated */
	char last[70000];
};

static inline void fab_rec_on_accept(void *arg, struct tw_chan *ch)
{
	struct fab_rec *r = arg;

	r->accepted = ch;
	r->accepts++;
}

static inline void fab_rec_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct fab_rec *r = arg;

	if (r->only && ch != r->only) {
		r->stale++;
		return;
	}
	r->last_len = len < sizeof(r->last) - 1 ? len : sizeof(r->last) - 1;
	memcpy(r->last, msg, r->last_len);
	r->last[r->last_len] = '\0';
	r->recvs++;
}

static inline void fab_rec_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct fab_rec *r = arg;

	r->lost++;
	r->lost_err = err;
	r->lost_ch = ch;
}

/* The three events, recording into r (a test replaces the ones it handles itself). */
static inline struct tw_fab_events fab_rec_events(struct fab_rec *r)
{
	return (struct tw_fab_events){ .arg = r, .on_accept = fab_rec_on_accept,
				       .on_recv = fab_rec_on_recv, .on_lost = fab_rec_on_lost };
}

/* Progress fab until *flag >= want or ms milliseconds passed; whether it got there. */
static inline bool fab_progress_until(struct tw_fab *fab, const int *flag, int want, unsigned ms)
{
	uint64_t end = tw_now_ns() + (uint64_t)ms * 1000000u;

	while (*flag < want && tw_now_ns() < end)
		tw__fab_progress(fab, 10);
	return *flag >= want;
}

/* Connects n channels from fab to addr one after the other, closing each at once (shm's
 * address-vector tests): how many connected before the first failure (n: all); that failure's
 * code in *rc_out, 0 when none failed. */
static inline int fab_connect_close(struct tw_fab *fab, const char *addr, int n, int *rc_out)
{
	int i, rc = 0;

	for (i = 0; i < n; i++) {
		struct tw_chan *ch;

		rc = tw__fab_connect(fab, addr, &ch);
		if (rc)
			break;
		tw__chan_close(ch);
	}
	*rc_out = rc;
	return i;
}

/* fab_peer's side of a new channel: the message after the first `before` is its buffer's key
 * ("RKEY addr key len", sent on accept). Whether it came within ms and parsed. */
static inline bool fab_peer_rkey(struct fab_rec *r, int before, struct tw_rkey *rk, unsigned ms)
{
	return fab_progress_until(r->fab, &r->recvs, before + 1, ms) &&
	       sscanf(r->last, "RKEY %" SCNu64 " %" SCNu64 " %" SCNu64, &rk->addr, &rk->key,
		      &rk->len) == 3;
}

/* fab_peer's FNV-1a (fab_pattern.h) of its buffer's [off, off + len), or 0 when it did not
 * answer within 10 s. */
static inline uint64_t fab_peer_sum(struct fab_rec *r, struct tw_chan *ch, uint64_t off,
				    uint64_t len)
{
	char cmd[96];
	uint64_t v = 0;
	int before = r->recvs;

	snprintf(cmd, sizeof(cmd), "SUM %" PRIu64 " %" PRIu64, off, len);
	if (tw__chan_send(ch, cmd, strlen(cmd)) < 0 ||
	    !fab_progress_until(r->fab, &r->recvs, before + 1, 10000) ||
	    sscanf(r->last, "SUM %" SCNx64, &v) != 1)
		return 0;
	return v;
}

#endif
