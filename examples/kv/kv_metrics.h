/*
 * examples/kv/kv_metrics.h — `twkv serve --metrics [HOST:]PORT`: the service's counters (those
 * of `twkv stats`), its embedded backup's and its partitions' logs' (the library's
 * tailwind/metrics.h) and the process's, in the Prometheus text format on /metrics
 * (docs/metrics.md). The HTTP server (libmicrohttpd) runs on a thread of its own; the text is
 * written on the serving thread, which owns the service's counters: the HTTP thread asks for
 * it through the server's eventfd and waits for it (docs/kv.md, "Threads").
 */
#ifndef TWKV_METRICS_H
#define TWKV_METRICS_H

#include <stddef.h>

struct kv_server;

/* 0 when `spec` ("PORT", "HOST:PORT", "[IPV6]:PORT") can be served by this build; else -1 and
 * the reason in why (built without libmicrohttpd, a malformed address). */
int kv_metrics_check(const char *spec, char *why, size_t wlen);

/* Listen on spec (a bare PORT: 127.0.0.1; 0: an ephemeral port) and serve /metrics of s.
 * Returns 0 and the bound address in addr, or -1 and why. Once per process. */
int kv_metrics_start(struct kv_server *s, const char *spec, char *addr, size_t alen, char *why,
		     size_t wlen);

/* On the serving thread, after its eventfd fired: write the text a scrape asked for, if one
 * did (else one atomic load). */
void kv_metrics_serve(struct kv_server *s);

/* Stop the HTTP server (a scrape waiting for the serving thread gets 503). Idempotent. */
void kv_metrics_stop(void);

#endif
