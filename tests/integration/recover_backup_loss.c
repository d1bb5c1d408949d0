/*
 * tests/integration/recover_backup_loss.c — a backup dies in the middle of a recovery
 * (argv[1]: provider, default tcp). Three twd's; a crash_primary writes a log to completion;
 * tw_recover() starts, and its entry callback SIGKILLs one twd at the first entry, while grants
 * and reads from that backup are in flight (the fetch window runs ahead of delivery). Every
 * segment must still come, verified and in order, from the two others.
 * Then the same with a backup that goes silent (SIGSTOP: its connection stays, its grants time
 * out): it costs one timeout, not one per remaining segment, so at most segs_per_backup
 * segments are fetched again. Here the reads in flight hit the op timeout, which closes the
 * channel; a grant whose RPC times out (no read in flight) now also retires the backup
 * (recover_fetch.c, slot_fail), which this test cannot stage on purpose.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/recovery.h>

#include "child.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define COUNT 8000
#define LOG 0x8000

struct killer {
	struct rt_check chk;
	struct rt_cluster *cl;
	unsigned victim;
	bool killed;
};

static int sig = SIGKILL;

static int kill_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct killer *k = arg;

	if (!k->killed && e->index == 0) {
		proc_kill(k->cl->p[k->victim], sig);
		k->killed = true;
	}
	return rt_check_cb(&k->chk, e);
}

/* A crash_primary writes COUNT objects to log `log` on two or three backups and closes it. */
static void write_log(const char *prim, const char *prov, unsigned log, char *a0, char *a1,
		      char *a2, const char *what)
{
	char logid[32], count[32], line[256];
	char *pargv[] = { (char *)prim, (char *)prov, logid, (char *)"65536", count, a0, a1, a2,
			  NULL };
	struct proc *p;
	int rc;

	snprintf(logid, sizeof(logid), "0x%x", log);
	snprintf(count, sizeof(count), "%d", COUNT);
	p = proc_spawn(pargv, NULL);
	TAP_REQUIRE(p, "spawn");
	rc = proc_wait_line(p, "done", line, sizeof(line), 30000);
	TAP_REQUIRE(rc >= 0, "crash_primary done: %s", strerror(-rc));
	is_int(proc_wait(p, 20000), 0, "%s (%d objects)", what, COUNT);
	proc_free(p);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	char prim[1024], err[512];
	struct rt_cluster cl;
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	struct killer k;
	int rc;

	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	tap_plan(6);
	rt_start(&cl, prov, 3, "64K", "32");
	write_log(prim, prov, LOG, cl.addr[0], cl.addr[1], cl.addr[2],
		  "the primary wrote the objects to backups 0, 1, 2 and closed the log");

	memset(&k, 0, sizeof(k));
	k.cl = &cl;
	k.victim = 1;
	tlog_recover_config(&cfg, prov, cl.addrs, 3, LOG);
	cfg.rpc_timeout_ms = 5000;
	cfg.op_timeout_ms = 5000;
	rc = tw_recover(&cfg, kill_cb, &k, &res, err, sizeof(err));
	ok(rc == 0 && k.killed && k.chk.bad == 0 && k.chk.next == COUNT,
	   "backup 1 killed during the fetch: all %" PRIu64 " objects recovered in order%s%s%s%s",
	   k.chk.next, rc ? ": " : "", rc ? err : "", k.chk.bad ? ": " : "",
	   k.chk.bad ? k.chk.first_bad : "");
	ok(res.segments >= 10, "%" PRIu64 " segments; %" PRIu64 " fetched again from another "
	   "backup", res.segments, res.refetches);

	/* A silent backup: SIGSTOP at the first entry, short timeouts. Backup 1 is gone, so r=3
	 * copies leave backups 0 and 2; stop backup 2 and every remaining segment must come from
	 * backup 0. */
	write_log(prim, prov, LOG + 1, cl.addr[0], cl.addr[2], NULL,
		  "a second log of the same objects on backups 0 and 2");
	memset(&k, 0, sizeof(k));
	k.cl = &cl;
	k.victim = 2;
	sig = SIGSTOP;
	{
		const char *two[] = { cl.addr[0], cl.addr[2] };

		cfg.log_id = LOG + 1;
		cfg.backups = two;
		cfg.n_backups = 2;
		cfg.rpc_timeout_ms = 1000;
		cfg.op_timeout_ms = 1000;
		rc = tw_recover(&cfg, kill_cb, &k, &res, err, sizeof(err));
	}
	proc_kill(cl.p[2], SIGCONT);
	ok(rc == 0 && k.killed && k.chk.bad == 0 && k.chk.next == COUNT,
	   "backup 2 stopped during the fetch: all %" PRIu64 " objects recovered in order%s%s",
	   k.chk.next, rc ? ": " : "", rc ? err : "");
	ok(res.refetches <= cfg.segs_per_backup, "the silent backup cost its in-flight segments "
	   "only: %" PRIu64 " of %" PRIu64 " segments fetched again (at most %u)", res.refetches,
	   res.segments, cfg.segs_per_backup);
	proc_wait(cl.p[1], 20000);
	proc_free(cl.p[1]);
	cl.p[1] = NULL;
	rt_stop(&cl);
	return tap_exit();
}
