/*
 * primary/primary_test.h — the primary's test interface: hooks that only tests set. Not
 * installed, not for applications. No hook costs a test per operation: the completion callback
 * replaces the default in p->op_cb, which a posted write uses either way.
 */
#ifndef TW_PRIMARY_TEST_H
#define TW_PRIMARY_TEST_H

#include "fabric/fabric.h"

struct tw_primary;

/*
 * Completion of posted writes: cb instead of tw__primary_op_done (the test then calls
 * tw__primary_op_done itself, e.g. out of order); NULL restores the default. Sync mode, on the
 * driving thread, between two calls on p.
 */
void tw__primary_test_set_op_cb(struct tw_primary *p, tw_op_cb cb);
void tw__primary_op_done(struct tw_op *op, int status);

#endif /* TW_PRIMARY_TEST_H */
