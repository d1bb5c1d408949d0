/*
 * core/clock.h — the clock seam: the time the library's rules are measured in, read through a
 * small table, so that a test can move time on and check a timeout rule without waiting for it
 * (as raft's fixture drives `raft_io->time`, raft/fixture.h). Internal to libtailwind.
 *
 * Production code uses tw__clock_system (clock_gettime). A component that keeps a time rule
 * takes a `const struct tw__clock *` at its open (NULL: the system clock) and reads it through
 * tw__clock_mono / tw__clock_real; a test hands its own table (tests/lib/tclock.h). No global
 * and no test branch: the table is the component's, as the storage seam's is
 * (backup/storage.h).
 *
 * Users so far: the backup's fence hold (TW_FENCE_HOLD_MS, backup/backup_ops.c). The fabric
 * has had its own seam for its deadlines since before this one (tw_fab_config.clock_ns).
 */
#ifndef TW_CORE_CLOCK_H
#define TW_CORE_CLOCK_H

#include <stdint.h>

struct tw__clock {
	uint64_t (*mono_ns)(const struct tw__clock *c); /* CLOCK_MONOTONIC, nanoseconds */
	uint64_t (*real_ns)(const struct tw__clock *c); /* CLOCK_REALTIME, ns since the epoch */
};

/* clock_gettime. */
extern const struct tw__clock tw__clock_system;

/* c, or tw__clock_system when c is NULL. */
static inline const struct tw__clock *tw__clock_or_system(const struct tw__clock *c)
{
	return c ? c : &tw__clock_system;
}

static inline uint64_t tw__clock_mono(const struct tw__clock *c)
{
	return c->mono_ns(c);
}

static inline uint64_t tw__clock_real(const struct tw__clock *c)
{
	return c->real_ns(c);
}

#endif /* TW_CORE_CLOCK_H */
