/*
 * primary/primary_test.c — the primary's test hooks (primary_test.h).
 */
#include "primary/primary_int.h"
#include "primary/primary_test.h"

void tw__primary_test_set_op_cb(struct tw_primary *p, tw_op_cb cb)
{
	p->op_cb = cb ? cb : tw__primary_op_done;
}
