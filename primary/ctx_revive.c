/*
 * primary/ctx_revive.c — lost backups tried again in the background (docs/primary.md, "A lost
 * backup comes back"). A backup whose channel was lost and closed (a crash, a pause past the
 * operation timeout, a refused connect) used to stay out of its context for good, so that after
 * two or three restarts of backups every log ran out of spares. Now a thread of the context, the
 * reviver, probes it with back-off: a connect and a Handshake of its own, on a fabric of its own,
 * so that a backup that does not answer (a paused process whose kernel accepts the connection)
 * blocks this thread, never the progress thread or an append. Once a probe is answered, the
 * progress thread connects the context to the backup again (tw__ctx_revive_step); the logs then
 * use it for new segments and as a spare (pb_back), never for a replica it held before its loss.
 *
 * Threads: tw__ctx_revive_step and tw__ctx_revive_stop run on the context's driver; the reviver
 * reads only what never changes after tw__ctx_create (the provider, the timeouts, the key, the
 * node id) and its own slots, under `lock`.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "peer/peer.h"
#include "primary/primary_int.h"

struct rv_slot {
	char addr[TW_ADDR_MAX];
	bool wanted;         /* asked by the driver, not answered yet */
	bool answered;       /* a probe was answered: the driver connects */
	unsigned backoff_ms; /* the wait after the next failed probe */
	uint64_t next_ns;    /* the next probe, not before */
	uint64_t tries;      /* failed probes since it was lost */
	bool urgent;         /* tw__ctx_revive_now waits for its next probe */
	uint64_t urgent_tries; /* tries when it was asked */
};

struct ctx_revive {
	struct tw_ctx *ctx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;   /* a slot wanted, or stop */
	bool stop;
	unsigned answered;   /* slots answered (written under lock, read by the driver without) */
	size_t cap;
	struct rv_slot slot[];
};

/* A probe's connect and Handshake wait at most this long (less when the context's connect
 * timeout is shorter): it bounds how long a close waits for the reviver. */
#define RV_PROBE_MS 1000u

static unsigned probe_ms(const struct tw_ctx *ctx)
{
	unsigned t = ctx->cfg.connect_timeout_ms ? ctx->cfg.connect_timeout_ms : RV_PROBE_MS;

	return t < RV_PROBE_MS ? t : RV_PROBE_MS;
}

/* Connect and handshake `addr` on `fab` (opened here when *fab is NULL), then hang up. On a
 * failure the fabric is closed (shm: a dead peer can block the others' completions). */
static int probe(struct ctx_revive *rv, struct tw_fab **fab, const char *addr, char *why,
		 size_t whylen)
{
	const struct tw_ctx *ctx = rv->ctx;
	struct tw_peer_opts o;
	struct tw_peer pr;
	int rc;

	if (!*fab) {
		struct tw_fab_config fc;
		struct tw_fab_events ev;

		tw__fab_config_init(&fc);
		fc.provider = ctx->cfg.provider;
		fc.connect_timeout_ms = probe_ms(ctx);
		fc.op_timeout_ms = probe_ms(ctx);
		fc.tx_depth = 8;
		fc.rx_depth = 8;
		memset(&ev, 0, sizeof(ev));
		ev.on_recv = tw__peer_fab_on_recv;
		ev.on_lost = tw__peer_fab_on_lost;
		rc = tw__fab_open(&fc, &ev, fab);
		if (rc < 0) {
			*fab = NULL;
			snprintf(why, whylen, "cannot open a fabric to probe it: %s", tw_strerror(rc));
			return rc;
		}
	}
	tw__peer_opts_init(&o, TAILWIND__ROLE__ROLE_PRIMARY);
	o.key = ctx->key;
	o.node_id = ctx->node_id;
	o.rpc.timeout_ms = probe_ms(ctx);
	o.rpc.max_inflight = 4;
	tw__peer_init(&pr, addr, NULL);
	rc = tw__peer_connect(&pr, *fab, &o);
	tw__peer_close(&pr);
	if (rc < 0) {
		snprintf(why, whylen, "%s", pr.why);
		tw_log_debug("context: backup %s still down: %s", addr, pr.why);
		tw__fab_close(*fab);
		*fab = NULL;
	}
	return rc;
}

static void deadline_ts(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

static void *rv_main(void *arg)
{
	struct ctx_revive *rv = arg;
	struct tw_fab *fab = NULL;

	pthread_mutex_lock(&rv->lock);
	while (!rv->stop) {
		uint64_t now = tw_now_ns(), due = UINT64_MAX;
		struct rv_slot *s = NULL;
		char addr[TW_ADDR_MAX], why[320];
		int rc;

		for (size_t i = 0; i < rv->cap; i++) {
			struct rv_slot *t = &rv->slot[i];

			if (t->wanted && !t->answered && t->next_ns < due) {
				due = t->next_ns;
				s = t;
			}
		}
		if (!s) {
			if (fab) { /* nothing to probe: no fabric kept open for nothing */
				pthread_mutex_unlock(&rv->lock);
				tw__fab_close(fab);
				fab = NULL;
				pthread_mutex_lock(&rv->lock);
				continue;
			}
			pthread_cond_wait(&rv->cv, &rv->lock);
			continue;
		}
		if (due > now) {
			struct timespec ts;

			deadline_ts(due, &ts);
			pthread_cond_timedwait(&rv->cv, &rv->lock, &ts);
			continue;
		}
		memcpy(addr, s->addr, sizeof(addr));
		pthread_mutex_unlock(&rv->lock);
		why[0] = 0;
		rc = probe(rv, &fab, addr, why, sizeof(why));
		pthread_mutex_lock(&rv->lock);
		if (!s->wanted || strcmp(s->addr, addr))
			continue;
		if (rc == 0) {
			s->answered = true;
			__atomic_add_fetch(&rv->answered, 1, __ATOMIC_RELEASE);
			tw__fab_wakeup(rv->ctx->fab);
		} else {
			s->tries++;
			/* Once in a while, so that a backup that stays down is seen to be tried. */
			if (s->tries % 30 == 0)
				tw_log_warn("context: backup %s still does not answer after %llu probes: "
					    "%s", addr, (unsigned long long)s->tries, why);
			s->next_ns = tw_now_ns() + (uint64_t)s->backoff_ms * 1000000u;
			s->backoff_ms = s->backoff_ms * 2 > TW__REVIVE_MAX_MS ? TW__REVIVE_MAX_MS
									      : s->backoff_ms * 2;
		}
	}
	pthread_mutex_unlock(&rv->lock);
	if (fab)
		tw__fab_close(fab);
	return NULL;
}

static int rv_start(struct tw_ctx *ctx)
{
	struct ctx_revive *rv;
	pthread_condattr_t ca;
	int rc;

	rv = calloc(1, sizeof(*rv) + ctx->bk_cap * sizeof(rv->slot[0]));
	if (!rv)
		return -ENOMEM;
	rv->ctx = ctx;
	rv->cap = ctx->bk_cap;
	pthread_mutex_init(&rv->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* tw_now_ns's clock */
	pthread_cond_init(&rv->cv, &ca);
	pthread_condattr_destroy(&ca);
	rc = -pthread_create(&rv->thread, NULL, rv_main, rv);
	if (rc < 0) {
		pthread_mutex_destroy(&rv->lock);
		pthread_cond_destroy(&rv->cv);
		free(rv);
		return rc;
	}
	ctx->revive = rv;
	return 0;
}

void tw__ctx_revive_stop(struct tw_ctx *ctx)
{
	struct ctx_revive *rv = ctx->revive;

	if (!rv)
		return;
	pthread_mutex_lock(&rv->lock);
	rv->stop = true;
	pthread_cond_signal(&rv->cv);
	pthread_mutex_unlock(&rv->lock);
	pthread_join(rv->thread, NULL); /* at most one probe (RV_PROBE_MS) */
	pthread_mutex_destroy(&rv->lock);
	pthread_cond_destroy(&rv->cv);
	free(rv);
	ctx->revive = NULL;
}

/* Lost, and not about to be connected again by tw__ctx_heal (which closes a shared context's
 * lost channel at once and connects it again, once per loss, unless the backup was found dead).
 * A private context's channel may stay open after its loss (a backup that holds no replica of
 * the log is not closed by the log's failover): lost is enough there; and a channel its log
 * closed after a failed write (before any loss was reported for it) is down too. */
static bool down(const struct tw_ctx *ctx, const struct cbackup *c)
{
	if (ctx->shared)
		return !c->peer.ch && c->peer.lost && c->dead;
	return !c->peer.ch || c->peer.lost || tw__chan_is_lost(c->peer.ch);
}

/* The driver connects `c` again after its probe was answered. */
static bool reconnect(struct tw_ctx *ctx, struct cbackup *c, uint64_t tries)
{
	if (c->peer.ch || c->peer.rpc) {
		c->peer.lost = true;
		tw__ctx_drop(c); /* the lost channel (its writes complete with errors) */
	}
	if (tw__ctx_connect(ctx, c) < 0) {
		tw_log_warn("context: backup %s answered a probe, but the connect failed: %s; "
			    "trying again", c->peer.addr, c->peer.why);
		return false; /* still down: asked for again by the next step */
	}
	c->dead = false;
	__atomic_add_fetch(&ctx->st.reconnects, 1, __ATOMIC_RELAXED);
	for (size_t k = 0; ctx->log_ops && ctx->log_ops->back && k < ctx->nlogs; k++)
		ctx->log_ops->back(ctx->logs[k], c->idx);
	tw_log_info("context: backup %s answers again (after %llu failed probe(s)): usable for "
		    "new segments and as a spare", c->peer.addr, (unsigned long long)tries);
	return true;
}

void tw__ctx_revive_step(struct tw_ctx *ctx)
{
	struct ctx_revive *rv = ctx->revive;
	bool ask = false;

	for (size_t i = 0; i < ctx->nbk; i++)
		if (down(ctx, &ctx->bk[i]) && !ctx->bk[i].revive_asked)
			ask = true;
	if (!ask && (!rv || !__atomic_load_n(&rv->answered, __ATOMIC_ACQUIRE)))
		return;
	if (!rv) {
		int rc = rv_start(ctx);

		if (rc < 0) {
			tw_log_warn("context: cannot start the thread that tries lost backups again "
				    "(%s): they stay out", tw_strerror(rc));
			for (size_t i = 0; i < ctx->nbk; i++)
				ctx->bk[i].revive_asked = true; /* asked once, not every pass */
			return;
		}
		rv = ctx->revive;
	}
	pthread_mutex_lock(&rv->lock);
	for (size_t i = 0; i < ctx->nbk && i < rv->cap; i++) {
		struct cbackup *c = &ctx->bk[i];
		struct rv_slot *s = &rv->slot[i];
		bool ok;

		if (s->answered) {
			uint64_t tries = s->tries;

			if (ctx->resetting)
				continue; /* later */
			s->answered = s->wanted = false;
			__atomic_sub_fetch(&rv->answered, 1, __ATOMIC_RELAXED);
			c->revive_asked = false;
			if (!down(ctx, c))
				continue; /* connected again meanwhile */
			pthread_mutex_unlock(&rv->lock);
			/* shm: a loss no reset has covered yet (no log failed over: the backup held
			 * no open segment) may still block the endpoint's completions; the reset
			 * clears it, as a failover's does, before the connect. (Before, the answer
			 * waited here for good: a shm backup never came back.) */
			if (tw__fab_loss_blocks_others(ctx->fab) && ctx->loss_gen != ctx->reset_gen)
				(void)tw__ctx_reset(ctx, -1);
			ok = reconnect(ctx, c, tries);
			pthread_mutex_lock(&rv->lock);
			if (ok) { /* the next loss starts its back-off afresh */
				s->backoff_ms = TW__REVIVE_FIRST_MS;
				s->tries = 0;
			}
			continue;
		}
		if (!down(ctx, c) || c->revive_asked)
			continue;
		c->revive_asked = true;
		if (!s->wanted) {
			snprintf(s->addr, sizeof(s->addr), "%s", c->peer.addr);
			s->wanted = true;
			if (!s->backoff_ms)
				s->backoff_ms = TW__REVIVE_FIRST_MS;
			s->next_ns = tw_now_ns() + (uint64_t)s->backoff_ms * 1000000u;
			pthread_cond_signal(&rv->cv);
		}
	}
	pthread_mutex_unlock(&rv->lock);
}

/*
 * A failover found no spare, or a segment's open no backup (primary_rerep.c, tw__pfo_revive):
 * probe the backups that are down and `want`ed (indexed like ctx->bk) now rather than at their
 * back-off's next turn (up to TW__REVIVE_MAX_MS away), wait for those probes while the fabric
 * progresses, at most `max_ms`, and connect the ones that answered. A backup
 * that has just come back from a pause is then a spare at once, instead of the log failing for
 * want of one while it stands ready (kv_history caught a partition moved that way: a kill 20 ms
 * after the SIGCONT of a server the new owner had found dead during its pause). Driver thread,
 * between two walks of the backups. Returns the number of backups connected again. Not on a
 * fabric whose losses block each other (shm), where a connect may need the context's reset.
 */
unsigned tw__ctx_revive_now(struct tw_ctx *ctx, const bool *want, unsigned max_ms)
{
	uint64_t end = tw_now_ns() + (uint64_t)max_ms * 1000000u, before;
	struct ctx_revive *rv;
	unsigned asked = 0;

	if (tw__fab_loss_blocks_others(ctx->fab) || ctx->resetting)
		return 0;
	before = __atomic_load_n(&ctx->st.reconnects, __ATOMIC_RELAXED);
	tw__ctx_revive_step(ctx); /* asks the reviver for every backup down (starts it) */
	rv = ctx->revive;
	if (!rv)
		return 0;
	pthread_mutex_lock(&rv->lock);
	for (size_t i = 0; i < rv->cap && i < ctx->nbk; i++) {
		struct rv_slot *s = &rv->slot[i];

		if (want[i] && s->wanted && !s->answered) {
			s->next_ns = 0; /* now */
			s->urgent = true;
			s->urgent_tries = s->tries;
			asked++;
		}
	}
	if (asked)
		pthread_cond_signal(&rv->cv);
	pthread_mutex_unlock(&rv->lock);
	for (uint64_t now = tw_now_ns(); asked && now < end; now = tw_now_ns()) {
		unsigned waiting = 0, left_ms = (unsigned)((end - now + 999999u) / 1000000u);

		pthread_mutex_lock(&rv->lock);
		for (size_t i = 0; i < rv->cap; i++) {
			struct rv_slot *s = &rv->slot[i];

			if (s->urgent && s->wanted && !s->answered && s->tries == s->urgent_tries)
				waiting++;
		}
		pthread_mutex_unlock(&rv->lock);
		if (!waiting)
			break;
		/* Peers need our polls meanwhile; an answer wakes the fabric. */
		tw__fab_progress(ctx->fab, (int)(left_ms < 10 ? left_ms : 10));
	}
	pthread_mutex_lock(&rv->lock);
	for (size_t i = 0; i < rv->cap; i++)
		rv->slot[i].urgent = false;
	pthread_mutex_unlock(&rv->lock);
	tw__ctx_revive_step(ctx); /* connects the ones that answered */
	return (unsigned)(__atomic_load_n(&ctx->st.reconnects, __ATOMIC_RELAXED) - before);
}
