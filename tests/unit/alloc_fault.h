/*
 * tests/unit/alloc_fault.h — allocation fault injection for unit tests (docs/testing.md).
 * Linked only into test binaries built with -Wl,--wrap=malloc,... (tests/unit/meson.build,
 * `alloc_fault_link_args`): every call to malloc, calloc, realloc, strdup, strndup and mmap made
 * by code linked into the binary (the library's static form tw_internal, the test itself) goes
 * through __wrap_*, which fails the armed one. Calls made inside shared libraries (libfabric,
 * protobuf-c, libsodium, libc itself) are not seen.
 * Only threads that called tw_af_count_thread(true) count: the test decides whose allocations
 * are swept (deterministic when that is one thread).
 *   tw_af_count_thread(true);
 *   tw_af_arm(k, 0);   the k-th counted allocation from now fails (errno ENOMEM)
 *   ... run the workload ...
 *   tw_af_disarm();    returns how many failures were injected (0: the run saw fewer than k)
 * tw_af_arm(k, size) fails only counted allocations of exactly `size` bytes (calloc: n * size).
 */
#ifndef TW_TEST_ALLOC_FAULT_H
#define TW_TEST_ALLOC_FAULT_H

#include <stdbool.h>
#include <stddef.h>

void tw_af_count_thread(bool on);
void tw_af_arm(long k, size_t size);
/* Disarm; returns the number of injected failures since tw_af_arm. */
long tw_af_disarm(void);
/* Counted allocations since tw_af_arm (failed ones included). */
long tw_af_seen(void);

#endif
