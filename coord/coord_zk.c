/*
 * coord/coord_zk.c — the ZooKeeper backend (docs/coordination.md), on the threaded C client
 * (libzookeeper_mt, synchronous calls).
 *
 * Znodes, under the URL's chroot (default /tailwind):
 *   backups/b-<hash>     ephemeral: one per live twd (tw__coord_backup_encode)
 *   logs/<id>/epoch      persistent: the log's last allocated epoch (decimal)
 *   logs/<id>/owner      ephemeral: the owner's epoch and description
 *   logs/<id>/backups/b-<hash>   persistent: a backup asked to hold a segment of the log
 *
 * Locks: op_mu serialises the calls that use the handle and the keeper's swap of it after a
 * session expiry; st_mu guards the session state the watcher updates. The watcher runs on the
 * client's completion thread, which also completes our synchronous calls: it takes only st_mu,
 * and nothing holds st_mu across a ZooKeeper call.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "coord/coord.h"
#include "core/util.h"

#define MAX_OWNED 16
#define MAX_NOTED 256 /* (log, backup) records this handle knows it made */
#define PATH_MAX_ZK 1024

/* A watch of ours (zoo_wget_children, zoo_wget) and the context of its watcher (watch_fired):
 * how often it fired and when it last saw its node deleted (st_mu of z). */
struct zk_watch {
	struct zk *z;
	uint64_t events;
	uint64_t gone_ns;
};

struct zk {
	struct tw_coord *c;
	zhandle_t *zh;
	unsigned timeout_ms;
	pthread_mutex_t op_mu;
	pthread_mutex_t st_mu;
	pthread_cond_t st_cv;
	int state;     /* ZOO_*_STATE of the current handle (st_mu) */
	bool expired;  /* the current handle's session expired: the keeper replaces it (st_mu) */
	bool stopping; /* (st_mu) */
	unsigned generation; /* handles made so far (st_mu) */
	pthread_t keeper;
	bool keeper_started;
	/* Our registration (op_mu). */
	bool registered;
	struct tw_coord_backup me;
	char reg_path[PATH_MAX_ZK];
	/* Logs we own (op_mu); lost[] after a session expiry. */
	uint64_t owned[MAX_OWNED];
	bool owned_lost[MAX_OWNED];
	size_t n_owned;
	/* Standby: the node watches (st_mu). */
	struct zk_watch node_watch;
	/* The child watch on backups/ (st_mu): its events, and their count and the session
	 * generation when it was last armed. */
	struct zk_watch reg_watch;
	bool reg_armed;
	uint64_t reg_seen;
	unsigned reg_gen;
	/* Backups recorded per log by this handle (op_mu); a ring: a forgotten one is only
	 * created again (ZNODEEXISTS). */
	struct {
		uint64_t log;
		char name[TW_COORD_NAME_MAX];
	} noted[MAX_NOTED];
	size_t n_noted;
};

/*
 * The ZooKeeper C client's log goes through ours: each handle is made with zookeeper_init2 and
 * this callback (zookeeper.h: a per-connection callback takes priority over the library's log
 * stream; it is called from the client's threads). A message reads
 *   "2026-11-25 18:31:12,066:19191(0x7f2b321fe6c0):ZOO_ERROR@check_events@2985: Socket ..."
 * The client says ZOO_ERROR for every refused connect while it retries (about fifteen a second
 * with nothing listening: some sixty lines before our own message), and the coordination layer
 * reports what matters itself ("no server answering within N s", session expiry). So its errors
 * and warnings are our info, its info our debug, without its date and thread, and at most one a
 * second per level (the count of the others comes with the next).
 */
static void zk_log(const char *msg)
{
	const char *p = strstr(msg, ":ZOO_");
	char buf[512];
	size_t n;
	bool loud = false;

	if (p) {
		loud = !strncmp(p, ":ZOO_ERROR@", 11) || !strncmp(p, ":ZOO_WARN@", 10);
		p = strchr(p + 1, '@'); /* function@line: message */
		msg = p ? p + 1 : msg;
	}
	n = (size_t)snprintf(buf, sizeof(buf), "%s", msg);
	while (n > 0 && n <= sizeof(buf) - 1 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	if (loud)
		tw_log_ratelimited(TW_DIAG_INFO, "zookeeper client: %s", buf);
	else
		tw_log_ratelimited(TW_DIAG_DEBUG, "zookeeper client: %s", buf);
}

/* What the client formats at all: what our level would show of it (zk_log's mapping). */
static void set_client_level(void)
{
	zoo_set_debug_level(tw__log_enabled(TW_DIAG_DEBUG) ? ZOO_LOG_LEVEL_INFO :
			    tw__log_enabled(TW_DIAG_INFO) ? ZOO_LOG_LEVEL_WARN : ZOO_LOG_LEVEL_ERROR);
}

static zhandle_t *zk_init(const char *hosts, watcher_fn fn, int timeout_ms,
			  const clientid_t *id, void *ctx)
{
	/* Messages logged outside a handle go to the stream: stderr, never stdout (it carries
	 * twd's ready line and the tests' TAP); 0 turns the client's log off
	 * (zookeeper.h: "disable logging"). */
	zoo_set_log_stream(stderr);
	set_client_level();
	return zookeeper_init2(hosts, fn, timeout_ms, id, ctx, 0, zk_log);
}

static int zrc_errno(int zrc)
{
	switch (zrc) {
	case ZOK:
		return 0;
	case ZNONODE:
		return -TW_ENOTFOUND;
	case ZCONNECTIONLOSS:
	case ZOPERATIONTIMEOUT:
		return -ETIMEDOUT;
	case ZSESSIONEXPIRED:
	case ZINVALIDSTATE:
		return -ECONNRESET;
	case ZNOAUTH:
	case ZAUTHFAILED:
		return -EACCES;
	case ZBADARGUMENTS:
		return -EINVAL;
	case ZSYSTEMERROR:
		return -errno ? -errno : -EIO;
	default:
		return -EIO;
	}
}

/* The state under st_mu changed: wake every waiter on st_cv, then release st_mu. */
static void st_changed_unlock(struct zk *z)
{
	pthread_cond_broadcast(&z->st_cv);
	pthread_mutex_unlock(&z->st_mu);
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk *z = ctx;

	(void)path;
	if (type != ZOO_SESSION_EVENT || !z)
		return;
	pthread_mutex_lock(&z->st_mu);
	if (zh == z->zh || !z->zh) {
		z->state = state;
		if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
			z->expired = true;
	}
	st_changed_unlock(z);
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A watch of ours fired: a child of backups/ came or went (zk_watch_backups), a standby's node
 * changed or went (zk_wait_owner_gone), or a session event, which every watch gets too. Count it,
 * and note when its node was deleted. Runs on the client's completion thread; takes only st_mu.
 */
static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_watch *w = ctx;

	(void)zh;
	(void)state;
	(void)path;
	pthread_mutex_lock(&w->z->st_mu);
	w->events++;
	if (type == ZOO_DELETED_EVENT)
		w->gone_ns = realtime_ns();
	st_changed_unlock(w->z);
}

static void deadline_in(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Wait (st_mu not held) until the current handle is connected. 0, -ETIMEDOUT, -ECONNRESET. */
static int wait_connected(struct zk *z, unsigned ms)
{
	struct timespec ts;
	int rc = 0;

	deadline_in(&ts, ms);
	pthread_mutex_lock(&z->st_mu);
	while (z->state != ZOO_CONNECTED_STATE && !z->expired && !z->stopping && rc == 0)
		rc = pthread_cond_timedwait(&z->st_cv, &z->st_mu, &ts);
	rc = z->state == ZOO_CONNECTED_STATE ? 0 : z->expired ? -ECONNRESET : -ETIMEDOUT;
	pthread_mutex_unlock(&z->st_mu);
	return rc;
}

/* New handle (op_mu held, or before the keeper starts). */
static int new_handle(struct zk *z)
{
	zhandle_t *zh;

	pthread_mutex_lock(&z->st_mu);
	z->state = 0;
	z->expired = false;
	z->zh = NULL;
	z->generation++;
	pthread_mutex_unlock(&z->st_mu);
	/* zookeeper_init may call the watcher before returning: it sees z->zh NULL and accepts. */
	zh = zk_init(z->c->url.hosts, watcher, (int)z->timeout_ms, NULL, z);
	if (!zh) {
		int e = errno ? errno : EIO;

		tw__coord_err(z->c, "zk://%s: cannot create a ZooKeeper client: %s",
			      z->c->url.hosts, strerror(e));
		return -e;
	}
	pthread_mutex_lock(&z->st_mu);
	z->zh = zh;
	pthread_mutex_unlock(&z->st_mu);
	return 0;
}

static int connect_handle(struct zk *z)
{
	int rc = new_handle(z);

	if (rc < 0)
		return rc;
	rc = wait_connected(z, z->timeout_ms);
	if (rc < 0)
		tw__coord_err(z->c,
			      "zk://%s: no ZooKeeper server answered within %u ms (is one running? "
			      "check the URL's host:port list)",
			      z->c->url.hosts, z->timeout_ms);
	return rc;
}

static void path_of(const struct zk *z, char *out, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void path_of(const struct zk *z, char *out, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(out, len, "%s", z->c->url.chroot);

	va_start(ap, fmt);
	vsnprintf(out + n, len - (size_t)n, fmt, ap);
	va_end(ap);
}

/* zoo_get of a node that may not exist: 0 and *exists, or a negative code (c->errmsg set). */
static int get_if_any(struct zk *z, const char *path, char *buf, int *len, struct Stat *st,
		      bool *exists)
{
	int zrc = zoo_get(z->zh, path, 0, buf, len, st);

	*exists = zrc == ZOK;
	if (zrc == ZOK || zrc == ZNONODE)
		return 0;
	tw__coord_err(z->c, "zk://%s: get %s: %s", z->c->url.hosts, path, zerror(zrc));
	return zrc_errno(zrc);
}

static int create_persistent(struct zk *z, const char *path)
{
	int zrc = zoo_create(z->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);

	if (zrc == ZOK || zrc == ZNODEEXISTS)
		return 0;
	tw__coord_err(z->c, "zk://%s: create %s: %s", z->c->url.hosts, path, zerror(zrc));
	return zrc_errno(zrc);
}

/* chroot, chroot/backups, chroot/logs (op_mu held). */
static int make_folders(struct zk *z)
{
	char p[PATH_MAX_ZK];
	int rc;

	for (const char *s = z->c->url.chroot + 1;; s++) {
		if (*s == '/' || !*s) {
			snprintf(p, sizeof(p), "%.*s", (int)(s - z->c->url.chroot), z->c->url.chroot);
			rc = create_persistent(z, p);
			if (rc < 0)
				return rc;
		}
		if (!*s)
			break;
	}
	path_of(z, p, sizeof(p), "/backups");
	rc = create_persistent(z, p);
	if (rc == 0) {
		path_of(z, p, sizeof(p), "/logs");
		rc = create_persistent(z, p);
	}
	return rc;
}

/* Create our registration node (op_mu held); replaces a stale node of the same address. */
static int do_register(struct zk *z)
{
	char data[1024];
	int n = tw__coord_backup_encode(&z->me, data, sizeof(data));

	if (n < 0) {
		tw__coord_err(z->c, "registration of %s: a field holds a newline or '=', or is empty",
			      z->me.addr);
		return n;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		struct Stat st;
		int zrc = zoo_create(z->zh, z->reg_path, data, n, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL,
				     NULL, 0);

		if (zrc == ZOK)
			return 0;
		if ((zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) && attempt < 4) {
			/* The answer lost, not necessarily the create: again once connected; a
			 * node of our own session then says it was made. */
			int rc;

			tw_log_warn("coord: zk://%s: register %s: %s: trying again once connected",
				    z->c->url.hosts, z->me.addr, zerror(zrc));
			rc = wait_connected(z, z->timeout_ms);
			if (rc < 0) {
				tw__coord_err(z->c, "zk://%s: register %s: %s, then not connected "
					      "again", z->c->url.hosts, z->me.addr, zerror(zrc));
				return rc;
			}
			continue;
		}
		if (zrc != ZNODEEXISTS) {
			tw__coord_err(z->c, "zk://%s: register %s at %s: %s", z->c->url.hosts,
				      z->me.addr, z->reg_path, zerror(zrc));
			return zrc_errno(zrc);
		}
		zrc = zoo_exists(z->zh, z->reg_path, 0, &st);
		if (zrc == ZOK && st.ephemeralOwner == zoo_client_id(z->zh)->client_id)
			return zrc_errno(zoo_set(z->zh, z->reg_path, data, n, -1)); /* ours already */
		if (zrc == ZOK) {
			/* A node for the same address from a session not yet expired: the previous
			 * twd at this address, which died. Only one process can listen there. */
			tw_log_warn("coord: %s: replacing the stale registration of a previous twd at "
				    "%s (session 0x%llx)",
				    z->reg_path, z->me.addr, (unsigned long long)st.ephemeralOwner);
			zoo_delete(z->zh, z->reg_path, st.version);
		}
	}
	tw__coord_err(z->c, "zk://%s: register %s: the node %s keeps changing", z->c->url.hosts,
		      z->me.addr, z->reg_path);
	return -EAGAIN;
}

/* Wait up to ms for stopping (st_mu not held). Returns true when stopping. */
static bool stop_wait(struct zk *z, unsigned ms)
{
	struct timespec ts;
	bool stop;

	deadline_in(&ts, ms);
	pthread_mutex_lock(&z->st_mu);
	while (!z->stopping && pthread_cond_timedwait(&z->st_cv, &z->st_mu, &ts) == 0)
		;
	stop = z->stopping;
	pthread_mutex_unlock(&z->st_mu);
	return stop;
}

/*
 * After a session expiry: a new session, the folders and the registration again; owned logs
 * are lost. op_mu is held for one attempt at a time (at most a session timeout), never across
 * the back-off between attempts, so calls fail with "not connected" instead of hanging while
 * no server answers (twd's shutdown must not wait for ZooKeeper).
 */
static void *keeper_main(void *arg)
{
	struct zk *z = arg;

	for (;;) {
		zhandle_t *old;
		unsigned backoff = 100;

		pthread_mutex_lock(&z->st_mu);
		while (!z->expired && !z->stopping)
			pthread_cond_wait(&z->st_cv, &z->st_mu);
		if (z->stopping) {
			pthread_mutex_unlock(&z->st_mu);
			return NULL;
		}
		pthread_mutex_unlock(&z->st_mu);

		pthread_mutex_lock(&z->op_mu);
		old = z->zh;
		tw_log_warn("coord: zk://%s: session expired: reconnecting%s", z->c->url.hosts,
			    z->registered ? " and registering again" : "");
		for (size_t i = 0; i < z->n_owned; i++) {
			if (!z->owned_lost[i])
				tw_log_error("coord: log %llu: the owner node went with the expired "
					     "session; another primary may take the log over (its fence "
					     "then stops our writes)",
					     (unsigned long long)z->owned[i]);
			z->owned_lost[i] = true;
		}
		pthread_mutex_lock(&z->st_mu);
		z->zh = NULL;
		pthread_mutex_unlock(&z->st_mu);
		pthread_mutex_unlock(&z->op_mu);
		if (old)
			zookeeper_close(old);
		for (;;) {
			int rc;

			pthread_mutex_lock(&z->op_mu);
			rc = connect_handle(z);
			if (rc == 0)
				rc = make_folders(z);
			if (rc == 0 && z->registered)
				rc = do_register(z);
			if (rc < 0) {
				zhandle_t *h = z->zh;

				pthread_mutex_lock(&z->st_mu);
				z->zh = NULL;
				pthread_mutex_unlock(&z->st_mu);
				if (h)
					zookeeper_close(h);
				tw_log_warn("coord: %s (retrying)", z->c->errmsg);
			} else if (z->registered) {
				tw_log_info("coord: registered again as %s", z->reg_path);
			}
			pthread_mutex_unlock(&z->op_mu);
			if (rc == 0)
				break;
			if (stop_wait(z, backoff))
				return NULL;
			backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
		}
	}
}

/* Close the session (its ephemeral nodes, registration and owner nodes, go at once) and free
 * the backend; the keeper thread must not be running. */
static void zk_free(struct tw_coord *c, struct zk *z)
{
	if (z->zh)
		zookeeper_close(z->zh);
	pthread_cond_destroy(&z->st_cv);
	pthread_mutex_destroy(&z->st_mu);
	pthread_mutex_destroy(&z->op_mu);
	free(z);
	c->impl = NULL;
}

static int zk_open(struct tw_coord *c, const struct tw_coord_url *u, unsigned timeout_ms)
{
	struct zk *z = calloc(1, sizeof(*z));
	int rc;

	(void)u;
	if (!z)
		return -ENOMEM;
	z->c = c;
	z->node_watch.z = z->reg_watch.z = z;
	z->timeout_ms = timeout_ms;
	pthread_mutex_init(&z->op_mu, NULL);
	pthread_mutex_init(&z->st_mu, NULL);
	pthread_cond_init(&z->st_cv, NULL);
	c->impl = z;
	rc = connect_handle(z);
	if (rc == 0)
		rc = make_folders(z);
	if (rc == 0) {
		rc = -pthread_create(&z->keeper, NULL, keeper_main, z);
		z->keeper_started = rc == 0;
		if (rc)
			tw__coord_err(c, "coord: cannot start the session keeper thread: %s",
				      strerror(-rc));
	}
	if (rc < 0)
		zk_free(c, z);
	return rc;
}

static void zk_close(struct tw_coord *c)
{
	struct zk *z = c->impl;

	if (!z)
		return;
	pthread_mutex_lock(&z->st_mu);
	z->stopping = true;
	st_changed_unlock(z);
	if (z->keeper_started)
		pthread_join(z->keeper, NULL);
	zk_free(c, z);
}

/* Take op_mu and make sure the handle is connected (the keeper may be replacing it). */
static int op_begin(struct zk *z)
{
	int rc;

	pthread_mutex_lock(&z->op_mu);
	rc = z->zh ? wait_connected(z, z->timeout_ms) : -ECONNRESET;
	if (rc < 0) {
		tw__coord_err(z->c, "zk://%s: not connected to ZooKeeper (%s); retry later",
			      z->c->url.hosts, rc == -ETIMEDOUT ? "timed out" : "session expired");
		pthread_mutex_unlock(&z->op_mu);
	}
	return rc;
}

static int zk_register(struct tw_coord *c, const struct tw_coord_backup *b)
{
	struct zk *z = c->impl;
	char name[TW_COORD_NAME_MAX];
	int rc = op_begin(z);

	if (rc < 0)
		return rc;
	z->me = *b;
	tw__coord_backup_node_name(b, name, sizeof(name));
	path_of(z, z->reg_path, sizeof(z->reg_path), "/backups/%s", name);
	rc = do_register(z);
	z->registered = rc == 0;
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

static int zk_update_free(struct tw_coord *c, uint32_t free_buffers)
{
	struct zk *z = c->impl;
	char data[1024];
	int rc, n, zrc;

	rc = op_begin(z);
	if (rc < 0)
		return rc;
	if (!z->registered || z->me.free_buffers == free_buffers) {
		pthread_mutex_unlock(&z->op_mu);
		return 0;
	}
	z->me.free_buffers = free_buffers;
	n = tw__coord_backup_encode(&z->me, data, sizeof(data));
	zrc = n < 0 ? ZBADARGUMENTS : zoo_set(z->zh, z->reg_path, data, n, -1);
	if (zrc == ZNONODE)
		rc = do_register(z); /* deleted by hand: put it back */
	else if (zrc != ZOK) {
		tw__coord_err(c, "zk://%s: update %s: %s", c->url.hosts, z->reg_path, zerror(zrc));
		rc = zrc_errno(zrc);
	}
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

static int zk_deregister(struct tw_coord *c)
{
	struct zk *z = c->impl;
	int rc = op_begin(z), zrc;

	if (rc < 0)
		return rc;
	if (z->registered) {
		zrc = zoo_delete(z->zh, z->reg_path, -1);
		z->registered = false;
		if (zrc != ZOK && zrc != ZNONODE) {
			tw__coord_err(c, "zk://%s: deregister %s: %s", c->url.hosts, z->reg_path,
				      zerror(zrc));
			rc = zrc_errno(zrc);
		}
	}
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

/*
 * Finishes a listing of dir made under op_mu, and releases op_mu: a failed listing (zrc, of
 * zoo_get_children) is the error; else reads and decodes every child (the listing in *kids,
 * which this frees) as a tw_coord_backup named after its node. A child that went away
 * meanwhile is passed over, one that does not decode is skipped with a warning; any other
 * failed get fails the whole list. Returns 0 with a calloc'ed array in *out, or -errno.
 */
static int get_backups_locked(struct tw_coord *c, const char *dir, struct String_vector *kids,
			      struct tw_coord_backup **out, size_t *n_out);

static int get_backups(struct tw_coord *c, const char *dir, int zrc, struct String_vector *kids,
		       struct tw_coord_backup **out, size_t *n_out)
{
	struct zk *z = c->impl;
	int rc;

	if (zrc != ZOK) {
		tw__coord_err(c, "zk://%s: list %s: %s", c->url.hosts, dir, zerror(zrc));
		pthread_mutex_unlock(&z->op_mu);
		return zrc_errno(zrc);
	}
	rc = get_backups_locked(c, dir, kids, out, n_out);
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

static int get_backups_locked(struct tw_coord *c, const char *dir, struct String_vector *kids,
			      struct tw_coord_backup **out, size_t *n_out)
{
	struct zk *z = c->impl;
	size_t k = 0;
	int rc = 0, zrc;

	*out = calloc(kids->count > 0 ? (size_t)kids->count : 1, sizeof(**out));
	if (!*out) {
		deallocate_String_vector(kids);
		return -ENOMEM;
	}
	for (int32_t i = 0; i < kids->count; i++) {
		char path[PATH_MAX_ZK], data[1024], err[256];
		int len = (int)sizeof(data);

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, kids->data[i]) >= sizeof(path))
			continue; /* not one of ours: our names are short */
		zrc = zoo_get(z->zh, path, 0, data, &len, NULL);
		if (zrc == ZNONODE)
			continue; /* went away meanwhile */
		if (zrc != ZOK) {
			tw__coord_err(c, "zk://%s: get %s: %s", c->url.hosts, path, zerror(zrc));
			rc = zrc_errno(zrc);
			break;
		}
		if (len < 0)
			len = 0;
		if (tw__coord_backup_decode(data, (size_t)len, &(*out)[k], err, sizeof(err)) < 0) {
			tw_log_warn("coord: skipping %s: %s", path, err);
			continue;
		}
		snprintf((*out)[k].name, sizeof((*out)[k].name), "%s", kids->data[i]);
		k++;
	}
	deallocate_String_vector(kids);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		return rc;
	}
	*n_out = k;
	return 0;
}

static int list_impl(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out, bool arm)
{
	struct zk *z = c->impl;
	struct String_vector kids = {0, NULL};
	char dir[PATH_MAX_ZK];
	int rc = op_begin(z), zrc;
	uint64_t ev = 0;
	unsigned gen = 0;

	if (rc < 0)
		return rc;
	path_of(z, dir, sizeof(dir), "/backups");
	if (arm) {
		pthread_mutex_lock(&z->st_mu);
		ev = z->reg_watch.events;
		gen = z->generation;
		pthread_mutex_unlock(&z->st_mu);
		zrc = zoo_wget_children(z->zh, dir, watch_fired, &z->reg_watch, &kids);
		if (zrc == ZOK) {
			pthread_mutex_lock(&z->st_mu);
			z->reg_armed = true;
			z->reg_seen = ev;
			z->reg_gen = gen;
			pthread_mutex_unlock(&z->st_mu);
		}
	} else {
		zrc = zoo_get_children(z->zh, dir, 0, &kids);
	}
	return get_backups(c, dir, zrc, &kids, out, n_out);
}

static int zk_list(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	return list_impl(c, out, n_out, false);
}

static int zk_watch_backups(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	return list_impl(c, out, n_out, true);
}

static bool zk_backups_changed(struct tw_coord *c)
{
	struct zk *z = c->impl;
	bool changed;

	pthread_mutex_lock(&z->st_mu);
	changed = z->reg_armed && (z->reg_watch.events != z->reg_seen || z->reg_gen != z->generation);
	pthread_mutex_unlock(&z->st_mu);
	return changed;
}

static bool zk_wait_backups_changed(struct tw_coord *c, unsigned timeout_ms)
{
	struct zk *z = c->impl;
	struct timespec ts;
	bool changed;
	int rc = 0;

	deadline_in(&ts, timeout_ms);
	pthread_mutex_lock(&z->st_mu);
	while (!(changed = z->reg_armed && (z->reg_watch.events != z->reg_seen ||
					    z->reg_gen != z->generation)) && !z->stopping && rc == 0)
		rc = pthread_cond_timedwait(&z->st_cv, &z->st_mu, &ts);
	pthread_mutex_unlock(&z->st_mu);
	return changed;
}

static int parse_epoch(const char *s, int len, uint64_t *out)
{
	uint64_t x = 0;

	if (len <= 0 || len > 20)
		return -1;
	for (int i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*out = x;
	return 0;
}

static void note_owned(struct zk *z, uint64_t log_id)
{
	for (size_t i = 0; i < z->n_owned; i++)
		if (z->owned[i] == log_id) {
			z->owned_lost[i] = false;
			return;
		}
	if (z->n_owned < MAX_OWNED) {
		z->owned[z->n_owned] = log_id;
		z->owned_lost[z->n_owned++] = false;
	}
}

/* A take rides over this many lost answers (connection loss, operation timeout) before it
 * reports one. */
#define TAKE_LOST_MAX 2

/* After a lost answer, op_mu held: wait to be connected again. true: op_mu held again; false:
 * op_mu released, *rc the error (the session expired, or no server answers). */
static bool reconnect(struct zk *z, int *rc)
{
	pthread_mutex_unlock(&z->op_mu);
	*rc = op_begin(z);
	return *rc == 0;
}

static int zk_take(struct tw_coord *c, uint64_t log_id, uint64_t floor, const char *owner,
		   bool replace, uint64_t *epoch_out)
{
	struct zk *z = c->impl;
	char dir[PATH_MAX_ZK], epath[PATH_MAX_ZK], opath[PATH_MAX_ZK];
	unsigned lost = 0;
	int rc = op_begin(z);

	if (rc < 0)
		return rc;
	path_of(z, dir, sizeof(dir), "/logs/%" PRIu64, log_id);
	path_of(z, epath, sizeof(epath), "/logs/%" PRIu64 "/epoch", log_id);
	path_of(z, opath, sizeof(opath), "/logs/%" PRIu64 "/owner", log_id);
	for (int attempt = 0; rc == 0; attempt++) {
		char ebuf[32], obuf[512], odata[512];
		int elen = (int)sizeof(ebuf) - 1, olen = (int)sizeof(obuf) - 1, n = 0, on = 0, zrc;
		struct Stat est, ost;
		uint64_t cur = 0, next;
		zoo_op_t ops[3];
		zoo_op_result_t res[3];
		bool have_epoch, have_owner = false;

		if (attempt == 1000) {
			tw__coord_err(c, "zk://%s: log %" PRIu64 ": epoch allocation lost 1000 races "
				      "in a row", c->url.hosts, log_id);
			rc = -EAGAIN;
			break;
		}
		rc = get_if_any(z, epath, ebuf, &elen, &est, &have_epoch);
		if (rc < 0)
			goto failed;
		if (!have_epoch) {
			/* A log the coordinator has not seen: its folder first (one round trip
			 * saved on every later allocation). */
			rc = create_persistent(z, dir);
			if (rc < 0)
				goto failed;
		}
		if (have_epoch && parse_epoch(ebuf, elen, &cur) < 0) {
			tw__coord_err(c, "zk://%s: %s holds no decimal epoch: fix or delete it by hand "
				      "(it is the log's epoch counter)", c->url.hosts, epath);
			rc = -EINVAL;
			break;
		}
		next = TW_MAX(cur + 1, floor);
		if (!next)
			next = 1;
		snprintf(ebuf, sizeof(ebuf), "%" PRIu64, next);
		if (have_epoch)
			zoo_set_op_init(&ops[n++], epath, ebuf, (int)strlen(ebuf), est.version, NULL);
		else
			zoo_create_op_init(&ops[n++], epath, ebuf, (int)strlen(ebuf),
					   &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		if (owner) {
			rc = get_if_any(z, opath, obuf, &olen, &ost, &have_owner);
			if (rc < 0)
				goto failed;
			if (have_owner && ost.ephemeralOwner != zoo_client_id(z->zh)->client_id &&
			    !replace) {
				obuf[olen > 0 ? olen : 0] = '\0';
				for (char *p = obuf; *p; p++)
					if (*p == '\n')
						*p = ' ';
				tw__coord_err(c, "log %" PRIu64 " is owned by another primary (%s): "
					      "take it over instead", log_id, obuf);
				rc = -TW_EFENCED;
				break;
			}
			if (have_owner)
				zoo_delete_op_init(&ops[n++], opath, ost.version);
			on = snprintf(odata, sizeof(odata), "epoch=%" PRIu64 "\nowner=%s\n", next,
				      owner);
			if (on < 0 || on >= (int)sizeof(odata))
				on = (int)sizeof(odata) - 1;
			zoo_create_op_init(&ops[n++], opath, odata, on, &ZOO_OPEN_ACL_UNSAFE,
					   ZOO_EPHEMERAL, NULL, 0);
		}
		zrc = zoo_multi(z->zh, n, ops, res);
		if (zrc == ZOK) {
			*epoch_out = next;
			if (owner)
				note_owned(z, log_id);
			break;
		}
		if (zrc == ZBADVERSION || zrc == ZNODEEXISTS || zrc == ZNONODE)
			continue; /* raced with another allocation: read again */
		tw__coord_err(c, "zk://%s: log %" PRIu64 ": epoch allocation: %s", c->url.hosts,
			      log_id, zerror(zrc));
		rc = zrc_errno(zrc);
failed:
		if (rc == -ETIMEDOUT && lost < TAKE_LOST_MAX) {
			/* An answer lost (connection loss, operation timeout), not necessarily
			 * its request: connected again, read again. After a multi-op that was
			 * applied, the owner node is our own session's: the next one replaces it
			 * (one epoch skipped). */
			tw_log_warn("coord: %s: trying again once connected", c->errmsg);
			lost++;
			if (!reconnect(z, &rc))
				return rc;
			continue;
		}
		break;
	}
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

static int zk_info(struct tw_coord *c, uint64_t log_id, uint64_t *epoch_out, char *owner_out,
		   size_t owner_len)
{
	struct zk *z = c->impl;
	char epath[PATH_MAX_ZK], opath[PATH_MAX_ZK], ebuf[32], obuf[512];
	int elen = (int)sizeof(ebuf), olen = (int)sizeof(obuf) - 1, zrc;
	int rc = op_begin(z);

	if (rc < 0)
		return rc;
	path_of(z, epath, sizeof(epath), "/logs/%" PRIu64 "/epoch", log_id);
	path_of(z, opath, sizeof(opath), "/logs/%" PRIu64 "/owner", log_id);
	zrc = zoo_get(z->zh, epath, 0, ebuf, &elen, NULL);
	if (zrc == ZOK && parse_epoch(ebuf, elen, epoch_out) < 0)
		zrc = ZBADARGUMENTS;
	if (zrc != ZOK) {
		if (zrc == ZNONODE)
			tw__coord_err(c, "the coordinator knows no log %" PRIu64, log_id);
		else
			tw__coord_err(c, "zk://%s: get %s: %s", c->url.hosts, epath, zerror(zrc));
		pthread_mutex_unlock(&z->op_mu);
		return zrc_errno(zrc);
	}
	if (owner_len)
		owner_out[0] = '\0';
	zrc = zoo_get(z->zh, opath, 0, obuf, &olen, NULL);
	if (zrc == ZOK && owner_len) {
		obuf[olen > 0 ? olen : 0] = '\0';
		for (char *p = obuf; *p; p++)
			if (*p == '\n')
				*p = ' ';
		snprintf(owner_out, owner_len, "%s", obuf);
	}
	pthread_mutex_unlock(&z->op_mu);
	return zrc == ZOK || zrc == ZNONODE ? 0 : zrc_errno(zrc);
}

static bool zk_owns(struct tw_coord *c, uint64_t log_id)
{
	struct zk *z = c->impl;
	bool yes = false;

	pthread_mutex_lock(&z->op_mu);
	for (size_t i = 0; i < z->n_owned; i++)
		if (z->owned[i] == log_id)
			yes = !z->owned_lost[i];
	pthread_mutex_unlock(&z->op_mu);
	return yes;
}

/* Wait on st_cv until `abs` (0: for ever); false once it passed. st_mu held. */
static bool cv_wait_until(struct zk *z, const struct timespec *abs)
{
	if (!abs->tv_sec)
		return pthread_cond_wait(&z->st_cv, &z->st_mu) == 0;
	return pthread_cond_timedwait(&z->st_cv, &z->st_mu, abs) == 0;
}

static int zk_wait_owner_gone(struct tw_coord *c, uint64_t log_id, unsigned timeout_ms,
			      void (*on_wait)(void *arg, const char *owner), void *arg,
			      bool *waited_out, uint64_t *gone_ns_out)
{
	struct zk *z = c->impl;
	struct timespec abs = { 0, 0 };
	char opath[PATH_MAX_ZK];
	bool seen = false;

	if (timeout_ms)
		deadline_in(&abs, timeout_ms);
	path_of(z, opath, sizeof(opath), "/logs/%" PRIu64 "/owner", log_id);
	pthread_mutex_lock(&z->st_mu);
	z->node_watch.gone_ns = 0; /* a deletion seen by an earlier wait is not this one's */
	pthread_mutex_unlock(&z->st_mu);
	for (;;) {
		struct Stat st;
		uint64_t ev;
		unsigned gen;
		bool timed_out = false, stop, mine;
		char obuf[512];
		int olen = (int)sizeof(obuf) - 1;
		int zrc, rc = op_begin(z);

		if (rc < 0) {
			/* The keeper is replacing an expired session, or no server answers:
			 * wait for the state to change (st_cv), then try again. */
			pthread_mutex_lock(&z->st_mu);
			timed_out = !z->stopping && !cv_wait_until(z, &abs);
			stop = z->stopping;
			pthread_mutex_unlock(&z->st_mu);
			if (timed_out || stop) {
				tw__coord_err(c, "log %" PRIu64 ": the owner node was still there (or "
					      "ZooKeeper unreachable) after %u ms", log_id, timeout_ms);
				return -ETIMEDOUT;
			}
			continue;
		}
		pthread_mutex_lock(&z->st_mu);
		ev = z->node_watch.events;
		gen = z->generation;
		pthread_mutex_unlock(&z->st_mu);
		/* get with a watch: the node's text for on_wait, and the watch when it exists (a
		 * missing node sets none: we return). */
		zrc = zoo_wget(z->zh, opath, watch_fired, &z->node_watch, obuf, &olen, &st);
		/* Our own session's node: an earlier take of ours that ZooKeeper applied while
		 * its reply was lost (connection loss, operation timeout). Nobody else owns the
		 * log, and waiting for our own node to go would wait for ever: the take that
		 * follows replaces it (zk_take accepts a node of its own session). */
		mine = zrc == ZOK && st.ephemeralOwner == zoo_client_id(z->zh)->client_id;
		pthread_mutex_unlock(&z->op_mu);
		if (mine) {
			tw_log_warn("coord: zk://%s: log %" PRIu64 ": the owner node is this "
				    "session's own (a claim whose answer was lost): claiming again",
				    c->url.hosts, log_id);
			*waited_out = seen;
			*gone_ns_out = realtime_ns();
			return 0;
		}
		if (zrc == ZOK && on_wait) {
			obuf[olen > 0 ? olen : 0] = '\0';
			for (char *q = obuf; *q; q++)
				if (*q == '\n')
					*q = ' ';
			on_wait(arg, obuf);
		}
		if (zrc == ZNONODE) {
			*waited_out = seen;
			pthread_mutex_lock(&z->st_mu);
			*gone_ns_out = seen && z->node_watch.gone_ns ? z->node_watch.gone_ns : realtime_ns();
			pthread_mutex_unlock(&z->st_mu);
			return 0;
		}
		if (zrc != ZOK && zrc != ZCONNECTIONLOSS && zrc != ZOPERATIONTIMEOUT &&
		    zrc != ZSESSIONEXPIRED && zrc != ZINVALIDSTATE) {
			tw__coord_err(c, "zk://%s: exists %s: %s", c->url.hosts, opath, zerror(zrc));
			return zrc_errno(zrc);
		}
		seen |= zrc == ZOK;
		/* Until the watch fires (the node changed or went), or our session changed (a
		 * new handle has no watch: read again). */
		pthread_mutex_lock(&z->st_mu);
		while (zrc == ZOK && z->node_watch.events == ev && z->generation == gen && !z->expired &&
		       !z->stopping && !timed_out)
			timed_out = !cv_wait_until(z, &abs);
		if (zrc != ZOK && !z->stopping)
			timed_out = !cv_wait_until(z, &abs); /* connection trouble: a state change */
		stop = z->stopping;
		pthread_mutex_unlock(&z->st_mu);
		if (timed_out || stop) {
			tw__coord_err(c, "log %" PRIu64 ": the owner node was still there after %u ms",
				      log_id, timeout_ms);
			return -ETIMEDOUT;
		}
	}
}

static int zk_log_add_backup(struct tw_coord *c, uint64_t log_id, const struct tw_coord_backup *b)
{
	struct zk *z = c->impl;
	char name[TW_COORD_NAME_MAX], path[PATH_MAX_ZK], data[1024];
	int n, zrc = ZOK, rc;

	tw__coord_backup_node_name(b, name, sizeof(name));
	pthread_mutex_lock(&z->op_mu);
	for (size_t i = 0; i < z->n_noted && i < MAX_NOTED; i++)
		if (z->noted[i].log == log_id && !strcmp(z->noted[i].name, name)) {
			pthread_mutex_unlock(&z->op_mu);
			return 0; /* the common case: recorded by an earlier segment */
		}
	pthread_mutex_unlock(&z->op_mu);
	n = tw__coord_backup_encode(b, data, sizeof(data));
	if (n < 0) {
		tw__coord_err(c, "log %" PRIu64 ": backup %s: cannot encode its record", log_id,
			      b->addr);
		return n;
	}
	rc = op_begin(z);
	if (rc < 0)
		return rc;
	path_of(z, path, sizeof(path), "/logs/%" PRIu64 "/backups/%s", log_id, name);
	for (int attempt = 0; attempt < 3; attempt++) {
		char dir[PATH_MAX_ZK];

		zrc = zoo_create(z->zh, path, data, n, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		if ((zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) && attempt < 2) {
			/* The answer is lost, not necessarily the create: once connected again,
			 * create again (ZNODEEXISTS then says it was made). Without this, one
			 * lost answer kept a good backup out of the log's open. */
			pthread_mutex_unlock(&z->op_mu);
			rc = op_begin(z);
			if (rc < 0)
				return rc;
			continue;
		}
		if (zrc != ZNONODE)
			break;
		/* The log's folders first (a log opened before the record existed, or a folder
		 * deleted by hand). */
		path_of(z, dir, sizeof(dir), "/logs/%" PRIu64, log_id);
		rc = create_persistent(z, dir);
		path_of(z, dir, sizeof(dir), "/logs/%" PRIu64 "/backups", log_id);
		if (rc == 0)
			rc = create_persistent(z, dir);
		if (rc < 0)
			break;
	}
	if (rc == 0 && zrc != ZOK && zrc != ZNODEEXISTS) {
		tw__coord_err(c, "zk://%s: record %s: %s", c->url.hosts, path, zerror(zrc));
		rc = zrc_errno(zrc);
	}
	if (rc == 0) {
		size_t k = z->n_noted++ % MAX_NOTED;

		z->noted[k].log = log_id;
		snprintf(z->noted[k].name, sizeof(z->noted[k].name), "%s", name);
	}
	pthread_mutex_unlock(&z->op_mu);
	return rc;
}

static int zk_log_backups(struct tw_coord *c, uint64_t log_id, struct tw_coord_backup **out,
			  size_t *n_out)
{
	struct zk *z = c->impl;
	struct String_vector kids = { 0, NULL };
	char dir[PATH_MAX_ZK];
	int zrc, rc = op_begin(z);

	if (rc < 0)
		return rc;
	path_of(z, dir, sizeof(dir), "/logs/%" PRIu64 "/backups", log_id);
	zrc = zoo_get_children(z->zh, dir, 0, &kids);
	if (zrc == ZNONODE) {
		struct Stat st;

		path_of(z, dir, sizeof(dir), "/logs/%" PRIu64, log_id);
		zrc = zoo_exists(z->zh, dir, 0, &st);
		pthread_mutex_unlock(&z->op_mu);
		if (zrc == ZOK)
			return 0; /* a log from before the record: nothing recorded */
		if (zrc == ZNONODE)
			tw__coord_err(c, "the coordinator knows no log %" PRIu64, log_id);
		else
			tw__coord_err(c, "zk://%s: exists %s: %s", c->url.hosts, dir, zerror(zrc));
		return zrc_errno(zrc);
	}
	return get_backups(c, dir, zrc, &kids, out, n_out);
}

static int cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int zk_list_logs(struct tw_coord *c, uint64_t **out, size_t *n_out)
{
	struct zk *z = c->impl;
	struct String_vector kids = { 0, NULL };
	char dir[PATH_MAX_ZK];
	size_t k = 0;
	int zrc, rc = op_begin(z);

	if (rc < 0)
		return rc;
	path_of(z, dir, sizeof(dir), "/logs");
	zrc = zoo_get_children(z->zh, dir, 0, &kids);
	pthread_mutex_unlock(&z->op_mu);
	if (zrc != ZOK) {
		tw__coord_err(c, "zk://%s: list %s: %s", c->url.hosts, dir, zerror(zrc));
		return zrc_errno(zrc);
	}
	*out = calloc(kids.count > 0 ? (size_t)kids.count : 1, sizeof(**out));
	if (!*out) {
		deallocate_String_vector(&kids);
		return -ENOMEM;
	}
	for (int32_t i = 0; i < kids.count; i++)
		if (parse_epoch(kids.data[i], (int)strlen(kids.data[i]), &(*out)[k]) == 0)
			k++; /* decimal log ids; anything else is not ours */
	deallocate_String_vector(&kids);
	qsort(*out, k, sizeof(**out), cmp_id);
	*n_out = k;
	return 0;
}

const struct tw_coord_ops tw__coord_zk_ops = {
	.scheme = "zk",
	.open = zk_open,
	.close = zk_close,
	.register_backup = zk_register,
	.update_free = zk_update_free,
	.deregister = zk_deregister,
	.list_backups = zk_list,
	.take_log = zk_take,
	.log_info = zk_info,
	.owns = zk_owns,
	.wait_owner_gone = zk_wait_owner_gone,
	.log_add_backup = zk_log_add_backup,
	.log_backups = zk_log_backups,
	.list_logs = zk_list_logs,
	.backups_changed = zk_backups_changed,
	.watch_backups = zk_watch_backups,
	.wait_backups_changed = zk_wait_backups_changed,
};
