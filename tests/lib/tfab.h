/*
 * tests/lib/tfab.h — a fabric seam for tests: a fab's own ops table (fabric/fab_int.h) wrapped,
 * as libfabric's hook providers wrap a provider and raft's fixture wraps `struct raft_io`
 * (raft/fixture.h), so that a test holds, reorders or fails the completions of one-sided writes
 * without a hook in the code under test.
 *
 * tfab_wrap(t, fab) puts t's copy of fab's table in front of it (fab->ops = &t->ops): every
 * write goes through the backend as before, but its completion comes to `t->on_done` (if set)
 * with the completion the caller asked for (`next`); the test runs `next(op, status)` when it
 * likes, on whichever thread it likes, with the status it likes (a failure on demand). With
 * on_done NULL every completion passes straight on. Wrap a fab before another thread uses it,
 * or while it holds the fab (a log's primary: tfab_wrap_primary, under the context's driver
 * lock). t must outlive the fab.
 */
#ifndef TW_TESTS_TFAB_H
#define TW_TESTS_TFAB_H

#include <pthread.h>

#include "fabric/fab_int.h"

struct tw_primary;
struct tfab;

/* A completion the test intercepted: pass it on with next(op, status), now or later. */
typedef void (*tfab_done_fn)(struct tfab *t, struct tw_op *op, int status, tw_op_cb next);

#define TFAB_MAX_OPS 1024

struct tfab {
	struct fab_ops ops;        /* first: the table the fab calls */
	const struct fab_ops *inner;
	tfab_done_fn on_done;      /* NULL: pass through */
	void *arg;                 /* the test's */
	pthread_mutex_t mu;        /* guards the table below (completions may come on any thread) */
	struct {
		struct tw_op *op;
		tw_op_cb cb;
	} pending[TFAB_MAX_OPS];   /* writes posted, their caller's completion */
	unsigned writes;           /* writes posted through the wrapper */
};

/* Wrap `fab` (not yet used by another thread). */
void tfab_wrap(struct tfab *t, struct tw_fab *fab, tfab_done_fn on_done, void *arg);
/* Wrap the fab of an open primary `p`, safely against its progress thread (async mode). */
void tfab_wrap_primary(struct tfab *t, struct tw_primary *p, tfab_done_fn on_done, void *arg);
/* Completions pass through again (the table stays in front: harmless). */
void tfab_unhook(struct tfab *t);

#endif /* TW_TESTS_TFAB_H */
