/*
 * tests/unit/test_fabric_shm_wedge.c — our own shm region's lock, left held by a process that
 * died holding it, is freed, and our progress goes on (fabric/ofi_wedge.c, docs/fabric.md "A
 * writer killed holding a region lock").
 *
 * libfabric 1.17's writers take the spinlock in the *target's* region before every post, and our
 * progress takes it too (smr_ep_progress → smr_progress_resp/smr_progress_cmd). The children here
 * stage a writer killed inside a post: each maps our region (the POSIX shm object our address
 * names), takes its lock the way a writer does (pthread_spin_lock on struct smr_region.lock,
 * SMR_VERSION 4) and then:
 *   - A SIGKILLs itself. It sets no `signal`, as a writer killed in the middle of its copy: the
 *     watchdog must make our progress go for the lock, see it stuck there and free the lock.
 *   - B stops itself (SIGSTOP): a live holder that will come back. The lock must stay held
 *     while B is stopped (checked after 3 × TW_SHM_WEDGE_MS), and be freed once B is killed.
 *   - C SIGKILLs itself while this process has a second shm fab open, as a twkv server has
 *     (its backup's and its logs'), with no channel between the two: the second fab cannot be
 *     the holder, and the lock is freed as in A.
 *   - D SIGKILLs itself while the second fab has a channel to ours: one of our own threads
 *     could be the holder, so the lock is left held (checked after 3 × TW_SHM_WEDGE_MS; the
 *     test then frees it itself).
 * An alarm turns a progress call that never returns into a failure.
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
#define WEDGE_MS 500 /* TW_SHM_WEDGE_MS, fabric/ofi_int.h */

struct child {
	pid_t pid;
	int to_child, from_child;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The child: read our address, then on 'L' take our region's lock and die ('K') or stop
 * itself ('S'). */
static void child_main(int cmd_fd, int out_fd)
{
	char addr[256];
	unsigned char c;

	if (read(cmd_fd, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		_exit(2);
	if (read(cmd_fd, &c, 1) != 1)
		_exit(0);
	const char *name = strstr(addr, "://");
	int fd = shm_open(name ? name + 3 : addr, O_RDWR, 0);
	unsigned char *p = fd < 0 ? MAP_FAILED :
		mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	unsigned char r = 'l';

	if (p == MAP_FAILED || p[0] != SMR_V117_VERSION) {
		r = 'x'; /* not the layout we know: the parent skips */
		if (write(out_fd, &r, 1) != 1)
			_exit(2);
		_exit(0);
	}
	pthread_spin_lock((pthread_spinlock_t *)(void *)(p + SMR_V117_OFF_LOCK));
	if (write(out_fd, &r, 1) != 1)
		_exit(2);
	raise(c == 'K' ? SIGKILL : SIGSTOP);
	_exit(0);
}

static void kill_all(struct child *a, struct child *b, struct child *c, struct child *d)
{
	struct child *all[] = {a, b, c, d};

	for (size_t i = 0; i < 4; i++)
		if (all[i])
			kill(all[i]->pid, SIGKILL);
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
	return 0;
}

/* Dead (or with WSTOPPED: stopped), not reaped. */
static bool wait_state(pid_t pid, int what)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	return waitid(P_PID, (id_t)pid, &si, what | WNOWAIT) == 0 && si.si_pid == pid;
}

static const volatile int *lock_word;
static int lock_free;

static bool held(void)
{
	return __atomic_load_n(lock_word, __ATOMIC_RELAXED) != lock_free;
}

/* Progress until the lock is free or `ms` pass; the milliseconds it took, or -1. */
static long progress_until_free(struct tw_fab *fab, unsigned ms)
{
	uint64_t t0 = now_ms();

	alarm(ms / 1000 + 30);
	while (held() && now_ms() < t0 + ms)
		tw__fab_progress(fab, 1);
	alarm(0);
	return held() ? -1 : (long)(now_ms() - t0);
}

struct stopped_check {
	pid_t pid;
	bool still_held;
};

static void wait_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = 0};
	uint64_t end = now_ms() + ms;

	while (now_ms() < end) {
		uint64_t left = end - now_ms();

		ts.tv_sec = (time_t)(left / 1000);
		ts.tv_nsec = (long)(left % 1000) * 1000000;
		nanosleep(&ts, NULL);
	}
}

/* B is stopped holding the lock: after 3 × WEDGE_MS it must still be held; then kill B. */
static void *kill_later(void *arg)
{
	struct stopped_check *s = arg;

	wait_ms(3 * WEDGE_MS);
	s->still_held = held();
	kill(s->pid, SIGKILL);
	return NULL;
}

/* D died holding the lock while our two fabs had a channel between them: after 3 × WEDGE_MS it
 * must still be held; then free it ourselves (a writable mapping of our region's first page). */
static int *lock_rw;

static void *free_later(void *arg)
{
	struct stopped_check *s = arg;

	wait_ms(3 * WEDGE_MS);
	s->still_held = held();
	__atomic_store_n(lock_rw, lock_free, __ATOMIC_RELEASE);
	return NULL;
}

/* Progress `fab` on a thread of its own while the main thread connects to it. */
static bool pump_stop; /* atomic */

static void *pump(void *arg)
{
	while (!__atomic_load_n(&pump_stop, __ATOMIC_ACQUIRE))
		tw__fab_progress(arg, 1);
	return NULL;
}

int main(void)
{
	struct tw_fab_config cfg;
	struct tw_fab *fab, *fab2 = NULL;
	struct tw_chan *ch2 = NULL;
	struct child a, b, cc, d;
	struct stopped_check sc;
	pthread_t t;
	char addr[256] = "";
	unsigned char c;
	const char *name;
	void *map, *map_rw = MAP_FAILED;
	long ms;
	int rc, fd;

	tap_plan(9);
	signal(SIGPIPE, SIG_IGN);
	/* Forked before the fab opens: the children hold no mapping and no thread of ours. */
	TAP_REQUIRE(start_child(&a) == 0 && start_child(&b) == 0 && start_child(&cc) == 0 &&
		    start_child(&d) == 0, "four children");
	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	rc = tw__fab_open(&cfg, NULL, &fab);
	if (rc == -TW_ENOPROV) {
		kill_all(&a, &b, &cc, &d);
		tap_skip(9, "shm not available here");
		return tap_exit();
	}
	TAP_REQUIRE(rc == 0, "open shm fab: %s", tw_strerror(rc));
	TAP_REQUIRE(tw__fab_listen(fab, addr, sizeof(addr)) == 0, "listen");
	TAP_REQUIRE(write(a.to_child, addr, sizeof(addr)) == (ssize_t)sizeof(addr) &&
		    write(b.to_child, addr, sizeof(addr)) == (ssize_t)sizeof(addr) &&
		    write(cc.to_child, addr, sizeof(addr)) == (ssize_t)sizeof(addr) &&
		    write(d.to_child, addr, sizeof(addr)) == (ssize_t)sizeof(addr),
		    "our address to the children");
	name = strstr(addr, "://");
	fd = shm_open(name ? name + 3 : addr, O_RDONLY, 0);
	map = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	TAP_REQUIRE(map != MAP_FAILED, "map our region %s", addr);
	close(fd);
	fd = shm_open(name ? name + 3 : addr, O_RDWR, 0);
	map_rw = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	TAP_REQUIRE(map_rw != MAP_FAILED, "map our region %s writable", addr);
	close(fd);
	lock_rw = (int *)(void *)((char *)map_rw + SMR_V117_OFF_LOCK);
	lock_word = (const volatile int *)(const void *)((const char *)map + SMR_V117_OFF_LOCK);
	{
		pthread_spinlock_t l;

		pthread_spin_init(&l, PTHREAD_PROCESS_SHARED);
		memcpy(&lock_free, (const void *)&l, sizeof(lock_free));
		pthread_spin_destroy(&l);
	}

	/* A dies holding our lock, with no `signal` raised. */
	c = 'K';
	TAP_REQUIRE(write(a.to_child, &c, 1) == 1 && read(a.from_child, &c, 1) == 1, "A answers");
	if (c == 'x') {
		tap_skip(9, "shm region layout is not libfabric 1.17's");
		kill_all(NULL, &b, &cc, &d);
		goto out;
	}
	TAP_REQUIRE(wait_state(a.pid, WEXITED), "A is dead (not reaped)");
	ok(held(), "A died holding our region lock");
	ms = progress_until_free(fab, 10000);
	ok(ms >= 0, "our progress goes on and the lock is freed after %ld ms (-1: not in 10 s)", ms);

	/* B holds it and is stopped: left alone until B is gone. */
	c = 'S';
	TAP_REQUIRE(write(b.to_child, &c, 1) == 1 && read(b.from_child, &c, 1) == 1, "B answers");
	TAP_REQUIRE(wait_state(b.pid, WSTOPPED), "B is stopped");
	sc.pid = b.pid;
	sc.still_held = false;
	TAP_REQUIRE(pthread_create(&t, NULL, kill_later, &sc) == 0, "thread");
	ms = progress_until_free(fab, 15000);
	pthread_join(t, NULL);
	ok(sc.still_held, "the lock of a stopped holder is left held (%d ms)", 3 * WEDGE_MS);
	ok(ms >= 3 * WEDGE_MS, "and freed once the holder is killed: after %ld ms", ms);

	/* A second shm fab in this process, no channel between the two: C dies holding our lock. */
	rc = tw__fab_open(&cfg, NULL, &fab2);
	TAP_REQUIRE(rc == 0, "open a second shm fab: %s", tw_strerror(rc));
	c = 'K';
	TAP_REQUIRE(write(cc.to_child, &c, 1) == 1 && read(cc.from_child, &c, 1) == 1,
		    "C answers");
	TAP_REQUIRE(wait_state(cc.pid, WEXITED), "C is dead (not reaped)");
	ok(held(), "C died holding our region lock, a second shm fab open here");
	ms = progress_until_free(fab, 10000);
	ok(ms >= 0, "the second fab, with no channel to ours, is not taken for the holder: freed "
	   "after %ld ms (-1: not in 10 s)", ms);

	/* The second fab connects to ours: D dies holding our lock. */
	{
		pthread_t pt;

		__atomic_store_n(&pump_stop, false, __ATOMIC_RELEASE);
		TAP_REQUIRE(pthread_create(&pt, NULL, pump, fab) == 0, "thread");
		rc = tw__fab_connect(fab2, addr, &ch2);
		__atomic_store_n(&pump_stop, true, __ATOMIC_RELEASE);
		pthread_join(pt, NULL);
	}
	TAP_REQUIRE(rc == 0 && ch2, "the second fab connects to ours: %s", tw_strerror(rc));
	c = 'K';
	TAP_REQUIRE(write(d.to_child, &c, 1) == 1 && read(d.from_child, &c, 1) == 1, "D answers");
	TAP_REQUIRE(wait_state(d.pid, WEXITED), "D is dead (not reaped)");
	ok(held(), "D died holding our region lock");
	sc.still_held = false;
	TAP_REQUIRE(pthread_create(&t, NULL, free_later, &sc) == 0, "thread");
	ms = progress_until_free(fab, 15000);
	pthread_join(t, NULL);
	ok(sc.still_held, "with a channel between two shm fabs of this process the lock is left "
	   "held (%d ms: one of our own threads may hold it)", 3 * WEDGE_MS);
	ok(ms >= 3 * WEDGE_MS, "until freed by hand: after %ld ms", ms);
out:
	if (ch2)
		tw__chan_close(ch2);
	if (fab2)
		tw__fab_close(fab2);
	tw__fab_close(fab);
	munmap(map, 4096);
	if (map_rw != MAP_FAILED)
		munmap(map_rw, 4096);
	waitpid(a.pid, NULL, 0);
	waitpid(b.pid, NULL, 0);
	waitpid(cc.pid, NULL, 0);
	waitpid(d.pid, NULL, 0);
	return tap_exit();
}
