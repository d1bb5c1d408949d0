/*
 * tests/bench/bench_fabric.c — raw one-sided write throughput of the fabric layer, per provider,
 * against a fab_peer process it starts itself:
 *
 *   bench_fabric [--provider P]... [--iters N] [--depth D] [--busy]
 *
 * For each provider: writes of 128 B and 64 KiB with D in flight (FI_DELIVERY_COMPLETE, as
 * the library always does; verbs would use TRANSMIT_COMPLETE), printed as µs per transfer and
 * MB/s like fabtests' fi_rma_bw; then a pingpong of 64-byte control messages (µs per round
 * trip). --busy makes both sides busy-poll (fabtests polls too). Needs TW_BUILD_ROOT or to be
 * run from the build tree (it looks for tests/integration/fab_peer).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "fab_events.h"
#include "proc.h"

static struct fab_rec R;

struct bop {
	struct tw_op op;
	int status;
};

static unsigned done, failed;

static void bop_cb(struct tw_op *op, int status)
{
	done++;
	if (status)
		failed++;
}

static double run_writes(struct tw_chan *ch, struct tw_mr *mr, void *src, const struct tw_rkey *rk,
			 size_t size, unsigned iters, unsigned depth)
{
	struct bop *ops = calloc(depth, sizeof(*ops));
	unsigned posted = 0;
	uint64_t t0;

	done = failed = 0;
	for (unsigned i = 0; i < depth; i++)
		ops[i].op.cb = bop_cb;
	t0 = tw_now_ns();
	/* Slot i is reused once its previous write completed: keep `depth` in flight. */
	while (done < iters) {
		while (posted < iters && posted - done < depth) {
			struct bop *b = &ops[posted % depth];
			uint64_t off = ((uint64_t)posted * size) % (rk->len - size);
			int rc = tw__chan_write(ch, &b->op, src, size, mr, rk, off);
			if (rc < 0) {
				fprintf(stderr, "write: %s\n", tw_strerror(rc));
				goto fail;
			}
			posted++;
		}
		tw__fab_progress(R.fab, 0);
		if (tw__chan_is_lost(ch) && done < iters) {
			fprintf(stderr, "channel lost\n");
			goto fail;
		}
	}
	double us = (double)(tw_now_ns() - t0) / 1000.0;
	free(ops);
	if (failed)
		fprintf(stderr, "%u writes failed\n", failed);
	return us;
fail:
	/* The ops array must outlive every posted op: drain them first (a loss completed them
	 * already; otherwise wait until they complete or time out). */
	while (done < posted)
		tw__fab_progress(R.fab, 100);
	free(ops);
	return -1;
}

static double run_pingpong(struct tw_chan *ch, unsigned iters)
{
	char m[64];
	uint64_t t0;

	memset(m, 'x', sizeof(m));
	m[0] = 'P';
	t0 = tw_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int before = R.recvs;
		if (tw__chan_send(ch, m, sizeof(m)) < 0)
			return -1;
		while (R.recvs == before) {
			tw__fab_progress(R.fab, 0);
			if (tw__chan_is_lost(ch))
				return -1;
		}
	}
	return (double)(tw_now_ns() - t0) / 1000.0 / iters;
}

static int bench(const char *prov, unsigned iters, unsigned depth, bool busy)
{
	static char a_listen[] = "--listen", a_prov[] = "--provider", a_busy[] = "--busy-poll";
	struct tw_fab_config cfg;
	struct tw_fab_events ev = fab_rec_events(&R);
	char path[4096], line[256], pv[64];
	char *argv[] = {path, a_listen, a_prov, pv, busy ? a_busy : NULL, NULL};
	struct proc *p;
	struct tw_chan *ch;
	struct tw_rkey rk;
	struct tw_mr *mr;
	size_t len = 1 << 20;
	void *src;
	int rc;

	snprintf(pv, sizeof(pv), "%s", prov);
	if (proc_find_tool("tests/integration/fab_peer", path, sizeof(path)) < 0) {
		fprintf(stderr, "fab_peer not found: set TW_BUILD_ROOT to the build directory\n");
		return 1;
	}
	tw__fab_config_init(&cfg);
	cfg.provider = prov;
	cfg.busy_poll = busy;
	rc = tw__fab_open(&cfg, &ev, &R.fab);
	if (rc < 0) {
		printf("%-8s unavailable: %s\n", prov, tw__fab_errmsg(NULL));
		return 0;
	}
	p = proc_spawn(argv, NULL);
	if (!p || proc_wait_line(p, "ready ", line, sizeof(line), 10000) < 0) {
		fprintf(stderr, "peer did not start\n");
		proc_free(p);
		tw__fab_close(R.fab);
		return 1;
	}
	rc = tw__fab_connect(R.fab, line + 6, &ch);
	if (rc < 0) {
		fprintf(stderr, "connect: %s\n", tw__fab_errmsg(R.fab));
		proc_free(p);
		tw__fab_close(R.fab);
		return 1;
	}
	R.recvs = 0;
	if (!fab_peer_rkey(&R, 0, &rk, 10000)) {
		fprintf(stderr, "no RKEY from the peer\n");
		proc_free(p);
		tw__fab_close(R.fab);
		return 1;
	}
	src = tw__fab_alloc(len);
	memset(src, 0xab, len);
	tw__mr_reg(R.fab, src, len, TW_MR_WRITE_SRC, &mr);

	static const size_t sizes[] = {128, 65536};
	for (size_t i = 0; i < 2; i++) {
		unsigned n = sizes[i] == 128 ? iters : iters / 10;
		if (strcmp(prov, "sockets") == 0) /* ~100 µs per write here: keep it short */
			n /= 4;
		run_writes(ch, mr, src, &rk, sizes[i], n / 10 + 1, depth); /* warm-up */
		double us = run_writes(ch, mr, src, &rk, sizes[i], n, depth);
		if (us > 0)
			printf("%-8s write %6zu B  depth %3u  %8u xfers  %9.2f us/xfer  %9.1f MB/s\n", prov,
			       sizes[i], depth, n, us / n, (double)sizes[i] * n / us);
	}
	double rtt = run_pingpong(ch, strcmp(prov, "sockets") ? 5000 : 1000);
	if (rtt > 0)
		printf("%-8s pingpong 64 B control message        %9.2f us/round trip\n", prov, rtt);
	struct tw_fab_stats st;
	tw__fab_get_stats(R.fab, &st);
	printf("%-8s stats: %" PRIu64 " writes, %" PRIu64 " cq polls, %" PRIu64 " entries, %" PRIu64
	       " eagain, %" PRIu64 " errors\n",
	       prov, st.writes, st.cq_polls, st.cq_entries, st.eagain_retries, st.errors);
	fflush(stdout);
	tw__chan_close(ch);
	tw__mr_close(mr);
	tw__fab_free(src, len);
	tw__fab_close(R.fab);
	proc_kill(p, SIGTERM);
	proc_wait(p, 5000);
	proc_free(p);
	return 0;
}

int main(int argc, char **argv)
{
	const char *provs[16];
	int nprov = 0;
	unsigned iters = 20000, depth = 64;
	bool busy = false;

	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--provider") && i + 1 < argc && nprov < 16)
			provs[nprov++] = argv[++i];
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--depth") && i + 1 < argc)
			depth = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--busy"))
			busy = true;
		else {
			fprintf(stderr, "usage: bench_fabric [--provider P]... [--iters N] [--depth D] [--busy]\n");
			return 2;
		}
	}
	if (!nprov) {
		provs[nprov++] = "tcp";
		provs[nprov++] = "sockets";
		provs[nprov++] = "shm";
	}
	if (depth == 0)
		depth = 1;
	printf("# bench_fabric: DC writes (fi_writemsg FI_DELIVERY_COMPLETE), %s\n",
	       busy ? "busy polling" : "blocking waits");
	for (int i = 0; i < nprov; i++)
		if (bench(provs[i], iters, depth, busy))
			return 1;
	return 0;
}
