/*
 * tests/integration/twd_badlog.c — a bad file about one log costs that log only (issue 28).
 *
 * A twd holds four logs (a segment each); it is stopped and three of them get a file it cannot
 * trust, each with a valid CRC, an epoch of 2^63 - 1 (above TW_EPOCH_MAX = 2^48 - 1):
 *   A  its epoch file (the one-file-per-log fence of Tailwind 0.1);
 *   C  a fence record in the metadata journal (meta.twlog);
 *   D  the header of a further segment file.
 * The epoch file alone used to stop the whole twd ("cannot start: Numerical result out of
 * range"), the journal record too. Now twd starts, names each log and the file on stderr, serves
 * the good log B (open, write, close, fence, list), refuses every request about A, C and D with
 * that reason, counts them (logs_unavailable=3 in its Stats message), and does all of it again
 * after a second restart.
 *
 * A fifth log E has nothing on the backup but such an epoch file: `twctl recover` of it used to
 * say "no such log ... none of the 1 reachable backups has ever held or fenced it" (exit 6);
 * now it names the backup and the reason, exits 1, and nothing is changed (issue 35).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "proc.h"
#include "backup/metalog.h"
#include "backup/segfile.h"
#include "rmtree.h"
#include "tap.h"
#include "twd_client.h"

#define BUF (64 * 1024)
#define BAD_EPOCH ((uint64_t)INT64_MAX)

static const uint64_t LOG_A = 0xa1, LOG_B = 0xb2, LOG_C = 0xc3, LOG_D = 0xd4, LOG_E = 0xe5;
static char twd_path[1024], twctl_path[1024], dir[64];

/* twd with its stderr in the pipe too: the lines before `ready` are collected into `log`. */
static struct proc *start_twd(char *addr, size_t len, char *log, size_t loglen)
{
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)"exec \"$0\" \"$@\" 2>&1",
			 twd_path, (char *)"-p", (char *)"tcp", (char *)"-d", dir,
			 (char *)"--buffers", (char *)"4", (char *)"--buffer-size", (char *)"64K",
			 NULL };
	struct proc *p = proc_spawn(argv, NULL);
	char line[1024];
	size_t used = 0;
	int rc;

	TAP_REQUIRE(p, "spawn twd");
	log[0] = '\0';
	for (;;) {
		rc = proc_wait_line(p, NULL, line, sizeof(line), 20000);
		if (rc < 0)
			break;
		if (strncmp(line, "ready ", 6) == 0) {
			snprintf(addr, len, "%.*s", (int)len - 1, line + 6);
			return p;
		}
		used += (size_t)snprintf(log + used, loglen - used, "%s\n", line);
		if (used >= loglen)
			used = loglen - 1;
	}
	tap_diag("twd output: %s", log);
	proc_free(p);
	return NULL;
}

static void stop_twd(struct proc *p, const char *when)
{
	proc_kill(p, SIGTERM);
	is_int(proc_wait(p, 20000), 0, "%s: twd exits 0 on SIGTERM", when);
	proc_free(p);
}

static int write_segment(struct twc *c, uint64_t log, uint64_t seg, uint64_t epoch)
{
	int rc = twc_seg_init(c, BUF);

	if (rc == 0)
		rc = twc_open(c, log, seg, epoch, 1, BUF);
	for (int i = 0; rc == 0 && i < 4; i++)
		rc = twc_write(c, 2, 100, (uint32_t)(log + (uint64_t)i));
	return rc ? rc : twc_close_seg(c, UINT64_MAX, 0, NULL);
}

/* The three bad files, each with a valid checksum. */
static void plant(void)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct metalog_rec rec = { METALOG_OWNER, LOG_C, BAD_EPOCH, 0, 0 };
	struct segfile_hdr h = { .log_id = LOG_D, .segment_id = 5, .replica_version = 1,
				 .epoch = BAD_EPOCH, .state = SEGFILE_CLOSED, .buffer_size = BUF };
	struct metalog ml;
	char why[256];
	static char zero[4096];

	TAP_REQUIRE(dfd >= 0, "open %s", dir);
	TAP_REQUIRE(tw__segfile_write_epoch(dfd, LOG_A, BAD_EPOCH) == 0, "epoch file of A");
	TAP_REQUIRE(tw__segfile_write_epoch(dfd, LOG_E, BAD_EPOCH) == 0, "epoch file of E");
	TAP_REQUIRE(tw__metalog_open(&ml, NULL, dfd, 64, NULL, NULL, why, sizeof(why)) == 0, "%s", why);
	TAP_REQUIRE(tw__metalog_append(&ml, &rec) == 0, "journal record of C");
	tw__metalog_close(&ml);
	TAP_REQUIRE(tw__segfile_write(dfd, &h, zero, NULL) == 0, "segment file of D");
	close(dfd);
}

/* twctl recover of log E, which the backup holds only as a refused epoch file. */
static void recover_unavailable(int round, const char *addr)
{
	struct cli_out o;
	int st = cli_run_prog(twctl_path, (const char *[]){ "-p", "tcp", "-b", addr, "recover",
							    "0xe5", "--verify", NULL },
			      (char *[]){ (char *)"TW_BACKUPS=", NULL }, NULL, 0, 30000, &o);
	bool named = strstr(o.err, "log 0xe5 is unavailable") && strstr(o.err, addr) &&
		     strstr(o.err, "00000000000000e5.twepoch") &&
		     strstr(o.err, "nothing was changed") && !strstr(o.err, "no such log");

	ok(st == 1 && named, "start %d: twctl recover of a log only refused here: exit %d (not 6), "
	   "names the backup and the reason", round, st);
	if (st != 1 || !named)
		tap_diag("twctl said: %s", o.err);
	cli_out_free(&o);
}

/* One start on the planted directory: round 1 and 2 (a restart of the first). */
static void check_round(int round)
{
	static const uint64_t bad[] = { LOG_A, LOG_C, LOG_D };
	static const char *const file[] = { "00000000000000a1.twepoch", "meta.twlog",
					    "00000000000000d4-0000000000000005.twseg" };
	char addr[256], log[8192], name[80];
	struct twc c;
	struct twc_stats st;
	struct twc_info li[8];
	uint64_t epoch = 0;
	unsigned named = 0, refused = 0;
	struct proc *p = start_twd(addr, sizeof(addr), log, sizeof(log));
	int rc, n;

	ok(p != NULL, "start %d: twd starts (ready) with a bad file about three of its logs", round);
	if (!p)
		return;
	for (size_t i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "log %016" PRIx64 " is unavailable on this backup",
			 bad[i]);
		named += strstr(log, name) && strstr(log, file[i]);
	}
	is_int(named, 3, "start %d: it names each of them and its file on stderr", round);
	if (named != 3)
		tap_diag("twd said: %s", log);
	rc = twc_connect(&c, "tcp", addr);
	TAP_REQUIRE(rc == 0, "connect: %s", tw_strerror(rc));
	rc = twc_stats(&c, &st);
	ok(rc == 0 && st.logs_unavailable == 4, "start %d: Stats: logs_unavailable=%" PRIu64,
	   round, st.logs_unavailable);

	/* The good log: write a segment at its epoch, fence it one further, list it. */
	rc = write_segment(&c, LOG_B, (uint64_t)round, (uint64_t)round);
	ok(rc == 0, "start %d: log b2 is served: segment %d written and closed (%s)", round, round,
	   tw_strerror(rc));
	rc = tw__rpc_fence(c.rpc, LOG_B, (uint64_t)round + 1, &epoch, NULL);
	ok(rc == 0 && epoch == (uint64_t)round + 1, "start %d: and fenced at epoch %d (%s)", round,
	   round + 1, tw_strerror(rc));
	n = twc_list(&c, LOG_B, false, li, 8);
	is_int(n, round + 1, "start %d: and listed: %d segments", round, round + 1);

	/* The bad ones: every request refused, with the reason. */
	for (size_t i = 0; i < 3; i++) {
		struct tw_rpc_seg_meta m = { bad[i], 9, 0, 0 };
		struct tw_rkey rk;
		bool said;

		rc = tw__rpc_open_segment(c.rpc, 1, &m, 1, BUF, &rk);
		said = strstr(tw__rpc_client_errmsg(c.rpc), "unavailable on this backup") != NULL;
		rc = rc == -TW_ECORRUPT && said ? tw__rpc_fence(c.rpc, bad[i], 1000, &epoch, NULL) : 0;
		said = strstr(tw__rpc_client_errmsg(c.rpc), "unavailable on this backup") != NULL;
		refused += rc == -TW_ECORRUPT && said;
		if (rc != -TW_ECORRUPT || !said)
			tap_diag("log %" PRIx64 ": %s: %s", bad[i], tw_strerror(rc),
				 tw__rpc_client_errmsg(c.rpc));
	}
	is_int(refused, 3, "start %d: opens and fences of the three are refused (CORRUPT, with "
	       "the reason)", round);
	twc_close(&c);
	recover_unavailable(round, addr);
	stop_twd(p, round == 1 ? "start 1" : "start 2");
}

int main(void)
{
	char addr[256], log[8192];
	struct proc *p;
	struct twc c;
	int rc;

	if (proc_find_tool("tools/twd", twd_path, sizeof(twd_path)) != 0)
		tap_plan_skip_all("twd not built");
	if (proc_find_tool("tools/twctl", twctl_path, sizeof(twctl_path)) != 0)
		tap_plan_skip_all("twctl not built");
	snprintf(dir, sizeof(dir), "/tmp/tw-badlog-XXXXXX");
	TAP_REQUIRE(mkdtemp(dir), "mkdtemp");
	tap_plan(18);
	p = start_twd(addr, sizeof(addr), log, sizeof(log));
	TAP_REQUIRE(p, "twd starts on an empty directory");
	TAP_REQUIRE(twc_connect(&c, "tcp", addr) == 0, "connect");
	for (uint64_t l = LOG_A; l <= LOG_D; l += 0x11) {
		rc = write_segment(&c, l, 0, 1);
		TAP_REQUIRE(rc == 0, "segment 0 of log %" PRIx64 ": %s", l, tw_strerror(rc));
	}
	twc_close(&c);
	proc_kill(p, SIGTERM);
	TAP_REQUIRE(proc_wait(p, 20000) == 0, "set-up twd exits 0");
	proc_free(p);
	plant();
	check_round(1);
	check_round(2);
	rm_tree(dir);
	return tap_exit();
}
