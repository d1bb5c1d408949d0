/* tools/proc.c — see proc.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

extern char **environ;

struct proc {
	pid_t pid;
	int out_fd;      /* read end of the child's stdout; -1 once EOF seen and closed */
	int pidfd;       /* pidfd_open() of the child, -1 when unavailable */
	bool reaped;
	bool signaled;   /* ended by a signal (status is 128 + it) */
	int status;      /* decoded exit status once reaped */
	const char *echo_prefix; /* NULL: "# child <pid>: " */
	const char *drop_prefix; /* skipped lines starting with it are not echoed */
	char buf[8192];  /* unread bytes from the pipe */
	size_t buf_len;
	struct proc *next_all; /* global list for proc_cleanup_all */
};

static struct proc *all_procs;
static bool atexit_done;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Milliseconds left until `deadline` (UINT64_MAX: forever → -1), clamped at 0. */
static int left_ms(uint64_t deadline)
{
	uint64_t now;

	if (deadline == UINT64_MAX)
		return -1;
	now = now_ms();
	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

static uint64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout_ms;
}

static int decode_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 255;
}

static void list_remove(struct proc *p)
{
	for (struct proc **pp = &all_procs; *pp; pp = &(*pp)->next_all) {
		if (*pp == p) {
			*pp = p->next_all;
			return;
		}
	}
}

/* Build environ + extras (extras override variables of the same name). Caller frees the array. */
static char **build_env(char *const env_extra[])
{
	size_t n = 0, m = 0, k = 0;
	char **env;

	while (environ && environ[n])
		n++;
	while (env_extra && env_extra[m])
		m++;
	env = calloc(n + m + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(environ[i], '=');
		size_t nlen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
		bool overridden = false;

		for (size_t j = 0; j < m; j++) {
			if (!strncmp(env_extra[j], environ[i], nlen) && env_extra[j][nlen] == '=') {
				overridden = true;
				break;
			}
		}
		if (!overridden)
			env[k++] = environ[i];
	}
	for (size_t j = 0; j < m; j++)
		env[k++] = env_extra[j];
	env[k] = NULL;
	return env;
}

struct proc *proc_spawn(char *const argv[], char *const env_extra[])
{
	return proc_spawn_opts(argv, env_extra, NULL);
}

struct proc *proc_spawn_opts(char *const argv[], char *const env_extra[],
			     const struct proc_opts *opts)
{
	static const struct proc_opts defaults;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t sa;
	sigset_t none;
	struct proc *p;
	int pipefd[2];
	char **env;
	int rc;

	if (!opts)
		opts = &defaults;
	if (!opts->unlisted && !atexit_done) {
		atexit(proc_cleanup_all);
		atexit_done = true;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->out_fd = -1;
	p->pidfd = -1;
	p->echo_prefix = opts->echo_prefix;
	p->drop_prefix = opts->drop_prefix;
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = errno;
		if (!opts->quiet)
			fprintf(stderr, "# proc_spawn: pipe: %s\n", strerror(rc));
		free(p);
		errno = rc;
		return NULL;
	}
	env = build_env(env_extra);
	if (!env) {
		close(pipefd[0]);
		close(pipefd[1]);
		free(p);
		errno = ENOMEM;
		return NULL;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1); /* dup2 clears CLOEXEC on fd 1 */
	posix_spawnattr_init(&sa);
	if (opts->clear_sigmask) {
		sigemptyset(&none);
		posix_spawnattr_setsigmask(&sa, &none);
		posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK);
	}
	fflush(stdout);
	fflush(stderr);
	rc = posix_spawn(&p->pid, argv[0], &fa, &sa, argv, env);
	posix_spawnattr_destroy(&sa);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	close(pipefd[1]);
	if (rc != 0) {
		if (!opts->quiet)
			fprintf(stderr, "# proc_spawn %s: %s\n", argv[0], strerror(rc));
		close(pipefd[0]);
		free(p);
		errno = rc;
		return NULL;
	}
	p->out_fd = pipefd[0];
#ifdef SYS_pidfd_open
	p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	if (p->pidfd >= 0)
		(void)fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
#endif
	if (!opts->unlisted) {
		p->next_all = all_procs;
		all_procs = p;
	}
	return p;
}

pid_t proc_pid(const struct proc *p)
{
	return p->pid;
}

/* One read() into the buffer. 1 data, 0 EOF, <0 error. */
static int fill(struct proc *p)
{
	ssize_t n;

	if (p->buf_len == sizeof(p->buf)) /* a huge line: drop it rather than stall */
		p->buf_len = 0;
	do {
		n = read(p->out_fd, p->buf + p->buf_len, sizeof(p->buf) - p->buf_len);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	p->buf_len += (size_t)n;
	return 1;
}

int proc_wait_line(struct proc *p, const char *prefix, char *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	size_t plen = prefix ? strlen(prefix) : 0;

	for (;;) {
		char *nl = memchr(p->buf, '\n', p->buf_len);

		if (nl) {
			size_t l = (size_t)(nl - p->buf);
			bool match = l >= plen && !memcmp(p->buf, prefix ? prefix : "", plen);
			int ret = (int)l;

			if (match && buf && len) {
				size_t c = l < len - 1 ? l : len - 1;
				memcpy(buf, p->buf, c);
				buf[c] = '\0';
			} else if (!match && p->drop_prefix &&
				   l >= strlen(p->drop_prefix) &&
				   !memcmp(p->buf, p->drop_prefix, strlen(p->drop_prefix))) {
				/* chatter: dropped */
			} else if (!match && p->echo_prefix) {
				fprintf(stderr, "%s%.*s\n", p->echo_prefix, (int)l, p->buf);
			} else if (!match) {
				fprintf(stderr, "# child %d: %.*s\n", (int)p->pid, (int)l, p->buf);
			}
			memmove(p->buf, nl + 1, p->buf_len - l - 1);
			p->buf_len -= l + 1;
			if (match)
				return ret;
			continue;
		}
		if (p->out_fd < 0)
			return -EPIPE;
		struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
		int left = left_ms(deadline);
		int rc = poll(&pfd, 1, left);

		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -errno;
		if (rc == 0)
			return -ETIMEDOUT;
		rc = fill(p);
		if (rc <= 0) {
			close(p->out_fd);
			p->out_fd = -1;
			if (rc < 0)
				return rc;
		}
	}
}

int proc_kill(struct proc *p, int sig)
{
	if (p->reaped)
		return -ESRCH;
	if (kill(p->pid, sig) < 0)
		return -errno;
	return 0;
}

static bool try_reap(struct proc *p)
{
	int st;
	pid_t r;

	if (p->reaped)
		return true;
	do {
		r = waitpid(p->pid, &st, WNOHANG);
	} while (r < 0 && errno == EINTR);
	if (r == p->pid) {
		p->reaped = true;
		p->signaled = WIFSIGNALED(st);
		p->status = decode_status(st);
		if (p->pidfd >= 0) {
			close(p->pidfd);
			p->pidfd = -1;
		}
		return true;
	}
	if (r < 0) { /* ECHILD: someone else reaped it */
		p->reaped = true;
		p->status = 255;
		return true;
	}
	return false;
}

int proc_wait(struct proc *p, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	unsigned backoff_us = 100;

	while (!try_reap(p)) {
		int left = left_ms(deadline);

		if (left == 0)
			return -ETIMEDOUT;
		if (p->pidfd >= 0) {
			/* pidfd becomes readable when the child exits: no sleeping. */
			struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
			(void)poll(&pfd, 1, left);
		} else {
			/* Old kernels: bounded backoff on waitpid(WNOHANG). */
			struct timespec ts = {0, (long)backoff_us * 1000};
			nanosleep(&ts, NULL);
			if (backoff_us < 20000)
				backoff_us *= 2;
		}
	}
	return p->status;
}

bool proc_signaled(const struct proc *p)
{
	return p->reaped && p->signaled;
}

bool proc_alive(struct proc *p)
{
	return !try_reap(p);
}

void proc_free(struct proc *p)
{
	if (!p)
		return;
	if (!try_reap(p)) {
		/* SIGTERM first so the child can clean up (shm providers leave /dev/shm files
		 * behind on SIGKILL), then SIGKILL after a short grace period. */
		(void)kill(p->pid, SIGTERM);
		if (proc_wait(p, 1000) == -ETIMEDOUT) {
			(void)kill(p->pid, SIGKILL);
			(void)proc_wait(p, -1);
		}
	}
	if (p->out_fd >= 0)
		close(p->out_fd);
	if (p->pidfd >= 0)
		close(p->pidfd);
	list_remove(p);
	free(p);
}

void proc_cleanup_all(void)
{
	while (all_procs)
		proc_free(all_procs);
}

static int check_exec(const char *path)
{
	return access(path, X_OK) == 0 ? 0 : -ENOENT;
}

int proc_find_tool(const char *relpath, char *out, size_t len)
{
	const char *root = getenv("TW_BUILD_ROOT");
	char exe[PATH_MAX];
	ssize_t n;
	int w;

	if (root && *root) {
		w = snprintf(out, len, "%s/%s", root, relpath);
		if (w < 0 || (size_t)w >= len)
			return -ENAMETOOLONG;
		return check_exec(out);
	}
	/* No TW_BUILD_ROOT (run by hand): walk up from our own binary's directory. */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		for (int up = 0; up < 4; up++) {
			char *slash = strrchr(exe, '/');
			if (!slash)
				break;
			*slash = '\0';
			w = snprintf(out, len, "%s/%s", exe, relpath);
			if (w < 0 || (size_t)w >= len)
				return -ENAMETOOLONG;
			if (check_exec(out) == 0)
				return 0;
		}
	}
	w = snprintf(out, len, "%s", relpath);
	if (w < 0 || (size_t)w >= len)
		return -ENAMETOOLONG;
	return check_exec(out);
}
