/*
 * tools/twd_metrics.c — twd's /metrics endpoint (twd_metrics.h). libmicrohttpd runs the HTTP
 * side on its own thread (MHD_USE_INTERNAL_POLLING_THREAD): a scrape costs the backup's
 * progress thread nothing, and reads the counters through tw_backup_metrics_text, which takes
 * the statistics lock for one struct copy. Why a library and not a hand-written server:
 * docs/metrics.md, "Why libmicrohttpd".
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <tailwind/backup.h>
#include <tailwind/metrics.h>

#include "twd_metrics.h"

#ifdef TW_HAVE_MHD
#include <microhttpd.h>
#endif

/* "PORT", "HOST:PORT", "[V6]:PORT" into host and port; a bare PORT is 127.0.0.1's. */
static int split(const char *spec, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(spec, ':'), *num = spec;
	size_t n;

	if (!colon) {
		snprintf(host, hlen, "127.0.0.1");
		num = spec;
	} else if (spec[0] == '[') {
		const char *close = strchr(spec, ']');

		if (!close || close + 1 != colon || (n = (size_t)(close - spec - 1)) == 0 || n >= hlen)
			return -1;
		memcpy(host, spec + 1, n);
		host[n] = '\0';
	} else {
		n = (size_t)(colon - spec);
		if (n == 0 || n >= hlen || memchr(spec, ':', n))
			return -1; /* ":PORT", or an IPv6 address without brackets */
		memcpy(host, spec, n);
		host[n] = '\0';
	}
	if (colon)
		num = colon + 1;
	n = strlen(num);
	if (n == 0 || n > 5 || n >= plen || strspn(num, "0123456789") != n || atoi(num) > 65535)
		return -1;
	memcpy(port, num, n + 1);
	return 0;
}

#ifdef TW_HAVE_MHD

static struct MHD_Daemon *daemon_;

/* The exposition: the process's families, then the backup's. Allocated (libmicrohttpd frees
 * it once sent); NULL when out of memory. */
static char *render(struct tw_backup *b, size_t *len_out)
{
	size_t cap = 16384;

	for (int tries = 0; tries < 8; tries++) {
		char *buf = malloc(cap);
		size_t n1 = 0, n2 = 0;
		int rc1, rc2;

		if (!buf)
			return NULL;
		rc1 = tw_process_metrics_text(buf, cap, &n1);
		rc2 = rc1 == 0 ? tw_backup_metrics_text(b, buf + n1, cap - n1, &n2)
			       : tw_backup_metrics_text(b, NULL, 0, &n2);
		if (rc1 == 0 && rc2 == 0) {
			*len_out = n1 + n2;
			return buf;
		}
		free(buf);
		cap = n1 + n2 + 4096; /* what it needed, and room to grow */
	}
	return NULL;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text,
			     char *owned, size_t len)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (owned)
		r = MHD_create_response_from_buffer(len, owned, MHD_RESPMEM_MUST_FREE);
	else
		r = MHD_create_response_from_buffer(strlen(text), (void *)text,
						    MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(owned);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				owned ? "text/plain; version=0.0.4; charset=utf-8" :
					"text/plain; charset=utf-8");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	char *text;
	size_t len;

	(void)version;
	(void)upload;
	(void)state;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics is served\n", NULL,
			     0);
	if (*upload_len)
		return MHD_NO;
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, "twd serves its counters at /metrics\n", NULL,
			     0);
	text = render(cls, &len);
	if (!text)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL, 0);
	return reply(c, MHD_HTTP_OK, NULL, text, len);
}

int twd_metrics_check(const char *spec, char *why, size_t wlen)
{
	char host[256], port[8];

	if (split(spec, host, sizeof(host), port, sizeof(port)) != 0) {
		snprintf(why, wlen, "expected PORT, HOST:PORT or [IPV6]:PORT (a bare PORT listens "
			 "on 127.0.0.1; port 0 picks a free one)");
		return -1;
	}
	return 0;
}

int twd_metrics_start(const char *spec, struct tw_backup *b, char *addr, size_t alen, char *why,
		      size_t wlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	char host[256], port[8], numeric[NI_MAXHOST];
	const union MHD_DaemonInfo *info;
	int rc;

	if (twd_metrics_check(spec, why, wlen) != 0)
		return -1;
	(void)split(spec, host, sizeof(host), port, sizeof(port));
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(why, wlen, "%s: %s", host, gai_strerror(rc));
		return -1;
	}
	daemon_ = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD |
				   (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				   0, NULL, NULL, handle, b,
				   MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				   MHD_OPTION_CONNECTION_LIMIT, 64u,
				   MHD_OPTION_CONNECTION_TIMEOUT, 10u,
				   MHD_OPTION_END);
	if (!daemon_) {
		rc = errno;
		freeaddrinfo(ai);
		snprintf(why, wlen, "cannot listen on %s:%s: %s (another program on the port? "
			 "give another, or 0 for a free one)", host, port,
			 rc ? strerror(rc) : "libmicrohttpd refused");
		return -1;
	}
	if (getnameinfo(ai->ai_addr, ai->ai_addrlen, numeric, sizeof(numeric), NULL, 0,
			NI_NUMERICHOST) != 0)
		snprintf(numeric, sizeof(numeric), "%s", host);
	info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(addr, alen, ai->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", numeric,
		 info ? (unsigned)info->port : (unsigned)atoi(port));
	freeaddrinfo(ai);
	return 0;
}

void twd_metrics_stop(void)
{
	if (daemon_)
		MHD_stop_daemon(daemon_);
	daemon_ = NULL;
}

#else /* !TW_HAVE_MHD */

int twd_metrics_check(const char *spec, char *why, size_t wlen)
{
	(void)spec;
	snprintf(why, wlen, "this twd was built without libmicrohttpd, so it cannot serve "
		 "metrics (install libmicrohttpd-dev and build again; meson -Dmetrics=enabled "
		 "makes its absence an error)");
	(void)split;
	return -1;
}

int twd_metrics_start(const char *spec, struct tw_backup *b, char *addr, size_t alen, char *why,
		      size_t wlen)
{
	(void)b;
	(void)addr;
	(void)alen;
	return twd_metrics_check(spec, why, wlen);
}

void twd_metrics_stop(void)
{
}

#endif
