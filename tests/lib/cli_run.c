/* tests/lib/cli_run.c — see cli_run.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_run.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = (*cap ? *cap * 2 : 4096);
		char *nb;

		while (nc < *len + n + 1)
			nc *= 2;
		nb = realloc(*buf, nc);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

/* One read from fd onto the buffer: whether fd is still open. */
static int drain(int fd, char **buf, size_t *len, size_t *cap)
{
	char b[4096];
	ssize_t n = read(fd, b, sizeof(b));

	if (n <= 0)
		return 0;
	append(buf, len, cap, b, (size_t)n);
	return 1;
}

int cli_run(char *const argv[], char *const env_extra[], const char *trigger, int sig,
	    int timeout_ms, struct cli_out *o)
{
	int po[2], pe[2], st = 0, rc = 0;
	size_t cap_o = 0, cap_e = 0;
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	int open_o = 1, open_e = 1;
	pid_t pid;

	memset(o, 0, sizeof(*o));
	if (append(&o->out, &o->out_len, &cap_o, "", 0) || append(&o->err, &o->err_len, &cap_e, "", 0))
		return -ENOMEM;
	if (pipe2(po, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(pe, O_CLOEXEC) < 0) {
		close(po[0]);
		close(po[1]);
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
		return rc;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);

		if (nul >= 0)
			dup2(nul, STDIN_FILENO);
		dup2(po[1], STDOUT_FILENO);
		dup2(pe[1], STDERR_FILENO);
		for (size_t i = 0; env_extra && env_extra[i]; i++)
			putenv(env_extra[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	while (open_o || open_e) {
		struct pollfd pf[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
		uint64_t now = now_ms();

		if (!open_o)
			pf[0].fd = -1;
		if (!open_e)
			pf[1].fd = -1;
		if (now >= end) {
			kill(pid, SIGKILL);
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(pf, 2, (int)(end - now)) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			kill(pid, SIGKILL);
			break;
		}
		if (pf[0].revents)
			open_o = drain(po[0], &o->out, &o->out_len, &cap_o);
		if (pf[1].revents)
			open_e = drain(pe[0], &o->err, &o->err_len, &cap_e);
		if (trigger && !o->sig_sent && strstr(o->err, trigger)) {
			kill(pid, sig);
			o->sig_sent = 1;
		}
	}
	close(po[0]);
	close(pe[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc < 0)
		return rc;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -ECHILD;
}

void cli_out_free(struct cli_out *o)
{
	free(o->out);
	free(o->err);
	o->out = o->err = NULL;
}

unsigned cli_lines(const char *s)
{
	unsigned n = 0;

	for (const char *p = s; p && *p; p++)
		if (*p == '\n' || !p[1])
			n++;
	return n;
}

int cli_run_prog(const char *prog, const char *const *args, char *const env_extra[],
		 const char *trigger, int sig, int timeout_ms, struct cli_out *o)
{
	char *argv[64];
	unsigned n = 0;

	argv[n++] = (char *)prog;
	for (; *args; args++) {
		if (n == 63)
			return -E2BIG;
		argv[n++] = (char *)*args;
	}
	argv[n] = NULL;
	return cli_run(argv, env_extra, trigger, sig, timeout_ms, o);
}

bool cli_line(const char *s, const char *prefix, char *line, size_t len)
{
	size_t pl = prefix ? strlen(prefix) : 0;

	if (len)
		line[0] = '\0';
	while (*s) {
		size_t l = strcspn(s, "\n");

		if (!strncmp(s, prefix ? prefix : "", pl) && l >= pl) {
			if (len)
				snprintf(line, len, "%.*s", (int)l, s);
			return true;
		}
		s += l + (s[l] == '\n');
	}
	return false;
}

bool cli_json_num(const char *s, const char *key, double *out)
{
	char pat[96];
	const char *p;
	char *end;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(s, pat);
	if (!p)
		return false;
	*out = strtod(p + strlen(pat), &end);
	return end != p + strlen(pat);
}
