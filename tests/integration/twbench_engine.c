/*
 * tests/integration/twbench_engine.c — tools/twbench-engine runs, briefly, so that it cannot
 * rot: the four ways of appending (async, driven, loop: driven as from an event loop, batch:
 * async with tw_primary_append_batch) at two sizes, one run each, with few appends; its JSON report holds a run and a range per point
 * with non-zero appends/s and CPU per append, and the driven and loop runs' CPU is the
 * appending thread's; the loop runs send far fewer SetAcked (published on demand). No speed is
 * asserted (docs/benchmarks.md, "The engine alone", has the numbers); the report is printed as
 * diagnostics. Then with --fabric
 * null (the "mem-null" transport: the backups' threads place the bytes), across several segment
 * rollovers, whose closes succeed only if every write's bytes were placed on every backup.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "tap.h"

/* The run's `set_acked` (SetAcked sent), or -1. */
static double set_acked(const char *json, const char *append, unsigned size)
{
	char pat[96];
	const char *r;
	double v = -1;

	snprintf(pat, sizeof(pat), "{\"append\":\"%s\",\"size\":%u,\"run\":1", append, size);
	r = strstr(json, pat);
	if (!r || !cli_json_num(r, "set_acked", &v))
		return -1;
	return v;
}

static void check_run(const char *json, const char *append, unsigned size)
{
	char pat[96];
	const char *r;
	double ops = 0, cpu = 0, app = 0, writes = 0;
	bool have;

	snprintf(pat, sizeof(pat), "{\"append\":\"%s\",\"size\":%u,\"run\":1", append, size);
	r = strstr(json, pat);
	if (!ok(r != NULL, "%s %u B: a run in the report", append, size)) {
		tap_skip(2, "no run");
		return;
	}
	have = cli_json_num(r, "appends_per_s", &ops) && cli_json_num(r, "cpu_ns_per_append", &cpu) &&
	       cli_json_num(r, "app_thread_cpu_ns_per_append", &app) &&
	       cli_json_num(r, "writes", &writes);
	ok(have && ops > 0 && cpu > 0 && app > 0 && writes > 0, "%s %u B: %.0f appends/s, %.0f ns CPU per append (%.0f on the appending thread), "
	   "%.0f writes", append, size, ops, cpu, app, writes);
	/* Driven and loop: no thread of the primary's own, so all of its CPU is the appending
	 * thread's (the two clocks differ by rounding only). Async and batch: the progress thread
	 * adds to it. */
	if (strcmp(append, "async") && strcmp(append, "batch"))
		ok(cpu > 0.9 * app && cpu < 1.1 * app + 50, "%s: primary CPU %.0f ns is the "
		   "appending thread's %.0f ns", append, cpu, app);
	else
		ok(cpu >= 0.9 * app, "%s: primary CPU %.0f ns >= the appending thread's %.0f ns",
		   append, cpu, app);
}

int main(void)
{
	char bench[1024], line[16384];
	const char *rg;
	double lo = 0, hi = 0;

	child_tool("tools/twbench-engine", bench, sizeof(bench));
	{
		char *args[] = { bench, (char *)"--count", (char *)"20000", (char *)"--max-bytes",
				 (char *)"16000000", (char *)"--runs", (char *)"1", (char *)"--sizes",
				 (char *)"100,4096", (char *)"--segment-size", (char *)"1048576",
				 (char *)"--json", NULL };

		tap_plan(43);
		if (!child_report(args, 120000, line, sizeof(line),
				  "twbench-engine --json printed its report", "twbench-engine exited 0")) {
			tap_skip(20, "no report");
			return tap_exit();
		}
	}
	tap_diag("%s", line);
	check_run(line, "async", 100);
	check_run(line, "async", 4096);
	check_run(line, "driven", 100);
	check_run(line, "driven", 4096);
	check_run(line, "loop", 100);
	check_run(line, "loop", 4096);
	check_run(line, "batch", 100);
	check_run(line, "batch", 4096);
	{
		/* The same calls, but a log driven from a loop publishes its acknowledged position on
		 * demand, where a plain one sends every replica a SetAcked at each call that moved
		 * it (docs/readers.md, "Publishing"). */
		double d = set_acked(line, "driven", 100), l = set_acked(line, "loop", 100);

		ok(l >= 0 && d > 0 && l * 4 < d, "loop publishes on demand: %.0f SetAcked against "
		   "%.0f driven (100 B)", l, d);
	}
	rg = strstr(line, "\"ranges\":[{\"append\":\"async\",\"size\":100,");
	if (rg)
		(void)(cli_json_num(rg, "min", &lo) && cli_json_num(rg, "max", &hi));
	ok(rg && lo > 0 && lo <= hi, "ranges: async 100 B %.0f-%.0f appends/s", lo, hi);
	{
		/* 40,000 x 100 B over 256 KiB segments: about 18 rollovers. */
		char *args[] = { bench, (char *)"--fabric", (char *)"null", (char *)"--count",
				 (char *)"40000", (char *)"--runs", (char *)"1", (char *)"--sizes",
				 (char *)"100", (char *)"--segment-size", (char *)"262144", (char *)"--json",
				 NULL };

		if (!child_report(args, 120000, line, sizeof(line),
				  "twbench-engine --fabric null --json printed its report",
				  "twbench-engine --fabric null exited 0 (every segment closed)")) {
			tap_skip(10, "no report");
			return tap_exit();
		}
	}
	tap_diag("%s", line);
	ok(strstr(line, "\"provider\":\"mem-null\"") != NULL, "--fabric null: provider mem-null");
	check_run(line, "async", 100);
	check_run(line, "driven", 100);
	check_run(line, "loop", 100);
	check_run(line, "batch", 100);
	return tap_exit();
}
