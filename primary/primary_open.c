/*
 * primary/primary_open.c — open and lifecycle of a log: the lifecycle's states and their one
 * writer, the configuration (defaults, checks, struct tw__pcfg), the open as owner
 * (tw__primary_open_as, cut into its steps), takeover and continuation, finish, close and free.
 * See docs/primary.md, "Lifecycle", "Owning a log".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/random.h>

#include "coord/coord.h"
#include "recovery/recover_int.h"
#include "proto/auth.h"
#include "primary/primary_engine.h"

/* ------------------------------------------------------------------ lifecycle */

static const char *const pstate_names[] = {
	[PSTATE_OPENING] = "opening",     [PSTATE_RUNNING] = "running",
	[PSTATE_STOPPING] = "stopping",   [PSTATE_FINISHING] = "finishing",
	[PSTATE_FINISHED] = "finished",   [PSTATE_CLOSED] = "closed",
};

#define PS(s) (1u << (s))
/* The legal successors of each state (docs/primary.md, "Lifecycle"). */
static const unsigned pstate_next[] = {
	[PSTATE_OPENING] = PS(PSTATE_RUNNING) | PS(PSTATE_CLOSED),
	[PSTATE_RUNNING] = PS(PSTATE_STOPPING) | PS(PSTATE_FINISHING),
	[PSTATE_STOPPING] = PS(PSTATE_FINISHING),
	[PSTATE_FINISHING] = PS(PSTATE_FINISHED),
	[PSTATE_FINISHED] = PS(PSTATE_CLOSED),
	[PSTATE_CLOSED] = 0,
};
#undef PS

void tw__primary_set_state(struct tw_primary *p, enum pstate to)
{
	enum pstate from = pstate(p); /* the only writer: nobody changes it meanwhile */

	if (!(pstate_next[from] & (1u << to))) {
		tw_log_error("primary log %llu: illegal transition %s -> %s",
			     (unsigned long long)p->cfg.log_id, pstate_names[from], pstate_names[to]);
		abort();
	}
	tw_log_debug("primary log %llu: %s -> %s", (unsigned long long)p->cfg.log_id,
		     pstate_names[from], pstate_names[to]);
	__atomic_store_n(&p->state, to, __ATOMIC_RELEASE);
}

static void set_errmsg(char *buf, size_t len, const char *msg)
{
	if (buf && len)
		snprintf(buf, len, "%s", msg);
}

static const struct tw_primary_config primary_defaults = {
	.replicas = 3,
	.segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE,
	.max_batch = 1024,
	.max_inflight = 8,
	.mode = TW_PRIMARY_SYNC,
	.open_retry_ms = TW_DEFAULT_OPEN_RETRY_MS,
	.rerep_rate = 64u << 20,
	.max_batch_bytes = TW_PRIMARY_DEFAULT_BATCH_BYTES,
};

void tw_primary_config_init_sized(struct tw_primary_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &primary_defaults, sizeof(primary_defaults));
}

int tw__pcfg_make(struct tw__pcfg *pc, const struct tw_ctx_config *transport,
		  const struct tw_primary_config *cfg, char *errmsg, size_t errmsg_len)
{
	struct tw_primary_config c;
	struct tw_ctx_config t;
	int rc;

	memset(pc, 0, sizeof(*pc));
	if (!cfg) {
		set_errmsg(errmsg, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	rc = TW__CFG_TAKE(c, cfg, tw_primary_config_init, "tw_primary_config", errmsg, errmsg_len);
	if (rc == 0 && transport)
		rc = TW__CFG_TAKE(t, transport, tw_ctx_config_init, "tw_ctx_config", errmsg,
				  errmsg_len);
	else if (rc == 0)
		tw_ctx_config_init(&t);
	if (rc == 0 && c.epoch > TW_EPOCH_MAX) {
		set_errmsg(errmsg, errmsg_len, "epoch above the maximum (TW_EPOCH_MAX)");
		rc = -EINVAL;
	}
	if (rc < 0)
		return rc;
	pc->log_id = c.log_id;
	pc->epoch = c.epoch;
	pc->replicas = c.replicas;
	pc->segment_size = c.segment_size;
	pc->max_batch = c.max_batch;
	pc->max_inflight = c.max_inflight;
	pc->mode = c.mode;
	pc->open_retry_ms = c.open_retry_ms;
	pc->preopen = c.preopen;
	pc->rerep_rate = c.rerep_rate;
	pc->max_batch_bytes = c.max_batch_bytes;
	pc->backups = t.backups;
	pc->n_backups = t.n_backups;
	pc->zones = t.zones;
	pc->provider = t.provider;
	pc->key_file = t.key_file;
	pc->busy_poll = t.busy_poll;
	pc->node_id = t.node_id;
	pc->op_timeout_ms = t.op_timeout_ms;
	pc->rpc_timeout_ms = t.rpc_timeout_ms;
	pc->connect_timeout_ms = t.connect_timeout_ms;
	pc->arena_size = t.arena_size;
	pc->coordinator = t.coordinator;
	pc->session_timeout_ms = t.session_timeout_ms;
	return 0;
}

/* A NULL where an open needs a pointer. */
static int open_args_missing(char *errmsg, size_t errmsg_len)
{
	set_errmsg(errmsg, errmsg_len, "invalid argument");
	return -EINVAL;
}

/* Free the log. On a shared context: under the drive (its registrations are the context's
 * fabric's), out of the context's list. A private context goes with it. */
static void primary_free_driving(struct tw_primary *p)
{
	struct tw_ctx *ctx = p->ctx;

	tw__primary_lock(p);
	tw__primary_set_state(p, PSTATE_CLOSED); /* from OPENING (a failed open) or FINISHED */
	tw__primary_unlock(p);
	if (ctx) {
		if (p->on_ctx)
			tw__ctx_detach(ctx, p);
		p->on_ctx = false;
		if (!ctx->shared) {
			tw__ctx_stop(ctx);
			/* Pending operations complete (with errors) before the MRs go. */
			for (size_t i = 0; i < ctx->nbk; i++)
				tw__ctx_drop(&ctx->bk[i]);
		}
	}
	for (size_t i = 0; i < p->nsegs; i++)
		tw__pseg_free(p, p->segs[i]);
	free(p->segs);
	tw__pseg_free(p, p->next);
	free(p->next_calls);
	free(p->close_calls);
	while (p->free_list) {
		struct pseg *nx = p->free_list->next_free;

		tw__pseg_free(p, p->free_list);
		p->free_list = nx;
	}
	tw__packed_release(p); /* readers (primary_acked.c) */
	if (ctx && !ctx->shared)
		tw__ctx_destroy(ctx);
	free(p->bk);
	free(p->slots);
	free(p->pops);
	free(p->recs);
	free(p->prov_copy);
	if (p->threaded) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->cv_app);
	}
	tw__coord_close(p->coord); /* last: the owner node goes once we no longer write */
	free(p);
}

static void primary_free(struct tw_primary *p)
{
	struct tw_ctx *ctx;

	if (!p)
		return;
	ctx = p->ctx;
	if (ctx && ctx->shared) {
		tw__ctx_drive_enter(ctx);
		primary_free_driving(p);
		tw__ctx_drive_leave(ctx);
		return;
	}
	primary_free_driving(p);
}

static int check_config(const struct tw__pcfg *cfg, bool on_ctx, char *msg, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (on_ctx) {
		/* The backups are the context's. */
	} else if (!cfg->backups || !cfg->n_backups) {
		snprintf(msg, len, "no backups given");
		return -EINVAL;
	}
	if (!cfg->replicas || cfg->replicas > TW_PRIMARY_MAX_REPLICAS) {
		snprintf(msg, len, "replication factor %u out of range 1..%u", cfg->replicas,
			 TW_PRIMARY_MAX_REPLICAS);
		return -EINVAL;
	}
	if (cfg->segment_size < 4096 || cfg->segment_size > UINT32_MAX ||
	    (pg > 0 && cfg->segment_size % (size_t)pg)) {
		snprintf(msg, len, "segment size %zu must be a page multiple in [4 KiB, 4 GiB)",
			 cfg->segment_size);
		return -EINVAL;
	}
	if (cfg->mode != TW_PRIMARY_SYNC && cfg->mode != TW_PRIMARY_ASYNC) {
		snprintf(msg, len, "mode %d is neither TW_PRIMARY_SYNC nor TW_PRIMARY_ASYNC",
			 (int)cfg->mode);
		return -EINVAL;
	}
	if (!cfg->max_batch || !cfg->max_inflight || cfg->max_inflight > TW_PRIMARY_MAX_INFLIGHT) {
		snprintf(msg, len, "max_batch must be > 0 and max_inflight in 1..%u",
			 TW_PRIMARY_MAX_INFLIGHT);
		return -EINVAL;
	}
	if (!cfg->max_batch_bytes) {
		snprintf(msg, len, "max_batch_bytes must be > 0 (a write is due once that "
			 "many bytes of entries wait; one smaller than an entry goes alone)");
		return -EINVAL;
	}
	for (size_t i = 0; !on_ctx && i < cfg->n_backups; i++) {
		if (!cfg->backups[i] || !cfg->backups[i][0] ||
		    strlen(cfg->backups[i]) >= TW_ADDR_MAX) {
			snprintf(msg, len, "backup address %zu is empty or too long", i);
			return -EINVAL;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ open */

/* An on/off variable of core/env.c, on unless set to off: TW_PRIMARY_MEMBARRIER (whether
 * async appenders may publish without a fence), TW_PRIMARY_APPENDER_SEAL (whether they may
 * seal a whole batch themselves). */
static bool env_on(enum tw__env id)
{
	const char *v = tw__env_get(id);

	if (!v || !strcmp(v, "on"))
		return true;
	if (strcmp(v, "off"))
		tw_log_warn("primary: %s=%s: expected on or off; taken as on", tw__env_name(id), v);
	return strcmp(v, "off") != 0;
}

/* The log's memory and settings (tw__primary_open_as, step 1): the struct, its lock, the
 * slots, the record ring, the backups' array; cfg's borrowed strings dropped. NULL: out of
 * memory (coord is not closed). */
static struct tw_primary *primary_alloc(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
					uint64_t incarnation, uint32_t start, bool creating,
					struct tw_coord *coord)
{
	size_t nbk = ctx ? ctx->nbk : cfg->n_backups;
	/* Aligned for the engine's groups of shared words (TW_PCACHE); sizeof is a multiple. */
	struct tw_primary *p = aligned_alloc(TW_PCACHE, sizeof(*p));
	uint64_t rec_cap;

	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->cfg = *cfg;
	p->coord = coord;
	p->r = cfg->replicas;
	/* A shared context always has its progress thread: its logs are in async mode. */
	p->threaded = ctx || cfg->mode == TW_PRIMARY_ASYNC;
	p->pub_light = p->threaded && env_on(TW__ENV_PRIMARY_MEMBARRIER) && tw__membarrier_ready();
	p->seal_self = p->threaded && env_on(TW__ENV_PRIMARY_APPENDER_SEAL);
	p->mode_ops = tw__primary_mode_ops(p->threaded);
	p->chain_step = tw__log_chain_step_fn();
	p->cfg.mode = p->threaded ? TW_PRIMARY_ASYNC : TW_PRIMARY_SYNC;
	p->incarnation = incarnation;
	p->creating = creating;
	if (getrandom(&p->seed_ctr, sizeof(p->seed_ctr), 0) != (ssize_t)sizeof(p->seed_ctr))
		p->seed_ctr = tw_now_ns() ^ ((uint64_t)getpid() << 32) ^ incarnation;
	p->seg_base = start;
	if (p->threaded) {
		pthread_mutexattr_t ma;

		/* Adaptive: appending threads hold it for a copy of one entry; a contender spins
		 * briefly instead of sleeping in the kernel (docs/primary.md, "Appends from many
		 * threads"). */
		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
		pthread_mutex_init(&p->lock, &ma);
		pthread_mutexattr_destroy(&ma);
		pthread_cond_init(&p->cv_app, NULL);
	}
	/* With a coordinator, room for the backups registered after the open (tw__pcoord_refresh;
	 * never moved: the context's bk[] has the same room). */
	p->bk_cap = nbk + (coord ? PCOORD_EXTRA : 0);
	p->bk = calloc(p->bk_cap ? p->bk_cap : 1, sizeof(*p->bk));
	p->nslots = cfg->max_inflight;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	p->pops = calloc((size_t)p->nslots * p->r, sizeof(*p->pops));
	/* The record ring holds every record not acknowledged yet: at most max_batch per write in
	 * flight and max_batch waiting (back-pressure stops appenders there first; a full ring
	 * stops them too). 32 bytes a record, touched as appends reach it: 512 KiB per log with
	 * the defaults (docs/primary.md, "Batching and pipelining"). */
	rec_cap = 1024;
	while (rec_cap < (uint64_t)cfg->max_batch * (cfg->max_inflight + 1))
		rec_cap *= 2;
	p->recs = calloc(rec_cap, sizeof(*p->recs));
	p->next_calls = calloc(p->r, sizeof(*p->next_calls));
	p->close_calls = calloc(p->r, sizeof(*p->close_calls));
	p->rec_mask = rec_cap - 1;
	if (!ctx && cfg->provider)
		p->prov_copy = strdup(cfg->provider);
	if (!p->bk || !p->slots || !p->pops || !p->recs || !p->next_calls || !p->close_calls ||
	    (!ctx && cfg->provider && !p->prov_copy)) {
		p->coord = NULL;
		primary_free(p);
		return NULL;
	}
	p->cfg.backups = NULL; /* borrowed for the call: the addresses live in p->bk[].addr */
	p->cfg.zones = NULL;   /* ... and the zones in p->bk[].zone */
	p->cfg.coordinator = NULL;
	p->cfg.provider = ctx ? ctx->cfg.provider : p->prov_copy;
	p->cfg.key_file = NULL; /* not kept: read once, by the context */
	p->cfg.skip = NULL;     /* the takeover's, for the open alone (primary_link_ctx) */
	if (ctx) {
		/* The transport is the context's. */
		p->cfg.busy_poll = ctx->cfg.busy_poll;
		p->cfg.node_id = ctx->node_id;
		p->cfg.op_timeout_ms = ctx->cfg.op_timeout_ms;
		p->cfg.rpc_timeout_ms = ctx->cfg.rpc_timeout_ms;
		p->cfg.connect_timeout_ms = ctx->cfg.connect_timeout_ms;
		p->cfg.n_backups = ctx->nbk;
	}
	for (unsigned i = 0; i < p->nslots; i++) {
		p->slots[i].p = p;
		p->slots[i].ops = &p->pops[(size_t)i * p->r];
	}
	return p;
}

/* Step 2: the log's context. Private (ctx NULL): created from cfg's transport for this log
 * alone, its RPC clients stamped with the log's incarnation. Shared: the caller's, entered as
 * the driver (*driving; left by the caller). Then the log's view of every backup, and the log
 * in the context's list (a channel lost during the open reaches it). 0 or a negative code
 * (p->errmsg says why). */
static int primary_link_ctx(struct tw_primary *p, struct tw_ctx *ctx, const struct tw__pcfg *cfg,
			    bool *driving)
{
	int rc = 0;

	if (!ctx) {
		struct tw_ctx_config cc;

		tw_ctx_config_init(&cc);
		cc.backups = cfg->backups;
		cc.n_backups = cfg->n_backups;
		cc.zones = cfg->zones;
		cc.provider = cfg->provider;
		cc.key_file = cfg->key_file;
		cc.busy_poll = cfg->busy_poll;
		cc.node_id = cfg->node_id;
		cc.op_timeout_ms = cfg->op_timeout_ms;
		cc.rpc_timeout_ms = cfg->rpc_timeout_ms;
		cc.connect_timeout_ms = cfg->connect_timeout_ms;
		cc.arena_size = cfg->arena_size;
		/* A private context: this log's alone, closed with it (the handshake RPCs count in
		 * its statistics, its RPC clients carry its incarnation). */
		rc = tw__ctx_create(&cc, false, cfg->max_inflight + 32, p->coord ? PCOORD_EXTRA : 0,
				    cfg->skip, &p->ctx);
		if (p->ctx) {
			tw__ctx_set_owner(p->ctx, p, &tw__primary_log_ops);
			p->fab = p->ctx->fab;
		}
		if (rc < 0 && p->ctx)
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", p->ctx->errmsg);
		/* (tw__ctx_create connected before knowing its owner: stamp the incarnation now.) */
		for (size_t i = 0; rc == 0 && i < p->ctx->nbk; i++)
			if (p->ctx->bk[i].peer.rpc)
				tw__rpc_client_set_incarnation(p->ctx->bk[i].peer.rpc,
							       p->incarnation);
	} else {
		p->ctx = ctx;
		p->fab = ctx->fab;
		tw__ctx_drive_enter(ctx);
		*driving = true;
		ctx->skip = cfg->skip; /* while this thread drives: NULL again before it leaves */
	}
	p->nbk = p->ctx ? p->ctx->nbk : 0; /* (0 when the context failed half-way) */
	for (size_t i = 0; i < p->nbk; i++) {
		struct cbackup *c = &p->ctx->bk[i];

		p->bk[i].p = p;
		p->bk[i].c = c;
		p->bk[i].idx = (unsigned)i;
		p->bk[i].gen = c->peer.gen;
		snprintf(p->bk[i].addr, sizeof(p->bk[i].addr), "%s", c->peer.addr);
		snprintf(p->bk[i].zone, sizeof(p->bk[i].zone), "%s", c->zone);
	}
	if (rc == 0) {
		rc = tw__ctx_attach(p->ctx, p, &tw__primary_log_ops);
		if (rc == 0)
			p->on_ctx = true;
	}
	return rc;
}

/* Step 3: the backups checked (a plain open also probes them for the log), the first segment
 * `start` allocated and opened on r of them, and made current. 0 or a negative code. */
static int primary_first_segment(struct tw_primary *p, uint32_t start)
{
	struct pseg *s0 = NULL;
	int rc = tw__pctl_check_backups(p);

	if (rc == 0 && p->creating)
		rc = tw__pctl_probe_new_log(p);
	if (rc == 0)
		rc = tw__pseg_new(p, start, &s0);
	if (rc == 0) {
		rc = tw__pctl_open_segment(p, s0);
		/* A backup that closed our connection during the open may have done so because
		 * another owner fenced the log meanwhile (a racing takeover): say so, as
		 * tw__primary_fail does once the log is open. */
		if (rc == -TW_ENOBACKUP) {
			char taken[sizeof(p->errmsg)];

			if (tw__pctl_taken_over(p, taken, sizeof(taken)) == 1) {
				snprintf(p->errmsg, sizeof(p->errmsg), "%s", taken);
				rc = -TW_EFENCED;
			}
		}
	}
	p->creating = false;
	if (rc == 0)
		rc = tw__pseg_push(p, s0);
	if (rc < 0) {
		tw__pseg_free(p, s0);
		return rc;
	}
	PSTAT_ADD(p, segments, 1);
	tw__primary_preopen_start(p, false);
	return 0;
}

/* Step 4: a private context's progress thread starts (async mode); the log is RUNNING. */
static int primary_run(struct tw_primary *p, bool private_ctx)
{
	if (p->threaded && private_ctx) {
		/* It serves the log once RUNNING. */
		int rc = tw__ctx_start(p->ctx);

		if (rc < 0) {
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", p->ctx->errmsg);
			return rc;
		}
	}
	tw__primary_lock(p);
	tw__primary_set_state(p, PSTATE_RUNNING);
	tw__primary_unlock(p);
	if (p->threaded && private_ctx)
		tw__fab_wakeup(p->fab); /* its first pass may have found it OPENING */
	return 0;
}

/* Open as owner (epoch cfg->epoch, `incarnation`), first segment `start`, on `ctx` (NULL: a
 * private context of its own). creating: a plain open of a new log (probe every backup,
 * create_log on segment 0). coord (may be NULL): the coordinator handle the primary keeps
 * (primary_coord.c), set before the first segment opens; on failure it is not closed (the
 * caller's). */
int tw__primary_open_as(struct tw_ctx *ctx, const struct tw__pcfg *cfg, uint64_t incarnation,
		    uint32_t start, bool creating, struct tw_coord *coord, struct tw_primary **out,
		    char *errmsg_out, size_t errmsg_len)
{
	struct tw_primary *p;
	bool driving = false;
	char msg[512];
	int rc;

	if (!cfg || !out) {
		set_errmsg(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	rc = check_config(cfg, ctx != NULL, msg, sizeof(msg));
	if (rc < 0) {
		tw_log_error("primary: %s", msg);
		set_errmsg(errmsg_out, errmsg_len, msg);
		return rc;
	}
	p = primary_alloc(ctx, cfg, incarnation, start, creating, coord);
	if (!p) {
		set_errmsg(errmsg_out, errmsg_len, "out of memory");
		return -ENOMEM;
	}
	rc = primary_link_ctx(p, ctx, cfg, &driving);
	if (rc == 0)
		rc = primary_first_segment(p, start);
	/* The takeover's table ends with its open: the reviver, the progress thread and every
	 * later connect on the context wait on (and probe) each backup again. */
	if (p->ctx)
		p->ctx->skip = NULL;
	if (rc == 0)
		rc = primary_run(p, !ctx);
	if (rc < 0) {
		if (!p->errmsg[0])
			snprintf(p->errmsg, sizeof(p->errmsg), "%s", tw_strerror(rc));
		/* An existing log is an expected answer (the caller takes it over): not an error. */
		tw__log(rc == -TW_ELOGEXISTS ? TW_DIAG_INFO : TW_DIAG_ERROR, "primary: open log %llu "
		       "failed: %s", (unsigned long long)cfg->log_id, p->errmsg);
		set_errmsg(errmsg_out, errmsg_len, p->errmsg);
		p->coord = NULL;
		if (driving) {
			primary_free_driving(p);
			tw__ctx_drive_leave(ctx);
		} else {
			primary_free(p);
		}
		return rc;
	}
	if (driving)
		tw__ctx_drive_leave(ctx);
	tw_log_info("primary: log %llu open at epoch %llu (incarnation %016llx), first segment %u",
		    (unsigned long long)p->cfg.log_id, (unsigned long long)p->cfg.epoch,
		    (unsigned long long)p->incarnation, start);
	*out = p;
	return 0;
}

static int open_private(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, bool take,
			tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
			struct tw_primary **out, char *errmsg_out, size_t errmsg_len);

int tw_primary_open(const struct tw_ctx_config *transport, const struct tw_primary_config *config,
		    struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	return open_private(transport, config, false, NULL, NULL, NULL, out, errmsg_out,
			    errmsg_len);
}

/* The arguments of tw_primary_open_on and tw_primary_takeover_on: `what` the call does, for
 * the message when it comes from a callback on ctx's progress thread (it would wait for itself). */
static int open_check(const struct tw_ctx *ctx, const struct tw_primary_config *cfg,
		      struct tw_primary **out, const char *what, struct tw__pcfg *pc,
		      char *errmsg_out, size_t errmsg_len)
{
	if (!ctx || !cfg || !out) {
		set_errmsg(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	*out = NULL;
	if (tw__ctx_on_thread(ctx)) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "cannot %s from a callback of a log on the "
				 "same context (it would wait for itself)", what);
		return -EDEADLK;
	}
	int rc = tw__pcfg_make(pc, NULL, cfg, errmsg_out, errmsg_len); /* the context's transport */
	if (rc == 0 && pc->mode != TW_PRIMARY_ASYNC) {
		/* The context's progress thread serves every log on it: a sync log cannot be had. */
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "tw_primary_config.mode must be "
				 "TW_PRIMARY_ASYNC on a shared context (its progress thread serves "
				 "every log on it): set it, or use tw_primary_open or "
				 "tw_primary_takeover for a log the calling thread drives");
		return -EINVAL;
	}
	return rc;
}

int tw_primary_open_on(struct tw_ctx *ctx, const struct tw_primary_config *config,
		       struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc;
	int rc = open_check(ctx, config, out, "open a log", &pc, errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	return tw__primary_open_as(ctx, &pc, tw__new_incarnation(), 0, true, NULL, out, errmsg_out,
			       errmsg_len);
}

static int takeover(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
		    tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
		    struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result local, *res = res_out ? res_out : &local;
	struct tw_recover_config rc_cfg;
	uint64_t inc = tw__new_incarnation(), next = 0;
	const char *addrs[TW_RECOVER_MAX_BACKUPS];
	size_t nbk = ctx ? ctx->nbk : cfg->n_backups;
	struct tw__pcfg pc = *cfg;
	struct tw_peer_skip skip; /* this takeover's: see peer/peer.h */
	char msg[512];
	int rc;

	skip.n = 0;
	pc.skip = &skip;

	rc = check_config(cfg, ctx != NULL, msg, sizeof(msg));
	if (rc == 0 && nbk > TW_RECOVER_MAX_BACKUPS) {
		snprintf(msg, sizeof(msg), "at most %u backups", TW_RECOVER_MAX_BACKUPS);
		rc = -EINVAL;
	}
	if (rc < 0) {
		set_errmsg(errmsg_out, errmsg_len, msg);
		return rc;
	}
	tw_recover_config_init(&rc_cfg);
	rc_cfg.log_id = cfg->log_id;
	rc_cfg.epoch = cfg->epoch;
	if (ctx) {
		for (size_t i = 0; i < nbk; i++)
			addrs[i] = ctx->bk[i].peer.addr;
		rc_cfg.backups = addrs;
		rc_cfg.n_backups = nbk;
		tw__recover_config_link(&rc_cfg, ctx->cfg.provider, ctx->cfg.busy_poll,
					ctx->cfg.connect_timeout_ms);
	} else {
		rc_cfg.backups = cfg->backups;
		rc_cfg.n_backups = cfg->n_backups;
		tw__recover_config_link(&rc_cfg, cfg->provider, cfg->busy_poll,
					cfg->connect_timeout_ms);
	}
	/* 1. fence with a new epoch as incarnation `inc`, 2. recover (every entry to the
	 * caller), 3. continue as that same owner after everything the backups ever held. The
	 * recovery runs on connections of its own, not the context's; a backup whose connect
	 * timed out there (skip) is not waited on again in step 3. */
	rc = tw__recover_as(&rc_cfg, inc, &skip, cfg->replicas, on_entry, arg, res, &next, errmsg_out,
			    errmsg_len);
	if (rc < 0)
		return rc;
	return tw__primary_continue(ctx, &pc, inc, next, res, NULL, out, errmsg_out, errmsg_len);
}

int tw__primary_continue(struct tw_ctx *ctx, const struct tw__pcfg *cfg,
			 uint64_t incarnation, uint64_t next, const struct tw_recover_result *res,
			 struct tw_coord *coord, struct tw_primary **out, char *errmsg_out,
			 size_t errmsg_len)
{
	struct tw__pcfg pc = *cfg;
	char msg[96];
	int rc;

	if (next > UINT32_MAX - 1) {
		snprintf(msg, sizeof(msg), "log %llu has used every segment id",
			 (unsigned long long)cfg->log_id);
		set_errmsg(errmsg_out, errmsg_len, msg);
		return -ERANGE;
	}
	pc.epoch = res->epoch;
	rc = tw__primary_open_as(ctx, &pc, incarnation, (uint32_t)next, false, coord, out,
				 errmsg_out, errmsg_len);
	if (rc == 0)
		tw_log_info("primary: log %llu taken over at epoch %llu: %llu entries recovered, "
			    "continuing at segment %llu", (unsigned long long)cfg->log_id,
			    (unsigned long long)res->epoch, (unsigned long long)res->entries,
			    (unsigned long long)next);
	return rc;
}

/* A log on a private context: tw_primary_open (take false) and tw_primary_takeover. */
static int open_private(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, bool take,
			tw_recover_entry_fn on_entry, void *arg, struct tw_recover_result *res_out,
			struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc, *cfg = &pc;
	int rc = out && transport ? tw__pcfg_make(&pc, transport, config, errmsg_out, errmsg_len)
				  : open_args_missing(errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	*out = NULL;
	if (cfg->coordinator && cfg->coordinator[0])
		return tw__pcoord_open(cfg, take, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
	if (take)
		return takeover(NULL, cfg, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
	return tw__primary_open_as(NULL, cfg, tw__new_incarnation(), 0, true, NULL, out, errmsg_out,
				   errmsg_len);
}

int tw_primary_takeover(const struct tw_ctx_config *transport,
			const struct tw_primary_config *config, tw_recover_entry_fn on_entry,
			void *arg, struct tw_recover_result *res_out, struct tw_primary **out,
			char *errmsg_out, size_t errmsg_len)
{
	return open_private(transport, config, true, on_entry, arg, res_out, out, errmsg_out,
			    errmsg_len);
}

int tw_primary_takeover_on(struct tw_ctx *ctx, const struct tw_primary_config *config,
			   tw_recover_entry_fn on_entry, void *arg,
			   struct tw_recover_result *res_out, struct tw_primary **out,
			   char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc;
	int rc = open_check(ctx, config, out, "take a log over", &pc, errmsg_out, errmsg_len);

	if (rc < 0)
		return rc;
	return takeover(ctx, &pc, on_entry, arg, res_out, out, errmsg_out, errmsg_len);
}

int tw_primary_finish(struct tw_primary *p)
{
	bool driving = false;
	int rc, rc2;

	if (!p)
		return -EINVAL;
	if (pstate(p) >= PSTATE_FINISHING)
		return p->finish_rc; /* again, or from a callback during the last drain (sync) */
	rc = tw_primary_flush(p);
	if (pserved(p)) {
		/* The context's thread lets go of the log once nothing is in flight: STOPPING
		 * refuses appends, the thread moves it on to FINISHING. */
		pthread_mutex_lock(&p->lock);
		tw__primary_set_state(p, PSTATE_STOPPING);
		PST(p->ctl_pending, 1);
		pthread_mutex_unlock(&p->lock);
		tw__fab_wakeup(p->fab);
		pthread_mutex_lock(&p->lock);
		while (pstate(p) != PSTATE_FINISHING)
			pthread_cond_wait(&p->cv_app, &p->lock);
		pthread_mutex_unlock(&p->lock);
		if (p->ctx->shared) {
			tw__ctx_drive_enter(p->ctx); /* the last steps below drive the fabric */
			driving = true;
		} else {
			tw__ctx_stop(p->ctx);
		}
	} else {
		tw__primary_set_state(p, PSTATE_FINISHING); /* sync: no appends from now on */
	}
	/* A close still out (close behind) is answered before the log goes: its calls live in
	 * the log. */
	rc2 = tw__pctl_close_end(p);
	if (rc2 < 0 && !rc)
		rc = rc2;
	if (!p->err && p->cur) {
		tw__primary_drain(p);
		rc2 = tw__pctl_close_segment(p, p->cur);
		if (rc2 < 0 && !rc)
			rc = rc2;
		if (!p->err && p->rr_dirty)
			tw__pfo_background(p, true); /* no later driver round: copy what is owed now */
	}
	if (p->next) {
		tw__pctl_preopen_abandon(p, p->next);
		tw__pseg_free(p, p->next);
		p->next = NULL;
	}
	if (driving)
		tw__ctx_drive_leave(p->ctx);
	if (!rc)
		rc = p->err;
	p->finish_rc = rc;
	tw__primary_lock(p);
	tw__primary_set_state(p, PSTATE_FINISHED);
	tw__primary_unlock(p);
	return rc;
}

int tw_primary_close(struct tw_primary *p)
{
	int rc;

	if (!p)
		return 0;
	rc = tw_primary_finish(p);
	primary_free(p);
	return rc;
}
