/* tests/lib/fab_pattern.h — test patterns and checksums shared by fab_peer and drivers. */
#ifndef TW_TESTS_FAB_PATTERN_H
#define TW_TESTS_FAB_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t fab_fnv1a(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* Deterministic bytes from a seed (xorshift), different for every seed and position. */
static inline void fab_pattern(void *p, size_t len, uint64_t seed)
{
	unsigned char *b = p;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x1234567;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (unsigned char)(x >> 24);
	}
}

#endif
