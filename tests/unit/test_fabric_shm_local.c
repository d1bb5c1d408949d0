/*
 * tests/unit/test_fabric_shm_local.c — a peer endpoint of the same process closed under a live
 * channel (fabric/ofi_rdm.c "Peers in this process", docs/fabric.md "shm: a peer endpoint of
 * this process closed").
 *
 * libfabric 1.17's shm maps a peer endpoint of the same process by borrowing that endpoint's
 * own mapping of its region (smr_map_to_region finds its name in ep_name_list,
 * prov/util/src/util_shm.c); the endpoint's fi_close unmaps it (smr_free) but leaves the name in
 * that list, so every other endpoint's AV entry for it points at unmapped memory. A twkv server
 * runs its primary's fab and its embedded backup's fab in one process, and the primary connects
 * to its own backup: when the primary closed (or reset) its fab, the backup's next reply on the
 * channel took the lock at the unmapped address (smr_generic_sendmsg → pthread_spin_lock) and
 * the process died of SIGSEGV. Here, in one process, a listener accepts a channel from a client
 * fab, the client fab closes without a word, and then the listener:
 *   - sends on the channel: refused with a loss, not posted (it used to die of SIGSEGV here);
 *   - has failed the channel by itself (its watch found the peer endpoint gone);
 *   - the accepted channel is closed and its AV entry given back, still without a crash.
 * The steps run in a forked child, so a crash is a failed test (with its signal), not a lost run.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "fab_events.h"
#include "fabric/fabric.h"
#include "tap.h"

static atomic_bool stop;

static void *serve(void *arg)
{
	struct tw_fab *fab = arg;

	while (!atomic_load(&stop))
		tw__fab_progress(fab, 10);
	return NULL;
}

/* The child's steps; its exit code says how far it got (0: all). */
static int steps(void)
{
	static struct fab_rec R;
	struct tw_fab_events ev = fab_rec_events(&R);
	struct tw_fab_config cfg;
	struct tw_fab *cli = NULL;
	struct tw_fab_stats st;
	static char big[60000];
	char addr[TW_ADDR_MAX];
	struct tw_chan *ch;
	pthread_t th;
	uint64_t end;
	int rc;

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.op_timeout_ms = 60000; /* nothing but the watch may fail the channel */
	if (tw__fab_open(&cfg, &ev, &R.fab) || tw__fab_listen(R.fab, addr, sizeof(addr)) ||
	    tw__fab_open(&cfg, NULL, &cli))
		return 10;
	if (pthread_create(&th, NULL, serve, R.fab))
		return 11;
	rc = tw__fab_connect(cli, addr, &ch);
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	if (rc || !fab_progress_until(R.fab, &R.accepts, 1, 5000))
		return 12;
	/* One message each way first: both sides have mapped the other. */
	if (tw__chan_send(R.accepted, "ping", 4) || tw__chan_send(ch, "pong", 4))
		return 13;
	if (!fab_progress_until(R.fab, &R.recvs, 1, 5000))
		return 14;
	tw__fab_progress(cli, 10);
	/* A message too long to inject, sent as the client closes: the listener reads it after
	 * the close, and shm answers it in the client's region (smr_progress_cmd: the response
	 * of a CMA or SAR send goes to the sender's resp queue). */
	memset(big, 'x', sizeof(big));
	if (tw__chan_send(ch, big, sizeof(big)))
		return 14;
	tw__fab_close(cli); /* BYE queued; its region unlinked and unmapped by fi_close */

	/* A reply after the close, before the listener read the BYE (as the backup's to an RPC
	 * of the closed primary, the request read in the same CQ batch or handled meanwhile):
	 * refused, not posted. */
	rc = tw__chan_send(R.accepted, "late reply", 10);
	if (rc != -TW_EPEERLOST)
		return 15;
	fab_progress_until(R.fab, &R.lost, 1, 1000);
	if (R.lost != 1 || R.lost_ch != R.accepted)
		return 16;
	tw__chan_close(R.accepted);
	end = tw_now_ns() + 5000000000ull;
	do {
		tw__fab_progress(R.fab, 10);
		tw__fab_get_stats(R.fab, &st);
	} while (st.shm_av_peers && tw_now_ns() < end);
	if (st.shm_av_peers)
		return 17;
	tw__fab_close(R.fab);
	return 0;
}

int main(void)
{
	struct tw_fab_config cfg;
	struct tw_fab *probe;
	int status = 0, code;
	pid_t pid;

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	if (tw__fab_open(&cfg, NULL, &probe) == -TW_ENOPROV)
		tap_plan_skip_all("shm not available here");
	tw__fab_close(probe);
	tap_plan(2);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(steps());
	TAP_REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid");
	code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	/* A crash: a signal, or exit code 1 where a SIGSEGV handler exits (libpsm's, loaded with
	 * libfabric on some machines, prints "terminated with signal 11" and exits 1). */
	ok(code == 0 || code >= 10, "the listener survived its peer endpoint's close in the same "
	   "process%s%s", WIFSIGNALED(status) ? ": died of " : code > 0 && code < 10 ?
	   ": crashed (exit code 1, see the backtrace above)" : "",
	   WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "");
	is_int(code, 0, "lost the channel, refused the late reply and gave the entry back (exit "
	       "code: the step that failed, 10-17)");
	return tap_exit();
}
