/*
 * tests/unit/test_backup_reuse.c — one backup buffer reused, never zeroed between uses, for many
 * segments of several logs, each use ending in a torn write (docs/log-format.md §7, "Reuse
 * without zeroing"). End to end: an in-process backup (tw_backup over the "mem" fabric) with a
 * pool of ONE buffer, a client writing with one-sided writes (tests/lib/twd_client.c), torn
 * writes injected with tw__mem_inject, then the backup's listing (its seeded scan of the open
 * buffer), tw_recover() (read grant, one-sided reads, verification with the listed seed,
 * RecoveredOffset closing the copy, flush to a version-4 segment file) and tw_admin_delete(), which
 * hands the buffer back for the next use as it is.
 *
 * The test keeps a shadow of the buffer's bytes (what every write, whole or torn, put there),
 * so it knows exactly which writes of a use landed whole (a torn write whose missing bytes
 * happen to equal the stale ones landed whole too) and requires that the listing and the
 * recovery give exactly those: no stale entry of an earlier use may ever be accepted. Uses are
 * of four kinds:
 *   fresh     new seed, new layout; the tear is in the last write;
 *   same      new seed, the previous use's layout and payloads, torn early: the stale writes
 *             after the tear hold exactly the data entries this use would have written next
 *             (they pass their header checks and payload CRCs) and only the seed rejects them;
 *   repeat    the previous use's seed, layout and payloads, torn early: the stale bytes would
 *             validate, so the backup must zero the buffer first (stats: buffers_zeroed);
 *   unseeded  seed 0, a 1.1 primary: the backup must zero the buffer first.
 * 400 uses (4,000 with TW_LONG=1).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/recovery.h>

#include "proto/tailwind.pb-c.h"
#include "rng.h"
#include "tap.h"
#include "tlog.h"
#include "tmpdir.h"
#include "tbackup.h"
#include "twd_client.h"

#define BUF (32 * 1024)
#define LOGS 3
#define MAXW 10
#define LEN_MAX 400

enum kind { K_FRESH, K_SAME, K_REPEAT, K_UNSEEDED, K_COUNT };
static const char *const kind_name[K_COUNT] = { "fresh", "same", "repeat", "unseeded" };

/* A use's writes: write w holds n[w] entries of len[w] bytes with payload pattern pseed[w]. */
struct plan {
	unsigned nw;
	unsigned n[MAXW];
	uint32_t len[MAXW];
	uint32_t pseed[MAXW];
};

/* What recovery must deliver: the first `writes` writes of plan p. */
struct expect {
	const struct plan *p;
	unsigned writes;
	unsigned w, i;
	uint64_t got, bad;
	char why[200];
};

static struct tbackup bk;
static char root[128];
static uint8_t shadow[BUF]; /* the backup buffer's bytes, as the test knows them */

static uint32_t fresh_seed(uint32_t avoid)
{
	for (;;) {
		uint32_t s = (uint32_t)rnd();

		if (s != 0 && s != avoid)
			return s;
	}
}

static void plan_random(struct plan *p)
{
	p->nw = 2 + (unsigned)(rnd() % (MAXW - 1));
	for (unsigned w = 0; w < p->nw; w++) {
		p->n[w] = 1 + (unsigned)(rnd() % 4);
		/* Mostly short entries; sometimes empty ones (20-byte writes). */
		p->len[w] = rnd() % 8 == 0 ? 0 : (uint32_t)(rnd() % (LEN_MAX + 1));
		p->pseed[w] = (uint32_t)rnd();
	}
}

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct expect *x = arg;
	uint8_t want[LEN_MAX];

	while (x->w < x->writes && x->i == x->p->n[x->w]) {
		x->w++;
		x->i = 0;
	}
	if (x->w == x->writes) {
		if (x->bad++ == 0)
			snprintf(x->why, sizeof(x->why), "entry %" PRIu64 " (offset %" PRIu64
				 ", %u bytes) is past the expected log: a stale or torn entry "
				 "accepted", e->index, e->offset, e->len);
		return 0;
	}
	twc_fill(want, x->p->len[x->w], x->p->pseed[x->w], x->i);
	if (e->len != x->p->len[x->w] || memcmp(e->data, want, e->len) != 0) {
		if (x->bad++ == 0)
			snprintf(x->why, sizeof(x->why), "entry %" PRIu64 " (offset %" PRIu64
				 ") is not entry %u of write %u", e->index, e->offset, x->i, x->w);
		return 0;
	}
	x->i++;
	x->got++;
	return 0;
}

static uint64_t zeroed_count(void)
{
	struct tw_backup_stats st;

	tw_backup_get_stats(bk.b, &st);
	return st.buffers_zeroed;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Open (log, seg) at epoch *ep, retrying while the only buffer is still in its flush
 * (RESOURCE_EXHAUSTED) and moving past a fence. Deadline: 60 s. */
static int open_retry(struct twc *c, uint64_t log_id, uint64_t seg, uint64_t *ep)
{
	uint64_t deadline = now_ns() + 60ull * 1000000000u;

	for (;;) {
		int rc = twc_open(c, log_id, seg, *ep, 0, BUF);

		if (rc != -TW_EREFUSED && rc != -TW_EFENCED)
			return rc;
		if (now_ns() > deadline)
			return rc;
		if (rc == -TW_EFENCED) {
			(*ep)++;
			continue;
		}
		rc = tw__fab_progress(c->fab, 1); /* up to 1 ms: the flusher frees the buffer */
		if (rc < 0)
			return rc;
	}
}

int main(void)
{
	unsigned uses = tap_long_mode() ? 4000 : 400;
	unsigned per_kind[K_COUNT] = { 0 }, ok_kind[K_COUNT] = { 0 };
	uint64_t next_seg[LOGS] = { 0 }, epoch[LOGS] = { 1, 1, 1 };
	uint64_t zero_expect = 0, list_bad = 0, stale_after = 0, torn_whole = 0;
	struct plan plans[2];
	struct plan *prev = &plans[0], *cur = &plans[1];
	uint32_t prev_seed = 0;
	bool buf_zeroed = true, have_prev = false;
	char first_fail[700] = "";

	rng_state = tap_seed();
	tap_plan(7);
	tmpdir_make(root, sizeof(root), NULL, "tw-reuse");
	tbackup_start(&bk, root, 0, "mem", 1, BUF, 0);

	for (unsigned u = 0; u < uses; u++) {
		unsigned li = (unsigned)(rnd() % LOGS);
		uint64_t log_id = 0x7e00 + li, seg = next_seg[li]++;
		enum kind k = (enum kind)(rnd() % K_COUNT);
		struct tw_recover_config cfg;
		struct tw_recover_result res;
		struct twc_info info[2];
		struct expect x;
		struct twc c;
		unsigned tear_at, whole;
		uint64_t want_len = 0, want_entries = 0;
		uint32_t seed;
		char err[300];
		int rc, n;

		if (!have_prev && (k == K_SAME || k == K_REPEAT))
			k = K_FRESH;
		if (k == K_SAME || k == K_REPEAT) {
			*cur = *prev;
			/* torn early: stale writes follow the tear */
			tear_at = (unsigned)(rnd() % (cur->nw - 1));
		} else {
			plan_random(cur);
			tear_at = cur->nw - 1;
		}
		seed = k == K_UNSEEDED ? 0 : k == K_REPEAT ? prev_seed : fresh_seed(prev_seed);
		if (!buf_zeroed && (seed == 0 || seed == prev_seed)) {
			/* The backup must zero the buffer before this use. */
			memset(shadow, 0, sizeof(shadow));
			zero_expect++;
		}
		per_kind[k]++;

		memset(&c, 0, sizeof(c));
		rc = twc_connect(&c, "mem", bk.addr);
		TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
		c.chain_seed = seed;
		TAP_REQUIRE(twc_seg_init(&c, BUF) == 0, "local segment");
		rc = open_retry(&c, log_id, seg, &epoch[li]);
		TAP_REQUIRE(rc == 0, "use %u: open log %" PRIx64 " segment %" PRIu64 " epoch %"
			    PRIu64 ": %s (%s)", u, log_id, seg, epoch[li], tw_strerror(rc),
			    tw__rpc_client_errmsg(c.rpc));
		buf_zeroed = false;

		/* Whole writes, then the torn one (the channel is lost with it). */
		whole = 0;
		for (unsigned w = 0; w <= tear_at; w++) {
			size_t off = c.w.pos;
			struct tw_mem_fault f = { TW_MEM_FAULT_NONE, 0, 0 };
			size_t wlen;

			if (w == tear_at) {
				size_t len = tw_log_write_size(cur->n[w], cur->len[w]);

				if (rnd() % 2) {
					f.kind = TW_MEM_FAULT_PREFIX;
					f.prefix = (size_t)(rnd() % len);
				} else {
					unsigned chunks = (unsigned)((len + 63) / 64);
					uint64_t all = chunks >= 64 ? ~0ull : (1ull << chunks) - 1;

					f.kind = TW_MEM_FAULT_CHUNKS;
					f.chunk_mask = rnd() & all & ~(1ull << (rnd() % chunks));
				}
				TAP_REQUIRE(tw__mem_inject(c.ch, &f) == 0, "inject");
			}
			rc = twc_write(&c, cur->n[w], cur->len[w], cur->pseed[w]);
			wlen = c.w.pos - off;
			if (w < tear_at) {
				TAP_REQUIRE(rc == 0, "use %u write %u: %s", u, w, tw_strerror(rc));
				memcpy(shadow + off, c.seg + off, wlen);
				whole++;
				want_len = c.w.pos;
				want_entries += cur->n[w];
				continue;
			}
			/* Apply the tear to the shadow as the mem fabric applied it. */
			if (f.kind == TW_MEM_FAULT_PREFIX) {
				memcpy(shadow + off, c.seg + off, f.prefix < wlen ? f.prefix : wlen);
			} else {
				for (size_t i = 0; i < 64 && i * 64 < wlen; i++)
					if (f.chunk_mask & (1ull << i))
						memcpy(shadow + off + i * 64, c.seg + off + i * 64,
						       wlen - i * 64 < 64 ? wlen - i * 64 : 64);
			}
			if (memcmp(shadow + off, c.seg + off, wlen) == 0) {
				/* Every byte that differed from the stale one landed: whole. */
				torn_whole++;
				whole++;
				want_len = c.w.pos;
				want_entries += cur->n[w];
			}
		}
		twc_close(&c);
		if (whole < cur->nw)
			stale_after += k == K_SAME; /* stale data entries follow what must be kept */

		/* The backup's own scan of the open buffer (ListSegments). */
		memset(&c, 0, sizeof(c));
		TAP_REQUIRE(twc_connect(&c, "mem", bk.addr) == 0, "connect for the listing");
		n = twc_list(&c, log_id, false, info, 2);
		twc_close(&c);
		if (n != 1 || info[0].state != TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN ||
		    info[0].valid_len != want_len || info[0].entries != want_entries) {
			if (list_bad++ == 0)
				snprintf(first_fail, sizeof(first_fail), "use %u (%s, seed 0x%08x): "
					 "listing n=%d valid %" PRIu64 " entries %" PRIu64 ", want %"
					 PRIu64 " and %" PRIu64, u, kind_name[k], seed, n,
					 n > 0 ? info[0].valid_len : 0, n > 0 ? info[0].entries : 0,
					 want_len, want_entries);
		}

		/* Recovery: fetch, verify with the listed seed, deliver, close the copy. */
		tlog_recover_config(&cfg, "mem", (const char *[]){ bk.addr }, 1, log_id);
		memset(&x, 0, sizeof(x));
		x.p = cur;
		x.writes = whole;
		rc = tw_recover(&cfg, check_cb, &x, &res, err, sizeof(err));
		if (rc == 0 && x.bad == 0 && x.got == want_entries && res.copies_corrupt == 0) {
			ok_kind[k]++;
		} else if (!first_fail[0]) {
			snprintf(first_fail, sizeof(first_fail), "use %u (%s, seed 0x%08x, torn write "
				 "%u of %u): recovery %s%s%s, %" PRIu64 " of %" PRIu64 " entries%s%s",
				 u, kind_name[k], seed, tear_at, cur->nw, tw_strerror(rc),
				 rc ? ": " : "", rc ? err : "", x.got, want_entries,
				 x.bad ? ": " : "", x.why);
		}
		TAP_REQUIRE(rc == 0, "use %u: recovery: %s: %s", u, tw_strerror(rc), err);
		/* Drop the log's segment: its buffer returns to the pool as it is. */
		rc = tw_admin_delete(&cfg, NULL, err, sizeof(err));
		TAP_REQUIRE(rc == 0, "use %u: delete log %" PRIx64 ": %s: %s", u, log_id,
			    tw_strerror(rc), err);
		epoch[li] = res.epoch + 2;
		prev_seed = seed;
		{
			struct plan *t = prev;

			prev = cur;
			cur = t;
		}
		have_prev = true;
	}

	if (first_fail[0])
		tap_diag("first failure: %s", first_fail);
	tap_diag("uses: %u fresh, %u same, %u repeat, %u unseeded; %" PRIu64 " torn writes "
		 "landed whole over equal stale bytes; %" PRIu64 " same-layout uses with stale "
		 "entries after the tear", per_kind[K_FRESH], per_kind[K_SAME], per_kind[K_REPEAT],
		 per_kind[K_UNSEEDED], torn_whole, stale_after);
	is_int((int)list_bad, 0, "%u uses of one buffer: the backup's scan of every open copy "
	       "found exactly the writes that landed whole", uses);
	for (int k = 0; k < K_COUNT; k++)
		ok(ok_kind[k] == per_kind[k] && per_kind[k] > 0, "%s uses: recovery delivered "
		   "exactly the whole writes, no stale or torn entry (%u of %u)", kind_name[k],
		   ok_kind[k], per_kind[k]);
	ok(stale_after > uses / 20, "same-layout uses put stale data entries right after the "
	   "kept prefix (%" PRIu64 "): only the seed rejects them", stale_after);
	is_int((int)(zeroed_count() - zero_expect), 0, "the backup zeroed the buffer exactly for the "
	       "%" PRIu64 " unseeded and repeated-seed opens, never for a fresh seed", zero_expect);
	tbackup_stop(&bk);
	tmpdir_remove(root);
	return tap_exit();
}
