/*
 * primary/primary_coord.c — a primary given a coordinator (cfg.coordinator;
 * docs/coordination.md): backups and their zones from the live registrations, the epoch from the
 * coordinator (one place, atomically), the log's owner node held until tw_primary_close; and the
 * zone rule of replica placement (no two replicas of a segment in one zone), used by the segment
 * opens (primary_ctl.c) and the spare choice (primary_rerep.c); the per-log record of the
 * backups asked to hold its segments (tw__pcoord_note, before each open), from which a takeover's
 * recovery takes its backups; and the standby (tailwind/standby.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/standby.h>

#include "coord/coord.h"
#include "core/util.h"
#include "recovery/recover_int.h"
#include "primary/primary_int.h"

static bool same_zone(const struct pbackup *a, const struct pbackup *b)
{
	return a->zone[0] && !strcmp(a->zone, b->zone);
}

bool tw__pzone_ok(const struct tw_primary *p, const struct pseg *seg, unsigned bi,
	      const struct pcall *pending, unsigned n)
{
	const struct pbackup *b = &p->bk[bi];

	if (!b->zone[0])
		return true;
	for (unsigned i = 0; i < seg->nrep; i++) {
		const struct pbackup *o = &p->bk[seg->rep[i]];

		if (seg->rep[i] != bi && !o->lost && same_zone(o, b))
			return false;
	}
	for (unsigned i = 0; i < n; i++)
		if (pending[i].b && pending[i].b != b && same_zone(pending[i].b, b))
			return false;
	return true;
}

static void errf(char *buf, size_t len, const char *fmt, ...) TW_PRINTF(3, 4);
static void errf(char *buf, size_t len, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tw_log_error("primary: %s", msg);
	if (buf && len)
		snprintf(buf, len, "%s", msg);
}

/* Distinct non-empty zones among v[0..n). */
static unsigned count_zones(const struct tw_coord_backup *v, size_t n, bool *any_empty)
{
	unsigned z = 0;

	*any_empty = false;
	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		if (!v[i].zone[0]) {
			*any_empty = true;
			continue;
		}
		for (size_t j = 0; j < i && !seen; j++)
			seen = !strcmp(v[j].zone, v[i].zone);
		z += !seen;
	}
	return z;
}

static const char *provider_of(const struct tw__pcfg *cfg)
{
	const char *prov = cfg->provider ? cfg->provider : tw__env_get(TW__ENV_FI_PROVIDER);

	return prov && prov[0] ? prov : "tcp";
}

int tw__pcoord_note(struct tw_primary *p, unsigned bi)
{
	struct pbackup *b = &p->bk[bi];
	struct tw_coord_backup r;
	int rc;

	if (!p->coord)
		return 0;
	memset(&r, 0, sizeof(r));
	snprintf(r.addr, sizeof(r.addr), "%s", b->addr);
	snprintf(r.provider, sizeof(r.provider), "%s", provider_of(&p->cfg));
	snprintf(r.zone, sizeof(r.zone), "%s", b->zone);
	rc = tw__coord_log_add_backup(p->coord, p->cfg.log_id, &r);
	if (rc < 0) {
		/* Unrecorded, a copy there would be missed by a recovery through the
		 * coordinator: such a backup is not used. */
		snprintf(b->why, sizeof(b->why), "not recorded for the log at the coordinator: %s",
			 tw__coord_errmsg(p->coord));
		tw_log_warn("primary: log %llu: backup %s %s", (unsigned long long)p->cfg.log_id,
			    b->addr, b->why);
	}
	return rc;
}

void tw__pcoord_refresh(struct tw_primary *p)
{
	struct tw_coord_backup *v = NULL;
	const char *prov = provider_of(&p->cfg);
	size_t n = 0;

	if (!p->coord || tw__coord_kind(p->coord) != TW_COORD_ZK ||
	    !tw__coord_backups_changed(p->coord))
		return;
	if (tw__coord_watch_backups(p->coord, &v, &n) < 0) {
		tw_log_warn("primary: log %llu: cannot read the registry (%s): choosing the spare "
			    "among the backups known so far", (unsigned long long)p->cfg.log_id,
			    tw__coord_errmsg(p->coord));
		return;
	}
	for (size_t i = 0; i < p->nbk; i++) {
		struct pbackup *b = &p->bk[i];
		bool here = false;

		for (size_t j = 0; j < n && !here; j++)
			here = !strcmp(v[j].addr, b->addr) && !strcmp(v[j].provider, prov);
		if (here != !b->unregistered)
			tw_log_info("primary: log %llu: backup %s %s", (unsigned long long)
				    p->cfg.log_id, b->addr, here ? "registered again" :
				    "no longer registered: not a spare");
		b->unregistered = !here;
	}
	/* New registrations join the context (a private one: a shared context takes no
	 * coordinator) and this log, at the end of both arrays (never moved). */
	for (size_t j = 0; j < n && p->nbk < p->bk_cap && !p->ctx->shared &&
			   p->ctx->nbk < p->ctx->bk_cap && p->ctx->nbk == p->nbk; j++) {
		struct tw_ctx *ctx = p->ctx;
		struct cbackup *c;
		struct pbackup *b;
		bool known = false;

		if (strcmp(v[j].provider, prov) ||
		    (v[j].buffer_size && v[j].buffer_size < p->cfg.segment_size))
			continue;
		for (size_t i = 0; i < p->nbk && !known; i++)
			known = !strcmp(p->bk[i].addr, v[j].addr);
		if (known)
			continue;
		c = &ctx->bk[ctx->nbk];
		memset(c, 0, sizeof(*c));
		c->ctx = ctx;
		c->idx = (unsigned)ctx->nbk;
		tw__peer_init(&c->peer, v[j].addr, c);
		snprintf(c->zone, sizeof(c->zone), "%s", v[j].zone);
		b = &p->bk[p->nbk];
		memset(b, 0, sizeof(*b));
		b->p = p;
		b->c = c;
		b->idx = (unsigned)p->nbk;
		snprintf(b->addr, sizeof(b->addr), "%s", v[j].addr);
		snprintf(b->zone, sizeof(b->zone), "%s", v[j].zone);
		if (tw__ctx_connect(ctx, c) < 0) {
			b->lost = true;
			snprintf(b->why, sizeof(b->why), "%s", c->peer.why);
			tw_log_warn("primary: log %llu: newly registered backup %s: %s",
				    (unsigned long long)p->cfg.log_id, b->addr, b->why);
		} else {
			b->gen = c->peer.gen;
			tw_log_info("primary: log %llu: backup %s (zone %s) registered since the "
				    "open: a spare candidate now", (unsigned long long)p->cfg.log_id,
				    b->addr, b->zone[0] ? b->zone : "-");
		}
		ctx->nbk++;
		p->nbk++;
	}
	free(v);
}

/* Reads of the coordinator are idempotent: one whose answer was lost (-ETIMEDOUT: connection
 * loss, operation timeout) is asked again, twice at most; the next call waits to be connected
 * (up to the session timeout). An open or a takeover that fails on one lost answer leaves the
 * log without a primary (a standby's, after it claimed the log). */
#define COORD_READ_TRIES 3

static bool read_again(struct tw_coord *c, int rc, unsigned *tries, const char *what)
{
	if (rc != -ETIMEDOUT || ++*tries >= COORD_READ_TRIES)
		return false;
	tw_log_warn("primary: %s: %s: asking again", what, tw__coord_errmsg(c));
	return true;
}

/* The registrations of provider `prov`, in placement order, as parallel address and zone
 * arrays pointing into *v. 0, or -TW_ENOBACKUP / an error with errmsg set. */
static int live_backups(struct tw_coord *c, const struct tw__pcfg *cfg, const char *prov,
			struct tw_coord_backup **v, const char ***addrs, const char ***zones,
			size_t *k_out, char *errmsg_out, size_t errmsg_len)
{
	size_t n = 0, k = 0, other_prov = 0;
	unsigned r = cfg->replicas ? cfg->replicas : 3;
	bool any_empty;
	unsigned nz;
	unsigned tries = 0;
	int rc;

	/* With the watch armed: a spare choice later re-lists only if the registry changed. */
	while ((rc = tw__coord_watch_backups(c, v, &n)) < 0 &&
	       read_again(c, rc, &tries, "the registrations"))
		;
	if (rc < 0) {
		errf(errmsg_out, errmsg_len, "log %llu: %s", (unsigned long long)cfg->log_id,
		     tw__coord_errmsg(c));
		return rc;
	}
	*addrs = calloc(n ? n : 1, sizeof(**addrs));
	*zones = calloc(n ? n : 1, sizeof(**zones));
	if (!*addrs || !*zones)
		return -ENOMEM;
	/* v is in tw__coord_backup_sort order: zones interleaved, most free first. */
	for (size_t i = 0; i < n; i++) {
		struct tw_coord_backup *b = &(*v)[i];

		if (b->provider[0] && strcmp(b->provider, prov)) { /* static: none */
			other_prov++;
			continue;
		}
		if (cfg->segment_size && b->buffer_size && b->buffer_size < cfg->segment_size)
			tw_log_warn("primary: registered backup %s has %llu-byte buffers, below the "
				    "segment size: it will not be used", b->addr,
				    (unsigned long long)b->buffer_size);
		(*addrs)[k] = b->addr;
		(*zones)[k++] = b->zone;
	}
	*k_out = k;
	nz = count_zones(*v, n, &any_empty);
	if (k < r) {
		errf(errmsg_out, errmsg_len,
		     "log %llu: %zu backups registered at %s for provider %s (%zu more for other "
		     "providers), need %u: start more twd's with --coordinator",
		     (unsigned long long)cfg->log_id, k, cfg->coordinator, prov, other_prov, r);
		return -TW_ENOBACKUP;
	}
	if (nz && !any_empty && nz < r) {
		errf(errmsg_out, errmsg_len,
		     "log %llu: the registered backups are in %u zones, but %u replicas must be in "
		     "%u different zones: register backups in more zones (twd --zone)",
		     (unsigned long long)cfg->log_id, nz, r, r);
		return -TW_ENOBACKUP;
	}
	return 0;
}

enum pcoord_mode { PC_OPEN, PC_TAKEOVER, PC_STANDBY };

/*
 * Fence + recover (tw__recover_as) on the backups recorded for the log (or `live` when there is
 * no record), then open as that owner after the recovered tail with the primary's candidates
 * in *pc; the primary keeps `c` on success.
 */
static int takeover_recorded(struct tw_coord *c, const struct tw__pcfg *pc,
			     const char *prov, uint64_t from_lsn, tw_recover_entry_fn on_entry,
			     void *arg, struct tw_recover_result *res,
			     struct tw_standby_result *st, struct tw_primary **out,
			     char *errmsg_out, size_t errmsg_len)
{
	struct tw_coord_backup *rec = NULL;
	const char **raddrs = NULL;
	size_t nrec = 0, k = 0;
	struct tw_recover_config rc_cfg;
	struct tw__pcfg opc = *pc;
	struct tw_peer_skip skip; /* this takeover's: see peer/peer.h */
	uint64_t inc = tw__new_incarnation(), next = 0, t0;
	unsigned tries = 0;
	int rc;

	while ((rc = tw__coord_log_backups(c, pc->log_id, &rec, &nrec)) < 0 &&
	       read_again(c, rc, &tries, "the log's record of backups"))
		;
	skip.n = 0;
	opc.skip = &skip;

	if (rc < 0 && rc != -ENOTSUP && rc != -TW_ENOTFOUND) {
		errf(errmsg_out, errmsg_len, "log %llu: %s", (unsigned long long)pc->log_id,
		     tw__coord_errmsg(c));
		return rc;
	}
	raddrs = calloc(nrec ? nrec : 1, sizeof(*raddrs));
	if (!raddrs) {
		free(rec);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nrec && k < TW_RECOVER_MAX_BACKUPS; i++)
		if (!strcmp(rec[i].provider, prov))
			raddrs[k++] = rec[i].addr;
	tw_recover_config_init(&rc_cfg);
	rc_cfg.log_id = pc->log_id;
	if (k) {
		rc_cfg.backups = raddrs;
		rc_cfg.n_backups = k;
	} else {
		/* No record (a log from before it, or one with no segment yet): every
		 * candidate. */
		rc_cfg.backups = pc->backups;
		rc_cfg.n_backups = pc->n_backups < TW_RECOVER_MAX_BACKUPS ? pc->n_backups
									   : TW_RECOVER_MAX_BACKUPS;
	}
	tw_log_info("primary: log %llu: recovering from %zu %s backups", (unsigned long long)
		    pc->log_id, rc_cfg.n_backups, k ? "recorded" : "registered (no record)");
	rc_cfg.epoch = pc->epoch;
	rc_cfg.key_file = pc->key_file;
	rc_cfg.from_lsn = from_lsn; /* a warm standby has the entries before it */
	tw__recover_config_link(&rc_cfg, pc->provider, pc->busy_poll, pc->connect_timeout_ms);
	/* A backup whose connect timed out in the recovery (a paused process) goes into skip:
	 * the new log's open and its context do not wait on it again (peer/peer.h). */
	rc = tw__recover_as(&rc_cfg, inc, &skip, pc->replicas, on_entry, arg, res, &next, errmsg_out,
			    errmsg_len);
	free(raddrs);
	free(rec);
	if (st) {
		st->connect_ns = res->phase_ns[TW_RECOVER_PHASE_CONNECT];
		st->fence_ns = res->phase_ns[TW_RECOVER_PHASE_FENCE];
		st->recover_ns = res->phase_ns[TW_RECOVER_PHASE_LIST] +
				 res->phase_ns[TW_RECOVER_PHASE_FETCH] +
				 res->phase_ns[TW_RECOVER_PHASE_RECORD];
	}
	if (rc < 0)
		return rc;
	t0 = tw_now_ns();
	rc = tw__primary_continue(NULL, &opc, inc, next, res, c, out, errmsg_out, errmsg_len);
	if (st)
		st->open_ns = tw_now_ns() - t0;
	return rc;
}

/* A standby's wait: watch the log's owner node; when it goes, claim the log (only if no other
 * standby claimed it first: no replace), else watch the winner's node. Bounded by sc->wait_ms
 * when given (-ETIMEDOUT). *t_gone: when the owner was seen gone. */
static int standby_claim(struct tw_coord *c, const struct tw__pcfg *cfg,
			 const struct tw_standby_config *sc, const char *owner, uint64_t t_start,
			 uint64_t *t_gone, struct tw_standby_result *st, uint64_t *epoch,
			 char *errmsg_out, size_t errmsg_len)
{
	unsigned wait_ms = sc ? sc->wait_ms : 0, transient = 0;
	int rc;

	for (;;) {
		uint64_t left = 0, gone_rt = 0;
		bool watched = false;

		if (wait_ms) {
			uint64_t spent = (tw_now_ns() - t_start) / 1000000u;

			if (spent >= wait_ms) {
				rc = -ETIMEDOUT;
				if (errmsg_out && errmsg_len)
					snprintf(errmsg_out, errmsg_len, "log %llu: still owned "
						 "after %u ms", (unsigned long long)
						 cfg->log_id, wait_ms);
				return rc;
			}
			left = wait_ms - spent;
		}
		rc = tw__coord_wait_owner_gone(c, cfg->log_id, (unsigned)left,
					      sc ? sc->on_wait : NULL,
					      sc ? sc->wait_arg : NULL, &watched, &gone_rt);
		if (rc == -ETIMEDOUT) {
			/* The bounded wait the caller asked for (sc->wait_ms), not a
			 * failure: a service that stands by in rounds of wait_ms, to
			 * notice its own shutdown, would log one error per round. */
			if (errmsg_out && errmsg_len)
				snprintf(errmsg_out, errmsg_len, "%s", tw__coord_errmsg(c));
			return rc;
		}
		if (rc < 0) {
			errf(errmsg_out, errmsg_len, "log %llu: %s",
			     (unsigned long long)cfg->log_id, tw__coord_errmsg(c));
			return rc;
		}
		*t_gone = tw_now_ns();
		if (st) {
			st->watched |= watched;
			st->gone_realtime_ns = gone_rt;
			st->wait_ns = *t_gone - t_start;
		}
		rc = tw__coord_take_log(c, cfg->log_id, cfg->epoch, owner, false, epoch);
		if (rc == -TW_EFENCED) {
			tw_log_info("primary: log %llu: another standby took it first (%s): "
				    "watching its owner node", (unsigned long long)
				    cfg->log_id, tw__coord_errmsg(c));
			if (st)
				st->lost_races++;
			continue;
		}
		if (rc == -ETIMEDOUT || rc == -ECONNRESET) {
			/* ZooKeeper did not answer the claim (connection loss, operation
			 * timeout) or the session expired under it: no reason to stop standing
			 * by. The claim may have been applied with its answer lost: the wait
			 * takes a node of our own session for ours, and the next take replaces
			 * it (one epoch skipped). Paced: the wait waits for the connection, and
			 * the back-off keeps a quick failure from spinning. */
			unsigned ms = TW_MIN(50u << TW_MIN(transient, 4u), 1000u);

			tw_log_warn("primary: log %llu: claim failed (%s): %s; watching again in "
				    "%u ms", (unsigned long long)cfg->log_id, tw_strerror(rc),
				    tw__coord_errmsg(c), ms);
			transient++;
			usleep(ms * 1000u);
			continue;
		}
		if (rc < 0) {
			errf(errmsg_out, errmsg_len, "log %llu: %s",
			     (unsigned long long)cfg->log_id, tw__coord_errmsg(c));
			return rc;
		}
		return 0;
	}
}

/* A warm standby that claimed the log: its reader stops before the recovery calls on_entry;
 * *from_lsn: where the reader got to (the recovery goes on from there). */
static int warm_finish(struct tw__warm *warm, const struct tw__pcfg *cfg,
		       struct tw_standby_result *st, uint64_t *from_lsn, char *errmsg_out,
		       size_t errmsg_len)
{
	uint64_t t0;
	int rc;

	t0 = tw_now_ns();
	*from_lsn = tw__warm_stop(warm);
	if (warm->refused) {
		rc = -ECANCELED;
		errf(errmsg_out, errmsg_len, "log %llu: the entry callback stopped "
		     "the warm standby's reader", (unsigned long long)cfg->log_id);
		return rc;
	}
	if (st) {
		st->warm_entries = warm->entries;
		st->warm_lsn = *from_lsn;
		st->warm_stop_ns = tw_now_ns() - t0;
	}
	return 0;
}

static int pcoord_run(const struct tw__pcfg *cfg, enum pcoord_mode mode,
		      const struct tw_standby_config *sc, tw_recover_entry_fn on_entry, void *arg,
		      struct tw_recover_result *res_out, struct tw_standby_result *st,
		      struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw__pcfg pc = *cfg;
	struct tw_recover_result local, *res = res_out ? res_out : &local;
	struct tw_coord *c = NULL;
	struct tw_coord_backup *v = NULL;
	const char **addrs = NULL, **zones = NULL;
	const char *prov = provider_of(cfg);
	char msg[1024], owner[256], host[128] = "?";
	uint64_t epoch = 0, t_start = tw_now_ns(), t_gone = t_start, t0;
	struct tw__warm warm = { 0 };
	uint64_t from_lsn = 0;
	size_t k = 0;
	int rc;

	*out = NULL;
	memset(res, 0, sizeof(*res));
	/* The session timeout, not the connect timeout: a takeover's recovery waits the latter
	 * on a backup that does not answer (a paused one), and it need not be as long. */
	rc = tw__coord_open(cfg->coordinator, cfg->session_timeout_ms ? cfg->session_timeout_ms
								     : TW_DEFAULT_SESSION_TIMEOUT_MS,
			    &c, msg, sizeof(msg));
	if (rc < 0) {
		errf(errmsg_out, errmsg_len, "log %llu: coordinator: %s",
		     (unsigned long long)cfg->log_id, msg);
		return rc;
	}
	if (mode == PC_STANDBY && tw__coord_kind(c) != TW_COORD_ZK) {
		errf(errmsg_out, errmsg_len, "log %llu: a standby needs a zk:// coordinator (%s "
		     "keeps no owners to watch)", (unsigned long long)cfg->log_id,
		     cfg->coordinator);
		rc = -EINVAL;
		goto out;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "host=%s pid=%ld", host, (long)getpid());
	if (mode == PC_STANDBY && sc && sc->warm &&
	    tw__warm_start(&warm, cfg, on_entry, arg) < 0)
		tw_log_warn("primary: log %llu: no reader thread: the standby stays cold",
			    (unsigned long long)cfg->log_id);
	if (mode == PC_STANDBY) {
		rc = standby_claim(c, cfg, sc, owner, t_start, &t_gone, st, &epoch, errmsg_out,
				   errmsg_len);
		if (rc < 0)
			goto out;
		if (st)
			st->claim_ns = tw_now_ns() - t_gone;
		if (warm.started) {
			rc = warm_finish(&warm, cfg, st, &from_lsn, errmsg_out, errmsg_len);
			if (rc < 0)
				goto out;
		}
	}
	if (cfg->n_backups) {
		/* The caller chose the backups; the coordinator gives the epoch and ownership. */
		pc.backups = cfg->backups;
		pc.zones = cfg->zones;
	} else {
		rc = live_backups(c, cfg, prov, &v, &addrs, &zones, &k, errmsg_out, errmsg_len);
		if (rc < 0)
			goto out;
		pc.backups = addrs;
		pc.zones = zones;
		pc.n_backups = k;
	}
	if (mode != PC_STANDBY) {
		t0 = tw_now_ns();
		rc = tw__coord_take_log(c, cfg->log_id, cfg->epoch, owner, mode == PC_TAKEOVER,
				       &epoch);
		if (rc < 0) {
			if (rc == -TW_EFENCED && mode == PC_OPEN)
				rc = -TW_ELOGEXISTS; /* a live owner: the log exists; take it over */
			errf(errmsg_out, errmsg_len, "log %llu: %s", (unsigned long long)cfg->log_id,
			     tw__coord_errmsg(c));
			goto out;
		}
		if (st)
			st->claim_ns = tw_now_ns() - t0;
	}
	tw_log_info("primary: log %llu: epoch %llu from %s, %zu backups", (unsigned long long)
		    cfg->log_id, (unsigned long long)epoch, cfg->coordinator, pc.n_backups);
	pc.coordinator = NULL;
	pc.epoch = epoch;
	if (mode == PC_OPEN)
		rc = tw__primary_open_as(NULL, &pc, tw__new_incarnation(), 0, true, c, out, errmsg_out,
				     errmsg_len);
	else
		rc = takeover_recorded(c, &pc, prov, from_lsn, on_entry, arg, res, st, out,
				       errmsg_out, errmsg_len);
	if (rc == 0) {
		c = NULL; /* (*out)->coord: released by tw_primary_close, after the last write */
		if (st) {
			st->epoch = epoch;
			st->takeover_ns = tw_now_ns() - t_gone;
		}
	}
out:
	(void)tw__warm_stop(&warm);
	free(addrs);
	free(zones);
	free(v);
	tw__coord_close(c); /* a failed takeover releases its claim: the next standby tries */
	return rc;
}

int tw__pcoord_open(const struct tw__pcfg *cfg, bool takeover, tw_recover_entry_fn on_entry,
		void *arg, struct tw_recover_result *res_out, struct tw_primary **out,
		char *errmsg_out, size_t errmsg_len)
{
	return pcoord_run(cfg, takeover ? PC_TAKEOVER : PC_OPEN, NULL, on_entry, arg, res_out,
			  NULL, out, errmsg_out, errmsg_len);
}

void tw_standby_config_init_sized(struct tw_standby_config *sc, size_t size)
{
	static const struct tw_standby_config d; /* wait for ever, no callbacks, cold */

	tw__cfg_init_copy(sc, size, &d, sizeof(d));
}

int tw_primary_standby(const struct tw_ctx_config *transport, const struct tw_primary_config *config,
		       const struct tw_standby_config *sc, struct tw_standby_result *st_out,
		       struct tw_primary **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_standby_config s;
	struct tw__pcfg pc, *cfg = &pc;
	int rc;

	if (st_out)
		memset(st_out, 0, sizeof(*st_out));
	if (!transport || !config || !out) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	if (sc && (rc = TW__CFG_TAKE(s, sc, tw_standby_config_init, "tw_standby_config",
				     errmsg_out, errmsg_len)) < 0)
		return rc;
	if (!sc)
		tw_standby_config_init(&s);
	rc = tw__pcfg_make(&pc, transport, config, errmsg_out, errmsg_len);
	if (rc < 0)
		return rc;
	if (!cfg->coordinator || !cfg->coordinator[0]) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len,
				 "a standby needs a coordinator (transport.coordinator = "
				 "zk://HOST:PORT[/chroot])");
		return -EINVAL;
	}
	if (cfg->epoch > TW_EPOCH_MAX) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "epoch above the maximum (TW_EPOCH_MAX)");
		return -EINVAL;
	}
	return pcoord_run(cfg, PC_STANDBY, &s, s.on_entry, s.entry_arg,
			  st_out ? &st_out->recovery : NULL, st_out, out, errmsg_out, errmsg_len);
}
