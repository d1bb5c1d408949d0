/*
 * recovery/recover.c — tw_recover() and tw_recover_fence() (include/tailwind/recovery.h):
 * connect to the backups, fence, list, choose a copy per segment, hand the fetch to
 * recover_fetch.c, then record the recovered lengths. One thread; blocking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/recovery.h>

#include "fabric/util.h"
#include "proto/auth.h"
#include "recovery/recover_int.h"

#define FENCE_ROUNDS 8

void tw_recover_config_init(struct tw_recover_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->connect_timeout_ms = 5000;
	cfg->rpc_timeout_ms = 10000;
	cfg->op_timeout_ms = 10000;
	cfg->segs_per_backup = 2;
	cfg->chunk_size = 1u << 20;
	cfg->reads_per_seg = 4;
}

const char *tw_recover_phase_name(enum tw_recover_phase ph)
{
	switch (ph) {
	case TW_RECOVER_PHASE_CONNECT: return "connect";
	case TW_RECOVER_PHASE_FENCE: return "fence";
	case TW_RECOVER_PHASE_LIST: return "list";
	case TW_RECOVER_PHASE_FETCH: return "fetch";
	case TW_RECOVER_PHASE_VERIFY: return "verify";
	case TW_RECOVER_PHASE_DELIVER: return "deliver";
	case TW_RECOVER_PHASE_RECORD: return "record";
	case TW_RECOVER_PHASE_TOTAL: return "total";
	case TW_RECOVER_PHASES: break;
	}
	return "unknown";
}

void rc_seterr(struct rctx *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->errmsg || c->errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(c->errmsg, c->errlen, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ fabric wiring */

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct rbk *b = tw_chan_user(ch);

	(void)arg;
	if (b && b->rpc && tw_rpc_client_on_recv(b->rpc, msg, len) < 0) {
		b->lost = true;
		snprintf(b->why, sizeof(b->why), "malformed reply stream");
	}
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct rbk *b = tw_chan_user(ch);

	(void)arg;
	if (!b)
		return;
	if (!b->lost)
		snprintf(b->why, sizeof(b->why), "connection lost: %s", tw_strerror(err));
	b->lost = true;
	if (b->rpc)
		tw_rpc_client_on_lost(b->rpc, err);
}

void rc_progress(struct rctx *c, int timeout_ms)
{
	tw_fab_progress(c->fab, timeout_ms);
	for (unsigned i = 0; i < c->nbk; i++)
		if (c->bks[i].rpc)
			tw_rpc_client_expire(c->bks[i].rpc);
}

static bool bk_ok(const struct rbk *b)
{
	return b->up && !b->lost;
}

static int check_cfg(struct rctx *c)
{
	const struct tw_recover_config *cfg = c->cfg;

	if (!cfg->backups || cfg->n_backups == 0 || cfg->n_backups > TW_RECOVER_MAX_BACKUPS) {
		rc_seterr(c, "give between 1 and %u backup addresses", TW_RECOVER_MAX_BACKUPS);
		return -EINVAL;
	}
	for (size_t i = 0; i < cfg->n_backups; i++) {
		if (!cfg->backups[i] || !cfg->backups[i][0]) {
			rc_seterr(c, "backup address %zu is empty", i);
			return -EINVAL;
		}
	}
	if (cfg->log_id > TW_RPC_ID_MAX || cfg->epoch > TW_RPC_ID_MAX) {
		rc_seterr(c, "log id and epoch must be below 2^63");
		return -EINVAL;
	}
	return 0;
}

/* Open the fab and connect to every backup; unreachable ones are warned about and skipped. */
/* The Handshake (with the key's challenge-response when there is a key): before any other
 * request, so a backup with a key serves us. The rpc client and channel stay for the caller
 * to drop on failure (disconnect_all). */
static int auth_handshake(struct rctx *c, struct rbk *b)
{
	struct tw_rpc_reply rep;
	uint64_t node = (uint64_t)gethostid() << 32 | (uint64_t)getpid();
	int rc;

	rc = tw_auth_client_handshake(b->rpc, c->key, node ? node : 1,
				      TAILWIND__ROLE__ROLE_RECOVERY, NULL, &rep, b->why,
				      sizeof(b->why));
	tw_rpc_reply_release(&rep);
	return rc;
}

static int connect_all(struct rctx *c)
{
	const struct tw_recover_config *cfg = c->cfg;
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	struct tw_rpc_config rcfg;
	int rc, auth_err = 0;

	c->nbk = (unsigned)cfg->n_backups;
	c->bks = calloc(c->nbk, sizeof(*c->bks));
	if (!c->bks)
		return -ENOMEM;
	tw_fab_config_init(&fc);
	fc.provider = cfg->provider;
	if (cfg->connect_timeout_ms)
		fc.connect_timeout_ms = cfg->connect_timeout_ms;
	if (cfg->op_timeout_ms)
		fc.op_timeout_ms = cfg->op_timeout_ms;
	fc.tx_depth = 256;
	fc.busy_poll = cfg->busy_poll;
	memset(&ev, 0, sizeof(ev));
	ev.arg = c;
	ev.on_recv = on_recv;
	ev.on_lost = on_lost;
	rc = tw_fab_open(&fc, &ev, &c->fab);
	if (rc) {
		rc_seterr(c, "cannot open the fabric (%s): %s", cfg->provider ? cfg->provider :
			  "default provider", tw_strerror(rc));
		return rc;
	}
	tw_rpc_config_init(&rcfg);
	if (cfg->rpc_timeout_ms)
		rcfg.timeout_ms = cfg->rpc_timeout_ms;
	if (tw_auth_key_path(cfg->key_file)) {
		char why[256];

		rc = tw_auth_key_load(tw_auth_key_path(cfg->key_file), &c->key, why, sizeof(why));
		if (rc) {
			c->key = NULL;
			rc_seterr(c, "%s", why);
			return rc;
		}
	}
	for (unsigned i = 0; i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];

		b->idx = i;
		b->addr = cfg->backups[i];
		rc = tw_fab_connect(c->fab, b->addr, &b->ch);
		if (rc == 0) {
			tw_chan_set_user(b->ch, b);
			rc = tw_rpc_client_create(b->ch, &rcfg, &b->rpc);
		}
		if (rc) {
			snprintf(b->why, sizeof(b->why), "cannot connect: %s", tw_strerror(rc));
			tw_log_warn("recover: backup %s: %s; going on without it", b->addr, b->why);
			continue;
		}
		rc = auth_handshake(c, b);
		if (rc) {
			if (!auth_err)
				auth_err = rc;
			tw_rpc_client_destroy(b->rpc);
			b->rpc = NULL;
			tw_chan_close(b->ch);
			b->ch = NULL;
			tw_log_warn("recover: backup %s: %s; going on without it", b->addr, b->why);
			continue;
		}
		b->up = true;
		c->res->backups_reached++;
	}
	if (c->res->backups_reached == 0) {
		rc_seterr(c, "no backup reachable (first: %s: %s)", c->bks[0].addr, c->bks[0].why);
		return auth_err == -EACCES ? -EACCES : -TW_ENOBACKUP;
	}
	return 0;
}

static void disconnect_all(struct rctx *c)
{
	for (unsigned i = 0; c->bks && i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];

		if (b->rpc)
			tw_rpc_client_destroy(b->rpc);
		b->rpc = NULL;
		if (b->ch)
			tw_chan_close(b->ch);
		b->ch = NULL;
	}
	if (c->fab)
		tw_fab_close(c->fab);
	c->fab = NULL;
	free(c->bks);
	c->bks = NULL;
	tw_auth_key_free(c->key);
	c->key = NULL;
}

/* ------------------------------------------------------------------ list */

/* Listing of one backup, appended to a flat array of (segment id, copy). */
struct listed {
	uint64_t seg;
	struct rcopy cp;
};

struct listvec {
	struct listed *v;
	size_t n, cap;
};

static int lv_push(struct listvec *lv, uint64_t seg, const struct rcopy *cp)
{
	if (lv->n == lv->cap) {
		size_t cap = lv->cap ? 2 * lv->cap : 64;
		struct listed *n = realloc(lv->v, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		lv->v = n;
		lv->cap = cap;
	}
	lv->v[lv->n].seg = seg;
	lv->v[lv->n].cp = *cp;
	lv->n++;
	return 0;
}

static int list_one(struct rctx *c, struct rbk *b, struct listvec *lv)
{
	uint64_t from = 0;

	for (int page = 0; page < 1 << 20; page++) {
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		const Tailwind__ListSegmentsReply *r;
		bool more;
		int rc;

		tw_rpc_req_list_segments(&req, c->cfg->log_id, false, from);
		rc = tw_rpc_call_sync(b->rpc, &req.env, &rep);
		if (rc) {
			snprintf(b->why, sizeof(b->why), "list failed: %s (%s)", tw_strerror(rc),
				 tw_rpc_client_errmsg(b->rpc));
			tw_rpc_reply_release(&rep);
			return rc;
		}
		r = rep.env->list_segments_reply;
		for (size_t i = 0; r && i < r->n_segments; i++) {
			const Tailwind__SegmentInfo *in = r->segments[i];
			struct rcopy cp;

			if (!in || in->log_id != c->cfg->log_id)
				continue;
			memset(&cp, 0, sizeof(cp));
			cp.bk = b->idx;
			cp.state = in->state;
			cp.valid_len = in->valid_len;
			cp.entries = in->entries;
			cp.version = in->replica_version;
			cp.epoch = in->epoch;
			cp.checksum = in->checksum;
			cp.corrupt = in->corrupt;
			if (cp.epoch > b->max_epoch)
				b->max_epoch = cp.epoch;
			if (lv_push(lv, in->segment_id, &cp)) {
				tw_rpc_reply_release(&rep);
				return -ENOMEM;
			}
		}
		more = r && r->more && r->next_log_id == c->cfg->log_id;
		if (more)
			from = r->next_segment_id;
		tw_rpc_reply_release(&rep);
		if (!more)
			return 0;
	}
	return -TW_EPROTO;
}

static int cmp_listed(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;

	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	return x->cp.bk < y->cp.bk ? -1 : x->cp.bk > y->cp.bk;
}

static const char *state_str(int st)
{
	switch (st) {
	case TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN: return "open";
	case TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED: return "closed";
	case TAILWIND__SEGMENT_STATE__SEGMENT_STATE_FLUSHED: return "flushed";
	default: return "unknown";
	}
}

static bool is_open(const struct rcopy *cp)
{
	return cp->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
}

/* Order copies best first; the rotation spreads equal choices over the backups. */
struct rot {
	unsigned rot, nbk;
};

static int cmp_copy(const void *a, const void *b, void *arg)
{
	const struct rcopy *x = a, *y = b;
	const struct rot *r = arg;
	unsigned g_rot = r->rot, g_nbk = r->nbk, rx, ry;

	if (is_open(x) != is_open(y))
		return is_open(x) ? 1 : -1; /* closed (verified) first */
	if (x->valid_len != y->valid_len)
		return x->valid_len > y->valid_len ? -1 : 1; /* longest first */
	rx = (x->bk + g_nbk - g_rot % g_nbk) % g_nbk;
	ry = (y->bk + g_nbk - g_rot % g_nbk) % g_nbk;
	return rx < ry ? -1 : rx > ry;
}

/* Group the listings into segments and order each segment's copies. */
static int choose(struct rctx *c, struct listvec *lv)
{
	size_t i = 0, nseg = 0;

	qsort(lv->v, lv->n, sizeof(*lv->v), cmp_listed);
	c->res->copies_listed = lv->n;
	for (size_t k = 0; k < lv->n; k++)
		if (k == 0 || lv->v[k].seg != lv->v[k - 1].seg)
			nseg++;
	c->segs = calloc(nseg ? nseg : 1, sizeof(*c->segs));
	if (!c->segs)
		return -ENOMEM;
	c->nsegs_all = nseg;
	for (size_t si = 0; si < nseg; si++) {
		struct rseg *s = &c->segs[si];
		size_t j = i;
		uint64_t maxver = 0;
		unsigned keep = 0;

		while (j < lv->n && lv->v[j].seg == lv->v[i].seg)
			j++;
		s->id = lv->v[i].seg;
		s->copies = calloc(j - i, sizeof(*s->copies));
		if (!s->copies)
			return -ENOMEM;
		for (size_t k = i; k < j; k++) {
			const struct rcopy *cp = &lv->v[k].cp;

			if (is_open(cp))
				s->any_open = true;
			if (cp->corrupt) {
				tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": the %s copy "
					    "on backup %s is corrupt; skipping it", c->cfg->log_id, s->id,
					    state_str(cp->state), c->bks[cp->bk].addr);
				c->res->copies_corrupt++;
				continue;
			}
			if (cp->version > maxver)
				maxver = cp->version;
		}
		/* Usable copies first (not corrupt, highest version), the rest kept for record. */
		for (size_t k = i; k < j; k++) {
			const struct rcopy *cp = &lv->v[k].cp;

			if (!cp->corrupt && cp->version == maxver)
				s->copies[keep++] = *cp;
		}
		s->usable = keep;
		for (size_t k = i; k < j; k++) {
			const struct rcopy *cp = &lv->v[k].cp;

			if (cp->corrupt || cp->version != maxver) {
				if (!cp->corrupt) {
					tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": copy "
						    "on backup %s has replica version %" PRIu64 " < %"
						    PRIu64 "; ignoring it", c->cfg->log_id, s->id,
						    c->bks[cp->bk].addr, cp->version, maxver);
					c->res->copies_stale++;
				}
				s->copies[s->ncopies + keep] = *cp;
				s->ncopies++;
			}
		}
		s->ncopies += keep;
		{
			struct rot r = { (unsigned)(s->id % (c->nbk ? c->nbk : 1)),
					 c->nbk ? c->nbk : 1 };

			qsort_r(s->copies, s->usable, sizeof(*s->copies), cmp_copy, &r);
		}
		/* Closed copies must agree with each other; say so when they do not. */
		for (unsigned k = 1; k < s->usable; k++) {
			const struct rcopy *a = &s->copies[0], *b = &s->copies[k];

			if (!is_open(a) && !is_open(b) &&
			    (a->valid_len != b->valid_len || a->checksum != b->checksum))
				tw_log_info("recover: log %016" PRIx64 " segment %" PRIu64 ": closed "
					    "copies differ (%s: %" PRIu64 " bytes, %s: %" PRIu64
					    " bytes; normal after an earlier recovery); using the longest", c->cfg->log_id, s->id,
					    c->bks[a->bk].addr, a->valid_len, c->bks[b->bk].addr,
					    b->valid_len);
		}
		i = j;
	}
	/* Contiguous run from the first segment, each with a usable copy. */
	c->nsegs = 0;
	for (size_t si = 0; si < nseg; si++) {
		if (c->segs[si].usable == 0)
			break;
		if (si > 0 && c->segs[si].id != c->segs[si - 1].id + 1)
			break;
		c->nsegs++;
	}
	c->res->segments_missing = nseg - c->nsegs;
	return 0;
}

static int list_all(struct rctx *c)
{
	struct listvec lv = { 0 };
	int rc = 0;
	unsigned answered = 0;

	for (unsigned i = 0; i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];

		if (!bk_ok(b))
			continue;
		rc = list_one(c, b, &lv);
		if (rc == -ENOMEM)
			goto out;
		if (rc) {
			tw_log_warn("recover: backup %s: %s; going on without it", b->addr, b->why);
			b->up = false;
			continue;
		}
		answered++;
	}
	if (answered == 0) {
		rc_seterr(c, "no backup answered the listing");
		rc = -TW_ENOBACKUP;
		goto out;
	}
	rc = choose(c, &lv);
out:
	free(lv.v);
	return rc;
}

/* ------------------------------------------------------------------ fence */

/* The log's epoch on a backup: a RecoveredOffset for a segment that cannot exist, with epoch 0;
 * the backup answers (NOT_FOUND or FENCED) with the log's epoch in the reply envelope. */
static uint64_t probe_epoch(struct rctx *c, struct rbk *b)
{
	struct tw_rpc_seg_meta m = { c->cfg->log_id, TW_RPC_ID_MAX, 0, 0 };
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	uint64_t e = 0;

	if (!bk_ok(b))
		return 0;
	tw_rpc_req_recovered_offset(&req, 0, &m, 0);
	(void)tw_rpc_call_sync(b->rpc, &req.env, &rep);
	if (rep.env)
		e = rep.env->epoch;
	tw_rpc_reply_release(&rep);
	return e;
}

static int fence_all(struct rctx *c)
{
	uint64_t epoch = c->cfg->epoch;
	int rc = 0;

	if (epoch == 0) {
		/* Automatic: past the log's epoch on every backup (probe) and past every epoch
		 * the listing shows (backups without the probe). */
		struct listvec lv = { 0 };

		for (unsigned i = 0; i < c->nbk; i++) {
			uint64_t e = probe_epoch(c, &c->bks[i]);

			if (e > epoch)
				epoch = e;
			if (bk_ok(&c->bks[i]) && list_one(c, &c->bks[i], &lv) == 0 &&
			    c->bks[i].max_epoch >= epoch)
				epoch = c->bks[i].max_epoch;
		}
		free(lv.v);
		epoch++;
	}
	for (int round = 0; round < FENCE_ROUNDS; round++) {
		uint64_t higher = 0;
		unsigned fenced = 0;

		for (unsigned i = 0; i < c->nbk; i++) {
			struct rbk *b = &c->bks[i];
			uint64_t got = 0;

			b->fenced = false;
			if (!bk_ok(b))
				continue;
			rc = tw_rpc_fence(b->rpc, c->cfg->log_id, epoch, &got);
			if (rc == 0) {
				b->fenced = true;
				fenced++;
			} else if (rc == -TW_EFENCED) {
				if (got > higher)
					higher = got;
			} else {
				snprintf(b->why, sizeof(b->why), "fence failed: %s (%s)",
					 tw_strerror(rc), tw_rpc_client_errmsg(b->rpc));
				tw_log_warn("recover: backup %s: %s; going on without it", b->addr,
					    b->why);
				b->up = false;
			}
		}
		if (higher == 0) {
			c->epoch = epoch;
			c->res->epoch = epoch;
			c->res->backups_fenced = fenced;
			if (fenced == 0) {
				rc_seterr(c, "no backup accepted the fence of log %016" PRIx64,
					  c->cfg->log_id);
				return -TW_ENOBACKUP;
			}
			return 0;
		}
		if (c->cfg->epoch != 0) {
			rc_seterr(c, "log %016" PRIx64 " is already at epoch %" PRIu64 " on some "
				  "backup (> %" PRIu64 ")", c->cfg->log_id, higher, epoch);
			return -TW_EFENCED;
		}
		tw_log_info("recover: log %016" PRIx64 " is at epoch %" PRIu64 " somewhere; "
			    "fencing again with %" PRIu64, c->cfg->log_id, higher, higher + 1);
		epoch = higher + 1;
	}
	rc_seterr(c, "log %016" PRIx64 ": the fence kept being overtaken by newer epochs",
		  c->cfg->log_id);
	return -TW_EFENCED;
}

/* ------------------------------------------------------------------ record */

static void record_all(struct rctx *c)
{
	for (size_t si = 0; si < c->nsegs; si++) {
		struct rseg *s = &c->segs[si];
		struct tw_rpc_seg_meta m;

		if (!s->done || !s->any_open)
			continue;
		m.log_id = c->cfg->log_id;
		m.segment_id = s->id;
		m.checksum = s->checksum;
		m.offset = s->len;
		for (unsigned k = 0; k < s->ncopies; k++) {
			struct rbk *b = &c->bks[s->copies[k].bk];
			int rc;

			/* Closed copies already have their final length. */
			if (!bk_ok(b) || !is_open(&s->copies[k]))
				continue;
			rc = tw_rpc_recovered_offset(b->rpc, c->epoch, &m, s->version);
			if (rc == 0) {
				c->res->offsets_recorded++;
				continue;
			}
			tw_log_warn("recover: backup %s: recording segment %" PRIu64 " at %" PRIu64
				    " bytes: %s (%s)", b->addr, s->id, s->len, tw_strerror(rc),
				    tw_rpc_client_errmsg(b->rpc));
		}
	}
}

/* ------------------------------------------------------------------ API */

static void free_segs(struct rctx *c)
{
	for (size_t i = 0; c->segs && i < c->nsegs_all; i++)
		free(c->segs[i].copies);
	free(c->segs);
	c->segs = NULL;
}

static int run(struct rctx *c, bool fence_only)
{
	struct tw_recover_result *res = c->res;
	uint64_t t0 = tw_now_ns(), t;
	int rc;

	rc = check_cfg(c);
	if (rc)
		return rc;
	rc = connect_all(c);
	res->backups = c->nbk;
	t = tw_now_ns();
	res->phase_ns[TW_RECOVER_PHASE_CONNECT] = t - t0;
	if (rc)
		return rc;
	if (!c->cfg->no_fence || fence_only) {
		rc = fence_all(c);
		res->phase_ns[TW_RECOVER_PHASE_FENCE] = tw_now_ns() - t;
		if (rc || fence_only)
			return rc;
	} else {
		c->epoch = TW_RPC_ID_MAX; /* read without fencing: pass every epoch check */
	}
	t = tw_now_ns();
	rc = list_all(c);
	res->phase_ns[TW_RECOVER_PHASE_LIST] = tw_now_ns() - t;
	if (rc)
		return rc;
	t = tw_now_ns();
	rc = rc_fetch_all(c);
	res->phase_ns[TW_RECOVER_PHASE_FETCH] = tw_now_ns() - t;
	if (rc)
		return rc;
	if (!c->cfg->no_record && !c->cfg->no_fence) {
		t = tw_now_ns();
		record_all(c);
		res->phase_ns[TW_RECOVER_PHASE_RECORD] = tw_now_ns() - t;
	}
	if (res->segments_missing > 0) {
		const struct rseg *gap = &c->segs[c->nsegs];

		rc_seterr(c, "log %016" PRIx64 ": segment %" PRIu64 " has no usable copy on the "
			  "reachable backups; %" PRIu64 " listed segment(s) from there on were not "
			  "delivered", c->cfg->log_id,
			  c->nsegs > 0 ? c->segs[c->nsegs - 1].id + 1 : gap->id,
			  res->segments_missing);
		return -TW_ENOBACKUP;
	}
	return 0;
}

int tw_recover(const struct tw_recover_config *cfg, tw_recover_entry_fn cb, void *arg,
	       struct tw_recover_result *res_out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result local, *res = res_out ? res_out : &local;
	struct rctx c;
	uint64_t t0 = tw_now_ns();
	int rc;

	memset(res, 0, sizeof(*res));
	memset(&c, 0, sizeof(c));
	if (errmsg_out && errmsg_len)
		errmsg_out[0] = '\0';
	if (!cfg)
		return -EINVAL;
	c.cfg = cfg;
	c.res = res;
	c.errmsg = errmsg_out;
	c.errlen = errmsg_len;
	c.cb = cb;
	c.cb_arg = arg;
	rc = run(&c, false);
	free_segs(&c);
	disconnect_all(&c);
	res->phase_ns[TW_RECOVER_PHASE_TOTAL] = tw_now_ns() - t0;
	if (rc && errmsg_out && errmsg_len && !errmsg_out[0])
		snprintf(errmsg_out, errmsg_len, "%s", tw_strerror(rc));
	if (rc)
		tw_log_debug("recover: log %016" PRIx64 ": %s", cfg->log_id,
			     errmsg_out ? errmsg_out : tw_strerror(rc));
	return rc;
}

int tw_recover_fence(const struct tw_recover_config *cfg, uint64_t *epoch_out,
		     unsigned *fenced_out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result res;
	struct rctx c;
	int rc;

	memset(&res, 0, sizeof(res));
	memset(&c, 0, sizeof(c));
	if (errmsg_out && errmsg_len)
		errmsg_out[0] = '\0';
	if (!cfg)
		return -EINVAL;
	c.cfg = cfg;
	c.res = &res;
	c.errmsg = errmsg_out;
	c.errlen = errmsg_len;
	rc = run(&c, true);
	disconnect_all(&c);
	if (epoch_out)
		*epoch_out = res.epoch;
	if (fenced_out)
		*fenced_out = res.backups_fenced;
	if (rc && errmsg_out && errmsg_len && !errmsg_out[0])
		snprintf(errmsg_out, errmsg_len, "%s", tw_strerror(rc));
	return rc;
}
