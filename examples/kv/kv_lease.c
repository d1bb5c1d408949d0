/*
 * examples/kv/kv_lease.c — read leases on a ZooKeeper session (kv_lease.h; the argument is in
 * docs/kv.md, "Leased reads").
 *
 * The ZooKeeper C client does not say when the server last answered its pings, so the lease is
 * renewed by requests of our own whose send time we know: every T/3 a renewal thread sends a
 * zoo_aget of each held partition's node, remembering the monotonic time just before the send;
 * the completion (the client's completion thread) extends the lease from that time if the node
 * is still there and still belongs to this session. A request is answered only after the server
 * received it, and the server resets the session's expiry clock on everything it receives, so the
 * session lives at least T past that send time.
 */
#include "kv_lease.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* The multi-threaded client's synchronous calls (zoo_create, zoo_wexists, ...) are declared
 * only with THREADED (meson's zookeeper_dep defines it too; examples/kv/Makefile does not). */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "kv_cluster.h"

struct kv_lease {
	zhandle_t *zh;
	int64_t session;  /* our session id (fixed once connected) */
	int me;
	unsigned t_ms;    /* T, negotiated */
	char root[300];   /* <chroot>/twkv-leases */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state;        /* the session's last state (mu) */
	unsigned events;  /* watches fired (mu) */
	bool stopping;    /* mu */
	bool connected_once;
	pthread_t renewer;
	bool renewer_started;
	atomic_bool expired;
	atomic_bool held[KV_MAX_PARTITIONS];
	_Atomic uint64_t until[KV_MAX_PARTITIONS]; /* monotonic ns; 0: none */
	atomic_int holder[KV_MAX_PARTITIONS];
};

struct ping {
	struct kv_lease *l;
	unsigned part;
	uint64_t sent;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* How long a lease lasts past the send time of the request that renewed it. */
static uint64_t lease_ns(const struct kv_lease *l)
{
	double t = (double)l->t_ms * 1e6;
	double v = t * (1.0 - KV_LEASE_DRIFT) - (double)KV_LEASE_MARGIN_MS * 1e6;

	return v > 0 ? (uint64_t)v : 0;
}

static void extend(struct kv_lease *l, unsigned part, uint64_t sent)
{
	uint64_t want = sent + lease_ns(l), cur = atomic_load(&l->until[part]);

	while (cur < want && !atomic_compare_exchange_weak(&l->until[part], &cur, want))
		;
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct kv_lease *l = ctx;

	(void)zh;
	(void)path;
	if (type != ZOO_SESSION_EVENT)
		return;
	if (state == ZOO_EXPIRED_SESSION_STATE) {
		/* Every lease node is gone: never valid again in this process. */
		atomic_store(&l->expired, true);
		for (unsigned p = 0; p < KV_MAX_PARTITIONS; p++)
			atomic_store(&l->until[p], 0);
		fprintf(stderr, "twkv: lease session expired: GETs are refused on this session; "
			"the server opens a new one and stands by again\n");
	}
	pthread_mutex_lock(&l->mu);
	l->state = state;
	l->events++;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

static void path_of(const struct kv_lease *l, unsigned part, char *out, size_t len)
{
	snprintf(out, len, "%s/p%u", l->root, part);
}

/* Completion of a renewal: the node still exists and is this session's: extend. */
static void ping_done(int rc, const char *value, int vlen, const struct Stat *st, const void *data)
{
	struct ping *pg = (struct ping *)data;
	struct kv_lease *l = pg->l;
	char text[32];
	int who = -1;

	if (rc == ZOK && st && st->ephemeralOwner == l->session && atomic_load(&l->held[pg->part]) &&
	    !atomic_load(&l->expired)) {
		extend(l, pg->part, pg->sent);
		atomic_store(&l->holder[pg->part], -1);
	} else if (rc == ZOK && value && vlen > 0 && (size_t)vlen < sizeof(text)) {
		memcpy(text, value, (size_t)vlen);
		text[vlen] = 0;
		if (sscanf(text, "%d", &who) == 1 && who != l->me)
			atomic_store(&l->holder[pg->part], who);
	}
	free(pg);
}

static void *renew_main(void *arg)
{
	struct kv_lease *l = arg;
	char path[340];

	pthread_mutex_lock(&l->mu);
	while (!l->stopping) {
		struct timespec ts;
		uint64_t ns;

		pthread_mutex_unlock(&l->mu);
		for (unsigned p = 0; p < KV_MAX_PARTITIONS && !atomic_load(&l->expired); p++) {
			struct ping *pg;

			if (!atomic_load(&l->held[p]) || !(pg = malloc(sizeof(*pg))))
				continue;
			pg->l = l;
			pg->part = p;
			path_of(l, p, path, sizeof(path));
			pg->sent = mono_ns(); /* before the send: what the server received is later */
			if (zoo_aget(l->zh, path, 0, ping_done, pg) != ZOK)
				free(pg);
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ns = (uint64_t)ts.tv_nsec + (uint64_t)l->t_ms * 1000000u / 3;
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_mutex_lock(&l->mu);
		if (!l->stopping)
			pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* The ZooKeeper client's messages (its level is the library's, set process-wide by the
 * coordinator): its warnings and errors on stderr, at most one a second (it logs every refused
 * connect while it retries). */
static void zk_log(const char *msg)
{
	static _Atomic uint64_t last;
	uint64_t now = mono_ns(), prev = atomic_load(&last);
	const char *p = strstr(msg, ":ZOO_");

	if (!p || (strncmp(p, ":ZOO_ERROR@", 11) && strncmp(p, ":ZOO_WARN@", 10)))
		return;
	if (now - prev < 1000000000u || !atomic_compare_exchange_strong(&last, &prev, now))
		return;
	p = strchr(p + 1, '@');
	fprintf(stderr, "twkv: lease: zookeeper client: %s%s", p ? p + 1 : msg,
		msg[strlen(msg) - 1] == '\n' ? "" : "\n");
}

int kv_lease_open(const char *url, int me, unsigned session_ms, struct kv_lease **out,
		  char *err, size_t errlen)
{
	struct kv_lease *l;
	char hosts[512], chroot[256] = "", path[300];
	const char *slash;
	struct timespec ts;
	int rc = 0;

	*out = NULL;
	if (strncmp(url, "zk://", 5)) {
		snprintf(err, errlen, "%s: not a zk:// URL", url);
		return -EINVAL;
	}
	url += 5;
	slash = strchr(url, '/');
	snprintf(hosts, sizeof(hosts), "%.*s", slash ? (int)(slash - url) : (int)strlen(url), url);
	if (slash && slash[1])
		snprintf(chroot, sizeof(chroot), "%s", slash);
	while (chroot[0] && chroot[strlen(chroot) - 1] == '/')
		chroot[strlen(chroot) - 1] = 0;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->me = me;
	snprintf(l->root, sizeof(l->root), "%s/twkv-leases", chroot);
	for (unsigned p = 0; p < KV_MAX_PARTITIONS; p++)
		atomic_init(&l->holder[p], -1);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	l->zh = zookeeper_init2(hosts, watcher, (int)session_ms, NULL, l, 0, zk_log);
	if (!l->zh) {
		rc = -errno ? -errno : -EIO;
		snprintf(err, errlen, "ZooKeeper %s: %s", hosts, strerror(-rc));
		goto bad;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2 * (time_t)(session_ms / 1000 + 1);
	pthread_mutex_lock(&l->mu);
	while (l->state != ZOO_CONNECTED_STATE && l->state != ZOO_EXPIRED_SESSION_STATE &&
	       rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	rc = l->state == ZOO_CONNECTED_STATE ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&l->mu);
	if (rc < 0) {
		snprintf(err, errlen, "ZooKeeper %s: no server answered within %u ms (is it up?)",
			 hosts, 2 * (session_ms / 1000 + 1) * 1000);
		goto bad;
	}
	l->session = zoo_client_id(l->zh)->client_id;
	l->t_ms = (unsigned)zoo_recv_timeout(l->zh);
	/* The folders: every prefix of the root, persistent (an existing one is fine). */
	for (char *q = l->root + 1;; q++) {
		if (*q != '/' && *q)
			continue;
		snprintf(path, sizeof(path), "%.*s", (int)(q - l->root), l->root);
		rc = zoo_create(l->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		if (rc != ZOK && rc != ZNODEEXISTS) {
			snprintf(err, errlen, "ZooKeeper: create %s: %s", path, zerror(rc));
			rc = -EIO;
			goto bad;
		}
		if (!*q)
			break;
	}
	rc = pthread_create(&l->renewer, NULL, renew_main, l);
	if (rc) {
		snprintf(err, errlen, "lease renewal thread: %s", strerror(rc));
		rc = -rc;
		goto bad;
	}
	l->renewer_started = true;
	*out = l;
	return 0;
bad:
	kv_lease_close(l);
	return rc;
}

void kv_lease_close(struct kv_lease *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stopping = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	if (l->renewer_started)
		pthread_join(l->renewer, NULL);
	/* Ends the session: our lease nodes go at once (pending completions run inside). */
	if (l->zh)
		zookeeper_close(l->zh);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

bool kv_lease_expired(const struct kv_lease *l)
{
	return atomic_load(&((struct kv_lease *)l)->expired);
}

unsigned kv_lease_session_ms(const struct kv_lease *l)
{
	return l->t_ms;
}

/* Watch of a lease node held by another session: wake the waiter. */
static void node_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct kv_lease *l = ctx;

	(void)zh;
	(void)type;
	(void)state;
	(void)path;
	pthread_mutex_lock(&l->mu);
	l->events++;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int kv_lease_acquire(struct kv_lease *l, unsigned part, bool steal, bool (*stop)(void *),
		     void *arg, char *err, size_t errlen)
{
	char path[340], me[16];
	int n = snprintf(me, sizeof(me), "%d", l->me);

	path_of(l, part, path, sizeof(path));
	for (;;) {
		struct Stat st;
		uint64_t sent;
		unsigned ev;
		int rc;

		if (atomic_load(&l->expired)) {
			snprintf(err, errlen, "the lease session expired: restart the server");
			return -ESTALE;
		}
		sent = mono_ns();
		rc = zoo_create(l->zh, path, me, n, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
		if (rc == ZOK) {
			atomic_store(&l->held[part], true);
			extend(l, part, sent);
			return 0;
		}
		if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
			snprintf(err, errlen, "ZooKeeper: create %s: %s", path, zerror(rc));
			return -EIO;
		}
		pthread_mutex_lock(&l->mu);
		ev = l->events;
		pthread_mutex_unlock(&l->mu);
		sent = mono_ns();
		rc = rc == ZNODEEXISTS ? zoo_wexists(l->zh, path, node_watch, l, &st) : rc;
		if (rc == ZOK && st.ephemeralOwner == l->session) {
			/* Ours already (a create whose answer was lost). */
			atomic_store(&l->held[part], true);
			extend(l, part, sent);
			return 0;
		}
		if (rc == ZOK && steal) {
			rc = zoo_delete(l->zh, path, st.version);
			if (rc == ZOK || rc == ZNONODE) {
				/* Its holder's lease ends within T(1 - ε) - δ of its clock. */
				sleep_ns((uint64_t)((double)l->t_ms * 1e6 * (1.0 + KV_LEASE_DRIFT)) +
					 KV_LEASE_MARGIN_MS * 1000000u);
			}
			continue;
		}
		if (rc == ZOK) {
			struct timespec ts;

			/* Until the watch fires (the node went) or a second passed. */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_mutex_lock(&l->mu);
			while (l->events == ev && !l->stopping &&
			       pthread_cond_timedwait(&l->cv, &l->mu, &ts) == 0)
				;
			pthread_mutex_unlock(&l->mu);
		} else if (rc != ZNONODE) {
			sleep_ns(100000000u); /* no server now: the client reconnects */
		}
		if (stop && stop(arg)) {
			snprintf(err, errlen, "stopping");
			return -ECANCELED;
		}
	}
}

void kv_lease_release(struct kv_lease *l, unsigned part)
{
	char path[340];
	struct Stat st;

	if (!l || !atomic_exchange(&l->held[part], false))
		return;
	atomic_store(&l->until[part], 0);
	path_of(l, part, path, sizeof(path));
	if (!atomic_load(&l->expired) && zoo_exists(l->zh, path, 0, &st) == ZOK &&
	    st.ephemeralOwner == l->session)
		zoo_delete(l->zh, path, st.version);
}

bool kv_lease_valid(const struct kv_lease *l, unsigned part, uint64_t now_ns)
{
	return now_ns < atomic_load(&l->until[part]) && atomic_load(&l->held[part]);
}

int kv_lease_holder(const struct kv_lease *l, unsigned part)
{
	return atomic_load(&l->holder[part]);
}
