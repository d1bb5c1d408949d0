/*
 * tests/integration/twd_stalled.c — clients that stop reading must cost a sockets twd only their
 * own connections (argv[1]: sockets; the test is about that provider's progress entries).
 *
 * Each garbage client (this program, re-executed as "client ADDR PROVIDER") opens CONNS
 * connections and handshakes on each, then sends well-formed, read-only requests with extreme
 * values (Pings with the largest nonce, ListSegments from the largest segment id, ReadSegment of
 * the largest log and segment ids, Stats) while twd is stopped (SIGSTOP), and stops itself
 * before twd goes on: twd answers every request to a client that never reads the answers. twd
 * fails those channels after its operation timeout (10 s) and closes them; the test then kills
 * the client. After each client, and after ROUNDS of them, a new client must handshake and be
 * served.
 *
 * The end-to-end check of #28, bug 2 (libfabric 1.17's sockets provider never gives back the
 * progress entries of an endpoint closed with transfers in it, 128 per domain, and twd answered
 * nobody once they were gone; docs/fabric.md, "A stalled peer must not wedge the others"). How
 * many answers wait when a client stops depends on the scheduler, so this test does not reach
 * the 128 reliably; tests/integration/fabric_stalled.c is the regression test that does (it fails
 * on the code before the fix).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "fabric/fabric.h"
#include "proc.h"
#include "proto/rpc.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

#define ROUNDS 3
#define CONNS 4  /* connections per garbage client */
#define NREQ 8   /* requests per connection: well below a sockets channel's 16 transfers in flight,
		  * so the client posts them all without waiting for twd */

static const char *prov;

/* A Handshake RPC on c's connection (no key: twd answers it directly). */
static int handshake(struct twc *c)
{
	struct tw_rpc_reply rep;
	struct tw_rpc_req r;
	int rc;

	tw__rpc_req_handshake(&r, 77, TAILWIND__ROLE__ROLE_PRIMARY, NULL);
	rc = tw__rpc_call_sync(c->rpc, &r.env, &rep);
	tw__rpc_reply_release(&rep);
	return rc;
}

static int garbage_client(const char *addr)
{
	static unsigned char buf[TW_RPC_MAX_MSG_DEFAULT], pay[1024];
	static struct twc c[CONNS];
	struct tw_rpc_req r;
	sigset_t set;
	int sig;

	/* SIGUSR1 (sent once we print "connected") blocked before the fabric starts its threads,
	 * so that every thread inherits the mask: one that had it unblocked would take it before
	 * sigwait and die of it (the default action), and the test waited for a stop in vain. */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (int i = 0; i < CONNS; i++)
		if (twc_connect(&c[i], prov, addr) || handshake(&c[i]))
			return 3;
	/* The test stops twd when it reads this line, then sends SIGUSR1. */
	printf("connected\n");
	fflush(stdout);
	if (sigwait(&set, &sig))
		return 4;
	memset(pay, 0xa5, sizeof(pay));
	for (int i = 0, sent_all = 1; i < CONNS && sent_all; i++) {
		for (uint64_t id = 1000; id < 1000 + NREQ && sent_all; id++) {
			size_t len = 0;

			switch (id % 4) {
			case 0: tw__rpc_req_ping(&r, INT64_MAX, pay, sizeof(pay)); break;
			case 1: tw__rpc_req_list_segments(&r, INT64_MAX, true, INT64_MAX); break;
			case 2: tw__rpc_req_read_segment(&r, TW_EPOCH_MAX, INT64_MAX, INT64_MAX);
				break;
			default: tw__rpc_req_stats(&r); break;
			}
			r.env.request_id = id;
			if (tw__rpc_encode(&r.env, buf, sizeof(buf), sizeof(buf), &len))
				return 5;
			/* twd is stopped: under load a send can run out of time in the provider
			 * (the channel fails). What this client has sent is what it sent; it
			 * stops all the same, which is what twd must survive. */
			if (tw__chan_send(c[i].ch, buf, len)) {
				fprintf(stderr, "# garbage client: connection %d: a send failed; "
					"stopping with what was sent\n", i);
				sent_all = 0;
			}
		}
	}
	/* A grace for the provider's thread to write them out (about 32 KB in all: the kernel takes
	 * them while twd is stopped); no completion can tell us, twd acknowledges nothing while
	 * stopped. Not a synchronisation the test relies on: it accepts any number of them having
	 * reached twd, and checks only that twd keeps serving others. */
	usleep(200000);
	raise(SIGSTOP); /* never reads an answer */
	return 0;
}

/* Wait (s seconds at most) until process `pid` is in scheduler state `st` (/proc/PID/stat). */
static bool wait_state(pid_t pid, char st, unsigned s)
{
	char path[64], b[256];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (uint64_t end = tw_now_ns() + s * 1000000000ull; tw_now_ns() < end; sched_yield()) {
		FILE *f = fopen(path, "r");
		char *rp;

		if (!f)
			return false;
		rp = fgets(b, sizeof(b), f) ? strrchr(b, ')') : NULL;
		fclose(f);
		if (rp && rp[1] == ' ' && rp[2] == st)
			return true;
		if (rp && rp[1] == ' ' && rp[2] == 'Z')
			return false; /* it exited: it will not stop */
	}
	return false;
}

int main(int argc, char **argv)
{
	char twd_path[1024], dir[64], addr[256], line[512];
	struct twc_stats st;
	struct twc c;
	struct proc *p;
	int rc;

	if (argc > 3 && !strcmp(argv[1], "client")) {
		prov = argv[3];
		return garbage_client(argv[2]);
	}
	prov = argc > 1 ? argv[1] : "sockets";
	if (proc_find_tool("tools/twd", twd_path, sizeof(twd_path)) != 0)
		tap_plan_skip_all("twd not built");
	tmpdir_make(dir, sizeof(dir), NULL, "tw-stalled");
	tap_plan(ROUNDS + 3);

	/* twd's log (stderr) on the pipe too: the test waits for its "failing the channel". */
	char *targv[] = { (char *)"/bin/sh", (char *)"-c", (char *)"exec \"$0\" \"$@\" 2>&1",
			  twd_path, (char *)"-p", (char *)prov, (char *)"-d", dir,
			  (char *)"--buffers", (char *)"2", (char *)"--buffer-size", (char *)"64K",
			  NULL };
	char *env[] = { (char *)"FI_SOCKETS_PE_WAITTIME=0", NULL };
	p = proc_spawn(targv, env);
	TAP_REQUIRE(p, "spawn twd");
	rc = proc_wait_line(p, "ready ", line, sizeof(line), 20000);
	TAP_REQUIRE(rc > 0, "twd ready line: %s", strerror(-rc));
	snprintf(addr, sizeof(addr), "%.*s", (int)sizeof(addr) - 1, line + 6);

	for (int k = 0; k < ROUNDS; k++) {
		char *cargv[] = { argv[0], (char *)"client", addr, (char *)prov, NULL };
		struct proc_opts po = { .clear_sigmask = true };
		struct proc *g = proc_spawn_opts(cargv, NULL, &po);
		int failed = 0;

		TAP_REQUIRE(g, "spawn a garbage client");
		rc = proc_wait_line(g, "connected", line, sizeof(line), 30000);
		TAP_REQUIRE(rc > 0, "client %d connected: %s", k, strerror(-rc));
		TAP_REQUIRE(proc_kill(p, SIGSTOP) == 0 && wait_state(proc_pid(p), 'T', 10),
			    "twd stopped");
		proc_kill(g, SIGUSR1);
		/* Its sends may wait for the provider up to the operation timeout (10 s). */
		TAP_REQUIRE(wait_state(proc_pid(g), 'T', 30), "client %d stopped itself", k);
		TAP_REQUIRE(proc_kill(p, SIGCONT) == 0, "twd continued");
		/* twd answers into connections nobody reads and fails them after its timeout.
		 * How many got answers before the client stopped depends on the scheduler (the
		 * provider's thread sends the requests), so wait for the first, for a while. */
		for (uint64_t end = tw_now_ns() + 30000000000ull; !failed && tw_now_ns() < end;) {
			rc = proc_wait_line(p, NULL, line, sizeof(line), 1000);
			if (rc == -EPIPE)
				break;
			failed += rc >= 0 && strstr(line, "failing the channel") != NULL;
		}
		tap_diag("client %d: twd failed %d of its %d connections within 30 s", k, failed,
			 CONNS);
		proc_kill(g, SIGKILL);
		proc_wait(g, 20000);
		proc_free(g);
		/* Served at once after each: a stalled client costs its own connections only. */
		rc = twc_connect(&c, prov, addr);
		rc = rc == 0 ? handshake(&c) : rc;
		rc = rc == 0 ? twc_stats(&c, &st) : rc;
		ok(rc == 0, "after client %d a new client handshakes and is served (%s)", k,
		   tw_strerror(rc));
		twc_close(&c);
	}
	rc = twc_connect(&c, prov, addr);
	rc = rc == 0 ? handshake(&c) : rc;
	ok(rc == 0, "a last client connects and handshakes (%s)", tw_strerror(rc));
	rc = rc == 0 ? twc_stats(&c, &st) : rc;
	ok(rc == 0, "and is served (%s)", tw_strerror(rc));
	twc_close(&c);
	proc_kill(p, SIGTERM);
	is_int(proc_wait(p, 20000), 0, "twd exits 0 on SIGTERM");
	proc_free(p);
	tmpdir_remove(dir);
	return tap_exit();
}
