/* tests/lib/fab_op.h — a fabric operation whose completion a test inspects (header-only). */
#ifndef TW_TESTS_FAB_OP_H
#define TW_TESTS_FAB_OP_H

#include <string.h>

#include "fabric/fabric.h"

/* The op is the first member: the completion callback gets the struct back from it. */
struct opres {
	struct tw_op op;
	int calls;  /* completions seen: a correct fabric completes an operation exactly once */
	int status; /* the last completion's status */
};

static inline void op_cb(struct tw_op *op, int status)
{
	struct opres *r = (struct opres *)op;

	r->calls++;
	r->status = status;
}

static inline void op_init(struct opres *r)
{
	memset(r, 0, sizeof(*r));
	r->op.cb = op_cb;
}

#endif
