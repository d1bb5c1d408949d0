/*
 * tests/unit/test_scan_adversarial.c — the scan on corrupted and hostile buffers.
 *
 * Bit flips: every single bit of a closed buffer, then every pair of bits inside one header
 * (data header or checksum entry), then random multi-bit flips and byte changes. A change
 * inside write k's bytes must leave valid_len exactly at the start of write k (the writes
 * before it are intact, nothing of write k or after may be accepted). For single flips and
 * pairs inside one header, detection is certain (docs/log-format.md §7), and the tests check
 * the mechanism, not just the outcome: the walk stops AT the damaged entry, for the reason
 * its field dictates (a damaged length never gets used).
 *
 * Hostile buffers: lengths past the end, 0, 0xFFFFFFFF, 2^31 (with a valid header check, so
 * the bounds checks are reached); unknown types; flags, header check and reserved bits;
 * checksum entries that close nothing; truncated headers and checksum entries at the very end;
 * every prefix of a valid log; every buffer of 0..20 bytes over a set of byte values; random
 * garbage. Each buffer is an exact-size heap allocation so that ASan (CI builds with
 * -fsanitize=address) reports any read past the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"
#include "log_ref.h"
#include "rng.h"
#include "tear.h"
#include "tap.h"

void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out);
void tw__scan_generic_seeded(const void *buf, size_t len, uint32_t seed,
			     struct tw_scan_result *out);

static uint32_t log_seed; /* tl_log_seed(): TW_LOG_SEED, 0 by default */

/* Scan an exact-size copy with both walks; they must agree. Returns the tw_scan() result. */
static struct tw_scan_result scan_exact(const uint8_t *data, size_t len, size_t *disagree)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct tw_scan_result r, g;

	TAP_REQUIRE(copy, "malloc");
	if (len)
		memcpy(copy, data, len);
	tw_scan_seeded(copy, len, log_seed, &r);
	tw__scan_generic_seeded(copy, len, log_seed, &g);
	free(copy);
	if (g.valid_len != r.valid_len || g.entries != r.entries || g.stop != r.stop ||
	    g.stop_offset != r.stop_offset || g.chain != r.chain ||
	    g.last_checksum != r.last_checksum)
		(*disagree)++;
	return r;
}

/*
 * Walk b[0..len) the way the scan does and fix the check of every data header it reaches, so
 * that random bytes get past the header check and exercise the length and CRC paths.
 */
static void fix_reachable(uint8_t *b, size_t len, bool clear_flags)
{
	size_t pos = 0;

	while (pos < len) {
		size_t rem = len - pos;

		if (b[pos] == TW_ENTRY_DATA && rem >= TW_ENTRY_HDR_SIZE) {
			uint32_t l;

			if (clear_flags)
				b[pos + 1] = 0;
			ref_set_hcheck(b + pos);
			l = tw_load_le32(b + pos + 4);
			if (l > rem - TW_ENTRY_HDR_SIZE)
				return;
			pos += TW_ENTRY_HDR_SIZE + l;
		} else if (b[pos] == TW_ENTRY_CHECKSUM && rem >= TW_CKSUM_ENTRY_SIZE) {
			pos += TW_CKSUM_ENTRY_SIZE;
		} else {
			return;
		}
	}
}

struct log {
	uint8_t *buf;
	size_t len;
	int nwrites;
	size_t start[64];     /* start[k]: first byte of write k; start[nwrites] = len */
	uint64_t entries[64]; /* entries before write k */
	int nentries;         /* data and checksum entries */
	size_t ent_off[1024]; /* offset of each entry, and one past the end */
};

/* A closed buffer: `nwrites` writes of 1..max_entries entries of 0..max_payload bytes. */
static void make_log(struct log *lg, int nwrites, int max_entries, uint32_t max_payload)
{
	size_t cap = 1 << 18;
	uint8_t *tmp = calloc(1, cap);
	struct tw_log_writer w;

	TAP_REQUIRE(tmp, "calloc");
	lg->nwrites = nwrites;
	tw_log_writer_init_seeded(&w, tmp, cap, log_seed);
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
	lg->nentries = 0;
	for (size_t pos = 0; pos < lg->len;) {
		TAP_REQUIRE(lg->nentries < 1023, "too many entries");
		lg->ent_off[lg->nentries++] = pos;
		pos += tmp[pos] == TW_ENTRY_DATA ? TW_ENTRY_HDR_SIZE + tw_load_le32(tmp + pos + 4)
						 : TW_CKSUM_ENTRY_SIZE;
	}
	lg->ent_off[lg->nentries] = lg->len;
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

/* Index of the entry holding byte `byte`. */
static int entry_of(const struct log *lg, size_t byte)
{
	int e = 0;

	while (e + 1 < lg->nentries && lg->ent_off[e + 1] <= byte)
		e++;
	return e;
}

/*
 * The stop that a single flipped bit at `byte` (inside entry e, original bytes `orig`) must
 * cause, with certainty: the walk stops at entry e itself.
 *   data header type byte: 1 -> 0 "zero", anything else "bad-header" (2 is two bits away);
 *   flags, check: "bad-header"; length, payload_crc: "bad-header" (the check covers them);
 *   payload: "payload-mismatch" (a CRC detects every single-bit error);
 *   checksum entry type: 2 -> 0 "zero", else "bad-header"; flags, reserved: "bad-header";
 *   value: "chain-mismatch" (compared exactly with the chain).
 */
static enum tw_scan_stop single_flip_stop(const uint8_t *orig, size_t byte, uint8_t flipped,
					  size_t e_off)
{
	size_t rel = byte - e_off;

	if (rel == 0)
		return flipped == 0 ? TW_SCAN_ZERO : TW_SCAN_BAD_HEADER;
	if (orig[e_off] == TW_ENTRY_DATA)
		return rel < TW_ENTRY_HDR_SIZE ? TW_SCAN_BAD_HEADER : TW_SCAN_PAYLOAD_MISMATCH;
	return rel < 4 ? TW_SCAN_BAD_HEADER : TW_SCAN_CHAIN_MISMATCH;
}

/*
 * Every single bit of the buffer, one at a time: valid_len at the start of the flipped write,
 * and the walk stops at the flipped entry for the reason that field dictates.
 */
static void single_bit_flips(int nwrites, int max_entries, uint32_t max_payload, const char *what)
{
	struct log lg;
	size_t bad = 0, disagree = 0, where = 0;
	uint8_t *b, *orig;

	make_log(&lg, nwrites, max_entries, max_payload);
	b = lg.buf;
	orig = malloc(lg.len);
	TAP_REQUIRE(orig, "malloc");
	memcpy(orig, b, lg.len);
	for (size_t byte = 0; byte < lg.len; byte++) {
		int k = write_of(&lg, byte), e = entry_of(&lg, byte);

		for (int bit = 0; bit < 8; bit++) {
			struct tw_scan_result r;
			enum tw_scan_stop want;

			b[byte] ^= (uint8_t)(1u << bit);
			want = single_flip_stop(orig, byte, b[byte], lg.ent_off[e]);
			r = scan_exact(b, lg.len, &disagree);
			b[byte] ^= (uint8_t)(1u << bit);
			if (r.valid_len != lg.start[k] || r.entries != lg.entries[k]) {
				if (bad++ < 5)
					tap_diag("flip byte %zu bit %d (write %d at %zu): valid_len %zu "
						 "stop %s at %zu",
						 byte, bit, k, lg.start[k], r.valid_len,
						 tw_scan_stop_str(r.stop), r.stop_offset);
			} else if (r.stop_offset != lg.ent_off[e] || r.stop != want) {
				if (where++ < 5)
					tap_diag("flip byte %zu bit %d (entry at %zu): stop %s at %zu, "
						 "want %s there",
						 byte, bit, lg.ent_off[e], tw_scan_stop_str(r.stop),
						 r.stop_offset, tw_scan_stop_str(want));
			}
		}
	}
	ok(bad == 0 && disagree == 0,
	   "%s: all %zu single-bit flips stop the scan at the start of the flipped write", what,
	   lg.len * 8);
	ok(where == 0,
	   "%s: each single-bit flip stops the walk at its own entry, for its field's reason "
	   "(certain detection: no flip is caught by chance further on)",
	   what);
	free(orig);
	free(lg.buf);
}

/*
 * Every pair of distinct bits inside one header: the 12 bytes of each data header (4,560
 * pairs) and the 8 bytes of each checksum entry (2,016 pairs). Detection is certain
 * (docs/log-format.md §7): the walk must stop at that entry, never use a damaged length, and
 * valid_len must be the start of its write.
 */
static void double_bit_flips_in_header(int nwrites, int max_entries, uint32_t max_payload)
{
	struct log lg;
	size_t bad = 0, disagree = 0, pairs = 0, data_pairs = 0;
	size_t by_stop[TW_SCAN_PAYLOAD_MISMATCH + 1] = { 0 };

	make_log(&lg, nwrites, max_entries, max_payload);
	for (int e = 0; e < lg.nentries; e++) {
		size_t off = lg.ent_off[e];
		uint8_t *h = lg.buf + off;
		bool data = h[0] == TW_ENTRY_DATA;
		size_t nbits = (data ? TW_ENTRY_HDR_SIZE : TW_CKSUM_ENTRY_SIZE) * 8;
		int k = write_of(&lg, off);

		for (size_t i = 0; i < nbits; i++) {
			for (size_t j = i + 1; j < nbits; j++) {
				struct tw_scan_result r;

				h[i / 8] ^= (uint8_t)(1u << (i % 8));
				h[j / 8] ^= (uint8_t)(1u << (j % 8));
				r = scan_exact(lg.buf, lg.len, &disagree);
				h[i / 8] ^= (uint8_t)(1u << (i % 8));
				h[j / 8] ^= (uint8_t)(1u << (j % 8));
				pairs++;
				data_pairs += data;
				by_stop[r.stop]++;
				if (r.valid_len != lg.start[k] || r.entries != lg.entries[k] ||
				    r.stop_offset != off || r.stop == TW_SCAN_END ||
				    (data && r.stop == TW_SCAN_PAYLOAD_MISMATCH)) {
					if (bad++ < 5)
						tap_diag("%s at %zu: bits %zu,%zu: valid_len %zu (want "
							 "%zu) stop %s at %zu",
							 data ? "data header" : "checksum entry", off, i,
							 j, r.valid_len, lg.start[k],
							 tw_scan_stop_str(r.stop), r.stop_offset);
				}
			}
		}
	}
	ok(bad == 0 && disagree == 0,
	   "all %zu double-bit flips inside one header (%zu in data headers, %zu in checksum "
	   "entries) stop the walk at that entry, valid_len at its write's start (bad-header %zu, "
	   "zero %zu, bad-length %zu, chain-mismatch %zu)",
	   pairs, data_pairs, pairs - data_pairs, by_stop[TW_SCAN_BAD_HEADER],
	   by_stop[TW_SCAN_ZERO], by_stop[TW_SCAN_BAD_LENGTH], by_stop[TW_SCAN_CHAIN_MISMATCH]);
	free(lg.buf);
}

/*
 * The check's code, exhaustively, without the scan: over the 96 bits of a data header, the
 * syndrome of an error (stored check XOR recomputed check) is non-zero for every single and
 * double error. 96 + 4,560 patterns on each of a few random headers; the property is linear,
 * so it holds for every header, and this is the whole proof of the certainty claim.
 */
static void hcheck_distance(void)
{
	size_t bad = 0, cases = 0;

	for (int round = 0; round < 8; round++) {
		uint8_t h[12];

		h[0] = TW_ENTRY_DATA;
		h[1] = 0;
		tw_store_le32(h + 4, (uint32_t)rnd());
		tw_store_le32(h + 8, (uint32_t)rnd());
		ref_set_hcheck(h);
		for (int i = 0; i < 96; i++) {
			for (int j = i; j < 96; j++) {
				uint8_t m[12];

				memcpy(m, h, 12);
				m[i / 8] ^= (uint8_t)(1u << (i % 8));
				if (j != i)
					m[j / 8] ^= (uint8_t)(1u << (j % 8));
				cases++;
				if (tw_load_le16(m + 2) == ref_hcheck(m))
					bad++;
			}
		}
	}
	ok(bad == 0, "header check: every 1- and 2-bit error of a 12-byte data header changes the "
		     "check (%zu patterns)",
	   cases);
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
	bool fix; /* give the data header at the start of the tail a matching check */
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
		  TW_SCAN_BAD_LENGTH, true },
		{ "length 2^31", { 1, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0 }, 12, TW_SCAN_BAD_LENGTH,
		  true },
		{ "length 1 past the end", { 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 }, 12,
		  TW_SCAN_BAD_LENGTH, true },
		{ "length 0, wrong CRC", { 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 }, 12,
		  TW_SCAN_PAYLOAD_MISMATCH, true },
		{ "length 0, right CRC, no checksum entry", { 1 }, 12, TW_SCAN_END, true },
		{ "length 4 exactly to the end, wrong CRC",
		  { 1, 0, 0, 0, 4, 0, 0, 0, 9, 9, 9, 9, 1, 2, 3, 4 }, 16, TW_SCAN_PAYLOAD_MISMATCH,
		  true },
		{ "type 3", { 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, 12, TW_SCAN_BAD_HEADER },
		{ "type 0xFF", { 0xff, 0xff, 0xff, 0xff }, 4, TW_SCAN_BAD_HEADER },
		{ "data header, check 0 (the old reserved bytes)", { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
		  12, TW_SCAN_BAD_HEADER },
		{ "data header, check wrong", { 1, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0 }, 12,
		  TW_SCAN_BAD_HEADER },
		{ "length 0xFFFFFFFF, check wrong", { 1, 0, 1, 0x80, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 },
		  12, TW_SCAN_BAD_HEADER },
		{ "checksum entry, reserved set", { 2, 0, 0, 0x80, 1, 0, 0, 0 }, 8,
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
		if (c->fix)
			ref_set_hcheck(b + lg.len);
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
		/* each flag, header check and reserved bit */
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
				/* as damage: the check no longer matches, stop right here */
				tw_store_le32(b + 4, vals[v]);
				r = scan_exact(lg.buf, lg.len, &disagree);
				cases++;
				if (r.valid_len != lg.start[k] || r.stop != TW_SCAN_BAD_HEADER ||
				    r.stop_offset != pos)
					bad++;
				/* as a hostile header with a matching check: the bounds checks,
				 * the payload CRC and the chain must reject it */
				ref_set_hcheck(b);
				r = scan_exact(lg.buf, lg.len, &disagree);
				tw_store_le16(b + 2, save[2] | (uint16_t)(save[3] << 8));
				cases++;
				if (r.valid_len != lg.start[k])
					bad++;
			}
		}
		memcpy(b, save, data ? 12 : 8);
		pos = next;
	}
	ok(bad == 0 && disagree == 0,
	   "%zu hostile header values (types, flags, checks, reserved, lengths with and without a "
	   "matching check): none accepted",
	   cases);
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
		/* half the time, data headers the walk reaches get a matching check */
		if (round & 1)
			fix_reachable(b, len, round & 2);
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
		if (round & 1) {
			/* small lengths and matching checks, so that lengths get used */
			for (size_t i = 0; i + 12 <= len; i++)
				if (b[i] == TW_ENTRY_DATA && (rnd() & 1)) {
					tw_store_le32(b + i + 4, (uint32_t)(rnd() % 80));
					b[i + 1] = 0;
				}
			fix_reachable(b, len, false);
		}
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
	log_seed = tl_log_seed();
	single_bit_flips(6, 4, 48, "small entries");
	single_bit_flips(2, 2, lng ? 4096 : 600, "large payloads");
	hcheck_distance();
	double_bit_flips_in_header(4, 4, 40);
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
