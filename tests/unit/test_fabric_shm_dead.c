/*
 * tests/unit/test_fabric_shm_dead.c — a dead shm peer fails its channel instead of wedging the
 * writer (fabric/ofi_rdm.c "A dead shm peer", docs/failover.md "shm: a killed backup").
 *
 * libfabric 1.17's shm takes the spinlock of the peer's region, which lives in shared memory,
 * before every post to that peer. A peer SIGKILLed while holding it leaves it held for good, and
 * a post to it used to spin inside libfabric forever. The child here stages exactly that: it
 * takes its own region's lock (where libfabric 1.17 keeps it: struct smr_region, SMR_VERSION 4,
 * include/ofi_shm.h) and SIGKILLs itself. The parent's next send must fail with a loss, not
 * hang (an alarm turns a hang into a failure). A second child is killed without holding its
 * lock while the parent posts nothing: the periodic pidfd check reports the loss (the op timeout
 * is set far beyond the wait, so nothing else could). Both children stay unreaped zombies while
 * checked (waitid WNOWAIT), as a killed twd whose parent has not reaped it yet.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tap.h"

#define SMR_V117_VERSION 4
#define SMR_V117_OFF_LOCK (16 + sizeof(void *))

struct child {
	pid_t pid;
	int to_child, from_child;
	char addr[256];
};

/* The child: listen, progress, and on 'L' take its own region lock and die holding it. */
static void child_main(int cmd_fd, int out_fd)
{
	struct tw_fab_config cfg;
	struct tw_fab *fab;
	char addr[256];
	unsigned char c;

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	if (tw__fab_open(&cfg, NULL, &fab) < 0 || tw__fab_listen(fab, addr, sizeof(addr)) < 0)
		_exit(2);
	if (write(out_fd, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		_exit(2);
	fcntl(cmd_fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		tw__fab_progress(fab, 1);
		if (read(cmd_fd, &c, 1) == 0)
			_exit(0); /* the parent is gone */
		if (c != 'L')
			continue;
		const char *name = strstr(addr, "://");
		int fd = shm_open(name ? name + 3 : addr, O_RDWR, 0);
		unsigned char *p = fd < 0 ? MAP_FAILED :
			mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		if (p == MAP_FAILED || p[0] != SMR_V117_VERSION) {
			c = 'x'; /* not the layout we know: the parent skips */
			if (write(out_fd, &c, 1) != 1)
				_exit(2);
			continue;
		}
		pthread_spin_lock((pthread_spinlock_t *)(p + SMR_V117_OFF_LOCK));
		c = 'l';
		if (write(out_fd, &c, 1) != 1)
			_exit(2);
		raise(SIGKILL);
	}
}

static int start_child(struct child *ch)
{
	int to[2], from[2];

	if (pipe(to) || pipe(from))
		return -1;
	ch->pid = fork();
	if (ch->pid < 0)
		return -1;
	if (ch->pid == 0) {
		close(to[1]);
		close(from[0]);
		child_main(to[0], from[1]);
		_exit(0);
	}
	close(to[0]);
	close(from[1]);
	ch->to_child = to[1];
	ch->from_child = from[0];
	return read(ch->from_child, ch->addr, sizeof(ch->addr)) == (ssize_t)sizeof(ch->addr) ? 0 : -1;
}

/* Dead but not reaped. */
static bool wait_dead(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0 && si.si_pid == pid;
}

static int lost_err;
static struct tw_chan *lost_ch;

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	(void)arg;
	lost_ch = ch;
	lost_err = err;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int main(void)
{
	struct tw_fab_events ev = {.on_lost = on_lost};
	struct tw_fab_config cfg;
	struct child a, b;
	struct tw_fab *fab;
	struct tw_chan *ca = NULL, *cb = NULL;
	unsigned char c = 'L';
	int rc;

	tap_plan(8);
	signal(SIGPIPE, SIG_IGN);
	TAP_REQUIRE(start_child(&a) == 0, "child A listens");
	TAP_REQUIRE(start_child(&b) == 0, "child B listens");
	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.op_timeout_ms = 600000; /* only the peer watch can find the dead ones in time */
	rc = tw__fab_open(&cfg, &ev, &fab);
	if (rc == -TW_ENOPROV) {
		kill(a.pid, SIGKILL);
		kill(b.pid, SIGKILL);
		waitpid(a.pid, NULL, 0);
		waitpid(b.pid, NULL, 0);
		tap_skip(8, "shm not available here");
		return tap_exit();
	}
	TAP_REQUIRE(rc == 0, "open shm fab: %s", tw_strerror(rc));
	rc = tw__fab_connect(fab, a.addr, &ca);
	is_int(rc, 0, "connect to child A (%s)", a.addr);
	rc = tw__fab_connect(fab, b.addr, &cb);
	is_int(rc, 0, "connect to child B (%s)", b.addr);
	TAP_REQUIRE(ca && cb, "both channels");
	is_int(tw__chan_send(ca, "ping", 4), 0, "a send to the live child A");

	/* A dies holding its own region lock. */
	TAP_REQUIRE(write(a.to_child, &c, 1) == 1, "tell A to die holding its lock");
	TAP_REQUIRE(read(a.from_child, &c, 1) == 1, "A answers");
	if (c == 'x') {
		tap_skip(2, "shm region layout is not libfabric 1.17's");
		kill(a.pid, SIGKILL);
	} else {
		TAP_REQUIRE(wait_dead(a.pid), "A is dead (not reaped)");
		alarm(60); /* a send spinning inside libfabric fails the test instead of hanging it */
		rc = tw__chan_send(ca, "ping", 4);
		alarm(0);
		ok(rc < 0, "a send to A, dead holding its region lock, fails: %s",
		   rc < 0 ? tw_strerror(rc) : "posted");
		ok(tw__chan_is_lost(ca), "and A's channel is lost");
	}

	/* B dies without its lock while nothing is posted to it. */
	lost_ch = NULL;
	kill(b.pid, SIGKILL);
	TAP_REQUIRE(wait_dead(b.pid), "B is dead (not reaped)");
	for (uint64_t end = now_ms() + 30000; lost_ch != cb && now_ms() < end;)
		tw__fab_progress(fab, 10);
	ok(lost_ch == cb, "B's loss is reported while nothing is posted to it");
	is_int(lost_err, -TW_EPEERLOST, "as peer lost");
	ok(tw__chan_send(cb, "ping", 4) < 0, "and a send to B then fails at once");

	tw__chan_close(ca);
	tw__chan_close(cb);
	tw__fab_close(fab);
	waitpid(a.pid, NULL, 0);
	waitpid(b.pid, NULL, 0);
	return tap_exit();
}
