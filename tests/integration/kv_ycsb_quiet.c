/*
 * tests/integration/kv_ycsb_quiet.c — a short twkv-ycsb run (examples/kv, docs/kv.md) on a real
 * provider (argv[1]) stops its local clusters quietly: four clusters (workloads a and w, onesided
 * and rpc) are started, loaded, measured and stopped, and nothing on stderr but twkv-ycsb's own
 * progress lines: no "backup ... lost", no "appends suspended", no warning at all. A stop that
 * was asked for is not a loss (issue 34: every run ended with such warnings, because the
 * servers' drain was cut short by a second SIGTERM).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "proc.h"
#include "tap.h"

int main(int argc, char **argv)
{
	char ycsb[512], twkv[512], other[512] = "";
	const char *args[] = { "--provider", argv[1], "--records", "2000", "--duration", "0.3",
			       "--warmup", "0.1", "--mix", "a,w", "--clients", "32", "--twkv", twkv,
			       NULL };
	struct cli_out o;
	unsigned odd = 0;
	int st;

	if (argc != 2) {
		fprintf(stderr, "usage: %s tcp|sockets|shm\n", argv[0]);
		return 2;
	}
	TAP_REQUIRE(proc_find_tool("examples/kv/twkv-ycsb", ycsb, sizeof(ycsb)) == 0 &&
		    proc_find_tool("examples/kv/twkv", twkv, sizeof(twkv)) == 0,
		    "examples/kv/twkv-ycsb or twkv not built");
	st = cli_run_prog(ycsb, args, NULL, NULL, 0, 240000, &o);
	ok(st == 0 && strstr(o.out, "onesided") && strstr(o.out, "rpc"),
	   "twkv-ycsb ran workloads a and w, onesided and rpc (status %d)", st);
	/* Every stderr line must be twkv-ycsb's own progress. */
	for (const char *p = o.err; *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n && strncmp(p, "twkv-ycsb: ", 11)) {
			if (!odd++)
				snprintf(other, sizeof(other), "%.*s", (int)n, p);
			tap_diag("stderr: %.*s", (int)n, p);
		}
		p += n + (nl ? 1 : 0);
	}
	ok(odd == 0, "stderr holds nothing but twkv-ycsb's progress: %u other lines%s%s", odd,
	   odd ? ", the first: " : "", other);
	ok(!strstr(o.err, "lost") && !strstr(o.err, "appends suspended"),
	   "no \"backup lost\" or \"appends suspended\" at teardown");
	cli_out_free(&o);
	tap_done_testing();
	return tap_exit();
}
