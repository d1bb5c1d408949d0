/*
 * tests/lib/owner_util.h — the objects the ownership tests write: 100 bytes holding the
 * object's sequence number (u64 LE), the writer's tag (u64 LE: which process wrote it) and a
 * pattern derived from both, so a recovered entry names its writer and cannot be a stale or torn
 * copy of another.
 */
#ifndef TW_TESTS_OWNER_UTIL_H
#define TW_TESTS_OWNER_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define OW_OBJ 100u

static inline void ow_fill(uint8_t *p, uint64_t seq, uint64_t tag)
{
	for (unsigned i = 0; i < 8; i++) {
		p[i] = (uint8_t)(seq >> (8 * i));
		p[8 + i] = (uint8_t)(tag >> (8 * i));
	}
	for (unsigned i = 16; i < OW_OBJ; i++)
		p[i] = (uint8_t)(seq * 31u + tag * 7u + i);
}

/* Decode an object; false when the bytes are not one of ours. */
static inline bool ow_parse(const void *data, uint32_t len, uint64_t *seq, uint64_t *tag)
{
	const uint8_t *p = data;
	uint8_t want[OW_OBJ];

	if (len != OW_OBJ)
		return false;
	*seq = 0;
	*tag = 0;
	for (unsigned i = 0; i < 8; i++) {
		*seq |= (uint64_t)p[i] << (8 * i);
		*tag |= (uint64_t)p[8 + i] << (8 * i);
	}
	ow_fill(want, *seq, *tag);
	return memcmp(want, p, OW_OBJ) == 0;
}

#endif
