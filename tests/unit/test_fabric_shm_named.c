/*
 * tests/unit/test_fabric_shm_named.c — named shm endpoints (docs/fabric.md "Named shm
 * endpoints"): a fab given a service on shm listens at fi_ns://SERVICE, the same address after
 * its process is SIGKILLed and another one opens it, and a fab that was connected to the old
 * process reaches the new one (its AV entry for the old region is not reused).
 *
 * Children (forked) listen on the name and progress until killed. Checked: a service that cannot
 * be a file name is refused; the address is fi_ns://SERVICE; a second open of a name a live
 * process holds is refused (another process, or this one) and leaves that process's region in
 * place; after a SIGKILL a new process gets the same address on a new shm object; the parent's
 * fab, connected to the first process before, connects to the second one (the handshake needs
 * both directions). Before, the entry still mapped the dead process's region and the connect
 * timed out.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tap.h"

static char svc[64];

struct child {
	pid_t pid;
	int from_child;
	char addr[256];
};

/* The child: listen on `svc`, tell the parent the address (or "!" and the error), progress. */
static void child_main(int out_fd)
{
	struct tw_fab_config cfg;
	struct tw_fab *fab;
	char addr[256] = "!";

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.service = svc;
	if (tw__fab_open(&cfg, NULL, &fab) < 0 || tw__fab_listen(fab, addr, sizeof(addr)) < 0) {
		snprintf(addr, sizeof(addr), "!%s", tw__fab_errmsg(NULL));
		if (write(out_fd, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
			_exit(2);
		_exit(1);
	}
	if (write(out_fd, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		_exit(2);
	for (;;)
		tw__fab_progress(fab, 10);
}

static int start_child(struct child *ch)
{
	int from[2];

	if (pipe(from))
		return -1;
	ch->pid = fork();
	if (ch->pid < 0)
		return -1;
	if (ch->pid == 0) {
		close(from[0]);
		child_main(from[1]);
		_exit(0);
	}
	close(from[1]);
	ch->from_child = from[0];
	if (read(ch->from_child, ch->addr, sizeof(ch->addr)) != (ssize_t)sizeof(ch->addr))
		return -1;
	return ch->addr[0] == '!' ? -1 : 0;
}

static void kill_child(struct child *ch)
{
	kill(ch->pid, SIGKILL);
	waitpid(ch->pid, NULL, 0);
	close(ch->from_child);
}

static int region(ino_t *ino)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), "/dev/shm/%s", svc);
	if (stat(path, &st) < 0)
		return -errno;
	*ino = st.st_ino;
	return 0;
}

static void cleanup(void)
{
	char path[128];

	snprintf(path, sizeof(path), "/dev/shm/%s", svc);
	unlink(path);
	snprintf(path, sizeof(path), "/dev/shm/tw_bell_%s", svc);
	unlink(path);
}

/* Open a fab on `service`: the error, and its message in msg. */
static int open_named(const char *service, struct tw_fab **fab, char *msg, size_t len)
{
	struct tw_fab_config cfg;
	int rc;

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.service = service;
	*fab = NULL;
	rc = tw__fab_open(&cfg, NULL, fab);
	snprintf(msg, len, "%s", rc < 0 ? tw__fab_errmsg(NULL) : "");
	return rc;
}

int main(void)
{
	struct tw_fab_config cfg;
	struct tw_fab *fab, *other, *mine;
	struct tw_chan *ch = NULL;
	struct child a, b;
	char want[128], msg[512], svc2[80];
	ino_t ino_a = 0, ino_b = 0, ino;
	int rc;

	tap_plan(10);
	signal(SIGPIPE, SIG_IGN);
	snprintf(svc, sizeof(svc), "tw-test-named-%d", (int)getpid());
	snprintf(want, sizeof(want), "fi_ns://%s", svc);
	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	cfg.connect_timeout_ms = 3000;
	rc = tw__fab_open(&cfg, NULL, &fab);
	if (rc == -TW_ENOPROV) {
		tap_skip(10, "shm not available here");
		return tap_exit();
	}
	TAP_REQUIRE(rc == 0, "open shm fab: %s", tw_strerror(rc));

	rc = open_named("a/b", &other, msg, sizeof(msg));
	ok(rc == -EINVAL && strstr(msg, "/dev/shm/SERVICE"),
	   "a service that is no file name is refused: %s", msg);

	TAP_REQUIRE(start_child(&a) == 0, "child A listens on %s: %s", svc, a.addr + 1);
	ok(!strcmp(a.addr, want), "A's address is fi_ns://SERVICE (%s)", a.addr);
	TAP_REQUIRE(region(&ino_a) == 0, "A's region is /dev/shm/%s", svc);

	rc = open_named(svc, &other, msg, sizeof(msg));
	snprintf(want, sizeof(want), "in use by process %d", (int)a.pid);
	ok(rc == -EADDRINUSE && strstr(msg, want), "a second open while A lives is refused: %s",
	   msg);
	ok(region(&ino) == 0 && ino == ino_a, "and A's region is still there, the same object");
	rc = tw__fab_connect(fab, a.addr, &ch);
	is_int(rc, 0, "connect to A (after the refused open)");
	if (ch)
		tw__chan_close(ch);
	ch = NULL;
	tw__fab_progress(fab, 0);

	kill_child(&a);
	TAP_REQUIRE(start_child(&b) == 0, "child B listens on %s after A's SIGKILL: %s", svc,
		    b.addr + 1);
	snprintf(want, sizeof(want), "fi_ns://%s", svc);
	ok(!strcmp(b.addr, want), "B has A's address (%s)", b.addr);
	ok(region(&ino_b) == 0 && ino_b != ino_a, "on a new shm object (A's was removed first)");
	rc = tw__fab_connect(fab, b.addr, &ch);
	is_int(rc, 0, "the fab that knew A connects to B: %s", rc ? tw__fab_errmsg(fab) : "ok");
	if (ch)
		tw__chan_close(ch);
	kill_child(&b);
	cleanup();

	/* This process holds the name: a second fab of it is refused too; after the close, fine. */
	snprintf(svc2, sizeof(svc2), "%s-self", svc);
	rc = open_named(svc2, &mine, msg, sizeof(msg));
	TAP_REQUIRE(rc == 0, "open %s: %s", svc2, msg);
	rc = open_named(svc2, &other, msg, sizeof(msg));
	ok(rc == -EADDRINUSE && strstr(msg, "in use by this process"),
	   "a second fab of this process on the same name is refused: %s", msg);
	if (rc == 0)
		tw__fab_close(other);
	tw__fab_close(mine);
	rc = open_named(svc2, &other, msg, sizeof(msg));
	is_int(rc, 0, "after the first one's close the name opens again: %s", msg);
	if (rc == 0)
		tw__fab_close(other);
	tw__fab_close(fab);
	return tap_exit();
}
