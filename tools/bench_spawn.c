/*
 * tools/bench_spawn.c — twbench's local backups: with no --backups it starts twd processes
 * (found next to this executable, else on $PATH; spawned with tools/proc.h), each in a
 * temporary directory under $TMPDIR, reads their addresses from their `ready <address>` lines,
 * and at exit stops them with SIGTERM and removes the directories. SIGINT/SIGTERM while they
 * run: a signal thread kills them, removes the directory and dies of the same signal.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "proc.h"

struct twd {
	struct proc *p;
	char dir[PATH_MAX];
	char addr[128];
};

static struct twd twds[MAX_BACKUPS];
unsigned n_twd;
static char tmp_root[PATH_MAX];
/* Held while twds[], n_twd and tmp_root change, so the signal thread sees whole updates. */
static pthread_mutex_t twd_lock = PTHREAD_MUTEX_INITIALIZER;
static sigset_t sigs;

int twd_pid(unsigned i)
{
	return i < n_twd && twds[i].p ? (int)proc_pid(twds[i].p) : 0;
}

static int rm_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path) < 0 ? 0 : 0;
}

void stop_twds(void)
{
	pthread_mutex_lock(&twd_lock);
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].p)
			proc_kill(twds[i].p, SIGTERM);
	for (unsigned i = 0; i < n_twd; i++) {
		struct twd *t = &twds[i];

		if (!t->p)
			continue;
		if (proc_wait(t->p, 20000) == -ETIMEDOUT) {
			fprintf(stderr, "twbench: twd %d did not exit after SIGTERM, killing it\n",
				(int)proc_pid(t->p));
			proc_kill(t->p, SIGKILL);
			proc_wait(t->p, -1);
		}
		proc_free(t->p);
		t->p = NULL;
	}
	if (tmp_root[0]) {
		nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		tmp_root[0] = '\0';
	}
	pthread_mutex_unlock(&twd_lock);
}


/*
 * SIGINT/SIGTERM while local twd's run (blocked in every thread, taken here by sigwait): kill
 * the twd's (their data is scratch), reap them, remove the temporary directory, then die of the
 * same signal so the shell sees what happened.
 */
static void *signal_main(void *arg)
{
	sigset_t *set = arg;
	int sig;

	while (sigwait(set, &sig) != 0)
		;
	pthread_mutex_lock(&twd_lock);
	fprintf(stderr, "\ntwbench: %s: stopping %u local twd(s) and removing %s\n",
		strsignal(sig), n_twd, tmp_root[0] ? tmp_root : "(nothing)");
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].p)
			proc_kill(twds[i].p, SIGKILL);
	for (unsigned i = 0; i < n_twd; i++)
		if (twds[i].p)
			proc_wait(twds[i].p, -1);
	if (tmp_root[0]) {
		nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		tmp_root[0] = '\0';
	}
	signal(sig, SIG_DFL);
	pthread_sigmask(SIG_UNBLOCK, set, NULL);
	raise(sig); /* to this thread: the default action ends the process */
	_exit(128 + sig);
}

static int find_twd(const char *given, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n;
	const char *path;

	if (given) {
		snprintf(out, len, "%s", given);
		return access(out, X_OK) == 0 ? 0 : -ENOENT;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (snprintf(out, len, "%s/twd", self) < (int)len && access(out, X_OK) == 0)
				return 0;
		}
	}
	path = getenv("PATH");
	while (path && *path) {
		const char *c = strchr(path, ':');
		size_t l = c ? (size_t)(c - path) : strlen(path);

		if (l) {
			snprintf(out, len, "%.*s/twd", (int)l, path);
			if (access(out, X_OK) == 0)
				return 0;
		}
		path = c ? c + 1 : NULL;
	}
	return -ENOENT;
}

/* twd's exit codes (twd --help, docs/operations.md). */
static const char *twd_status_str(int st)
{
	switch (st) {
	case EXIT_USAGE: return "usage error";
	case EXIT_STORAGE: return "storage directory unusable";
	case EXIT_PROVIDER: return "provider unavailable or cannot listen";
	case EXIT_MEMORY: return "cannot allocate or register the buffer pool";
	default: return "runtime failure";
	}
}

/* twd's exit status before its ready line, -1 when it did not exit (tools/exit.h). */
static int twd_early_status = -1;

static int start_twd(const char *exe, const struct opts *o, unsigned i)
{
	static const struct proc_opts popts = {
		.echo_prefix = "twbench: twd: ", /* what it prints before its ready line */
		.clear_sigmask = true,            /* ours blocks SIGINT/SIGTERM for sigwait */
		.quiet = true,
		.unlisted = true,                 /* stop_twds stops it, with a longer grace */
	};
	struct twd *t = &twds[i];
	char bufsz[32], nbuf[32], line[1024];
	char *argv[16];
	int rc, k = 0;

	/* Under the lock, as the signal thread removes tmp_root (and clears it) under it: a
	 * directory made after that removal would outlive twbench. */
	pthread_mutex_lock(&twd_lock);
	if (!tmp_root[0] || snprintf(t->dir, sizeof(t->dir), "%s/b%u", tmp_root, i) >=
				    (int)sizeof(t->dir))
		rc = tmp_root[0] ? -ENAMETOOLONG : -ECANCELED;
	else
		rc = mkdir(t->dir, 0700) < 0 ? -errno : 0;
	pthread_mutex_unlock(&twd_lock);
	if (rc < 0)
		return rc;
	snprintf(bufsz, sizeof(bufsz), "%zu", o->segment_size);
	snprintf(nbuf, sizeof(nbuf), "%zu", o->twd_buffers);
	argv[k++] = (char *)exe;
	argv[k++] = (char *)"--provider";
	argv[k++] = (char *)o->provider;
	argv[k++] = (char *)"--dir";
	argv[k++] = t->dir;
	argv[k++] = (char *)"--buffer-size";
	argv[k++] = bufsz;
	argv[k++] = (char *)"--buffers";
	argv[k++] = nbuf;
	if (o->key_file) {
		argv[k++] = (char *)"--key-file";
		argv[k++] = (char *)o->key_file;
	}
	argv[k] = NULL;
	pthread_mutex_lock(&twd_lock);
	t->p = proc_spawn_opts(argv, NULL, &popts);
	rc = t->p ? 0 : -errno;
	if (t->p)
		n_twd = i + 1 > n_twd ? i + 1 : n_twd;
	pthread_mutex_unlock(&twd_lock);
	if (rc)
		return rc;
	rc = proc_wait_line(t->p, "ready ", line, sizeof(line), 20000);
	if (rc >= 0) {
		if (strlen(line + 6) >= sizeof(t->addr))
			return -ENAMETOOLONG;
		memcpy(t->addr, line + 6, strlen(line + 6) + 1);
		return 0;
	}
	if (rc == -EPIPE) {
		int st;

		pthread_mutex_lock(&twd_lock);
		st = proc_wait(t->p, -1);
		pthread_mutex_unlock(&twd_lock);
		if (!proc_signaled(t->p)) {
			fprintf(stderr, "twbench: %s exited with status %d before it was ready (%s; "
				"its message is above)\n", exe, st, twd_status_str(st));
			twd_early_status = st;
		}
		else
			fprintf(stderr, "twbench: %s died before it was ready\n", exe);
	} else {
		fprintf(stderr, "twbench: %s did not print its ready line: %s\n", exe, strerror(-rc));
	}
	return rc;
}

int local_twds_start(const struct opts *o, unsigned max_r, const char **addrs,
		     unsigned *n_addrs)
{
	const char *tmp = getenv("TMPDIR");
	char twd_exe[PATH_MAX];
	pthread_t sigthr;
	int rc;

	if (find_twd(o->twd_path, twd_exe, sizeof(twd_exe)) < 0) {
		if (o->twd_path)
			fprintf(stderr, "twbench: --twd %s: %s; give the path of the twd program\n",
				o->twd_path, strerror(errno));
		else
			fprintf(stderr, "twbench: cannot find twd (next to twbench or on $PATH); "
					"use --twd PATH or --backups\n");
		return EXIT_USAGE;
	}
	snprintf(tmp_root, sizeof(tmp_root), "%s/twbench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	/* Before any thread: SIGINT/SIGTERM go to signal_main only. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (!mkdtemp(tmp_root)) {
		fprintf(stderr, "twbench: mkdtemp %s: %s\n", tmp_root, strerror(errno));
		tmp_root[0] = '\0';
		return EXIT_STORAGE;
	}
	atexit(stop_twds);
	signal(SIGPIPE, SIG_IGN);
	rc = pthread_create(&sigthr, NULL, signal_main, &sigs);
	if (rc) {
		fprintf(stderr, "twbench: cannot start the signal thread: %s\n", strerror(rc));
		return EXIT_FAIL;
	}
	pthread_detach(sigthr);
	for (unsigned i = 0; i < max_r; i++) {
		uint64_t t0 = now_ns();

		if (!o->json || o->progress)
			fprintf(stderr, "twbench: starting local backup %u/%u (%s, %s)...\n",
				i + 1, max_r, twd_exe, o->provider);
		rc = start_twd(twd_exe, o, i);
		if (rc < 0) {
			fprintf(stderr, "twbench: cannot start local backup %u/%u: %s\n", i + 1,
				max_r, rc == -EPIPE ? "twd exited early" : strerror(-rc));
			/* The same mistake, the same code: twd's own when it said why. */
			return twd_early_status == EXIT_STORAGE || twd_early_status == EXIT_PROVIDER ||
			       twd_early_status == EXIT_MEMORY || twd_early_status == EXIT_USAGE ?
			       twd_early_status : EXIT_FAIL;
		}
		if (!o->json || o->progress)
			fprintf(stderr, "twbench: backup %u/%u ready at %s (%.1f s)\n", i + 1,
				max_r, twds[i].addr, (double)(now_ns() - t0) / 1e9);
		addrs[(*n_addrs)++] = twds[i].addr;
	}
	return 0;
}
