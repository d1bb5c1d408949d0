/*
 * tailwind/log_format.h — the replicated log's byte format: CRC32C, the writer that builds
 * entries and checksum entries in a buffer, and the scan that finds a buffer's valid prefix.
 *
 * Pure functions over byte buffers: no I/O, no libfabric, no allocation. docs/log-format.md
 * describes every byte and argues why a torn write is always detected.
 *
 * Layout (little-endian), entries packed back to back from offset 0 of a zero-filled buffer:
 *   data entry      [type=1:u8][flags=0:u8][hcheck:u16][length:u32][payload_crc:u32] payload
 *   checksum entry  [type=2:u8][flags=0:u8][reserved=0:u16][checksum:u32]
 * `hcheck` (bytes 2..3) guards the data header itself: 0x8000 | (low 15 bits of CRC32C over the
 * other 10 header bytes in order: type, flags, length, payload_crc), i.e.
 *   hcheck = 0x8000 | (tw_crc32c(0, {b0, b1, b4, ..., b11}, 10) & 0x7FFF).
 * The scan verifies it before it uses the length, so any 1 or 2 flipped bits in a data header
 * stop the scan at that header with certainty; bit 15 (always 1 here, always 0 in a checksum
 * entry's reserved field) keeps a data header and a checksum entry at least 3 bits apart.
 * `checksum` is CRC32C chained over the 12 header bytes (hcheck included) of every data entry in
 * the buffer so far (starting from the buffer's seed, 0 unless the *_seeded calls are used),
 * stored as 1 when the CRC is 0, so a stored checksum is never zero. Every RDMA write carries
 * one or more data entries followed by exactly one checksum entry.
 *
 * Seeds: a buffer written with seed 0 into zeroed memory is the original format, with every
 * certainty of docs/log-format.md §7. A backup that reuses a buffer without zeroing it draws a
 * fresh random seed for each use; entries left from earlier uses (other seeds) then fail the
 * chain comparison except with odds at most 2^-31 per scan (§7, "Reuse without zeroing").
 * Only the chain depends on the seed: header checks, entry bytes and the iterator do not.
 */
#ifndef TAILWIND_LOG_FORMAT_H
#define TAILWIND_LOG_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TW_ENTRY_HDR_SIZE 12u  /* data entry header */
#define TW_CKSUM_ENTRY_SIZE 8u /* checksum entry */

enum tw_entry_type {
	TW_ENTRY_INVALID = 0, /* zeroed memory: end of the log */
	TW_ENTRY_DATA = 1,
	TW_ENTRY_CHECKSUM = 2,
};

/*
 * CRC32C (Castagnoli, reflected, as in iSCSI, RFC 3720). Chain calls by passing the previous
 * result: tw_crc32c(tw_crc32c(0, a, n), b, m) == CRC of a||b. tw_crc32c(0, "123456789", 9) is
 * 0xE3069283. Uses SSE4.2 or ARMv8 CRC instructions where the CPU has them, a table otherwise;
 * all give identical values. Thread-safe.
 */
TW_API uint32_t tw_crc32c(uint32_t crc, const void *buf, size_t len);
/* The portable implementation alone (for tests and benchmarks). */
TW_API uint32_t tw_crc32c_portable(uint32_t crc, const void *buf, size_t len);
/* Name of the implementation tw_crc32c() uses on this CPU ("sse4.2", "armv8", "table"). */
TW_API const char *tw_crc32c_impl(void);

/*
 * Builds entries into a caller-owned, zero-filled buffer. One writer per buffer; not thread-safe.
 * The buffer is borrowed for the writer's lifetime. A writer never lets the buffer fill past the
 * point where the closing checksum entry of the current write would no longer fit.
 */
struct tw_log_writer {
	uint8_t *buf;
	size_t cap;
	size_t pos;         /* next free byte */
	size_t write_start; /* first byte of the current, unsealed write */
	uint32_t chain;     /* running CRC32C over data entry headers */
	uint32_t last_checksum; /* value stored by the last seal (0 before the first) */
	uint32_t pending;   /* data entries appended since the last seal */
	uint64_t entries;   /* data entries in the buffer */
};

/* Start writing at offset 0 of `buf` (cap bytes, zero-filled by the caller). Seed 0. */
TW_API void tw_log_writer_init(struct tw_log_writer *w, void *buf, size_t cap);

/*
 * Start writing at offset 0 of `buf` with the header chain starting at `seed` (chain_0 = seed;
 * tw_log_writer_init() is seed 0). The buffer need not be zeroed if it held only entries
 * written under other seeds (earlier uses) and zeros: the scan with this seed then accepts none
 * of them except with odds at most 2^-31 per scan (docs/log-format.md §7). Bytes written
 * under this same seed must not be left after the prefix (see tw_log_writer_resume()).
 */
TW_API void tw_log_writer_init_seeded(struct tw_log_writer *w, void *buf, size_t cap,
				      uint32_t seed);

/*
 * Continue a buffer whose first `valid_len` bytes hold a valid prefix (as reported by tw_scan()
 * or tw_scan_seeded(), with `chain` its running CRC: the seed itself when valid_len is 0, so
 * the seed needs no argument of its own). The bytes after the prefix must be zero, or bytes of
 * earlier uses written under other seeds; bytes written under this buffer's seed after
 * `valid_len` (a torn write of this use) must be zeroed first.
 */
TW_API void tw_log_writer_resume(struct tw_log_writer *w, void *buf, size_t cap, size_t valid_len,
				 uint32_t chain, uint32_t last_checksum, uint64_t entries);

/* Whether a data entry of `len` payload bytes still fits, with room left for the checksum entry. */
TW_API bool tw_log_writer_fits(const struct tw_log_writer *w, size_t len);

/*
 * Append one data entry carrying a copy of `payload` (len bytes; payload may be NULL when len
 * is 0) to the current write. On success returns 0 and, if offset_out is not NULL, the entry's
 * offset in the buffer. Returns -TW_EFULL (nothing written) when it does not fit, -EINVAL when
 * payload is NULL and len is not 0. The payload is borrowed until return.
 */
TW_API int tw_log_writer_append(struct tw_log_writer *w, const void *payload, uint32_t len,
				size_t *offset_out);

/*
 * Close the current write with a checksum entry. *off_out and *len_out receive the byte range
 * that one RDMA write must carry (from the first entry of this write through the checksum
 * entry). With nothing appended since the last seal, returns 0 with *len_out = 0 and writes
 * nothing.
 */
TW_API int tw_log_writer_seal(struct tw_log_writer *w, size_t *off_out, size_t *len_out);

/* Bytes a writer needs for `n` entries of `payload_len` bytes sealed as one write. */
static inline size_t tw_log_write_size(size_t n, size_t payload_len)
{
	return n * (TW_ENTRY_HDR_SIZE + payload_len) + TW_CKSUM_ENTRY_SIZE;
}

/* Why a scan stopped. */
enum tw_scan_stop {
	TW_SCAN_END = 0,          /* reached the end of the buffer exactly */
	TW_SCAN_ZERO,             /* found type 0 (zeroed memory): the normal end of an open buffer */
	TW_SCAN_BAD_LENGTH,       /* an entry or its payload would leave the buffer */
	TW_SCAN_BAD_HEADER,       /* unknown type, flags set, data header check mismatch, checksum
				   * entry reserved bits set, or a checksum entry closing nothing */
	TW_SCAN_CHAIN_MISMATCH,   /* a checksum entry did not match the header chain */
	TW_SCAN_PAYLOAD_MISMATCH, /* a payload did not match its CRC */
};

struct tw_scan_result {
	size_t valid_len;       /* bytes 0..valid_len-1 hold whole, verified writes */
	uint64_t entries;       /* data entries inside the valid prefix */
	uint32_t last_checksum; /* stored value of the last matching checksum entry (0: none) */
	uint32_t chain;         /* header chain CRC at valid_len (for tw_log_writer_resume); the
				 * seed when valid_len is 0 */
	enum tw_scan_stop stop; /* why the walk stopped */
	size_t stop_offset;     /* offset of the entry at which it stopped */
};

/*
 * Algorithm 1 of the Tailwind paper plus header and payload verification: walk the entries from
 * offset 0, verify each data header's check before using its length, chain the header CRC,
 * compare at each checksum entry, verify every payload CRC; the valid prefix
 * ends after the last checksum entry that matched with all payloads before it verified. A
 * checksum entry that closes no data entry (an empty write) is rejected as TW_SCAN_BAD_HEADER.
 * Never reads outside [buf, buf+len) (buf may be NULL when len is 0). Thread-safe (reads only).
 */
TW_API void tw_scan(const void *buf, size_t len, struct tw_scan_result *out);

/*
 * tw_scan() of a buffer written with tw_log_writer_init_seeded(..., seed): the header chain
 * starts at `seed` (tw_scan() is seed 0). With no valid entry, out->chain is `seed`.
 */
TW_API void tw_scan_seeded(const void *buf, size_t len, uint32_t seed, struct tw_scan_result *out);

/* Short name of a stop reason ("end", "zero", "bad-length", ...). */
TW_API const char *tw_scan_stop_str(enum tw_scan_stop stop);

/*
 * Iterate the data entries of a prefix that tw_scan() validated (checksum entries are skipped).
 * Initialise with it->buf, it->len (the valid length) and it->pos = 0. Returns 1 and the entry,
 * 0 at the end, or -TW_ECORRUPT if the bytes are not a well-formed prefix (types, flags, data
 * header checks and lengths are re-checked; payload CRCs and the chain are not).
 */
struct tw_entry_iter {
	const uint8_t *buf;
	size_t len;
	size_t pos;
};
TW_API int tw_entry_next(struct tw_entry_iter *it, const void **payload_out, uint32_t *len_out,
			 size_t *offset_out);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_LOG_FORMAT_H */
