/*
 * tests/integration/ctx_e2e.c — many logs on one context (tailwind/context.h) over a real
 * provider (argv[1]: tcp, sockets, shm), against local twd processes.
 *
 *   many: three twd's, 64 logs (r = 3) on one context, appends interleaved across the logs;
 *         the context holds one channel per twd and the process no more threads than with one
 *         log (and at most one more than with none: the library's populator, which starts
 *         with the first segment); every log's acknowledged objects are recovered exactly, in order (each
 *         log's objects are numbered apart: a write that reached another log's segment shows).
 *   kill: four twd's (r = 3, one spare), 64 logs; one twd holding replicas of the open
 *         segments is SIGKILLed while appends are in flight: every log fails over on its own
 *         and loses nothing acknowledged (recovery over the three survivors).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/context.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define NLOGS 64
#define SEG (64u * 1024u)
#define PER_LOG 1500 /* objects per log and phase (~2.3 segments) */

struct log {
	struct tw_primary *p;
	uint64_t id;
	uint64_t appended;
	struct tlog_acks a;
};

/* Object i of log l: numbered from l << 40, so every log's objects are distinct. */
static uint64_t seq_of(const struct log *l, uint64_t i)
{
	return (l->id << 40) | i;
}

static int threads_now(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* Open the NLOGS logs; *th_first (if not NULL): the process's threads once the first is open. */
static void open_all(struct tw_ctx *ctx, struct log *logs, uint64_t base, int *th_first)
{
	struct tw_primary_config cfg;
	char err[1024];
	unsigned ok_n = 0;

	for (unsigned i = 0; i < NLOGS; i++) {
		int rc;

		memset(&logs[i], 0, sizeof(logs[i]));
		logs[i].id = base + i;
		tw_primary_config_init(&cfg);
		cfg.log_id = logs[i].id;
		cfg.segment_size = SEG;
		cfg.replicas = 3;
		cfg.rerep_rate = 0;
		cfg.mode = TW_PRIMARY_ASYNC;
		rc = tw_primary_open_on(ctx, &cfg, &logs[i].p, err, sizeof(err));
		if (rc)
			tap_diag("log %" PRIu64 ": %s: %s", logs[i].id, tw_strerror(rc), err);
		else
			ok_n++;
		if (i == 0 && th_first)
			*th_first = threads_now();
	}
	TAP_REQUIRE(ok_n == NLOGS, "%u of %u logs open", ok_n, NLOGS);
}

/* Append n objects to every log, 50 at a time per log in turn. */
static void append_all(struct log *logs, unsigned n)
{
	uint8_t buf[RT_OBJ];

	for (unsigned done = 0; done < n; done += 50) {
		for (unsigned i = 0; i < NLOGS; i++) {
			struct log *l = &logs[i];

			for (unsigned k = 0; k < 50 && done + k < n; k++) {
				rt_fill(buf, seq_of(l, l->appended));
				if (!tw_primary_append_async(l->p, buf, RT_OBJ, tlog_ack_cb, &l->a,
							     NULL))
					l->appended++;
			}
		}
	}
}

static unsigned flush_all(struct log *logs, const char *what)
{
	unsigned good = 0;

	for (unsigned i = 0; i < NLOGS; i++) {
		int rc = tw_primary_flush(logs[i].p);

		if (rc == 0 && logs[i].a.ok == logs[i].appended && !logs[i].a.errors)
			good++;
		else
			tap_diag("%s: log %" PRIu64 ": flush %s, %" PRIu64 " of %" PRIu64 " acked, "
				 "%" PRIu64 " failed: %s", what, logs[i].id, tw_strerror(rc),
				 logs[i].a.ok, logs[i].appended, logs[i].a.errors,
				 tw_primary_errmsg(logs[i].p));
	}
	return good;
}

static unsigned close_all(struct log *logs)
{
	unsigned good = 0;

	for (unsigned i = 0; i < NLOGS; i++) {
		int rc = tw_primary_close(logs[i].p);

		logs[i].p = NULL;
		if (rc == 0)
			good++;
		else
			tap_diag("log %" PRIu64 ": close: %s", logs[i].id, tw_strerror(rc));
	}
	return good;
}

/* Recover every log over `c`'s addresses but `skip` (a killed twd: on shm a connect to a dead
 * process waits for the connect timeout, 64 times): exactly its acknowledged objects, in order. */
static unsigned recover_all(struct rt_cluster *c, struct log *logs, unsigned skip)
{
	const char *addrs[RT_MAX_BK];
	unsigned n = 0;

	unsigned good = 0;

	for (unsigned i = 0; i < c->n; i++)
		if (i != skip)
			addrs[n++] = c->addrs[i];
	for (unsigned i = 0; i < NLOGS; i++) {
		struct tw_recover_config rc;
		struct tw_recover_result res;
		struct rt_check k;
		char err[512];
		int r;

		tlog_recover_config(&rc, c->prov, addrs, n, logs[i].id);
		memset(&k, 0, sizeof(k));
		k.next = seq_of(&logs[i], 0);
		r = tw_recover(&rc, rt_check_cb, &k, &res, err, sizeof(err));
		if (r == 0 && k.bad == 0 && k.next - seq_of(&logs[i], 0) == logs[i].a.ok)
			good++;
		else
			tap_diag("log %" PRIu64 ": recover %s%s%s, %" PRIu64 " objects of %" PRIu64
				 " acked, %" PRIu64 " bad%s%s", logs[i].id, tw_strerror(r),
				 r ? ": " : "", r ? err : "", k.next - seq_of(&logs[i], 0),
				 logs[i].a.ok, k.bad, k.bad ? ": " : "", k.first_bad);
	}
	return good;
}

static struct tw_ctx *ctx_on(struct rt_cluster *c)
{
	struct tw_ctx_config cc;
	struct tw_ctx *ctx = NULL;
	char err[1024];
	int rc;

	tw_ctx_config_init(&cc);
	cc.provider = c->prov;
	cc.backups = c->addrs;
	cc.n_backups = c->n;
	/* shm notices a dead peer only by the operation timeout: keep the kill short there.
	 * Elsewhere the default (a loss is a connection reset), which also leaves room for
	 * 64 logs' writes queued on one channel under ASan. */
	if (!strcmp(c->prov, "shm"))
		cc.op_timeout_ms = 2000;
	rc = tw_ctx_open(&cc, &ctx, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "context open on %u twd's: %s", c->n, rc ? err : "ok");
	return ctx;
}

static void test_many(const char *prov)
{
	static struct log logs[NLOGS];
	struct rt_cluster c;
	struct tw_ctx_stats cs;
	struct tw_ctx *ctx;
	int th0, th1, th_one = -1;

	rt_start(&c, prov, 3, "64K", "512");
	th0 = threads_now();
	ctx = ctx_on(&c);
	th1 = threads_now();
	open_all(ctx, logs, 1000, &th_one);
	tw_ctx_get_stats(ctx, &cs);
	ok(cs.logs == NLOGS && cs.channels == 3, "%s: %" PRIu64 " logs share %" PRIu64
	   " channels (one per twd)", prov, cs.logs, cs.channels);
	ok(th_one >= th1 && th_one <= th1 + 1, "%s: the first log adds at most one thread, the "
	   "library's populator (%d threads with it, %d with the context alone, %d before)", prov,
	   th_one, th1, th0);
	is_int(threads_now(), th_one, "%s: %d threads with %d logs open, as with one", prov,
	       threads_now(), NLOGS);
	append_all(logs, PER_LOG);
	append_all(logs, PER_LOG);
	is_int((int)flush_all(logs, "many"), NLOGS, "%s: every log acknowledged its %u objects",
	       prov, 2 * PER_LOG);
	is_int((int)close_all(logs), NLOGS, "%s: every log closed", prov);
	is_int(tw_ctx_close(ctx), 0, "%s: context closed", prov);
	is_int((int)recover_all(&c, logs, RT_MAX_BK), NLOGS, "%s: recovery returns exactly each "
	       "log's acknowledged objects", prov);
	rt_stop(&c);
}

static void test_kill(const char *prov)
{
	static struct log logs[NLOGS];
	struct rt_cluster c;
	struct tw_primary_stats st;
	struct tw_ctx *ctx;
	const char *addr;
	unsigned victim = RT_MAX_BK, failed_over = 0;
	int vpid;

	rt_start(&c, prov, 4, "64K", "512");
	ctx = ctx_on(&c);
	open_all(ctx, logs, 2000, NULL);
	append_all(logs, PER_LOG);
	/* Mid-stream: appends of the first phase may still be in flight. */
	addr = tw_primary_replica_addr(logs[0].p, 1);
	for (unsigned i = 0; addr && i < c.n; i++)
		if (!strcmp(c.addrs[i], addr))
			victim = i;
	TAP_REQUIRE(victim < c.n, "victim twd (%s)", addr ? addr : "?");
	vpid = (int)proc_pid(c.p[victim]);
	proc_kill(c.p[victim], SIGKILL);
	tap_diag("%s: SIGKILL twd %u (%s), a replica of log %" PRIu64 "'s open segment", prov,
		 victim, addr, logs[0].id);
	append_all(logs, PER_LOG);
	is_int((int)flush_all(logs, "kill"), NLOGS, "%s: every log goes on after the kill and "
	       "acknowledged its %u objects", prov, 2 * PER_LOG);
	for (unsigned i = 0; i < NLOGS; i++) {
		tw_primary_get_stats(logs[i].p, &st);
		failed_over += st.backups_lost >= 1;
	}
	is_int((int)failed_over, NLOGS, "%s: every log saw the loss (handled on its own)", prov);
	is_int((int)close_all(logs), NLOGS, "%s: every log closed (closed segments re-replicated)",
	       prov);
	is_int(tw_ctx_close(ctx), 0, "%s: context closed", prov);
	proc_wait(c.p[victim], 20000);
	proc_free(c.p[victim]);
	c.p[victim] = NULL;
	if (!strcmp(prov, "shm"))
		rt_shm_cleanup(vpid);
	is_int((int)recover_all(&c, logs, victim), NLOGS, "%s: recovery over the three surviving "
	       "twd's returns every acknowledged object of every log", prov);
	rt_stop(&c);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	const char *what = argc > 2 ? argv[2] : "all";

	if (!strcmp(what, "all") || !strcmp(what, "many"))
		test_many(prov);
	if (!strcmp(what, "all") || !strcmp(what, "kill"))
		test_kill(prov);
	proc_cleanup_all();
	tap_done_testing();
	return tap_exit();
}
