/*
 * log/log_int.h — what log/crc32c.c, log/log_format.c and log/scan.c share: the data header
 * check, the one CPU-feature probe behind every CRC32C path, and the one-stream SSE4.2 CRC32C
 * loop (inline, so that the scan's fused walk reduces short payloads without a call).
 * Internal to log/; nothing here is exported from the library.
 */
#ifndef TW_LOG_INT_H
#define TW_LOG_INT_H

#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

#include "core/util.h"

/*
 * The CRC32C instructions of the CPUs with a hardware path: the function attribute that enables
 * them, the register type of the 8-byte step (x86's crc32q works on 64 bits: keeping the state
 * there saves a zero-extension per step) and one macro per width. tw__crc32c_hw_raw() below is
 * the one loop written over them.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TW_CRC_X86 1
#include <immintrin.h>
#define TW__CRC_TARGET __attribute__((target("sse4.2")))
typedef uint64_t tw__crc_reg;
#define TW__CRC_U64(c, v) _mm_crc32_u64((c), (v))
#define TW__CRC_U32(c, v) _mm_crc32_u32((c), (v))
#define TW__CRC_U16(c, v) _mm_crc32_u16((c), (v))
#define TW__CRC_U8(c, v) _mm_crc32_u8((c), (v))
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define TW_CRC_ARM 1
typedef uint32_t tw__crc_reg;
#if defined(__clang__)
/* clang's <arm_acle.h> declares __crc32c* only when the whole file is built with +crc. */
#define TW__CRC_TARGET __attribute__((target("crc")))
#define TW__CRC_U64(c, v) __builtin_arm_crc32cd((c), (v))
#define TW__CRC_U32(c, v) __builtin_arm_crc32cw((c), (v))
#define TW__CRC_U16(c, v) __builtin_arm_crc32ch((c), (v))
#define TW__CRC_U8(c, v) __builtin_arm_crc32cb((c), (v))
#else
#include <arm_acle.h> /* gcc declares them under its own target pragma */
#define TW__CRC_TARGET __attribute__((target("+crc")))
#define TW__CRC_U64(c, v) __crc32cd((c), (v))
#define TW__CRC_U32(c, v) __crc32cw((c), (v))
#define TW__CRC_U16(c, v) __crc32ch((c), (v))
#define TW__CRC_U8(c, v) __crc32cb((c), (v))
#endif
#endif

/*
 * Header check of a data entry (bytes 2..3), see log_format.h: bit 15 set, bits 0..14 the low 15
 * bits of CRC32C over the header's other 10 bytes in order (type, flags, length, payload_crc).
 * `crc` is that finished CRC32C. The tests compute it a second, independent way.
 */
#define TW__HCHECK_MARK 0x8000u
#define TW__HCHECK_OF(crc) ((uint16_t)(TW__HCHECK_MARK | ((crc) & 0x7fffu)))

/* ---- CPU features: probed once, for every CRC32C user ------------------------------------ */

enum tw__crc_impl {
	TW__CRC_UNKNOWN = 0,
	TW__CRC_TABLE,
	TW__CRC_SSE42,          /* crc32 + pclmulqdq (three streams) */
	TW__CRC_SSE42_NOPCLMUL, /* crc32 only (one stream) */
	TW__CRC_ARMV8,
};

/*
 * The cache and the probe, in log/crc32c.c. Every thread computes the same value, so a race only
 * stores that value twice; atomic loads and stores keep it free of data races.
 */
extern int tw__crc_impl_cached;
int tw__crc_impl_detect(void);

static inline enum tw__crc_impl tw__crc_impl(void)
{
	int i = __atomic_load_n(&tw__crc_impl_cached, __ATOMIC_RELAXED);

	if (tw_unlikely(i == TW__CRC_UNKNOWN)) {
		i = tw__crc_impl_detect();
		__atomic_store_n(&tw__crc_impl_cached, i, __ATOMIC_RELAXED);
	}
	return (enum tw__crc_impl)i;
}

#ifdef TW_CRC_X86

/* The crc32 instruction is there (with or without pclmulqdq). */
static inline bool tw__have_sse42(void)
{
	enum tw__crc_impl i = tw__crc_impl();

	return i == TW__CRC_SSE42 || i == TW__CRC_SSE42_NOPCLMUL;
}

#endif /* TW_CRC_X86 */

#ifdef TW__CRC_TARGET

/*
 * Below this many bytes tw_crc32c() and an entry's put use one stream instead of three and
 * their combination (x86; from 96 B before): 50 instructions fewer for 100 B, about the same
 * time (faster when calls are independent, slower when each call's CRC feeds the next;
 * docs/primary.md, "The append engine", has the figures).
 */
#define TW__CRC_SHORT 192

/*
 * Raw (complemented) CRC32C state advanced over [p, p+len) with the CPU's instructions, one
 * stream: 8 bytes per instruction, then the 0..7 byte tail. On x86 the tail of tw_crc32c()'s
 * three streams, its whole path without pclmulqdq, and the scan's inline reduction of short
 * payloads; on aarch64 the whole of tw_crc32c().
 */
TW__CRC_TARGET static inline uint32_t tw__crc32c_hw_raw(uint32_t crc, const uint8_t *p,
							 size_t len)
{
	tw__crc_reg c = crc;

	while (len >= 8) {
		c = TW__CRC_U64(c, tw_load_le64(p));
		p += 8;
		len -= 8;
	}
	crc = (uint32_t)c;
	if (len & 4) {
		crc = TW__CRC_U32(crc, tw_load_le32(p));
		p += 4;
	}
	if (len & 2) {
		crc = TW__CRC_U16(crc, tw_load_le16(p));
		p += 2;
	}
	if (len & 1)
		crc = TW__CRC_U8(crc, *p);
	return crc;
}

#endif /* TW__CRC_TARGET */


/* Internal: the generic walk of tw_scan() / tw_scan_seeded(), whatever the CPU. For tests; not
 * exported. */
void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out);
void tw__scan_generic_seeded(const void *buf, size_t len, uint32_t seed,
			     struct tw_scan_result *out);

#endif /* TW_LOG_INT_H */
