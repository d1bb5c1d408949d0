/*
 * tests/lib/tcpproxy.c — a TCP proxy that a test cuts (tcpproxy.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tap.h"
#include "tcpproxy.h"

#define MAXC 64

/*
 * One direction of a ZooKeeper connection, frame by frame (a 4-byte big-endian length, then
 * the body): the first frame is the session's connect request or answer, which has no header;
 * after it a request starts with its xid and op type, an answer with its xid. A request of
 * the armed type has the start of its body kept (b) until the path in it is known.
 */
struct zkscan {
	uint8_t h[12];
	unsigned hn;    /* header bytes of the current frame seen */
	uint32_t left;  /* body bytes of the current frame still to come */
	bool started;   /* past the connect frame */
	bool keep;      /* keeping the body's start: a request of the armed type */
	uint8_t b[256];
	unsigned bn, bwant;
};

struct tcpproxy {
	int lfd, evfd, port;
	struct sockaddr_in up;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool want_cut, cut, stop;
	unsigned applied, requested; /* cut/heal requests applied by the thread */
	unsigned accepted;
	int fd[MAXC][2];             /* [client, upstream] pairs; -1: free */
	struct zkscan zs[MAXC][2];   /* what each direction carries, as ZooKeeper frames */
	/* tcpproxy_lose_answer: armed for lose_left more requests of lose_op (on a path
	 * containing lose_path, if set); pending on one pair for the answer to lose_xid. */
	unsigned lose_left;
	bool lose_pending;
	int32_t lose_op, lose_xid;
	char lose_path[128];
	int lose_pair;
	unsigned lost;
};

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A kept request's start is complete: its path (the body's first field, a length-prefixed
 * string) against the armed one. px->mu held. */
static bool path_matches(const struct tcpproxy *px, const struct zkscan *z)
{
	uint32_t len = z->bn >= 4 ? be32(z->b) : 0;
	size_t want = strlen(px->lose_path);

	if (!want)
		return true;
	if (len > z->bn - 4)
		len = z->bn - 4; /* a path longer than what is kept: its start */
	for (size_t k = 0; k + want <= len; k++)
		if (!memcmp(z->b + 4 + k, px->lose_path, want))
			return true;
	return false;
}

/* The kept request of pair i is whole enough: arm the loss of its answer if it is the one. */
static void request_seen(struct tcpproxy *px, int i, struct zkscan *z)
{
	pthread_mutex_lock(&px->mu);
	if (px->lose_left && !px->lose_pending && path_matches(px, z)) {
		px->lose_left--;
		px->lose_pending = true;
		px->lose_pair = i;
		px->lose_xid = (int32_t)be32(z->h + 4);
	}
	pthread_mutex_unlock(&px->mu);
	z->keep = false;
}

/*
 * Follow n bytes of direction s (0: client to server) of pair i. A request of the armed op
 * type on the armed path (client side) makes its xid the answer to lose; in the server's
 * direction, returns the offset of the first byte of that answer's frame (0 when its frame
 * began in an earlier read), or -1.
 */
static ssize_t zk_follow(struct tcpproxy *px, int i, int s, const uint8_t *p, size_t n)
{
	struct zkscan *z = &px->zs[i][s];
	size_t pos = 0, start = 0;

	while (pos < n) {
		unsigned want = !z->started ? 4 : s == 0 ? 12 : 8;
		bool hit;

		if (z->left) {
			size_t k = z->left < n - pos ? z->left : n - pos;

			if (z->keep) {
				size_t c = z->bwant - z->bn < k ? z->bwant - z->bn : k;

				memcpy(z->b + z->bn, p + pos, c);
				z->bn += (unsigned)c;
				if (z->bn == z->bwant)
					request_seen(px, i, z);
			}
			pos += k;
			z->left -= (uint32_t)k;
			continue;
		}
		if (!z->hn)
			start = pos;
		z->h[z->hn++] = p[pos++];
		if (z->hn < want)
			continue;
		/* A whole header: the body is the frame's length less the header past it. */
		z->left = be32(z->h) > want - 4 ? be32(z->h) - (want - 4) : 0;
		z->hn = 0;
		if (!z->started) {
			z->started = true;
			continue;
		}
		pthread_mutex_lock(&px->mu);
		hit = s == 0 ? px->lose_left && !px->lose_pending &&
				       (int32_t)be32(z->h + 8) == px->lose_op
			     : px->lose_pending && px->lose_pair == i &&
				       (int32_t)be32(z->h + 4) == px->lose_xid;
		if (hit && s == 1) {
			px->lose_pending = false;
			px->lost++;
		}
		pthread_mutex_unlock(&px->mu);
		if (hit && s == 1)
			return (ssize_t)start;
		if (hit) {
			z->keep = true;
			z->bn = 0;
			z->bwant = z->left < sizeof(z->b) ? z->left : (unsigned)sizeof(z->b);
			if (!z->bwant)
				request_seen(px, i, z);
		}
	}
	return -1;
}

static void drop(struct tcpproxy *px, int i)
{
	close(px->fd[i][0]);
	close(px->fd[i][1]);
	px->fd[i][0] = px->fd[i][1] = -1;
	memset(px->zs[i], 0, sizeof(px->zs[i]));
}

static void accept_one(struct tcpproxy *px, bool cut)
{
	int c = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC), u, i;

	if (c < 0)
		return;
	pthread_mutex_lock(&px->mu);
	px->accepted++;
	pthread_mutex_unlock(&px->mu);
	for (i = 0; i < MAXC && px->fd[i][0] >= 0; i++)
		;
	if (cut || i == MAXC) {
		close(c); /* the partition: the client's try fails at once */
		return;
	}
	u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (u < 0 || connect(u, (struct sockaddr *)&px->up, sizeof(px->up)) < 0) {
		if (u >= 0)
			close(u);
		close(c);
		return;
	}
	px->fd[i][0] = c;
	px->fd[i][1] = u;
}

/* Copy what is readable on direction s of pair i to its other end; false when the pair is
 * done (closed, or the answer tcpproxy_lose_answer waits for is about to pass: it does not). */
static bool relay(struct tcpproxy *px, int i, int s)
{
	uint8_t buf[65536];
	ssize_t n = read(px->fd[i][s], buf, sizeof(buf)), cut;
	int to = px->fd[i][!s];

	if (n <= 0)
		return false;
	cut = zk_follow(px, i, s, buf, (size_t)n);
	if (cut >= 0)
		n = cut; /* what came before the answer passes; the answer and the pair do not */
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(to, buf + off, (size_t)(n - off));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		off += w;
	}
	return cut < 0;
}

static void *proxy_main(void *arg)
{
	struct tcpproxy *px = arg;

	for (;;) {
		struct pollfd pf[2 + 2 * MAXC];
		int map[2 + 2 * MAXC], n = 0;
		bool cut, stop;

		pthread_mutex_lock(&px->mu);
		stop = px->stop;
		if (px->want_cut != px->cut || px->applied != px->requested) {
			px->cut = px->want_cut;
			if (px->cut)
				for (int i = 0; i < MAXC; i++)
					if (px->fd[i][0] >= 0)
						drop(px, i);
			px->applied = px->requested;
			pthread_cond_broadcast(&px->cv);
		}
		cut = px->cut;
		pthread_mutex_unlock(&px->mu);
		if (stop)
			break;
		pf[n] = (struct pollfd){ .fd = px->evfd, .events = POLLIN };
		map[n++] = -1;
		pf[n] = (struct pollfd){ .fd = px->lfd, .events = POLLIN };
		map[n++] = -1;
		for (int i = 0; i < MAXC; i++)
			for (int s = 0; s < 2 && px->fd[i][0] >= 0; s++) {
				pf[n] = (struct pollfd){ .fd = px->fd[i][s], .events = POLLIN };
				map[n++] = i * 2 + s;
			}
		if (poll(pf, (nfds_t)n, -1) < 0 && errno != EINTR)
			TAP_FATAL("tcpproxy: poll: %s", strerror(errno));
		if (pf[0].revents) {
			uint64_t v;

			if (read(px->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				TAP_FATAL("tcpproxy: eventfd: %s", strerror(errno));
		}
		for (int k = 2; k < n; k++) {
			int i = map[k] / 2, s = map[k] % 2;

			if (pf[k].revents && px->fd[i][0] >= 0 && !relay(px, i, s))
				drop(px, i);
		}
		if (pf[1].revents)
			accept_one(px, cut);
	}
	for (int i = 0; i < MAXC; i++)
		if (px->fd[i][0] >= 0)
			drop(px, i);
	return NULL;
}

static void wake(struct tcpproxy *px)
{
	uint64_t one = 1;

	if (write(px->evfd, &one, sizeof(one)) < 0)
		TAP_FATAL("tcpproxy: eventfd: %s", strerror(errno));
}

struct tcpproxy *tcpproxy_start(const char *up_host, int up_port)
{
	struct tcpproxy *px = calloc(1, sizeof(*px));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	if (!px)
		TAP_FATAL("tcpproxy: out of memory");
	memset(px->fd, -1, sizeof(px->fd));
	px->up.sin_family = AF_INET;
	px->up.sin_port = htons((uint16_t)up_port);
	if (inet_pton(AF_INET, up_host, &px->up.sin_addr) != 1)
		TAP_FATAL("tcpproxy: bad upstream address %s", up_host);
	px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	px->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (px->lfd < 0 || px->evfd < 0 || bind(px->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(px->lfd, 16) < 0 || getsockname(px->lfd, (struct sockaddr *)&a, &len) < 0)
		TAP_FATAL("tcpproxy: listen: %s", strerror(errno));
	px->port = ntohs(a.sin_port);
	pthread_mutex_init(&px->mu, NULL);
	pthread_cond_init(&px->cv, NULL);
	if (pthread_create(&px->thr, NULL, proxy_main, px))
		TAP_FATAL("tcpproxy: thread");
	return px;
}

int tcpproxy_port(const struct tcpproxy *px)
{
	return px->port;
}

void tcpproxy_cut(struct tcpproxy *px, bool cut)
{
	unsigned want;

	pthread_mutex_lock(&px->mu);
	px->want_cut = cut;
	want = ++px->requested;
	pthread_mutex_unlock(&px->mu);
	wake(px);
	pthread_mutex_lock(&px->mu);
	while (px->applied != want)
		pthread_cond_wait(&px->cv, &px->mu);
	pthread_mutex_unlock(&px->mu);
}

/* A counter the relay thread keeps, read under its lock. */
static unsigned counter(struct tcpproxy *px, const unsigned *v)
{
	unsigned n;

	pthread_mutex_lock(&px->mu);
	n = *v;
	pthread_mutex_unlock(&px->mu);
	return n;
}

unsigned tcpproxy_accepted(struct tcpproxy *px)
{
	return counter(px, &px->accepted);
}

void tcpproxy_lose_answer(struct tcpproxy *px, int32_t zk_op, const char *path_part,
			  unsigned count)
{
	pthread_mutex_lock(&px->mu);
	px->lose_op = zk_op;
	snprintf(px->lose_path, sizeof(px->lose_path), "%s", path_part ? path_part : "");
	px->lose_left = count;
	pthread_mutex_unlock(&px->mu);
}

unsigned tcpproxy_answers_lost(struct tcpproxy *px)
{
	return counter(px, &px->lost);
}

void tcpproxy_stop(struct tcpproxy *px)
{
	if (!px)
		return;
	pthread_mutex_lock(&px->mu);
	px->stop = true;
	pthread_mutex_unlock(&px->mu);
	wake(px);
	pthread_join(px->thr, NULL);
	close(px->lfd);
	close(px->evfd);
	pthread_mutex_destroy(&px->mu);
	pthread_cond_destroy(&px->cv);
	free(px);
}
