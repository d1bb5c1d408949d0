/*
 * tests/integration/twd_checks.c — twd's start-up checks and messages (stderr captured):
 * a storage directory that cannot hold a segment file (/sys/kernel, /proc/1) is exit 3 before
 * `ready`; a pool larger than MemAvailable is exit 5 with the numbers; -p '' is a usage error;
 * FI_PROVIDER=nosuch lists the providers this machine really offers (not "(none)"); an unknown
 * TW_LOG_LEVEL is a warning naming the valid levels; TW_LOG_TIME=1 dates the log lines; the
 * exit codes are in --help; --version; READY=1 goes to $NOTIFY_SOCKET after the ready line,
 * STOPPING=1 when a signal (here SIGHUP) starts the shutdown flush (Type=notify in twd@.service).
 */
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "child.h"
#include "cli_run.h"
#include "proc.h"
#include "tap.h"
#include "tmpdir.h"

static char twd[1024];

static int run(const char *const *args, char *const *env, struct cli_out *o)
{
	return cli_run_prog(twd, args, env, NULL, 0, 30000, o);
}

static unsigned long long mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

static void unusable_dir(const char *dir)
{
	struct cli_out o;
	struct stat st;
	int rc;

	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		tap_skip(3, "%s is not a directory here", dir);
		return;
	}
	rc = run((const char *[]){ "-p", "tcp", "-d", dir, "-b", "2", "-s", "64K", NULL }, NULL, &o);
	is_int(rc, 3, "-d %s: exit 3", dir);
	ok(strstr(o.err, "cannot hold segment files") && strstr(o.err, dir),
	   "-d %s: says the directory cannot hold segment files", dir);
	ok(!strstr(o.out, "ready "), "-d %s: never printed ready", dir);
	tap_diag("%s", o.err);
	cli_out_free(&o);
}

int main(void)
{
	char dir[64], sub[80], bufs[32], need[64];
	unsigned long long avail = mem_available();
	struct cli_out o;
	regex_t re;
	int rc;

	child_tool("tools/twd", twd, sizeof(twd));
	/* In /tmp, whatever $TMPDIR: a socket's path below must fit sun_path (108 bytes). */
	tmpdir_make(dir, sizeof(dir), "/tmp", "tw-twdchecks");
	snprintf(sub, sizeof(sub), "%s/d", dir);

	rc = run((const char *[]){ "--help", NULL }, NULL, &o);
	ok(rc == 0 && strstr(o.out, "Exit status (") && strstr(o.out, "probe file") &&
	   strstr(o.out, "MemAvailable") && strstr(o.out, "TW_LOG_TIME"),
	   "--help documents the exit codes, the probe, MemAvailable and TW_LOG_TIME");
	cli_out_free(&o);
	rc = run((const char *[]){ "--version", NULL }, NULL, &o);
	ok(rc == 0 && strncmp(o.out, "twd (tailwind) ", 15) == 0, "--version: %s", o.out);
	cli_out_free(&o);

	unusable_dir("/sys/kernel");
	unusable_dir("/proc/1");

	/* Twice the memory available, in 1 GiB buffers. */
	TAP_REQUIRE(avail > 0, "MemAvailable in /proc/meminfo");
	snprintf(bufs, sizeof(bufs), "%llu", 2 * avail / (1ull << 30) + 1);
	snprintf(need, sizeof(need), "%llu", (2 * avail / (1ull << 30) + 1) * (1ull << 30));
	rc = run((const char *[]){ "-p", "tcp", "-d", sub, "-b", bufs, "-s", "1G", NULL }, NULL, &o);
	is_int(rc, 5, "-b %s -s 1G (twice MemAvailable): exit 5", bufs);
	ok(strstr(o.err, need) && strstr(o.err, "MemAvailable") && cli_lines(o.err) == 1,
	   "pool too large: one line with the %s bytes needed and MemAvailable", need);
	tap_diag("%s", o.err);
	cli_out_free(&o);

	rc = run((const char *[]){ "-p", "", "-d", sub, NULL }, NULL, &o);
	is_int(rc, 2, "-p '': exit 2");
	ok(strstr(o.err, "--provider ''") && cli_lines(o.err) == 1, "-p '': one line naming it");
	cli_out_free(&o);

	rc = run((const char *[]){ "-d", sub, NULL }, (char *[]){ (char *)"FI_PROVIDER=nosuch",
		 NULL }, &o);
	is_int(rc, 4, "FI_PROVIDER=nosuch: exit 4");
	ok(strstr(o.err, "offers: ") && !strstr(o.err, "(none") && strstr(o.err, "tcp"),
	   "FI_PROVIDER=nosuch: lists the providers this machine offers");
	tap_diag("%s", o.err);
	cli_out_free(&o);

	rc = run((const char *[]){ "-p", "nosuch", "-d", sub, NULL },
		 (char *[]){ (char *)"TW_LOG_LEVEL=loud", (char *)"TW_LOG_TIME=1", NULL }, &o);
	is_int(rc, 4, "TW_LOG_LEVEL=loud -p nosuch: exit 4");
	ok(strstr(o.err, "TW_LOG_LEVEL=loud") && strstr(o.err, "error, warn, info, debug"),
	   "unknown TW_LOG_LEVEL: a warning naming the valid levels");
	TAP_REQUIRE(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}"
			    "[+-][0-9]{4} tailwind\\[[0-9]+\\] error: ", REG_EXTENDED | REG_NEWLINE) == 0,
		    "regcomp");
	ok(regexec(&re, o.err, 0, NULL, 0) == 0, "TW_LOG_TIME=1: log lines start with the date "
	   "and time");
	tap_diag("%s", o.err);
	regfree(&re);
	cli_out_free(&o);

	/* Type=notify: READY=1 on $NOTIFY_SOCKET once the ready line is out. */
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char env[160], line[256], msg[256] = "";
		char *argv[] = { twd, (char *)"-p", (char *)"tcp", (char *)"-d", sub, (char *)"-b",
				 (char *)"2", (char *)"-s", (char *)"64K", NULL };
		char *envv[] = { env, NULL };
		struct pollfd pfd;
		struct proc *p;
		int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", dir);
		TAP_REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
			    "bind a notify socket");
		snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sa.sun_path);
		p = proc_spawn(argv, envv);
		TAP_REQUIRE(p, "spawn twd");
		rc = proc_wait_line(p, "ready ", line, sizeof(line), 20000);
		ok(rc > 0, "twd with NOTIFY_SOCKET is ready");
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 10000) == 1) {
			ssize_t n = recv(fd, msg, sizeof(msg) - 1, 0);

			msg[n > 0 ? n : 0] = '\0';
		}
		ok(strcmp(msg, "READY=1") == 0, "READY=1 sent to $NOTIFY_SOCKET (got '%s')", msg);
		is_int(proc_kill(p, SIGHUP), 0, "SIGHUP");
		msg[0] = '\0';
		if (poll(&pfd, 1, 20000) == 1) {
			ssize_t n = recv(fd, msg, sizeof(msg) - 1, 0);

			msg[n > 0 ? n : 0] = '\0';
		}
		ok(strncmp(msg, "STOPPING=1\nSTATUS=flushing every buffer to ", 43) == 0,
		   "STOPPING=1 with a STATUS line when the flush starts (got '%s')", msg);
		is_int(proc_wait(p, 20000), 0, "exit 0");
		proc_free(p);
		close(fd);
	}

	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
