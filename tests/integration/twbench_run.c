/*
 * tests/integration/twbench_run.c — run tools/twbench end to end over a provider (argv[1]) with
 * its own local twd's, 8 MiB segments and 100-byte objects, and check its JSON report: exit 0,
 * numbers present, the control RPC share (open + close per replication request) near the paper's
 * 2.38e-5, and the SetAcked (docs/readers.md; there is no reader) one per segment and replica
 * plus a few, not one per round trip. The numbers are printed as diagnostics. Fewer objects
 * under sanitizers.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "tap.h"

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	bool san = tap_sanitizer();
	char bench[1024], count[32], line[8192];
	double ops = 0, mbs = 0, p50 = 0, p99 = 0, p999 = 0, per_obj = 0, segs = 0;
	double n = 0, r = 0, opens = 0, closes = 0, acked = 0, secs = 0, pcpu = 0, pmobj = 0, ccpu = -1;
	double fw = 0, ffw = 0;

	child_tool("tools/twbench", bench, sizeof(bench));
	snprintf(count, sizeof(count), "%d", san ? 200000 : 1000000);
	{
		char *args[] = { bench, (char *)"--provider", (char *)prov, (char *)"--count", count,
				 (char *)"--json", (char *)"--no-progress", (char *)"--latency-count",
				 (char *)(san ? "1000" : "10000"), NULL };
		char what[128];

		snprintf(what, sizeof(what), "twbench --provider %s --count %s --json printed its "
			 "report", prov, count);
		tap_plan(14);
		if (!child_report(args, 240000, line, sizeof(line), what,
				  "twbench exited 0 (it stopped its twd's)")) {
			tap_skip(12, "no report");
			return tap_exit();
		}
	}
	tap_diag("%s", line);
	{
		bool h_ops = cli_json_num(line, "objects_per_s", &ops);
		bool h_mbs = cli_json_num(line, "mb_per_s", &mbs);
		bool h_lat = cli_json_num(line, "p50", &p50) && cli_json_num(line, "p99", &p99) &&
			     cli_json_num(line, "p999", &p999);
		bool h_segs = cli_json_num(line, "segments", &segs);
		bool h_obj = cli_json_num(line, "control_rpcs_per_object", &per_obj);
		bool h_rpcs = cli_json_num(line, "count", &n) && cli_json_num(line, "replicas", &r) &&
			      cli_json_num(line, "open", &opens) &&
			      cli_json_num(line, "close", &closes) &&
			      cli_json_num(line, "set_acked", &acked) &&
			      cli_json_num(line, "seconds", &secs) && n > 0 && r > 0;
		double per_req = h_rpcs ? (opens + closes) / (n * r) : 0;
		bool h_pcpu = cli_json_num(line, "primary_cpu_s", &pcpu) &&
			      cli_json_num(line, "primary_cpu_s_per_mobj", &pmobj);
		bool h_ccpu = cli_json_num(line, "primary_caller_cpu_s", &ccpu);

		bool h_fw = cli_json_num(line, "fabric_writes", &fw) &&
			    cli_json_num(line, "fast_path_writes", &ffw);
		const char *env = getenv("TW_FAB_SHM_FAST");
		/* shm's fast path, where the writer places the bytes itself, is taken for every
		 * write unless TW_FAB_SHM_FAST=off (docs/fabric.md "Passive shm backups"), and never
		 * on another provider. */
		bool want_fast = strcmp(prov, "shm") == 0 && !(env && strcmp(env, "off") == 0);

		ok(h_ops && ops > 0, "objects/s: %.0f", ops);
		ok(h_fw && fw > 0 && ffw == (want_fast ? fw : 0), "fast-path writes %.0f of %.0f "
		   "fabric writes (%s)", ffw, fw, want_fast ? "all: shm, the default" : "none");
		ok(h_mbs && mbs > 0, "MB/s: %.2f", mbs);
		ok(h_pcpu && pcpu > 0 && pmobj > 0 && pmobj < 1e3, "primary CPU %.3f s, %.3f s per "
		   "1M objects", pcpu, pmobj);
		/* The appending thread is one of the process's threads: its CPU is part of the
		 * process's (both the kernel's accounting; 10 ms of slack for the two reads). */
		ok(h_ccpu && ccpu > 0 && ccpu <= pcpu + 0.01, "the appending thread's CPU %.3f s of "
		   "the process's %.3f s", ccpu, pcpu);
		ok(h_lat && p50 > 0 && p50 <= p99 && p99 <= p999,
		   "sync append latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us", p50, p99, p999);
		ok(h_segs && segs >= 2, "%.0f segments of 8 MiB", segs);
		{
			/* Appends wait while a segment rolls over: some time, within the run
			 * (docs/primary.md, "Segment rollover"). */
			double roll_ms = -1;
			bool h_roll = cli_json_num(line, "roll_ms", &roll_ms);

			ok(h_roll && h_rpcs && roll_ms > 0 && roll_ms < secs * 1e3,
			   "%.1f ms in %.0f rollovers, of the run's %.0f ms", roll_ms, segs - 1,
			   secs * 1e3);
		}
		{
			/* Every write acknowledged and timed; a write's mean time from its seal
			 * to its acknowledgement lies within the run (docs/primary.md, "Where a
			 * write's time goes"). */
			double wr, timed, sp, po, pd, da, tot;
			bool h_wt = cli_json_num(line, "writes", &wr) &&
				    cli_json_num(line, "timed", &timed) &&
				    cli_json_num(line, "seal_post", &sp) &&
				    cli_json_num(line, "posting", &po) &&
				    cli_json_num(line, "post_done", &pd) &&
				    cli_json_num(line, "done_ack", &da) && h_rpcs;

			tot = sp + po + pd + da;
			ok(h_wt && timed == wr && wr > 0 && po > 0 && sp >= 0 && pd >= 0 && da >= 0 &&
				   tot < secs * 1e6,
			   "%.0f of %.0f writes timed: %.1f us waiting, %.1f posting, %.1f in flight, "
			   "%.1f to the ack (%.1f of the run's %.0f us)", timed, wr, sp, po, pd, da,
			   tot, secs * 1e6);
		}
		ok(h_obj, "control RPCs per object: %.3g", per_obj);
		/* 8 MiB / (12 + 100 B) = 74898 entries per segment, 2 RPCs each: 2.67e-5 at best;
		 * the partial last segment adds a little, more so with fewer objects. */
		ok(h_rpcs && per_req > 2e-5 && per_req < (san ? 6e-5 : 3.5e-5),
		   "open + close RPCs per replication request: %.3g (paper: 2.38e-05)", per_req);
		/* Held by the backups while nobody reads: about one per replica per second and one
		 * per segment (docs/readers.md, "What SetAcked costs"). */
		ok(h_rpcs && acked <= (segs + secs + 3) * r, "SetAcked without a reader: %.0f for "
		   "%.0f segments in %.2f s, r = %.0f (one per round trip: thousands)", acked, segs,
		   secs, r);
	}
	return tap_exit();
}
