/*
 * tests/integration/twbench_modes.c — twbench --mode onesided,rpc,raw on one provider (argv[1],
 * default tcp) with a small count: the one-line JSON report must hold a run per mode with sane,
 * non-zero numbers (the backups' CPU and the primary's own) and a comparison with the ratios;
 * then a --driven run's text table must show the primary's CPU column and ratios. No speed is asserted (benchmarks measure
 * speed, tests do not); the report is printed as diagnostics.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "tap.h"

static void check_run(const char *json, const char *mode)
{
	char pat[64];
	const char *r;
	double ops = 0, mbs = 0, p50 = 0, p99 = 0, cpu = -1, per_gb = -1, writes = 0;
	double pcpu = -1, pmobj = -1;
	bool have_p;

	snprintf(pat, sizeof(pat), "\"mode\":\"%s\"", mode);
	r = strstr(json, pat);
	if (!ok(r != NULL, "%s: a run in the report", mode)) {
		tap_skip(5, "no %s run", mode);
		return;
	}
	ok(cli_json_num(r, "objects_per_s", &ops) && ops > 0 && cli_json_num(r, "mb_per_s", &mbs) &&
	   mbs > 0, "%s: %.0f objects/s, %.2f MB/s", mode, ops, mbs);
	ok(cli_json_num(r, "p50", &p50) && cli_json_num(r, "p99", &p99) && p50 > 0 && p50 <= p99,
	   "%s: sync latency p50 %.1f us <= p99 %.1f us", mode, p50, p99);
	ok(cli_json_num(r, "backup_cpu_total_s", &cpu) && cpu >= 0 &&
	   cli_json_num(r, "backup_cpu_s_per_gb", &per_gb) && per_gb >= 0,
	   "%s: backup CPU %.3f s (%.2f s per GB)", mode, cpu, per_gb);
	ok(cli_json_num(r, "writes", &writes) && writes > 0, "%s: %.0f writes", mode, writes);
	/* The primary's own CPU (this process) over the replication phase, in every mode. */
	have_p = cli_json_num(r, "primary_cpu_s", &pcpu) &&
		 cli_json_num(r, "primary_cpu_s_per_mobj", &pmobj);
	ok(have_p && pcpu > 0 && pmobj > 0, "%s: primary CPU %.3f s (%.2f s per 1M objects)", mode,
	   pcpu, pmobj);
}

/* --driven, text output: the primary's CPU column and its ratios to rpc and raw. */
static void driven_text(const char *bench, const char *prov)
{
	char *args[] = { (char *)bench, (char *)"--provider", (char *)prov, (char *)"--mode",
			 (char *)"onesided,rpc,raw", (char *)"--driven", (char *)"--count",
			 (char *)"20000", (char *)"--latency-count", (char *)"100",
			 (char *)"--segment-size", (char *)"1M", (char *)"--no-progress", NULL };
	struct proc *p = proc_spawn(args, NULL);
	char line[1024], hdr[1024] = "", rat[1024] = "";
	bool in_ratios = false;
	int n;

	TAP_REQUIRE(p, "spawn twbench --driven");
	/* The ratios header, then the first ratio line (it starts with the size, 100). */
	while ((n = proc_wait_line(p, "", line, sizeof(line), 60000)) >= 0) {
		if (strstr(line, "prCPU/Mo") && !hdr[0])
			snprintf(hdr, sizeof(hdr), "%s", line);
		if (strstr(line, "pr/raw"))
			in_ratios = true;
		else if (in_ratios && strstr(line, "   100 ")) {
			snprintf(rat, sizeof(rat), "%s", line);
			break;
		}
	}
	is_int(proc_wait(p, 60000), 0, "twbench --driven --mode onesided,rpc,raw exited 0");
	proc_free(p);
	ok(hdr[0] != 0, "--driven table has the primary's CPU column: %s", hdr);
	{
		/* The last two columns: primary CPU onesided/rpc and onesided/raw, numbers. */
		char *last = strrchr(rat, ' ');
		double v = last ? strtod(last + 1, NULL) : 0;

		ok(rat[0] && v > 0, "--driven ratios end with the primary's CPU onesided/raw: %s",
		   rat);
	}
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char bench[1024], line[32768];
	const char *cmp;
	double thr = 0, raw = 0, prpc = 0, praw = 0;

	child_tool("tools/twbench", bench, sizeof(bench));
	{
		char *args[] = { bench, (char *)"--provider", (char *)prov, (char *)"--mode",
				 (char *)"onesided,rpc,raw", (char *)"--count", (char *)"20000",
				 (char *)"--latency-count", (char *)"200", (char *)"--segment-size",
				 (char *)"1M", (char *)"--json", (char *)"--no-progress", NULL };

		tap_plan(27);
		if (!child_report(args, 60000, line, sizeof(line),
				  "twbench --mode onesided,rpc,raw --json printed its report",
				  "twbench exited 0 (it stopped its twd's)")) {
			tap_skip(25, "no report");
			return tap_exit();
		}
	}
	tap_diag("%s", line);
	ok(strstr(line, "\"runs\":[") != NULL, "report has runs");
	check_run(line, "onesided");
	check_run(line, "rpc");
	check_run(line, "raw");
	cmp = strstr(line, "\"comparisons\":[{");
	ok(cmp != NULL, "report has a comparison");
	ok(cmp && cli_json_num(cmp, "throughput_onesided_over_rpc", &thr) && thr > 0 &&
	   cli_json_num(cmp, "bytes_onesided_over_raw", &raw) && raw > 0,
	   "ratios: onesided/rpc throughput %.2f, onesided/raw bytes %.2f", thr, raw);
	if (cmp)
		(void)(cli_json_num(cmp, "primary_cpu_onesided_over_rpc", &prpc) &&
		       cli_json_num(cmp, "primary_cpu_onesided_over_raw", &praw));
	ok(prpc > 0 && praw > 0, "ratios: primary CPU per object onesided/rpc %.2f, "
	   "onesided/raw %.2f", prpc, praw);
	driven_text(bench, prov);
	return tap_exit();
}
