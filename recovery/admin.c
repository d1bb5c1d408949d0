/*
 * recovery/admin.c — tailwind/admin.h: an operator's session with running backups (listings,
 * statistics) and the key-file check every program makes at start. Blocking: each call drives
 * the session's own fabric through the RPC client's synchronous call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/admin.h>

#include "core/util.h"
#include "fabric/fabric.h"
#include "peer/peer.h"
#include "proto/auth.h"
#include "proto/rpc.h"

struct admin_bk {
	struct tw_peer peer;
	char errmsg[512];
};

struct tw_admin {
	struct tw_fab *fab;
	struct tw_auth_key *key;
	unsigned n;
	struct admin_bk *bk;
	/* The last answer handed out (borrowed by the caller until the next call). */
	struct tw_admin_log log;
	char unavailable[512];
	struct tw_admin_stats stats;
	char detail[2048];
	struct tw_admin_handler handlers[64];
};

static const struct tw_admin_config admin_defaults = {
	.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS,
	.rpc_timeout_ms = TW_DEFAULT_RPC_TIMEOUT_MS,
};

void tw_admin_config_init_sized(struct tw_admin_config *cfg, size_t size)
{
	if (!cfg)
		return;
	if (size > sizeof(*cfg))
		size = sizeof(*cfg); /* a newer caller: its extra fields stay as they are */
	memcpy(cfg, &admin_defaults, size);
	cfg->size = (uint32_t)size;
}

int tw_key_file_check(const char *key_file, const char **path_out, char *why_out, size_t why_len)
{
	const char *path = tw__auth_key_path(key_file);
	struct tw_auth_key *key = NULL;
	char why[512];
	int rc;

	if (path_out)
		*path_out = path;
	if (why_out && why_len)
		why_out[0] = '\0';
	if (!path)
		return 0;
	rc = tw__auth_key_load(path, &key, why, sizeof(why));
	if (rc) {
		if (why_out && why_len)
			snprintf(why_out, why_len, "%s%s", why, key_file ? "" :
				 " (from $TW_KEY_FILE)");
		return rc < 0 ? rc : -EINVAL;
	}
	tw__auth_key_free(key);
	return 0;
}

/* A copy of the caller's config, defaults where its size ends (the ABI rule). */
static int read_config(const struct tw_admin_config *in, struct tw_admin_config *cfg,
		       char *err, size_t len)
{
	if (!in || in->size == 0) {
		snprintf(err, len, "admin config not initialised (tw_admin_config_init)");
		return -EINVAL;
	}
	*cfg = admin_defaults;
	memcpy(cfg, in, in->size < sizeof(*cfg) ? in->size : sizeof(*cfg));
	if (in->size > sizeof(*cfg)) {
		for (size_t k = sizeof(*cfg); k < in->size; k++)
			if (((const unsigned char *)in)[k]) {
				snprintf(err, len, "admin config from a newer libtailwind header "
					 "sets fields this library does not know: upgrade the library");
				return -ENOTSUP;
			}
	}
	if (!cfg->backups || cfg->n_backups == 0 || cfg->n_backups > TW_ADMIN_MAX_BACKUPS) {
		snprintf(err, len, "admin config: %u backups given (1..%u)", cfg->n_backups,
			 TW_ADMIN_MAX_BACKUPS);
		return -EINVAL;
	}
	if (!cfg->connect_timeout_ms)
		cfg->connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS;
	if (!cfg->rpc_timeout_ms)
		cfg->rpc_timeout_ms = TW_DEFAULT_RPC_TIMEOUT_MS;
	return 0;
}

/* Open the fabric and the key; NULL errors are said in err. */
static int open_fab(struct tw_admin *a, const struct tw_admin_config *cfg, char *err, size_t len)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	const char *path = tw__auth_key_path(cfg->key_file);
	int rc;

	if (path && (rc = tw__auth_key_load(path, &a->key, err, len)) != 0)
		return rc < 0 ? rc : -EINVAL;
	tw__fab_config_init(&fc);
	fc.provider = cfg->provider;
	fc.connect_timeout_ms = cfg->connect_timeout_ms;
	memset(&ev, 0, sizeof(ev));
	ev.on_recv = tw__peer_fab_on_recv;
	ev.on_lost = tw__peer_fab_on_lost;
	rc = tw__fab_open(&fc, &ev, &a->fab);
	if (rc)
		snprintf(err, len, "cannot open the fabric (%s): %s",
			 cfg->provider ? cfg->provider : "default provider",
			 rc == -TW_ENOPROV ? tw__fab_errmsg(NULL) : tw_strerror(rc));
	return rc;
}

int tw_admin_open(const struct tw_admin_config *cfg_in, struct tw_admin **out, char *err,
		  size_t len)
{
	struct tw_admin_config cfg;
	struct tw_peer_opts po;
	struct tw_admin *a;
	char dummy[8];
	int rc;

	if (!err || !len) {
		err = dummy;
		len = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	rc = read_config(cfg_in, &cfg, err, len);
	if (rc)
		return rc;
	a = calloc(1, sizeof(*a));
	if (a)
		a->bk = calloc(cfg.n_backups, sizeof(*a->bk));
	if (!a || !a->bk) {
		free(a);
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	a->n = cfg.n_backups;
	rc = open_fab(a, &cfg, err, len);
	if (rc) {
		tw_admin_close(a);
		return rc;
	}
	tw__peer_opts_init(&po, TAILWIND__ROLE__ROLE_ADMIN);
	po.key = a->key;
	po.node_name = cfg.node_name ? cfg.node_name : "admin";
	po.rpc.timeout_ms = cfg.rpc_timeout_ms;
	po.connect_timeout_ms = cfg.connect_timeout_ms;
	po.timeout_hint = cfg.timeout_hint;
	for (unsigned i = 0; i < a->n; i++) {
		tw__peer_init(&a->bk[i].peer, cfg.backups[i], NULL);
		(void)tw__peer_connect(&a->bk[i].peer, a->fab, &po); /* peer.why says why not */
	}
	*out = a;
	return 0;
}

const char *tw_admin_backup_addr(const struct tw_admin *a, unsigned i)
{
	return a && i < a->n ? a->bk[i].peer.addr : NULL;
}

const char *tw_admin_backup_error(const struct tw_admin *a, unsigned i)
{
	if (!a || i >= a->n)
		return "no such backup";
	if (a->bk[i].peer.rpc && !a->bk[i].peer.lost)
		return NULL;
	return a->bk[i].peer.why[0] ? a->bk[i].peer.why : "not connected";
}

unsigned tw_admin_reachable(const struct tw_admin *a)
{
	unsigned up = 0;

	for (unsigned i = 0; a && i < a->n; i++)
		up += tw_admin_backup_error(a, i) == NULL;
	return up;
}

const char *tw_admin_errmsg(const struct tw_admin *a, unsigned i)
{
	return a && i < a->n ? a->bk[i].errmsg : "";
}

int tw_admin_close(struct tw_admin *a)
{
	if (!a)
		return 0;
	for (unsigned i = 0; a->bk && i < a->n; i++)
		tw__peer_close(&a->bk[i].peer);
	if (a->fab)
		tw__fab_close(a->fab);
	tw__auth_key_free(a->key);
	free(a->bk);
	free(a);
	return 0;
}

const char *tw_segment_state_name(enum tw_segment_state st)
{
	switch (st) {
	case TW_SEGMENT_OPEN: return "open";
	case TW_SEGMENT_CLOSED: return "closed";
	case TW_SEGMENT_FLUSHED: return "flushed";
	case TW_SEGMENT_LOST: return "LOST";
	default: return "unknown";
	}
}

/* One request to backup i, synchronously; on failure its message in bk->errmsg and the reply
 * already released (on success the caller releases it). */
static int call(struct tw_admin *a, unsigned i, const char *what, struct tw_rpc_req *req,
		struct tw_rpc_reply *rep)
{
	struct admin_bk *b;
	int rc;

	if (!a || i >= a->n)
		return -EINVAL;
	b = &a->bk[i];
	b->errmsg[0] = '\0';
	if (tw_admin_backup_error(a, i)) {
		snprintf(b->errmsg, sizeof(b->errmsg), "%s", tw_admin_backup_error(a, i));
		return -ENOTCONN;
	}
	rc = tw__rpc_call_sync(b->peer.rpc, &req->env, rep);
	if (rc) {
		snprintf(b->errmsg, sizeof(b->errmsg), "%s failed: %s (%s)", what, tw_strerror(rc),
			 tw__rpc_client_errmsg(b->peer.rpc));
		tw__rpc_reply_release(rep);
	}
	return rc;
}

static void to_segment(const Tailwind__SegmentInfo *in, struct tw_admin_segment *s)
{
	*s = (struct tw_admin_segment){
		.log_id = in->log_id, .segment_id = in->segment_id,
		.state = in->state >= 1 && in->state <= 4 ? (enum tw_segment_state)in->state :
			 TW_SEGMENT_UNKNOWN,
		.valid_len = in->valid_len, .checksum = in->checksum,
		.replica_version = in->replica_version, .epoch = in->epoch,
		.corrupt = in->corrupt, .entries = in->entries, .length = in->length,
		.chain_seed = in->chain_seed,
	};
}

int tw_admin_list(struct tw_admin *a, unsigned i, uint64_t log_id, int all_logs,
		  tw_admin_segment_fn fn, void *arg, const struct tw_admin_log **log_out)
{
	uint64_t from_log = log_id, from_seg = 0;
	bool first = true;

	if (log_out)
		*log_out = NULL;
	for (;;) {
		struct tw_rpc_req req;
		struct tw_rpc_reply rep;
		const Tailwind__ListSegmentsReply *r;
		bool more;
		int rc;

		tw__rpc_req_list_segments(&req, from_log, all_logs != 0, from_seg);
		rc = call(a, i, "list", &req, &rep);
		if (rc)
			return rc;
		r = rep.env->list_segments_reply;
		if (first && !all_logs) {
			snprintf(a->unavailable, sizeof(a->unavailable), "%s",
				 r->log_unavailable ? r->log_unavailable : "");
			a->log = (struct tw_admin_log){
				.known = r->log_known || r->log_epoch || r->n_segments,
				.epoch = r->log_epoch, .owner = r->log_owner,
				.free_below = r->free_below,
				.unavailable = a->unavailable[0] ? a->unavailable : NULL,
			};
			if (log_out)
				*log_out = &a->log;
		}
		first = false;
		for (size_t k = 0; fn && k < r->n_segments; k++) {
			struct tw_admin_segment s;

			to_segment(r->segments[k], &s);
			fn(arg, i, &s);
		}
		more = r->more && (all_logs || r->next_log_id == log_id);
		from_log = r->next_log_id;
		from_seg = r->next_segment_id;
		tw__rpc_reply_release(&rep);
		if (!more)
			return 0;
	}
}

int tw_admin_stats(struct tw_admin *a, unsigned i, const struct tw_admin_stats **out)
{
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	const Tailwind__StatsReply *r;
	struct tw_admin_stats *st;
	size_t nh = 0;
	int rc;

	if (out)
		*out = NULL;
	tw__rpc_req_stats(&req);
	rc = call(a, i, "stats", &req, &rep);
	if (rc)
		return rc;
	r = rep.env->stats_reply;
	st = &a->stats;
	snprintf(a->detail, sizeof(a->detail), "%s", r->message ? r->message : "");
	for (size_t k = 0; k < r->n_handlers && nh < TW_ARRAY_SIZE(a->handlers); k++) {
		int op = tw__rpc_op_of_case((int)r->handlers[k]->kind);

		a->handlers[nh++] = (struct tw_admin_handler){
			.kind = op >= 0 ? tw__rpc_op_name(op) : "other",
			.calls = r->handlers[k]->calls, .errors = r->handlers[k]->errors,
		};
	}
	*st = (struct tw_admin_stats){
		.buffers_total = r->buffers_total,
		.buffers_max = r->buffers_max > r->buffers_total ? r->buffers_max :
			       r->buffers_total,
		.buffers_free = r->buffers_free, .buffers_open = r->buffers_open,
		.buffers_closed = r->buffers_closed, .buffers_flushed = r->buffers_flushed,
		.flushes = r->flushes, .bytes_flushed = r->bytes_flushed,
		.rpc_msgs_rx = r->rpc_msgs_rx, .rpc_msgs_tx = r->rpc_msgs_tx,
		.rpc_bytes_rx = r->rpc_bytes_rx, .rpc_bytes_tx = r->rpc_bytes_tx,
		.rpc_malformed = r->rpc_malformed, .cpu_seconds = r->cpu_seconds,
		.uptime_ms = r->uptime_ms, .detail = a->detail, .n_handlers = nh,
		.handlers = a->handlers,
	};
	tw__rpc_reply_release(&rep);
	if (out)
		*out = st;
	return 0;
}
