/*
 * tests/lib/tear.h — what the torn-write tests share: the orders in which a write's bytes land,
 * and the chain seed a log test runs under (docs/log-format.md §7).
 */
#ifndef TW_TESTS_TEAR_H
#define TW_TESTS_TEAR_H

#include <stddef.h>
#include <stdint.h>

/* Ascending, descending, or 64-byte chunks aligned to the buffer in a random order (rnd(),
 * rng.h), ascending inside each chunk. */
enum tl_order { TL_ORDER_ASC, TL_ORDER_DESC, TL_ORDER_CHUNKS, TL_ORDER_COUNT };
extern const char *const tl_order_name[TL_ORDER_COUNT];

/* perm[0 .. e-s) := the offsets (relative to s) of the bytes of [s, e) in landing order o. */
void tl_write_order(enum tl_order o, size_t s, size_t e, size_t *perm);

/* The chain seed: 0 (the original format) unless TW_LOG_SEED is set (meson runs some log tests
 * a second time with a non-zero seed); a non-zero seed is printed as a diagnostic. */
uint32_t tl_log_seed(void);

#endif
