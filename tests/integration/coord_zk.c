/*
 * tests/integration/coord_zk.c — the coordinator on a real ZooKeeper server (argv[1]: tcp or
 * sockets; docs/coordination.md):
 *   - 5 twd's register with zones A A B B C; the registrations hold address, provider, zone,
 *     buffers; twctl -c URL ls-backups lists them;
 *   - a primary given only the coordinator URL finds them, gets epoch 1 and an owner node; a
 *     second plain open of the live log gets -TW_ELOGEXISTS;
 *   - no segment has two replicas in one zone (listed on every backup);
 *   - a replica's twd is SIGKILLed: the spare is the other registered backup of its zone
 *     (the only one the zone rule allows) and appends continue;
 *   - two racing takeovers through the coordinator get distinct epochs; every acknowledged
 *     entry is recovered; the old primary is fenced;
 *   - 4 threads allocating 100 epochs get 100 distinct ones (latency printed);
 *   - session expiry: the registration comes back, the owner node is lost;
 *   - answers lost by a proxy, the requests applied: a standby's claims (it claims again and
 *     takes over), a plain open's claim (it opens), a backup's record (made again, the
 *     backup used), a twd's registration (it starts, registered), a takeover's reads (asked
 *     again);
 *   - a clean twd shutdown deregisters at once; the killed twd's node goes with its session;
 *   - twd with a bad URL or no server fails with a clear message.
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

#include <tailwind/backup.h>
#include <tailwind/primary.h>
#include <tailwind/standby.h>

#include "child.h"
#include "cli_run.h"
#include "coord/coord.h"
#include "proc.h"
#include "tap.h"
#include "tcpproxy.h"
#include "tmpdir.h"
#include "twd_client.h"
#include "zkserver.h"

#define NB 5
#define ZK_MULTI_OP 14 /* zookeeper's proto.h: ZOO_MULTI_OP, the claim's one request */
#define ZK_CREATE_OP 1 /* ZOO_CREATE_OP: zoo_create's request */
#define ZK_GETCHILDREN_OP 8 /* ZOO_GETCHILDREN_OP: zoo_get_children's */
#define SEG (64u * 1024u) /* ~580 entries of 100 B: a few segments with few appends */
#define OBJ 100u

static const char *zone_of[NB] = { "A", "A", "B", "B", "C" };
static const char *prov;
static char root[256], twd[512], twctl[512];
static char addr[NB][160];
static struct proc *tw[NB];
static bool alive[NB];
static struct zkserver zk;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds until `end` (now_s() time), at least 1. */
static unsigned ms_left(double end)
{
	double left = end - now_s();

	return left > 0 ? (unsigned)(left * 1e3) + 1 : 1;
}

static int idx_of(const char *a)
{
	for (int i = 0; i < NB; i++)
		if (a && !strcmp(a, addr[i]))
			return i;
	return -1;
}

static void start_twds(void)
{
	for (int i = 0; i < NB; i++) {
		char dir[300];
		char *args[] = { twd, (char *)"--provider", (char *)prov, (char *)"--dir", dir,
				 (char *)"--buffer-size", (char *)"64K", (char *)"--buffers",
				 (char *)"16", (char *)"--coordinator", zk.url, (char *)"--zone",
				 (char *)zone_of[i], NULL };

		snprintf(dir, sizeof(dir), "%s/b%d", root, i);
		tw[i] = child_ready(args, NULL, 30000, addr[i], sizeof(addr[i]), NULL);
		TAP_REQUIRE(tw[i], "twd %d ready", i);
		alive[i] = true;
	}
}

static void check_registrations(struct tw_coord *c)
{
	struct tw_coord_backup *v = NULL;
	size_t n = 0;
	int found = 0;

	is_int(tw__coord_list_backups(c, &v, &n), 0, "list registrations");
	is_int(n, NB, "%d twd's registered", NB);
	for (size_t i = 0; i < n; i++) {
		int k = idx_of(v[i].addr);

		if (k >= 0 && !strcmp(v[i].zone, zone_of[k]) && !strcmp(v[i].provider, prov) &&
		    v[i].buffers == TW_BACKUP_DEFAULT_MAX_BUFFERS &&
		    v[i].free_buffers <= TW_BACKUP_DEFAULT_MAX_BUFFERS && v[i].buffer_size == SEG)
			found++;
		else
			tap_diag("unexpected registration %s %s %s %u/%u", v[i].addr, v[i].provider,
				 v[i].zone, v[i].free_buffers, v[i].buffers);
	}
	is_int(found, NB, "each registration holds its twd's address, provider, zone, buffers");
	ok(n >= 3 && strcmp(v[0].zone, v[1].zone) && strcmp(v[1].zone, v[2].zone) &&
	   strcmp(v[0].zone, v[2].zone), "listed zones interleaved (first three in three zones)");
	free(v);
}

static void check_twctl_ls(void)
{
	char *args[] = { twctl, (char *)"-c", zk.url, (char *)"--json", (char *)"ls-backups", NULL };
	struct cli_out o;
	int st = cli_run(args, NULL, NULL, 0, 30000, &o), seen = 0;

	is_int(st, 0, "twctl -c URL ls-backups exits 0 (stderr: %s)", o.err);
	for (int i = 0; i < NB; i++) {
		char want[1024];

		snprintf(want, sizeof(want), "\"address\":\"%s\",\"provider\":\"%s\",\"zone\":\"%s\"",
			 addr[i], prov, zone_of[i]);
		seen += strstr(o.out, want) != NULL;
	}
	is_int(seen, NB, "ls-backups lists every twd with its provider and zone");
	cli_out_free(&o);
}

/* Segments of `log` on every live backup: no segment has two replicas in one zone. Returns
 * the number of (segment, backup) copies seen. */
static unsigned check_zones(uint64_t log, const char *when)
{
	enum { MAXS = 256 };
	static unsigned zmask[MAXS];
	static struct twc_info info[MAXS];
	unsigned copies = 0, bad = 0, maxseg = 0;

	memset(zmask, 0, sizeof(zmask));
	for (int i = 0; i < NB; i++) {
		struct twc c;
		int n;

		if (!alive[i])
			continue;
		memset(&c, 0, sizeof(c));
		TAP_REQUIRE(twc_connect(&c, prov, addr[i]) == 0, "connect to twd %d", i);
		n = twc_list(&c, log, true, info, MAXS);
		twc_close(&c);
		TAP_REQUIRE(n >= 0, "list twd %d: %d", i, n);
		for (int k = 0; k < n; k++) {
			unsigned s = (unsigned)info[k].segment_id, z = 1u << (zone_of[i][0] - 'A');

			if (s >= MAXS)
				continue;
			if (zmask[s] & z) {
				bad++;
				tap_diag("segment %u: two replicas in zone %s", s, zone_of[i]);
			}
			zmask[s] |= z;
			copies++;
			if (s > maxseg)
				maxseg = s;
		}
	}
	is_int(bad, 0, "%s: no segment of %u has two replicas in one zone (%u copies listed)",
	       when, maxseg + 1, copies);
	return copies;
}

static int append_n(struct tw_primary *p, uint64_t from, uint64_t n)
{
	uint8_t buf[OBJ];

	for (uint64_t i = from; i < from + n; i++) {
		int rc;

		memset(buf, (int)(i & 0xff), sizeof(buf));
		memcpy(buf, &i, sizeof(i));
		rc = tw_primary_append(p, buf, OBJ, NULL);
		if (rc < 0) {
			tap_diag("append %" PRIu64 ": %s: %s", i, tw_strerror(rc), tw_primary_errmsg(p));
			return rc;
		}
	}
	return 0;
}

static void pcfg(struct tw_ctx_config *tc, struct tw_primary_config *cfg, uint64_t log)
{
	tw_ctx_config_init(tc);
	tc->coordinator = zk.url; /* no backups: the registrations */
	tc->provider = prov;
	tw_primary_config_init(cfg);
	cfg->log_id = log;
	cfg->replicas = 3;
	cfg->segment_size = SEG;
	cfg->open_retry_ms = 1000;
}

struct racer {
	uint64_t log;
	pthread_barrier_t *bar;
	int rc;
	uint64_t epoch, entries, bad;
	struct tw_primary *p;
	char err[1024];
};

static int count_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct racer *r = arg;
	uint64_t seq;

	if (e->len != OBJ) {
		r->bad++;
		return 0;
	}
	memcpy(&seq, e->data, sizeof(seq));
	if (seq != r->entries)
		r->bad++;
	r->entries++;
	return 0;
}

static void *race_main(void *arg)
{
	struct racer *r = arg;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_recover_result res;

	memset(&res, 0, sizeof(res));
	pcfg(&tc, &cfg, r->log);
	pthread_barrier_wait(r->bar);
	r->rc = tw_primary_takeover(&tc, &cfg, count_entry, r, &res, &r->p, r->err, sizeof(r->err));
	r->epoch = r->p ? tw_primary_epoch(r->p) : res.epoch;
	return NULL;
}

struct alloc_thr {
	const char *url;
	uint64_t epochs[25];
	double total_s;
	int failures;
};

static void *alloc_main(void *arg)
{
	struct alloc_thr *a = arg;
	struct tw_coord *c;
	char err[512];

	if (tw__coord_open(a->url, 5000, &c, err, sizeof(err)) < 0) {
		a->failures = 25;
		return NULL;
	}
	for (int i = 0; i < 25; i++) {
		double t0 = now_s();

		if (tw__coord_take_log(c, 0xE0, 0, NULL, false, &a->epochs[i]) < 0)
			a->failures++;
		a->total_s += now_s() - t0;
	}
	tw__coord_close(c);
	return NULL;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static void epochs_in_parallel(void)
{
	struct alloc_thr t[4];
	pthread_t th[4];
	uint64_t all[100];
	double total = 0;
	int fails = 0, distinct = 1;

	/* One client alone first: the latency of an uncontended allocation. */
	{
		struct tw_coord *c;
		char err[512];
		uint64_t e, last = 0;
		double t0;
		int good = 0;

		TAP_REQUIRE(tw__coord_open(zk.url, 5000, &c, err, sizeof(err)) == 0, "open: %s", err);
		t0 = now_s();
		for (int i = 0; i < 20; i++)
			if (tw__coord_take_log(c, 0xE2, 0, NULL, false, &e) == 0 && e == last + 1)
				good++, last = e;
		tap_diag("epoch allocation, one client: %.2f ms on average (20)",
			 (now_s() - t0) / 20 * 1e3);
		is_int(good, 20, "one client: epochs 1..20 in order");
		tw__coord_close(c);
	}
	for (int i = 0; i < 4; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].url = zk.url;
		pthread_create(&th[i], NULL, alloc_main, &t[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		memcpy(all + 25 * i, t[i].epochs, sizeof(t[i].epochs));
		total += t[i].total_s;
		fails += t[i].failures;
	}
	qsort(all, 100, sizeof(all[0]), cmp_u64);
	for (int i = 1; i < 100; i++)
		distinct += all[i] != all[i - 1];
	is_int(fails, 0, "100 epoch allocations from 4 threads succeed");
	ok(distinct == 100 && all[0] == 1 && all[99] == 100,
	   "they got 100 distinct epochs, 1..100 (%d distinct, %" PRIu64 "..%" PRIu64 ")", distinct,
	   all[0], all[99]);
	tap_diag("epoch allocation (get + multi set, 4 clients racing): %.2f ms on average",
		 total / 100 * 1e3);
}

/* Whether `obs` lists `who` among the registered backups; waits (up to `end`) for the listing
 * to say `want`. */
static bool wait_registered(struct tw_coord *obs, const char *who, bool want, double end)
{
	for (;;) {
		struct tw_coord_backup *v = NULL;
		size_t n = 0;
		bool here = false;

		/* The listing arms a child watch on backups/: wait for it to fire. */
		if (tw__coord_watch_backups(obs, &v, &n) == 0)
			for (size_t i = 0; i < n; i++)
				here |= !strcmp(v[i].addr, who);
		free(v);
		if (here == want || now_s() >= end)
			return here == want;
		tw__coord_wait_backups_changed(obs, ms_left(end));
	}
}

/* A TCP proxy to the ZooKeeper server (tests/lib/tcpproxy.h); *url: its URL, same chroot. */
static struct tcpproxy *zk_proxy(char *url, size_t len)
{
	struct tcpproxy *px = tcpproxy_start("127.0.0.1", zk.port);

	snprintf(url, len, "zk://127.0.0.1:%d%s", tcpproxy_port(px),
		 strchr(zk.url + strlen("zk://"), '/'));
	return px;
}

/* The session of a coordinator handle expires: its registration comes back by itself, its
 * owner node is lost. The handle reaches ZooKeeper through a TCP proxy (tests/lib/tcpproxy.h)
 * that the test cuts, a partition longer than the session timeout; an observer connected
 * directly sees the session's ephemeral nodes go (the server expired it), then the cut heals
 * and the handle, told its session expired, registers again. */
static void session_expiry(void)
{
	struct tw_coord *c, *obs;
	struct tw_coord_backup me;
	struct tcpproxy *px;
	char err[512], url[160];
	uint64_t epoch = 0;
	bool gone, back;
	double t0;

	px = zk_proxy(url, sizeof(url));
	memset(&me, 0, sizeof(me));
	snprintf(me.addr, sizeof(me.addr), "192.0.2.1:9");
	snprintf(me.provider, sizeof(me.provider), "test-expiry");
	me.free_buffers = 1;
	TAP_REQUIRE(tw__coord_open(url, 2000, &c, err, sizeof(err)) == 0, "open: %s", err);
	TAP_REQUIRE(tw__coord_open(zk.url, 2000, &obs, err, sizeof(err)) == 0, "open: %s", err);
	is_int(tw__coord_register(c, &me), 0, "register a test node");
	is_int(tw__coord_take_log(c, 0xE1, 0, "expiry test", false, &epoch), 0, "own log 0xE1");
	ok(tw__coord_owns(c, 0xE1), "the handle owns log 0xE1");
	ok(wait_registered(obs, me.addr, true, now_s() + 30), "the observer sees it registered");
	t0 = now_s();
	tcpproxy_cut(px, true);
	gone = wait_registered(obs, me.addr, false, now_s() + 60);
	ok(gone, "partition: the server expires the session, the registration goes (%.2f s)",
	   now_s() - t0);
	tcpproxy_cut(px, false);
	back = gone && wait_registered(obs, me.addr, true, now_s() + 60);
	ok(back, "healed: the handle registers again in a new session (%.2f s after the cut, %u "
	   "connections tried)", now_s() - t0, tcpproxy_accepted(px));
	ok(!tw__coord_owns(c, 0xE1), "the owner node is lost with the expired session");
	{
		char owner[256] = "x";

		ok(tw__coord_log_info(obs, 0xE1, &epoch, owner, sizeof(owner)) == 0 && !owner[0],
		   "no owner node left for log 0xE1 (\"%s\")", owner);
	}
	tw__coord_close(c);
	tw__coord_close(obs);
	tcpproxy_stop(px);
}

struct sb_run {
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_standby_config sc;
	struct tw_standby_result st;
	struct tw_primary *p;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned waits;
	bool done;
	int rc;
	char err[1024];
};

static void sb_waiting(void *arg, const char *owner)
{
	struct sb_run *r = arg;

	(void)owner;
	pthread_mutex_lock(&r->mu);
	r->waits++;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void *sb_main(void *arg)
{
	struct sb_run *r = arg;

	r->rc = tw_primary_standby(&r->tc, &r->cfg, &r->sc, &r->st, &r->p, r->err, sizeof(r->err));
	pthread_mutex_lock(&r->mu);
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/*
 * A standby's claims that ZooKeeper applied while their answers were lost. The standby reaches
 * ZooKeeper through the proxy, told to lose the answers to the next three multi-ops: claims
 * (next epoch + owner node). Its client sees a connection loss each time and reconnects in the
 * same session. The take tries twice more itself, finding its own owner node (replaced; an
 * epoch skipped each time), then reports the third loss; the standby goes back to watching,
 * takes the owner node there for its own, and claims again. It used to give up with
 * -ETIMEDOUT at the first loss, which left a log whose owner had gone with no primary; a
 * retry alone would wait for its own node to go, for ever.
 */
static void standby_lost_answer(struct tw_coord *c)
{
	uint64_t log = 0x2d00000000000000ull | (uint64_t)getpid(), stored = 0;
	struct tcpproxy *px;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *owner = NULL;
	struct sb_run r;
	char url[160], err[1024], who[256] = "";
	pthread_t th;
	int rc;

	px = zk_proxy(url, sizeof(url));
	pcfg(&tc, &cfg, log);
	rc = tw_primary_open(&tc, &cfg, &owner, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "the owner opens the log: %s: %s", tw_strerror(rc), err);
	is_int(append_n(owner, 0, 20), 0, "the owner appends 20 entries");
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	pcfg(&r.tc, &r.cfg, log);
	r.tc.coordinator = url;
	tw_standby_config_init(&r.sc);
	r.sc.wait_ms = 30000; /* without the fix: the wait for its own node ends here */
	r.sc.on_wait = sb_waiting;
	r.sc.wait_arg = &r;
	TAP_REQUIRE(pthread_create(&th, NULL, sb_main, &r) == 0, "standby thread");
	pthread_mutex_lock(&r.mu);
	while (!r.waits && !r.done)
		pthread_cond_wait(&r.cv, &r.mu); /* its watch is on the owner node */
	pthread_mutex_unlock(&r.mu);
	tcpproxy_lose_answer(px, ZK_MULTI_OP, NULL, 3);
	tw_primary_close(owner); /* the owner node goes: the standby claims */
	pthread_join(th, NULL);
	is_int(tcpproxy_answers_lost(px), 3, "the proxy lost the answers to 3 of the standby's "
	       "claims");
	ok(r.rc == 0, "the standby took the log over all the same (%s%s%s)",
	   r.rc ? tw_strerror(r.rc) : "ok", r.rc ? ": " : "", r.err);
	ok(r.rc == 0 && r.st.epoch == 5 && r.st.recovery.entries == 20,
	   "at epoch 5 (1: the owner's; 2-4: the claims whose answers were lost; 5: claimed "
	   "again), with the owner's 20 entries (epoch %" PRIu64 ", %" PRIu64 " entries)",
	   r.st.epoch, r.st.recovery.entries);
	rc = tw__coord_log_info(c, log, &stored, who, sizeof(who));
	ok(rc == 0 && stored == r.st.epoch && who[0], "the coordinator holds its epoch and an "
	   "owner node (%" PRIu64 ": %s)", stored, who);
	if (r.p)
		is_int(append_n(r.p, 20, 5), 0, "the new owner appends");
	tw_primary_close(r.p);
	pthread_mutex_destroy(&r.mu);
	pthread_cond_destroy(&r.cv);
	tcpproxy_stop(px);
}

/* A plain open whose claim's answer is lost: the take reads again once connected, finds its
 * own owner node and replaces it (epoch 2: the first claim made epoch 1). It used to fail the
 * open with -ETIMEDOUT. */
static void open_lost_answer(void)
{
	uint64_t log = 0x2f00000000000000ull | (uint64_t)getpid();
	struct tcpproxy *px;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char url[160], err[1024];
	int rc;

	px = zk_proxy(url, sizeof(url));
	pcfg(&tc, &cfg, log);
	tc.coordinator = url;
	tcpproxy_lose_answer(px, ZK_MULTI_OP, NULL, 1);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "a new log opened through the proxy (%s)", rc ? err : "ok");
	is_int(tcpproxy_answers_lost(px), 1, "the proxy lost the answer to its claim");
	is_int(p ? tw_primary_epoch(p) : 0, 2, "at epoch 2: the lost claim's 1, then its own");
	if (p)
		is_int(append_n(p, 0, 10), 0, "it appends");
	tw_primary_close(p);
	tcpproxy_stop(px);
}

static unsigned unrecorded;

static void count_unrecorded(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	(void)level;
	if (strstr(msg, "not recorded for the log at the coordinator"))
		__atomic_add_fetch(&unrecorded, 1, __ATOMIC_RELAXED);
}

/*
 * A backup's record for a log (logs/<id>/backups/<name>, created when a segment first goes
 * to that backup) whose answer is lost: the primary creates it again once connected
 * (ZNODEEXISTS: it was made) and uses the backup. It used to take the lost answer for a
 * failure and leave a good backup out of the open. The log is opened first without the
 * proxy (its folders and records made), then taken over through it: the record's create
 * then finds the node, and its answer (ZNODEEXISTS) is the one lost.
 */
static void record_lost_answer(void)
{
	uint64_t log = 0x2e00000000000000ull | (uint64_t)getpid();
	struct tcpproxy *px;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char url[160], err[1024], part[64];
	int rc;

	px = zk_proxy(url, sizeof(url));
	pcfg(&tc, &cfg, log);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open the log once: %s: %s", tw_strerror(rc), err);
	tw_primary_close(p);
	p = NULL;
	tc.coordinator = url;
	snprintf(part, sizeof(part), "/logs/%" PRIu64 "/backups/", log);
	tcpproxy_lose_answer(px, ZK_CREATE_OP, part, 1);
	unrecorded = 0;
	tw_diag_set_sink(count_unrecorded, NULL);
	rc = tw_primary_takeover(&tc, &cfg, NULL, NULL, NULL, &p, err, sizeof(err));
	tw_diag_set_sink(NULL, NULL);
	is_int(rc, 0, "the log taken over through the proxy (%s)", rc ? err : "ok");
	is_int(tcpproxy_answers_lost(px), 1, "the proxy lost the answer to a backup's record");
	is_int(__atomic_load_n(&unrecorded, __ATOMIC_RELAXED), 0,
	       "no backup was left out for want of its record");
	if (p)
		is_int(append_n(p, 0, 10), 0, "appends on its 3 backups");
	tw_primary_close(p);
	tcpproxy_stop(px);
}

static int count_recovered(void *arg, const struct tw_recovered_entry *e)
{
	(void)e;
	++*(uint64_t *)arg;
	return 0;
}

/*
 * Takeovers whose reads of the coordinator lose their answer: the listing of the live
 * registrations, then the log's record of backups. Each is asked again once connected, and
 * the takeover recovers every entry. Either used to fail the takeover.
 */
static void takeover_lost_reads(void)
{
	uint64_t log = 0x3000000000000000ull | (uint64_t)getpid();
	struct tcpproxy *px;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char url[160], err[1024], part[2][96];
	const char *what[2] = { "the registrations", "the log's record of backups" };
	int rc;

	px = zk_proxy(url, sizeof(url));
	snprintf(part[0], sizeof(part[0]), "%s/backups", strchr(zk.url + strlen("zk://"), '/'));
	snprintf(part[1], sizeof(part[1]), "/logs/%" PRIu64 "/backups", log);
	pcfg(&tc, &cfg, log);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open: %s: %s", tw_strerror(rc), err);
	TAP_REQUIRE(append_n(p, 0, 20) == 0, "20 appends");
	tw_primary_close(p);
	tc.coordinator = url;
	for (unsigned i = 0; i < 2; i++) {
		uint64_t got = 0;
		struct tw_recover_result res;

		p = NULL;
		tcpproxy_lose_answer(px, ZK_GETCHILDREN_OP, part[i], 1);
		rc = tw_primary_takeover(&tc, &cfg, count_recovered, &got, &res, &p, err,
					 sizeof(err));
		is_int(tcpproxy_answers_lost(px), i + 1, "the proxy lost the answer to the listing "
		       "of %s", what[i]);
		ok(rc == 0 && got == 20, "the takeover asked again and recovered the 20 entries (%s, "
		   "%" PRIu64 ")", rc ? err : "ok", got);
		tw_primary_close(p);
	}
	tcpproxy_stop(px);
}

/*
 * A twd whose registration's answer is lost (its ephemeral node made, the connection closed
 * before the answer): it registers again, finds the node its own session's, and starts. It
 * used to exit at start ("register ...: connection loss").
 */
static void register_lost_answer(struct tw_coord *c)
{
	struct tcpproxy *px;
	char url[160], dir[300], a[160] = "";
	char *args[] = { twd, (char *)"--provider", (char *)prov, (char *)"--dir", dir,
			 (char *)"--buffer-size", (char *)"64K", (char *)"--buffers", (char *)"4",
			 (char *)"--coordinator", url, (char *)"--zone", (char *)"D", NULL };
	struct tw_coord_backup *v = NULL;
	struct proc *t;
	size_t n = 0;
	bool listed = false;

	px = zk_proxy(url, sizeof(url));
	snprintf(dir, sizeof(dir), "%s/lost", root);
	tcpproxy_lose_answer(px, ZK_CREATE_OP, "/backups/b-", 1);
	t = child_ready(args, NULL, 30000, a, sizeof(a), NULL);
	ok(t != NULL, "a twd whose registration's answer was lost starts (%s)", t ? a : "no");
	is_int(tcpproxy_answers_lost(px), 1, "the proxy lost the answer to its registration");
	if (t && tw__coord_list_backups(c, &v, &n) == 0)
		for (size_t i = 0; i < n; i++)
			listed |= !strcmp(v[i].addr, a);
	free(v);
	ok(listed, "and it is registered");
	if (t) {
		proc_kill(t, SIGTERM);
		is_int(proc_wait(t, 30000), 0, "it exits 0 on SIGTERM");
		proc_free(t);
	}
	tcpproxy_stop(px);
}

static void bad_urls(void)
{
	char dir[300], bad_port[64];
	char *a1[] = { twd, (char *)"--dir", dir, (char *)"--coordinator", (char *)"zk://h/x", NULL };
	char *a2[] = { twd, (char *)"--provider", (char *)prov, (char *)"--dir", dir,
		       (char *)"--buffer-size", (char *)"256K", (char *)"--buffers", (char *)"2",
		       (char *)"--coordinator", bad_port, NULL };
	struct cli_out o;
	int st;

	snprintf(dir, sizeof(dir), "%s/bad", root);
	st = cli_run(a1, NULL, NULL, 0, 30000, &o);
	ok(st == 2 && strstr(o.err, "bad coordinator URL") && strstr(o.err, "HOST:PORT"),
	   "twd --coordinator zk://h/x: exit 2 (%d), message says the form", st);
	tap_diag("twd said: %.*s", (int)strcspn(o.err, "\n"), o.err);
	cli_out_free(&o);
	/* A port nothing listens on: the one ZooKeeper had before it stopped is not safe here;
	 * port 1 on 127.0.0.1 is (privileged, unused). */
	snprintf(bad_port, sizeof(bad_port), "zk://127.0.0.1:1/x");
	st = cli_run(a2, (char *const[]){ (char *)"TW_LOG_LEVEL=error", NULL }, NULL, 0, 60000, &o);
	ok(st == 1 && strstr(o.err, "no ZooKeeper server answered"),
	   "twd with no ZooKeeper server: exit 1 (%d) and says so", st);
	{
		const char *l = strstr(o.err, "twd: cannot register");

		tap_diag("twd said: %.*s", l ? (int)strcspn(l, "\n") : 0, l ? l : "");
	}
	cli_out_free(&o);
	/* The ZooKeeper client's own log goes through ours (its errors are our info): at the
	 * default level nothing of it (it used to print ~60 ZOO_ERROR lines to stderr first), with
	 * -v its lines say "zookeeper client:", one a second. */
	st = cli_run(a2, NULL, NULL, 0, 60000, &o);
	ok(st == 1 && cli_lines(o.err) <= 2 && !strstr(o.err, "ZOO_") &&
	   strstr(o.err, "no ZooKeeper server answered"), "the same at the default log level: "
	   "%u lines on stderr, none of the ZooKeeper client's", cli_lines(o.err));
	if (cli_lines(o.err) > 2)
		tap_diag("stderr: %s", o.err);
	cli_out_free(&o);
	{
		char *a3[16];
		int n = 0;

		for (; a2[n]; n++)
			a3[n] = a2[n];
		a3[n++] = (char *)"-v";
		a3[n] = NULL;
		st = cli_run(a3, NULL, NULL, 0, 60000, &o);
		ok(st == 1 && strstr(o.err, "info: zookeeper client: ") && !strstr(o.err, "ZOO_") &&
		   cli_lines(o.err) < 30, "with -v: the client's errors as our info lines, rate "
		   "limited (%u lines)", cli_lines(o.err));
		cli_out_free(&o);
	}
}

int main(int argc, char **argv)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL, *p2 = NULL;
	struct tw_coord *c;
	char err[1024];
	uint64_t log = 0x2c00000000000000ull | (uint64_t)getpid(), acked = 0;
	const uint64_t n1 = 1500, n2 = 700; /* sync appends: slow on sockets */
	int rc, victim = -1, mate = -1;
	uint32_t kill_seg = 0;

	prov = argc > 1 ? argv[1] : "tcp";
	zkserver_require();
	child_tool("tools/twd", twd, sizeof(twd));
	child_tool("tools/twctl", twctl, sizeof(twctl));
	tmpdir_make(root, sizeof(root), NULL, "coordzk");

	zkserver_start(&zk);
	start_twds();
	TAP_REQUIRE(tw__coord_open(zk.url, 5000, &c, err, sizeof(err)) == 0, "coord open: %s", err);
	check_registrations(c);
	check_twctl_ls();

	/* A primary from the coordinator alone. */
	pcfg(&tc, &cfg, log);
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "primary open through the coordinator: %s: %s", tw_strerror(rc), err);
	is_int(tw_primary_epoch(p), 1, "a new log gets epoch 1 from the coordinator");
	{
		char owner[256] = "", want[64];
		uint64_t e = 0;

		snprintf(want, sizeof(want), "pid=%ld", (long)getpid());
		ok(tw__coord_log_info(c, log, &e, owner, sizeof(owner)) == 0 && e == 1 &&
		   strstr(owner, want), "the coordinator holds epoch 1 and our owner node (%s)", owner);
	}
	rc = tw_primary_open(&tc, &cfg, &p2, err, sizeof(err));
	ok(rc == -TW_ELOGEXISTS && !p2 && strstr(err, "owned by another primary"),
	   "a second open of the owned log: -TW_ELOGEXISTS (%s: %s)", tw_strerror(rc), err);
	is_int(append_n(p, 0, n1), 0, "%" PRIu64 " appends through backups found in the registry",
	       n1);
	acked = n1;
	check_zones(log, "before the loss");

	/* Kill the replica in zone A or B of the open segment: its zone mate is the only spare. */
	for (unsigned i = 0; i < 3; i++) {
		int k = idx_of(tw_primary_replica_addr(p, i));

		if (k >= 0 && zone_of[k][0] != 'C' && victim < 0)
			victim = k;
	}
	TAP_REQUIRE(victim >= 0, "no replica in zone A or B");
	mate = victim ^ 1; /* A: 0,1  B: 2,3 */
	{
		struct tw_primary_stats st;

		tw_primary_get_stats(p, &st);
		kill_seg = tw_primary_first_segment(p) + (uint32_t)st.segments - 1;
	}
	tap_diag("killing twd %d (%s, zone %s), replica of segment %u; its zone mate is twd %d",
		 victim, addr[victim], zone_of[victim], kill_seg, mate);
	proc_kill(tw[victim], SIGKILL);
	proc_wait(tw[victim], 10000);
	alive[victim] = false;
	is_int(append_n(p, n1, n2), 0, "%" PRIu64 " more appends after the loss", n2);
	acked += n2;
	{
		bool mate_holds = false;
		struct twc cli;
		struct twc_info info[256];
		int n;

		memset(&cli, 0, sizeof(cli));
		TAP_REQUIRE(twc_connect(&cli, prov, addr[mate]) == 0, "connect to the mate");
		n = twc_list(&cli, log, true, info, 256);
		twc_close(&cli);
		for (int k = 0; k < n; k++)
			mate_holds |= info[k].segment_id == kill_seg;
		ok(mate_holds, "the spare for segment %u is twd %d, the registered backup of zone %s",
		   kill_seg, mate, zone_of[victim]);
	}
	for (unsigned i = 0; i < 3; i++)
		ok(idx_of(tw_primary_replica_addr(p, i)) != victim,
		   "replica %u of the open segment is not the dead twd", i);
	check_zones(log, "after the loss");

	/* Two takeovers race through the coordinator. */
	{
		pthread_barrier_t bar;
		struct racer r[2];
		pthread_t th[2];
		uint64_t stored = 0;
		char owner[256] = "";
		int won = 0;

		pthread_barrier_init(&bar, NULL, 2);
		for (int i = 0; i < 2; i++) {
			memset(&r[i], 0, sizeof(r[i]));
			r[i].log = log;
			r[i].bar = &bar;
			pthread_create(&th[i], NULL, race_main, &r[i]);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		pthread_barrier_destroy(&bar);
		for (int i = 0; i < 2; i++) {
			tap_diag("takeover %d: %s, epoch %" PRIu64 ", %" PRIu64 " entries%s%s", i,
				 r[i].rc ? tw_strerror(r[i].rc) : "ok", r[i].epoch, r[i].entries,
				 r[i].rc ? ": " : "", r[i].rc ? r[i].err : "");
			won += r[i].rc == 0;
		}
		ok(r[0].epoch && r[1].epoch && r[0].epoch != r[1].epoch,
		   "racing takeovers got distinct epochs (%" PRIu64 ", %" PRIu64 ")", r[0].epoch,
		   r[1].epoch);
		ok(won >= 1, "at least one takeover won (%d)", won);
		for (int i = 0; i < 2; i++)
			if (r[i].rc == 0)
				ok(r[i].entries == acked && !r[i].bad,
				   "takeover %d recovered every acknowledged entry in order (%" PRIu64
				   " of %" PRIu64 ", %" PRIu64 " out of place)", i, r[i].entries, acked,
				   r[i].bad);
		ok(tw__coord_log_info(c, log, &stored, owner, sizeof(owner)) == 0 &&
		   stored == (r[0].epoch > r[1].epoch ? r[0].epoch : r[1].epoch),
		   "the coordinator's epoch is the higher one (%" PRIu64 "), owner %s", stored, owner);
		rc = append_n(p, acked, 1);
		ok(rc == -TW_EFENCED || rc == -TW_ENOBACKUP,
		   "the first primary is fenced: its append fails (%s)", tw_strerror(rc));
		/* The winner: the one that succeeded (both may, one after the other: then the
		 * higher epoch overtook the lower). */
		for (int i = 0; i < 2; i++) {
			bool winner = r[i].rc == 0 && (r[1 - i].rc || r[i].epoch > r[1 - i].epoch);

			if (winner)
				is_int(append_n(r[i].p, acked, 1), 0,
				       "the winner (epoch %" PRIu64 ") appends after the recovered tail",
				       r[i].epoch);
		}
		for (int i = 0; i < 2; i++)
			tw_primary_close(r[i].p);
	}
	tw_primary_close(p);

	epochs_in_parallel();
	session_expiry();
	standby_lost_answer(c);
	open_lost_answer();
	record_lost_answer();
	register_lost_answer(c);
	takeover_lost_reads();

	/* Clean shutdown deregisters at once; the killed twd's node goes with its session. */
	{
		struct tw_coord_backup *v = NULL;
		size_t n = 0;
		bool c_gone = true, dead_gone = false;
		double t0 = now_s(), end = t0 + 30;

		proc_kill(tw[4], SIGTERM);
		is_int(proc_wait(tw[4], 30000), 0, "twd 4 (zone C) exits 0 on SIGTERM");
		alive[4] = false;
		if (tw__coord_list_backups(c, &v, &n) == 0)
			for (size_t i = 0; i < n; i++)
				c_gone &= strcmp(v[i].addr, addr[4]) != 0;
		free(v);
		ok(c_gone, "its registration is gone when it has exited (deregistered, no session "
		   "timeout)");
		while (!dead_gone && now_s() < end) {
			bool here = false;

			v = NULL;
			if (tw__coord_watch_backups(c, &v, &n) == 0) /* arms the child watch */
				for (size_t i = 0; i < n; i++)
					here |= !strcmp(v[i].addr, addr[victim]);
			free(v);
			dead_gone = !here;
			if (!dead_gone) /* until the watch fires: the node went */
				tw__coord_wait_backups_changed(c, ms_left(end));
		}
		ok(dead_gone, "the SIGKILLed twd's registration went with its session");
	}
	/* twctl fence through the coordinator: the backups from the log's record, the epoch from
	 * the coordinator (one past the stored one). */
	{
		char logs[32], want[128];
		char *fa[] = { twctl, (char *)"-c", zk.url, (char *)"-p", (char *)prov, (char *)"fence",
			       logs, NULL };
		char *oa[] = { twctl, (char *)"-c", zk.url, (char *)"owner", logs, NULL };
		struct cli_out o;
		uint64_t before = 0;
		char owner[256];
		int st;

		struct tw_coord_backup *rec = NULL;
		size_t nrec = 0;

		snprintf(logs, sizeof(logs), "%#" PRIx64, log);
		tw__coord_log_info(c, log, &before, owner, sizeof(owner));
		/* The fence goes to the backups recorded for the log (every one that was asked to
		 * hold a segment of it), the two stopped ones included: 3 of them answer. */
		is_int(tw__coord_log_backups(c, log, &rec, &nrec), 0, "the log's record of backups");
		free(rec);
		st = cli_run(fa, NULL, NULL, 0, 60000, &o);
		snprintf(want, sizeof(want), "fenced at epoch %" PRIu64 " on 3 of %zu backups",
			 before + 1, nrec);
		ok(st == (nrec == 3 ? 0 : 1) && strstr(o.out, want), "twctl -c URL fence: the %zu "
		   "recorded backups (3 alive), epoch %" PRIu64 " from the coordinator (exit %d: "
		   "%.*s)", nrec, before + 1, st, (int)strcspn(o.out, "\n"), o.out);
		cli_out_free(&o);
		st = cli_run(oa, NULL, NULL, 0, 60000, &o);
		snprintf(want, sizeof(want), "epoch %" PRIu64 " owner (none)", before + 1);
		ok(st == 0 && strstr(o.out, want), "twctl -c URL owner: %.*s",
		   (int)strcspn(o.out, "\n"), o.out);
		cli_out_free(&o);
	}
	/* twctl recover of a log nobody has: "no such log", exit 6, nothing fenced and no record
	 * at the coordinator; --create makes it (it used to do that silently, exit 0). */
	{
		uint64_t nolog = log + 0x1000, epoch = 0;
		char logs[32], owner[256];
		char *ra[] = { twctl, (char *)"-c", zk.url, (char *)"-p", (char *)prov, (char *)"recover",
			       logs, (char *)"--verify", NULL, NULL };
		struct cli_out o;
		int st;

		snprintf(logs, sizeof(logs), "%#" PRIx64, nolog);
		st = cli_run(ra, NULL, NULL, 0, 60000, &o);
		ok(st == 6 && strstr(o.err, "no such log") && strstr(o.err, "nothing was changed"),
		   "twctl -c URL recover of a log nobody has: exit 6, no such log (%d: %.*s)", st,
		   (int)strcspn(o.err, "\n"), o.err);
		cli_out_free(&o);
		is_int(tw__coord_log_info(c, nolog, &epoch, owner, sizeof(owner)), -TW_ENOTFOUND,
		       "and the coordinator has no record of it");
		ra[8] = (char *)"--create";
		st = cli_run(ra, NULL, NULL, 0, 60000, &o);
		cli_out_free(&o);
		epoch = 0;
		if (tw__coord_log_info(c, nolog, &epoch, owner, sizeof(owner)) != 0)
			epoch = 0;
		ok(st == 0 && epoch > 0, "recover --create makes it: exit %d, recorded at epoch %"
		   PRIu64, st, epoch);
	}
	tw__coord_close(c);
	bad_urls();

	/* ZooKeeper gone: a twd still shuts down cleanly (its deregistration fails after the
	 * session timeout, with a message; the flush is not held up for ever). */
	zkserver_stop(&zk);
	proc_kill(tw[2], SIGTERM);
	is_int(proc_wait(tw[2], 60000), 0, "twd 2 exits 0 on SIGTERM with ZooKeeper stopped");
	for (int i = 0; i < NB; i++)
		proc_free(tw[i]);
	tmpdir_remove(root);
	tap_done_testing();
	return tap_exit();
}
