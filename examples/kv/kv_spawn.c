/*
 * examples/kv/kv_spawn.c — local child processes (kv_spawn.h).
 */
#include "kv_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int kv_spawn(char *const argv[], struct kv_child *c)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	c->pid = fork();
	if (c->pid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (c->pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		execv(argv[0], argv);
		fprintf(stderr, "twkv-ycsb: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	c->out = p[0];
	return 0;
}

int kv_child_line(struct kv_child *c, const char *prefix, char *buf, size_t len, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	size_t n = 0;

	for (;;) {
		struct pollfd pfd = { .fd = c->out, .events = POLLIN };
		long long left = end - now_ms();
		char ch;
		ssize_t r;

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		r = read(c->out, &ch, 1); /* a byte at a time: lines after this one stay unread */
		if (r <= 0)
			return -EPIPE;
		if (ch != '\n') {
			if (n + 1 < len)
				buf[n++] = ch;
			continue;
		}
		buf[n] = 0;
		if (!strncmp(buf, prefix, strlen(prefix)))
			return (int)n;
		n = 0;
	}
}

void kv_child_stop(struct kv_child *c, int sig, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	char buf[4096];
	int st;

	if (c->pid <= 0)
		return;
	if (sig)
		kill(c->pid, sig);
	/* Its stdout reaches end-of-file when it exits: wait for that, not for a timer. */
	for (;;) {
		struct pollfd pfd = { .fd = c->out, .events = POLLIN };
		long long left = end - now_ms();

		if (left <= 0) {
			kill(c->pid, SIGKILL);
			break;
		}
		if (poll(&pfd, 1, (int)left) > 0 && read(c->out, buf, sizeof(buf)) <= 0)
			break;
	}
	waitpid(c->pid, &st, 0);
	close(c->out);
	c->pid = 0;
}
