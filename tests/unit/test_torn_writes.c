/*
 * tests/unit/test_torn_writes.c — exhaustive torn-write test of the scan.
 *
 * A buffer holds several writes (each 1..16 random entries of 0..4 KiB plus its checksum
 * entry), built by the writer into an exact-size heap buffer. For every write w, for every cut
 * point c (0..size of w, one byte at a time), we model the backup after the primary crashed
 * while w was being placed: the first c bytes of w, in some placement order, hold their value,
 * the others are still zero (buffers are pre-zeroed). Placement orders:
 *   asc     increasing addresses (what the paper assumes of RDMA NICs: a prefix of w landed);
 *   desc    decreasing addresses (a suffix landed: memcpy implementations that copy backwards);
 *   chunks  64-byte chunks (aligned to the buffer, i.e. cache lines) in a random order, bytes
 *           ascending inside a chunk: any subset of chunks, plus a partly written one.
 * Each order is run twice: with nothing after w, and with write w+1 fully landed (pipelined
 * writes: the next write may complete before the torn one).
 *
 * Expected: if every byte of w that differs from zero has landed (w "landed whole", which
 * includes cuts whose missing bytes are zero in w itself), the scan accepts w (and w+1 when it
 * landed); otherwise valid_len is exactly the start of w and `entries` the entries before w:
 * w+1 must not be accepted either.
 *
 * asc and desc are detected with certainty (see docs/log-format.md §7); chunks relies on the
 * data header checks (15 bits), the payload CRCs and the header chain (32 bits each): a random
 * false accept has odds around 2^-32 per case, so the seed is printed to reproduce any failure.
 *
 * Default run: a few seconds (also under ASan). TW_LONG=1: more than 1,000,000 cases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "rng.h"
#include "tear.h"
#include "tap.h"

#define MAX_WRITES 16

static uint32_t log_seed; /* tl_log_seed(): TW_LOG_SEED, 0 by default */

struct params {
	int buffers;
	int min_writes, max_writes;
	int max_entries;     /* entries per write: 1..max_entries */
	uint32_t max_large;  /* upper bound of a "large" payload */
	int large_percent;   /* share of payloads drawn from 0..max_large instead of 0..128 */
};

struct layout {
	int nwrites;
	size_t start[MAX_WRITES + 1]; /* start[i]..start[i+1]: write i */
	uint64_t entries[MAX_WRITES + 1]; /* entries before write i */
	size_t len;                   /* buffer length (end of the last write + zero tail) */
};


struct stats {
	uint64_t cases;
	uint64_t whole;   /* cases where w counted as landed whole */
	uint64_t failures;
};

static uint32_t payload_len(const struct params *p)
{
	if ((int)(rnd() % 100) < p->large_percent)
		return (uint32_t)(rnd() % (p->max_large + 1));
	return (uint32_t)(rnd() % 129);
}

/* Builds a random buffer with the writer. Returns the exact-size heap buffer. */
static uint8_t *build(const struct params *p, struct layout *lay)
{
	size_t cap = 0, sizes[MAX_WRITES][17];
	int counts[MAX_WRITES];
	struct tw_log_writer w;
	uint8_t *buf, *src;

	lay->nwrites = p->min_writes + (int)(rnd() % (uint64_t)(p->max_writes - p->min_writes + 1));
	for (int i = 0; i < lay->nwrites; i++) {
		counts[i] = 1 + (int)(rnd() % (uint64_t)p->max_entries);
		cap += TW_CKSUM_ENTRY_SIZE;
		for (int k = 0; k < counts[i]; k++) {
			sizes[i][k] = payload_len(p);
			cap += TW_ENTRY_HDR_SIZE + sizes[i][k];
		}
	}
	/* Sometimes the buffer ends exactly after the last write (scan stops "end"), sometimes
	 * with a zero tail ("zero"). */
	lay->len = cap + ((rnd() & 1) ? 0 : (size_t)(rnd() % 100));
	buf = calloc(1, lay->len);
	src = malloc(p->max_large + 1);
	TAP_REQUIRE(buf && src, "calloc");
	for (uint32_t i = 0; i <= p->max_large; i++)
		src[i] = (uint8_t)rnd();
	tw_log_writer_init_seeded(&w, buf, lay->len, log_seed);
	for (int i = 0; i < lay->nwrites; i++) {
		size_t off, wlen;

		lay->start[i] = w.pos;
		lay->entries[i] = w.entries;
		for (int k = 0; k < counts[i]; k++) {
			/* Some payloads with zero runs, so "missing bytes that are zero" occurs. */
			const uint8_t *pl = src;
			uint8_t *tmp = NULL;

			if (rnd() % 4 == 0 && sizes[i][k]) {
				tmp = calloc(1, sizes[i][k]);
				TAP_REQUIRE(tmp, "calloc");
				for (size_t b = 0; b < sizes[i][k]; b += 1 + rnd() % 96)
					tmp[b] = (uint8_t)rnd();
				pl = tmp;
			}
			TAP_REQUIRE(tw_log_writer_append(&w, pl, (uint32_t)sizes[i][k], NULL) == 0,
				    "append");
			free(tmp);
		}
		TAP_REQUIRE(tw_log_writer_seal(&w, &off, &wlen) == 0 && off == lay->start[i],
			    "seal");
	}
	lay->start[lay->nwrites] = w.pos;
	lay->entries[lay->nwrites] = w.entries;
	free(src);
	return buf;
}

/* Placement order of the bytes of [s, e): perm[i] is the offset (from s) placed i-th. */

/*
 * One group: write w torn in order o, with (next=1) or without write w+1 landed, at every cut.
 */
static void run_group(const uint8_t *intact, uint8_t *model, const struct layout *lay, int w,
		      enum tl_order o, int next, size_t *perm, struct stats *st, int bufno)
{
	size_t s = lay->start[w], e = lay->start[w + 1], n = e - s;
	size_t missing = 0, whole_end;
	uint64_t whole_entries;

	memcpy(model, intact, s);
	memset(model + s, 0, lay->len - s);
	if (next) {
		memcpy(model + e, intact + e, lay->start[w + 2] - e);
		whole_end = lay->start[w + 2];
		whole_entries = lay->entries[w + 2];
	} else {
		whole_end = e;
		whole_entries = lay->entries[w + 1];
	}
	for (size_t i = s; i < e; i++)
		missing += intact[i] != 0;
	tl_write_order(o, s, e, perm);

	for (size_t c = 0; c <= n; c++) {
		struct tw_scan_result r;
		bool whole;
		size_t want_len;
		uint64_t want_entries;

		if (c > 0) {
			size_t b = s + perm[c - 1];

			model[b] = intact[b];
			missing -= intact[b] != 0;
		}
		whole = missing == 0;
		want_len = whole ? whole_end : s;
		want_entries = whole ? whole_entries : lay->entries[w];
		tw_scan_seeded(model, lay->len, log_seed, &r);
		st->cases++;
		st->whole += whole;
		if (r.valid_len != want_len || r.entries != want_entries) {
			if (st->failures++ < 10)
				tap_diag("FAIL buffer %d write %d [%zu,%zu) order %s%s cut %zu/%zu: "
					 "valid_len %zu (want %zu) entries %llu (want %llu) stop %s "
					 "at %zu",
					 bufno, w, s, e, tl_order_name[o], next ? " +next" : "", c, n,
					 r.valid_len, want_len, (unsigned long long)r.entries,
					 (unsigned long long)want_entries, tw_scan_stop_str(r.stop),
					 r.stop_offset);
		}
	}
}

static void run(const struct params *p, struct stats *total)
{
	for (int bufno = 0; bufno < p->buffers; bufno++) {
		struct layout lay;
		uint8_t *intact = build(p, &lay);
		uint8_t *model = malloc(lay.len);
		size_t *perm = malloc(lay.len * sizeof(*perm));
		struct stats st = { 0 };
		struct tw_scan_result r;

		TAP_REQUIRE(model && perm, "malloc");
		tw_scan_seeded(intact, lay.len, log_seed, &r);
		TAP_REQUIRE(r.valid_len == lay.start[lay.nwrites], "intact buffer does not scan whole");
		for (int w = 0; w < lay.nwrites; w++)
			for (int o = 0; o < TL_ORDER_COUNT; o++)
				for (int next = 0; next <= (w + 1 < lay.nwrites); next++)
					run_group(intact, model, &lay, w, (enum tl_order)o, next, perm,
						  &st, bufno);
		ok(st.failures == 0,
		   "buffer %d: %d writes, %zu bytes: %llu torn-write cases (%llu landed whole), "
		   "asc/desc/chunks x (alone, next landed)",
		   bufno, lay.nwrites, lay.len, (unsigned long long)st.cases,
		   (unsigned long long)st.whole);
		total->cases += st.cases;
		total->whole += st.whole;
		total->failures += st.failures;
		free(intact);
		free(model);
		free(perm);
	}
}

int main(void)
{
	/* Small payloads and few entries: every cut of every write, quickly, even under ASan. */
	static const struct params quick = { 40, 2, 4, 4, 1024, 10 };
	/* The full distribution: 1..16 entries per write, payloads up to 4 KiB. */
	static const struct params big = { 8, 2, 3, 16, 4096, 25 };
	static const struct params full_small = { 150, 3, 6, 8, 512, 20 };
	static const struct params full_big = { 60, 3, 5, 16, 4096, 30 };
	struct stats total = { 0 };
	bool lng = tap_long_mode();

	rng_state = tap_seed();
	log_seed = tl_log_seed();
	if (lng) {
		run(&full_small, &total);
		run(&full_big, &total);
	} else {
		run(&quick, &total);
		run(&big, &total);
	}
	tap_diag("torn-write cases: %llu (%llu landed whole), %s mode",
		 (unsigned long long)total.cases, (unsigned long long)total.whole,
		 lng ? "long" : "default");
	if (lng)
		ok(total.cases >= 1000000, "long mode covers at least 1,000,000 cases (%llu)",
		   (unsigned long long)total.cases);
	tap_done_testing();
	return tap_exit();
}
