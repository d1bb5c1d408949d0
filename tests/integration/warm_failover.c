/*
 * tests/integration/warm_failover.c — failover to warm standbys on a long log (docs/readers.md,
 * "Warm standby"; argv[1]: the provider). A real ZooKeeper (2 s sessions), 3 twd's, r = 3:
 *   1. build: this process appends N entries of 32 bytes (asynchronous appends, 8 MiB
 *      segments) and keeps the log open. N = argv[2], else 1,000,000; TW_LONG=1: 10,000,000;
 *      under a sanitizer at most 100,000; TW_WARM_ENTRIES=N overrides;
 *   2. a cold `twctl standby` waits; the builder closes; the standby takes the log over,
 *      replaying all N entries (the reference for a cold takeover), and appends without end;
 *   3. rounds (10; 3 under a sanitizer): a fresh `twctl standby --warm` reads the log from its
 *      oldest entry; once it holds every entry the owner had acknowledged when its watch was
 *      set (its `warm ... entries=` lines: ready, no sleep) the owner is SIGKILLed mid-stream;
 *      the warm standby takes over, replaying only the tail its reader had not returned, and
 *      appends: the next round's owner. Per round: SIGKILL to the new owner's first
 *      acknowledged append, and its phases;
 *   4. a cold standby's failover on the same log, for comparison (it replays everything);
 *   5. the last owner is SIGKILLed; a recovery holds entries 0, 1, 2 ... in order, every one
 *      acknowledged to any owner included.
 * The times are printed against the session timeout + 0.3 s, not asserted: the machine is
 * shared. Asserted: nothing acknowledged lost (at every takeover and at the end), each warm
 * takeover replays only a tail (less than a tenth of the log), epochs increase.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "child.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "zkserver.h"

#define NB 3
#define ESZ 32 /* bytes per entry: an 8-byte sequence number, then its low byte repeated */
#define SESSION_MS 2000
#define SESSION_STR "2000"
#define MAX_ROUNDS 16

static const char *prov;
static char twctl[512];
static struct rt_cluster cl;
static struct zkserver zk;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Entry `seq` as twctl standby --append generates it. */
static void fill(uint8_t *b, uint64_t seq)
{
	memset(b, (int)(seq & 0xff), ESZ);
	for (int k = 0; k < 8; k++)
		b[k] = (uint8_t)(seq >> (8 * k));
}

struct took {
	uint64_t epoch, gone_rt, entries, warm_entries, warm_lsn;
	unsigned backups, lost_races;
	int watched;
	double claim, connect, fence, recover, open, takeover, warm_stop;
};

static int parse_took(const char *line, struct took *t)
{
	const char *w;

	memset(t, 0, sizeof(*t));
	if (sscanf(line, "took-over log=%*s epoch=%" SCNu64 " watched=%d lost_races=%u "
		   "gone_realtime_ns=%" SCNu64 " claim_ms=%lf connect_ms=%lf fence_ms=%lf "
		   "recover_ms=%lf entries=%" SCNu64 " backups=%u open_ms=%lf takeover_ms=%lf",
		   &t->epoch, &t->watched, &t->lost_races, &t->gone_rt, &t->claim, &t->connect,
		   &t->fence, &t->recover, &t->entries, &t->backups, &t->open, &t->takeover) != 12)
		return -1;
	w = strstr(line, " warm_entries=");
	if (w && sscanf(w, " warm_entries=%" SCNu64 " warm_lsn=%" SCNx64 " warm_stop_ms=%lf",
			&t->warm_entries, &t->warm_lsn, &t->warm_stop) != 3)
		return -1;
	return 0;
}

/* A twctl standby process and what it printed so far. */
struct node {
	struct proc *p;
	int pid;
	bool warm;
	uint64_t acked;   /* highest "acked N": entries in the log when it was acknowledged */
	uint64_t held;    /* highest "warm ... entries=N": entries its reader handed over */
	bool watching, took, first, eof;
	struct took t;
	double first_ms;  /* its first append alone */
	uint64_t first_rt; /* CLOCK_REALTIME when its first append was acknowledged */
};

static void on_line(struct node *n, const char *line)
{
	uint64_t v;

	if (sscanf(line, "acked %" SCNu64, &v) == 1) {
		if (v > n->acked)
			n->acked = v;
	} else if (!strncmp(line, "warm ", 5)) {
		const char *e = strstr(line, " entries=");

		if (e && sscanf(e, " entries=%" SCNu64, &v) == 1 && v > n->held)
			n->held = v;
	} else if (!strncmp(line, "watching ", 9)) {
		n->watching = true;
	} else if (!strncmp(line, "took-over ", 10)) {
		n->took = parse_took(line, &n->t) == 0;
		if (!n->took)
			tap_diag("standby %d: unexpected line: %s", n->pid, line);
	} else if (!strncmp(line, "first_append_ms=", 16)) {
		n->first = sscanf(line, "first_append_ms=%lf acked_realtime_ns=%" SCNu64,
				  &n->first_ms, &n->first_rt) == 2;
	} else if (strncmp(line, "standby: ", 9)) {
		tap_diag("standby %d: %s", n->pid, line);
	}
}

/* What n printed: up to timeout_ms for a first line, then whatever else is there already.
 * False once its output ended. */
static bool pump(struct node *n, int timeout_ms)
{
	char line[1024];
	int rc;

	if (!n->p || n->eof)
		return false;
	rc = proc_wait_line(n->p, NULL, line, sizeof(line), timeout_ms);
	while (rc >= 0) {
		on_line(n, line);
		rc = proc_wait_line(n->p, NULL, line, sizeof(line), 0);
	}
	if (rc == -EPIPE)
		n->eof = true;
	return !n->eof;
}

static bool is_watching(const struct node *n, uint64_t arg)
{
	(void)arg;
	return n->watching;
}

static bool holds(const struct node *n, uint64_t arg)
{
	return n->held >= arg;
}

static bool acked_past(const struct node *n, uint64_t arg)
{
	return n->acked >= arg;
}

static bool appended(const struct node *n, uint64_t arg)
{
	(void)arg;
	return n->took && n->first;
}

/* Read w (20 ms at a time) and o (without waiting: a writer blocked on a full pipe would stop
 * appending) until done(w, arg), w's output ends, or timeout_ms. */
static bool wait_for(struct node *w, struct node *o, bool (*done)(const struct node *, uint64_t),
		     uint64_t arg, int timeout_ms)
{
	uint64_t end = mono_ns() + (uint64_t)timeout_ms * 1000000u;

	while (!done(w, arg)) {
		if (!pump(w, 20) && !done(w, arg))
			return false;
		if (o)
			pump(o, 0);
		if (mono_ns() > end)
			return false;
	}
	return true;
}

/* twctl -c URL -p PROV -t 2000 standby LOG --append (no end) --size 32 [--warm] */
static struct node standby(uint64_t log, bool warm)
{
	char logs[32];
	char *args[] = { twctl, (char *)"-c", zk.url, (char *)"-p", (char *)prov, (char *)"-t",
			 (char *)SESSION_STR, (char *)"standby", logs, (char *)"--append",
			 (char *)"1000000000000", (char *)"--size", (char *)"32",
			 warm ? (char *)"--warm" : NULL, NULL };
	struct node nd = { .warm = warm };

	snprintf(logs, sizeof(logs), "%#" PRIx64, log);
	nd.p = proc_spawn_opts(args, (char *const[]){ (char *)"TW_LOG_LEVEL=warn", NULL }, NULL);
	TAP_REQUIRE(nd.p, "spawn twctl standby");
	nd.pid = (int)proc_pid(nd.p);
	return nd;
}

/* SIGKILL n (at *kill_rt, CLOCK_REALTIME), read what it printed before it died, reap it. */
static void kill_node(struct node *n, uint64_t *kill_rt)
{
	if (kill_rt)
		*kill_rt = realtime_ns();
	proc_kill(n->p, SIGKILL);
	while (pump(n, 10000))
		;
	proc_wait(n->p, 10000);
	proc_free(n->p);
	if (!strcmp(prov, "shm"))
		rt_shm_cleanup(n->pid);
	n->p = NULL;
}

/* The log: N entries appended by this process (asynchronously), the owner kept. */
static struct tw_primary *build(uint64_t log, uint64_t n)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	uint8_t e[ESZ];
	uint64_t t0 = mono_ns(), lsn = 0, seg = UINT64_MAX, segs = 0;
	char err[1024];
	int rc;

	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	cfg.log_id = log;
	tc.coordinator = zk.url;
	tc.provider = prov;
	cfg.replicas = 3;
	cfg.mode = TW_PRIMARY_ASYNC;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open the log: %s: %s", tw_strerror(rc), err);
	for (uint64_t i = 0; i < n; i++) {
		fill(e, i);
		rc = tw_primary_append_async(p, e, ESZ, NULL, NULL, &lsn);
		TAP_REQUIRE(rc == 0, "append %" PRIu64 ": %s: %s", i, tw_strerror(rc),
			    tw_primary_errmsg(p));
		if (lsn >> 32 != seg) { /* a rollover: the closed segments leave our memory */
			seg = lsn >> 32;
			segs++;
			tw_primary_unload(p, (uint32_t)seg);
		}
	}
	rc = tw_primary_flush(p);
	TAP_REQUIRE(rc == 0, "flush: %s: %s", tw_strerror(rc), tw_primary_errmsg(p));
	tap_diag("built %" PRIu64 " entries of %d bytes in %.1f s (%.0f entries/s; asynchronous "
		 "appends, r = 3, %" PRIu64 " segments of 8 MiB)", n, ESZ,
		 (double)(mono_ns() - t0) / 1e9, (double)n * 1e9 / (double)(mono_ns() - t0),
		 segs);
	return p;
}

/* The final recovery's view: entries 0, 1, 2 ... each as generated. */
struct seqcheck {
	uint64_t next, bad;
	char first_bad[200];
};

static int check_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct seqcheck *c = arg;
	uint8_t want[ESZ];

	fill(want, c->next);
	if ((e->len != ESZ || memcmp(e->data, want, ESZ)) && !c->bad++) {
		uint64_t seq = 0;

		memcpy(&seq, e->data, e->len >= 8 ? 8 : e->len);
		snprintf(c->first_bad, sizeof(c->first_bad), "entry %" PRIu64 " (lsn %#" PRIx64
			 ", %u bytes) carries %" PRIu64, c->next, e->lsn, e->len, seq);
	}
	c->next++;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* "min / median / max" of v[0..n) into buf. */
static const char *spread(const double *v, int n, char *buf, size_t len)
{
	double s[MAX_ROUNDS];

	if (n <= 0) {
		snprintf(buf, len, "-");
		return buf;
	}
	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	snprintf(buf, len, "%.1f / %.1f / %.1f", s[0], n % 2 ? s[n / 2] : (s[n / 2 - 1] +
		 s[n / 2]) / 2, s[n - 1]);
	return buf;
}

enum { F_TOTAL, F_DETECT, F_STOP, F_CLAIM, F_CONNECT, F_FENCE, F_RECOVER, F_TAIL, F_OPEN,
       F_FIRST, F_READY, F_FIELDS };

static const char *const field_name[F_FIELDS] = {
	"SIGKILL -> first append (ms)", "detection: SIGKILL -> watch fired (ms)",
	"stop the reader (ms)", "claim (ms)", "connect (ms)", "fence (ms)", "recover (ms)",
	"entries replayed", "open (ms)", "first append (ms)", "ready: spawn -> caught up (s)"
};

int main(int argc, char **argv)
{
	char *twd_args[] = { (char *)"--coordinator", zk.url, NULL };
	uint64_t log = 0x3b00000000000000ull | ((uint64_t)getpid() << 8), n = 1000000;
	int rounds = tap_sanitizer() ? 3 : 10, good = 0, within = 0;
	double f[F_FIELDS][MAX_ROUNDS];
	struct tw_primary *builder;
	struct node o, c;
	const char *env = getenv("TW_WARM_ENTRIES");
	uint64_t last_epoch, kill_rt, t0;
	char buf[128];
	bool took;

	prov = argc > 1 ? argv[1] : "tcp";
	if (argc > 2)
		n = strtoull(argv[2], NULL, 0);
	if (tap_long_mode())
		n = 10000000;
	else if (tap_sanitizer() && n > 100000)
		n = 100000;
	if (env && *env)
		n = strtoull(env, NULL, 0);
	zkserver_require();
	child_tool("tools/twctl", twctl, sizeof(twctl));
	/* Detection is the session timeout plus up to one tickTime (ZooKeeper rounds each
	 * expiry up to the next tick): a 100 ms tick, as a deployment that wants fast failover
	 * would use (docs/coordination.md, "How fast a failure is detected"). */
	zkserver_tick_ms = 100;
	zkserver_start(&zk);
	rt_start_with(&cl, NULL, prov, NB, "8M", "8", twd_args);
	{
		char la[128] = "?";
		FILE *lf = fopen("/proc/loadavg", "r");

		if (lf) {
			if (fgets(la, sizeof(la), lf))
				la[strcspn(la, "\n")] = '\0';
			fclose(lf);
		}
		tap_diag("%s: %" PRIu64 " entries, %d warm failovers, ZooKeeper session %d ms; load "
			 "average %s", prov, n, rounds, SESSION_MS, la);
	}

	/* 1, 2: the log, and a cold takeover of all of it. */
	builder = build(log, n);
	o = standby(log, false);
	TAP_REQUIRE(wait_for(&o, NULL, is_watching, 0, 60000), "the first standby watches");
	is_int(tw_primary_close(builder), 0, "the builder closes the log (%" PRIu64 " entries)", n);
	took = wait_for(&o, NULL, appended, 0, 600000);
	ok(took && o.t.entries == n, "a cold standby took the log over and replayed all %" PRIu64
	   " entries (%" PRIu64 "): recover %.0f ms, takeover %.0f ms", n, o.t.entries,
	   o.t.recover, o.t.takeover);
	last_epoch = o.t.epoch;

	/* 3: warm failovers. */
	for (int r = 0; r < rounds; r++) {
		struct node w = standby(log, true);
		uint64_t spawned = mono_ns(), want, acked, tail_bound = n / 10;
		double ready_s, total, detect;
		bool fine;

		TAP_REQUIRE(wait_for(&w, &o, is_watching, 0, 60000), "round %d: the warm standby "
			    "watches", r);
		pump(&o, 0);
		want = o.acked;
		/* Ready: its reader holds everything acknowledged when the watch was set. */
		TAP_REQUIRE(wait_for(&w, &o, holds, want, 600000), "round %d: the warm standby's "
			    "reader reaches %" PRIu64 " entries (%" PRIu64 ")", r, want, w.held);
		ready_s = (double)(mono_ns() - spawned) / 1e9;
		/* Mid-stream: the owner is appending right now. */
		TAP_REQUIRE(wait_for(&o, NULL, acked_past, o.acked + 20, 60000), "round %d: the "
			    "owner appends", r);
		kill_node(&o, &kill_rt);
		acked = o.acked;
		if (!wait_for(&w, NULL, appended, 0, 120000)) {
			ok(0, "round %d: the warm standby took over and appended (took %d)", r, w.took);
			o = w;
			break;
		}
		total = (double)(int64_t)(w.first_rt - kill_rt) / 1e6;
		detect = (double)(int64_t)(w.t.gone_rt - kill_rt) / 1e6;
		fine = w.t.watched && w.t.epoch > last_epoch && w.t.warm_entries >= want &&
		       w.t.warm_entries + w.t.entries >= acked && w.t.entries < tail_bound;
		tap_diag("round %d: ready %.1f s after the spawn (%" PRIu64 " entries); owner acked "
			 "%" PRIu64 ", SIGKILL -> first append %.0f ms (%s the session timeout + "
			 "0.3 s) | detect %.0f, stop reader %.1f, claim %.1f, connect %.1f, fence "
			 "%.1f, recover %.1f (%" PRIu64 " entries replayed from LSN %#" PRIx64 ", %"
			 PRIu64 " read before), open %.1f, first append %.2f ms", r, ready_s, want,
			 acked, total, total <= SESSION_MS + 300 ? "within" : "past", detect,
			 w.t.warm_stop, w.t.claim, w.t.connect, w.t.fence, w.t.recover, w.t.entries,
			 w.t.warm_lsn, w.t.warm_entries, w.t.open, w.first_ms);
		ok(fine, "round %d: epoch %" PRIu64 " > %" PRIu64 "; the reader held %" PRIu64 " >= %"
		   PRIu64 "; read + replayed %" PRIu64 " >= %" PRIu64 " acknowledged; replayed %"
		   PRIu64 " < %" PRIu64 " (a tail only)", r, w.t.epoch, last_epoch,
		   w.t.warm_entries, want, w.t.warm_entries + w.t.entries, acked, w.t.entries,
		   tail_bound);
		f[F_TOTAL][good] = total;
		f[F_DETECT][good] = detect;
		f[F_STOP][good] = w.t.warm_stop;
		f[F_CLAIM][good] = w.t.claim;
		f[F_CONNECT][good] = w.t.connect;
		f[F_FENCE][good] = w.t.fence;
		f[F_RECOVER][good] = w.t.recover;
		f[F_TAIL][good] = (double)w.t.entries;
		f[F_OPEN][good] = w.t.open;
		f[F_FIRST][good] = w.first_ms;
		f[F_READY][good] = ready_s;
		good += fine;
		within += fine && total <= SESSION_MS + 300;
		last_epoch = w.t.epoch;
		o = w;
	}
	is_int(good, rounds, "%d warm failovers on a log of %" PRIu64 "+ entries", rounds, n);
	tap_diag("%s, %" PRIu64 " entries, %d rounds: min / median / max", prov, n, good);
	for (int i = 0; i < F_FIELDS; i++)
		tap_diag("  %-40s %s", field_name[i], spread(f[i], good, buf, sizeof(buf)));
	tap_diag("SIGKILL -> first append within the session timeout + 0.3 s (%d ms): %d of %d",
		 SESSION_MS + 300, within, good);

	/* 4: a cold standby's failover on the same log, for comparison. */
	if (o.p) {
		uint64_t acked;

		c = standby(log, false);
		TAP_REQUIRE(wait_for(&c, &o, is_watching, 0, 60000), "the cold standby watches");
		TAP_REQUIRE(wait_for(&o, NULL, acked_past, o.acked + 20, 60000), "the owner appends");
		kill_node(&o, &kill_rt);
		acked = o.acked;
		took = wait_for(&c, NULL, appended, 0, 600000);
		ok(took && c.t.entries >= acked,
		   "a cold standby took over: replayed %" PRIu64 " >= %" PRIu64 " acknowledged; "
		   "SIGKILL -> first append %.0f ms (detect %.0f, recover %.0f, takeover %.0f)",
		   c.t.entries, acked, (double)(int64_t)(c.first_rt - kill_rt) / 1e6,
		   (double)(int64_t)(c.t.gone_rt - kill_rt) / 1e6, c.t.recover, c.t.takeover);
		o = c;
	}

	/* 5: the last owner dies too; everything acknowledged is in the log, in order. */
	if (o.p) {
		struct tw_recover_config rc_cfg;
		struct tw_recover_result res;
		struct seqcheck chk = { 0 };
		char err[1024] = "";
		int rc;

		pump(&o, 0);
		kill_node(&o, NULL);
		tw_recover_config_init(&rc_cfg);
		rc_cfg.log_id = log;
		rc_cfg.backups = cl.addrs;
		rc_cfg.n_backups = NB;
		rc_cfg.provider = prov;
		t0 = mono_ns();
		rc = tw_recover(&rc_cfg, check_entry, &chk, &res, err, sizeof(err));
		ok(rc == 0 && chk.bad == 0 && chk.next >= o.acked,
		   "the final recovery holds entries 0..%" PRIu64 " in order, every one acknowledged "
		   "(%" PRIu64 ") included (%s%s%s; %.1f s)", chk.next, o.acked, rc ? tw_strerror(rc) :
		   "ok", rc ? err : "", chk.first_bad, (double)(mono_ns() - t0) / 1e9);
	}

	rt_stop(&cl);
	zkserver_stop(&zk);
	tap_done_testing();
	return tap_exit();
}
