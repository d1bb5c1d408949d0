/*
 * tests/lib/tcpproxy.c — a TCP proxy that a test cuts (tcpproxy.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tap.h"
#include "tcpproxy.h"

#define MAXC 64

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
};

static void drop(struct tcpproxy *px, int i)
{
	close(px->fd[i][0]);
	close(px->fd[i][1]);
	px->fd[i][0] = px->fd[i][1] = -1;
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

/* Copy what is readable on from to to; false when the pair is done. */
static bool relay(int from, int to)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof(buf));

	if (n <= 0)
		return false;
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(to, buf + off, (size_t)(n - off));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		off += w;
	}
	return true;
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

			if (pf[k].revents && px->fd[i][0] >= 0 &&
			    !relay(px->fd[i][s], px->fd[i][!s]))
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

unsigned tcpproxy_accepted(struct tcpproxy *px)
{
	unsigned n;

	pthread_mutex_lock(&px->mu);
	n = px->accepted;
	pthread_mutex_unlock(&px->mu);
	return n;
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
