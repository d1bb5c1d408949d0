/*
 * primary/primary_test.h — the primary's test interface: hooks that only tests set. Not
 * installed, not for applications. No hook costs a test per operation: the halt is one relaxed
 * load at the top of each progress pass (ctx.c), the only place outside every fabric call; the
 * completion callback replaces the default in p->op_cb, which a posted write uses either way.
 */
#ifndef TW_PRIMARY_TEST_H
#define TW_PRIMARY_TEST_H

#include "fabric/fabric.h"

struct tw_primary;

/*
 * Halt: when status is non-zero, the progress thread of every asynchronous primary (of every
 * context) calls _exit(status) at the top of its next pass, outside any fabric call. A crash
 * test on shm needs it: libfabric 1.17's shm holds the *target's* region spinlock (in shared
 * memory) across a send (prov/shm/src/smr_msg.c, smr_generic_msg), so a process killed inside
 * one leaves every later sender to that target, and the target itself, spinning forever.
 * Async-signal-safe (one atomic store): a signal handler may call it.
 */
void tw__primary_test_set_halt(int status);

/*
 * Completion of posted writes: cb instead of tw__primary_op_done (the test then calls
 * tw__primary_op_done itself, e.g. out of order); NULL restores the default. Sync mode, on the
 * driving thread, between two calls on p.
 */
void tw__primary_test_set_op_cb(struct tw_primary *p, tw_op_cb cb);
void tw__primary_op_done(struct tw_op *op, int status);

#endif /* TW_PRIMARY_TEST_H */
