/*
 * metrics/metrics.c — the counters of a backup, of logs, of a context and of the process in the
 * Prometheus text exposition format (tailwind/metrics.h; the format: Prometheus's
 * "Exposition formats" page, text format 0.0.4). Every value comes from a statistics getter
 * (tw_backup_get_stats, tw_primary_get_stats, tw_ctx_get_stats) or from the kernel
 * (getrusage, /proc/self): nothing here touches an engine's state, so it runs on any thread.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <tailwind/metrics.h>

#include "core/util.h"
#include "primary/primary_int.h" /* the log id of a struct tw_primary (set at open, then fixed) */

/* The text being written: bytes past `len` are counted, not stored. */
struct out {
	char *buf;
	size_t len, at;
};

static void put(struct out *o, const char *fmt, ...) TW_PRINTF(2, 3);
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	if (o->at < o->len)
		n = vsnprintf(o->buf + o->at, o->len - o->at, fmt, ap);
	else
		n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->at += (size_t)n;
}

/* A family's two header lines. */
static void family(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled sample. */
static void one(struct out *o, const char *name, const char *type, const char *help, uint64_t v)
{
	family(o, name, type, help);
	put(o, "%s %" PRIu64 "\n", name, v);
}

static void one_f(struct out *o, const char *name, const char *type, const char *help, double v)
{
	family(o, name, type, help);
	put(o, "%s %.9g\n", name, v);
}

static int start(struct out *o, char *buf, size_t len)
{
	if (!buf && len)
		return -EINVAL;
	o->buf = buf;
	o->len = len;
	o->at = 0;
	if (len)
		buf[0] = '\0';
	return 0;
}

static int finish(struct out *o, size_t *needed_out)
{
	if (needed_out)
		*needed_out = o->at;
	if (o->at >= o->len) {
		if (o->len)
			o->buf[0] = '\0';
		return -ENOSPC;
	}
	return 0;
}

#define COUNTER "counter"
#define GAUGE "gauge"

/* ------------------------------------------------------------------ backup */

int tw_backup_metrics_text(const struct tw_backup *b, char *buf, size_t len, size_t *needed_out)
{
	struct tw_backup_stats st;
	uint64_t calls[TW_BACKUP_RPC_KINDS] = { 0 };
	struct out o;

	if (!b || start(&o, buf, len) != 0)
		return -EINVAL;
	tw_backup_get_stats(b, &st);

	/* The pool. */
	one(&o, "tailwind_backup_buffers", GAUGE,
	    "Buffers allocated and registered now (the initial ones plus those grown on demand).",
	    st.buffers);
	one(&o, "tailwind_backup_buffers_max", GAUGE,
	    "Most buffers the pool may grow to (--max-buffers).", st.buffers_max);
	one(&o, "tailwind_backup_buffer_size_bytes", GAUGE, "Size of each buffer.",
	    st.buffer_size);
	one(&o, "tailwind_backup_unflushed_limit_buffers", GAUGE,
	    "Most buffers that may hold unflushed data at once (--unflushed-limit).",
	    st.unflushed_limit);
	one(&o, "tailwind_backup_buffers_free", GAUGE, "Buffers free for an open.",
	    st.buffers_free);
	one(&o, "tailwind_backup_buffers_open", GAUGE,
	    "Buffers holding an open segment replica (being written by a primary).",
	    st.buffers_open);
	one(&o, "tailwind_backup_buffers_closed", GAUGE,
	    "Buffers holding a closed replica waiting for or in its flush.", st.buffers_closed);
	one(&o, "tailwind_backup_buffers_loaded", GAUGE,
	    "Buffers holding a clean copy of a flushed segment for a read grant.",
	    st.buffers_loaded);
	one(&o, "tailwind_backup_buffers_grown_total", COUNTER,
	    "Buffers added to the pool on demand since the start.", st.buffers_grown);
	one(&o, "tailwind_backup_buffers_zeroed_total", COUNTER,
	    "Buffers zeroed at an open because their stale bytes could have validated.",
	    st.buffers_zeroed);
	one(&o, "tailwind_backup_opens_refused_total", COUNTER,
	    "Opens refused with RESOURCE_EXHAUSTED (pool at its cap or unflushed limit reached).",
	    st.opens_refused);

	/* Storage and the flusher. */
	one(&o, "tailwind_backup_segments_on_disk", GAUGE, "Segment files in the directory.",
	    st.segments_on_disk);
	one(&o, "tailwind_backup_segments_corrupt", GAUGE,
	    "Segment replicas known to be corrupt.", st.segments_corrupt);
	one(&o, "tailwind_backup_flushes_total", COUNTER,
	    "Closed buffers the flusher wrote to segment files.", st.flushes);
	one(&o, "tailwind_backup_flushed_bytes_total", COUNTER,
	    "Valid log bytes the flusher wrote to segment files.", st.bytes_flushed);
	one(&o, "tailwind_backup_flush_errors_total", COUNTER,
	    "Flush attempts that failed.", st.flush_errors);
	one(&o, "tailwind_backup_loads_total", COUNTER,
	    "Flushed segments loaded into a buffer for a read grant.", st.loads);

	/* Control RPCs. */
	family(&o, "tailwind_backup_rpc_total", COUNTER,
	       "Control RPC handler invocations by kind (replicated writes are one-sided and add "
	       "nothing here).");
	tw_backup_get_rpc_calls(b, calls, TW_BACKUP_RPC_KINDS);
	for (int k = 0; k < TW_BACKUP_RPC_KINDS; k++)
		put(&o, "tailwind_backup_rpc_total{kind=\"%s\"} %" PRIu64 "\n",
		    tw_backup_rpc_name((enum tw_backup_rpc)k), calls[k]);
	one(&o, "tailwind_backup_rpc_errors_total", COUNTER,
	    "Control RPC replies with a status other than OK.", st.rpc_errors);
	one(&o, "tailwind_backup_control_messages_received_total", COUNTER,
	    "Control messages received.", st.ctrl_msgs_in);
	one(&o, "tailwind_backup_control_received_bytes_total", COUNTER,
	    "Bytes of control messages received.", st.ctrl_bytes_in);
	one(&o, "tailwind_backup_control_messages_sent_total", COUNTER,
	    "Control messages sent (replies).", st.ctrl_msgs_out);
	one(&o, "tailwind_backup_control_sent_bytes_total", COUNTER,
	    "Bytes of control messages sent.", st.ctrl_bytes_out);

	/* Readers (docs/readers.md). */
	one(&o, "tailwind_backup_set_acked_total", COUNTER,
	    "SetAcked requests served (the acknowledged position for readers).", st.set_acked);
	one(&o, "tailwind_backup_set_acked_held_total", COUNTER,
	    "SetAcked answers held because no reader of the log was active here.",
	    st.set_acked_held);
	one(&o, "tailwind_backup_set_acked_holding", GAUGE, "SetAcked answers held right now.",
	    st.set_acked_holding);

	/* Spare files (docs/operations.md). */
	one(&o, "tailwind_backup_spare_files_kept_total", COUNTER,
	    "Freed segment files kept as spares to write over.", st.spares_kept);
	one(&o, "tailwind_backup_spare_files_reused_total", COUNTER,
	    "Segment files written over a spare.", st.spares_reused);

	/* Fabric and connections. */
	one(&o, "tailwind_backup_fabric_cq_polls_total", COUNTER,
	    "Completion queue polls by the progress thread.", st.cq_polls);
	one(&o, "tailwind_backup_fabric_cq_entries_total", COUNTER,
	    "Completion queue entries read by the progress thread.", st.cq_entries);
	one(&o, "tailwind_backup_connections_total", COUNTER, "Connections accepted.",
	    st.connections);
	one(&o, "tailwind_backup_connections_lost_total", COUNTER,
	    "Connections that ended (the peer went away or the fabric failed).",
	    st.connections_lost);
	one(&o, "tailwind_backup_connections_dropped_total", COUNTER,
	    "Connections closed by the backup because the peer misbehaved.",
	    st.connections_dropped);

	/* Peer authentication (docs/operations.md, "Peer authentication"). */
	one(&o, "tailwind_backup_auth_refusals_total", COUNTER,
	    "Handshakes and requests refused for want of the cluster key (each closed the "
	    "connection).", st.auth_failures);
	one(&o, "tailwind_backup_auth_accepted_total", COUNTER,
	    "Connections that proved the cluster key.", st.auth_ok);
	return finish(&o, needed_out);
}

/* ------------------------------------------------------------------ logs */

/* Which counter of struct tw_primary_stats a sample reads. */
static uint64_t field(const struct tw_primary_stats *st, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)st + off, sizeof(v));
	return v;
}

/* One family with a sample per log. Each log's counters are read again per family (a few dozen
 * relaxed loads): no snapshot array, so no bound on the logs and nothing on the stack. */
static void per_log(struct out *o, const char *name, const char *type, const char *help,
		    struct tw_primary *const *logs, size_t n, size_t off, double scale)
{
	struct tw_primary_stats st;

	family(o, name, type, help);
	for (size_t i = 0; i < n; i++) {
		uint64_t id = logs[i]->cfg.log_id;

		tw_primary_get_stats(logs[i], &st);
		if (scale != 1.0)
			put(o, "%s{log=\"%" PRIu64 "\"} %.9g\n", name, id,
			    (double)field(&st, off) * scale);
		else
			put(o, "%s{log=\"%" PRIu64 "\"} %" PRIu64 "\n", name, id, field(&st, off));
	}
}

#define PL(name, type, help, f) \
	per_log(&o, (name), (type), (help), logs, n, offsetof(struct tw_primary_stats, f), 1.0)

int tw_primary_metrics_text(struct tw_primary *const *logs, size_t n, char *buf, size_t len,
			    size_t *needed_out)
{
	static const struct {
		const char *kind;
		size_t off;
	} rpcs[] = {
		{ "open", offsetof(struct tw_primary_stats, rpc_open) },
		{ "close", offsetof(struct tw_primary_stats, rpc_close) },
		{ "handshake", offsetof(struct tw_primary_stats, rpc_handshake) },
		{ "set_acked", offsetof(struct tw_primary_stats, rpc_set_acked) },
		{ "other", offsetof(struct tw_primary_stats, rpc_other) },
	};
	struct tw_primary_stats st;
	struct out o;

	if ((n && !logs) || start(&o, buf, len) != 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!logs[i])
			return -EINVAL;
	if (n == 0)
		return finish(&o, needed_out);
	PL("tailwind_primary_appends_total", COUNTER, "Entries appended.", appends);
	PL("tailwind_primary_appends_acked_total", COUNTER,
	   "Entries acknowledged (every replica holds them).", acked);
	PL("tailwind_primary_appends_failed_total", COUNTER, "Entries failed.", failed);
	PL("tailwind_primary_append_bytes_total", COUNTER, "Payload bytes appended.", bytes);
	PL("tailwind_primary_writes_total", COUNTER,
	   "Sealed one-sided writes (each sent to every replica).", writes);
	PL("tailwind_primary_write_bytes_total", COUNTER, "Bytes of those writes (one copy).",
	   write_bytes);
	PL("tailwind_primary_segments_total", COUNTER, "Segments opened.", segments);
	family(&o, "tailwind_primary_rpc_total", COUNTER,
	       "Control RPCs sent to backups, by kind.");
	for (size_t i = 0; i < n; i++) {
		tw_primary_get_stats(logs[i], &st);
		for (size_t k = 0; k < TW_ARRAY_SIZE(rpcs); k++)
			put(&o, "tailwind_primary_rpc_total{log=\"%" PRIu64 "\",kind=\"%s\"} %" PRIu64
			    "\n", logs[i]->cfg.log_id, rpcs[k].kind, field(&st, rpcs[k].off));
	}
	PL("tailwind_primary_opens_refused_total", COUNTER,
	   "Segment opens refused by a backup (RESOURCE_EXHAUSTED).", open_refused);
	PL("tailwind_primary_batch_entries_max", GAUGE, "Most entries sealed into one write.",
	   max_batch_seen);
	PL("tailwind_primary_inflight_writes_max", GAUGE, "Most writes in flight at once.",
	   inflight_peak);
	PL("tailwind_primary_wakeups_total", COUNTER,
	   "Async mode: wake-ups of the progress thread by the application.", wakeups);
	PL("tailwind_primary_backups_lost_total", COUNTER, "Backups marked lost.", backups_lost);
	PL("tailwind_primary_failovers_total", COUNTER,
	   "Suspensions of the open segment that ended in a resume.", failovers);
	PL("tailwind_primary_rereplications_total", COUNTER, "Replicas re-created on a spare.",
	   rereplications);
	PL("tailwind_primary_rereplication_bytes_total", COUNTER,
	   "Bytes copied to spares for re-replication.", rerep_bytes);
	PL("tailwind_primary_rereplication_pending", GAUGE,
	   "Closed segments still short of a replica.", rerep_pending);
	per_log(&o, "tailwind_primary_suspended_seconds_total", COUNTER,
		"Time appends were suspended by failovers.", logs, n,
		offsetof(struct tw_primary_stats, suspended_ns), 1e-9);
	per_log(&o, "tailwind_primary_suspended_last_seconds", GAUGE,
		"Length of the last suspension.", logs, n,
		offsetof(struct tw_primary_stats, suspended_last_ns), 1e-9);
	PL("tailwind_primary_arena_budget_bytes", GAUGE,
	   "Bytes the log arena (its context's) may map in all.", arena.budget);
	PL("tailwind_primary_arena_mapped_bytes", GAUGE, "Bytes of the arena mapped and registered.",
	   arena.mapped);
	PL("tailwind_primary_arena_used_bytes", GAUGE, "Bytes of the arena held by segments.",
	   arena.used);
	PL("tailwind_primary_arena_used_max_bytes", GAUGE,
	   "Most bytes of the arena held at once.", arena.peak);
	PL("tailwind_primary_arena_refused_total", COUNTER,
	   "Rollovers or opens refused: the arena's budget was exhausted.", arena.refused);
	return finish(&o, needed_out);
}

/* ------------------------------------------------------------------ context */

int tw_ctx_metrics_text(struct tw_ctx *ctx, char *buf, size_t len, size_t *needed_out)
{
	struct tw_ctx_stats st;
	struct out o;

	if (!ctx || start(&o, buf, len) != 0)
		return -EINVAL;
	tw_ctx_get_stats(ctx, &st);
	one(&o, "tailwind_context_logs", GAUGE, "Logs open on the context.", st.logs);
	one(&o, "tailwind_context_channels", GAUGE,
	    "Channels connected (one per usable backup).", st.channels);
	one(&o, "tailwind_context_reconnects_total", COUNTER,
	    "Channels connected again after a loss.", st.reconnects);
	one(&o, "tailwind_context_fabric_resets_total", COUNTER,
	    "Fabric resets (shm: a dead peer blocked the others).", st.resets);
	one(&o, "tailwind_context_loop_passes_total", COUNTER,
	    "Passes of the progress thread over every log.", st.loop_passes);
	one(&o, "tailwind_context_arena_budget_bytes", GAUGE,
	    "Bytes the log arena may map in all.", st.arena.budget);
	one(&o, "tailwind_context_arena_mapped_bytes", GAUGE,
	    "Bytes of the arena mapped and registered.", st.arena.mapped);
	one(&o, "tailwind_context_arena_used_bytes", GAUGE, "Bytes of the arena held by segments.",
	    st.arena.used);
	one(&o, "tailwind_context_arena_used_max_bytes", GAUGE,
	    "Most bytes of the arena held at once.", st.arena.peak);
	one(&o, "tailwind_context_arena_segments_total", COUNTER,
	    "Segments handed out by the arena.", st.arena.segments);
	one(&o, "tailwind_context_arena_refused_total", COUNTER,
	    "Rollovers or opens refused: the arena's budget was exhausted.", st.arena.refused);
	one(&o, "tailwind_context_arena_populated_bytes_total", COUNTER,
	    "Bytes of the arena backed ahead of the writers by the populator thread.", st.arena.populated);
	return finish(&o, needed_out);
}

/* ------------------------------------------------------------------ process */

/* Fields 22 (starttime, clock ticks after boot) of /proc/self/stat, and btime of /proc/stat:
 * the start in seconds since the epoch; 0 when unknown. */
static double start_time(void)
{
	char line[1024], *p;
	unsigned long long ticks = 0, btime = 0;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/self/stat", "re");
	size_t n;

	if (!f)
		return 0;
	n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = '\0';
	p = strrchr(line, ')'); /* the command name may hold spaces and parentheses */
	/* After ") ": field 3 (state) ... field 22. */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu", &ticks) != 1)
		return 0;
	f = fopen("/proc/stat", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	if (!btime || hz <= 0)
		return 0;
	return (double)btime + (double)ticks / (double)hz;
}

static uint64_t open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	uint64_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n ? n - 1 : 0; /* the directory's own descriptor */
}

int tw_process_metrics_text(char *buf, size_t len, size_t *needed_out)
{
	unsigned long long vm_pages = 0, rss_pages = 0;
	long page = sysconf(_SC_PAGESIZE);
	struct rusage ru;
	struct out o;
	double cpu = 0;
	FILE *f;

	if (start(&o, buf, len) != 0)
		return -EINVAL;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		      (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	/* proc(5): /proc/self/statm "size resident ..." in pages. */
	f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%llu %llu", &vm_pages, &rss_pages) != 2)
			vm_pages = rss_pages = 0;
		fclose(f);
	}
	if (page <= 0)
		page = 4096;
	one_f(&o, "process_cpu_seconds_total", COUNTER,
	      "Total user and system CPU time spent in seconds.", cpu);
	one(&o, "process_resident_memory_bytes", GAUGE, "Resident memory size in bytes.",
	    (uint64_t)rss_pages * (uint64_t)page);
	one(&o, "process_virtual_memory_bytes", GAUGE, "Virtual memory size in bytes.",
	    (uint64_t)vm_pages * (uint64_t)page);
	one(&o, "process_open_fds", GAUGE, "Number of open file descriptors.", open_fds());
	one_f(&o, "process_start_time_seconds", GAUGE,
	      "Start time of the process since unix epoch in seconds.", start_time());
	family(&o, "tailwind_build_info", GAUGE, "The library's version, as a label; always 1.");
	put(&o, "tailwind_build_info{version=\"%s\"} 1\n", tw_version());
	return finish(&o, needed_out);
}
