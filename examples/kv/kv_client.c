/*
 * examples/kv/kv_client.c — the twkv client library (kv_client.h).
 */
#include "kv_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_NS 1000000ull   /* 1 ms */
#define BACKOFF_MAX_NS 100000000ull /* 100 ms */
#define ATTEMPT_MIN_NS 250000000ull /* 250 ms */
#define ATTEMPT_MAX_NS 1000000000ull /* 1 s */

/* A request, kept (with its bytes) until it is answered: it may have to be sent again. Its id
 * is (generation << 32 | index in c->reqs), so a reply finds it in O(1) and a late reply to an
 * earlier use of the slot is recognised and dropped. */
struct req {
	uint32_t gen;
	bool busy;
	bool waiting;       /* in the back-off list, not on a connection */
	uint8_t op;
	unsigned part;
	unsigned server;    /* where it went last */
	unsigned hops;      /* servers asked since the last back-off */
	uint64_t deadline, retry_at, backoff;
	uint64_t attempt_end; /* sent to `server`: if unanswered by then, ask the next server */
	uint64_t off;       /* where its bytes start in `server`'s connection's output stream */
	kvc_cb cb;
	void *arg;
	uint8_t *msg;       /* header + body */
	uint32_t len, cap;
	uint32_t next_free;
};

struct sconn {
	int fd;             /* -1: not connected */
	bool connecting;
	bool want_out;      /* EPOLLOUT armed */
	uint8_t *in, *out;
	size_t in_len, in_cap, out_len, out_cap;
	uint64_t queued, written; /* bytes queued on and written to this connection so far */
	/* It left an attempt unanswered (paused, or a connection that went half-open) and has
	 * not answered anything since: it gets one request at a time (the probe, sent at most
	 * every attempt_ns), the others go round it. */
	bool suspect;
	uint64_t probe_until; /* the probe's attempt ends then: no other request before */
};

struct kvc {
	struct kv_cluster map;
	unsigned owner[KV_MAX_PARTITIONS]; /* who served the partition last */
	struct sconn conns[KV_MAX_SERVERS];
	int epfd;
	struct req *reqs;
	uint32_t nreqs, free_head;
	size_t inflight, waiting;
	uint64_t completed;
	uint64_t timeout_ns;
	uint64_t attempt_ns;  /* how long one server may keep a request unanswered */
	uint64_t next_expiry; /* no request's deadline is earlier (UINT64_MAX: none in flight) */
	struct kvc_stats st;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* "host:port" or "[v6]:port" -> a connected-or-connecting non-blocking TCP socket. Returns the
 * fd or -errno. */
static int dial(const char *addr)
{
	char host[KV_ADDR_MAX];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int fd, one = 1, rc;
	size_t hl;

	if (!colon || colon == addr || (hl = (size_t)(colon - addr)) >= sizeof(host))
		return -EINVAL;
	if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), addr + 1);
	else
		snprintf(host, sizeof(host), "%.*s", (int)hl, addr);
	rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc)
		return -EHOSTUNREACH;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rc = -errno;
		freeaddrinfo(ai);
		return rc;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (rc < 0 && errno != EINPROGRESS) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* ------------------------------------------------------------------ one-shot calls */

/*
 * Every wait of a one-shot call is a poll() bounded by what is left of the call's deadline, on
 * a non-blocking socket: a server that is paused (SIGSTOP), a half-open connection or a peer
 * that stops reading cost the caller its timeout, never more (docs/kv.md, "Timeouts").
 */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = events };
		uint64_t now = now_ns();
		int n;

		if (now >= deadline)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)((deadline - now + 999999u) / 1000000u));
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			return 0; /* ready, or an error the next call reports */
	}
}

static int connect_wait(int fd, uint64_t deadline)
{
	int err = 0, rc = wait_fd(fd, POLLOUT, deadline);
	socklen_t l = sizeof(err);

	if (rc < 0)
		return rc;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
		return -errno;
	return -err;
}

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		int rc;

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			rc = wait_fd(fd, POLLOUT, deadline);
			if (rc < 0)
				return rc;
			continue;
		}
		if (w <= 0)
			return w == 0 ? -EIO : -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		int rc;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			rc = wait_fd(fd, POLLIN, deadline);
			if (rc < 0)
				return rc;
			continue;
		}
		if (r <= 0)
			return r == 0 ? -ECONNRESET : -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int kv_call(const char *addr, uint8_t op, const void *req, uint32_t req_len, unsigned timeout_ms,
	    uint8_t *status, char **body, uint32_t *len)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
	struct kv_hdr h = { .len = req_len, .op = op, .id = 1 };
	uint8_t hb[KV_HDR_SIZE];
	char *b = NULL;
	int fd = dial(addr), rc;

	*body = NULL;
	if (fd < 0)
		return fd;
	kv_hdr_encode(hb, &h);
	rc = connect_wait(fd, deadline);
	if (rc == 0)
		rc = write_all(fd, hb, sizeof(hb), deadline);
	if (rc == 0 && req_len)
		rc = write_all(fd, req, req_len, deadline);
	if (rc == 0)
		rc = read_full(fd, hb, sizeof(hb), deadline);
	if (rc == 0 && (!kv_hdr_decode(hb, &h) || h.op != (op | KV_REPLY)))
		rc = -EPROTO;
	if (rc == 0 && !(b = malloc((size_t)h.len + 1)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = read_full(fd, (uint8_t *)b, h.len, deadline);
	close(fd);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b[h.len] = 0;
	*body = b;
	*len = h.len;
	*status = h.status;
	return 0;
}

int kv_configure(const struct kv_cluster *map, unsigned timeout_ms, char *err, size_t errlen)
{
	char *text = malloc(65536), *reply;
	int n, rc = 0;

	if (!text)
		return -ENOMEM;
	for (int round = 0; round < 2 && rc == 0; round++) {
		for (unsigned i = 0; i < map->nservers && rc == 0; i++) {
			uint8_t status;
			uint32_t len;

			if ((map->servers[i].owns != 0) != (round == 0))
				continue;
			n = snprintf(text, 65536, "you %u\n", i);
			rc = kv_cluster_format(map, text + n, 65536 - (size_t)n);
			if (rc < 0) {
				snprintf(err, errlen, "the map is too long");
				break;
			}
			rc = kv_call(map->servers[i].kv, KV_OP_CONFIGURE, text, (uint32_t)(n + rc),
				     timeout_ms, &status, &reply, &len);
			if (rc < 0) {
				snprintf(err, errlen, "server %u (%s): %s", i, map->servers[i].kv,
					 strerror(-rc));
				break;
			}
			if (status != KV_S_OK) {
				snprintf(err, errlen, "server %u (%s): %s: %s", i, map->servers[i].kv,
					 kv_status_str(status), reply);
				rc = -EIO;
			}
			free(reply);
		}
	}
	free(text);
	return rc;
}

/* ------------------------------------------------------------------ the client */

int kvc_open(const char *const *servers, size_t n, unsigned timeout_ms, struct kvc **out,
	     char *err, size_t errlen)
{
	struct kvc *c = calloc(1, sizeof(*c));
	uint64_t deadline = now_ns() + (uint64_t)(timeout_ms ? timeout_ms : 5000) * 1000000u;
	int rc = -EINVAL;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	snprintf(err, errlen, "no server given");
	for (size_t i = 0; i < n; i++) {
		uint8_t status;
		char *body;
		uint32_t len;

		uint64_t now = now_ns();

		if (now >= deadline) {
			rc = -ETIMEDOUT;
			snprintf(err, errlen, "%s: %s", servers[i], strerror(-rc));
			break;
		}
		/* One deadline for all: a paused server costs what is left, not a timeout each. */
		rc = kv_call(servers[i], KV_OP_MAP, NULL, 0,
			     (unsigned)((deadline - now + 999999u) / 1000000u), &status, &body, &len);
		if (rc < 0) {
			snprintf(err, errlen, "%s: %s", servers[i], strerror(-rc));
			continue;
		}
		if (status != KV_S_OK) {
			snprintf(err, errlen, "%s: %s%s%s", servers[i], kv_status_str(status),
				 len ? ": " : "", body);
			free(body);
			rc = -EAGAIN;
			continue;
		}
		rc = kv_cluster_parse(body, len, &c->map, err, errlen);
		free(body);
		if (rc == 0)
			break;
	}
	if (rc == 0) {
		c->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (c->epfd < 0) {
			rc = -errno;
			snprintf(err, errlen, "epoll: %s", strerror(errno));
		}
	}
	if (rc < 0) {
		free(c);
		return rc;
	}
	for (unsigned p = 0; p < c->map.partitions; p++)
		c->owner[p] = kv_cluster_owner(&c->map, p);
	for (unsigned i = 0; i < KV_MAX_SERVERS; i++)
		c->conns[i].fd = -1;
	kvc_set_timeout(c, timeout_ms ? timeout_ms : 30000);
	c->free_head = UINT32_MAX;
	c->next_expiry = UINT64_MAX;
	*out = c;
	return 0;
}

const struct kv_cluster *kvc_map(const struct kvc *c)
{
	return &c->map;
}

void kvc_set_timeout(struct kvc *c, unsigned timeout_ms)
{
	c->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : 1) * 1000000u;
	/* A quarter of the deadline, within [ATTEMPT_MIN, ATTEMPT_MAX]: a paused server (or
	 * one behind a half-open connection) costs a request that much, then it goes on to
	 * the next server, as after NOT_OWNER. */
	c->attempt_ns = c->timeout_ns / 4;
	if (c->attempt_ns < ATTEMPT_MIN_NS)
		c->attempt_ns = ATTEMPT_MIN_NS;
	if (c->attempt_ns > ATTEMPT_MAX_NS)
		c->attempt_ns = ATTEMPT_MAX_NS;
}

size_t kvc_inflight(const struct kvc *c)
{
	return c->inflight;
}

void kvc_get_stats(const struct kvc *c, struct kvc_stats *out)
{
	*out = c->st;
}

static void conn_drop(struct kvc *c, unsigned i)
{
	struct sconn *sc = &c->conns[i];

	if (sc->fd >= 0) {
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, sc->fd, NULL);
		close(sc->fd);
	}
	sc->fd = -1;
	sc->connecting = sc->want_out = false;
	sc->in_len = sc->out_len = 0;
	sc->queued = sc->written = 0;
	sc->suspect = false;
}

void kvc_close(struct kvc *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < KV_MAX_SERVERS; i++) {
		conn_drop(c, i);
		free(c->conns[i].in);
		free(c->conns[i].out);
	}
	for (uint32_t i = 0; i < c->nreqs; i++)
		free(c->reqs[i].msg);
	free(c->reqs);
	close(c->epfd);
	free(c);
}

static void want_out(struct kvc *c, unsigned i, bool out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0) };

	if (c->conns[i].want_out == out)
		return;
	ev.data.u32 = i;
	epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->conns[i].fd, &ev);
	c->conns[i].want_out = out;
}

/* Queue r's bytes on server i's connection (connecting first if needed). */
static int send_to(struct kvc *c, struct req *r, unsigned i)
{
	struct sconn *sc = &c->conns[i];

	r->server = i;
	if (sc->fd < 0) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };

		sc->fd = dial(c->map.servers[i].kv);
		if (sc->fd < 0) {
			sc->fd = -1;
			return -ECONNREFUSED;
		}
		ev.data.u32 = i;
		epoll_ctl(c->epfd, EPOLL_CTL_ADD, sc->fd, &ev);
		sc->connecting = sc->want_out = true;
		c->st.connects++;
	}
	r->attempt_end = now_ns() + c->attempt_ns;
	if (r->attempt_end < c->next_expiry)
		c->next_expiry = r->attempt_end;
	/* Sent by kvc_poll (before it waits), or when the socket takes more. */
	if (kv_buf_reserve(&sc->out, &sc->out_cap, sc->out_len + r->len) < 0)
		return -ENOMEM;
	memcpy(sc->out + sc->out_len, r->msg, r->len);
	sc->out_len += r->len;
	r->off = sc->queued;
	sc->queued += r->len;
	return 0;
}

static void finish(struct kvc *c, struct req *r, uint32_t idx, int status, uint64_t version,
		   const uint8_t *value, uint32_t vlen)
{
	kvc_cb cb = r->cb;
	void *arg = r->arg;

	r->busy = false;
	r->gen++;
	r->next_free = c->free_head;
	c->free_head = idx;
	c->inflight--;
	c->completed++;
	if (cb)
		cb(arg, status, version, value, vlen);
}

/*
 * Send r to the next candidate for its partition: `from` (a server that said NOT_OWNER, or
 * whose connection was lost) is passed over. After every server was asked once, back off.
 */
static void route(struct kvc *c, struct req *r, uint32_t idx, int from, bool backoff)
{
	unsigned n = c->map.nservers;
	uint64_t now = now_ns();

	if (now >= r->deadline) {
		c->st.timeouts++;
		finish(c, r, idx, -ETIMEDOUT, 0, NULL, 0);
		return;
	}
	if (from >= 0 && c->owner[r->part] == (unsigned)from)
		c->owner[r->part] = ((unsigned)from + 1) % n;
	if (backoff || ++r->hops > n) {
		r->hops = 0;
		r->backoff = r->backoff ? r->backoff * 2 : BACKOFF_MIN_NS;
		if (r->backoff > BACKOFF_MAX_NS)
			r->backoff = BACKOFF_MAX_NS;
		r->retry_at = now + r->backoff;
		r->waiting = true;
		c->waiting++;
		return;
	}
	for (unsigned k = 0; k < n; k++) {
		unsigned i = c->owner[r->part];
		struct sconn *sc = &c->conns[i];

		/* A suspect server holds its probe: the request asks the others meanwhile (once
		 * every one said NOT_OWNER, it backs off and comes back: the probe may have been
		 * answered by then). */
		if (!sc->suspect || now >= sc->probe_until) {
			if (send_to(c, r, i) == 0) {
				if (sc->suspect)
					sc->probe_until = r->attempt_end;
				return;
			}
		}
		c->owner[r->part] = (i + 1) % n;
		if (++r->hops > n)
			break;
	}
	route(c, r, idx, -1, true);
}

static struct req *req_new(struct kvc *c, uint32_t *idx_out, size_t len)
{
	struct req *r;
	uint32_t idx;

	if (c->free_head == UINT32_MAX) {
		uint32_t n = c->nreqs ? c->nreqs * 2 : 64;
		struct req *v = realloc(c->reqs, n * sizeof(*v));

		if (!v)
			return NULL;
		memset(v + c->nreqs, 0, (n - c->nreqs) * sizeof(*v));
		for (uint32_t i = n; i-- > c->nreqs;) {
			v[i].next_free = c->free_head;
			c->free_head = i;
		}
		c->reqs = v;
		c->nreqs = n;
	}
	idx = c->free_head;
	r = &c->reqs[idx];
	if (r->cap < len) {
		uint8_t *m = realloc(r->msg, len);

		if (!m)
			return NULL;
		r->msg = m;
		r->cap = (uint32_t)len;
	}
	c->free_head = r->next_free;
	r->busy = true;
	r->waiting = false;
	r->hops = 0;
	r->backoff = 0;
	r->len = (uint32_t)len;
	r->deadline = now_ns() + c->timeout_ns;
	if (r->deadline < c->next_expiry)
		c->next_expiry = r->deadline;
	*idx_out = idx;
	return r;
}

static int submit(struct kvc *c, uint8_t op, const void *key, uint16_t klen, const void *value,
		  uint32_t vlen, kvc_cb cb, void *arg)
{
	uint32_t body = op == KV_OP_PUT ? KV_REC_HDR_SIZE + klen + vlen : klen, idx;
	struct kv_hdr h = { .len = body, .op = op };
	uint8_t *p;
	struct req *r;

	if (!klen || klen > KV_MAX_KEY || vlen > KV_MAX_VALUE)
		return -EINVAL;
	r = req_new(c, &idx, KV_HDR_SIZE + body);
	if (!r)
		return -ENOMEM;
	h.id = (uint64_t)r->gen << 32 | idx;
	kv_hdr_encode(r->msg, &h);
	p = r->msg + KV_HDR_SIZE;
	if (op == KV_OP_PUT) {
		kv_rec_hdr_encode(p, 0, klen, vlen);
		p += KV_REC_HDR_SIZE;
	}
	memcpy(p, key, klen);
	if (vlen)
		memcpy(p + klen, value, vlen);
	r->op = op;
	r->cb = cb;
	r->arg = arg;
	r->part = kv_partition_of(kv_hash(key, klen), c->map.partitions);
	c->inflight++;
	route(c, r, idx, -1, false);
	return 0;
}

int kvc_get(struct kvc *c, const void *key, uint16_t klen, kvc_cb cb, void *arg)
{
	return submit(c, KV_OP_GET, key, klen, NULL, 0, cb, arg);
}

int kvc_put(struct kvc *c, const void *key, uint16_t klen, const void *value, uint32_t vlen,
	    kvc_cb cb, void *arg)
{
	return submit(c, KV_OP_PUT, key, klen, value, vlen, cb, arg);
}

/* A PUT whose bytes (some of them) went out to a server that then did not answer it: the
 * server may have appended it, so it is never sent again (it would be applied twice, docs/kv.md
 * "Guarantees"); it fails with -KVC_EUNKNOWN. */
static void put_unknown(struct kvc *c, struct req *r, uint32_t idx)
{
	c->st.unknown++;
	finish(c, r, idx, -KVC_EUNKNOWN, 0, NULL, 0);
}

/* Server i's connection is gone: every request sent there goes on to another server, except a
 * PUT that may have reached it (its outcome is unknown). */
static void conn_lost(struct kvc *c, unsigned i)
{
	uint64_t written = c->conns[i].written;

	conn_drop(c, i);
	for (uint32_t k = 0; k < c->nreqs; k++) {
		struct req *r = &c->reqs[k];

		if (!r->busy || r->waiting || r->server != i)
			continue;
		if (r->op == KV_OP_PUT && r->off < written) {
			put_unknown(c, r, k);
			continue;
		}
		c->st.resent++;
		route(c, r, k, (int)i, false);
	}
}

static void reply(struct kvc *c, unsigned from, const struct kv_hdr *h, const uint8_t *body)
{
	uint32_t idx = (uint32_t)h->id;
	struct req *r = idx < c->nreqs ? &c->reqs[idx] : NULL;

	if (!r || !r->busy || r->waiting || r->gen != (uint32_t)(h->id >> 32) ||
	    (h->op & ~KV_REPLY) != r->op || r->server != from)
		return; /* a late answer to an attempt already given up */
	switch (h->status) {
	case KV_S_OK:
		if (h->len < 8) {
			finish(c, r, idx, -EPROTO, 0, NULL, 0);
			return;
		}
		c->owner[r->part] = from;
		finish(c, r, idx, 0, kv_get64(body), body + 8, h->len - 8);
		return;
	case KV_S_NOT_FOUND:
		c->owner[r->part] = from;
		finish(c, r, idx, -ENOENT, 0, NULL, 0);
		return;
	case KV_S_NOT_OWNER: {
		unsigned who;
		char text[32];

		c->st.not_owner++;
		/* "owner N": the server knows who holds the partition's lease now (a redirect;
		 * bounded like every retry, by the servers asked and the deadline). */
		if (h->len > 6 && h->len < sizeof(text)) {
			memcpy(text, body, h->len);
			text[h->len] = 0;
			if (sscanf(text, "owner %u", &who) == 1 && who < c->map.nservers &&
			    who != from) {
				c->st.redirects++;
				c->owner[r->part] = who;
				route(c, r, idx, -1, false);
				return;
			}
		}
		route(c, r, idx, (int)from, false);
		return;
	}
	case KV_S_UNKNOWN:
		/* The server tried to append the PUT and failed: it may be in the log. */
		c->owner[r->part] = ((unsigned)from + 1) % c->map.nservers;
		put_unknown(c, r, idx);
		return;
	case KV_S_RETRY:
		c->st.retries++;
		route(c, r, idx, -1, true);
		return;
	case KV_S_BAD:
		finish(c, r, idx, -EINVAL, 0, body, h->len);
		return;
	default:
		finish(c, r, idx, -EIO, 0, body, h->len);
		return;
	}
}

static int conn_in(struct kvc *c, unsigned i)
{
	struct sconn *sc = &c->conns[i];
	size_t off = 0;
	ssize_t n;

	if (kv_buf_reserve(&sc->in, &sc->in_cap, sc->in_len + 65536) < 0)
		return -ENOMEM;
	n = read(sc->fd, sc->in + sc->in_len, sc->in_cap - sc->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		conn_lost(c, i);
		return 0;
	}
	sc->suspect = false; /* it answers again */
	sc->in_len += (size_t)n;
	while (sc->in_len - off >= KV_HDR_SIZE) {
		struct kv_hdr h;

		if (!kv_hdr_decode(sc->in + off, &h) || !(h.op & KV_REPLY)) {
			conn_lost(c, i); /* not our protocol: drop the connection */
			return 0;
		}
		if (sc->in_len - off < KV_HDR_SIZE + h.len) {
			if (kv_buf_reserve(&sc->in, &sc->in_cap, KV_HDR_SIZE + h.len) < 0)
				return -ENOMEM;
			break;
		}
		reply(c, i, &h, sc->in + off + KV_HDR_SIZE);
		off += KV_HDR_SIZE + h.len;
	}
	memmove(sc->in, sc->in + off, sc->in_len - off);
	sc->in_len -= off;
	return 0;
}

static void conn_out(struct kvc *c, unsigned i)
{
	struct sconn *sc = &c->conns[i];
	size_t off = 0;

	if (sc->connecting) {
		int err = 0;
		socklen_t l = sizeof(err);

		getsockopt(sc->fd, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err) {
			conn_lost(c, i);
			return;
		}
		sc->connecting = false;
	}
	while (off < sc->out_len) {
		ssize_t n = send(sc->fd, sc->out + off, sc->out_len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			conn_lost(c, i);
			return;
		}
		off += (size_t)n;
		sc->written += (uint64_t)n;
	}
	memmove(sc->out, sc->out + off, sc->out_len - off);
	sc->out_len -= off;
	want_out(c, i, sc->out_len > 0);
}

/* Requests whose back-off ended go out again; returns the earliest pending retry time. */
static uint64_t retry_due(struct kvc *c, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (uint32_t k = 0; k < c->nreqs && c->waiting; k++) {
		struct req *r = &c->reqs[k];

		if (!r->busy || !r->waiting)
			continue;
		if (r->retry_at <= now) {
			r->waiting = false;
			c->waiting--;
			route(c, r, k, -1, false);
		} else if (r->retry_at < next) {
			next = r->retry_at;
		}
	}
	return next;
}

/*
 * Fail the requests whose deadline passed, wherever they are: waiting to be sent again, queued
 * on a connection, or sent to a server that does not answer (paused, half-open, not reading);
 * send a request its server left unanswered for attempt_ns on to the next server.
 * A late answer to one is recognised by its generation and dropped. A scan runs only once the
 * earliest deadline is due; returns the next one.
 */
static uint64_t expire(struct kvc *c, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	if (now < c->next_expiry)
		return c->next_expiry;
	c->next_expiry = UINT64_MAX; /* lowered by requests the callbacks submit */
	for (uint32_t k = 0; k < c->nreqs; k++) {
		struct req *r = &c->reqs[k];

		if (!r->busy)
			continue;
		if (r->deadline > now && !r->waiting && r->attempt_end <= now) {
			/* Its server keeps it unanswered: the next one (a late answer from this
			 * one is dropped: r->server changes). Not a PUT: that one may be applied
			 * yet (its bytes may go out still); it fails, its outcome unknown. */
			c->st.unanswered++;
			c->conns[r->server].suspect = true;
			if (r->op == KV_OP_PUT) {
				if (c->owner[r->part] == r->server)
					c->owner[r->part] = (r->server + 1) % c->map.nservers;
				put_unknown(c, r, k);
				continue;
			}
			route(c, r, k, (int)r->server, false);
			r = &c->reqs[k];
			if (!r->busy)
				continue;
		}
		if (r->deadline > now) {
			if (r->deadline < next)
				next = r->deadline;
			if (!r->waiting && r->attempt_end < next)
				next = r->attempt_end;
			continue;
		}
		if (r->waiting) {
			r->waiting = false;
			c->waiting--;
		}
		c->st.timeouts++;
		finish(c, r, k, -ETIMEDOUT, 0, NULL, 0);
	}
	if (next < c->next_expiry)
		c->next_expiry = next;
	return c->next_expiry;
}

int kvc_poll(struct kvc *c, long timeout_us)
{
	struct epoll_event evs[KV_MAX_SERVERS];
	uint64_t now = now_ns(), next, dl, before = c->completed;
	int64_t wait_ns = timeout_us < 0 ? -1 : (int64_t)timeout_us * 1000;
	struct timespec ts;
	int n;

	next = retry_due(c, now);
	dl = expire(c, now);
	if (dl < next)
		next = dl <= now ? now : dl;
	for (unsigned i = 0; i < c->map.nservers; i++)
		if (c->conns[i].fd >= 0 && c->conns[i].out_len && !c->conns[i].connecting)
			conn_out(c, i);
	if (c->completed != before)
		wait_ns = 0; /* something finished (timed out) already */
	if (next != UINT64_MAX && (wait_ns < 0 || (int64_t)(next - now) < wait_ns))
		wait_ns = (int64_t)(next - now);
	ts.tv_sec = wait_ns / 1000000000;
	ts.tv_nsec = wait_ns % 1000000000;
	/* epoll_pwait2: a timeout in nanoseconds (an open-loop driver paces requests closer than
	 * epoll_wait's milliseconds). */
	n = epoll_pwait2(c->epfd, evs, KV_MAX_SERVERS, wait_ns < 0 ? NULL : &ts, NULL);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int k = 0; k < n; k++) {
		unsigned i = evs[k].data.u32;

		if (c->conns[i].fd < 0)
			continue;
		if (evs[k].events & (EPOLLERR | EPOLLHUP) && c->conns[i].connecting) {
			conn_lost(c, i);
			continue;
		}
		if (evs[k].events & EPOLLOUT)
			conn_out(c, i);
		if (c->conns[i].fd >= 0 && (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
			int rc = conn_in(c, i);

			if (rc < 0)
				return rc;
		}
	}
	now = now_ns();
	retry_due(c, now);
	expire(c, now);
	return (int)(c->completed - before);
}

const char *kvc_strerror(int status)
{
	if (status == -KVC_EUNKNOWN)
		return "outcome unknown: the PUT may or may not have been applied";
	return strerror(status < 0 ? -status : status);
}

/* ------------------------------------------------------------------ synchronous helpers */

struct sync_res {
	bool done;
	int status;
	uint64_t version;
	uint8_t *buf;
	uint32_t cap, vlen;
};

static void sync_cb(void *arg, int status, uint64_t version, const uint8_t *value, uint32_t vlen)
{
	struct sync_res *s = arg;

	s->done = true;
	s->status = status;
	s->version = version;
	s->vlen = vlen;
	if (s->buf && value)
		memcpy(s->buf, value, vlen < s->cap ? vlen : s->cap);
}

static int sync_wait(struct kvc *c, struct sync_res *s)
{
	while (!s->done) {
		int rc = kvc_poll(c, -1);

		if (rc < 0)
			return rc;
	}
	return s->status;
}

int kvc_get_sync(struct kvc *c, const void *key, uint16_t klen, void *buf, uint32_t cap,
		 uint32_t *vlen, uint64_t *version)
{
	struct sync_res s = { .buf = buf, .cap = cap };
	int rc = kvc_get(c, key, klen, sync_cb, &s);

	if (rc < 0)
		return rc;
	rc = sync_wait(c, &s);
	if (vlen)
		*vlen = s.vlen;
	if (version)
		*version = s.version;
	return rc;
}

int kvc_put_sync(struct kvc *c, const void *key, uint16_t klen, const void *value,
		 uint32_t vlen, uint64_t *version)
{
	struct sync_res s = { 0 };
	int rc = kvc_put(c, key, klen, value, vlen, sync_cb, &s);

	if (rc < 0)
		return rc;
	rc = sync_wait(c, &s);
	if (version)
		*version = s.version;
	return rc;
}
