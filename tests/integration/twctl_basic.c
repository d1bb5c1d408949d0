/*
 * tests/integration/twctl_basic.c — the twctl tool against three real twd's (argv[1]: provider,
 * default tcp): a crash_primary writes a log to completion; then twctl ls, stat (table and
 * JSON), recover -o FILE (the file holds every object, in order), recover --verify, fence,
 * inspect of a segment file (ok, then CORRUPT after a bit flip: exit 1), and usage errors
 * (exit 2 with a message). Then free against a primary that holds its open segment 2: below 5
 * is refused (exit 1, nothing freed, as --help says), below 2 drops segments 0..1 and says so.
 * Last, fence -e 2^48-1 --force of another log: fenced, with a warning.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"

#define COUNT 2000
#define LOG "0x4242"

static char twctl[1024];
static char backups[1024];

/* Run twctl with args (NULL-terminated, after the tool name); copy the first stdout line
 * starting with `prefix` (NULL: first line) into line. Returns the exit status. */
static int run(const char *prefix, char *line, size_t len, const char *const *args)
{
	char env[1100];
	char *envv[] = { env, NULL };
	struct cli_out o;
	int rc;

	snprintf(env, sizeof(env), "TW_BACKUPS=%s", backups);
	rc = cli_run_prog(twctl, args, envv, NULL, 0, 30000, &o);
	if (line)
		cli_line(o.out, prefix, line, len);
	cli_out_free(&o);
	return rc;
}

static const char *first_segfile(const char *dir, char *out, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	out[0] = '\0';
	while (d && (de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);

		if (l > 6 && strcmp(de->d_name + l - 6, ".twseg") == 0) {
			snprintf(out, len, "%s/%s", dir, de->d_name);
			break;
		}
	}
	if (d)
		closedir(d);
	return out;
}

static uint64_t check_file(const char *path, uint64_t *bad)
{
	FILE *f = fopen(path, "rb");
	uint8_t obj[RT_OBJ], want[RT_OBJ];
	uint64_t n = 0;
	int rc;

	*bad = 0;
	if (!f)
		return 0;
	while ((rc = rt_read_entry(f, obj, RT_OBJ)) != 0) {
		if (rc < 0) {
			(*bad)++;
			break;
		}
		rt_fill(want, n);
		if (memcmp(obj, want, RT_OBJ) != 0)
			(*bad)++;
		n++;
	}
	fclose(f);
	return n;
}

/* twctl ARGS with stdout and stderr captured: the exit status. */
static int run_out(const char *const *args, struct cli_out *o)
{
	char env[1100], *argv[32];
	int n = 0;

	snprintf(env, sizeof(env), "TW_BACKUPS=%s", backups);
	argv[n++] = twctl;
	for (; *args && n < 31; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	return cli_run(argv, (char *[]){ env, NULL }, NULL, 0, 60000, o);
}

/* twctl free next to a live primary whose segment 2 is open (owner_primary hold). */
static void free_cases(const char *prov, struct rt_cluster *cl)
{
	char owner[1024], line[256];
	char *pargv[] = { owner, (char *)prov, (char *)"0x4343", (char *)"hold", (char *)"7",
			  (char *)"1500", cl->addr[0], cl->addr[1], cl->addr[2], NULL };
	struct cli_out o;
	struct proc *p;
	int st;

	TAP_REQUIRE(proc_find_tool("tests/integration/owner_primary", owner, sizeof(owner)) == 0,
		    "owner_primary built");
	p = proc_spawn(pargv, NULL);
	TAP_REQUIRE(p && proc_wait_line(p, "appended", line, sizeof(line), 60000) >= 0,
		    "a primary holding log 0x4343 with segment 2 open");
	st = run_out((const char *[]){ "free", "--help", NULL }, &o);
	ok(st == 0 && strstr(o.out, "A backup refuses, and keeps all its copies, while the"),
	   "free --help says a segment still written below N is refused");
	cli_out_free(&o);
	st = run_out((const char *[]){ "-p", prov, "free", "0x4343", "--below", "5", NULL }, &o);
	ok(st == 1 && !o.out[0] && strstr(o.err, "is still open") &&
	   strstr(o.err, "nothing was freed"), "free below 5: exit %d, refused, nothing freed", st);
	if (st != 1)
		tap_diag("stdout %s stderr %s", o.out, o.err);
	cli_out_free(&o);
	st = run_out((const char *[]){ "-p", prov, "ls", "0x4343", NULL }, &o);
	ok(st == 0 && strstr(o.out, "# 9 segment copies on 3 of 3"), "and every copy is still "
	   "there (ls: %s)", strstr(o.out, "# ") ? strstr(o.out, "# ") : o.out);
	cli_out_free(&o);
	st = run_out((const char *[]){ "-p", prov, "free", "0x4343", "--below", "2", NULL }, &o);
	ok(st == 0 && strstr(o.out, "6 segment copies dropped (segments 0..1)"),
	   "free below 2: exit %d: %s", st, o.out);
	cli_out_free(&o);
	proc_kill(p, SIGKILL);
	proc_wait(p, 20000);
	proc_free(p);
}

/* Commands about a log no backup has ever held or fenced: exit 6, nothing changed. */
static void no_such_log(const char *prov)
{
	struct cli_out o;
	int st, st2, st3;

	st = run_out((const char *[]){ "-p", prov, "recover", "0x9999", "--verify", NULL }, &o);
	ok(st == 6 && !o.out[0] && strstr(o.err, "no such log: 0x9999") &&
	   strstr(o.err, "nothing was changed"), "recover of a log nobody has: exit %d, %s", st,
	   o.err);
	cli_out_free(&o);
	/* Nothing was fenced: had it been, the backups would know the id now. */
	st = run_out((const char *[]){ "-p", prov, "recover", "0x9999", "--verify", NULL }, &o);
	cli_out_free(&o);
	st2 = run_out((const char *[]){ "-p", prov, "free", "0x9999", "--below", "1", NULL }, &o);
	cli_out_free(&o);
	st3 = run_out((const char *[]){ "-p", prov, "delete", "0x9999", NULL }, &o);
	cli_out_free(&o);
	ok(st == 6 && st2 == 6 && st3 == 6, "and again, and free and delete of it: exit 6 each "
	   "(%d, %d, %d): nothing was fenced", st, st2, st3);
	st = run_out((const char *[]){ "-p", prov, "recover", "0x9999", "--verify", "--create",
				       NULL }, &o);
	cli_out_free(&o);
	st2 = run_out((const char *[]){ "-p", prov, "recover", "0x9999", "--verify", NULL }, &o);
	cli_out_free(&o);
	ok(st == 0 && st2 == 0, "recover --create makes it (exit %d); then it exists (exit %d)", st,
	   st2);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char prim[1024], line[16384], out[512], seg[512], count[16];
	struct rt_cluster cl;
	struct proc *p;
	uint64_t n, bad;
	int rc;

	child_tool("tools/twctl", twctl, sizeof(twctl));
	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	tap_plan(24);
	rt_start(&cl, prov, 3, "64K", "16");
	snprintf(backups, sizeof(backups), "%s,%s,%s", cl.addr[0], cl.addr[1], cl.addr[2]);
	snprintf(count, sizeof(count), "%d", COUNT);
	{
		char *pargv[] = { prim, (char *)prov, (char *)LOG, (char *)"65536", count, cl.addr[0],
				  cl.addr[1], cl.addr[2], NULL };

		p = proc_spawn(pargv, NULL);
		TAP_REQUIRE(p, "spawn");
		rc = proc_wait_line(p, "done", line, sizeof(line), 30000);
		TAP_REQUIRE(rc >= 0, "crash_primary done: %s", strerror(-rc));
		TAP_REQUIRE(proc_wait(p, 20000) == 0, "crash_primary exit");
		proc_free(p);
	}

	{
		const char *a[] = { "--help", NULL };
		is_int(run("Usage", line, sizeof(line), a), 0, "twctl --help: exit 0");
		ok(strncmp(line, "Usage: twctl", 12) == 0, "usage text on stdout");
	}
	{
		const char *a[] = { "-p", prov, "ls", NULL };
		is_int(run("# ", line, sizeof(line), a), 0, "twctl ls: exit 0");
		ok(strstr(line, " 3 of 3 backups") != NULL, "ls summary: %s", line);
	}
	{
		const char *a[] = { "-p", prov, "--json", "stat", NULL };
		is_int(run(NULL, line, sizeof(line), a), 0, "twctl --json stat: exit 0");
		ok(strncmp(line, "{\"backups\":[{\"backup\":", 22) == 0 &&
		   line[strlen(line) - 1] == '}', "stat JSON document");
	}
	snprintf(out, sizeof(out), "%s/recovered.bin", cl.root);
	{
		const char *a[] = { "-p", prov, "recover", LOG, "-o", out, NULL };
		is_int(run("  entries", line, sizeof(line), a), 0, "twctl recover LOG -o FILE: exit 0");
		ok(strstr(line, "entries        2000 ") != NULL, "summary: %s", line);
		n = check_file(out, &bad);
		ok(n == COUNT && bad == 0, "the file holds objects 0..%d in order (%" PRIu64
		   " records, %" PRIu64 " bad)", COUNT - 1, n, bad);
	}
	{
		const char *a[] = { "-p", prov, "--json", "recover", LOG, "--verify", NULL };
		is_int(run(NULL, line, sizeof(line), a), 0, "twctl --json recover --verify: exit 0");
		ok(strstr(line, "\"entries\":2000,") != NULL && strstr(line, "\"ok\":true"),
		   "JSON result has the 2000 entries");
	}
	{
		const char *a[] = { "-p", prov, "fence", LOG, NULL };
		is_int(run("log ", line, sizeof(line), a), 0, "twctl fence: exit 0 (%s)", line);
	}
	first_segfile(cl.dir[1], seg, sizeof(seg));
	TAP_REQUIRE(seg[0], "a segment file on backup 1");
	{
		const char *a[] = { "inspect", "-e", "2", seg, NULL };
		is_int(run("verdict", line, sizeof(line), a), 0, "twctl inspect FILE: exit 0");
		ok(strstr(line, "ok") != NULL, "%s", line);
	}
	{
		int fd = open(seg, O_RDWR);
		unsigned char b;
		const char *a[] = { "inspect", seg, NULL };

		TAP_REQUIRE(fd >= 0 && pread(fd, &b, 1, 4096 + 50) == 1, "read");
		b ^= 1;
		TAP_REQUIRE(pwrite(fd, &b, 1, 4096 + 50) == 1, "write");
		close(fd);
		is_int(run("verdict", line, sizeof(line), a), 1,
		       "inspect of a file with a flipped bit: exit 1 (%s)", line);
	}
	{
		const char *a1[] = { "recover", NULL };
		const char *a2[] = { "frobnicate", NULL };

		ok(run(NULL, NULL, 0, a1) == 2 && run(NULL, NULL, 0, a2) == 2,
		   "usage errors exit 2 (recover without LOG, unknown command)");
	}
	free_cases(prov, &cl);
	no_such_log(prov);
	{
		/* The last epoch with --force: done, with a warning (issue 35). */
		struct cli_out o;
		int st = run_out((const char *[]){ "-p", prov, "fence", "-e", "281474976710655",
						   "--force", "0x7777", NULL }, &o);

		ok(st == 0 && strstr(o.out, "fenced at epoch 281474976710655 on 3 of 3") &&
		   strstr(o.err, "warning: --epoch 281474976710655 is the last epoch"),
		   "fence -e 2^48-1 --force: exit %d, fenced, with a warning (%s)", st, o.err);
		cli_out_free(&o);
	}
	rt_stop(&cl);
	return tap_exit();
}
