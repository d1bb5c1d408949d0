/*
 * tests/integration/twbench_cli.c — twbench's messages and its clean-up (tcp):
 * --version; --count -1 / --latency-count -1 / -r 0 / --provider '' are one-line errors naming
 * the option and the allowed range (exit 2); an unknown provider says so (exit 4, no "Broken
 * pipe"); progress lines while the local backups start; SIGINT while the backups start and
 * during a run stops the twd's (none is left for us, the subreaper, to adopt) and removes the
 * temporary directories under $TMPDIR.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli_run.h"
#include "core/util.h"
#include "proc.h"
#include "rmtree.h"
#include "tap.h"
#include "twd_client.h"
#include "tmpdir.h"

static char bench[1024];

static int run(const char *const *args, char *const *env, const char *trigger, int sig,
	       struct cli_out *o)
{
	return cli_run_prog(bench, args, env, trigger, sig, 120000, o);
}

static void one_line_error(const char *const *args, const char *what, const char *want1,
			   const char *want2)
{
	struct cli_out o;
	int st = run(args, NULL, NULL, 0, &o);

	is_int(st, 2, "%s: exit 2", what);
	ok(cli_lines(o.err) == 1 && strstr(o.err, want1) && strstr(o.err, want2),
	   "%s: one line naming '%s' and '%s'", what, want1, want2);
	if (cli_lines(o.err) != 1 || !strstr(o.err, want1) || !strstr(o.err, want2))
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
}

/* Entries in dir other than . and .. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d) {
		tap_diag("opendir %s: %s", dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			tap_diag("left under %s: %s", dir, de->d_name);
			n++;
		}
	closedir(d);
	return n;
}

/* Children reparented to us (we are a subreaper) that are still around or unreaped. */
static int adopted(void)
{
	int n = 0;
	pid_t w;

	while ((w = waitpid(-1, NULL, WNOHANG)) > 0)
		n++; /* exited orphans: the twd outlived twbench */
	if (w == 0)
		n++; /* at least one orphan still running */
	return n;
}

static void interrupt(const char *tmp, const char *trigger, const char *what)
{
	char env[600];
	char *envv[] = { env, NULL };
	struct cli_out o;
	int st;

	snprintf(env, sizeof(env), "TMPDIR=%s", tmp);
	st = run((const char *[]){ "--provider", "tcp", "--count", "10M", "--no-progress", NULL },
		 envv, trigger, SIGINT, &o);
	ok(o.sig_sent, "%s: SIGINT sent after \"%s\"", what, trigger);
	is_int(st, 128 + SIGINT, "%s: twbench ends by SIGINT", what);
	ok(strstr(o.err, "removing"), "%s: says it stops the twd's and removes its directory",
	   what);
	is_int(entries(tmp), 0, "%s: nothing left under $TMPDIR", what);
	is_int(adopted(), 0, "%s: no twd outlived twbench", what);
	if (st != 128 + SIGINT || entries(tmp) != 0)
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
}

/*
 * Latencies above 2^32 ns: they were kept as 32-bit nanoseconds, so every latency above 4.29 s
 * read 4294967.3 us. An open-loop run (--rate 2000, 7 s) whose submitter is stopped for 4.5 s
 * once its appends flow (the backup's open segment has data): the objects scheduled meanwhile
 * are acknowledged up to 4.5 s after their scheduled time, and the p99 must say so.
 */
static void long_latency(const char *twd_addr)
{
	char *argv[] = { bench, (char *)"--backups", (char *)twd_addr, (char *)"-r", (char *)"1",
			 (char *)"--segment-size", (char *)"64K", (char *)"--rate", (char *)"2000",
			 (char *)"--count", (char *)"14000", (char *)"--json", (char *)"--no-settle",
			 NULL };
	struct timespec pause = { 4, 500000000 };
	struct twc_info li[4];
	char line[8192];
	const char *q;
	double p99 = 0;
	bool flowing = false;
	struct proc *p = proc_spawn(argv, NULL);
	struct twc c;
	int st;

	TAP_REQUIRE(p, "spawn twbench");
	/* The event: a segment of twbench's log holds data on the backup. */
	for (uint64_t end = tw_now_ns() + 60000000000ull; !flowing && tw_now_ns() < end;) {
		if (twc_connect(&c, "tcp", twd_addr) != 0)
			continue;
		for (int k = 0; k < 50 && !flowing; k++) {
			int n = twc_list(&c, 0, true, li, 4);

			for (int i = 0; i < n; i++)
				flowing |= li[i].valid_len > 0;
		}
		twc_close(&c);
	}
	TAP_REQUIRE(flowing, "twbench's appends reach the backup");
	proc_kill(p, SIGSTOP);
	nanosleep(&pause, NULL); /* the latency to measure, not a synchronisation */
	proc_kill(p, SIGCONT);
	st = proc_wait_line(p, "{", line, sizeof(line), 120000);
	q = st > 0 ? strstr(line, "\"async_ack_latency_us\":{\"p50\":") : NULL;
	if (q && (q = strstr(q, "\"p99\":")))
		p99 = strtod(q + 6, NULL);
	is_int(proc_wait(p, 60000), 0, "--rate run with a 4.5 s stop: exit 0");
	proc_free(p);
	ok(p99 > 4294967.3 && p99 < 60e6, "its ack latency p99 is %.1f us, above the 32-bit "
	   "nanosecond clamp (4294967.3 us)", p99);
}

/* Running twd's with buffers smaller than the segment size: refused before any run (it used
 * to fail at the first open, after the set-up). */
static void small_buffers(void)
{
	char twd[1024], dir[] = "/tmp/tw-twbenchsmall-XXXXXX", line[512], addr[512];
	char *targv[] = { twd, (char *)"-p", (char *)"tcp", (char *)"-d", dir, (char *)"-b",
			  (char *)"2", (char *)"-s", (char *)"64K", NULL };
	struct cli_out o;
	struct proc *p;
	int st;

	TAP_REQUIRE(proc_find_tool("tools/twd", twd, sizeof(twd)) == 0 && mkdtemp(dir), "twd");
	p = proc_spawn(targv, NULL);
	TAP_REQUIRE(p && proc_wait_line(p, "ready ", line, sizeof(line), 20000) > 0, "twd ready");
	snprintf(addr, sizeof(addr), "%s", line + 6);
	st = run((const char *[]){ "--backups", addr, "-r", "1", "--count", "10", NULL }, NULL,
		 NULL, 0, &o);
	ok(st == 2 && strstr(o.err, "has buffers of 65536 bytes") &&
	   strstr(o.err, "give --segment-size 65536 or less") && !strstr(o.err, "cannot open"),
	   "--backups with 64 KiB buffers and 8 MiB segments: exit %d before any run", st);
	if (st != 2)
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
	long_latency(addr);
	proc_kill(p, SIGTERM);
	proc_wait(p, 20000);
	proc_free(p);
	rm_tree(dir);
}

int main(void)
{
	char tmp[256];
	struct cli_out o;
	int st;

	child_tool("tools/twbench", bench, sizeof(bench));
	tmpdir_make(tmp, sizeof(tmp), NULL, "tw-twbenchcli");
	TAP_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "PR_SET_CHILD_SUBREAPER");

	st = run((const char *[]){ "--version", NULL }, NULL, NULL, 0, &o);
	is_int(st, 0, "--version: exit 0");
	ok(strncmp(o.out, "twbench (tailwind) ", 19) == 0, "--version prints the version: %s",
	   o.out);
	cli_out_free(&o);
	st = run((const char *[]){ "--help", NULL }, NULL, NULL, 0, &o);
	ok(st == 0 && strstr(o.out, "--version"), "--help lists --version");
	cli_out_free(&o);

	one_line_error((const char *[]){ "--count", "-1", NULL }, "--count -1", "--count",
		       "from 1 to 1000000000");
	one_line_error((const char *[]){ "--latency-count", "-1", NULL }, "--latency-count -1",
		       "--latency-count", "from 0 to 1000000000");
	one_line_error((const char *[]){ "-r", "0", NULL }, "-r 0", "-r '0'", "from 1 to 16");
	one_line_error((const char *[]){ "--batch", "x", NULL }, "--batch x", "--batch", "from 1");
	one_line_error((const char *[]){ "--provider", "", NULL }, "--provider ''", "--provider",
		       "provider name");
	/* A segment size the primary and the twd's would refuse, refused before any twd starts
	 * (it used to start three twd's, which exited with status 2). */
	one_line_error((const char *[]){ "--segment-size", "5000", NULL }, "--segment-size 5000",
		       "--segment-size", "multiple of the page size");
	small_buffers();

	st = run((const char *[]){ "--provider", "nosuch", "--count", "10", NULL }, NULL, NULL, 0,
		 &o);
	is_int(st, 4, "--provider nosuch: exit 4 (provider unavailable, as twd and twctl)");
	ok(strstr(o.err, "--provider nosuch") && strstr(o.err, "not available") &&
	   strstr(o.err, "offers: ") && !strstr(o.err, "Broken pipe"),
	   "--provider nosuch: says the provider is not available and what is");
	tap_diag("stderr: %s", o.err);
	cli_out_free(&o);

	{
		char env[600];
		char *envv[] = { env, NULL };

		snprintf(env, sizeof(env), "TMPDIR=%s", tmp);
		st = run((const char *[]){ "--provider", "tcp", "--count", "2000", "--latency-count",
			 "10", "--no-progress", NULL }, envv, NULL, 0, &o);
		is_int(st, 0, "a short run: exit 0");
		ok(strstr(o.err, "starting local backup 1/3") && strstr(o.err, "backup 3/3 ready at "),
		   "progress lines while the backups start");
		is_int(entries(tmp), 0, "a short run: nothing left under $TMPDIR");
		cli_out_free(&o);
	}

	interrupt(tmp, "backup 1/3 ready at ", "SIGINT while the backups start");
	interrupt(tmp, "backup 3/3 ready at ", "SIGINT during the run");

	tmpdir_remove(tmp);
	tap_done_testing();
	return tap_exit();
}
