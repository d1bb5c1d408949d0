/*
 * tests/integration/standby_zk.c — standbys that take a log over by themselves, on a real
 * ZooKeeper server (argv[1]: tcp or sockets; docs/coordination.md, "Standby"):
 *   - the per-log record: a log written to one segment records exactly its r backups
 *     (twctl -c URL ls-logs), and the next takeover's recovery asks those r, not all NB;
 *   - automatic failover, 10 runs (4 under a sanitizer): a primary process (twctl standby
 *     of a log with no owner: it takes the log at once and appends without end) and a
 *     standby process; the primary is SIGKILLed mid-stream; the standby sees its owner node
 *     go when ZooKeeper expires the dead session, takes over with no human step and appends;
 *     a final recovery through the coordinator holds every entry either acknowledged, in
 *     order. Failover time per phase;
 *   - racing takeovers: 4 standbys wait, the owner is SIGKILLed, exactly one takes over; three
 *     rounds (a new standby joins each round): epochs strictly increasing, nothing
 *     acknowledged lost.
 *   - a standby's bounded wait that ends with the owner in place: -ETIMEDOUT, no error logged;
 *   - spares from the live registry: a primary (async mode) opened on the 3 backups
 *     registered under a second chroot; a 4th twd registers afterwards (zone B); the zone-B
 *     replica's twd is SIGKILLed: the new one (the registry's child watch fired) is the
 *     spare, appends go on.
 *   - a warm standby (tw_primary_standby with sc.warm, docs/readers.md) in this process while
 *     a primary process appends, 10 runs (4 under a sanitizer): it hands the service every
 *     acknowledged entry while it waits; the primary is SIGKILLed; at the takeover the
 *     recovery hands over only the rest. Together, entries 0, 1, 2 ... each exactly once,
 *     every acknowledged one included; SIGKILL to the first append, per phase.
 * Short ZooKeeper sessions (-t 2000: 2 s) keep the detection quick.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/standby.h>

#include "child.h"
#include "cli_run.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "zkserver.h"

#define NB 4
#define SESSION_MS "2000"

static const char *prov;
static char twctl[512];
static struct rt_cluster cl; /* NB twd's registered with ZooKeeper */
static struct zkserver zk;

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* twctl -c URL -p PROV -t 2000 standby LOG -S 64K EXTRA... */
static struct proc *standby(uint64_t log, const char *append, bool hold)
{
	char logs[32];
	char *args[16];
	int n = 0;
	struct proc *p;

	snprintf(logs, sizeof(logs), "%#" PRIx64, log);
	args[n++] = twctl;
	args[n++] = (char *)"-c";
	args[n++] = zk.url;
	args[n++] = (char *)"-p";
	args[n++] = (char *)prov;
	args[n++] = (char *)"-t";
	args[n++] = (char *)SESSION_MS;
	args[n++] = (char *)"standby";
	args[n++] = logs;
	args[n++] = (char *)"-S";
	args[n++] = (char *)"64K";
	args[n++] = (char *)"--append";
	args[n++] = (char *)append;
	if (hold)
		args[n++] = (char *)"--hold";
	args[n] = NULL;
	p = proc_spawn_opts(args, (char *const[]){ (char *)"TW_LOG_LEVEL=warn", NULL },
			    &(struct proc_opts){ .drop_prefix = "acked " });
	TAP_REQUIRE(p, "spawn twctl standby");
	return p;
}

struct took {
	uint64_t epoch, gone_rt, entries;
	unsigned backups, lost_races;
	int watched;
	double claim, connect, fence, recover, open, takeover, first;
};

static int parse_took(const char *line, struct took *t)
{
	memset(t, 0, sizeof(*t));
	return sscanf(line, "took-over log=%*s epoch=%" SCNu64 " watched=%d lost_races=%u "
		      "gone_realtime_ns=%" SCNu64 " claim_ms=%lf connect_ms=%lf fence_ms=%lf "
		      "recover_ms=%lf "
		      "entries=%" SCNu64 " backups=%u open_ms=%lf takeover_ms=%lf", &t->epoch,
		      &t->watched, &t->lost_races, &t->gone_rt, &t->claim, &t->connect, &t->fence,
		      &t->recover, &t->entries, &t->backups, &t->open, &t->takeover) == 12 ? 0 : -1;
}

/* Read `p`'s lines until it exits or closes stdout; the highest "acked N". */
static uint64_t drain_acked(struct proc *p, uint64_t have)
{
	char line[256];

	while (proc_wait_line(p, NULL, line, sizeof(line), 20000) >= 0) {
		uint64_t n;

		if (sscanf(line, "acked %" SCNu64, &n) == 1 && n > have)
			have = n;
	}
	return have;
}

/* Read lines up to "acked N" with N >= want; the highest seen (or 0: stream ended). */
static uint64_t wait_acked(struct proc *p, uint64_t want)
{
	char line[256];
	uint64_t have = 0;

	while (have < want && proc_wait_line(p, NULL, line, sizeof(line), 60000) >= 0) {
		uint64_t n;

		if (sscanf(line, "acked %" SCNu64, &n) == 1 && n > have)
			have = n;
	}
	return have;
}

/*
 * Recover `log` through the coordinator (its recorded backups) into a file; check the entries
 * are 0, 1, 2 ... in order (the generated entries' sequence numbers). Returns how many, or -1.
 */
static long long recover_check(uint64_t log, const char *what)
{
	char logs[32], out[300];
	char *args[] = { twctl, (char *)"-c", zk.url, (char *)"-p", (char *)prov, (char *)"recover",
			 logs, (char *)"-o", out, NULL };
	struct cli_out o;
	FILE *f;
	long long n = 0;
	uint64_t bad = 0;
	int st;

	snprintf(logs, sizeof(logs), "%#" PRIx64, log);
	snprintf(out, sizeof(out), "%s/rec-%" PRIx64, cl.root, log);
	st = cli_run(args, NULL, NULL, 0, 60000, &o);
	if (st != 0) {
		tap_diag("%s: twctl recover exit %d: %s", what, st, o.err);
		cli_out_free(&o);
		return -1;
	}
	cli_out_free(&o);
	f = fopen(out, "rb");
	if (!f)
		return -1;
	for (;;) {
		uint8_t buf[64];
		uint64_t seq;
		int rc = rt_read_entry(f, buf, sizeof(buf));

		if (rc <= 0) {
			bad += rc < 0;
			break;
		}
		seq = tw_load_le64(buf);
		for (unsigned b = 8; b < sizeof(buf); b++)
			bad += buf[b] != (uint8_t)(seq & 0xff);
		if (seq != (uint64_t)n)
			bad++;
		n++;
	}
	fclose(f);
	unlink(out);
	if (bad) {
		tap_diag("%s: %" PRIu64 " entries out of order or damaged", what, bad);
		return -1;
	}
	return n;
}

struct range {
	double lo, hi;
};

static void widen(struct range *r, double v)
{
	if (r->lo > v || r->lo < 0)
		r->lo = v;
	if (r->hi < v)
		r->hi = v;
}

/* The record: one segment's r backups, and the next takeover asks only those. */
static void record(void)
{
	uint64_t log = 0x5d00000000000000ull | ((uint64_t)getpid() << 8);
	struct proc *a = standby(log, "20", false), *b;
	char line[640], *jargs[] = { twctl, (char *)"-c", zk.url, (char *)"--json",
				     (char *)"ls-logs", NULL };
	struct cli_out o;
	struct took t;
	int st, used = 0;

	is_int(proc_wait(a, 60000), 0, "a primary (twctl standby of an unowned log) appends 20 "
	       "entries and closes");
	proc_free(a);
	st = cli_run(jargs, NULL, NULL, 0, 30000, &o);
	{
		char want[64], *at;

		snprintf(want, sizeof(want), "{\"log_id\":%" PRIu64 ",", log);
		at = strstr(o.out, want);
		for (int i = 0; at && i < NB; i++) {
			char ad[704], *end = strchr(at, ']');

			snprintf(ad, sizeof(ad), "\"address\":\"%s\"", cl.addr[i]);
			if (strstr(at, ad) && (!end || strstr(at, ad) < end))
				used++;
		}
		ok(st == 0 && at && strstr(at, "\"owner\":\"\""), "twctl ls-logs lists the log, no "
		   "owner once closed (exit %d)", st);
	}
	is_int(used, 3, "the record holds the 3 backups of its one segment (of %d registered)", NB);
	{
		char *hargs[] = { twctl, (char *)"-c", zk.url, (char *)"ls-logs", NULL };
		struct cli_out h;

		cli_run(hargs, NULL, NULL, 0, 30000, &h);
		tap_diag("twctl ls-logs:\n%s", h.out);
		cli_out_free(&h);
	}
	cli_out_free(&o);
	b = standby(log, "5", false);
	st = proc_wait_line(b, "took-over ", line, sizeof(line), 60000);
	if (st < 0 || parse_took(line, &t) < 0)
		memset(&t, 0, sizeof(t));
	ok(st >= 0 && t.epoch && t.backups == 3 && t.entries == 20 && !t.watched,
	   "the next takeover's recovery asked the 3 recorded backups (%u), found the 20 entries "
	   "(%" PRIu64 ")", t.backups, t.entries);
	is_int(proc_wait(b, 60000), 0, "it appended 5 more and closed");
	proc_free(b);
	is_int(recover_check(log, "record"), 25, "recovery through the coordinator: 25 entries in "
	       "order");
}

static void failover_runs(void)
{
	struct range detect = { -1, 0 }, claim = { -1, 0 }, conn = { -1, 0 }, fence = { -1, 0 },
		     rec = { -1, 0 },
		     open = { -1, 0 }, first = { -1, 0 }, total = { -1, 0 };
	int good = 0, runs = tap_sanitizer() ? 4 : 10;

	for (int run = 0; run < runs; run++) {
		uint64_t log = 0x5e00000000000000ull | ((uint64_t)getpid() << 8) | (uint64_t)run;
		struct proc *a = standby(log, "100000000", false), *b;
		char line[512];
		uint64_t acked_a, acked_b = 0, kill_rt;
		long long got;
		struct took t;
		bool fine = true;
		int st;

		/* The primary: owns the log at once, appends without end. */
		st = proc_wait_line(a, "took-over ", line, sizeof(line), 60000);
		acked_a = st >= 0 ? wait_acked(a, 50 + 17 * (uint64_t)run) : 0;
		if (!acked_a) {
			ok(0, "run %d: the primary took the log and appended (%d)", run, st);
			proc_free(a);
			continue;
		}
		b = standby(log, "50", false);
		/* Its watch is set on the primary's owner node (not only started). */
		st = proc_wait_line(b, "watching ", line, sizeof(line), 60000);
		fine &= st >= 0;
		/* Mid-stream: the primary is appending right now. */
		kill_rt = realtime_ns();
		proc_kill(a, SIGKILL);
		acked_a = drain_acked(a, acked_a);
		proc_wait(a, 10000);
		proc_free(a);
		st = proc_wait_line(b, "took-over ", line, sizeof(line), 60000);
		if (st < 0 || parse_took(line, &t) < 0) {
			ok(0, "run %d: the standby took over (%d: %s)", run, st, st >= 0 ? line : "");
			proc_free(b);
			continue;
		}
		st = proc_wait_line(b, "first_append_ms=", line, sizeof(line), 60000);
		if (st >= 0)
			t.first = atof(line + strlen("first_append_ms="));
		acked_b = drain_acked(b, 0);
		st = proc_wait(b, 30000);
		proc_free(b);
		fine &= st == 0 && t.watched && t.entries >= acked_a && acked_b == t.entries + 50;
		got = recover_check(log, "failover");
		fine &= got == (long long)acked_b;
		tap_diag("run %d: A acked %" PRIu64 ", killed; B: epoch %" PRIu64 ", recovered %" PRIu64
			 " from %u backups, appended to %" PRIu64 "; final recovery %lld in order | "
			 "detect %.0f ms (kill -> watch), claim %.1f, connect %.1f, fence %.1f, recover "
			 "%.1f, open %.1f, first append %.2f ms", run, acked_a, t.epoch, t.entries,
			 t.backups, acked_b, got, (double)(int64_t)(t.gone_rt - kill_rt) / 1e6, t.claim,
			 t.connect, t.fence, t.recover, t.open, t.first);
		if (!fine) {
			ok(0, "run %d: standby exit %d, watched %d, recovered %" PRIu64 " >= acked %"
			   PRIu64 ", final %lld == %" PRIu64, run, st, t.watched, t.entries, acked_a,
			   got, acked_b);
			continue;
		}
		good++;
		widen(&detect, (double)(int64_t)(t.gone_rt - kill_rt) / 1e6);
		widen(&claim, t.claim);
		widen(&conn, t.connect);
		widen(&fence, t.fence);
		widen(&rec, t.recover);
		widen(&open, t.open);
		widen(&first, t.first);
		widen(&total, (double)(int64_t)(t.gone_rt - kill_rt) / 1e6 + t.takeover + t.first);
	}
	is_int(good, runs, "%d failovers with no human step: the standby took over, every entry "
	       "either acknowledged is recovered in order, appends continued in the same log", runs);
	tap_diag("failover over %d runs (%s, session timeout %s ms): detection %.0f-%.0f ms, claim "
		 "%.1f-%.1f ms, connect %.1f-%.1f ms, fence %.1f-%.1f ms, recovery %.1f-%.1f ms, open "
		 "%.1f-%.1f ms, first append %.2f-%.2f ms; kill -> first append %.0f-%.0f ms", good,
		 prov, SESSION_MS, detect.lo, detect.hi, claim.lo, claim.hi, conn.lo, conn.hi,
		 fence.lo, fence.hi, rec.lo, rec.hi, open.lo, open.hi, first.lo, first.hi, total.lo,
		 total.hi);
}

/* Of the waiting standbys, the one that prints "took-over" (a few ms of looking at each in
 * turn: a deadline, not a sleep). */
static int which_took(struct proc **s, int n, char *line, size_t len)
{
	for (int round = 0; round < 600; round++)
		for (int i = 0; i < n; i++)
			if (s[i] && proc_wait_line(s[i], "took-over ", line, len, 20) >= 0)
				return i;
	return -1;
}

static void racing(void)
{
	enum { W = 4, ROUNDS = 3, EACH = 50 };
	uint64_t log = 0x5f00000000000000ull | ((uint64_t)getpid() << 8);
	struct proc *owner = standby(log, "50", true), *s[W + ROUNDS];
	char line[512];
	uint64_t last_epoch = 0, acked = 0;
	int n = 0, st, rounds_ok = 0;

	st = proc_wait_line(owner, "holding ", line, sizeof(line), 60000);
	TAP_REQUIRE(st >= 0, "the first owner holds the log");
	acked = EACH;
	for (int i = 0; i < W; i++) {
		s[n] = standby(log, "50", true);
		TAP_REQUIRE(proc_wait_line(s[n], "watching ", line, sizeof(line), 60000) >= 0,
			    "standby %d watches the owner node", n);
		n++;
	}
	for (int r = 0; r < ROUNDS; r++) {
		struct took t;
		int w, others = 0;

		proc_kill(owner, SIGKILL);
		proc_wait(owner, 10000);
		proc_free(owner);
		w = which_took(s, n, line, sizeof(line));
		if (w < 0 || parse_took(line, &t) < 0) {
			ok(0, "round %d: a standby took over", r);
			owner = NULL;
			break;
		}
		owner = s[w];
		s[w] = NULL;
		st = proc_wait_line(owner, "holding ", line, sizeof(line), 60000);
		/* The others are still watching: none printed a takeover meanwhile. */
		for (int i = 0; i < n; i++)
			if (s[i] && proc_wait_line(s[i], "took-over ", line, sizeof(line), 50) >= 0)
				others++;
		ok(st >= 0 && others == 0 && t.epoch > last_epoch && t.entries >= acked,
		   "round %d: exactly one of %d standbys took over (epoch %" PRIu64 " > %" PRIu64
		   ", %u lost races before, recovered %" PRIu64 " >= %" PRIu64 " acknowledged), "
		   "appended %d", r, n - r, t.epoch, last_epoch, t.lost_races, t.entries, acked,
		   EACH);
		rounds_ok += st >= 0 && others == 0 && t.epoch > last_epoch && t.entries >= acked;
		last_epoch = t.epoch;
		acked = t.entries + EACH;
		/* A new standby joins: four wait again. */
		s[n] = standby(log, "50", true);
		TAP_REQUIRE(proc_wait_line(s[n], "watching ", line, sizeof(line), 60000) >= 0,
			    "standby %d watches the owner node", n);
		n++;
	}
	/* Stop the waiting ones first (they hold no owner node), then close the owner. */
	for (int i = 0; i < n; i++)
		if (s[i]) {
			proc_kill(s[i], SIGKILL);
			proc_wait(s[i], 10000);
			proc_free(s[i]);
		}
	if (owner) {
		is_int(child_stop(owner, SIGTERM, 30000), 0,
		       "the last owner closes the log cleanly on SIGTERM");
	}
	is_int(rounds_ok, ROUNDS, "%d rounds of 4 racing standbys: one winner each, epochs "
	       "increasing", ROUNDS);
	{
		long long got = recover_check(log, "racing");

		ok(got >= (long long)acked, "the final recovery holds all %" PRIu64 " acknowledged "
		   "entries in order (%lld)", acked, got);
	}
}

static struct proc *twd_in(const char *url, const char *zone, int k, char *addr_out, size_t len)
{
	char dir[300];
	char *args[] = { cl.twd, (char *)"--provider", (char *)prov, (char *)"--dir", dir,
			 (char *)"--buffer-size", (char *)"64K", (char *)"--buffers", (char *)"64",
			 (char *)"--coordinator", (char *)url, (char *)"--zone", (char *)zone, NULL };
	struct proc *t;

	snprintf(dir, sizeof(dir), "%s/s%d", cl.root, k);
	t = child_ready(args, NULL, 30000, addr_out, len, NULL);
	TAP_REQUIRE(t, "twd s%d ready", k);
	return t;
}

static int append_n(struct tw_primary *p, uint64_t from, uint64_t n)
{
	uint8_t buf[64];

	for (uint64_t i = from; i < from + n; i++) {
		int rc;

		memset(buf, (int)(i & 0xff), sizeof(buf));
		for (int b = 0; b < 8; b++)
			buf[b] = (uint8_t)(i >> (8 * b));
		rc = tw_primary_append(p, buf, sizeof(buf), NULL);
		if (rc < 0) {
			tap_diag("append %" PRIu64 ": %s: %s", i, tw_strerror(rc), tw_primary_errmsg(p));
			return rc;
		}
	}
	return 0;
}

static void spare_from_registry(void)
{
	static const char *zones[4] = { "A", "B", "C", "B" };
	char url[160], a[4][160];
	struct proc *t[4];
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char err[1024];
	int rc, victim = -1;
	bool spare_is_new = false;

	snprintf(url, sizeof(url), "zk://%s/tw-spare", zk.hosts);
	for (int i = 0; i < 3; i++)
		t[i] = twd_in(url, zones[i], i, a[i], sizeof(a[i]));
	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	cfg.log_id = 0x5c00000000000000ull | (uint64_t)getpid();
	tc.coordinator = url;
	tc.provider = prov;
	cfg.replicas = 3;
	cfg.segment_size = 64u << 10;
	cfg.open_retry_ms = 1000;
	/* Async: the record (rollovers) and the spare choice run on the progress thread. */
	cfg.mode = TW_PRIMARY_ASYNC;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open on the 3 registered backups: %s: %s", tw_strerror(rc), err);
	is_int(append_n(p, 0, 1200), 0, "1200 appends (two rollovers) on the 3 backups registered "
	       "at the open");
	/* A fourth registers now, in zone B. */
	t[3] = twd_in(url, zones[3], 3, a[3], sizeof(a[3]));
	for (unsigned i = 0; i < 3; i++) {
		const char *r = tw_primary_replica_addr(p, i);

		if (r && !strcmp(r, a[1]))
			victim = 1;
	}
	TAP_REQUIRE(victim == 1, "the zone-B backup holds a replica of the open segment");
	proc_kill(t[1], SIGKILL);
	proc_wait(t[1], 10000);
	rc = append_n(p, 1200, 1200);
	is_int(rc, 0, "1200 more appends after the zone-B replica's twd was killed");
	for (unsigned i = 0; i < 3; i++) {
		const char *r = tw_primary_replica_addr(p, i);

		spare_is_new |= r && !strcmp(r, a[3]);
	}
	ok(spare_is_new, "the spare is the twd that registered after the open (zone B, the one "
	   "zone the rule allows)");
	tw_primary_close(p);
	for (int i = 0; i < 4; i++)
		proc_free(t[i]);
}

static unsigned errors_logged;

static void count_errors(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	if (level == TW_DIAG_ERROR)
		errors_logged++;
	tap_diag("log: %s", msg);
}

/*
 * A standby whose bounded wait (sc.wait_ms) ends with the owner still in place gets -ETIMEDOUT
 * and logs nothing as an error: a service stands by in such rounds to notice its own shutdown
 * (examples/kv), and used to log one error per round.
 */
static void bounded_wait(void)
{
	uint64_t log = 0x5d00000000b0a0ull;
	struct proc *owner = standby(log, "5", true);
	struct tw_standby_config sc;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char line[512], err[512] = "";
	int rc = proc_wait_line(owner, "took-over ", line, sizeof(line), 60000);

	TAP_REQUIRE(rc >= 0, "the owner did not take the log: %s", strerror(-rc));
	tw_standby_config_init(&sc);
	sc.wait_ms = 300;
	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	cfg.log_id = log;
	tc.coordinator = zk.url;
	tc.provider = prov;
	cfg.segment_size = 64u << 10;
	tc.connect_timeout_ms = 2000;
	tw_diag_set_sink(count_errors, NULL);
	for (int round = 0; round < 2; round++) {
		rc = tw_primary_standby(&tc, &cfg, &sc, NULL, &p, err, sizeof(err));
		is_int(rc, -ETIMEDOUT, "round %d of a bounded standby: -ETIMEDOUT (%s)", round, err);
	}
	tw_diag_set_sink(NULL, NULL);
	is_int(errors_logged, 0, "and no error logged for the expected timeouts");
	ok(strstr(err, "still there") != NULL, "the message says why");
	proc_free(owner);
}

/* The warm standby's service: entries must come as 0, 1, 2 ... (the generated sequence
 * numbers), each once, from the reader and then from the recovery. */
struct warm_svc {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t next;    /* the next sequence number expected */
	uint64_t bad;
	uint64_t want;    /* signal when next reaches it */
	char first_bad[160];
};

static int warm_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct warm_svc *w = arg;
	uint64_t seq = 0;

	if (e->len >= 8)
		memcpy(&seq, e->data, 8);
	pthread_mutex_lock(&w->mu);
	if (seq != w->next && !w->bad++)
		snprintf(w->first_bad, sizeof(w->first_bad), "entry %" PRIu64 " (lsn %016" PRIx64
			 ") carries %" PRIu64, w->next, e->lsn, seq);
	w->next++;
	if (w->next >= w->want)
		pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

struct warm_run {
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_standby_config sc;
	struct tw_standby_result st;
	struct tw_primary *p;
	struct warm_svc *svc;
	int rc;
	char err[512];
};

static void *warm_main(void *arg)
{
	struct warm_run *r = arg;

	r->sc.on_entry = warm_entry;
	r->sc.entry_arg = r->svc;
	r->rc = tw_primary_standby(&r->tc, &r->cfg, &r->sc, &r->st, &r->p, r->err, sizeof(r->err));
	return NULL;
}

/* One warm failover: a primary process appends, the warm standby (this process) receives
 * 1500+ entries while waiting, the primary gets SIGKILL. Returns whether every check held;
 * *ms: SIGKILL to the new primary's first append acknowledged. */
static bool warm_once(int run, double *ms)
{
	uint64_t log = 0x3a00000000000000ull | ((uint64_t)getpid() << 8) | (uint64_t)run, acked;
	struct warm_svc svc = { .want = 1500 };
	struct warm_run r;
	struct proc *a = standby(log, "100000000", false);
	uint64_t kill_ns, lsn;
	pthread_t th;
	bool good;
	int rc;

	pthread_mutex_init(&svc.mu, NULL);
	pthread_cond_init(&svc.cv, NULL);
	acked = wait_acked(a, 200);
	TAP_REQUIRE(acked >= 200, "the primary took the log and appended (%" PRIu64 ")", acked);
	memset(&r, 0, sizeof(r));
	tw_ctx_config_init(&r.tc);
	r.tc.coordinator = zk.url;
	r.tc.provider = prov;
	tw_primary_config_init(&r.cfg);
	r.cfg.log_id = log;
	r.cfg.segment_size = 64u << 10;
	tw_standby_config_init(&r.sc);
	r.sc.warm = true;
	r.svc = &svc;
	TAP_REQUIRE(pthread_create(&th, NULL, warm_main, &r) == 0, "standby thread");
	/* The reader hands entries over while the owner writes: wait for 1500 of them. */
	pthread_mutex_lock(&svc.mu);
	while (svc.next < svc.want)
		pthread_cond_wait(&svc.cv, &svc.mu);
	pthread_mutex_unlock(&svc.mu);
	kill_ns = tw_now_ns();
	proc_kill(a, SIGKILL);
	acked = drain_acked(a, acked);
	proc_wait(a, 20000);
	proc_free(a);
	pthread_join(th, NULL);
	rc = r.rc;
	if (rc == 0) {
		uint8_t e[64];
		uint64_t seq = svc.next;

		memset(e, (int)(seq & 0xff), sizeof(e));
		memcpy(e, &seq, 8);
		rc = tw_primary_append(r.p, e, sizeof(e), &lsn);
	}
	*ms = (double)(tw_now_ns() - kill_ns) / 1e6;
	good = rc == 0 && r.st.watched && svc.bad == 0 && svc.next >= acked &&
	       r.st.warm_entries >= 1500 && r.st.recovery.entries == svc.next - r.st.warm_entries;
	tap_diag("warm run %d: %" PRIu64 " entries from the reader, %" PRIu64 " from the "
		 "recovery (from LSN %016" PRIx64 "), %" PRIu64 " acknowledged by the killed "
		 "primary; SIGKILL to first append %.0f ms (session %s ms): wait %.0f, stop reader "
		 "%.1f, claim %.1f, connect %.1f, fence %.1f, recover %.1f, open %.1f, takeover "
		 "%.1f ms%s%s%s%s", run, r.st.warm_entries, r.st.recovery.entries, r.st.warm_lsn, acked,
		 *ms, SESSION_MS, (double)r.st.wait_ns / 1e6, (double)r.st.warm_stop_ns / 1e6,
		 (double)r.st.claim_ns / 1e6, (double)r.st.connect_ns / 1e6,
		 (double)r.st.fence_ns / 1e6, (double)r.st.recover_ns / 1e6,
		 (double)r.st.open_ns / 1e6, (double)r.st.takeover_ns / 1e6, rc ? ": " : "",
		 rc ? (r.rc ? r.err : tw_strerror(rc)) : "", svc.bad ? ": " : "", svc.first_bad);
	tw_primary_close(r.p);
	pthread_mutex_destroy(&svc.mu);
	pthread_cond_destroy(&svc.cv);
	return good;
}

static void warm(void)
{
	int runs = tap_sanitizer() ? 4 : 10, good = 0;
	double lo = -1, hi = 0;

	for (int run = 0; run < runs; run++) {
		double ms = 0;

		good += warm_once(run, &ms);
		if (lo < 0 || ms < lo)
			lo = ms;
		if (ms > hi)
			hi = ms;
	}
	ok(good == runs, "warm standby, %d runs: the service saw entries 0..n-1 exactly once, in "
	   "order, every acknowledged one, the reader's while waiting and only the rest from the "
	   "recovery; the new owner appends (%d good; SIGKILL to first append %.0f-%.0f ms, "
	   "session %s ms)", runs, good, lo, hi, SESSION_MS);
}

int main(int argc, char **argv)
{
	char *twd_args[] = { (char *)"--coordinator", zk.url, NULL };

	prov = argc > 1 ? argv[1] : "tcp";
	zkserver_require();
	child_tool("tools/twctl", twctl, sizeof(twctl));
	zkserver_start(&zk);
	rt_start_with(&cl, NULL, prov, NB, "64K", "64", twd_args);

	record();
	bounded_wait();
	spare_from_registry();
	failover_runs();
	warm();
	racing();

	rt_stop(&cl);
	zkserver_stop(&zk);
	tap_done_testing();
	return tap_exit();
}
