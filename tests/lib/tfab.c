/*
 * tests/lib/tfab.c — a fabric seam for tests (tfab.h).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "primary/primary_int.h"
#include "tap.h"
#include "tfab.h"

static struct tfab *of_fab(const struct tw_fab *fab)
{
	return (struct tfab *)((char *)fab->ops - offsetof(struct tfab, ops));
}

static void done(struct tw_op *op, int status)
{
	struct tfab *t = of_fab(op->chan->fab);
	tfab_done_fn fn;
	tw_op_cb next = NULL;

	pthread_mutex_lock(&t->mu);
	for (unsigned i = 0; i < TFAB_MAX_OPS; i++)
		if (t->pending[i].op == op) {
			next = t->pending[i].cb;
			t->pending[i].op = NULL;
			break;
		}
	fn = t->on_done;
	pthread_mutex_unlock(&t->mu);
	if (!next)
		TAP_FATAL("tfab: a completion of a write the wrapper did not post");
	op->cb = next; /* as the caller set it, for whoever reads it later */
	if (fn)
		fn(t, op, status, next);
	else
		next(op, status);
}

static int write_op(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
		    struct tw_mr *src_mr, uint64_t raddr, uint64_t key)
{
	struct tfab *t = of_fab(ch->fab);
	unsigned i;
	int rc;

	pthread_mutex_lock(&t->mu);
	for (i = 0; i < TFAB_MAX_OPS && t->pending[i].op; i++)
		;
	if (i == TFAB_MAX_OPS)
		TAP_FATAL("tfab: more than %u writes in flight", TFAB_MAX_OPS);
	t->pending[i].op = op;
	t->pending[i].cb = op->cb;
	t->writes++;
	pthread_mutex_unlock(&t->mu);
	op->cb = done;
	rc = t->inner->write(ch, op, src, len, src_mr, raddr, key);
	if (rc < 0) { /* not posted: no completion comes */
		pthread_mutex_lock(&t->mu);
		op->cb = t->pending[i].cb;
		t->pending[i].op = NULL;
		pthread_mutex_unlock(&t->mu);
	}
	return rc;
}

void tfab_wrap(struct tfab *t, struct tw_fab *fab, tfab_done_fn on_done, void *arg)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	t->inner = fab->ops;
	t->ops = *fab->ops;
	t->ops.write = write_op;
	t->on_done = on_done;
	t->arg = arg;
	fab->ops = &t->ops;
}

void tfab_wrap_primary(struct tfab *t, struct tw_primary *p, tfab_done_fn on_done, void *arg)
{
	tw__ctx_drive_enter(p->ctx); /* the progress thread, if any, is out of the fab */
	tfab_wrap(t, p->fab, on_done, arg);
	tw__ctx_drive_leave(p->ctx);
}

void tfab_unhook(struct tfab *t)
{
	pthread_mutex_lock(&t->mu);
	t->on_done = NULL;
	pthread_mutex_unlock(&t->mu);
}
