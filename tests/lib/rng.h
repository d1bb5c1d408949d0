/*
 * tests/lib/rng.h — the unit tests' pseudo-random numbers: splitmix64 over one process-wide
 * state. A test seeds it with `rng_state = tap_seed();` so a failure can be replayed with the
 * seed it printed (TW_SEED). Not thread-safe.
 */
#ifndef TW_TESTS_RNG_H
#define TW_TESTS_RNG_H

#include <stdint.h>

extern uint64_t rng_state;

/* The next number of the sequence. */
uint64_t rnd(void);

#endif
