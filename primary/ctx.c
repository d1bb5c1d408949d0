/*
 * primary/ctx.c — the context (tailwind/context.h): one fabric instance, one connection per
 * backup (a tw_peer, peer/peer.h: channel, RPC client, connect and handshake) shared by every
 * log opened on it, loss demultiplexing (a channel lost is lost for every log, each then runs
 * its own failover), reconnection after a loss (shared contexts), the fabric reset of shm (every
 * log rewrites its writes in flight), the hand-over of the driving role between the progress
 * thread and the threads that open and close logs, and the progress thread (at the end: it runs
 * the engine's per-log steps, and asks ctx_revive.c to bring lost backups back). It reaches its logs only through their ops table
 * (struct tw__log_ops, primary_int.h); the logs call the context's functions, never the
 * other way round.
 * See docs/primary.md, "Many logs: the context".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer/peer.h"
#include "proto/auth.h"
#include "proto/rpc.h"
#include "primary/primary_int.h"

#define CTX_DEFAULT_TX_DEPTH 1024
#define CTX_RPC_INFLIGHT 1024 /* RPCs in flight per backup, all logs (pre-opens, frees) */

static void ctx_lost(struct tw_ctx *ctx, struct cbackup *c)
{
	ctx->loss_gen++;
	tw_log_warn("context: backup %s lost for its %zu log(s): %s", c->peer.addr, ctx->nlogs,
		    c->peer.why);
	for (size_t i = 0; i < ctx->nlogs; i++)
		ctx->log_ops->lost(ctx->logs[i], c->idx, c->peer.why); /* each fails over alone */
}

/* Replies are matched to their calls by request id (proto/rpc_client.c): each call carries its
 * own log's completion, so the shared client demultiplexes by itself. A peer without a cbackup
 * is a probe of primary_ctl.c (no failover). */
static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_peer *pr = tw__chan_user(ch);

	if (pr && tw__peer_recv(pr, msg, len) && pr->user)
		ctx_lost(arg, pr->user);
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct tw_peer *pr = tw__chan_user(ch);

	if (pr && tw__peer_lost(pr, err) && pr->user)
		ctx_lost(arg, pr->user);
}

void tw__ctx_drop(struct cbackup *c)
{
	if (c->peer.ch)
		__atomic_sub_fetch(&c->ctx->st.channels, 1, __ATOMIC_RELAXED);
	tw__peer_close(&c->peer); /* c->peer.lost stays */
}

void tw__ctx_peer_opts(struct tw_ctx *ctx, struct tw_peer_opts *o)
{
	tw__peer_opts_init(o, TAILWIND__ROLE__ROLE_PRIMARY);
	o->key = ctx->key;
	o->node_id = ctx->node_id;
	if (ctx->cfg.rpc_timeout_ms)
		o->rpc.timeout_ms = ctx->cfg.rpc_timeout_ms;
	if (ctx->owner)
		o->incarnation = ctx->log_ops->incarnation(ctx->owner);
	/* During a takeover's open only: a backup whose connect timed out in its recovery fails
	 * at once instead of costing the timeout again (the reviver probes it later). */
	o->skip = ctx->skip;
}

int tw__ctx_connect(struct tw_ctx *ctx, struct cbackup *c)
{
	uint64_t node_before = c->peer.gen ? c->peer.peer_node_id : 0;
	struct tw_peer_opts o;
	bool skipped;
	int rc;

	tw__ctx_peer_opts(ctx, &o);
	o.rpc.max_inflight = ctx->rpc_max_inflight;
	skipped = tw__peer_skip_has(o.skip, c->peer.addr); /* the takeover waited on it already */
	rc = tw__peer_connect(&c->peer, ctx->fab, &o);
	/* The handshake's RPCs count in a private context's log (two with a key). */
	if (ctx->owner && (rc == 0 || c->peer.failed == TW_PEER_HANDSHAKE)) {
		ctx->log_ops->count_handshake(ctx->owner, ctx->key ? 2 : 1);
	}
	if (rc < 0) { /* c->peer.why says why: -TW_EVERSION, -ENOTSUP, no answer, ... */
		c->peer.lost = true;
		if (c->peer.failed == TW_PEER_CONNECT) {
			c->dead = true;
			snprintf(c->peer.why, sizeof(c->peer.why), "unreachable: %s%s",
				 tw_strerror(rc), skipped ? " (in this takeover's recovery; not "
				 "waited on again, probed in the background)" : "");
		}
		return rc;
	}
	__atomic_add_fetch(&ctx->st.channels, 1, __ATOMIC_RELAXED);
	if (node_before && c->peer.peer_node_id != node_before) {
		c->node_gen = c->peer.gen; /* restarted: no log may reopen its old buffers there */
		tw_log_info("context: backup %s is a new process (node id %016llx, was %016llx)",
			    c->peer.addr, (unsigned long long)c->peer.peer_node_id,
			    (unsigned long long)node_before);
	}
	return 0;
}

void tw__ctx_heal(struct tw_ctx *ctx, struct cbackup *c)
{
	if (c->peer.ch && (c->peer.lost || tw__chan_is_lost(c->peer.ch))) {
		c->peer.lost = true;
		tw__ctx_drop(c); /* every log's writes on it complete now (with errors) */
	}
	if (!ctx->shared || c->peer.ch || c->dead || !c->peer.lost || ctx->resetting ||
	    tw__fab_loss_blocks_others(ctx->fab))
		return;
	/* Once per loss: a backup that closed the connection (a fence of another log of this
	 * process, docs/recovery.md "Ownership") is alive and holds the other logs' buffers. */
	if (tw__ctx_connect(ctx, c) == 0) {
		__atomic_add_fetch(&ctx->st.reconnects, 1, __ATOMIC_RELAXED);
		tw_log_info("context: backup %s connected again", c->peer.addr);
	} else {
		c->dead = true;
		tw_log_warn("context: backup %s: %s; tried again in the background", c->peer.addr,
			    c->peer.why);
	}
}

int tw__ctx_reset(struct tw_ctx *ctx, int first)
{
	uint64_t prev_ns = ctx->reset_ns, now;
	bool *again = calloc(ctx->nbk ? ctx->nbk : 1, sizeof(bool));
	int rc;

	if (!again)
		return -ENOMEM;
	tw_log_warn("context: resetting the fabric for %zu log(s) (a dead peer blocks the "
		    "completions of the others)", ctx->nlogs);
	ctx->resetting = true;
	for (size_t i = 0; i < ctx->nbk; i++) {
		struct cbackup *c = &ctx->bk[i];

		/* Every channel still open (healthy, or lost but not closed yet) except the one
		 * whose loss began it: the others are most likely only behind it in the blocked
		 * queue (the fabric reports timed-out channels oldest operation first). A dead
		 * one fails to connect. */
		again[i] = !c->dead && (int)i != first && c->peer.ch;
		if (c->peer.ch || c->peer.rpc)
			tw__ctx_drop(c); /* every log's writes in flight complete (slots to repair) */
	}
	ctx->resetting = false;
	__atomic_add_fetch(&ctx->st.resets, 1, __ATOMIC_RELAXED);
	rc = tw__fab_reset(ctx->fab);
	if (rc < 0) {
		char msg[512];

		snprintf(msg, sizeof(msg), "cannot reset the fabric after a backup loss: %s (%s)",
			 tw_strerror(rc), tw__fab_errmsg(ctx->fab));
		for (size_t k = 0; k < ctx->nlogs; k++)
			ctx->log_ops->fail(ctx->logs[k], rc, msg);
		free(again);
		return rc;
	}
	for (size_t i = 0; i < ctx->nbk; i++) {
		struct cbackup *c = &ctx->bk[i];

		if (!again[i]) {
			c->peer.lost = true;
			continue;
		}
		if (tw__ctx_connect(ctx, c) < 0) {
			again[i] = false;
			tw_log_warn("context: backup %s after the reset: %s", c->peer.addr,
				    c->peer.why);
		}
	}
	/* Each log takes the backups connected again back and rewrites its writes in flight. */
	now = tw_now_ns();
	for (size_t k = 0; k < ctx->nlogs; k++)
		ctx->log_ops->reset(ctx->logs[k], again, first, prev_ns, now);
	ctx->reset_gen = ctx->loss_gen;
	ctx->reset_ns = tw_now_ns();
	free(again);
	return 0;
}

/* ------------------------------------------------------------------ driving and logs */

void tw__ctx_drive_enter(struct tw_ctx *ctx)
{
	if (!ctx->thread_started)
		return;
	pthread_mutex_lock(&ctx->lock);
	ctx->want_drive++;
	pthread_mutex_unlock(&ctx->lock);
	tw__fab_wakeup(ctx->fab);
	pthread_mutex_lock(&ctx->drive);
	pthread_mutex_lock(&ctx->lock);
	ctx->want_drive--;
	pthread_cond_broadcast(&ctx->cv);
	pthread_mutex_unlock(&ctx->lock);
}

void tw__ctx_drive_leave(struct tw_ctx *ctx)
{
	if (ctx->thread_started)
		pthread_mutex_unlock(&ctx->drive);
}

void tw__ctx_set_owner(struct tw_ctx *ctx, struct tw_primary *p, const struct tw__log_ops *ops)
{
	ctx->owner = p;
	ctx->log_ops = ops;
}

int tw__ctx_attach(struct tw_ctx *ctx, struct tw_primary *p, const struct tw__log_ops *ops)
{
	int rc;

	pthread_mutex_lock(&ctx->lock);
	rc = tw__push(&ctx->logs, &ctx->logs_cap, &ctx->nlogs, sizeof(p), 8, &p);
	if (rc == 0)
		ctx->log_ops = ops; /* every log of a context has the same (the engine's) */
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

void tw__ctx_detach(struct tw_ctx *ctx, struct tw_primary *p)
{
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->nlogs; i++) {
		if (ctx->logs[i] == p) {
			memmove(&ctx->logs[i], &ctx->logs[i + 1],
				(ctx->nlogs - i - 1) * sizeof(*ctx->logs));
			ctx->nlogs--;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* ------------------------------------------------------------------ create / destroy */

int tw__ctx_create(const struct tw_ctx_config *cc, bool shared, unsigned tx_depth, size_t extra,
		   struct tw_peer_skip *skip, struct tw_ctx **out)
{
	struct tw_fab_config fc;
	const char *dp;
	struct tw_fab_events ev;
	struct tw_ctx *ctx;
	int rc = 0;

	*out = NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	*out = ctx; /* even on failure: ctx->errmsg says why; tw__ctx_destroy frees it */
	ctx->cfg = *cc;
	ctx->shared = shared;
	ctx->skip = skip;
	ctx->first_lost = -1;
	ctx->rpc_max_inflight = shared ? CTX_RPC_INFLIGHT : 64;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->drive, NULL);
	pthread_cond_init(&ctx->cv, NULL);
	if (cc->provider)
		ctx->prov_copy = strdup(cc->provider);
	ctx->bk_cap = cc->n_backups + extra;
	ctx->bk = calloc(ctx->bk_cap ? ctx->bk_cap : 1, sizeof(*ctx->bk));
	if (!ctx->bk || (cc->provider && !ctx->prov_copy)) {
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "out of memory");
		return -ENOMEM;
	}
	ctx->nbk = cc->n_backups;
	for (size_t i = 0; i < cc->n_backups; i++) {
		struct cbackup *c = &ctx->bk[i];

		c->ctx = ctx;
		c->idx = (unsigned)i;
		tw__peer_init(&c->peer, cc->backups[i], c);
		if (cc->zones && cc->zones[i])
			snprintf(c->zone, sizeof(c->zone), "%s", cc->zones[i]);
	}
	ctx->cfg.backups = NULL;
	ctx->cfg.zones = NULL;
	ctx->cfg.coordinator = NULL;
	ctx->cfg.provider = ctx->prov_copy;
	ctx->cfg.key_file = NULL; /* read once, here */
	ctx->node_id = cc->node_id ? cc->node_id
				   : ((uint64_t)gethostid() << 32 | (uint64_t)getpid());
	if (!ctx->node_id)
		ctx->node_id = 1;
	if (tw__auth_key_path(cc->key_file)) {
		rc = tw__auth_key_load(tw__auth_key_path(cc->key_file), &ctx->key, ctx->errmsg,
				      sizeof(ctx->errmsg));
		if (rc < 0) {
			ctx->key = NULL;
			return rc;
		}
	}

	tw__fab_config_init(&fc);
	fc.provider = ctx->cfg.provider;
	fc.busy_poll = cc->busy_poll;
	if (cc->connect_timeout_ms)
		fc.connect_timeout_ms = cc->connect_timeout_ms;
	if (cc->op_timeout_ms)
		fc.op_timeout_ms = cc->op_timeout_ms;
	if (fc.tx_depth < tx_depth)
		fc.tx_depth = tx_depth;
	/* The RPC-replication baseline is the fabric's: its writes go as messages that the
	 * backup's fabric layer checks, copies and answers (fabric/wmsg.c). A benchmark's switch,
	 * not a service's setting, so not a config field: TW_DATA_PATH=rpc at the open. */
	dp = tw__env_get(TW__ENV_DATA_PATH);
	if (dp && dp[0] && strcmp(dp, "rpc") != 0 && strcmp(dp, "onesided") != 0) {
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "TW_DATA_PATH=%s: say onesided or rpc "
			 "(the RPC-replication baseline), or unset it", dp);
		return -EINVAL;
	}
	fc.write_mode = dp && strcmp(dp, "rpc") == 0 ? TW_FAB_WRITE_MSG : TW_FAB_WRITE_ONESIDED;
	memset(&ev, 0, sizeof(ev));
	ev.arg = ctx;
	ev.on_recv = on_recv;
	ev.on_lost = on_lost;
	rc = tw__fab_open(&fc, &ev, &ctx->fab);
	if (rc < 0) {
		ctx->fab = NULL;
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "cannot open fabric (provider %s): %s",
			 fc.provider ? fc.provider : "default", tw_strerror(rc));
		return rc;
	}
	rc = tw__arena_create(ctx->fab, cc->arena_size, &ctx->arena);
	if (rc < 0) {
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "out of memory");
		return rc;
	}
	for (size_t i = 0; i < ctx->nbk; i++) {
		struct cbackup *c = &ctx->bk[i];

		if (tw__ctx_connect(ctx, c) < 0)
			tw_log_warn("primary: backup %s %s", c->peer.addr, c->peer.why);
		else
			c->dead = false;
	}
	return 0;
}

void tw__ctx_destroy(struct tw_ctx *ctx)
{
	if (!ctx)
		return;
	tw__ctx_stop(ctx);
	tw__ctx_revive_stop(ctx); /* it wakes the fab up: before that goes */
	for (size_t i = 0; i < ctx->nbk; i++)
		tw__ctx_drop(&ctx->bk[i]);
	tw__arena_destroy(ctx->arena); /* no write in flight any more; before the fabric goes */
	if (ctx->fab)
		tw__fab_close(ctx->fab);
	free(ctx->bk);
	free(ctx->logs);
	free(ctx->prov_copy);
	tw__auth_key_free(ctx->key);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->drive);
	pthread_cond_destroy(&ctx->cv);
	free(ctx);
}

/* ------------------------------------------------------------------ public API */

static void set_errmsg(char *buf, size_t len, const char *msg)
{
	if (buf && len)
		snprintf(buf, len, "%s", msg);
}

static const struct tw_ctx_config ctx_defaults = {
	.op_timeout_ms = TW_DEFAULT_OP_TIMEOUT_MS,
	.rpc_timeout_ms = TW_DEFAULT_RPC_TIMEOUT_MS,
	.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS,
	.session_timeout_ms = TW_DEFAULT_SESSION_TIMEOUT_MS,
	.tx_depth = CTX_DEFAULT_TX_DEPTH,
};

void tw_ctx_config_init_sized(struct tw_ctx_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &ctx_defaults, sizeof(ctx_defaults));
}

int tw_ctx_open(const struct tw_ctx_config *config, struct tw_ctx **out, char *errmsg_out,
		size_t errmsg_len)
{
	struct tw_ctx_config c, *cfg = &c;
	struct tw_ctx *ctx;
	size_t up = 0;
	int rc;

	if (!config || !out) {
		set_errmsg(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	*out = NULL;
	rc = TW__CFG_TAKE(c, config, tw_ctx_config_init, "tw_ctx_config", errmsg_out, errmsg_len);
	if (rc < 0)
		return rc;
	if (cfg->coordinator && cfg->coordinator[0]) {
		set_errmsg(errmsg_out, errmsg_len, "a context does not take a coordinator yet: "
			   "give the backups (tw_ctx_config.backups), or open each log with "
			   "tw_primary_open");
		return -ENOTSUP;
	}
	if (!cfg->backups || !cfg->n_backups) {
		set_errmsg(errmsg_out, errmsg_len, "no backups given");
		return -EINVAL;
	}
	for (size_t i = 0; i < cfg->n_backups; i++) {
		if (!cfg->backups[i] || !cfg->backups[i][0] ||
		    strlen(cfg->backups[i]) >= TW_ADDR_MAX) {
			set_errmsg(errmsg_out, errmsg_len, "a backup address is empty or too long");
			return -EINVAL;
		}
	}
	rc = tw__ctx_create(cfg, true, cfg->tx_depth ? cfg->tx_depth : CTX_DEFAULT_TX_DEPTH, 0, NULL,
			    &ctx);
	for (size_t i = 0; rc == 0 && i < ctx->nbk; i++)
		up += ctx->bk[i].peer.ch != NULL;
	if (rc == 0 && !up) {
		char *m = ctx->errmsg;
		size_t n = sizeof(ctx->errmsg);
		int k = snprintf(m, n, "no backup usable:");

		for (size_t i = 0; i < ctx->nbk && k > 0 && (size_t)k < n; i++)
			k += snprintf(m + k, n - (size_t)k, " %s (%s)%s", ctx->bk[i].peer.addr,
				      ctx->bk[i].peer.why, i + 1 < ctx->nbk ? ";" : "");
		rc = -TW_ENOBACKUP;
	}
	if (rc == 0)
		rc = tw__ctx_start(ctx);
	if (rc < 0) {
		if (ctx) {
			if (!ctx->errmsg[0])
				snprintf(ctx->errmsg, sizeof(ctx->errmsg), "%s", tw_strerror(rc));
			tw_log_error("context: open failed: %s", ctx->errmsg);
			set_errmsg(errmsg_out, errmsg_len, ctx->errmsg);
		}
		tw__ctx_destroy(ctx);
		return rc;
	}
	tw_log_info("context: open, %zu of %zu backups connected", up, ctx->nbk);
	*out = ctx;
	return 0;
}

const char *tw_ctx_errmsg(const struct tw_ctx *ctx)
{
	if (!ctx)
		return "no context";
	return ctx->errmsg[0] ? ctx->errmsg : "no error";
}

int tw_ctx_close(struct tw_ctx *ctx)
{
	size_t n;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&ctx->lock);
	n = ctx->nlogs;
	pthread_mutex_unlock(&ctx->lock);
	if (n) {
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "%zu log(s) still open on the context: "
			 "close them first (tw_primary_close)", n);
		return -EBUSY;
	}
	tw__ctx_destroy(ctx);
	return 0;
}

static void ctx_stats(const struct tw_ctx *cctx, struct tw_ctx_stats *out)
{
	struct tw_ctx *ctx = (struct tw_ctx *)(uintptr_t)cctx; /* its lock, not its state */

	memset(out, 0, sizeof(*out));
	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->lock);
	out->logs = ctx->nlogs;
	pthread_mutex_unlock(&ctx->lock);
	out->channels = __atomic_load_n(&ctx->st.channels, __ATOMIC_RELAXED);
	out->reconnects = __atomic_load_n(&ctx->st.reconnects, __ATOMIC_RELAXED);
	out->resets = __atomic_load_n(&ctx->st.resets, __ATOMIC_RELAXED);
	out->loop_passes = __atomic_load_n(&ctx->st.loop_passes, __ATOMIC_RELAXED);
	tw__arena_get_stats(ctx->arena, &out->arena);
}

void tw_ctx_get_stats_sized(const struct tw_ctx *ctx, struct tw_ctx_stats *out, size_t size)
{
	struct tw_ctx_stats full;

	ctx_stats(ctx, &full);
	tw__out_copy(out, size, &full, sizeof(full));
}

/* ------------------------------------------------------------------ progress thread */

/* The context whose progress thread this is (NULL on other threads). */
static _Thread_local const struct tw_ctx *progress_tls;

bool tw__ctx_on_thread(const struct tw_ctx *ctx)
{
	return progress_tls == ctx;
}

/* No log has work: the thread is about to block in its poll. Each log says so to its
 * appenders (sleep_begin), one asymmetric fence covers them all where their appenders publish
 * without a fence (struct tw_primary.pub_light), and each log looks once more for work
 * published meanwhile. True when some log has work: the poll then does not block. */
static bool ctx_sleep_check(struct tw_ctx *ctx)
{
	size_t n = ctx->nlogs;
	bool work = false, fence = false;

	for (size_t k = 0; k < n; k++)
		if (ctx->log_ops->served(ctx->logs[k]) && ctx->log_ops->sleep_begin(ctx->logs[k]))
			fence = true;
	if (fence)
		tw__membarrier();
	for (size_t k = 0; k < n; k++)
		if (ctx->log_ops->served(ctx->logs[k]) && ctx->log_ops->sleep_check(ctx->logs[k]))
			work = true;
	return work;
}

/*
 * The progress thread of a context: one per context, however many logs. Each pass runs every
 * log's pre-step (control work, seal+post), polls the fabric once (blocking only when no log
 * has work, even after its last look, ctx_sleep_check: an append to an idle log, a completion
 * or tw__fab_wakeup ends the wait), heals lost
 * channels (shared contexts), then every log's post-step (failover, reap, seal+post). The pass
 * starts one log further each time (round robin), so no log is always served first. Between
 * two passes it steps aside for a thread that must drive (tw__ctx_drive_enter: a log's open or
 * close).
 */
static void *ctx_main(void *arg)
{
	struct tw_ctx *ctx = arg;

	progress_tls = ctx;
	pthread_mutex_lock(&ctx->drive);
	for (;;) {
		bool work = false, stop;
		size_t n;
		int rc;

		pthread_mutex_lock(&ctx->lock);
		stop = ctx->stop;
		if (ctx->want_drive) {
			pthread_mutex_unlock(&ctx->drive);
			while (ctx->want_drive)
				pthread_cond_wait(&ctx->cv, &ctx->lock);
			pthread_mutex_unlock(&ctx->lock);
			pthread_mutex_lock(&ctx->drive);
			continue;
		}
		pthread_mutex_unlock(&ctx->lock);
		if (stop)
			break;
		n = ctx->nlogs;
		for (size_t k = 0; k < n; k++) {
			struct tw_primary *p = ctx->logs[(ctx->rr + k) % n];
			bool done = false;

			if (ctx->log_ops->served(p) && ctx->log_ops->step_pre(p, &done))
				work = true;
		}
		if (!work && !ctx->cfg.busy_poll)
			work = ctx_sleep_check(ctx);
		rc = tw__fab_progress(ctx->fab, work || ctx->cfg.busy_poll ? 0 : PWAIT_SLICE_MS);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIMEDOUT) {
			char msg[512];

			snprintf(msg, sizeof(msg), "fabric progress failed: %s: %s",
				 tw_strerror(rc), tw__fab_errmsg(ctx->fab));
			for (size_t k = 0; k < n; k++)
				if (ctx->log_ops->served(ctx->logs[k]))
					ctx->log_ops->fail(ctx->logs[k], rc, msg);
		}
		if (ctx->shared) {
			for (size_t i = 0; i < ctx->nbk; i++)
				if (ctx->bk[i].peer.lost && !ctx->bk[i].dead &&
				    !tw__fab_loss_blocks_others(ctx->fab))
					tw__ctx_heal(ctx, &ctx->bk[i]);
		}
		tw__ctx_revive_step(ctx); /* lost backups that answer again come back */
		n = ctx->nlogs;
		for (size_t k = 0; k < n; k++) {
			struct tw_primary *p = ctx->logs[(ctx->rr + k) % n];

			if (ctx->log_ops->served(p))
				ctx->log_ops->step_post(p);
		}
		ctx->rr++;
		__atomic_store_n(&ctx->st.loop_passes, ctx->st.loop_passes + 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&ctx->drive);
	return NULL;
}

int tw__ctx_start(struct tw_ctx *ctx)
{
	int rc;

	if (ctx->thread_started)
		return 0;
	ctx->threaded = true;
	rc = -pthread_create(&ctx->thread, NULL, ctx_main, ctx);
	if (rc == 0)
		ctx->thread_started = true;
	else
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "cannot start the progress thread: %s",
			 tw_strerror(rc));
	return rc;
}

void tw__ctx_stop(struct tw_ctx *ctx)
{
	if (!ctx->thread_started)
		return;
	pthread_mutex_lock(&ctx->lock);
	ctx->stop = true;
	pthread_mutex_unlock(&ctx->lock);
	tw__fab_wakeup(ctx->fab);
	pthread_join(ctx->thread, NULL);
	ctx->thread_started = false;
}
