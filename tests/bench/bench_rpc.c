/*
 * tests/bench/bench_rpc.c — RPC round-trip latency per provider. For each provider it spawns
 * tests/integration/rpc_server, waits for its ready line, connects, and times N blocking calls
 * of a small RPC (Ping, 0-byte payload: a 16-byte request frame, ~16-byte reply) and of an
 * OpenSegment (~40/35 bytes), then prints p50/p99/p99.9/max.
 *
 *   bench_rpc [-n N] [-b] [PROVIDER...]    default: 20000 calls, providers tcp sockets shm
 *   -b: busy polling on both sides (DESIGN §6 "busy polling as an option for latency benchmarks")
 *
 * Needs TW_BUILD_ROOT (or to be run from the build directory). Numbers on stdout, logs on stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proc.h"
#include "proto/rpc.h"

static struct tw_rpc_client *cl;

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	if (cl)
		tw__rpc_client_on_recv(cl, msg, len);
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	if (cl)
		tw__rpc_client_on_lost(cl, err);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return (double)v[i] / 1000.0;
}

static void report(const char *prov, const char *what, uint64_t *lat, size_t n)
{
	qsort(lat, n, sizeof(*lat), cmp_u64);
	printf("%-8s %-13s %7zu %9.1f %9.1f %9.1f %9.1f\n", prov, what, n, pct(lat, n, 0.50),
	       pct(lat, n, 0.99), pct(lat, n, 0.999), (double)lat[n - 1] / 1000.0);
	fflush(stdout);
}

static int bench(const char *server, const char *prov, size_t n, bool busy)
{
	char *args[] = { (char *)server, (char *)prov, busy ? (char *)"busy" : NULL, NULL };
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_recv = on_recv, .on_lost = on_lost };
	struct tw_rpc_seg_meta m = { 1, 0, 0, 0 };
	struct tw_fab *fab = NULL;
	struct tw_chan *ch = NULL;
	struct proc *p;
	char line[256];
	uint64_t *lat;
	size_t i;
	int rc;

	lat = calloc(n, sizeof(*lat));
	if (!lat)
		return -ENOMEM;
	p = proc_spawn(args, NULL);
	if (!p) {
		free(lat);
		return -ECHILD;
	}
	rc = proc_wait_line(p, "ready ", line, sizeof(line), 20000);
	if (rc < 0) {
		fprintf(stderr, "bench_rpc: %s: server not ready: %s\n", prov, strerror(-rc));
		goto out;
	}
	tw__fab_config_init(&fc);
	fc.provider = prov;
	fc.busy_poll = busy;
	rc = tw__fab_open(&fc, &ev, &fab);
	if (rc)
		goto out;
	rc = tw__fab_connect(fab, line + 6, &ch);
	if (rc)
		goto out;
	rc = tw__rpc_client_create(ch, NULL, &cl);
	if (rc)
		goto out;

	for (i = 0; i < n / 10 + 100; i++) { /* warm-up */
		rc = tw__rpc_ping(cl, i);
		if (rc)
			goto out;
	}
	for (i = 0; i < n; i++) {
		uint64_t t0 = tw_now_ns();

		rc = tw__rpc_ping(cl, i);
		lat[i] = tw_now_ns() - t0;
		if (rc)
			goto out;
	}
	report(prov, "ping", lat, n);
	for (i = 0; i < n; i++) {
		struct tw_rkey rk;
		uint64_t t0 = tw_now_ns();

		m.segment_id = i;
		rc = tw__rpc_open_segment(cl, 1, &m, 0, 8u << 20, &rk);
		lat[i] = tw_now_ns() - t0;
		if (rc)
			goto out;
	}
	report(prov, "open_segment", lat, n);
out:
	if (rc)
		fprintf(stderr, "bench_rpc: %s: %s%s%s\n", prov, tw_strerror(rc),
			cl ? " / " : "", cl ? tw__rpc_client_errmsg(cl) : "");
	tw__rpc_client_close(&cl, &ch);
	if (fab)
		tw__fab_close(fab);
	proc_kill(p, SIGTERM);
	proc_wait(p, 10000);
	proc_free(p);
	free(lat);
	return rc;
}

int main(int argc, char **argv)
{
	static const char *const defaults[] = { "tcp", "sockets", "shm" };
	char server[4096];
	size_t n = 20000;
	bool busy = false;
	int opt, i, fails = 0;

	while ((opt = getopt(argc, argv, "n:b")) != -1) {
		if (opt == 'n')
			n = strtoul(optarg, NULL, 10);
		else if (opt == 'b')
			busy = true;
		else {
			fprintf(stderr, "usage: %s [-n N] [-b] [PROVIDER...]\n", argv[0]);
			return 2;
		}
	}
	if (n < 10)
		n = 10;
	if (proc_find_tool("tests/integration/rpc_server", server, sizeof(server)) != 0) {
		fprintf(stderr, "bench_rpc: rpc_server not found (set TW_BUILD_ROOT)\n");
		return 1;
	}
	printf("# RPC round trip, blocking calls, %s; latency in microseconds\n",
	       busy ? "busy polling" : "blocking waits");
	printf("%-8s %-13s %7s %9s %9s %9s %9s\n", "provider", "rpc", "calls", "p50", "p99",
	       "p99.9", "max");
	if (optind < argc) {
		for (i = optind; i < argc; i++)
			fails += bench(server, argv[i], n, busy) != 0;
	} else {
		for (i = 0; i < 3; i++)
			fails += bench(server, defaults[i], n, busy) != 0;
	}
	return fails ? 1 : 0;
}
