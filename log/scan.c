/*
 * log/scan.c — find the valid prefix of a replica buffer: Algorithm 1 of the Tailwind paper
 * (walk the entries, chain a CRC over the data entry headers, compare at each checksum entry)
 * plus verification of every payload CRC, which makes a torn write detectable whatever order
 * its bytes landed in (docs/log-format.md has the argument).
 *
 * Pure code over a borrowed buffer; reads only [buf, buf+len): every header is read only after
 * checking that it fits in what remains, every length is compared with what remains (never
 * added to a position first, so nothing can wrap).
 *
 * Every data header's check (bytes 2..3, over its other 10 bytes) is verified before its length
 * is used, so a damaged length or payload CRC field stops the walk at that header with
 * certainty for any 1 or 2 flipped bits (docs/log-format.md §7).
 *
 * The chain starts at a seed (tw_scan_seeded(); tw_scan() is seed 0) that a backup draws
 * afresh for every use of a buffer, so that entries left from an earlier use, written under
 * another seed, cannot match the chain except with odds at most 2^-31 (docs/log-format.md
 * §7, "Reuse without zeroing"). Header checks do not depend on the seed.
 *
 * Two copies of the walk: one compiled for SSE4.2 that keeps the header chain in a register and
 * reduces short payloads inline, and a generic one that calls tw_crc32c() (table or ARMv8).
 * Tests run both on the same inputs.
 */
#include <tailwind/log_format.h>

#include "log/log_int.h" /* header check, CPU probe, inline CRC32C loop, tw__scan_generic */

/*
 * The first 2 bytes of a data header (type 1, flags 0) and the first 4 of a checksum entry
 * (type 2, flags 0, reserved 0), read little-endian.
 */
#define HDR_HALF_DATA ((uint16_t)TW_ENTRY_DATA)
#define HDR_WORD_CKSUM ((uint32_t)TW_ENTRY_CHECKSUM)

const char *tw_scan_stop_str(enum tw_scan_stop stop)
{
	switch (stop) {
	case TW_SCAN_END:
		return "end";
	case TW_SCAN_ZERO:
		return "zero";
	case TW_SCAN_BAD_LENGTH:
		return "bad-length";
	case TW_SCAN_BAD_HEADER:
		return "bad-header";
	case TW_SCAN_CHAIN_MISMATCH:
		return "chain-mismatch";
	case TW_SCAN_PAYLOAD_MISMATCH:
		return "payload-mismatch";
	}
	return "unknown";
}

/*
 * Classify the entry at p (rem >= 1 bytes left) that is not a well-formed data or checksum
 * entry header: the stop reason. Shared by both walks so they agree on every input.
 */
static enum tw_scan_stop classify_bad(const uint8_t *p, size_t rem)
{
	switch (p[0]) {
	case TW_ENTRY_INVALID:
		return TW_SCAN_ZERO;
	case TW_ENTRY_DATA:
		if (rem < TW_ENTRY_HDR_SIZE)
			return TW_SCAN_BAD_LENGTH;
		break;
	case TW_ENTRY_CHECKSUM:
		if (rem < TW_CKSUM_ENTRY_SIZE)
			return TW_SCAN_BAD_LENGTH;
		break;
	default:
		return TW_SCAN_BAD_HEADER;
	}
	/* Fits, right type: flags set, a data entry's header check does not match, or a checksum
	 * entry's reserved bits are set. */
	return TW_SCAN_BAD_HEADER;
}

/* Where the last complete write ended: what a scan reports, updated at each checksum entry. */
struct mark {
	size_t len;
	uint64_t entries;
	uint32_t last_checksum;
	uint32_t chain;
};

static void finish(struct tw_scan_result *out, struct mark m, enum tw_scan_stop stop,
		   size_t stop_offset)
{
	*out = (struct tw_scan_result){ .valid_len = m.len, .entries = m.entries,
					.last_checksum = m.last_checksum, .chain = m.chain,
					.stop = stop, .stop_offset = stop_offset };
}

void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out)
{
	tw__scan_generic_seeded(buf, len, 0, out);
}

void tw__scan_generic_seeded(const void *buf, size_t len, uint32_t seed, struct tw_scan_result *out)
{
	const uint8_t *b = buf;
	size_t pos = 0;
	uint32_t chain = seed; /* chain_0 = seed */
	uint64_t n = 0;
	struct mark ok = { .chain = seed };
	bool pending = false; /* a data entry since the last checksum entry */
	enum tw_scan_stop stop;
	/* CRC32C of the first two bytes of every data header that gets as far as its check. */
	static const uint8_t type_flags[2] = { TW_ENTRY_DATA, 0 };
	const uint32_t hc0 = tw_crc32c(0, type_flags, 2);

	if (len == 0) { /* buf may be NULL: no pointer arithmetic on it */
		finish(out, (struct mark){ .chain = seed }, TW_SCAN_END, 0);
		return;
	}
	for (;;) {
		const uint8_t *p = b + pos;
		size_t rem = len - pos;

		if (rem == 0) {
			stop = TW_SCAN_END;
			break;
		}
		if (p[0] == TW_ENTRY_DATA && rem >= TW_ENTRY_HDR_SIZE &&
		    tw_load_le16(p) == HDR_HALF_DATA) {
			uint32_t plen = tw_load_le32(p + 4);

			/* The header check, before the length is trusted for anything. */
			if (tw_load_le16(p + 2) != TW__HCHECK_OF(tw_crc32c(hc0, p + 4, 8))) {
				stop = TW_SCAN_BAD_HEADER;
				break;
			}
			if (plen > rem - TW_ENTRY_HDR_SIZE) {
				stop = TW_SCAN_BAD_LENGTH;
				break;
			}
			chain = tw_crc32c(chain, p, TW_ENTRY_HDR_SIZE);
			if (tw_crc32c(0, p + TW_ENTRY_HDR_SIZE, plen) != tw_load_le32(p + 8)) {
				stop = TW_SCAN_PAYLOAD_MISMATCH;
				break;
			}
			pos += TW_ENTRY_HDR_SIZE + (size_t)plen;
			n++;
			pending = true;
		} else if (p[0] == TW_ENTRY_CHECKSUM && rem >= TW_CKSUM_ENTRY_SIZE &&
			   tw_load_le32(p) == HDR_WORD_CKSUM) {
			uint32_t want = chain ? chain : 1;

			/* A checksum entry that closes no data entry is never written. */
			if (!pending || tw_load_le32(p + 4) != want) {
				stop = pending ? TW_SCAN_CHAIN_MISMATCH : TW_SCAN_BAD_HEADER;
				break;
			}
			pos += TW_CKSUM_ENTRY_SIZE;
			pending = false;
			ok = (struct mark){ pos, n, want, chain };
		} else {
			stop = classify_bad(p, rem);
			break;
		}
	}
	finish(out, ok, stop, stop == TW_SCAN_END ? len : pos);
}

#ifdef TW_CRC_X86

/*
 * Payloads up to this size are reduced inline, one stream: the payload CRCs of consecutive
 * entries are independent, so the out-of-order core overlaps them and one stream per entry
 * already keeps the crc32 unit busy (measured with bench_scan: 100-byte entries 10 GB/s inline,
 * 6 GB/s through tw_crc32c()). Longer payloads go to tw_crc32c()'s three streams.
 */
#define INLINE_PAYLOAD_MAX 200u

/*
 * Same walk as tw__scan_generic(); the header chain is kept raw (complemented) in a register
 * and advanced by two instructions per header (4 + 8 bytes). The header check is one more
 * crc32 (bytes 4..11, from the state after the constant bytes 0..1): it does not feed the
 * chain, so it runs beside it and beside the payload CRC, and the fast path tests bytes 0..3
 * against the expected (type, flags, check) with one comparison.
 *
 * Aligned to 64 bytes so that the loop's layout relative to 32-byte boundaries does not depend
 * on what precedes it: on Skylake-family CPUs (JCC erratum microcode) a jump that crosses or
 * ends on such a boundary keeps its 32 bytes out of the decoded-uop cache, and variants of this
 * loop that differed only in layout ran 7.8 to 11.1 GB/s on 100-byte entries (docs/log-format.md
 * §9). Keep an eye on bench_scan when touching it.
 */
__attribute__((target("sse4.2"), aligned(64))) static void scan_sse42(const uint8_t *b,
									    size_t len, uint32_t seed,
									    struct tw_scan_result *out)
{
	size_t pos = 0;
	uint32_t raw = ~seed; /* raw = ~chain, chain_0 = seed */
	uint64_t n = 0;
	struct mark ok = { .chain = seed };
	bool pending = false; /* a data entry since the last checksum entry */
	enum tw_scan_stop stop;
	/* Raw CRC32C state after the data header's bytes 0..1 (type 1, flags 0). */
	const uint32_t hc0 = _mm_crc32_u16(~0u, HDR_HALF_DATA);

	for (;;) {
		const uint8_t *p = b + pos;
		size_t rem = len - pos;

		if (tw_likely(rem >= TW_ENTRY_HDR_SIZE)) {
			uint32_t w0 = tw_load_le32(p);     /* type, flags, check */
			uint64_t h1 = tw_load_le64(p + 4); /* length, payload_crc */
			uint32_t hc = ~(uint32_t)_mm_crc32_u64(hc0, h1);
			/* Bytes 0..3 of a good data header: 1, 0, TW__HCHECK_OF(hc). Written in 32 bits
			 * (bit 15 of hc lands on bit 31, which is set anyway) so that the compiler
			 * emits no 16-bit immediates (length-changing prefixes stall the decoder). */
			uint32_t want = (hc << 16) | 0x80000000u | HDR_HALF_DATA;

			/* Type 1, flags 0 and a matching check; anything else (a checksum
			 * entry, a bad data header, zeroed memory) takes the slow path. The
			 * length is used only after this test. */
			if (tw_likely(w0 == want)) {
				uint32_t plen = (uint32_t)h1;
				uint32_t pcrc = (uint32_t)(h1 >> 32);
				uint32_t got;

				if (tw_unlikely(plen > rem - TW_ENTRY_HDR_SIZE)) {
					stop = TW_SCAN_BAD_LENGTH;
					break;
				}
				raw = _mm_crc32_u32(raw, w0);
				raw = (uint32_t)_mm_crc32_u64(raw, h1);
				if (plen <= INLINE_PAYLOAD_MAX)
					got = ~tw__crc32c_hw_raw(~0u, p + TW_ENTRY_HDR_SIZE, plen);
				else
					got = tw_crc32c(0, p + TW_ENTRY_HDR_SIZE, plen);
				if (tw_unlikely(got != pcrc)) {
					stop = TW_SCAN_PAYLOAD_MISMATCH;
					break;
				}
				pos += TW_ENTRY_HDR_SIZE + (size_t)plen;
				n++;
				pending = true;
				continue;
			}
		} else if (rem == 0) {
			stop = TW_SCAN_END;
			break;
		}
		if (rem >= TW_CKSUM_ENTRY_SIZE && tw_load_le32(p) == HDR_WORD_CKSUM) {
			uint32_t chain = ~raw;
			uint32_t want = chain ? chain : 1;

			if (tw_unlikely(!pending || tw_load_le32(p + 4) != want)) {
				stop = pending ? TW_SCAN_CHAIN_MISMATCH : TW_SCAN_BAD_HEADER;
				break;
			}
			pos += TW_CKSUM_ENTRY_SIZE;
			pending = false;
			ok = (struct mark){ pos, n, want, chain };
			continue;
		}
		stop = classify_bad(p, rem);
		break;
	}
	finish(out, ok, stop, stop == TW_SCAN_END ? len : pos);
}

void tw_scan_seeded(const void *buf, size_t len, uint32_t seed, struct tw_scan_result *out)
{
	if (len == 0) { /* buf may be NULL: no pointer arithmetic on it */
		finish(out, (struct mark){ .chain = seed }, TW_SCAN_END, 0);
		return;
	}
	if (tw__have_sse42()) /* the CPU probe shared with tw_crc32c() (log/log_int.h) */
		scan_sse42(buf, len, seed, out);
	else
		tw__scan_generic_seeded(buf, len, seed, out);
}

#else /* !TW_CRC_X86 */

void tw_scan_seeded(const void *buf, size_t len, uint32_t seed, struct tw_scan_result *out)
{
	tw__scan_generic_seeded(buf, len, seed, out);
}

#endif

void tw_scan(const void *buf, size_t len, struct tw_scan_result *out)
{
	tw_scan_seeded(buf, len, 0, out);
}
