/*
 * tests/integration/twctl_cli.c — twctl's one-line errors (exit 2 or 1, never the usage text):
 * inspect -e -1, recover -1, fence -1, fence and recover -e 2^48-1 without --force (no epoch
 * left for a takeover), a missing option value, -p '', --version in --help;
 * inspect on a FIFO returns at once (it used to block in open()) and on a directory; inspect
 * of a segment file cut at the boundaries of its header and data (exit 1, "truncated", never
 * a huge read: it computed a negative data length below 4096 bytes, issue 28); and
 * what a failed connect says: refused (a TCP port on 127.0.0.1 bound by us, not listening),
 * and, as root in network namespaces this test creates, no route to host and a connect
 * timeout (the only addresses used are 127.0.0.0/8 and those inside the namespaces).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <tailwind/log_format.h>

#include "child.h"
#include "cli_run.h"
#include "core/util.h"
#include "proc.h"
#include "backup/segfile.h"
#include "tap.h"
#include "tmpdir.h"

static char twctl[1024];

static int run(const char *const *args, struct cli_out *o)
{
	return cli_run_prog(args[0], args + 1, (char *[]){ (char *)"TW_BACKUPS=", NULL }, NULL, 0,
			    30000, o);
}

static void one_line(const char *const *args, int want_st, const char *what, const char *want1,
		     const char *want2)
{
	struct cli_out o;
	int st = run(args, &o);
	bool good = cli_lines(o.err) == 1 && strstr(o.err, want1) && strstr(o.err, want2) &&
		    !strstr(o.err, "Usage:");

	is_int(st, want_st, "%s: exit %d", what, want_st);
	ok(good, "%s: one line with '%s' and '%s'", what, want1, want2);
	if (!good || st != want_st)
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
}

static char sh_cmd[512];
/* system() of a formatted command line. */
#define sh(...) (snprintf(sh_cmd, sizeof(sh_cmd), __VA_ARGS__), system(sh_cmd))

/* As root with ip(8): no route, then a silent next hop (connect timeout), in namespaces. */
static void netns_cases(void)
{
	char a[64], b[64], va[32], vb[32], ip[64] = "";
	const char *ips[] = { "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip" };

	for (size_t i = 0; i < sizeof(ips) / sizeof(ips[0]); i++)
		if (access(ips[i], X_OK) == 0) {
			snprintf(ip, sizeof(ip), "%s", ips[i]);
			break;
		}
	if (geteuid() != 0 || !ip[0]) {
		tap_skip(4, "network namespaces need root and ip(8)");
		return;
	}
	snprintf(a, sizeof(a), "twctlcli-a-%d", (int)getpid());
	snprintf(b, sizeof(b), "twctlcli-b-%d", (int)getpid());
	snprintf(va, sizeof(va), "tca%d", (int)getpid() % 100000);
	snprintf(vb, sizeof(vb), "tcb%d", (int)getpid() % 100000);
	if (sh("ip netns add %s && ip netns add %s", a, b) != 0 ||
	    sh("ip -n %s link set lo up", a) != 0) {
		tap_skip(4, "cannot create network namespaces here");
		sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", a, b);
		return;
	}
	{
		struct cli_out o;
		int st = run((const char *[]){ ip, "netns", "exec", a, twctl, "-t", "2000", "-b",
				 "10.255.255.1:7", "ls", NULL }, &o);

		is_int(st, 1, "no route: exit 1");
		ok(strstr(o.err, "no route to host"), "no route: says 'no route to host'");
		tap_diag("no route: %s", o.err);
		cli_out_free(&o);
	}
	/* veth a<->b; a routes 10.255.255.0/24 via b, which does not forward: SYNs vanish. */
	if (sh("ip link add %s type veth peer name %s", va, vb) != 0 ||
	    sh("ip link set %s netns %s", va, a) != 0 || sh("ip link set %s netns %s", vb, b) != 0 ||
	    sh("ip -n %s addr add 10.254.0.1/24 dev %s", a, va) != 0 ||
	    sh("ip -n %s addr add 10.254.0.2/24 dev %s", b, vb) != 0 ||
	    sh("ip -n %s link set %s up", a, va) != 0 || sh("ip -n %s link set %s up", b, vb) != 0 ||
	    sh("ip netns exec %s sysctl -qw net.ipv4.ip_forward=0", b) != 0 ||
	    sh("ip -n %s route add 10.255.255.0/24 via 10.254.0.2", a) != 0) {
		tap_skip(2, "cannot set up the veth pair");
	} else {
		struct cli_out o;
		int st = run((const char *[]){ ip, "netns", "exec", a, twctl, "-t", "1500", "-b",
				 "10.255.255.1:7", "ls", NULL }, &o);

		is_int(st, 1, "silent next hop: exit 1");
		ok(strstr(o.err, "connect timeout") && strstr(o.err, "1500 ms"),
		   "silent next hop: says 'connect timeout' and the 1500 ms");
		tap_diag("timeout: %s", o.err);
		cli_out_free(&o);
	}
	sh("ip netns del %s; ip netns del %s", a, b); /* deletes the veth pair too */
}

/* A real segment file (format 4, two data blocks), then copies cut at the boundaries. */
static void truncated_files(const char *dir)
{
	static const size_t lens[] = { 0, 1, 127, 128, 129, 2048, 4095, 4096, 4097, 4200 };
	size_t cap = 16384, full_len;
	uint8_t *seg = calloc(1, cap), *full = NULL, payload[100] = { 7 };
	struct tw_log_writer w;
	struct segfile_hdr h = { .log_id = 0x28, .segment_id = 3, .replica_version = 1,
				 .epoch = 1, .state = SEGFILE_CLOSED, .buffer_size = 16384 };
	struct tw_scan_result sr;
	char name[SEGFILE_NAME_MAX], path[400], cut[400];
	struct cli_out o;
	struct stat st;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY), fd;

	TAP_REQUIRE(seg && dfd >= 0, "segment buffer, directory");
	tw_log_writer_init(&w, seg, cap);
	for (int i = 0; i < 40; i++) {
		size_t off, len;

		TAP_REQUIRE(tw_log_writer_append(&w, payload, sizeof(payload), NULL) == 0, "append");
		tw_log_writer_seal(&w, &off, &len);
	}
	tw_scan(seg, cap, &sr);
	h.valid_len = sr.valid_len;
	h.entries = sr.entries;
	h.checksum = sr.last_checksum;
	TAP_REQUIRE(tw__segfile_write(dfd, &h, seg, NULL) == 0, "segment file");
	tw__segfile_name(h.log_id, h.segment_id, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(cut, sizeof(cut), "%s/cut.twseg", dir);
	TAP_REQUIRE(stat(path, &st) == 0, "stat %s", path);
	full_len = (size_t)st.st_size;
	full = malloc(full_len);
	fd = open(path, O_RDONLY);
	TAP_REQUIRE(full && fd >= 0 && tw__pread_all(fd, full, full_len, 0) == 0, "read it");
	close(fd);

	ok(run((const char *[]){ twctl, "inspect", path, NULL }, &o) == 0 &&
	   strstr(o.out, "verdict         ok"), "inspect of the whole file (%zu bytes): ok",
	   full_len);
	cli_out_free(&o);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t len = lens[i];
		const char *want = len < SEGFILE_HDR_SIZE ? "shorter than a segment file header" :
				   len < SEGFILE_DATA_OFF ? "CORRUPT: truncated: the file has" :
				   "CORRUPT: file holds";
		int st_;

		fd = open(cut, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		TAP_REQUIRE(fd >= 0 && tw__pwrite_all(fd, full, len, 0) == 0, "cut at %zu", len);
		close(fd);
		st_ = run((const char *[]){ twctl, "inspect", cut, NULL }, &o);
		ok(st_ == 1 && strstr(len < SEGFILE_HDR_SIZE ? o.err : o.out, want),
		   "inspect of the file cut at %zu bytes: exit 1, '%s'", len, want);
		if (st_ != 1 || !strstr(len < SEGFILE_HDR_SIZE ? o.err : o.out, want))
			tap_diag("exit %d; stdout: %s; stderr: %s", st_, o.out, o.err);
		cli_out_free(&o);
	}
	close(dfd);
	free(full);
	free(seg);
}

int main(void)
{
	char dir[256], fifo[300], addr[64];
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);
	struct cli_out o;
	int st, s;

	child_tool("tools/twctl", twctl, sizeof(twctl));
	tmpdir_make(dir, sizeof(dir), NULL, "tw-twctlcli");

	st = run((const char *[]){ twctl, "--help", NULL }, &o);
	ok(st == 0 && strstr(o.out, "-V, --version"), "--help lists -V, --version");
	cli_out_free(&o);
	st = run((const char *[]){ twctl, "--version", NULL }, &o);
	ok(st == 0 && strncmp(o.out, "twctl (tailwind) ", 17) == 0, "--version: %s", o.out);
	cli_out_free(&o);

	one_line((const char *[]){ twctl, "inspect", "-e", "-1", "x.twseg", NULL }, 2,
		 "inspect -e -1", "--entries -1", "count >= 0");
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "recover", "-1", "--verify", NULL },
		 2, "recover -1", "'-1' is not a log id", ">= 0");
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "fence", "-1", NULL }, 2,
		 "fence -1", "'-1' is not a log id", ">= 0");
	/* The last epoch leaves no takeover: refused before any backup is asked (issue 35). */
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "fence", "-e", "281474976710655",
				   "7", NULL }, 2, "fence -e 2^48-1", "no epoch would be left for "
		 "a takeover", "--force");
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "recover", "7", "--verify", "-e",
				   "0xffffffffffff", NULL }, 2, "recover -e 2^48-1",
		 "no epoch would be left for a takeover", "--force");
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "recover", "7", "-e", NULL }, 2,
		 "recover 7 -e", "-e needs a value", "recover --help");
	one_line((const char *[]){ twctl, "-b", "127.0.0.1:1", "recover", "7", "--bogus", NULL },
		 2, "recover --bogus", "unknown option '--bogus'", "recover --help");
	one_line((const char *[]){ twctl, "-p", "", "-b", "127.0.0.1:1", "ls", NULL }, 2, "-p ''",
		 "--provider ''", "provider name");

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	TAP_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo");
	one_line((const char *[]){ twctl, "inspect", fifo, NULL }, 1, "inspect FIFO (no writer)",
		 "not a regular file", "FIFO");
	one_line((const char *[]){ twctl, "inspect", dir, NULL }, 1, "inspect a directory",
		 "not a regular file", "directory");

	truncated_files(dir);

	/* A port bound on 127.0.0.1 but not listening: nothing can answer there. */
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	TAP_REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
		    getsockname(s, (struct sockaddr *)&sin, &sl) == 0, "bind a port");
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));
	one_line((const char *[]){ twctl, "-p", "tcp", "-b", addr, "stat", NULL }, 1,
		 "stat, nothing listening", "connection refused", "is twd running");
	/* Every backup failed: no table header on stdout (it used to print one). */
	for (int k = 0; k < 2; k++) {
		const char *cmd = k ? "ls" : "stat";

		st = run((const char *[]){ twctl, "-p", "tcp", "-b", addr, cmd, NULL }, &o);
		ok(st == 1 && o.out_len == 0, "%s, every backup failed: exit 1, nothing on stdout "
		   "(%zu bytes)", cmd, o.out_len);
		cli_out_free(&o);
	}
	close(s);

	/* A listener that is not libfabric: accepts, answers with bytes that are not its handshake. */
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sin.sin_port = 0;
	sl = sizeof(sin);
	TAP_REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
		    listen(s, 4) == 0 && getsockname(s, (struct sockaddr *)&sin, &sl) == 0,
		    "listen on a port");
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));
	{
		pid_t pid = fork();

		TAP_REQUIRE(pid >= 0, "fork");
		if (pid == 0) {
			static const char junk[64] = "HTTP/1.0 400 Bad Request\r\n\r\n";

			for (;;) {
				int c = accept(s, NULL, NULL);

				if (c < 0)
					_exit(0);
				if (write(c, junk, sizeof(junk)) < 0)
					_exit(0);
				close(c);
			}
		}
		one_line((const char *[]){ twctl, "-p", "tcp", "-t", "3000", "-b", addr, "stat",
					   NULL }, 1, "stat, a listener that is not libfabric",
			 "did not answer the libfabric handshake", "not a twd");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	close(s);

	netns_cases();

	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
