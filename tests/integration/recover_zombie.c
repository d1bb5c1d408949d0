/*
 * tests/integration/recover_zombie.c — a zombie primary (argv[1]: tcp or sockets). A primary in
 * this process appends N objects to three twd's; then the log is fenced (tw_admin_fence, as a
 * recovery would) while the primary is still alive. The primary keeps appending: every append
 * must fail (the backups closed the registrations of the log's open buffers and the old
 * primary's connections). tw_recover() then returns exactly the N objects. (Not on shm: its fast
 * path checks no keys; see docs/recovery.md.)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define N 1500
#define LOG 0x7000

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct rt_cluster cl;
	struct tw_ctx_config tc;
	struct tw_primary_config pc;
	struct tw_primary *p;
	struct tw_recover_config rc_cfg;
	struct tw_recover_result res;
	struct rt_check chk;
	uint8_t obj[RT_OBJ];
	char err[512];
	uint64_t epoch = 0;
	unsigned fenced = 0, failed = 0;
	int rc;

	tap_plan(5);
	rt_start(&cl, prov, 3, "64K", "16");
	tlog_transport(&tc, prov, cl.addrs, 3);
	tc.op_timeout_ms = 5000;
	tc.rpc_timeout_ms = 5000;
	tw_primary_config_init(&pc);
	pc.log_id = LOG;
	pc.segment_size = 65536;
	rc = tw_primary_open(&tc, &pc, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "tw_primary_open: %s: %s", tw_strerror(rc), err);
	for (uint64_t i = 0; i < N; i++) {
		rt_fill(obj, i);
		rc = tw_primary_append_async(p, obj, RT_OBJ, NULL, NULL, NULL);
		TAP_REQUIRE(rc == 0, "append %" PRIu64 ": %s", i, tw_strerror(rc));
	}
	rc = tw_primary_flush(p);
	TAP_REQUIRE(rc == 0, "flush: %s", tw_strerror(rc));

	tlog_recover_config(&rc_cfg, prov, cl.addrs, 3, LOG);
	rc = tw_admin_fence(&rc_cfg, &epoch, &fenced, err, sizeof(err));
	ok(rc == 0 && fenced == 3, "log fenced at epoch %" PRIu64 " on %u backups while its "
	   "primary still runs", epoch, fenced);

	for (uint64_t i = N; i < N + 20; i++) {
		rt_fill(obj, i);
		if (tw_primary_append(p, obj, RT_OBJ, NULL) != 0)
			failed++;
	}
	is_int(failed, 20, "every append of the zombie primary fails after the fence");
	tap_diag("zombie's error: %s", tw_primary_errmsg(p));

	memset(&chk, 0, sizeof(chk));
	rc = tw_recover(&rc_cfg, rt_check_cb, &chk, &res, err, sizeof(err));
	ok(rc == 0 && chk.bad == 0 && chk.next == N,
	   "recovery returns exactly the %d objects appended before the fence (got %" PRIu64
	   ")%s%s", N, chk.next, chk.bad ? ": " : "", chk.bad ? chk.first_bad : "");
	ok(res.epoch > epoch, "recovery fenced again with a newer epoch (%" PRIu64 ")", res.epoch);
	ok(tw_primary_close(p) != 0, "the zombie's close fails too");
	rt_stop(&cl);
	return tap_exit();
}
