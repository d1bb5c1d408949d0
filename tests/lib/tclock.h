/*
 * tests/lib/tclock.h — a clock for tests (core/clock.h): time that moves only when the test
 * moves it, so a timeout rule is checked without waiting for it. Header-only. Safe across
 * threads (the component under test reads it on its own thread).
 *
 *   struct tclock t;
 *   tclock_init(&t);                hand &t.ops to the component (e.g. tw__backup_opts.clock)
 *   tclock_advance(&t, ms * 1000000);
 */
#ifndef TW_TESTS_TCLOCK_H
#define TW_TESTS_TCLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"

struct tclock {
	struct tw__clock ops; /* first: the table the component calls */
	_Atomic uint64_t ns;  /* monotonic; realtime is this past a fixed date */
};

static inline struct tclock *tclock_of(const struct tw__clock *c)
{
	return (struct tclock *)((char *)c - offsetof(struct tclock, ops));
}

static inline uint64_t tclock_mono(const struct tw__clock *c)
{
	return atomic_load(&tclock_of(c)->ns);
}

static inline uint64_t tclock_real(const struct tw__clock *c)
{
	return UINT64_C(1767225600000000000) + atomic_load(&tclock_of(c)->ns); /* 2026-01-01 */
}

/* Starts at 1 s (a zero time reads as "never" in places). */
static inline void tclock_init(struct tclock *t)
{
	t->ops.mono_ns = tclock_mono;
	t->ops.real_ns = tclock_real;
	atomic_init(&t->ns, UINT64_C(1000000000));
}

static inline void tclock_advance(struct tclock *t, uint64_t ns)
{
	atomic_fetch_add(&t->ns, ns);
}

#endif /* TW_TESTS_TCLOCK_H */
