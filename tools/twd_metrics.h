/*
 * tools/twd_metrics.h — twd's /metrics endpoint (--metrics ADDR:PORT): the backup's and the
 * process's counters in the Prometheus text format (tailwind/metrics.h), served by
 * libmicrohttpd on a thread of its own (docs/metrics.md).
 */
#ifndef TWD_METRICS_H
#define TWD_METRICS_H

#include <stddef.h>

struct tw_backup;

/* Whether `spec` ("PORT", "HOST:PORT", "[IPV6]:PORT") can be served by this build: 0, or -1
 * with the reason in why (built without libmicrohttpd, a malformed address). */
int twd_metrics_check(const char *spec, char *why, size_t wlen);

/*
 * Listen on `spec` (a bare PORT: 127.0.0.1; port 0: an ephemeral one) and serve GET /metrics
 * from b until twd_metrics_stop(). Start it after the signal mask is set (its thread inherits
 * it). Returns 0 and the bound address in addr ("127.0.0.1:40123", "[::1]:9464"), or -1 with
 * the reason in why.
 */
int twd_metrics_start(const char *spec, struct tw_backup *b, char *addr, size_t alen, char *why,
		      size_t wlen);

/* Stop serving and join the server's thread (before the backup is closed). Idempotent. */
void twd_metrics_stop(void);

#endif
