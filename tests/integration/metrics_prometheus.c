/*
 * tests/integration/metrics_prometheus.c — a real Prometheus (Debian's prometheus package)
 * scrapes a running twd and two running `twkv serve` on 127.0.0.1, every port ephemeral
 * (docs/metrics.md):
 *   - twd --metrics 0 and twkv serve --metrics 0 print "metrics <address>" before their ready
 *     lines; a log appended to the twd (through the library), and PUTs to the twkv cluster,
 *     move counters;
 *   - prometheus starts with --web.listen-address=127.0.0.1:0 and a prometheus.yml written
 *     here; its port is read from its log ("Listening on"), its readiness polled on /-/ready
 *     with a deadline;
 *   - counters read back through its HTTP API (/api/v1/query): twd's open RPCs, the twkv
 *     cluster's PUTs, and `up` of every target;
 *   - `promtool check metrics` passes on both endpoints' text;
 *   - the flag's errors: a malformed address is exit 2, a port in use exit 4.
 * The metrics do not depend on the provider (the text is written from counters), so the test
 * runs on tcp alone. Skipped (1..0 # SKIP) only when prometheus or promtool is not installed.
 *
 *   metrics_prometheus tcp
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "kv_client.h"
#include "kv_cluster.h"
#include "proc.h"
#include "tap.h"
#include "tlog.h"
#include "tmpdir.h"

#define DEADLINE_MS 60000

static char root[512];

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A wait between two polls of something with no event to wait for (a log file, an HTTP API). */
static void pause_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* GET http://addr/path (addr "127.0.0.1:PORT") with HTTP/1.0: the status, the body in buf (NUL
 * terminated, truncated to cap - 1), or -errno. */
static int http_get(const char *addr, const char *path, char *buf, size_t cap)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char host[64], req[2048];
	const char *colon = strrchr(addr, ':');
	size_t got = 0;
	int fd, status = -EPROTO;
	char *body;

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		close(fd);
		return -EIO;
	}
	for (;;) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == cap - 1)
			break;
	}
	close(fd);
	buf[got] = '\0';
	if (sscanf(buf, "HTTP/%*s %d", &status) != 1)
		return -EPROTO;
	body = strstr(buf, "\r\n\r\n");
	if (body)
		memmove(buf, body + 4, strlen(body + 4) + 1);
	return status;
}

/* Percent-encode a PromQL query for a URL. */
static void urlencode(const char *s, char *out, size_t cap)
{
	size_t at = 0;

	for (; *s && at + 4 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || c == '.' || c == '-')
			out[at++] = (char)c;
		else
			at += (size_t)snprintf(out + at, cap - at, "%%%02X", c);
	}
	out[at] = '\0';
}

/* The value of an instant query with one result ("value":[ts,"v"]); -1 when there is none. */
static double query(const char *prom, const char *q)
{
	static char buf[1 << 16];
	char path[2048], enc[1800];
	const char *v;
	int st;

	urlencode(q, enc, sizeof(enc));
	snprintf(path, sizeof(path), "/api/v1/query?query=%s", enc);
	st = http_get(prom, path, buf, sizeof(buf));
	if (st != 200 || !strstr(buf, "\"status\":\"success\""))
		return -1;
	v = strstr(buf, "\"value\":[");
	if (!v || !(v = strchr(v, ',')) || v[1] != '"')
		return -1;
	return strtod(v + 2, NULL);
}

/* Poll `q` until its value is at least `want` or the deadline passes; the last value. */
static double query_until(const char *prom, const char *q, double want)
{
	uint64_t end = now_ms() + DEADLINE_MS;
	double v;

	while ((v = query(prom, q)) < want && now_ms() < end)
		pause_ms(200);
	return v;
}

/* promtool check metrics on an endpoint's text: its exit status, or -1. */
static int promtool_on(const char *addr, const char *name)
{
	static char buf[1 << 20];
	char path[700], cmd[1024];
	FILE *f;
	int st = http_get(addr, "/metrics", buf, sizeof(buf));

	if (st != 200) {
		tap_diag("GET %s/metrics: %d", addr, st);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s.txt", root, name);
	f = fopen(path, "w");
	if (!f || fputs(buf, f) < 0 || fclose(f) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' >&2", path);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Start a program that prints "metrics <addr>" then "ready ..."; the two lines. */
static struct proc *start_with_metrics(char *const argv[], char *maddr, size_t mlen, char *ready,
				       size_t rlen)
{
	struct proc *p = proc_spawn(argv, NULL);
	char line[512];

	TAP_REQUIRE(p, "spawn %s", argv[0]);
	TAP_REQUIRE(proc_wait_line(p, "metrics ", line, sizeof(line), 30000) >= 0,
		    "%s printed no metrics line", argv[0]);
	snprintf(maddr, mlen, "%.100s", line + 8);
	TAP_REQUIRE(proc_wait_line(p, "ready ", ready, rlen, 30000) >= 0, "%s not ready",
		    argv[0]);
	return p;
}

/* Wait for "Listening on" in prometheus's log; its address, or "" at the deadline. */
static void prometheus_addr(const char *log, char *addr, size_t len)
{
	uint64_t end = now_ms() + DEADLINE_MS;

	addr[0] = '\0';
	while (now_ms() < end) {
		FILE *f = fopen(log, "r");
		char line[1024];

		while (f && fgets(line, sizeof(line), f)) {
			const char *a = strstr(line, "msg=\"Listening on\" address=");

			if (a && sscanf(a + strlen("msg=\"Listening on\" address="), "%63s", addr) == 1 &&
			    strcmp(addr + strlen(addr) - 2, ":0") != 0) {
				fclose(f);
				return;
			}
			addr[0] = '\0';
		}
		if (f)
			fclose(f);
		pause_ms(50);
	}
}

static int exit_of(char *const argv[])
{
	struct proc *p = proc_spawn(argv, NULL);
	int st;

	if (!p)
		return -1;
	st = proc_wait(p, 30000);
	proc_free(p);
	return st;
}

int main(int argc, char **argv)
{
	char twd[512], twkv[512], dir[600], cfgpath[600], logpath[600], data[600], q[512];
	char twd_m[128], twd_ready[256], kv_m[2][128], kv_ready[2][256], prom[128], body[4096];
	struct kv_cluster map;
	struct tw_ctx_config tc;
	struct tw_primary_config pc;
	struct tw_primary *log;
	struct proc *pt, *pk[2], *pp;
	const char *backup;
	uint8_t entry[64] = { 0 };
	char err[512];
	FILE *f;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PROVIDER\n", argv[0]);
		return 2;
	}
	if (system("command -v prometheus >/dev/null && command -v promtool >/dev/null") != 0)
		tap_plan_skip_all("prometheus or promtool is not installed (Debian package "
				  "prometheus)");
	TAP_REQUIRE(proc_find_tool("tools/twd", twd, sizeof(twd)) == 0, "tools/twd not built");
	TAP_REQUIRE(proc_find_tool("examples/kv/twkv", twkv, sizeof(twkv)) == 0,
		    "examples/kv/twkv not built");
	tap_plan(16);
	tmpdir_make(root, sizeof(root), NULL, "metrics_prometheus");

	/* twd, and a log on it that moves its counters. */
	snprintf(dir, sizeof(dir), "%s/twd", root);
	{
		char *args[] = { twd, (char *)"-p", argv[1], (char *)"-d", dir, (char *)"-b",
				 (char *)"4", (char *)"-s", (char *)"1M", (char *)"--metrics",
				 (char *)"0", NULL };

		pt = start_with_metrics(args, twd_m, sizeof(twd_m), twd_ready, sizeof(twd_ready));
	}
	backup = twd_ready + 6;
	tlog_primary_config(&tc, &pc, argv[1], &backup, 1, 36);
	pc.replicas = 1;
	pc.segment_size = 1u << 20;
	log = tlog_open(&tc, &pc, "a log on twd");
	TAP_REQUIRE(log, "cannot go on");
	for (int i = 0; i < 100; i++)
		TAP_REQUIRE(tw_primary_append(log, entry, sizeof(entry), NULL) == 0, "append");

	/* Two twkv servers, one partition each, r = 1 (each the other's backup), and PUTs. */
	memset(&map, 0, sizeof(map));
	for (int i = 0; i < 2; i++) {
		char *args[] = { twkv, (char *)"serve", (char *)"--provider", argv[1],
				 (char *)"--dir", dir, (char *)"--segment-size", (char *)"256K",
				 (char *)"--buffers", (char *)"4", (char *)"--metrics", (char *)"0",
				 NULL };
		char *kv, *bk;

		snprintf(dir, sizeof(dir), "%s/kv%d", root, i);
		pk[i] = start_with_metrics(args, kv_m[i], sizeof(kv_m[i]), kv_ready[i],
					   sizeof(kv_ready[i]));
		kv = strstr(kv_ready[i], "kv=");
		bk = strstr(kv_ready[i], "backup=");
		TAP_REQUIRE(kv && bk && strchr(kv, ' '), "ready line: %s", kv_ready[i]);
		*strchr(kv, ' ') = '\0';
		snprintf(map.servers[i].kv, KV_ADDR_MAX, "%s", kv + 3);
		snprintf(map.servers[i].backup, KV_ADDR_MAX, "%s", bk + 7);
		map.servers[i].owns = UINT64_C(1) << i;
	}
	map.nservers = 2;
	map.partitions = 2;
	map.replicas = 1;
	map.log_base = 3600;
	rc = kv_configure(&map, 60000, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "configure the twkv cluster: %s", err);
	{
		const char *servers[] = { map.servers[0].kv };
		struct kvc *c;

		TAP_REQUIRE(kvc_open(servers, 1, 30000, &c, err, sizeof(err)) == 0, "kvc_open: %s",
			    err);
		for (int i = 0; i < 50; i++) {
			char key[32];

			snprintf(key, sizeof(key), "key%d", i);
			TAP_REQUIRE(kvc_put_sync(c, key, (uint16_t)strlen(key), "value", 5, NULL) == 0,
				    "put %s", key);
		}
		kvc_close(c);
	}

	/* The endpoints' text. */
	is_int(promtool_on(twd_m, "twd"), 0, "promtool check metrics passes on twd's /metrics");
	is_int(promtool_on(kv_m[0], "twkv"), 0,
	       "promtool check metrics passes on twkv serve's /metrics");
	rc = http_get(twd_m, "/", body, sizeof(body));
	is_int(rc, 404, "twd: / is 404 (%s)", body);

	/* Prometheus, scraping the three. */
	snprintf(cfgpath, sizeof(cfgpath), "%s/prometheus.yml", root);
	f = fopen(cfgpath, "w");
	TAP_REQUIRE(f, "%s: %s", cfgpath, strerror(errno));
	fprintf(f, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
		   "scrape_configs:\n"
		   "  - job_name: twd\n    static_configs:\n      - targets: ['%s']\n"
		   "  - job_name: twkv\n    static_configs:\n      - targets: ['%s', '%s']\n",
		twd_m, kv_m[0], kv_m[1]);
	TAP_REQUIRE(fclose(f) == 0, "write %s", cfgpath);
	snprintf(logpath, sizeof(logpath), "%s/prometheus.log", root);
	snprintf(data, sizeof(data), "%s/data", root);
	{
		char cmd[2400];
		char *args[] = { (char *)"/bin/sh", (char *)"-c", cmd, NULL };

		snprintf(cmd, sizeof(cmd), "exec prometheus --config.file='%s' "
			 "--storage.tsdb.path='%s' --web.listen-address=127.0.0.1:0 >'%s' 2>&1",
			 cfgpath, data, logpath);
		pp = proc_spawn(args, NULL);
		TAP_REQUIRE(pp, "spawn prometheus");
	}
	prometheus_addr(logpath, prom, sizeof(prom));
	ok(prom[0], "prometheus listens on an ephemeral port: %s", prom[0] ? prom : "(none)");
	TAP_REQUIRE(prom[0], "cannot go on (see %s)", logpath);
	{
		uint64_t end = now_ms() + DEADLINE_MS;

		while ((rc = http_get(prom, "/-/ready", body, sizeof(body))) != 200 &&
		       now_ms() < end)
			pause_ms(100);
		is_int(rc, 200, "prometheus /-/ready");
	}
	ok(query_until(prom, "up{job=\"twd\"}", 1) == 1, "up{job=\"twd\"} is 1");
	ok(query_until(prom, "sum(up{job=\"twkv\"})", 2) == 2, "both twkv targets are up");
	ok(query_until(prom, "tailwind_backup_rpc_total{job=\"twd\",kind=\"open\"}", 1) >= 1,
	   "twd's open RPCs read back through Prometheus");
	ok(query_until(prom, "tailwind_backup_buffers{job=\"twd\"}", 4) == 4,
	   "twd's buffers (4) read back");
	ok(query_until(prom, "sum(twkv_puts_total{job=\"twkv\"})", 50) == 50,
	   "the twkv cluster's 50 PUTs read back (twkv_puts_total)");
	ok(query_until(prom, "sum(tailwind_primary_appends_acked_total{job=\"twkv\"})", 50) >= 50,
	   "the twkv partitions' logs (tailwind_primary_*) read back");
	snprintf(q, sizeof(q), "process_resident_memory_bytes{job=\"twd\"}");
	ok(query_until(prom, q, 1) > 0, "twd's resident memory read back");

	/* The flag's errors. */
	{
		char *bad[] = { twd, (char *)"-d", dir, (char *)"--metrics", (char *)"host:port",
				NULL };
		char *busy[] = { twd, (char *)"-p", argv[1], (char *)"-d", dir, (char *)"--metrics",
				 twd_m, NULL };
		char *kvbad[] = { twkv, (char *)"serve", (char *)"--dir", dir, (char *)"--metrics",
				  (char *)"[::1", NULL };

		snprintf(dir, sizeof(dir), "%s/twd2", root);
		is_int(exit_of(bad), 2, "twd --metrics host:port: exit 2 (usage)");
		is_int(exit_of(busy), 4, "twd --metrics on a port in use: exit 4 (cannot listen)");
		is_int(exit_of(kvbad), 2, "twkv serve --metrics '[::1': exit 2");
	}

	proc_free(pp);
	tw_primary_close(log);
	for (int i = 0; i < 2; i++)
		proc_free(pk[i]);
	proc_free(pt);
	tmpdir_remove(root);
	return tap_exit();
}
