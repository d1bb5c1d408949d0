/*
 * tests/integration/loop_primary.c — a sync-mode primary driven from the caller's own epoll loop
 * (tw_primary_wait_fd, tw_primary_wait_prepare; docs/primary.md, "Driving a log from an event
 * loop"), over a real provider (argv[1]): three twd processes, r = 2.
 *
 * tcp, sockets:
 *   - the log opens with the third twd down, which is then started again;
 *   - bursts of appends acknowledged with the loop asleep on the descriptor between them: every
 *     callback once, in log order, and the descriptor (not the 100 ms cap) woke the loop;
 *   - the loop's progress brings the third backup back (the context's reviver: its probe,
 *     then the connect, which the twd counts), as the progress thread does in async mode;
 *   - a replica paused (SIGSTOP): the write's deadline runs while the loop sleeps in its own
 *     epoll_wait, so the log fails over to the third backup, the only spare, and the append
 *     is acknowledged;
 *   - async mode: -EINVAL.
 * shm: no descriptor (-ENOTSUP), as documented.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "child.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"
#include "twd_client.h"

#define NB 3
#define OBJ 100u

static int replica_twd(const struct rt_cluster *cl, struct tw_primary *p, unsigned r)
{
	const char *addr = tw_primary_replica_addr(p, r);

	for (unsigned i = 0; addr && i < NB; i++)
		if (!strcmp(cl->addrs[i], addr))
			return (int)i;
	return -1;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct rt_cluster cl;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p;
	struct tlog_acks a = { 0 };
	struct tlog_loop l = { .ep = -1 };
	uint8_t buf[OBJ];
	uint64_t log_id = 0x100b000000000000ull | (uint64_t)getpid(), n = 0;
	int fd;

	rt_start(&cl, prov, NB, "256K", "16");
	/* The third twd is down at the open: the log starts on the other two. */
	is_int(rt_stop_one(&cl, 2), 0, "twd 2 stopped before the open");
	tlog_primary_config(&tc, &cfg, prov, cl.addrs, NB, log_id);
	tc.op_timeout_ms = 1000;
	cfg.replicas = 2;
	cfg.segment_size = 256u * 1024u;
	cfg.mode = TW_PRIMARY_SYNC;
	p = tlog_open(&tc, &cfg, "sync log over %s", prov);
	if (!p) {
		rt_stop(&cl);
		return tap_exit();
	}
	fd = tw_primary_wait_fd(p);
	if (!strcmp(prov, "shm")) {
		struct tw_primary_stats st;
		uint64_t lsn;
		unsigned done = 0;

		is_int(fd, -ENOTSUP, "shm: no descriptor to wait on (%s)", tw_strerror(fd));
		is_int(tw_primary_wait_prepare(p, 10), -ENOTSUP, "shm: nothing to prepare a sleep on");
		/* The refused prepare leaves the log a plain sync-mode log: each blocking append
		 * that moves the acknowledged position publishes it (docs/readers.md), where a log
		 * driven from a loop would publish only on demand. */
		for (unsigned i = 0; i < 20; i++, n++) {
			rt_fill(buf, n);
			done += tw_primary_append(p, buf, OBJ, &lsn) == 0;
		}
		tw_primary_get_stats(p, &st);
		is_int(done, 20, "20 blocking appends acknowledged");
		ok(st.rpc_set_acked >= 10,
		   "the acknowledged position was published as sync mode does (%" PRIu64
		   " SetAcked for 20 appends)", st.rpc_set_acked);
		tw_primary_close(p);
		rt_stop(&cl);
		tap_done_testing();
		return tap_exit();
	}
	ok(fd >= 0, "a descriptor to wait on (%d)", fd);
	rt_restart_at(&cl, 2, "256K", "16");
	is_int(tw_primary_wait_fd(p), fd, "the same descriptor when asked again");
	l.ep = epoll_create1(EPOLL_CLOEXEC);
	{
		struct epoll_event ee = { .events = EPOLLIN };

		TAP_REQUIRE(fd >= 0 && epoll_ctl(l.ep, EPOLL_CTL_ADD, fd, &ee) == 0,
			    "the descriptor goes into an epoll set");
	}

	/* Bursts: each appended, then the loop sleeps until all of it is acknowledged. Over a few
	 * segments, so rollovers happen inside the loop's passes too. */
	{
		uint64_t bad = 0;

		for (unsigned burst = 0; burst < 200; burst++) {
			for (unsigned i = 0; i < 64; i++, n++) {
				rt_fill(buf, n);
				if (tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, &a, NULL) < 0)
					bad++;
			}
			(void)tlog_loop_until(&l, p, &a, n, 30000);
		}
		is_int(bad, 0, "%llu appends accepted", (unsigned long long)n);
	}
	is_int(a.n, n, "every append called back once");
	is_int(a.errors, 0, "no callback reported an error");
	is_int(a.out_of_order, 0, "callbacks in log order");
	ok(l.sleeps > 0 && l.fd_wakes > 0,
	   "the loop slept on the descriptor and it woke the loop: %llu sleeps, %llu by the "
	   "descriptor, %llu by the time limit, %llu passes",
	   (unsigned long long)l.sleeps, (unsigned long long)l.fd_wakes,
	   (unsigned long long)l.timeouts, (unsigned long long)l.passes);
	/* Without the descriptor every burst would wait out the 100 ms cap at least once. */
	ok(l.timeouts < 100, "the time limit ended fewer than half of the bursts' sleeps (%llu)",
	   (unsigned long long)l.timeouts);

	/* The reviver probes the restarted twd and the loop's progress connects the context to it
	 * again: the twd counts our stats connection, at least one probe, and the connect. */
	{
		struct twc c;
		struct twc_stats ts = { 0 };
		uint64_t end = tw_now_ns() + 30000000000ull;

		TAP_REQUIRE(twc_connect(&c, prov, cl.addrs[2]) == 0, "stats connection to twd 2");
		while (tw_now_ns() < end && twc_stats(&c, &ts) == 0 && ts.connections < 3) {
			for (unsigned i = 0; i < 20; i++)
				(void)tlog_loop_pass(&l, p);
		}
		twc_close(&c);
		ok(ts.connections >= 3, "the loop brought the restarted backup back (%llu connections "
		   "accepted there)", (unsigned long long)ts.connections);
	}

	/* The pause below must hit the segment its append goes to. An append that rolls over to
	 * the next segment (placed without the paused backup, or opened ahead on others) is
	 * acknowledged with no failover at all, as CI once saw: so start from a segment that has
	 * just begun, after a rollover seen here, with room for far more than one entry. */
	{
		struct tw_primary_stats st0, st1;

		tw_primary_get_stats(p, &st0);
		do {
			for (unsigned i = 0; i < 64; i++, n++) {
				rt_fill(buf, n);
				TAP_REQUIRE(tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, &a,
								    NULL) == 0, "append");
			}
			(void)tlog_loop_until(&l, p, &a, n, 30000);
			tw_primary_get_stats(p, &st1);
		} while (st1.segments == st0.segments && a.n == n);
		ok(st1.segments > st0.segments && a.n == n && !a.errors,
		   "appended into a new segment (%" PRIu64 " segments, %" PRIu64 " before)",
		   st1.segments, st0.segments);
	}
	/* A replica paused: only the deadline can notice it, while the loop sleeps on its own. The
	 * restarted backup is the only spare. */
	{
		int vi = replica_twd(&cl, p, 0);
		struct tw_primary_stats st;
		uint64_t t0 = tw_now_ns();

		TAP_REQUIRE(vi >= 0, "replica 0 is one of the twd's");
		/* Stopped for good before the append: a twd thread still running after kill()
		 * acknowledged the write once, with no failover (ASan CI run on sockets). */
		TAP_REQUIRE(child_pause(cl.p[vi]) == 0, "SIGSTOP twd %d and wait for it to stop", vi);
		rt_fill(buf, n);
		ok(tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, &a, NULL) == 0,
		   "append with replica %s paused", cl.addrs[vi]);
		n++;
		(void)tlog_loop_until(&l, p, &a, n, 30000);
		proc_kill(cl.p[vi], SIGCONT);
		is_int(a.n, n, "its callback came (%.2f s)", (double)(tw_now_ns() - t0) / 1e9);
		is_int(a.errors, 0, "acknowledged by the other replicas after the failover");
		tw_primary_get_stats(p, &st);
		ok(st.failovers >= 1, "the log failed over (%llu)", (unsigned long long)st.failovers);
	}
	is_int(tw_primary_flush(p), 0, "flush");
	tw_primary_close(p);
	close(l.ep);

	cfg.mode = TW_PRIMARY_ASYNC;
	cfg.log_id++;
	p = tlog_open(&tc, &cfg, "async log over %s", prov);
	if (p) {
		is_int(tw_primary_wait_fd(p), -EINVAL, "async mode: no descriptor (the thread waits)");
		is_int(tw_primary_wait_prepare(p, -1), -EINVAL, "async mode: no prepare");
		tw_primary_close(p);
	}
	rt_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
