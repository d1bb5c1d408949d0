/*
 * tests/integration/recover_bitflip.c — a bit flipped in flushed segment files is detected and
 * recovery uses another replica (argv[1]: provider, default tcp). Three twd's; a crash_primary
 * writes a log to completion (all segments closed); the twd's are stopped (SIGTERM flushes
 * everything) and restarted, so every copy is a segment file. Then:
 *   1. one bit is flipped in the data of every segment file of backup 0 while it runs: its read
 *      grants fail to load (the file's scan no longer matches its header), recovery warns,
 *      fetches those segments from the other backups and counts the corrupt copies;
 *   2. backup 0 restarts: its index marks the files corrupt, the listing says so, recovery
 *      skips them from the start. Both times every object comes back;
 *   3. backup 1 is killed as well: everything comes from backup 2.
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

#include <tailwind/recovery.h>

#include "child.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define COUNT 3000
#define LOG 0x6000

static unsigned flip_all(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	TAP_REQUIRE(d, "opendir %s", dir);
	while ((de = readdir(d)) != NULL) {
		char path[512];
		unsigned char byte;
		int fd;
		size_t l = strlen(de->d_name);

		if (l < 6 || strcmp(de->d_name + l - 6, ".twseg") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = open(path, O_RDWR);
		TAP_REQUIRE(fd >= 0, "open %s", path);
		/* the data starts after the 4096-byte header block (format 3, backup/segfile.h); flip a
		 * payload bit of the first entry */
		TAP_REQUIRE(pread(fd, &byte, 1, 4096 + 40) == 1, "read %s", path);
		byte ^= 0x10;
		TAP_REQUIRE(pwrite(fd, &byte, 1, 4096 + 40) == 1, "write %s", path);
		close(fd);
		n++;
	}
	closedir(d);
	return n;
}

static int recover(struct rt_cluster *cl, struct rt_check *chk, struct tw_recover_result *res)
{
	struct tw_recover_config cfg;
	char err[512];
	int rc;

	tlog_recover_config(&cfg, cl->prov, cl->addrs, cl->n, LOG);
	memset(chk, 0, sizeof(*chk));
	rc = tw_recover(&cfg, rt_check_cb, chk, res, err, sizeof(err));
	if (rc)
		tap_diag("tw_recover: %s: %s", tw_strerror(rc), err);
	return rc;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char prim[1024], line[256], logid[32], count[32];
	struct rt_cluster cl;
	struct rt_check chk;
	struct tw_recover_result res;
	struct proc *p;
	unsigned files;
	int rc;

	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	tap_plan(6);
	rt_start(&cl, prov, 3, "64K", "16");
	snprintf(logid, sizeof(logid), "0x%x", LOG);
	snprintf(count, sizeof(count), "%d", COUNT);
	{
		char *pargv[] = { prim, (char *)prov, logid, (char *)"65536", count, cl.addr[0],
				  cl.addr[1], cl.addr[2], NULL };

		p = proc_spawn(pargv, NULL);
		TAP_REQUIRE(p, "spawn");
		rc = proc_wait_line(p, "done", line, sizeof(line), 30000);
		TAP_REQUIRE(rc >= 0, "crash_primary done: %s", strerror(-rc));
		is_int(proc_wait(p, 20000), 0, "the primary wrote %d objects and closed the log",
		       COUNT);
		proc_free(p);
	}
	for (unsigned i = 0; i < 3; i++) {
		TAP_REQUIRE(rt_stop_one(&cl, i) == 0, "twd %u stopped cleanly", i);
		rt_restart(&cl, i, "64K", "16");
	}

	files = flip_all(cl.dir[0]);
	TAP_REQUIRE(files >= 3, "segment files on backup 0: %u", files);
	rc = recover(&cl, &chk, &res);
	ok(rc == 0 && chk.bad == 0 && chk.next == COUNT,
	   "bit flips in %u files of a running backup: all %" PRIu64 " objects recovered%s%s",
	   files, chk.next, chk.bad ? ": " : "", chk.bad ? chk.first_bad : "");
	ok(res.copies_corrupt >= 1 && res.refetches >= 1,
	   "corrupt copies detected when loaded and reported (%" PRIu64 " corrupt, %" PRIu64
	   " segments fetched again)", res.copies_corrupt, res.refetches);

	rt_restart(&cl, 0, "64K", "16");
	rc = recover(&cl, &chk, &res);
	ok(rc == 0 && chk.bad == 0 && chk.next == COUNT,
	   "after backup 0 restarts: all %" PRIu64 " objects recovered", chk.next);
	ok(res.copies_corrupt == files && res.refetches == 0,
	   "its index lists the %u files as corrupt and recovery skips them up front (%" PRIu64
	   " corrupt, %" PRIu64 " refetches)", files, res.copies_corrupt, res.refetches);
	/* A backup that is gone: recovery goes on with the two others. */
	proc_kill(cl.p[1], SIGKILL);
	proc_wait(cl.p[1], 20000);
	proc_free(cl.p[1]);
	cl.p[1] = NULL;
	rc = recover(&cl, &chk, &res);
	ok(rc == 0 && chk.bad == 0 && chk.next == COUNT && res.backups_reached == 2,
	   "backup 1 killed, backup 0's files corrupt: all %" PRIu64 " objects from the last "
	   "backup (%u of 3 reachable)", chk.next, res.backups_reached);
	rt_stop(&cl);
	return tap_exit();
}
