/*
 * recovery/recover.c — tw_recover() and tw_admin_fence() (include/tailwind/recovery.h):
 * connect to the backups, fence, list, choose a copy per segment, hand the fetch to
 * recover_fetch.c, then record the recovered lengths. One thread; blocking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <tailwind/recovery.h>

#include "core/util.h"
#include "proto/auth.h"
#include "recovery/recover_int.h"

static const struct tw_recover_config recover_defaults = {
	.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS,
	.rpc_timeout_ms = TW_DEFAULT_RECOVER_RPC_TIMEOUT_MS,
	.op_timeout_ms = TW_DEFAULT_OP_TIMEOUT_MS,
	.segs_per_backup = 2,
	.chunk_size = 1u << 20,
	.reads_per_seg = 4,
};

void tw_recover_config_init_sized(struct tw_recover_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &recover_defaults, sizeof(recover_defaults));
}

void tw__recover_config_link(struct tw_recover_config *cfg, const char *provider, bool busy_poll,
			     unsigned connect_timeout_ms)
{
	cfg->provider = provider;
	cfg->busy_poll = busy_poll;
	if (connect_timeout_ms)
		cfg->connect_timeout_ms = connect_timeout_ms;
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

_Static_assert(TW_RECOVER_PHASES <= TW_RECOVER_PHASES_MAX,
	       "tw_recover_result.phase_ns has room for TW_RECOVER_PHASES_MAX phases");

void tw__rc_seterr(struct rctx *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->errmsg || c->errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(c->errmsg, c->errlen, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ fabric wiring */

void tw__rc_progress(struct rctx *c, int timeout_ms)
{
	tw__fab_progress(c->fab, timeout_ms);
	for (unsigned i = 0; i < c->nbk; i++)
		tw__peer_expire(&c->bks[i].peer);
}

static bool bk_ok(const struct rbk *b)
{
	return b->peer.up && !b->peer.lost;
}

static int check_cfg(struct rctx *c)
{
	const struct tw_recover_config *cfg;
	int rc;

	/* The caller's struct as far as it reaches (the ABI rule, tailwind/common.h). */
	rc = TW__CFG_TAKE(c->cfg_own, c->cfg, tw_recover_config_init, "tw_recover_config",
			  c->errmsg, c->errlen);
	if (rc < 0)
		return rc;
	c->cfg = cfg = &c->cfg_own;

	if (!cfg->backups || cfg->n_backups == 0 || cfg->n_backups > TW_RECOVER_MAX_BACKUPS) {
		tw__rc_seterr(c, "give between 1 and %u backup addresses", TW_RECOVER_MAX_BACKUPS);
		return -EINVAL;
	}
	for (size_t i = 0; i < cfg->n_backups; i++) {
		if (!cfg->backups[i] || !cfg->backups[i][0]) {
			tw__rc_seterr(c, "backup address %zu is empty", i);
			return -EINVAL;
		}
	}
	if (cfg->log_id > TW_RPC_ID_MAX) {
		tw__rc_seterr(c, "log id must be below 2^63");
		return -EINVAL;
	}
	if (cfg->epoch > TW_EPOCH_MAX) {
		tw__rc_seterr(c, "epoch %" PRIu64 " is above the maximum %" PRIu64, cfg->epoch,
			  (uint64_t)TW_EPOCH_MAX);
		return -EINVAL;
	}
	return 0;
}

/* One connect (peer/peer.h); a failure is warned about unless `quiet`. */
static int connect_one(struct rctx *c, struct rbk *b, const struct tw_peer_opts *po, bool quiet,
		       int *auth_err)
{
	int rc = tw__peer_connect(&b->peer, c->fab, po);

	if (rc == 0) {
		c->res->backups_reached++;
		return 0;
	}
	if (rc == -EACCES && !*auth_err)
		*auth_err = rc;
	if (!quiet)
		tw_log_warn("recover: backup %s: %s; going on without it", b->peer.addr, b->peer.why);
	return rc;
}

/*
 * Connect to every backup; unreachable ones are warned about and skipped. With the log's r
 * known (a takeover), in two rounds: first every backup with a short timeout (an eighth of the
 * connect timeout, at least 50 ms), then the ones that did not answer in time again with the
 * whole timeout, but only while fewer than max(n - r + 1, r) backups answered. Each segment was
 * written to r of the n, so once n - r + 1 answered, every segment has a copy among them; and
 * with r of them answering, the new log can open on backups that answer. Then a silent backup
 * (a paused process) only costs the short timeout. With max(n - r + 1, r) = n (r = n, say) it
 * is one round with the whole timeout.
 * Which copies the recovery needs ("Which copy") does not change, nor what it does without
 * one: only how long it waits before it goes on without a backup that does not answer.
 * docs/recovery.md, "Connects in two rounds".
 */
static void connect_rounds(struct rctx *c, struct tw_peer_opts *po, unsigned full_ms,
			   int *auth_err)
{
	unsigned first_ms = full_ms / 8 < 50 ? 50 : full_ms / 8;
	unsigned r = c->replicas, late = 0;
	/* n - r + 1 for the copies; and r, so that the new log's open finds r backups that
	 * answered: a live backup slow to accept a connection on a loaded machine must not be
	 * given up when the log cannot open without it. */
	unsigned need = r == 0 || r > c->nbk ? c->nbk : (c->nbk - r + 1 > r ? c->nbk - r + 1 : r);
	bool two = r > 0 && need < c->nbk && first_ms < full_ms;
	struct tw_peer_skip *skip = po->skip;
	int rc;

	if (!two) {
		for (unsigned i = 0; i < c->nbk; i++)
			connect_one(c, &c->bks[i], po, false, auth_err);
		return;
	}
	/* Round one: nothing goes into the takeover's table yet (a late backup may be tried
	 * again below); a Handshake that timed out waited its whole RPC timeout: it goes in. The
	 * table is empty here: both takeovers start their recovery with a new one. */
	po->skip = NULL;
	po->connect_timeout_ms = first_ms;
	tw__fab_set_connect_timeout(c->fab, first_ms);
	for (unsigned i = 0; i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];

		rc = connect_one(c, b, po, true, auth_err);
		b->late = rc == -ETIMEDOUT && b->peer.failed == TW_PEER_CONNECT;
		late += b->late;
		if (rc < 0 && !b->late) {
			if (rc == -ETIMEDOUT)
				tw__peer_skip_add(skip, b->peer.addr);
			tw_log_warn("recover: backup %s: %s; going on without it", b->peer.addr,
				    b->peer.why);
		}
	}
	po->skip = skip;
	po->connect_timeout_ms = full_ms;
	tw__fab_set_connect_timeout(c->fab, full_ms);
	for (unsigned i = 0; i < c->nbk && late; i++) {
		struct rbk *b = &c->bks[i];

		if (!b->late)
			continue;
		b->late = false;
		late--;
		if (c->res->backups_reached >= need) {
			tw__peer_skip_add(skip, b->peer.addr);
			tw_log_warn("recover: backup %s: no answer within %u ms, and %u of the %u "
				    "backups answered: with r = %u each segment has a copy among them, "
				    "and the new log has r of them; going on without it", b->peer.addr,
				    first_ms, c->res->backups_reached, c->nbk, r);
			continue;
		}
		connect_one(c, b, po, false, auth_err);
	}
}

/* Open the fab and connect to every backup (peer/peer.h: the Handshake, with the key's
 * challenge-response when there is a key); unreachable ones are warned about and skipped. */
static int connect_all(struct rctx *c)
{
	const struct tw_recover_config *cfg = c->cfg;
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	struct tw_rpc_config rcfg;
	struct tw_peer_opts po;
	int rc, auth_err = 0;

	c->nbk = (unsigned)cfg->n_backups;
	c->bks = calloc(c->nbk, sizeof(*c->bks));
	if (!c->bks)
		return -ENOMEM;
	tw__fab_config_init(&fc);
	fc.provider = cfg->provider;
	if (cfg->connect_timeout_ms)
		fc.connect_timeout_ms = cfg->connect_timeout_ms;
	if (cfg->op_timeout_ms)
		fc.op_timeout_ms = cfg->op_timeout_ms;
	fc.tx_depth = 256;
	fc.busy_poll = cfg->busy_poll;
	memset(&ev, 0, sizeof(ev));
	ev.arg = c;
	ev.on_recv = tw__peer_fab_on_recv;
	ev.on_lost = tw__peer_fab_on_lost;
	rc = tw__fab_open(&fc, &ev, &c->fab);
	if (rc) {
		tw__rc_seterr(c, "cannot open the fabric (%s): %s", cfg->provider ? cfg->provider :
			  "default provider", tw_strerror(rc));
		return rc;
	}
	tw__rpc_config_init(&rcfg);
	if (cfg->rpc_timeout_ms)
		rcfg.timeout_ms = cfg->rpc_timeout_ms;
	if (tw__auth_key_path(cfg->key_file)) {
		char why[256];

		rc = tw__auth_key_load(tw__auth_key_path(cfg->key_file), &c->key, why, sizeof(why));
		if (rc) {
			c->key = NULL;
			tw__rc_seterr(c, "%s", why);
			return rc;
		}
	}
	tw__peer_opts_init(&po, TAILWIND__ROLE__ROLE_RECOVERY);
	po.key = c->key;
	po.incarnation = c->incarnation;
	po.rpc = rcfg;
	po.connect_timeout_ms = fc.connect_timeout_ms;
	/* A takeover's recovery notes the backups whose connect timed out (a paused process),
	 * so that the new log's open does not wait on them again; which copies recovery needs
	 * ("Which copy", docs/recovery.md) does not change. */
	po.skip = c->skip;
	for (unsigned i = 0; i < c->nbk; i++) {
		c->bks[i].idx = i;
		tw__peer_init(&c->bks[i].peer, cfg->backups[i], &c->bks[i]);
	}
	connect_rounds(c, &po, fc.connect_timeout_ms, &auth_err);
	if (c->res->backups_reached == 0) {
		tw__rc_seterr(c, "no backup reachable (first: %s: %s)", c->bks[0].peer.addr, c->bks[0].peer.why);
		return auth_err == -EACCES ? -EACCES : -TW_ENOBACKUP;
	}
	return 0;
}

static void disconnect_all(struct rctx *c)
{
	for (unsigned i = 0; c->bks && i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];

		tw__peer_close(&b->peer);
	}
	if (c->fab)
		tw__fab_close(c->fab);
	c->fab = NULL;
	free(c->bks);
	c->bks = NULL;
	tw__auth_key_free(c->key);
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
	const struct listed l = {.seg = seg, .cp = *cp};

	return tw__push(&lv->v, &lv->cap, &lv->n, sizeof(l), 64, &l);
}

static int list_one(struct rctx *c, struct rbk *b, struct listvec *lv, int max_pages)
{
	uint64_t from = 0;

	for (int page = 0; page < max_pages; page++) {
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		const Tailwind__ListSegmentsReply *r;
		bool more;
		int rc;

		tw__rpc_req_list_segments(&req, c->cfg->log_id, false, from);
		rc = tw__rpc_call_sync(b->peer.rpc, &req.env, &rep);
		if (rc) {
			snprintf(b->peer.why, sizeof(b->peer.why), "list failed: %s (%s)", tw_strerror(rc),
				 tw__rpc_client_errmsg(b->peer.rpc));
			tw__rpc_reply_release(&rep);
			return rc;
		}
		r = rep.env->list_segments_reply;
		if (r && page == 0) {
			if (r->log_epoch > b->max_epoch)
				b->max_epoch = r->log_epoch;
			b->free_below = r->free_below;
		}
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
			cp.seed = in->chain_seed;
			cp.corrupt = in->corrupt;
			cp.lost = in->state == TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST;
			if (cp.epoch > b->max_epoch)
				b->max_epoch = cp.epoch;
			if (lv_push(lv, in->segment_id, &cp)) {
				tw__rpc_reply_release(&rep);
				return -ENOMEM;
			}
		}
		more = r && r->more && r->next_log_id == c->cfg->log_id;
		if (more)
			from = r->next_segment_id;
		tw__rpc_reply_release(&rep);
		if (!more || page + 1 == max_pages)
			return 0;
	}
	return -TW_EMALFORMED;
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
	case TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST: return "lost";
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

/* Names of the backups that did not answer, for error messages ("" when all did). */
static void down_list(struct rctx *c, char *out, size_t len)
{
	size_t k = 0;

	out[0] = '\0';
	for (unsigned i = 0; i < c->nbk && k + 1 < len; i++) {
		if (c->bks[i].peer.up && !c->bks[i].peer.lost)
			continue;
		k += (size_t)snprintf(out + k, len - k, "%s%s (%s)", k ? ", " : "; unreachable: ",
				      c->bks[i].peer.addr, c->bks[i].peer.why);
	}
}

/* Every segment from the first listed one to the last must have a usable copy: a segment whose
 * copies are all LOST is loss, a segment nobody lists is a hole. Either fails the recovery
 * before anything is delivered (never a shorter log reported as success). */
static int check_complete(struct rctx *c, size_t nseg)
{
	char down[512];

	down_list(c, down, sizeof(down));
	for (size_t si = 0; si < nseg; si++) {
		const struct rseg *s = &c->segs[si];
		char where[512];
		size_t k = 0;
		unsigned lost = 0;

		if (si > 0 && s->id != c->segs[si - 1].id + 1) {
			c->res->segments_missing = nseg - si;
			tw__rc_seterr(c, "log %016" PRIx64 ": segments %" PRIu64 "..%" PRIu64 " are "
				  "missing: no reachable backup holds a copy (the log continues at "
				  "segment %" PRIu64 ")%s", c->cfg->log_id, c->segs[si - 1].id + 1,
				  s->id - 1, s->id, down);
			return -TW_ENOBACKUP;
		}
		if (s->usable > 0)
			continue;
		where[0] = '\0';
		for (unsigned k2 = 0; k2 < s->ncopies && k + 1 < sizeof(where); k2++) {
			const struct rcopy *cp = &s->copies[k2];

			lost += cp->lost;
			k += (size_t)snprintf(where + k, sizeof(where) - k, "%s%s: %s", k ? ", " : "",
					      c->bks[cp->bk].peer.addr,
					      cp->lost ? "lost" : cp->corrupt ? "corrupt" : "stale");
		}
		c->res->segments_missing = nseg - si;
		if (lost == s->ncopies) {
			c->res->segments_lost = 1;
			for (size_t sj = si + 1; sj < nseg; sj++)
				if (c->segs[sj].usable == 0)
					c->res->segments_lost++;
			tw__rc_seterr(c, "log %016" PRIx64 ": segment %" PRIu64 " is lost: every copy is "
				  "gone (%s; each of these backups stopped before flushing it)%s; %"
				  PRIu64 " segment(s) without a usable copy in all. Nothing was "
				  "delivered. To keep the log anyway, free it below the loss (twctl "
				  "free) and take it over", c->cfg->log_id, s->id, where, down,
				  c->res->segments_lost);
			return -TW_ELOST;
		}
		tw__rc_seterr(c, "log %016" PRIx64 ": segment %" PRIu64 " has no usable copy (%s)%s; "
			  "nothing was delivered", c->cfg->log_id, s->id, where, down);
		return -TW_ENOBACKUP;
	}
	return 0;
}

/* Group the listings into segments and order each segment's copies. */
/* The copies of one segment (v[0..n), all listing it): lost and corrupt ones skipped (said),
 * the highest replica version kept, the usable copies first in s->copies in the order to try
 * them, the others after them for the record. 0 or -ENOMEM. */
static int choose_copies(struct rctx *c, struct rseg *s, const struct listed *v, size_t n)
{
	uint64_t maxver = 0;
	unsigned keep = 0;

	s->id = v[0].seg;
	s->copies = calloc(n, sizeof(*s->copies));
	if (!s->copies)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++) {
		const struct rcopy *cp = &v[k].cp;

		if (cp->lost) {
			tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": the copy "
				    "on backup %s is lost (opened there, gone after a restart); "
				    "skipping it", c->cfg->log_id, s->id, c->bks[cp->bk].peer.addr);
			c->res->copies_lost++;
			continue;
		}
		if (is_open(cp))
			s->any_open = true;
		if (cp->corrupt) {
			tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": the %s copy "
				    "on backup %s is corrupt; skipping it", c->cfg->log_id, s->id,
				    state_str(cp->state), c->bks[cp->bk].peer.addr);
			c->res->copies_corrupt++;
			continue;
		}
		if (cp->version > maxver)
			maxver = cp->version;
	}
	/* Usable copies first (not corrupt or lost, highest version), the rest kept for
	 * record and messages. */
	for (size_t k = 0; k < n; k++) {
		const struct rcopy *cp = &v[k].cp;

		if (!cp->corrupt && !cp->lost && cp->version == maxver)
			s->copies[keep++] = *cp;
	}
	s->usable = keep;
	for (size_t k = 0; k < n; k++) {
		const struct rcopy *cp = &v[k].cp;

		if (cp->corrupt || cp->lost || cp->version != maxver) {
			if (!cp->corrupt && !cp->lost) {
				tw_log_warn("recover: log %016" PRIx64 " segment %" PRIu64 ": copy "
					    "on backup %s has replica version %" PRIu64 " < %"
					    PRIu64 "; ignoring it", c->cfg->log_id, s->id,
					    c->bks[cp->bk].peer.addr, cp->version, maxver);
				c->res->copies_stale++;
			}
			s->copies[s->ncopies + keep] = *cp;
			s->ncopies++;
		}
	}
	s->ncopies += keep;
	if (s->usable > 1) {
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
				    c->bks[a->bk].peer.addr, a->valid_len, c->bks[b->bk].peer.addr,
				    b->valid_len);
	}
	return 0;
}

static int choose(struct rctx *c, struct listvec *lv)
{
	size_t i = 0, nseg = 0;

	c->free_below = 0;
	for (unsigned k = 0; k < c->nbk; k++)
		if (c->bks[k].peer.up && c->bks[k].free_below > c->free_below)
			c->free_below = c->bks[k].free_below;
	/* Copies below the first live segment were freed (log cleaning); a backup that missed the
	 * free still lists them: drop them. */
	for (size_t k = 0; k < lv->n;) {
		if (lv->v[k].seg < c->free_below)
			lv->v[k] = lv->v[--lv->n];
		else
			k++;
	}
	if (lv->n > 0)
		qsort(lv->v, lv->n, sizeof(*lv->v), cmp_listed);
	c->res->copies_listed = lv->n;
	c->res->free_below = c->free_below;
	c->next_segment = c->free_below;
	if (lv->n > 0 && lv->v[lv->n - 1].seg + 1 > c->next_segment)
		c->next_segment = lv->v[lv->n - 1].seg + 1;
	/* cfg.from_lsn: the segments below its segment are not wanted (after next_segment, which
	 * counts every segment held). */
	if (c->cfg->from_lsn >> 32) {
		size_t keep = 0;

		for (size_t k = 0; k < lv->n; k++)
			if (lv->v[k].seg >= c->cfg->from_lsn >> 32)
				lv->v[keep++] = lv->v[k];
		lv->n = keep;
	}
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

		while (j < lv->n && lv->v[j].seg == lv->v[i].seg)
			j++;
		if (choose_copies(c, s, &lv->v[i], j - i) < 0)
			return -ENOMEM;
		i = j;
	}
	c->nsegs = nseg;
	return check_complete(c, nseg);
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
		rc = list_one(c, b, &lv, 1 << 20);
		if (rc == -ENOMEM)
			goto out;
		if (rc == -TW_EFENCED && !c->cfg->no_fence) {
			tw__rc_seterr(c, "log %016" PRIx64 " was taken over right after this recovery's "
				  "fence (backup %s: %s)", c->cfg->log_id, b->peer.addr,
				  tw__rpc_client_errmsg(b->peer.rpc));
			goto out;
		}
		if (rc) {
			tw_log_warn("recover: backup %s: %s; going on without it", b->peer.addr, b->peer.why);
			b->peer.up = false;
			continue;
		}
		answered++;
	}
	if (answered == 0) {
		tw__rc_seterr(c, "no backup answered the listing");
		rc = -TW_ENOBACKUP;
		goto out;
	}
	rc = choose(c, &lv);
out:
	free(lv.v);
	return rc;
}

/* ------------------------------------------------------------------ fence */

/*
 * Fence the log with a new epoch as this recovery's incarnation (docs/recovery.md, "Ownership").
 * Automatic epoch: one past the highest the backups report (their log epoch and the epochs of
 * their copies: one listing page each). That probe is not reused as the list phase's listing:
 * it was taken before the fence, while the old owner could still open or close segments; only
 * a listing after the fence describes the frozen log. The fences go out one backup at a time, in the
 * configured order, and the first refusal ends the recovery: two recoveries or takeovers that
 * chose the same epoch meet at the first backup they both reach, and only one gets past it; a
 * later one with a higher epoch overtakes legitimately (the earlier then fails at its next
 * request). There is no retry with a higher epoch: a refusal means another owner is at work.
 */
/*
 * A refusal with an older epoch than ours is a hold: the previous fencer's connection to this
 * backup is still open and active. Once we have fenced an earlier backup, that previous owner is
 * already cut off there and stops at its next request, so its hold lapses: wait for it (at most
 * the hold time and one RPC timeout) instead of leaving the log fenced half-way with no owner.
 * A refusal at our own epoch or above is another owner that got ahead: lose at once.
 */
static int fence_held(struct rctx *c, struct rbk *b, uint64_t epoch, uint64_t *got,
		      uint64_t *owner)
{
	uint64_t rpc_ms = c->cfg->rpc_timeout_ms ? c->cfg->rpc_timeout_ms :
			 TW_DEFAULT_RECOVER_RPC_TIMEOUT_MS;
	uint64_t wait_ms = (uint64_t)TW_FENCE_HOLD_MS + rpc_ms;
	uint64_t end = tw_now_ns() + wait_ms * 1000000u;
	int rc = -TW_EFENCED;

	tw_log_info("recover: log %016" PRIx64 ": backup %s is held by incarnation %016" PRIx64
		    " at epoch %" PRIu64 "; waiting for it to stop (this fence already cut it off "
		    "elsewhere)", c->cfg->log_id, b->peer.addr, *owner, *got);
	while (rc == -TW_EFENCED && *got < epoch && tw_now_ns() < end) {
		tw__rc_progress(c, 100);
		rc = tw__rpc_fence(b->peer.rpc, c->cfg->log_id, epoch, got, owner);
	}
	return rc;
}

static int fence_all(struct rctx *c)
{
	uint64_t epoch = c->cfg->epoch;
	unsigned fenced = 0;
	int rc;

	if (epoch == 0) {
		const struct rbk *top = NULL;

		for (unsigned i = 0; i < c->nbk; i++) {
			struct rbk *b = &c->bks[i];
			struct listvec lv = { 0 };

			if (!bk_ok(b))
				continue;
			rc = list_one(c, b, &lv, 1);
			free(lv.v);
			if (rc == -ENOMEM)
				return rc;
			if (rc) {
				tw_log_warn("recover: backup %s: %s; going on without it", b->peer.addr,
					    b->peer.why);
				b->peer.up = false;
				continue;
			}
			if (!top || b->max_epoch > top->max_epoch)
				top = b;
		}
		if (!top) {
			tw__rc_seterr(c, "no backup answered the epoch probe of log %016" PRIx64,
				  c->cfg->log_id);
			return -TW_ENOBACKUP;
		}
		if (top->max_epoch >= TW_EPOCH_MAX) {
			tw__rc_seterr(c, "log %016" PRIx64 " is at epoch %" PRIu64 " on backup %s: no "
				  "epoch is left for a takeover (maximum %" PRIu64 ")", c->cfg->log_id,
				  top->max_epoch, top->peer.addr, (uint64_t)TW_EPOCH_MAX);
			return -ERANGE;
		}
		epoch = top->max_epoch + 1;
	}
	c->res->epoch = epoch;
	for (unsigned i = 0; i < c->nbk; i++) {
		struct rbk *b = &c->bks[i];
		uint64_t got = 0, owner = 0;

		b->fenced = false;
		if (!bk_ok(b))
			continue;
		rc = tw__rpc_fence(b->peer.rpc, c->cfg->log_id, epoch, &got, &owner);
		if (rc == -TW_EFENCED && fenced > 0 && got < epoch)
			rc = fence_held(c, b, epoch, &got, &owner);
		if (rc == 0) {
			b->fenced = true;
			fenced++;
		} else if (rc == -TW_EFENCED) {
			tw__rc_seterr(c, "log %016" PRIx64 " is held by another owner: backup %s is at "
				  "epoch %" PRIu64 ", owned by incarnation %016" PRIx64 " (this one: "
				  "epoch %" PRIu64 ", incarnation %016" PRIx64 "); another takeover or "
				  "recovery won", c->cfg->log_id, b->peer.addr, got, owner, epoch,
				  c->incarnation);
			return -TW_EFENCED;
		} else if (rc == -EINVAL) {
			tw__rc_seterr(c, "backup %s refused the fence of log %016" PRIx64 " at epoch %"
				  PRIu64 ": %s", b->peer.addr, c->cfg->log_id, epoch,
				  tw__rpc_client_errmsg(b->peer.rpc));
			return rc;
		} else {
			snprintf(b->peer.why, sizeof(b->peer.why), "fence failed: %s (%s)", tw_strerror(rc),
				 tw__rpc_client_errmsg(b->peer.rpc));
			tw_log_warn("recover: backup %s: %s; going on without it", b->peer.addr, b->peer.why);
			b->peer.up = false;
		}
	}
	c->epoch = epoch;
	c->res->backups_fenced = fenced;
	if (fenced == 0) {
		tw__rc_seterr(c, "no backup accepted the fence of log %016" PRIx64, c->cfg->log_id);
		return -TW_ENOBACKUP;
	}
	return 0;
}

/* ------------------------------------------------------------------ record */

/* Send a shorter copy the bytes it lacks, [have, s->len), in pieces that fit a message; the
 * last piece closes it at the recovered length (backup/backup_recovery.c). */
static int record_repair(struct rctx *c, struct rbk *b, const struct rseg *s, uint64_t have,
			 const struct tw_rpc_seg_meta *m)
{
	/* Half the default message size: room for the envelope around the bytes, and within the
	 * limit of any backup that keeps the default. */
	const size_t piece = TW_RPC_MAX_MSG_DEFAULT / 2;
	uint64_t from = have;
	int rc;

	do {
		size_t n = s->len - from < piece ? (size_t)(s->len - from) : piece;

		rc = tw__rpc_recovered_repair(b->peer.rpc, c->epoch, m, s->version, from,
					      s->tail + (from - s->tail_from), n);
		from += n;
	} while (rc == 0 && from < s->len);
	if (rc == 0) {
		c->res->copies_repaired++;
		tw_log_info("recover: backup %s: segment %" PRIu64 " completed from %" PRIu64 " to %"
			    PRIu64 " bytes", b->peer.addr, s->id, have, s->len);
	}
	return rc;
}

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
			/* A usable copy that is shorter gets the bytes it lacks (the tail kept covers
			 * every usable open copy; an older-version one is only closed). */
			if (s->tail && k < s->usable && s->copies[k].valid_len < s->len &&
			    s->copies[k].valid_len >= s->tail_from)
				rc = record_repair(c, b, s, s->copies[k].valid_len, &m);
			else
				rc = tw__rpc_recovered_offset(b->peer.rpc, c->epoch, &m, s->version);
			if (rc == 0) {
				c->res->offsets_recorded++;
				continue;
			}
			tw_log_warn("recover: backup %s: recording segment %" PRIu64 " at %" PRIu64
				    " bytes: %s (%s)", b->peer.addr, s->id, s->len, tw_strerror(rc),
				    tw__rpc_client_errmsg(b->peer.rpc));
		}
	}
}

/* ------------------------------------------------------------------ API */

static void free_segs(struct rctx *c)
{
	for (size_t i = 0; c->segs && i < c->nsegs_all; i++) {
		free(c->segs[i].copies);
		free(c->segs[i].tail);
	}
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
	rc = tw__rc_fetch_all(c);
	res->phase_ns[TW_RECOVER_PHASE_FETCH] = tw_now_ns() - t;
	if (rc)
		return rc;
	if (!c->cfg->no_record && !c->cfg->no_fence) {
		t = tw_now_ns();
		record_all(c);
		res->phase_ns[TW_RECOVER_PHASE_RECORD] = tw_now_ns() - t;
	}
	return 0;
}

uint64_t tw__new_incarnation(void)
{
	uint64_t v = 0;

	while (v == 0) {
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = tw_now_ns() ^ ((uint64_t)getpid() << 32);
		v &= TW_RPC_ID_MAX;
	}
	return v;
}

/* A zeroed context over `cfg`, reporting into `res` (zeroed) and `errmsg` (emptied). */
static void ctx_init(struct rctx *c, const struct tw_recover_config *cfg,
		     struct tw_recover_result *res, char *errmsg, size_t errlen)
{
	memset(res, 0, sizeof(*res));
	memset(c, 0, sizeof(*c));
	if (errmsg && errlen)
		errmsg[0] = '\0';
	c->cfg = cfg;
	c->res = res;
	c->errmsg = errmsg;
	c->errlen = errlen;
}

int tw__recover_as(const struct tw_recover_config *cfg, uint64_t incarnation,
		   struct tw_peer_skip *skip, unsigned replicas, tw_recover_entry_fn cb, void *arg,
		   struct tw_recover_result *res_out, uint64_t *next_segment_out,
		   char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result local, *res = res_out ? res_out : &local;
	struct rctx c;
	uint64_t t0 = tw_now_ns();
	int rc;

	ctx_init(&c, cfg, res, errmsg_out, errmsg_len);
	if (next_segment_out)
		*next_segment_out = 0;
	if (!cfg)
		return -EINVAL;
	c.cb = cb;
	c.cb_arg = arg;
	c.skip = skip;
	c.replicas = replicas;
	c.incarnation = incarnation ? incarnation : tw__new_incarnation();
	res->incarnation = c.incarnation;
	rc = run(&c, false);
	if (rc == 0 && next_segment_out)
		*next_segment_out = c.next_segment;
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

int tw_recover(const struct tw_recover_config *cfg, tw_recover_entry_fn cb, void *arg,
	       struct tw_recover_result *res_out, char *errmsg_out, size_t errmsg_len)
{
	return tw__recover_as(cfg, 0, NULL, 0, cb, arg, res_out, NULL, errmsg_out, errmsg_len);
}

int tw_admin_fence(const struct tw_recover_config *cfg, uint64_t *epoch_out,
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
	c.incarnation = tw__new_incarnation();
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

/* ------------------------------------------------------------------ cleaning */

/* Free (below) or delete the log on every reachable backup. delete: fence first (a delete takes
 * the log from its owner); free: at the highest epoch the backups report (no fence: cleaning a
 * closed prefix of a live log is allowed). */
static int clean(const struct tw_recover_config *cfg, bool delete_log, uint64_t below,
		 uint64_t *freed_out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_recover_result res;
	struct rctx c;
	uint64_t freed = 0, epoch = 0;
	unsigned ok = 0;
	int rc, first = 0;

	ctx_init(&c, cfg, &res, errmsg_out, errmsg_len);
	if (freed_out)
		*freed_out = 0;
	if (!cfg)
		return -EINVAL;
	c.incarnation = tw__new_incarnation();
	rc = check_cfg(&c);
	if (rc == 0)
		rc = connect_all(&c);
	if (rc == 0 && delete_log) {
		rc = fence_all(&c);
		epoch = c.epoch;
	} else if (rc == 0) {
		for (unsigned i = 0; i < c.nbk; i++) {
			struct listvec lv = { 0 };

			if (!bk_ok(&c.bks[i]))
				continue;
			if (list_one(&c, &c.bks[i], &lv, 1) == 0 && c.bks[i].max_epoch > epoch)
				epoch = c.bks[i].max_epoch;
			free(lv.v);
		}
	}
	for (unsigned i = 0; rc == 0 && i < c.nbk; i++) {
		struct rbk *b = &c.bks[i];
		uint64_t n = 0;
		int r;

		if (!bk_ok(b) || (delete_log && !b->fenced))
			continue;
		r = tw__rpc_free_segments(b->peer.rpc, epoch, cfg->log_id, below, delete_log, &n);
		if (r == 0) {
			freed += n;
			ok++;
			continue;
		}
		tw_log_warn("recover: backup %s: %s log %016" PRIx64 ": %s (%s)", b->peer.addr,
			    delete_log ? "delete" : "free", cfg->log_id, tw_strerror(r),
			    tw__rpc_client_errmsg(b->peer.rpc));
		if (!first) {
			first = r;
			tw__rc_seterr(&c, "backup %s refused to %s log %016" PRIx64 ": %s", b->peer.addr,
				  delete_log ? "delete" : "free", cfg->log_id,
				  tw__rpc_client_errmsg(b->peer.rpc));
		}
	}
	disconnect_all(&c);
	if (rc == 0 && first)
		rc = first;
	if (rc == 0 && ok == 0) {
		tw__rc_seterr(&c, "no backup answered");
		rc = -TW_ENOBACKUP;
	}
	if (freed_out)
		*freed_out = freed;
	if (rc && errmsg_out && errmsg_len && !errmsg_out[0])
		snprintf(errmsg_out, errmsg_len, "%s", tw_strerror(rc));
	return rc;
}

int tw_admin_trim(const struct tw_recover_config *cfg, uint32_t below_segment, uint64_t *freed_out,
		char *errmsg_out, size_t errmsg_len)
{
	return clean(cfg, false, below_segment, freed_out, errmsg_out, errmsg_len);
}

int tw_admin_delete(const struct tw_recover_config *cfg, uint64_t *freed_out, char *errmsg_out,
		  size_t errmsg_len)
{
	return clean(cfg, true, 0, freed_out, errmsg_out, errmsg_len);
}
