/*
 * log/crc32c.c — CRC32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI).
 *
 * Three implementations that give identical values:
 *   - x86-64 SSE4.2: the crc32 instruction has a latency of 3 cycles and a throughput of one
 *     per cycle, so long buffers are split into three streams computed side by side and the
 *     three partial CRCs are combined with a carry-less multiply (PCLMULQDQ) by x^(8n) mod P;
 *   - ARMv8 CRC extension (__crc32c*), one stream (compiled on aarch64 only);
 *   - portable slicing-by-8 tables, for every other CPU and as the reference in tests.
 * The choice is made at run time from the CPU's feature bits; nothing here needs -msse4.2.
 *
 * Convention (same as zlib's crc32()): the value passed in and returned is the finished CRC,
 * so calls chain; internally the register holds its complement ("raw" state).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

#include "core/util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TW_CRC_X86 1
#include <immintrin.h>
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define TW_CRC_ARM 1
#if defined(__clang__)
/* clang's <arm_acle.h> declares __crc32c* only when the whole file is built with +crc. */
#define CRC32CD(c, v) __builtin_arm_crc32cd((c), (v))
#define CRC32CW(c, v) __builtin_arm_crc32cw((c), (v))
#define CRC32CH(c, v) __builtin_arm_crc32ch((c), (v))
#define CRC32CB(c, v) __builtin_arm_crc32cb((c), (v))
#else
#include <arm_acle.h> /* gcc declares them under its own target pragma */
#define CRC32CD(c, v) __crc32cd((c), (v))
#define CRC32CW(c, v) __crc32cw((c), (v))
#define CRC32CH(c, v) __crc32ch((c), (v))
#define CRC32CB(c, v) __crc32cb((c), (v))
#endif
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif
#endif

#define POLY 0x82F63B78u

/* ---- portable: slicing-by-8 ------------------------------------------------------------- */

/* Built once (pthread_once) and read-only afterwards; 8 KiB. */
static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t raw_table(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint64_t v = tw_load_le64(p) ^ crc;

		crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
		      table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
		      table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return crc;
}

uint32_t tw_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&table_once, table_init);
	return ~raw_table(~crc, buf, len);
}

/* ---- x86-64: SSE4.2 crc32 + PCLMULQDQ combination --------------------------------------- */

#ifdef TW_CRC_X86

/* One stream: 8 bytes per instruction, then the 0..7 byte tail. */
__attribute__((target("sse4.2"))) static inline uint32_t raw_sse42_1way(uint32_t crc,
									  const uint8_t *p,
									  size_t len)
{
	uint64_t c = crc;

	while (len >= 8) {
		c = _mm_crc32_u64(c, tw_load_le64(p));
		p += 8;
		len -= 8;
	}
	crc = (uint32_t)c;
	if (len & 4) {
		crc = _mm_crc32_u32(crc, tw_load_le32(p));
		p += 4;
	}
	if (len & 2) {
		crc = _mm_crc32_u16(crc, tw_load_le16(p));
		p += 2;
	}
	if (len & 1)
		crc = _mm_crc32_u8(crc, *p);
	return crc;
}

/*
 * Multiply a raw CRC by x^(8n) mod P, i.e. append n zero bytes to it. `k` is x^(8n-33) mod P
 * (bit-reflected): the 64-bit carry-less product of two reflected 32-bit values represents
 * crc*k*x, and crc32 over that 64-bit word with a zero register multiplies by x^32 and
 * reduces: crc * x^(8n-33) * x * x^32 = crc * x^(8n).
 */
__attribute__((target("sse4.2,pclmul"))) static inline uint32_t shift_clmul(uint32_t crc,
									      uint32_t k)
{
	__m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)crc), _mm_cvtsi32_si128((int)k),
					    0x00);

	return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(prod));
}

/*
 * Three streams of `n` bytes each (n a multiple of 8): blocks [0,n), [n,2n), [2n,3n) are
 * reduced independently, so three crc32 instructions are in flight at once, then combined:
 * crc(A||B||C) = crc_A * x^(16n) ^ crc_B * x^(8n) ^ crc_C. k1 = x^(8n-33), k2 = x^(16n-33).
 */
__attribute__((target("sse4.2,pclmul"))) static inline uint32_t
raw_3way(uint32_t crc, const uint8_t *p, size_t n, uint32_t k1, uint32_t k2)
{
	uint64_t c0 = crc, c1 = 0, c2 = 0;

	for (size_t i = 0; i < n; i += 8) {
		c0 = _mm_crc32_u64(c0, tw_load_le64(p + i));
		c1 = _mm_crc32_u64(c1, tw_load_le64(p + n + i));
		c2 = _mm_crc32_u64(c2, tw_load_le64(p + 2 * n + i));
	}
	return shift_clmul((uint32_t)c0, k2) ^ shift_clmul((uint32_t)c1, k1) ^ (uint32_t)c2;
}

/*
 * Block sizes (bytes per stream) and their constants, generated by iterating x^m mod P and
 * checked by tests/unit/test_crc32c.c against the table version for every length up to 4 KiB
 * and for long buffers. Big blocks amortise the ~15-cycle combination; the small tiers keep
 * 100 B - 4 KiB payloads off the one-stream path (3 cycles per 8 bytes).
 */
#define K_4096_1 0x82F89C77u
#define K_4096_2 0x54A86326u
#define K_512_1 0xDD7E3B0Cu
#define K_512_2 0x170076FAu
#define K_128_1 0x0D3B6092u
#define K_128_2 0xB9E02B86u
#define K_32_1 0xBA4FC28Eu
#define K_32_2 0x9E4ADDF8u

__attribute__((target("sse4.2,pclmul"))) static uint32_t raw_sse42(uint32_t crc,
								     const uint8_t *p, size_t len)
{
	while (len >= 3 * 4096) {
		crc = raw_3way(crc, p, 4096, K_4096_1, K_4096_2);
		p += 3 * 4096;
		len -= 3 * 4096;
	}
	while (len >= 3 * 512) {
		crc = raw_3way(crc, p, 512, K_512_1, K_512_2);
		p += 3 * 512;
		len -= 3 * 512;
	}
	while (len >= 3 * 128) {
		crc = raw_3way(crc, p, 128, K_128_1, K_128_2);
		p += 3 * 128;
		len -= 3 * 128;
	}
	while (len >= 3 * 32) {
		crc = raw_3way(crc, p, 32, K_32_1, K_32_2);
		p += 3 * 32;
		len -= 3 * 32;
	}
	return raw_sse42_1way(crc, p, len);
}

/* CPUs with SSE4.2 but without PCLMULQDQ (a few 2008-2010 parts): one stream. */
__attribute__((target("sse4.2"))) static uint32_t raw_sse42_nopclmul(uint32_t crc,
								       const uint8_t *p, size_t len)
{
	return raw_sse42_1way(crc, p, len);
}

#endif /* TW_CRC_X86 */

/* ---- aarch64: ARMv8 CRC extension ------------------------------------------------------- */

#ifdef TW_CRC_ARM

#if defined(__clang__)
#define TW_TARGET_CRC __attribute__((target("crc")))
#else
#define TW_TARGET_CRC __attribute__((target("+crc")))
#endif

/*
 * One stream (crc32cx has a 2-3 cycle latency on most cores; a 3-way version with PMULL
 * combination would follow the x86 one). Compiled (clang --target=aarch64), never run: no ARM
 * machine here.
 */
TW_TARGET_CRC static uint32_t raw_armv8(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		crc = CRC32CD(crc, tw_load_le64(p));
		p += 8;
		len -= 8;
	}
	if (len & 4) {
		crc = CRC32CW(crc, tw_load_le32(p));
		p += 4;
	}
	if (len & 2) {
		crc = CRC32CH(crc, tw_load_le16(p));
		p += 2;
	}
	if (len & 1)
		crc = CRC32CB(crc, *p);
	return crc;
}

#endif /* TW_CRC_ARM */

/* ---- dispatch --------------------------------------------------------------------------- */

enum impl {
	IMPL_UNKNOWN = 0,
	IMPL_TABLE,
	IMPL_SSE42,
	IMPL_SSE42_NOPCLMUL,
	IMPL_ARMV8,
};

/*
 * Resolved on first use. Every thread computes the same value, so a race only stores that value
 * twice; the atomic load/store keeps it free of data races.
 */
static int impl_cached;

static int impl_detect(void)
{
#ifdef TW_CRC_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		return __builtin_cpu_supports("pclmul") ? IMPL_SSE42 : IMPL_SSE42_NOPCLMUL;
#endif
#ifdef TW_CRC_ARM
#if defined(__ARM_FEATURE_CRC32)
	return IMPL_ARMV8;
#elif defined(__linux__)
	if (getauxval(AT_HWCAP) & HWCAP_CRC32)
		return IMPL_ARMV8;
#endif
#endif
	return IMPL_TABLE;
}

static inline int impl_get(void)
{
	int i = __atomic_load_n(&impl_cached, __ATOMIC_RELAXED);

	if (tw_unlikely(i == IMPL_UNKNOWN)) {
		i = impl_detect();
		__atomic_store_n(&impl_cached, i, __ATOMIC_RELAXED);
	}
	return i;
}

uint32_t tw_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	switch (impl_get()) {
#ifdef TW_CRC_X86
	case IMPL_SSE42:
		return ~raw_sse42(~crc, p, len);
	case IMPL_SSE42_NOPCLMUL:
		return ~raw_sse42_nopclmul(~crc, p, len);
#endif
#ifdef TW_CRC_ARM
	case IMPL_ARMV8:
		return ~raw_armv8(~crc, p, len);
#endif
	default:
		return tw_crc32c_portable(crc, p, len);
	}
}

const char *tw_crc32c_impl(void)
{
	switch (impl_get()) {
	case IMPL_SSE42:
		return "sse4.2";
	case IMPL_SSE42_NOPCLMUL:
		return "sse4.2-nopclmul";
	case IMPL_ARMV8:
		return "armv8";
	default:
		return "table";
	}
}
