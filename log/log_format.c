/*
 * log/log_format.c — the writer that lays entries and checksum entries into a buffer, and
 * the iterator over a validated prefix. The byte layout is in include/tailwind/log_format.h and
 * docs/log-format.md; the scan that validates a buffer is log/scan.c.
 *
 * Pure code: no I/O, no allocation. The buffer always belongs to the caller.
 */
#include <errno.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "log/log_entry.h"
#include "log/log_int.h" /* the header check (TW__HCHECK_OF), the CPU probe */

static uint16_t hcheck_generic(const uint8_t *h)
{
	uint8_t m[10];

	m[0] = h[0];
	m[1] = h[1];
	memcpy(m + 2, h + 4, 8);
	return TW__HCHECK_OF(tw_crc32c(0, m, sizeof(m)));
}

#ifdef TW_CRC_X86
/* Same value: crc32 of bytes 0..1, then of bytes 4..11, as one 10-byte message. */
__attribute__((target("sse4.2"))) static uint16_t hcheck_sse42(const uint8_t *h)
{
	uint32_t raw = _mm_crc32_u16(~0u, tw_load_le16(h));

	return TW__HCHECK_OF(~(uint32_t)_mm_crc32_u64(raw, tw_load_le64(h + 4)));
}

/* Store the check of a header whose other bytes are written; advance the chain over it. */
__attribute__((target("sse4.2"))) static uint32_t finish_header_sse42(uint8_t *h, uint32_t chain)
{
	uint64_t h1 = tw_load_le64(h + 4);
	uint32_t hc = _mm_crc32_u16(~0u, tw_load_le16(h));
	uint32_t raw;

	hc = ~(uint32_t)_mm_crc32_u64(hc, h1);
	tw_store_le16(h + 2, TW__HCHECK_OF(hc));
	raw = _mm_crc32_u32(~chain, tw_load_le32(h));
	return ~(uint32_t)_mm_crc32_u64(raw, h1);
}

#endif

static uint16_t hcheck(const uint8_t *h)
{
#ifdef TW_CRC_X86
	if (tw_likely(tw__have_sse42()))
		return hcheck_sse42(h);
#endif
	return hcheck_generic(h);
}

/* Store the check of a header whose other bytes are written; return the chain advanced over it. */
static uint32_t finish_header(uint8_t *h, uint32_t chain)
{
#ifdef TW_CRC_X86
	if (tw_likely(tw__have_sse42()))
		return finish_header_sse42(h, chain);
#endif
	tw_store_le16(h + 2, hcheck_generic(h));
	return tw_crc32c(chain, h, TW_ENTRY_HDR_SIZE);
}

/* The header of a data entry whose payload is in place, given the payload's CRC32C (of the
 * copy, as in append): everything but the check. */
static inline void put_header(uint8_t *hdr, uint32_t len, uint32_t crc)
{
	hdr[0] = TW_ENTRY_DATA;
	hdr[1] = 0;
	tw_store_le32(hdr + 4, len);
	tw_store_le32(hdr + 8, crc);
}

#ifdef TW_CRC_X86
/*
 * A short payload (below TW__CRC_SHORT) copied and checksummed in one pass: each 8 bytes loaded
 * once, stored and fed to the CRC from the same register, so the CRC is of the copy (what the
 * segment holds, even if the caller's buffer changes meanwhile) as with a copy then a pass over
 * it, without the call to memcpy and the second read. One stream, no dispatch: the common
 * append. Returns the payload's CRC32C.
 */
__attribute__((target("sse4.2"))) static uint32_t copy_crc_short_sse42(uint8_t *dst,
									const uint8_t *src,
									uint32_t len)
{
	uint64_t c = ~0u;
	uint32_t crc;

	for (const uint8_t *end = src + (len & ~15u); src < end; src += 16, dst += 16) {
		uint64_t v0 = tw_load_le64(src), v1 = tw_load_le64(src + 8);

		tw_store_le64(dst, v0);
		tw_store_le64(dst + 8, v1);
		c = _mm_crc32_u64(_mm_crc32_u64(c, v0), v1);
	}
	if (len & 8) {
		uint64_t v = tw_load_le64(src);

		tw_store_le64(dst, v);
		c = _mm_crc32_u64(c, v);
		src += 8;
		dst += 8;
	}
	crc = (uint32_t)c;
	if (len & 4) {
		uint32_t v = tw_load_le32(src);

		tw_store_le32(dst, v);
		crc = _mm_crc32_u32(crc, v);
		src += 4;
		dst += 4;
	}
	if (len & 2) {
		uint16_t v = tw_load_le16(src);

		tw_store_le16(dst, v);
		crc = _mm_crc32_u16(crc, v);
		src += 2;
		dst += 2;
	}
	if (len & 1) {
		*dst = *src;
		crc = _mm_crc32_u8(crc, *dst);
	}
	return ~crc;
}

/* The header is built in registers (its check from them too) and stored with two stores, so
 * that nothing reads it back from memory right after narrower stores of its parts. */
__attribute__((target("sse4.2"))) static struct tw__hdr_words
entry_put_sse42(uint8_t *hdr, const void *payload, uint32_t len)
{
	struct tw__hdr_words h;
	uint32_t crc, hc;

	if (len < TW__CRC_SHORT) {
		crc = copy_crc_short_sse42(hdr + TW_ENTRY_HDR_SIZE, payload, len);
	} else {
		memcpy(hdr + TW_ENTRY_HDR_SIZE, payload, len);
		crc = tw_crc32c(0, hdr + TW_ENTRY_HDR_SIZE, len);
	}
	h.hi = (uint64_t)len | (uint64_t)crc << 32;
	/* hcheck_sse42 over bytes 0..1 (type TW_ENTRY_DATA, flags 0) and 4..11. */
	hc = ~(uint32_t)_mm_crc32_u64(_mm_crc32_u16(~0u, (uint16_t)TW_ENTRY_DATA), h.hi);
	h.lo = (uint32_t)TW_ENTRY_DATA | (uint32_t)TW__HCHECK_OF(hc) << 16;
	tw_store_le32(hdr, h.lo);
	tw_store_le64(hdr + 4, h.hi);
	return h;
}

#endif

struct tw__hdr_words tw__log_entry_put(uint8_t *hdr, const void *payload, uint32_t len)
{
	struct tw__hdr_words h;

#ifdef TW_CRC_X86
	if (tw_likely(tw__have_sse42()))
		return entry_put_sse42(hdr, payload, len);
#endif
	if (len)
		memcpy(hdr + TW_ENTRY_HDR_SIZE, payload, len);
	put_header(hdr, len, tw_crc32c(0, hdr + TW_ENTRY_HDR_SIZE, len));
	tw_store_le16(hdr + 2, hcheck_generic(hdr));
	h.lo = tw_load_le32(hdr);
	h.hi = tw_load_le64(hdr + 4);
	return h;
}

#ifdef TW_CRC_X86
__attribute__((target("sse4.2"))) static uint32_t chain_step_sse42(uint32_t chain,
								   struct tw__hdr_words h)
{
	return ~(uint32_t)_mm_crc32_u64(_mm_crc32_u32(~chain, h.lo), h.hi);
}
#endif

static uint32_t chain_step_generic(uint32_t chain, struct tw__hdr_words h)
{
	uint8_t b[TW_ENTRY_HDR_SIZE];

	tw_store_le32(b, h.lo);
	tw_store_le64(b + 4, h.hi);
	return tw_crc32c(chain, b, sizeof(b));
}

tw__chain_step_fn tw__log_chain_step_fn(void)
{
#ifdef TW_CRC_X86
	if (tw_likely(tw__have_sse42()))
		return chain_step_sse42;
#endif
	return chain_step_generic;
}

uint32_t tw__log_chain_step(uint32_t chain, struct tw__hdr_words h)
{
	return tw__log_chain_step_fn()(chain, h);
}

void tw__log_writer_take(struct tw_log_writer *w, size_t end, uint32_t chain, uint32_t n)
{
	w->chain = chain;
	w->pos = end;
	w->pending += n;
	w->entries += n;
}

void tw_log_writer_init(struct tw_log_writer *w, void *buf, size_t cap)
{
	tw_log_writer_resume(w, buf, cap, 0, 0, 0, 0);
}

void tw_log_writer_init_seeded(struct tw_log_writer *w, void *buf, size_t cap, uint32_t seed)
{
	/* The chain at offset 0 is the seed (chain_0 = seed); nothing else depends on it. */
	tw_log_writer_resume(w, buf, cap, 0, seed, 0, 0);
}

void tw_log_writer_resume(struct tw_log_writer *w, void *buf, size_t cap, size_t valid_len,
			  uint32_t chain, uint32_t last_checksum, uint64_t entries)
{
	/* A prefix longer than the buffer is a caller bug; clamping keeps every later store
	 * inside the buffer (the writer then reports -TW_EFULL). */
	if (valid_len > cap)
		valid_len = cap;
	w->buf = buf;
	w->cap = cap;
	w->pos = valid_len;
	w->write_start = valid_len;
	w->chain = chain;
	w->last_checksum = last_checksum;
	w->pending = 0;
	w->entries = entries;
}

bool tw_log_writer_fits(const struct tw_log_writer *w, size_t len)
{
	size_t room = w->cap - w->pos; /* pos <= cap always holds */

	/* Written without `pos + len + ...` so that no sum can wrap. */
	return room >= TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE &&
	       len <= room - TW_ENTRY_HDR_SIZE - TW_CKSUM_ENTRY_SIZE;
}

int tw_log_writer_append(struct tw_log_writer *w, const void *payload, uint32_t len,
			 size_t *offset_out)
{
	uint8_t *hdr;
	uint32_t crc;

	if (payload == NULL && len != 0)
		return -EINVAL;
	if (!tw_log_writer_fits(w, len))
		return -TW_EFULL;

	hdr = w->buf + w->pos;
	if (len)
		memcpy(hdr + TW_ENTRY_HDR_SIZE, payload, len);
	/* CRC of the copy, not of the source: it covers exactly the bytes that will be sent,
	 * even if the caller's memory changes under us. */
	crc = tw_crc32c(0, hdr + TW_ENTRY_HDR_SIZE, len);

	hdr[0] = TW_ENTRY_DATA;
	hdr[1] = 0; /* flags */
	tw_store_le32(hdr + 4, len);
	tw_store_le32(hdr + 8, crc);
	w->chain = finish_header(hdr, w->chain); /* bytes 2..3: the header check */

	if (offset_out)
		*offset_out = w->pos;
	w->pos += TW_ENTRY_HDR_SIZE + (size_t)len;
	w->pending++;
	w->entries++;
	return 0;
}

int tw_log_writer_seal(struct tw_log_writer *w, size_t *off_out, size_t *len_out)
{
	uint8_t *e;
	uint32_t cksum;

	if (w->pending == 0) {
		/* An empty write would be a checksum entry closing nothing; the scan rejects it. */
		*off_out = w->pos;
		*len_out = 0;
		return 0;
	}
	/* append() only accepted entries that left room for this one. */
	e = w->buf + w->pos;
	cksum = w->chain ? w->chain : 1; /* never zero: a zero would look like unwritten memory */
	e[0] = TW_ENTRY_CHECKSUM;
	e[1] = 0;
	tw_store_le16(e + 2, 0);
	tw_store_le32(e + 4, cksum);
	w->pos += TW_CKSUM_ENTRY_SIZE;

	*off_out = w->write_start;
	*len_out = w->pos - w->write_start;
	w->write_start = w->pos;
	w->last_checksum = cksum;
	w->pending = 0;
	return 0;
}

int tw_entry_next(struct tw_entry_iter *it, const void **payload_out, uint32_t *len_out,
		  size_t *offset_out)
{
	/* Structural checks (the payload CRCs and the chain were verified by tw_scan()): types,
	 * flags, the data header check (cheap, and it guards the length we are about to use), and
	 * every length against it->len so a wrong prefix cannot make us read past it. */
	while (it->pos < it->len) {
		const uint8_t *p = it->buf + it->pos;
		size_t rem = it->len - it->pos;
		uint32_t len;

		if (p[0] == TW_ENTRY_CHECKSUM) {
			if (rem < TW_CKSUM_ENTRY_SIZE || p[1] != 0 || tw_load_le16(p + 2) != 0)
				return -TW_ECORRUPT;
			it->pos += TW_CKSUM_ENTRY_SIZE;
			continue;
		}
		if (p[0] != TW_ENTRY_DATA || rem < TW_ENTRY_HDR_SIZE || p[1] != 0 ||
		    tw_load_le16(p + 2) != hcheck(p))
			return -TW_ECORRUPT;
		len = tw_load_le32(p + 4);
		if (len > rem - TW_ENTRY_HDR_SIZE)
			return -TW_ECORRUPT;
		if (payload_out)
			*payload_out = p + TW_ENTRY_HDR_SIZE;
		if (len_out)
			*len_out = len;
		if (offset_out)
			*offset_out = it->pos;
		it->pos += TW_ENTRY_HDR_SIZE + (size_t)len;
		return 1;
	}
	return 0;
}
