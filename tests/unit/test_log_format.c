/*
 * tests/unit/test_log_format.c — the writer (append, fits, seal, resume), the exact bytes it
 * lays down (including the data header check), the never-zero checksum rule, tw_entry_next(),
 * and the scan of well-formed buffers (both walks: SSE4.2 and generic); the engine's
 * tw__log_entry_put (one-pass copy and CRC below 192 B) lays the same bytes as the writer at
 * every length and alignment, with the CPU's CRC and with the table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"
#include "log_ref.h"
#include "rng.h"
#include "tap.h"

void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out);
/* log/log_entry.h and log/log_int.h (the CRC implementation's cache), declared here. */
struct tw__hdr_words {
	uint32_t lo;
	uint64_t hi;
};
struct tw__hdr_words tw__log_entry_put(uint8_t *hdr, const void *payload, uint32_t len);
uint32_t tw__log_chain_step(uint32_t chain, struct tw__hdr_words h);
extern int tw__crc_impl_cached;

/* Scan with both walks; they must agree on every field. */
static void scan2(const void *buf, size_t len, struct tw_scan_result *r)
{
	struct tw_scan_result g;

	tw_scan(buf, len, r);
	tw__scan_generic(buf, len, &g);
	if (g.valid_len != r->valid_len || g.entries != r->entries ||
	    g.last_checksum != r->last_checksum || g.chain != r->chain || g.stop != r->stop ||
	    g.stop_offset != r->stop_offset)
		ok(0, "generic walk disagrees with tw_scan on a %zu-byte buffer", len);
}

/*
 * Find x with f(x) == want for a function f that is affine over GF(2) in the 32 bits of x
 * (a CRC in 4 of its message bytes, or in them plus a check computed from them): solve the
 * 32x32 system. Returns x (the caller checks f(x) == want: the system may be singular).
 */
static uint32_t solve_affine(uint32_t (*f)(void *ctx, uint32_t x), void *ctx, uint32_t want)
{
	uint32_t m[32], sel[32], base, x = 0, target;
	int piv[32], rank = 0;

	base = f(ctx, 0);
	for (int i = 0; i < 32; i++) {
		m[i] = f(ctx, 1u << i) ^ base;
		sel[i] = 1u << i;
	}
	target = want ^ base;
	for (int bit = 0; bit < 32; bit++) {
		int k = -1;

		for (int i = rank; i < 32 && k < 0; i++)
			if ((m[i] >> bit) & 1)
				k = i;
		if (k < 0)
			continue;
		uint32_t t = m[k];
		m[k] = m[rank];
		m[rank] = t;
		t = sel[k];
		sel[k] = sel[rank];
		sel[rank] = t;
		for (int i = 0; i < 32; i++)
			if (i != rank && ((m[i] >> bit) & 1)) {
				m[i] ^= m[rank];
				sel[i] ^= sel[rank];
			}
		piv[rank++] = bit;
	}
	for (int i = 0; i < rank; i++)
		if ((target >> piv[i]) & 1)
			x ^= sel[i];
	return x;
}

struct span {
	uint8_t *p;
	size_t n;
};

/* tw_crc32c(0, p, n) with the last 4 bytes of p set to x. */
static uint32_t crc_with_tail(void *ctx, uint32_t x)
{
	struct span *s = ctx;

	tw_store_le32(s->p + s->n - 4, x);
	return tw_crc32c(0, s->p, s->n);
}

/* The chain over a 12-byte data header with payload_crc x and its check filled in. */
static uint32_t chain_with_pcrc(void *ctx, uint32_t x)
{
	uint8_t *h = ctx;

	tw_store_le32(h + 8, x);
	ref_set_hcheck(h);
	return tw_crc32c(0, h, 12);
}

/* Choose the last 4 bytes of p[0..n) so that tw_crc32c(0, p, n) == want. */
static void force_crc(uint8_t *p, size_t n, uint32_t want)
{
	struct span s = { p, n };

	crc_with_tail(&s, solve_affine(crc_with_tail, &s, want));
}

static void exact_bytes(void)
{
	size_t cap = tw_log_write_size(1, 100);
	uint8_t *buf = calloc(1, cap);
	uint8_t payload[100];
	struct tw_log_writer w;
	struct tw_scan_result r;
	size_t off = 99, wlen = 0;
	uint32_t chain;

	TAP_REQUIRE(buf, "calloc");
	for (int i = 0; i < 100; i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	is_int(cap, 120, "one 100-byte object per write costs 120 bytes (20 bytes overhead)");
	tw_log_writer_init(&w, buf, cap);
	ok(tw_log_writer_fits(&w, 100) && !tw_log_writer_fits(&w, 101),
	   "fits(): 100 bytes fit a 120-byte buffer, 101 do not");
	is_int(tw_log_writer_append(&w, payload, 101, NULL), -TW_EFULL, "append too big: EFULL");
	is_int(tw_log_writer_append(&w, payload, 100, &off), 0, "append 100 bytes");
	is_int(off, 0, "first entry at offset 0");
	ok(buf[0] == TW_ENTRY_DATA && buf[1] == 0 && tw_load_le16(buf + 2) == ref_hcheck(buf) &&
		   (buf[3] & 0x80) && tw_load_le32(buf + 4) == 100 &&
		   tw_load_le32(buf + 8) == tw_crc32c(0, payload, 100),
	   "data header bytes: type 1, flags 0, header check (bit 15 set), length, payload CRC");
	ok(memcmp(buf + 12, payload, 100) == 0, "payload copied after the header");
	ok(!tw_log_writer_fits(&w, 0), "no room for another entry: only the checksum entry is left");
	is_int(tw_log_writer_append(&w, NULL, 0, NULL), -TW_EFULL, "empty entry: EFULL too");
	is_int(tw_log_writer_seal(&w, &off, &wlen), 0, "seal");
	ok(off == 0 && wlen == 120, "seal reports bytes 0..119 (got %zu+%zu)", off, wlen);
	chain = tw_crc32c(0, buf, 12);
	ok(buf[112] == TW_ENTRY_CHECKSUM && buf[113] == 0 && tw_load_le16(buf + 114) == 0 &&
		   tw_load_le32(buf + 116) == (chain ? chain : 1),
	   "checksum entry bytes: type 2, flags 0, reserved 0, CRC32C of the 12 header bytes "
	   "(check included)");
	ok(w.last_checksum == tw_load_le32(buf + 116) && w.chain == chain && w.entries == 1 &&
		   w.pending == 0 && w.pos == 120,
	   "writer state after seal");
	is_int(tw_log_writer_seal(&w, &off, &wlen), 0, "seal with nothing pending");
	ok(wlen == 0 && w.pos == 120, "nothing pending: empty range, nothing written");
	scan2(buf, cap, &r);
	ok(r.valid_len == 120 && r.entries == 1 && r.stop == TW_SCAN_END && r.stop_offset == 120 &&
		   r.last_checksum == w.last_checksum && r.chain == w.chain,
	   "scan: whole buffer valid, stop end");
	free(buf);
}

/* Fixed vectors: the whole 12-byte header of an empty entry and of "hello". */
static void known_headers(void)
{
	static const uint8_t want_empty[12] = { 0x01, 0x00, 0xce, 0x8b, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t want_hello[12] = { 0x01, 0x00, 0xc2, 0xee, 0x05, 0x00, 0x00, 0x00,
						0x4c, 0xbb, 0x71, 0x9a };
	uint8_t buf[64];
	struct tw_log_writer w;
	struct tw_entry_iter it;
	size_t off, wlen;

	memset(buf, 0, sizeof(buf));
	tw_log_writer_init(&w, buf, sizeof(buf));
	tw_log_writer_append(&w, NULL, 0, NULL);
	tw_log_writer_append(&w, "hello", 5, NULL);
	tw_log_writer_seal(&w, &off, &wlen);
	ok(memcmp(buf, want_empty, 12) == 0,
	   "empty entry header: 01 00 ce 8b 00.. (check 0x8bce)");
	ok(memcmp(buf + 12, want_hello, 12) == 0,
	   "\"hello\" header: 01 00 c2 ee 05 00 00 00 4c bb 71 9a (check 0xeec2)");
	ok(ref_hcheck(buf) == 0x8bce && ref_hcheck(buf + 12) == 0xeec2,
	   "the test's own check function gives the same values");
	ok(tw_load_le32(buf + 29 + 4) == tw_crc32c(0, buf, 24),
	   "checksum entry: the chain over both 12-byte headers, checks included");
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, NULL, NULL, NULL), 1, "iterator accepts the entries");
}

static void arguments_and_limits(void)
{
	uint8_t buf[64];
	struct tw_log_writer w;

	memset(buf, 0, sizeof(buf));
	tw_log_writer_init(&w, buf, sizeof(buf));
	is_int(tw_log_writer_append(&w, NULL, 5, NULL), -EINVAL, "NULL payload with length: EINVAL");
	is_int(tw_log_writer_append(&w, NULL, 0, NULL), 0, "NULL payload with length 0 is allowed");
	for (size_t cap = 0; cap < 21; cap++) {
		tw_log_writer_init(&w, buf, cap);
		if (tw_log_writer_fits(&w, 0) != (cap >= 20))
			ok(0, "fits(0) wrong for cap %zu", cap);
	}
	ok(1, "fits(0) true exactly from cap 20 up");
	/* Arithmetic near SIZE_MAX without touching memory (no append). */
	tw_log_writer_resume(&w, buf, SIZE_MAX, SIZE_MAX - 10, 0, 0, 0);
	ok(!tw_log_writer_fits(&w, 0) && !tw_log_writer_fits(&w, UINT32_MAX),
	   "fits() near SIZE_MAX does not wrap");
	tw_log_writer_resume(&w, buf, SIZE_MAX, SIZE_MAX - 20, 0, 0, 0);
	ok(tw_log_writer_fits(&w, 0) && !tw_log_writer_fits(&w, 1), "fits() exact at SIZE_MAX");
	tw_log_writer_resume(&w, buf, 10, 50, 0, 0, 0);
	ok(w.pos == 10 && !tw_log_writer_fits(&w, 0), "resume past cap is clamped");
	is_int(tw_log_write_size(3, 10), 3 * 22 + 8, "tw_log_write_size");
	ok(strcmp(tw_scan_stop_str(TW_SCAN_END), "end") == 0 &&
		   strcmp(tw_scan_stop_str(TW_SCAN_ZERO), "zero") == 0 &&
		   strcmp(tw_scan_stop_str(TW_SCAN_BAD_LENGTH), "bad-length") == 0 &&
		   strcmp(tw_scan_stop_str(TW_SCAN_BAD_HEADER), "bad-header") == 0 &&
		   strcmp(tw_scan_stop_str(TW_SCAN_CHAIN_MISMATCH), "chain-mismatch") == 0 &&
		   strcmp(tw_scan_stop_str(TW_SCAN_PAYLOAD_MISMATCH), "payload-mismatch") == 0 &&
		   strcmp(tw_scan_stop_str((enum tw_scan_stop)99), "unknown") == 0,
	   "tw_scan_stop_str names");
}

/* A chain of exactly 0 is stored as 1, and the scan accepts 1 there (Algorithm 1, line 11). */
static void never_zero(void)
{
	uint8_t hdr[12] = { 1, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0 };
	uint8_t payload[16], buf[64];
	struct tw_log_writer w;
	struct tw_scan_result r;
	size_t off, wlen;

	memset(payload, 0x5a, sizeof(payload));
	/* The payload CRC that makes chain 0 (the check, which depends on it, included). */
	chain_with_pcrc(hdr, solve_affine(chain_with_pcrc, hdr, 0));
	is_int(tw_crc32c(0, hdr, 12), 0, "solved for a header (with its check) whose CRC is 0");
	force_crc(payload, sizeof(payload), tw_load_le32(hdr + 8)); /* a payload with that CRC */
	memset(buf, 0, sizeof(buf));
	tw_log_writer_init(&w, buf, sizeof(buf));
	tw_log_writer_append(&w, payload, sizeof(payload), NULL);
	is_int(w.chain, 0, "constructed an entry whose header chain is 0");
	tw_log_writer_seal(&w, &off, &wlen);
	is_int(tw_load_le32(buf + 28 + 4), 1, "chain 0 is stored as 1");
	scan2(buf, sizeof(buf), &r);
	ok(r.valid_len == 36 && r.entries == 1 && r.last_checksum == 1 && r.chain == 0 &&
		   r.stop == TW_SCAN_ZERO && r.stop_offset == 36,
	   "scan accepts 1 where it computed 0 (valid_len %zu, stop %s)", r.valid_len,
	   tw_scan_stop_str(r.stop));
	tw_store_le32(buf + 32, 0);
	scan2(buf, sizeof(buf), &r);
	ok(r.valid_len == 0 && r.stop == TW_SCAN_CHAIN_MISMATCH,
	   "a stored 0 is never valid, even where the chain is 0");
	tw_store_le32(buf + 32, 1);
	/* Resume on top and write a second write: the chain continues from 0. */
	tw_log_writer_resume(&w, buf, sizeof(buf), 36, 0, 1, 1);
	tw_log_writer_append(&w, "abc", 3, NULL);
	tw_log_writer_seal(&w, &off, &wlen);
	scan2(buf, sizeof(buf), &r);
	ok(r.valid_len == 36 + 23 && r.entries == 2 && r.chain == w.chain,
	   "resume after a chain of 0 continues the chain");
}

/*
 * Random writes of random entries; after each seal the scan must find exactly the writer's
 * state, and tw_entry_next() must give back every payload. Then resume from a scan and go on.
 */
static void random_logs(int rounds)
{
	size_t cap = 1 << 16;
	uint8_t *buf = malloc(cap);
	uint8_t *src = malloc(8192);
	size_t *offs = malloc(sizeof(size_t) * 8192);
	uint32_t *lens = malloc(sizeof(uint32_t) * 8192);
	size_t bad = 0, checks = 0;

	TAP_REQUIRE(buf && src && offs && lens, "malloc");
	for (size_t i = 0; i < 8192; i++)
		src[i] = (uint8_t)rnd();
	for (int round = 0; round < rounds; round++) {
		struct tw_log_writer w;
		struct tw_scan_result r;
		size_t n = 0;

		memset(buf, 0, cap);
		tw_log_writer_init(&w, buf, cap);
		for (;;) {
			size_t k = 1 + rnd() % 8, off, wlen;
			bool full = false;

			for (size_t i = 0; i < k; i++) {
				uint32_t len = (uint32_t)(rnd() % 5 == 0 ? rnd() % 4097 : rnd() % 200);
				size_t o;
				int rc = tw_log_writer_append(&w, src + rnd() % 4096, len, &o);

				if (rc == -TW_EFULL) {
					full = true;
					break;
				}
				offs[n] = o;
				lens[n++] = len;
			}
			tw_log_writer_seal(&w, &off, &wlen);
			scan2(buf, cap, &r);
			checks++;
			if (r.valid_len != w.pos || r.entries != w.entries ||
			    r.last_checksum != w.last_checksum || r.chain != w.chain ||
			    r.stop != (w.pos == cap ? TW_SCAN_END : TW_SCAN_ZERO)) {
				if (!bad++)
					tap_diag("round %d: scan valid_len %zu entries %llu stop %s, "
						 "writer pos %zu entries %llu",
						 round, r.valid_len, (unsigned long long)r.entries,
						 tw_scan_stop_str(r.stop), w.pos,
						 (unsigned long long)w.entries);
			}
			if (round % 2 == 1 && w.pos > 0) {
				/* Resume from the scan instead of continuing the writer. */
				tw_log_writer_resume(&w, buf, cap, r.valid_len, r.chain, r.last_checksum,
						     r.entries);
			}
			if (full)
				break;
		}
		/* Iterate: exactly the appended entries, in order, at their offsets. */
		{
			struct tw_entry_iter it = { .buf = buf, .len = w.pos, .pos = 0 };
			const void *pl;
			uint32_t len;
			size_t off, i = 0;
			int rc;

			while ((rc = tw_entry_next(&it, &pl, &len, &off)) == 1) {
				if (i >= n || off != offs[i] || len != lens[i] ||
				    (const uint8_t *)pl != buf + off + 12)
					bad++;
				i++;
			}
			if (rc != 0 || i != n)
				bad++;
			checks++;
		}
	}
	ok(bad == 0, "%d random logs: scan matches the writer after every seal, iterator gives "
		     "back every entry (%zu checks)",
	   rounds, checks);
	free(buf);
	free(src);
	free(offs);
	free(lens);
}

static void iterator_errors(void)
{
	uint8_t buf[64];
	struct tw_log_writer w;
	struct tw_entry_iter it;
	const void *pl;
	uint32_t len;
	size_t off, wlen;

	memset(buf, 0, sizeof(buf));
	tw_log_writer_init(&w, buf, sizeof(buf));
	tw_log_writer_append(&w, "hello", 5, NULL);
	tw_log_writer_seal(&w, &off, &wlen);

	it = (struct tw_entry_iter){ .buf = buf, .len = 0, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), 0, "iterator: empty prefix ends at once");
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos + 1, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), 1, "iterator: entry");
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT, "iterator: zero byte is corrupt");
	it = (struct tw_entry_iter){ .buf = buf, .len = 16, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT,
	       "iterator: payload past the prefix is corrupt");
	it = (struct tw_entry_iter){ .buf = buf, .len = 11, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT,
	       "iterator: truncated header is corrupt");
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos - 1, .pos = 17 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT,
	       "iterator: truncated checksum entry is corrupt");
	buf[1] = 1;
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT, "iterator: flags set is corrupt");
	buf[1] = 0;
	buf[2] ^= 1;
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT,
	       "iterator: header check mismatch is corrupt");
	buf[2] ^= 1;
	buf[4] ^= 2; /* length 5 -> 7: inside the prefix, but the check no longer matches */
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT,
	       "iterator: a changed length fails the header check");
	buf[4] ^= 2;
	buf[0] = 9;
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, &pl, &len, &off), -TW_ECORRUPT, "iterator: unknown type");
	buf[0] = 1;
	it = (struct tw_entry_iter){ .buf = buf, .len = w.pos, .pos = 0 };
	is_int(tw_entry_next(&it, NULL, NULL, NULL), 1, "iterator: NULL out-parameters are allowed");
	is_int(tw_entry_next(&it, NULL, NULL, NULL), 0, "iterator: checksum entry skipped, end");
}

/* tw__log_entry_put against tw_log_writer_append: payloads of 0..300 bytes (both sides of the
 * 192-byte short path, every tail length), source and entry at odd offsets, with the CPU's CRC
 * path (`forced` 0) or the table (TW__CRC_TABLE, 1). */
static void entry_put_same(void)
{
	static uint8_t src[320 + 8], ref[512], got[512 + 8];
	unsigned bad = 0, n = 0;
	int saved = tw__crc_impl_cached;

	for (int impl = 0; impl < 2; impl++) {
		if (impl)
			__atomic_store_n(&tw__crc_impl_cached, 1 /* TW__CRC_TABLE */, __ATOMIC_RELAXED);
		for (uint32_t len = 0; len <= 300; len++) {
			for (unsigned a = 0; a < 3; a++) {
				struct tw_log_writer w;
				struct tw__hdr_words h;
				const uint8_t *pl = src + a * 3;

				for (size_t i = 0; i < sizeof(src); i++)
					src[i] = (uint8_t)rnd();
				memset(ref, 0xee, sizeof(ref));
				memset(got, 0xee, sizeof(got));
				tw_log_writer_init(&w, ref, sizeof(ref));
				if (tw_log_writer_append(&w, pl, len, NULL) != 0) {
					bad++;
					continue;
				}
				h = tw__log_entry_put(got + a, pl, len);
				n++;
				/* The words returned are the header stored, and the chain step over
				 * them is the writer's (seed 0 before this one entry). */
				if (h.lo != tw_load_le32(got + a) || h.hi != tw_load_le64(got + a + 4) ||
				    tw__log_chain_step(0, h) != w.chain ||
				    memcmp(ref, got + a, TW_ENTRY_HDR_SIZE + len) != 0 ||
				    got[a + TW_ENTRY_HDR_SIZE + len] != 0xee ||
				    (a && got[a - 1] != 0xee))
					bad++;
			}
		}
	}
	__atomic_store_n(&tw__crc_impl_cached, saved, __ATOMIC_RELAXED);
	ok(!bad && n == 2 * 301 * 3, "entry put: the writer's bytes, the header words returned and "
	   "the writer's chain step over them at %u lengths and offsets, CPU CRC and table (%u "
	   "differ)", n, bad);
}

int main(void)
{
	rng_state = tap_seed();
	entry_put_same();
	exact_bytes();
	arguments_and_limits();
	known_headers();
	never_zero();
	iterator_errors();
	random_logs(tap_long_mode() ? 2000 : 60);
	tap_done_testing();
	return tap_exit();
}
