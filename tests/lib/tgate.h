/*
 * tests/lib/tgate.h — a gate in a log's completion path, on the fabric seam of tfab.h: while the
 * gate is closed, the thread that is handed the first completion (a progress thread) waits in it,
 * so the write stays in its slot and the test decides when the slot frees; the completions then
 * go on to the primary on that thread.
 *
 *   static struct tgate g = TGATE_INIT;
 *   tgate_close_on(&g, p);              closed, nothing seen; set before the first append
 *   ... append ...
 *   ok(tgate_wait_seen(&g, 10), ...);   a write is out and held
 *   ... look at the log with the slot busy ...
 *   tgate_open(&g);                     it completes, and every later one passes
 */
#ifndef TW_TESTS_TGATE_H
#define TW_TESTS_TGATE_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "tfab.h"

struct tgate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
	int seen;         /* completions that reached the gate */
	struct tfab fab;
};

#define TGATE_INIT { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER }

static inline void tgate_cb(struct tfab *t, struct tw_op *op, int status, tw_op_cb next)
{
	struct tgate *g = t->arg;

	pthread_mutex_lock(&g->mu);
	g->seen++;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	next(op, status);
}

/* Close the gate, forget what it saw, and put it in front of p's fabric. */
static inline void tgate_close_on(struct tgate *g, struct tw_primary *p)
{
	pthread_mutex_lock(&g->mu);
	g->open = false;
	g->seen = 0;
	pthread_mutex_unlock(&g->mu);
	tfab_wrap_primary(&g->fab, p, tgate_cb, g);
}

/* Whether a completion reached the gate within `secs` seconds. */
static inline bool tgate_wait_seen(struct tgate *g, int secs)
{
	struct timespec until;
	bool seen;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	pthread_mutex_lock(&g->mu);
	while (!g->seen && pthread_cond_timedwait(&g->cv, &g->mu, &until) == 0)
		;
	seen = g->seen > 0;
	pthread_mutex_unlock(&g->mu);
	return seen;
}

static inline void tgate_open(struct tgate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

#endif
