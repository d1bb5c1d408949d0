/*
 * tailwind/metrics.h — the library's counters in the Prometheus text exposition format
 * (version 0.0.4), written into the caller's buffer, so that a service that embeds a backup or
 * owns logs can serve them on its own HTTP endpoint. twd and `twkv serve` serve exactly this
 * text on /metrics (`--metrics ADDR:PORT`); docs/metrics.md lists every metric.
 *
 *   char buf[16384];
 *   size_t n;
 *   if (tw_backup_metrics_text(b, buf, sizeof(buf), &n) == 0)
 *           ... send n bytes of buf (Content-Type: text/plain; version=0.0.4) ...
 *
 * Each function writes whole metric families (a HELP line, a TYPE line, then every sample),
 * each family once: the text of several calls may be concatenated into one exposition as long
 * as no two calls write the same family (one backup, one call for all the logs, one context,
 * and the process metrics at most once per exposition). Names follow Prometheus's conventions:
 * tailwind_<part>_<what>_<unit>, counters end in _total, times in seconds, sizes in bytes.
 *
 * What they read: the statistics getters (tw_backup_get_stats, tw_primary_get_stats,
 * tw_ctx_get_stats), which are thread-safe, and a log's id (fixed at its open); nothing else of
 * the object is touched, so a scrape runs on any thread (an HTTP server's) and costs the data
 * path nothing but what the getters cost: the backup's statistics lock for one struct copy,
 * relaxed loads of a log's and a context's counters, and the log arena's lock (taken by a
 * rollover) for its counters.
 *
 * Buffer contract, the same for every function here: on success the text and a terminating NUL
 * are in buf, *needed_out (may be NULL) is the text's length without the NUL, and the return is
 * 0. When buf is too small (len <= the text's length) nothing useful is in buf (a NUL at buf[0]
 * when len > 0), *needed_out still receives the full length, and the return is -ENOSPC: call
 * again with at least *needed_out + 1 bytes (plus some slack: counters grow between the two
 * calls; -ENOSPC again just asks for more). buf may be NULL when len is 0 (a size query).
 * -EINVAL for a NULL object (or NULL buf with len > 0). Nothing is allocated; borrowed pointers
 * only, for the call.
 */
#ifndef TAILWIND_METRICS_H
#define TAILWIND_METRICS_H

#include <stddef.h>

#include <tailwind/backup.h>
#include <tailwind/common.h>
#include <tailwind/context.h>
#include <tailwind/primary.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A backup's counters (struct tw_backup_stats): buffers by state, the pool's size and cap, the
 * flusher, control RPCs per kind, fabric completions, connections, peer authentication and
 * readers' SetAcked, as tailwind_backup_* families without labels (one backup per
 * exposition; tailwind_backup_rpc_total has a `kind` label). Thread-safe, like
 * tw_backup_get_stats.
 */
TW_API int tw_backup_metrics_text(const struct tw_backup *b, char *buf, size_t len,
				  size_t *needed_out);

/*
 * The counters of `n` logs (struct tw_primary_stats) as tailwind_primary_* families, one sample
 * per log in each, labelled log="<log id>" (the ids must differ: a family may not repeat a
 * label set). Pass every log the process serves in one call (n may be 0: no families at all).
 * The arena gauges are those of the log's context: on a shared context every log reports the
 * same arena (tw_ctx_metrics_text reports it once). Thread-safe like tw_primary_get_stats, for
 * logs that stay open during the call.
 */
TW_API int tw_primary_metrics_text(struct tw_primary *const *logs, size_t n, char *buf,
				   size_t len, size_t *needed_out);

/* A shared context's counters (struct tw_ctx_stats): logs, channels, reconnects, fabric resets,
 * progress passes and its log arena, as tailwind_context_* families. Thread-safe. */
TW_API int tw_ctx_metrics_text(struct tw_ctx *ctx, char *buf, size_t len, size_t *needed_out);

/*
 * The process's own families, named as Prometheus's client libraries name them:
 * process_cpu_seconds_total (user + system), process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_start_time_seconds, and
 * tailwind_build_info{version="..."} (always 1). Leave it out when the service exports its own
 * process_* families already. Reads getrusage(2) and /proc/self (Linux).
 */
TW_API int tw_process_metrics_text(char *buf, size_t len, size_t *needed_out);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_METRICS_H */
