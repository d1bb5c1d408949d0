/*
 * tests/fuzz/replay.h — TAP replay of a checked-in fuzz corpus through the fuzzer's own check
 * function, so the fuzzers' invariants are checked on every CI run without clang or libFuzzer;
 * and the fuzz targets' verdict on one input.
 */
#ifndef TW_TESTS_FUZZ_REPLAY_H
#define TW_TESTS_FUZZ_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Returns NULL when the input passes, else a description of the broken invariant. */
typedef const char *(*fuzz_check_fn)(const uint8_t *data, size_t size);

/*
 * The whole test: argv[1] is the corpus directory; every file in it (sorted by name, read into
 * an exact-size heap buffer so ASan sees any overread) is one TAP test, plus one that the corpus
 * holds at least `min_inputs` files. Returns the exit status (tap_exit()).
 */
int fuzz_replay_main(int argc, char **argv, fuzz_check_fn check, size_t min_inputs);

/* A libFuzzer entry's verdict on one input, err its check function's answer: a broken invariant
 * is said on stderr ("<target>: <err>") and aborts, which libFuzzer reports with the input;
 * else 0. */
static inline int fuzz_verdict(const char *target, const char *err)
{
	if (err) {
		fprintf(stderr, "%s: %s\n", target, err);
		abort();
	}
	return 0;
}

#endif
