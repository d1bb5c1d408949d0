/*
 * tools/bench_report.c — twbench's output: the single-run table, the side-by-side table with
 * the ratios per sweep point, and the JSON line (--json). See bench.h and docs/twbench.md.
 * CPU: the backups' (each, and per GB and per million objects) and the primary's own (this
 * process) per million objects, in every mode.
 */
#include <inttypes.h>
#include <stdio.h>

#include "bench.h"

/* How the objects are appended (--sync, --async, --driven). */
static const char *appends_name(const struct opts *o)
{
	return o->driven ? "driven" : o->async ? "async" : "sync";
}

static double cpu_per_gb(const struct result *x)
{
	double gb = (double)x->count * x->pt.size / 1e9;

	return x->cpu_ok && gb > 0 ? x->cpu_sum / gb : -1;
}

static double cpu_per_mobj(const struct result *x)
{
	return x->cpu_ok && x->count ? x->cpu_sum / ((double)x->count / 1e6) : -1;
}

/* The mean of one of a write's time sums (tw_primary_stats.write_*_ns) in µs; 0 when no
 * write was timed (raw mode has none). */
static double write_us(const struct result *x, uint64_t sum_ns)
{
	return x->st.writes_timed ? (double)sum_ns / 1e3 / (double)x->st.writes_timed : 0;
}

/* The primary's own CPU (this process) per million objects; -1 unknown. */
static double primary_per_mobj(const struct result *x)
{
	return x->cpu_primary >= 0 && x->count ? x->cpu_primary / ((double)x->count / 1e6) : -1;
}

static void json_num_or_null(const char *key, double v, bool ok, bool comma)
{
	if (ok)
		printf("\"%s\":%.6g%s", key, v, comma ? "," : "");
	else
		printf("\"%s\":null%s", key, comma ? "," : "");
}

/* The control RPCs of a run that scale with its data: opens, closes and SetAcked (the
 * acknowledged position for readers, docs/readers.md); handshakes are per connection. */
static uint64_t ctrl_rpcs(const struct result *x)
{
	return x->st.rpc_open + x->st.rpc_close + x->st.rpc_set_acked;
}

static void print_run_json(const struct opts *o, const struct result *x)
{
	double per_obj = (double)ctrl_rpcs(x) / (double)x->count;
	double per_req = per_obj / x->pt.r;

	printf("{\"provider\":\"%s\",\"mode\":\"%s\",\"append\":\"%s\",\"replicas\":%u,"
	       "\"count\":%" PRIu64 ",\"size\":%u,\"batch\":%u,\"inflight\":%u,"
	       "\"offered_rate\":%.1f,"
	       "\"segment_size\":%zu,\"seconds\":%.6f,\"objects_per_s\":%.1f,"
	       "\"mb_per_s\":%.3f,\"sync_latency_samples\":%" PRIu64 ","
	       "\"sync_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},",
	       o->provider, mode_names[x->mode], appends_name(o), x->pt.r, x->count,
	       x->pt.size, x->pt.batch, x->pt.inflight, x->pt.rate, o->segment_size, x->secs,
	       x->ops, x->mbs, x->n_lat, x->p50, x->p99, x->p999);
	if (x->have_ack)
		printf("\"async_ack_latency_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},", x->a50,
		       x->a99, x->a999);
	printf("\"backup_cpu_s\":[");
	for (unsigned i = 0; i < x->n_cpu; i++)
		printf(x->cpu[i] >= 0 ? "%s%.3f" : "%snull", i ? "," : "", x->cpu[i]);
	printf("],\"backup_progress_cpu_s\":[");
	for (unsigned i = 0; i < x->n_cpu; i++)
		printf(x->cpu_main[i] >= 0 ? "%s%.3f" : "%snull", i ? "," : "", x->cpu_main[i]);
	printf("],");
	json_num_or_null("backup_cpu_total_s", x->cpu_sum, x->cpu_ok, true);
	json_num_or_null("backup_progress_cpu_total_s", x->cpu_main_sum, x->cpu_main_ok, true);
	json_num_or_null("backup_cpu_s_per_gb", cpu_per_gb(x), x->cpu_ok, true);
	json_num_or_null("backup_cpu_s_per_mobj", cpu_per_mobj(x), x->cpu_ok, true);
	json_num_or_null("primary_cpu_s", x->cpu_primary, x->cpu_primary >= 0, true);
	json_num_or_null("primary_cpu_s_per_mobj", primary_per_mobj(x), x->cpu_primary >= 0, true);
	json_num_or_null("primary_caller_cpu_s", x->cpu_caller, x->cpu_caller >= 0, true);
	printf("\"writes\":%" PRIu64 ",\"entries_per_write\":%.3f,\"segments\":%" PRIu64
	       ",\"rpcs\":{\"handshake\":%" PRIu64 ",\"open\":%" PRIu64 ",\"close\":%" PRIu64
	       ",\"set_acked\":%" PRIu64 ",\"total\":%" PRIu64 "},\"control_rpcs_per_object\":%.4g,"
	       "\"control_rpcs_per_replication_request\":%.4g,\"open_refused\":%" PRIu64
	       ",\"wakeups\":%" PRIu64 ",\"inflight_peak\":%" PRIu64
	       ",\"fabric_writes\":%" PRIu64 ",\"fast_path_writes\":%" PRIu64
	       ",\"appender_seals\":%" PRIu64
	       ",\"write_us\":{\"timed\":%" PRIu64 ",\"seal_post\":%.2f,\"posting\":%.2f"
	       ",\"post_done\":%.2f,\"done_ack\":%.2f},\"roll_ms\":%.3f"
	       ",\"arena\":{\"mapped\":%" PRIu64 ",\"peak_used\":%" PRIu64 ",\"extents\":%" PRIu64
	       ",\"huge_extents\":%" PRIu64 ",\"segments\":%" PRIu64 ",\"reused\":%" PRIu64 "}}",
	       x->st.writes, (double)x->count / (double)(x->st.writes ? x->st.writes : 1),
	       x->st.segments, x->st.rpc_handshake, x->st.rpc_open, x->st.rpc_close, x->st.rpc_set_acked,
	       x->st.rpcs, per_obj, per_req,
	       x->st.open_refused, x->st.wakeups, x->st.inflight_peak, x->st.fab_writes,
	       x->st.fab_fast_writes, x->st.appender_seals, x->st.writes_timed,
	       write_us(x, x->st.write_seal_post_ns), write_us(x, x->st.write_posting_ns),
	       write_us(x, x->st.write_post_done_ns), write_us(x, x->st.write_done_ack_ns),
	       (double)x->st.roll_ns / 1e6, x->st.arena.mapped, x->st.arena.peak, x->st.arena.extents,
	       x->st.arena.huge_extents, x->st.arena.segments, x->st.arena.reused);
}

static bool same_point(const struct point *a, const struct point *b)
{
	return a->size == b->size && a->r == b->r && a->batch == b->batch &&
	       a->inflight == b->inflight && a->rate == b->rate;
}

static const struct result *find_result(const struct point *pt, enum bmode m)
{
	for (unsigned i = 0; i < n_results; i++)
		if (results[i].mode == m && same_point(&results[i].pt, pt))
			return &results[i];
	return NULL;
}

static double ratio(double a, double b)
{
	return b > 0 && a >= 0 ? a / b : -1;
}

/* Ratios of one sweep point: onesided over rpc (throughput, latencies, backup CPU), onesided over
 * raw (bytes/s), the primary's CPU per object over rpc's and raw's. -1 where a mode is missing. */
struct cmp {
	struct point pt;
	double thr, p50, p99, a50, a99, cpu, cpu_main, raw_bytes, rpc_raw_bytes;
	double pcpu_rpc, pcpu_raw;
};

static unsigned comparisons(struct cmp *out, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < n_results && n < max; i++) {
		const struct point *pt = &results[i].pt;
		const struct result *os, *rp, *rw;
		bool seen = false;

		for (unsigned k = 0; k < n; k++)
			seen |= same_point(&out[k].pt, pt);
		if (seen)
			continue;
		os = find_result(pt, M_ONESIDED);
		rp = find_result(pt, M_RPC);
		rw = find_result(pt, M_RAW);
		if (!os || (!rp && !rw))
			continue;
		out[n].pt = *pt;
		out[n].thr = rp ? ratio(os->ops, rp->ops) : -1;
		out[n].p50 = rp && rp->n_lat ? ratio(os->p50, rp->p50) : -1;
		out[n].p99 = rp && rp->n_lat ? ratio(os->p99, rp->p99) : -1;
		out[n].a50 = rp ? ratio(os->a50, rp->a50) : -1;
		out[n].a99 = rp ? ratio(os->a99, rp->a99) : -1;
		out[n].cpu = rp && os->cpu_ok && rp->cpu_ok ? ratio(os->cpu_sum, rp->cpu_sum) : -1;
		out[n].cpu_main = rp && os->cpu_main_ok && rp->cpu_main_ok ?
				  ratio(os->cpu_main_sum, rp->cpu_main_sum) : -1;
		out[n].raw_bytes = rw ? ratio(os->mbs, rw->mbs) : -1;
		out[n].rpc_raw_bytes = rw && rp ? ratio(rp->mbs, rw->mbs) : -1;
		out[n].pcpu_rpc = rp ? ratio(primary_per_mobj(os), primary_per_mobj(rp)) : -1;
		out[n].pcpu_raw = rw ? ratio(primary_per_mobj(os), primary_per_mobj(rw)) : -1;
		n++;
	}
	return n;
}

void print_json(const struct opts *o)
{
	struct cmp c[256];
	unsigned nc;

	if (n_results == 1) {
		print_run_json(o, &results[0]);
		printf("\n");
		return;
	}
	printf("{\"twbench\":{\"provider\":\"%s\",\"count\":%" PRIu64 ",\"append\":\"%s\","
	       "\"segment_size\":%zu},\"runs\":[",
	       o->provider, o->count, appends_name(o), o->segment_size);
	for (unsigned i = 0; i < n_results; i++) {
		if (i)
			printf(",");
		print_run_json(o, &results[i]);
	}
	printf("],\"comparisons\":[");
	nc = comparisons(c, 256);
	for (unsigned i = 0; i < nc; i++) {
		printf("%s{\"size\":%u,\"replicas\":%u,\"batch\":%u,\"inflight\":%u,"
		       "\"offered_rate\":%.1f,", i ? "," : "", c[i].pt.size, c[i].pt.r, c[i].pt.batch,
		       c[i].pt.inflight, c[i].pt.rate);
		json_num_or_null("throughput_onesided_over_rpc", c[i].thr, c[i].thr >= 0, true);
		json_num_or_null("sync_p50_onesided_over_rpc", c[i].p50, c[i].p50 >= 0, true);
		json_num_or_null("sync_p99_onesided_over_rpc", c[i].p99, c[i].p99 >= 0, true);
		json_num_or_null("ack_p50_onesided_over_rpc", c[i].a50, c[i].a50 >= 0, true);
		json_num_or_null("ack_p99_onesided_over_rpc", c[i].a99, c[i].a99 >= 0, true);
		json_num_or_null("backup_cpu_onesided_over_rpc", c[i].cpu, c[i].cpu >= 0, true);
		json_num_or_null("backup_progress_cpu_onesided_over_rpc", c[i].cpu_main,
				 c[i].cpu_main >= 0, true);
		json_num_or_null("bytes_onesided_over_raw", c[i].raw_bytes, c[i].raw_bytes >= 0,
				 true);
		json_num_or_null("bytes_rpc_over_raw", c[i].rpc_raw_bytes, c[i].rpc_raw_bytes >= 0,
				 true);
		json_num_or_null("primary_cpu_onesided_over_rpc", c[i].pcpu_rpc, c[i].pcpu_rpc >= 0,
				 true);
		json_num_or_null("primary_cpu_onesided_over_raw", c[i].pcpu_raw, c[i].pcpu_raw >= 0,
				 false);
		printf("}");
	}
	printf("]}\n");
}

/* The classic single-run table (one mode, one point). */
void print_single(const struct opts *o, const struct result *x)
{
	double per_obj = (double)ctrl_rpcs(x) / (double)x->count;
	double per_req = per_obj / x->pt.r;
	char k[64];

	printf("twbench: %" PRIu64 " objects of %u B, r = %u, provider %s, mode %s, %s appends, "
	       "segment %zu B, batch <= %u, %u in flight%s\n",
	       x->count, x->pt.size, x->pt.r, o->provider, mode_names[x->mode],
	       appends_name(o), o->segment_size, x->pt.batch, x->pt.inflight,
	       x->pt.rate > 0 ? ", open loop" : "");
	if (x->pt.rate > 0)
		printf("  %-40s %14.0f\n", "offered objects/s", x->pt.rate);
	printf("  %-40s %14.0f\n", "objects/s", x->ops);
	printf("  %-40s %14.2f\n", "MB/s (payload)", x->mbs);
	snprintf(k, sizeof(k), "sync append latency p50 (us, n=%" PRIu64 ")", x->n_lat);
	printf("  %-40s %14.1f\n", k, x->p50);
	printf("  %-40s %14.1f\n", "sync append latency p99 (us)", x->p99);
	printf("  %-40s %14.1f\n", "sync append latency p99.9 (us)", x->p999);
	if (x->have_ack) {
		printf("  %-40s %14.1f\n", "async submit->ack p50 (us)", x->a50);
		printf("  %-40s %14.1f\n", "async submit->ack p99 (us)", x->a99);
		printf("  %-40s %14.1f\n", "async submit->ack p99.9 (us)", x->a999);
	}
	for (unsigned i = 0; i < x->n_cpu; i++) {
		if (n_twd)
			snprintf(k, sizeof(k), "backup %u CPU (s, pid %d)", i, twd_pid(i));
		else
			snprintf(k, sizeof(k), "backup %u CPU (s, stats RPC)", i);
		if (x->cpu[i] >= 0)
			printf("  %-40s %14.3f\n", k, x->cpu[i]);
		else
			printf("  %-40s %14s\n", k, "n/a");
	}
	if (x->cpu_ok) {
		printf("  %-40s %14.3f\n", "backup CPU s per GB (all backups)", cpu_per_gb(x));
		printf("  %-40s %14.3f\n", "backup CPU s per 1M objects (all)", cpu_per_mobj(x));
	}
	if (x->cpu_primary >= 0) {
		printf("  %-40s %14.3f\n", "primary CPU (s, this process)", x->cpu_primary);
		printf("  %-40s %14.3f\n", "primary CPU s per 1M objects", primary_per_mobj(x));
	}
	if (x->cpu_caller >= 0)
		printf("  %-40s %14.3f\n", "  of it, the appending thread (s)", x->cpu_caller);
	printf("  %-40s %14" PRIu64 "\n", "writes (each to r backups)", x->st.writes);
	/* Async mode: the writes the appending thread sealed itself (docs/primary.md). */
	printf("  %-40s %14" PRIu64 "\n", "  of them, sealed by the appending thread",
	       x->st.appender_seals);
	printf("  %-40s %14.2f\n", "entries per write",
	       (double)x->count / (double)(x->st.writes ? x->st.writes : 1));
	printf("  %-40s %14" PRIu64 "\n", "segments", x->st.segments);
	/* Every replica's write, and those shm's fast path placed (docs/fabric.md). */
	snprintf(k, sizeof(k), "%" PRIu64 " / %" PRIu64, x->st.fab_fast_writes, x->st.fab_writes);
	printf("  %-40s %14s\n", "fast-path writes / fabric writes", k);
	/* Where a write's time went, means over the acknowledged ones (docs/primary.md). */
	snprintf(k, sizeof(k), "%.1f/%.1f/%.1f/%.1f", write_us(x, x->st.write_seal_post_ns),
		 write_us(x, x->st.write_posting_ns), write_us(x, x->st.write_post_done_ns),
		 write_us(x, x->st.write_done_ack_ns));
	printf("  %-40s %14s\n", "write us: wait/posting/in flight/ack", k);
	/* Appends wait while a segment rolls over (docs/primary.md, "Segment rollover"). */
	printf("  %-40s %14.1f\n", "ms in rollovers", (double)x->st.roll_ns / 1e6);
	if (x->st.arena.extents) {
		snprintf(k, sizeof(k), "%.1f / %.1f", (double)x->st.arena.peak / 1048576.0,
			 (double)x->st.arena.mapped / 1048576.0);
		printf("  %-40s %14s\n", "log arena MiB, peak used / mapped", k);
		snprintf(k, sizeof(k), "%" PRIu64 " of %" PRIu64, x->st.arena.reused,
			 x->st.arena.segments);
		printf("  %-40s %14s\n", "segments in reused arena memory", k);
	}
	snprintf(k, sizeof(k), "%" PRIu64 " + %" PRIu64, x->st.rpc_open, x->st.rpc_close);
	printf("  %-40s %14s\n", "open + close RPCs", k);
	snprintf(k, sizeof(k), "%" PRIu64 " (%.1f)", x->st.rpc_set_acked,
		 (double)x->st.rpc_set_acked / (double)(x->pt.r ? x->pt.r : 1));
	printf("  %-40s %14s\n", "SetAcked RPCs (per replica)", k);
	printf("  %-40s %14.3g\n", "control RPCs per object", per_obj);
	printf("  %-40s %14.3g  (paper: 2.38e-05)\n", "control RPCs per replication request",
	       per_req);
	printf("  %-40s %14.3f\n", "seconds", x->secs);
}

static void fmt_ratio(char *buf, size_t len, double v)
{
	if (v < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2f", v);
}

/* Side-by-side: one line per run, then the ratios per point. */
void print_table(const struct opts *o)
{
	struct cmp c[256];
	unsigned nc;

	printf("twbench: provider %s, %" PRIu64 " objects per run, %s appends, segment %zu B\n",
	       o->provider, o->count, appends_name(o), o->segment_size);
	printf("%6s %2s %5s %4s %9s %-8s %11s %8s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", "size",
	       "r", "batch", "infl", "offered", "mode", "objects/s", "MB/s", "p50 us", "p99 us",
	       "ack p50", "ack p99", "bk CPU s", "CPUs/GB", "CPUs/Mob", "prCPU/Mo", "ent/wr");
	for (unsigned i = 0; i < n_results; i++) {
		const struct result *x = &results[i];
		char rate[32];

		if (x->pt.rate > 0)
			snprintf(rate, sizeof(rate), "%.0f", x->pt.rate);
		else
			snprintf(rate, sizeof(rate), "closed");
		printf("%6u %2u %5u %4u %9s %-8s %11.0f %8.2f %8.1f %8.1f %8.1f %8.1f %8.3f %8.3f "
		       "%8.3f %8.3f %7.1f\n",
		       x->pt.size, x->pt.r, x->pt.batch, x->pt.inflight, rate, mode_names[x->mode],
		       x->ops, x->mbs, x->p50, x->p99, x->a50, x->a99, x->cpu_ok ? x->cpu_sum : -1,
		       cpu_per_gb(x), cpu_per_mobj(x), primary_per_mobj(x),
		       (double)x->count / (double)(x->st.writes ? x->st.writes : 1));
	}
	nc = comparisons(c, 256);
	if (!nc)
		return;
	printf("\nratios (onesided / rpc unless said; throughput: higher is better for onesided, "
	       "latency and CPU: lower)\n");
	printf("%6s %2s %5s %4s %9s %9s %8s %8s %8s %8s %8s %9s %9s %9s %8s %8s\n", "size", "r",
	       "batch", "infl", "offered", "objects/s", "p50", "p99", "ack p50", "ack p99",
	       "bk CPU", "bk progr", "os/raw B", "rpc/raw B", "pr CPU", "pr/raw");
	for (unsigned i = 0; i < nc; i++) {
		char f[11][16], rate[32];

		fmt_ratio(f[0], 16, c[i].thr);
		fmt_ratio(f[1], 16, c[i].p50);
		fmt_ratio(f[2], 16, c[i].p99);
		fmt_ratio(f[3], 16, c[i].a50);
		fmt_ratio(f[4], 16, c[i].a99);
		fmt_ratio(f[5], 16, c[i].cpu);
		fmt_ratio(f[6], 16, c[i].cpu_main);
		fmt_ratio(f[7], 16, c[i].raw_bytes);
		fmt_ratio(f[8], 16, c[i].rpc_raw_bytes);
		fmt_ratio(f[9], 16, c[i].pcpu_rpc);
		fmt_ratio(f[10], 16, c[i].pcpu_raw);
		if (c[i].pt.rate > 0)
			snprintf(rate, sizeof(rate), "%.0f", c[i].pt.rate);
		else
			snprintf(rate, sizeof(rate), "closed");
		printf("%6u %2u %5u %4u %9s %9s %8s %8s %8s %8s %8s %9s %9s %9s %8s %8s\n",
		       c[i].pt.size, c[i].pt.r, c[i].pt.batch, c[i].pt.inflight, rate, f[0], f[1],
		       f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]);
	}
}
