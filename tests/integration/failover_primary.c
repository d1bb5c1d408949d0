/*
 * tests/integration/failover_primary.c — the primary of the failover and partition tests: opens
 * log LOG on the given backups with r = REPLICAS (more backups than r: spares), then appends
 * numbered objects (recover_util.h) with tw_primary_append_async until COUNT are acknowledged or
 * it is killed. Everything it reports goes to stdout with one write(2) per line (nothing is lost
 * in a stdio buffer at SIGKILL):
 *   ready
 *   replicas SEG ADDR...    the replicas of the open segment, whenever the acked segment changes
 *   acked N                 object N acknowledged (in order)
 *   lost N                  the primary counts N lost backups (tw_primary_stats.backups_lost)
 *   resumed US FAILOVERS REREPS BYTES   a failover ended: last suspension in µs, counters
 *   failed ERR MESSAGE      an append failed (then it stops appending, waits, exits 1)
 *   done                    COUNT acknowledged; then it closes the log and exits 0
 *
 * usage: failover_primary PROVIDER LOG_ID SEGMENT_SIZE REPLICAS COUNT OP_TIMEOUT_MS ADDR...
 * $FAILOVER_EPOCH sets the epoch. $FAILOVER_HOLD=1: after "failed", keep running (and answer
 * nothing) until killed, so a test can inspect it. $FAILOVER_SYNC=1: TW_PRIMARY_SYNC mode, one
 * blocking tw_primary_append at a time (one write in flight), same lines.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "recover_util.h"
#include "say.h"

static struct tw_primary *prim;
static volatile int failed;
static uint64_t last_seg = UINT64_MAX, last_lost, last_fo;

/* Runs on the primary's progress thread (async mode), in log order; after each append in
 * sync mode. */
static void on_ack(void *arg, int status, uint64_t lsn)
{
	struct tw_primary_stats st;
	char line[600];
	int n;

	if (status) {
		if (!failed)
			sayf("failed %d %s\n", status, tw_primary_errmsg(prim));
		failed = 1;
		return;
	}
	if (lsn >> 32 != last_seg) {
		last_seg = lsn >> 32;
		n = snprintf(line, sizeof(line), "replicas %" PRIu64, last_seg);
		for (unsigned i = 0; tw_primary_replica_addr(prim, i) && n < 400; i++)
			n += snprintf(line + n, sizeof(line) - (size_t)n, " %s",
				      tw_primary_replica_addr(prim, i));
		line[n++] = '\n';
		say(line, (size_t)n);
	}
	sayf("acked %" PRIuPTR "\n", (uintptr_t)arg);
	tw_primary_get_stats(prim, &st);
	if (st.backups_lost != last_lost) {
		last_lost = st.backups_lost;
		sayf("lost %" PRIu64 "\n", st.backups_lost);
	}
	if (st.failovers != last_fo) {
		last_fo = st.failovers;
		sayf("resumed %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		     st.suspended_last_ns / 1000, st.failovers, st.rereplications, st.rerep_bytes);
	}
}

int main(int argc, char **argv)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	uint8_t obj[RT_OBJ];
	uint64_t count;
	int rc;

	if (argc < 8) {
		fprintf(stderr, "usage: failover_primary PROVIDER LOG_ID SEGMENT_SIZE REPLICAS COUNT "
			"OP_TIMEOUT_MS ADDR...\n");
		return 2;
	}
	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	tc.provider = argv[1];
	cfg.log_id = strtoull(argv[2], NULL, 0);
	cfg.segment_size = strtoull(argv[3], NULL, 0);
	cfg.replicas = (unsigned)strtoul(argv[4], NULL, 0);
	count = strtoull(argv[5], NULL, 0);
	tc.op_timeout_ms = (unsigned)strtoul(argv[6], NULL, 0);
	tc.rpc_timeout_ms = tc.op_timeout_ms;
	tc.backups = (const char *const *)&argv[7];
	tc.n_backups = (size_t)(argc - 7);
	cfg.mode = getenv("FAILOVER_SYNC") ? TW_PRIMARY_SYNC : TW_PRIMARY_ASYNC;
	if (getenv("FAILOVER_EPOCH"))
		cfg.epoch = strtoull(getenv("FAILOVER_EPOCH"), NULL, 0);
	prim = say_opened(&tc, &cfg, "failover_primary");
	for (uint64_t seq = 0; seq < count && !failed; seq++) {
		rt_fill(obj, seq);
		if (cfg.mode == TW_PRIMARY_SYNC) {
			uint64_t lsn = 0;

			rc = tw_primary_append(prim, obj, RT_OBJ, &lsn);
			if (rc == 0)
				on_ack((void *)(uintptr_t)seq, 0, lsn);
		} else {
			rc = tw_primary_append_async(prim, obj, RT_OBJ, on_ack, (void *)(uintptr_t)seq,
						     NULL);
		}
		if (rc) {
			if (!failed)
				sayf("failed %d %s\n", rc, tw_primary_errmsg(prim));
			failed = 1;
			break;
		}
	}
	rc = tw_primary_flush(prim);
	if (rc == 0 && !failed)
		say("done\n", 5);
	if ((failed || rc) && getenv("FAILOVER_HOLD")) {
		for (;;)
			pause();
	}
	tw_primary_close(prim);
	return failed || rc ? 1 : 0;
}
