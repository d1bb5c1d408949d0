/*
 * tests/unit/test_scan_adversarial.c — the scan on corrupted and hostile buffers.
 *
 * Bit flips: every single bit of a closed buffer, then random multi-bit flips and byte
 * changes. A change inside write k's bytes must leave valid_len exactly at the start of
 * write k (the writes before it are intact, nothing of write k or after may be accepted).
 *
 * Hostile buffers: lengths past the end, 0, 0xFFFFFFFF, 2^31; unknown types; flags and
 * reserved bits; checksum entries that close nothing; truncated headers and checksum entries
 * at the very end; every prefix of a valid log; every buffer of 0..20 bytes over a set of
 * byte values; random garbage. Each buffer is an exact-size heap allocation so that ASan
 * (CI builds with -fsanitize=address) reports any read past the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "fabric/util.h"
#include "tap.h"

void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out);

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Scan an exact-size copy with both walks; they must agree. Returns the tw_scan() result. */
static struct tw_scan_result scan_exact(const uint8_t *data, size_t len, size_t *disagree)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct tw_scan_result r, g;

	TAP_REQUIRE(copy, "malloc");
	if (len)
		memcpy(copy, data, len);
	tw_scan(copy, len, &r);
	tw__scan_generic(copy, len, &g);
	free(copy);
	if (g.valid_len != r.valid_len || g.entries != r.entries || g.stop != r.stop ||
	    g.stop_offset != r.stop_offset || g.chain != r.chain ||
	    g.last_checksum != r.last_checksum)
		(*disagree)++;
	return r;
}

struct log {
	uint8_t *buf;
	size_t len;
	int nwrites;
	size_t start[64];     /* start[k]: first byte of write k; start[nwrites] = len */
	uint64_t entries[64]; /* entries before write k */
};

/* A closed buffer: `nwrites` writes of 1..max_entries entries of 0..max_payload bytes. */
static void make_log(struct log *lg, int nwrites, int max_entries, uint32_t max_payload)
{
	size_t cap = 1 << 18;
	uint8_t *tmp = calloc(1, cap);
	struct tw_log_writer w;

	TAP_REQUIRE(tmp, "calloc");
	lg->nwrites = nwrites;
	tw_log_writer_init(&w, tmp, cap);
	for (int k = 0; k < nwrites; k++) {
		int n = 1 + (int)(rnd() % (uint64_t)max_entries);
		size_t off, wlen;

		lg->start[k] = w.pos;
		lg->entries[k] = w.entries;
		for (int i = 0; i < n; i++) {
			uint32_t len = (uint32_t)(rnd() % (max_payload + 1));
			uint8_t pl[4096];

			for (uint32_t b = 0; b < len; b++)
				pl[b] = (uint8_t)rnd();
			TAP_REQUIRE(tw_log_writer_append(&w, pl, len, NULL) == 0, "append");
		}
		tw_log_writer_seal(&w, &off, &wlen);
	}
	lg->start[nwrites] = w.pos;
	lg->entries[nwrites] = w.entries;
	lg->len = w.pos;
	lg->buf = malloc(lg->len); /* exact size */
	TAP_REQUIRE(lg->buf, "malloc");
	memcpy(lg->buf, tmp, lg->len);
	free(tmp);
}

static int write_of(const struct log *lg, size_t byte)
{
	int k = 0;

	while (k + 1 < lg->nwrites && lg->start[k + 1] <= byte)
		k++;
	return k;
}

/* Every single bit of the buffer, one at a time. */
static void single_bit_flips(int nwrites, int max_entries, uint32_t max_payload, const char *what)
{
	struct log lg;
	size_t bad = 0, disagree = 0;
	uint8_t *b;

	make_log(&lg, nwrites, max_entries, max_payload);
	b = lg.buf;
	for (size_t byte = 0; byte < lg.len; byte++) {
		int k = write_of(&lg, byte);

		for (int bit = 0; bit < 8; bit++) {
			struct tw_scan_result r;

			b[byte] ^= (uint8_t)(1u << bit);
			r = scan_exact(b, lg.len, &disagree);
			b[byte] ^= (uint8_t)(1u << bit);
			if (r.valid_len != lg.start[k] || r.entries != lg.entries[k]) {
				if (bad++ < 5)
					tap_diag("flip byte %zu bit %d (write %d at %zu): valid_len %zu "
						 "stop %s at %zu",
						 byte, bit, k, lg.start[k], r.valid_len,
						 tw_scan_stop_str(r.stop), r.stop_offset);
			}
		}
	}
	ok(bad == 0 && disagree == 0,
	   "%s: all %zu single-bit flips stop the scan at the start of the flipped write", what,
	   lg.len * 8);
	free(lg.buf);
}

/* Random sets of 2..16 distinct flipped bits, bursts, and random byte values. */
static void multi_bit_flips(int rounds)
{
	size_t bad = 0, disagree = 0, cases = 0;

	for (int round = 0; round < rounds; round++) {
		struct log lg;

		make_log(&lg, 6, 5, round % 4 ? 200 : 4096);
		for (int t = 0; t < 50; t++) {
			size_t nbits = lg.len * 8, first = SIZE_MAX;
			int nflip = 2 + (int)(rnd() % 15);
			size_t bits[16];
			uint8_t *m = malloc(lg.len);
			struct tw_scan_result r;
			int k;

			TAP_REQUIRE(m, "malloc");
			memcpy(m, lg.buf, lg.len);
			if (t % 3 == 0) {
				/* a burst: nflip consecutive bits */
				size_t at = (size_t)(rnd() % (nbits - (size_t)nflip));

				for (int i = 0; i < nflip; i++)
					bits[i] = at + (size_t)i;
			} else {
				for (int i = 0; i < nflip; i++) {
					bool dup;

					do {
						bits[i] = (size_t)(rnd() % nbits);
						dup = false;
						for (int j = 0; j < i; j++)
							dup |= bits[j] == bits[i];
					} while (dup);
				}
			}
			for (int i = 0; i < nflip; i++) {
				m[bits[i] / 8] ^= (uint8_t)(1u << (bits[i] % 8));
				if (bits[i] / 8 < first)
					first = bits[i] / 8;
			}
			if (t % 5 == 4) {
				/* also a random byte value somewhere after the first flip */
				size_t at = first + (size_t)(rnd() % (lg.len - first));

				m[at] = (uint8_t)rnd();
			}
			k = write_of(&lg, first);
			r = scan_exact(m, lg.len, &disagree);
			cases++;
			if (memcmp(m, lg.buf, lg.len) != 0 &&
			    (r.valid_len != lg.start[k] || r.entries != lg.entries[k])) {
				if (bad++ < 5)
					tap_diag("round %d: %d flips from byte %zu (write %d at %zu): "
						 "valid_len %zu stop %s",
						 round, nflip, first, k, lg.start[k], r.valid_len,
						 tw_scan_stop_str(r.stop));
			}
			free(m);
		}
		free(lg.buf);
	}
	ok(bad == 0 && disagree == 0,
	   "%zu random multi-bit flips, bursts and byte changes: scan stops at the start of "
	   "the first damaged write",
	   cases);
}

/* Every prefix of a valid log (exact-size): valid_len is the last write end inside it. */
static void every_prefix(void)
{
	struct log lg;
	size_t bad = 0, disagree = 0;

	make_log(&lg, 8, 4, 300);
	for (size_t len = 0; len <= lg.len; len++) {
		struct tw_scan_result r = scan_exact(lg.buf, len, &disagree);
		int k = 0;

		while (k < lg.nwrites && lg.start[k + 1] <= len)
			k++;
		/* A cut at an entry boundary ends the buffer ("end"); inside an entry the walk
		 * finds a header or payload that leaves the buffer ("bad-length"). */
		if (r.valid_len != lg.start[k] || r.entries != lg.entries[k] ||
		    (r.stop != TW_SCAN_END && r.stop != TW_SCAN_BAD_LENGTH) ||
		    (len == lg.start[k] && r.stop != TW_SCAN_END))
			if (bad++ < 5)
				tap_diag("prefix %zu: valid_len %zu (want %zu) stop %s", len,
					 r.valid_len, lg.start[k], tw_scan_stop_str(r.stop));
	}
	ok(bad == 0 && disagree == 0,
	   "every prefix 0..%zu of a valid log: valid_len at the last whole write, stop end or "
	   "bad-length",
	   lg.len);
	free(lg.buf);
}

/* A valid 2-write log followed by a crafted tail; the tail's effect on the scan. */
struct tail_case {
	const char *name;
	uint8_t tail[16];
	size_t tail_len;
	enum tw_scan_stop stop;
};

static void crafted_tails(void)
{
	static const struct tail_case cases[] = {
		{ "truncated data header (7 bytes)", { 1, 0, 0, 0, 5, 0, 0 }, 7, TW_SCAN_BAD_LENGTH },
		{ "truncated data header (1 byte)", { 1 }, 1, TW_SCAN_BAD_LENGTH },
		{ "truncated data header, flags set", { 1, 1, 0, 0 }, 4, TW_SCAN_BAD_LENGTH },
		{ "checksum entry truncated (4 bytes)", { 2, 0, 0, 0 }, 4, TW_SCAN_BAD_LENGTH },
		{ "checksum entry truncated (7 bytes)", { 2, 0, 0, 0, 1, 2, 3 }, 7, TW_SCAN_BAD_LENGTH },
		{ "checksum entry closing nothing", { 2, 0, 0, 0, 1, 0, 0, 0 }, 8, TW_SCAN_BAD_HEADER },
		{ "length 0xFFFFFFFF", { 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 }, 12,
		  TW_SCAN_BAD_LENGTH },
		{ "length 2^31", { 1, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0 }, 12, TW_SCAN_BAD_LENGTH },
		{ "length 1 past the end", { 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 }, 12,
		  TW_SCAN_BAD_LENGTH },
		{ "length 0, wrong CRC", { 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 }, 12,
		  TW_SCAN_PAYLOAD_MISMATCH },
		{ "length 0, right CRC, no checksum entry", { 1 }, 12, TW_SCAN_END },
		{ "length 4 exactly to the end, wrong CRC",
		  { 1, 0, 0, 0, 4, 0, 0, 0, 9, 9, 9, 9, 1, 2, 3, 4 }, 16, TW_SCAN_PAYLOAD_MISMATCH },
		{ "type 3", { 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, 12, TW_SCAN_BAD_HEADER },
		{ "type 0xFF", { 0xff, 0xff, 0xff, 0xff }, 4, TW_SCAN_BAD_HEADER },
		{ "reserved bits set", { 1, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0 }, 12,
		  TW_SCAN_BAD_HEADER },
		{ "zero tail", { 0 }, 16, TW_SCAN_ZERO },
		{ "zero byte at the very end", { 0 }, 1, TW_SCAN_ZERO },
	};
	struct log lg;
	size_t disagree = 0;

	make_log(&lg, 2, 3, 50);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct tail_case *c = &cases[i];
		size_t len = lg.len + c->tail_len;
		uint8_t *b = malloc(len);
		struct tw_scan_result r;

		TAP_REQUIRE(b, "malloc");
		memcpy(b, lg.buf, lg.len);
		memcpy(b + lg.len, c->tail, c->tail_len);
		r = scan_exact(b, len, &disagree);
		ok(r.valid_len == lg.len && r.entries == lg.entries[2] && r.stop == c->stop &&
			   r.stop_offset == (c->stop == TW_SCAN_END ? len : lg.len),
		   "tail: %s -> %s (got %s at %zu, valid_len %zu)", c->name,
		   tw_scan_stop_str(c->stop), tw_scan_stop_str(r.stop), r.stop_offset, r.valid_len);
		free(b);
	}
	ok(disagree == 0, "crafted tails: both walks agree");
	free(lg.buf);
}

/* Each header field of each entry of a valid log, set to hostile values. */
static void hostile_fields(void)
{
	struct log lg;
	size_t bad = 0, disagree = 0, cases = 0;

	make_log(&lg, 4, 3, 64);
	for (size_t pos = 0; pos < lg.len;) {
		uint8_t *b = lg.buf + pos;
		int k = write_of(&lg, pos);
		bool data = b[0] == TW_ENTRY_DATA;
		size_t next = pos + (data ? TW_ENTRY_HDR_SIZE + tw_load_le32(b + 4)
					  : TW_CKSUM_ENTRY_SIZE);
		uint8_t save[12];

		memcpy(save, b, data ? 12 : 8);
		/* every type value but the right one */
		for (int t = 0; t < 256; t++) {
			struct tw_scan_result r;

			if (t == b[0])
				continue;
			b[0] = (uint8_t)t;
			r = scan_exact(lg.buf, lg.len, &disagree);
			b[0] = save[0];
			cases++;
			if (r.valid_len != lg.start[k])
				bad++;
		}
		/* each flag and reserved bit */
		for (int bit = 8; bit < 32; bit++) {
			struct tw_scan_result r;

			b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			r = scan_exact(lg.buf, lg.len, &disagree);
			b[bit / 8] = save[bit / 8];
			cases++;
			if (r.valid_len != lg.start[k] || r.stop != TW_SCAN_BAD_HEADER)
				bad++;
		}
		/* lengths: 0, 0xFFFFFFFF, 2^31, remaining, remaining + 1, and +-1..3 */
		if (data) {
			uint32_t len = tw_load_le32(b + 4);
			uint32_t rem = (uint32_t)(lg.len - pos - 12);
			uint32_t vals[] = { 0, 0xFFFFFFFFu, 0x80000000u, rem, rem + 1, len + 1,
					    len + 2, len + 3, len - 1, len - 2, len - 3 };

			for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
				struct tw_scan_result r;

				if (vals[v] == len)
					continue;
				tw_store_le32(b + 4, vals[v]);
				r = scan_exact(lg.buf, lg.len, &disagree);
				cases++;
				if (r.valid_len != lg.start[k])
					bad++;
			}
		}
		memcpy(b, save, data ? 12 : 8);
		pos = next;
	}
	ok(bad == 0 && disagree == 0,
	   "%zu hostile header values (types, flags, reserved, lengths): none accepted", cases);
	free(lg.buf);
}

/* Every buffer of 0..20 bytes over a set of byte values, plus random ones. */
static void tiny_buffers(void)
{
	static const uint8_t vals[] = { 0, 1, 2, 3, 0x80, 0xff };
	size_t bad = 0, disagree = 0, cases = 0;
	uint8_t b[20];

	/* Exhaustive over vals^len for len 0..6. */
	for (size_t len = 0; len <= 6; len++) {
		size_t total = 1;

		for (size_t i = 0; i < len; i++)
			total *= sizeof(vals);
		for (size_t code = 0; code < total; code++) {
			size_t c = code;
			struct tw_scan_result r;

			for (size_t i = 0; i < len; i++) {
				b[i] = vals[c % sizeof(vals)];
				c /= sizeof(vals);
			}
			r = scan_exact(b, len, &disagree);
			cases++;
			if (r.valid_len != 0 || r.stop_offset > len)
				bad++;
		}
	}
	/* Random over 7..20, biased to the interesting bytes. */
	for (int round = 0; round < 20000; round++) {
		size_t len = 7 + (size_t)(rnd() % 14);
		struct tw_scan_result r;

		for (size_t i = 0; i < len; i++)
			b[i] = (rnd() & 1) ? vals[rnd() % sizeof(vals)] : (uint8_t)rnd();
		r = scan_exact(b, len, &disagree);
		cases++;
		/* A write needs at least 20 bytes (12-byte header + 8-byte checksum entry). */
		if (r.stop_offset > len || (len < 20 && r.valid_len != 0) || r.valid_len > len)
			bad++;
	}
	ok(bad == 0 && disagree == 0, "%zu buffers of 0..20 bytes: nothing valid below 20 bytes",
	   cases);
	{
		struct tw_scan_result r, g;

		tw_scan(NULL, 0, &r);
		tw__scan_generic(NULL, 0, &g);
		ok(r.valid_len == 0 && r.stop == TW_SCAN_END && r.stop_offset == 0 &&
			   g.valid_len == 0 && g.stop == TW_SCAN_END,
		   "NULL buffer of length 0: empty, stop end");
	}
}

/* Random garbage and half-valid buffers of random sizes: invariants only (and ASan). */
static void garbage(int rounds)
{
	size_t bad = 0, disagree = 0;

	for (int round = 0; round < rounds; round++) {
		size_t len = (size_t)(rnd() % 4096);
		uint8_t *b = malloc(len ? len : 1);
		struct tw_scan_result r;

		TAP_REQUIRE(b, "malloc");
		for (size_t i = 0; i < len; i++) {
			/* mostly small values so that types 1/2 and small lengths are common */
			uint64_t x = rnd();

			b[i] = (x & 3) ? (uint8_t)(x >> 8) % 4 : (uint8_t)(x >> 8);
		}
		r = scan_exact(b, len, &disagree);
		if (r.valid_len > len || r.stop_offset > len || r.stop_offset < r.valid_len)
			bad++;
		free(b);
	}
	ok(bad == 0 && disagree == 0, "%d random buffers: offsets in range, walks agree", rounds);
}

/* Iterator on hostile input: never reads past it->len, never loops. */
static void iterator_hostile(void)
{
	size_t bad = 0;

	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)(rnd() % 64);
		uint8_t *b = malloc(len ? len : 1);
		struct tw_entry_iter it;
		const void *pl;
		uint32_t plen;
		size_t off;
		int rc, steps = 0;

		TAP_REQUIRE(b, "malloc");
		for (size_t i = 0; i < len; i++)
			b[i] = (rnd() & 1) ? (uint8_t)(rnd() % 3) : (uint8_t)rnd();
		it = (struct tw_entry_iter){ .buf = b, .len = len, .pos = 0 };
		while ((rc = tw_entry_next(&it, &pl, &plen, &off)) == 1) {
			if (off + 12 + plen > len || ++steps > 64)
				bad++;
			if (steps > 64)
				break;
		}
		if (rc != 0 && rc != -TW_ECORRUPT)
			bad++;
		free(b);
	}
	{
		uint8_t b[4] = { 0 };
		struct tw_entry_iter it = { .buf = b, .len = 4, .pos = 9 };

		if (tw_entry_next(&it, NULL, NULL, NULL) != 0)
			bad++;
	}
	ok(bad == 0, "iterator on random input stays inside the buffer");
}

int main(void)
{
	bool lng = tap_long_mode();

	rng_state = tap_seed();
	single_bit_flips(6, 4, 48, "small entries");
	single_bit_flips(2, 2, lng ? 4096 : 600, "large payloads");
	multi_bit_flips(lng ? 2000 : 40);
	every_prefix();
	crafted_tails();
	hostile_fields();
	tiny_buffers();
	garbage(lng ? 200000 : 5000);
	iterator_hostile();
	tap_done_testing();
	return tap_exit();
}
