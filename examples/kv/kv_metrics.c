/*
 * examples/kv/kv_metrics.c — /metrics of `twkv serve` (kv_metrics.h): what a service built on
 * libtailwind does to put the library's counters beside its own on one endpoint. The library
 * writes its families (tw_backup_metrics_text, tw_primary_metrics_text for every log served
 * here, tw_process_metrics_text); this file adds the service's (twkv_*) and serves the whole
 * with libmicrohttpd. The HTTP side mirrors tools/twd_metrics.c: an example builds against the
 * installed library alone (examples/kv/Makefile), so it does not share twd's source.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/metrics.h>

#include "kv_metrics.h"
#include "kv_server_int.h"

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
			return -1;
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

/* ------------------------------------------------------------------ the text (serving thread) */

struct text {
	char *buf;
	size_t len, cap;
	bool short_; /* a writer said -ENOSPC: grow and write again */
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(t->buf + t->len, t->len < t->cap ? t->cap - t->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (t->len + (size_t)n >= t->cap)
		t->short_ = true;
	else
		t->len += (size_t)n;
}

/* The library's writers append at t->len. */
static void add_lib(struct text *t, int rc, const size_t *n)
{
	if (rc == 0)
		t->len += *n;
	else
		t->short_ = true;
}

static void counter(struct text *t, const char *name, const char *help, uint64_t v)
{
	add(t, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name, v);
}

static void gauge(struct text *t, const char *name, const char *help, uint64_t v)
{
	add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %" PRIu64 "\n", name, help, name, name, v);
}

/* One family with a sample per partition served here. */
#define PER_PART(t, s, name, type, help, expr)                                                 \
	do {                                                                                   \
		add((t), "# HELP %s %s\n# TYPE %s %s\n", (name), (help), (name), (type));      \
		for (unsigned i_ = 0; i_ < (s)->map.partitions; i_++) {                         \
			const struct part *pt = &(s)->parts[i_];                               \
			if (pt->state == PART_SERVING)                                         \
				add((t), "%s{partition=\"%u\"} %" PRIu64 "\n", (name), i_,      \
				    (uint64_t)(expr));                                         \
		}                                                                              \
	} while (0)

static void write_text(struct kv_server *s, struct text *t)
{
	static const char *const role[KV_ROLES] = { "serve", "replicate", "backup", "other" };
	struct tw_primary *logs[KV_MAX_PARTITIONS];
	uint64_t cpu[KV_ROLES];
	size_t nlogs = 0, n = 0;
	int rc;

	rc = tw_process_metrics_text(t->buf + t->len, t->cap - t->len, &n);
	add_lib(t, rc, &n);
	counter(t, "twkv_gets_total", "GET requests served.", s->gets);
	counter(t, "twkv_puts_total", "PUT requests acknowledged.", s->puts);
	counter(t, "twkv_not_owner_total",
		"Requests for a partition this server does not serve (the client retries "
		"elsewhere).", s->not_owner);
	counter(t, "twkv_retries_total", "Requests answered with RETRY.", s->retries);
	counter(t, "twkv_bad_requests_total", "Malformed requests.", s->bad);
	counter(t, "twkv_takeovers_total", "Partitions taken over from another server.",
		s->takeovers);
	gauge(t, "twkv_memory_budget_bytes", "Log memory budget of the partitions (--memory).",
	      s->cfg.memory);
	gauge(t, "twkv_memory_used_bytes", "Log memory held by the partitions.", kv_mem_used(s));
	gauge(t, "twkv_memory_used_max_bytes", "Most log memory held at once.", s->mem_peak);
	kv_cpu_by_role(s, cpu);
	add(t, "# HELP twkv_cpu_seconds_total CPU time by role of the thread.\n"
	       "# TYPE twkv_cpu_seconds_total counter\n");
	for (unsigned i = 0; i < KV_ROLES; i++)
		add(t, "twkv_cpu_seconds_total{role=\"%s\"} %.9g\n", role[i], (double)cpu[i] / 1e9);
	PER_PART(t, s, "twkv_partition_keys", "gauge", "Keys in the partition's index.",
		 pt->idx.count);
	PER_PART(t, s, "twkv_partition_puts_total", "counter", "PUTs acknowledged.", pt->puts);
	PER_PART(t, s, "twkv_partition_gets_total", "counter", "GETs served.", pt->gets);
	PER_PART(t, s, "twkv_partition_cleaner_passes_total", "counter",
		 "Passes of the cleaner over the index.", pt->passes);
	PER_PART(t, s, "twkv_partition_relocated_total", "counter",
		 "Records the cleaner appended again.", pt->relocated);
	PER_PART(t, s, "twkv_partition_relocated_bytes_total", "counter",
		 "Bytes of those records.", pt->relocated_bytes);
	PER_PART(t, s, "twkv_partition_segments_freed_total", "counter",
		 "Segments the cleaner freed.", pt->segments_freed);
	rc = tw_backup_metrics_text(s->backup, t->buf + t->len, t->cap - t->len, &n);
	add_lib(t, rc, &n);
	for (unsigned i = 0; i < s->map.partitions; i++)
		if (s->parts[i].state == PART_SERVING && s->parts[i].p)
			logs[nlogs++] = s->parts[i].p;
	rc = tw_primary_metrics_text(logs, nlogs, t->buf + t->len, t->cap - t->len, &n);
	add_lib(t, rc, &n);
}

/* The whole exposition, allocated; NULL when out of memory. */
static char *render(struct kv_server *s, size_t *len_out)
{
	struct text t = { .cap = 32768 };

	for (int tries = 0; tries < 8; tries++, t.cap *= 2) {
		t.buf = malloc(t.cap);
		if (!t.buf)
			return NULL;
		t.len = 0;
		t.short_ = false;
		write_text(s, &t);
		if (!t.short_) {
			*len_out = t.len;
			return t.buf;
		}
		free(t.buf);
	}
	return NULL;
}

#ifdef TW_HAVE_MHD

/* The hand-over between the HTTP thread (asks) and the serving thread (writes). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int want;          /* a scrape waits (atomic: the serving thread's test) */
	char *text;        /* written by the serving thread, taken by the HTTP thread */
	size_t len;
	bool stopping;
	struct kv_server *s;
	struct MHD_Daemon *d;
} m = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

void kv_metrics_serve(struct kv_server *s)
{
	char *text;
	size_t len = 0;

	if (!__atomic_load_n(&m.want, __ATOMIC_ACQUIRE))
		return;
	text = render(s, &len);
	pthread_mutex_lock(&m.mu);
	free(m.text);
	m.text = text;
	m.len = len;
	__atomic_store_n(&m.want, 0, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&m.cv);
	pthread_mutex_unlock(&m.mu);
}

/* Ask the serving thread for the text and wait up to 5 s. NULL: no answer (stopping, busy). */
static char *ask(size_t *len)
{
	struct timespec until;
	uint64_t one = 1;
	char *text = NULL;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&m.mu);
	free(m.text);
	m.text = NULL;
	__atomic_store_n(&m.want, 1, __ATOMIC_RELEASE);
	if (write(m.s->efd, &one, sizeof(one)) < 0)
		perror("twkv: metrics: eventfd");
	while (!m.text && !m.stopping &&
	       pthread_cond_timedwait(&m.cv, &m.mu, &until) != ETIMEDOUT)
		;
	text = m.text;
	*len = m.len;
	m.text = NULL;
	pthread_mutex_unlock(&m.mu);
	return text;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *msg,
			     char *owned, size_t len)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (owned)
		r = MHD_create_response_from_buffer(len, owned, MHD_RESPMEM_MUST_FREE);
	else
		r = MHD_create_response_from_buffer(strlen(msg), (void *)msg,
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
	size_t len = 0;

	(void)cls;
	(void)version;
	(void)upload;
	(void)state;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics is served\n", NULL,
			     0);
	if (*upload_len)
		return MHD_NO;
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, "twkv serves its counters at /metrics\n", NULL,
			     0);
	text = ask(&len);
	if (!text)
		return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE,
			     "the serving thread did not answer (stopping, or busy for 5 s)\n",
			     NULL, 0);
	return reply(c, MHD_HTTP_OK, NULL, text, len);
}

int kv_metrics_check(const char *spec, char *why, size_t wlen)
{
	char host[256], port[8];

	if (split(spec, host, sizeof(host), port, sizeof(port)) != 0) {
		snprintf(why, wlen, "expected PORT, HOST:PORT or [IPV6]:PORT (a bare PORT listens "
			 "on 127.0.0.1; port 0 picks a free one)");
		return -1;
	}
	return 0;
}

int kv_metrics_start(struct kv_server *s, const char *spec, char *addr, size_t alen, char *why,
		     size_t wlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	char host[256], port[8], numeric[NI_MAXHOST];
	const union MHD_DaemonInfo *info;
	int rc;

	if (kv_metrics_check(spec, why, wlen) != 0)
		return -1;
	(void)split(spec, host, sizeof(host), port, sizeof(port));
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(why, wlen, "%s: %s", host, gai_strerror(rc));
		return -1;
	}
	m.s = s;
	m.d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD |
			       (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
			       0, NULL, NULL, handle, NULL,
			       MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			       MHD_OPTION_CONNECTION_LIMIT, 64u,
			       MHD_OPTION_CONNECTION_TIMEOUT, 10u,
			       MHD_OPTION_END);
	if (!m.d) {
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
	info = MHD_get_daemon_info(m.d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(addr, alen, ai->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", numeric,
		 info ? (unsigned)info->port : (unsigned)atoi(port));
	freeaddrinfo(ai);
	return 0;
}

void kv_metrics_stop(void)
{
	pthread_mutex_lock(&m.mu);
	m.stopping = true;
	pthread_cond_broadcast(&m.cv);
	pthread_mutex_unlock(&m.mu);
	if (m.d)
		MHD_stop_daemon(m.d);
	m.d = NULL;
	free(m.text);
	m.text = NULL;
}

#else /* !TW_HAVE_MHD */

int kv_metrics_check(const char *spec, char *why, size_t wlen)
{
	(void)spec;
	(void)split;
	(void)render;
	snprintf(why, wlen, "this twkv was built without libmicrohttpd, so it cannot serve "
		 "metrics (install libmicrohttpd-dev and build again)");
	return -1;
}

int kv_metrics_start(struct kv_server *s, const char *spec, char *addr, size_t alen, char *why,
		     size_t wlen)
{
	(void)s;
	(void)addr;
	(void)alen;
	return kv_metrics_check(spec, why, wlen);
}

void kv_metrics_serve(struct kv_server *s)
{
	(void)s;
}

void kv_metrics_stop(void)
{
}

#endif
