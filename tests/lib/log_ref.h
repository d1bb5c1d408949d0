/*
 * tests/lib/log_ref.h — pieces of the log format written again from its description
 * (docs/log-format.md), independently of log/, for the tests and fuzzers to hold the library
 * against. Header-only: the fuzz targets build without tests/lib's library.
 */
#ifndef TW_TESTS_LOG_REF_H
#define TW_TESTS_LOG_REF_H

#include <stdint.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"

/*
 * The data header check (docs/log-format.md §2) of the 12-byte header at h: bit 15 set, bits
 * 0..14 the low 15 bits of CRC32C over the 10 other header bytes (type, flags, length,
 * payload_crc), computed with the table CRC.
 */
static inline uint16_t ref_hcheck(const uint8_t *h)
{
	uint8_t m[10];

	m[0] = h[0];
	m[1] = h[1];
	memcpy(m + 2, h + 4, 8);
	return (uint16_t)(0x8000u | (tw_crc32c_portable(0, m, 10) & 0x7fffu));
}

/* Give the data header at h a matching check (bytes 2..3). */
static inline void ref_set_hcheck(uint8_t *h)
{
	tw_store_le16(h + 2, ref_hcheck(h));
}

#endif
