/*
 * tests/integration/kv_history.c — a history checker for twkv (examples/kv, docs/kv.md,
 * "Checking the history") under a nemesis: real twkv processes over a real provider (argv[1]:
 * tcp, sockets or shm) and a real ZooKeeper.
 *
 *   kv_history PROVIDER [--duration S] [--kills N] [--pauses N] [--pause-with-kill N]
 *              [--pause-ms MS] [--connect-timeout MS] [--rpc-timeout MS] [--clients N]
 *              [--keys N]
 *
 * Four servers (three owners of one partition each, r = 2, and a standby for all three, started
 * after the owners opened their logs on tcp and sockets: start order must not matter), 2 s
 * ZooKeeper sessions, and a log memory budget of 16 segments of 32 KiB, so the cleaners run all
 * the time. Client threads (each its own kvc, several requests in flight) PUT and GET a small key
 * set, so reads race writes; every operation's invocation time, completion time and result (ok
 * with version and value, not found, or failed: timed out, refused) is kept in memory. Meanwhile
 * the nemesis, at random times from the seed ($TW_SEED), SIGKILLs a server and starts it again
 * (same ports and directory, as a standby for every partition), or SIGSTOPs one for 2.5 session
 * timeouts (--pause-ms; more than one session timeout) and SIGCONTs it: its lease session expired
 * meanwhile, and it must let its partitions go, open a new session and stand by for every
 * partition by itself (docs/kv.md, "Rejoining"; it is restarted only when it does not, and that
 * fails the test). The victim is, three times in
 * four, a server that serves a partition then. After each event the nemesis waits until every
 * partition is served again and checks that only the victim's changed hands, and measures how
 * long the victim took to stand by for every partition (the standby pool back to one). Every
 * event is logged.
 *
 * --pause-with-kill N adds N events that SIGSTOP one server and, at once, SIGKILL another that
 * serves a partition (the kill restarted as above, the pause ended as above), with a fifth server,
 * a second standby, so that a standby remains whichever is paused. The paused server may be a
 * backup of the victim's logs (the takeover's recovery then gives up on it after the connect
 * timeout) or the standby that would take over. Their unavailability (from the SIGKILL, on the
 * victim's partitions) is printed on its own, against the session timeout + 0.5 s.
 *
 * After the run every key is read once more, and the history is checked:
 *   lost     the final read of a key returns a version below its highest acknowledged PUT's;
 *   stale    a GET that started after a PUT of its key was acknowledged returns an older version
 *            (or nothing);
 *   phantom  a GET returns a value no PUT of that key had been sent with before the GET ended;
 *   resurrection  a GET returns an acknowledged PUT's value X at another version than the
 *            acknowledgement's (the PUT was applied twice: sent again after a lost connection or
 *            an unanswered attempt), and X was read, another value of the key at a later
 *            version, and X again at a later one still: X, Y, X, which no single write of X
 *            explains. Other such duplicates are counted and printed, not failed;
 *   regress  a client thread sees a key's version go down (a GET that started after another
 *            GET of the same key by the same thread ended returns an older version).
 * A server that dies on its own (a crash: not the nemesis' SIGKILL) is logged with its signal or
 * exit status, started again, and fails the test.
 * Each violation is printed with the operations involved; any violation fails the test. The
 * client-visible unavailability per kill (the SIGKILL to the first acknowledged PUT, sent after
 * it, on each partition the victim served) is printed as min/median/max; also per pause; and,
 * on every other partition, the longest a PUT to it waited after an event (listed at 1 s or
 * more; min/median/max over all).
 *
 * The defaults are the CI run: 40 s, 3 kills and 1 pause (under a sanitizer 20 s, 1 and 1).
 * By hand: `--duration 600 --kills 10 --pauses 3` (docs/kv.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv_client.h"
#include "proc.h"
#include "rmtree.h"
#include "tap.h"
#include "zkserver.h"

#define MAXSRV 5 /* three owners, a standby, and with --pause-with-kill a second standby */
#define NPART 3
#define SESSION_MS 2000
#define VALUE_LEN 64
#define DEPTH 4              /* requests in flight per client thread */
#define REQ_TIMEOUT_MS 10000 /* a request's deadline, retries included */
#define CHUNK 65536          /* operations per chunk of a thread's history */
#define MAX_CHUNKS 4096
#define MAX_CLIENTS 16
#define MAX_EVENTS 256
#define SHOW 20              /* violations printed per kind */

static const char *prov;
static char root[256], twkv[512];
static int nsrv = 4;
static unsigned pause_ms = SESSION_MS * 5 / 2; /* a SIGSTOP lasts this long (--pause-ms) */
static char connect_ms[16];                     /* twkv serve --connect-timeout; "": its default */
static char rpc_ms[16];                         /* twkv serve --rpc-timeout; "": its default */
static const char *drive;                        /* twkv serve --drive; NULL: its default */
static struct proc *srv[MAXSRV];
static char srv_port[MAXSRV][16], srv_bport[MAXSRV][64];
static struct kv_cluster map;
static struct zkserver zk;
static uint64_t t_start, t_stop;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Seconds since the start of the run, for the log. */
static double rel(uint64_t t)
{
	return t ? (double)(t - t_start) / 1e9 : -1.0;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* ---------------------------------------------------------------- the history */

enum { OP_PUT, OP_GET };
enum { RES_PENDING, RES_OK, RES_NOTFOUND, RES_FAILED };

struct op {
	uint64_t invoke, complete, version;
	uint32_t got_seq;     /* GET: the value's writer (thread, its op index) */
	uint16_t key;
	uint8_t type, result, got_thread;
	int16_t err;          /* RES_FAILED: -errno (ETIMEDOUT, EIO, ...) or -KVC_EUNKNOWN */
	bool final;           /* the final read after the run */
};

struct cli {
	unsigned id;
	struct kvc *c;
	struct op *chunk[MAX_CHUNKS];
	uint32_t n;           /* operations issued; an op's index is its PUT's value id */
	unsigned inflight;
	uint64_t rng;
	pthread_t th;
};

#define LOAD_THREAD 255 /* the writer of the load phase's values */
#define FINAL_THREAD 254

static struct cli clis[MAX_CLIENTS + 1]; /* the last one: the loader and the final reads */
static unsigned nclients = 4, nkeys = 32;
static char (*keyname)[32];
static uint8_t *keylen;
static unsigned *keypart;
static atomic_bool stop_load;

static struct op *op_at(struct cli *c, uint32_t i)
{
	return &c->chunk[i / CHUNK][i % CHUNK];
}

static struct op *op_new(struct cli *c, uint32_t *idx)
{
	if (c->n % CHUNK == 0) {
		TAP_REQUIRE(c->n / CHUNK < MAX_CHUNKS, "history too long");
		c->chunk[c->n / CHUNK] = calloc(CHUNK, sizeof(struct op));
		TAP_REQUIRE(c->chunk[c->n / CHUNK], "out of memory");
	}
	*idx = c->n;
	return op_at(c, c->n++);
}

/* A PUT's value: who wrote it and with which operation, padded (the bytes are checked). */
static void make_value(char *v, unsigned key, unsigned thread, uint32_t seq)
{
	int n = snprintf(v, VALUE_LEN + 1, "k%u t%u n%u ", key, thread, seq);

	memset(v + n, 'a' + (char)((seq + thread) % 26), (size_t)(VALUE_LEN - n));
}

static atomic_uint_fast64_t bad_values;

static void issue(struct cli *c);

static void done_cb(struct cli *c, uint32_t idx, int status, uint64_t version,
		    const uint8_t *val, uint32_t vlen)
{
	struct op *o = op_at(c, idx);

	o->complete = now_ns();
	o->version = version;
	c->inflight--;
	if (status == 0) {
		o->result = RES_OK;
	} else if (status == -ENOENT && o->type == OP_GET) {
		o->result = RES_NOTFOUND;
	} else {
		o->result = RES_FAILED;
		o->err = (int16_t)(status < -32767 ? -32767 : status);
	}
	if (o->type == OP_GET && status == 0) {
		char want[VALUE_LEN + 1];
		unsigned k, t, s;

		if (vlen != VALUE_LEN || sscanf((const char *)val, "k%u t%u n%u ", &k, &t, &s) != 3 ||
		    k != o->key || t > LOAD_THREAD) {
			o->got_thread = FINAL_THREAD; /* no writer: a phantom */
			o->got_seq = UINT32_MAX;
			atomic_fetch_add(&bad_values, 1);
			return;
		}
		make_value(want, k, t, s);
		if (memcmp(want, val, VALUE_LEN)) {
			o->got_thread = FINAL_THREAD;
			o->got_seq = UINT32_MAX;
			atomic_fetch_add(&bad_values, 1);
			return;
		}
		o->got_thread = (uint8_t)t;
		o->got_seq = s;
	}
}

/* A request's callback argument: its thread and its operation's index. */
struct slot {
	struct cli *c;
	uint32_t idx;
};

static void slot_cb(void *arg, int status, uint64_t version, const uint8_t *val, uint32_t vlen)
{
	struct slot s = *(struct slot *)arg;

	free(arg);
	done_cb(s.c, s.idx, status, version, val, vlen);
	if (!atomic_load(&stop_load) && s.c->id < nclients)
		issue(s.c);
}

static struct slot *slot_get(struct cli *c, uint32_t idx)
{
	struct slot *s = malloc(sizeof(*s));

	TAP_REQUIRE(s, "out of memory");
	s->c = c;
	s->idx = idx;
	return s;
}

static void submit(struct cli *c, unsigned key, bool put, bool final)
{
	uint32_t idx;
	struct op *o = op_new(c, &idx);
	struct slot *s = slot_get(c, idx);
	char v[VALUE_LEN + 1];
	int rc;

	o->key = (uint16_t)key;
	o->type = put ? OP_PUT : OP_GET;
	o->final = final;
	c->inflight++;
	o->invoke = now_ns();
	if (put) {
		make_value(v, key, c->id == nclients ? LOAD_THREAD : c->id, idx);
		rc = kvc_put(c->c, keyname[key], keylen[key], v, VALUE_LEN, slot_cb, s);
	} else {
		rc = kvc_get(c->c, keyname[key], keylen[key], slot_cb, s);
	}
	TAP_REQUIRE(rc == 0, "submit: %s", strerror(-rc));
}

static void issue(struct cli *c)
{
	uint64_t r = xorshift(&c->rng);

	submit(c, (unsigned)(r % nkeys), (r >> 32) % 2 == 0, false);
}

static void *client_main(void *arg)
{
	struct cli *c = arg;

	for (int i = 0; i < DEPTH; i++)
		issue(c);
	while (c->inflight) {
		int rc = kvc_poll(c->c, 100000);

		TAP_REQUIRE(rc >= 0, "kvc_poll: %s", strerror(-rc));
	}
	return NULL;
}

static void open_client(struct cli *c, unsigned timeout_ms)
{
	char err[512];
	const char *addrs[MAXSRV];
	int rc;

	for (int i = 0; i < nsrv; i++)
		addrs[i] = map.servers[i].kv;
	rc = kvc_open(addrs, nsrv, timeout_ms, &c->c, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "kvc_open: %s", err);
}

/* ---------------------------------------------------------------- the cluster */

static void serve_args(int i, char *dir, size_t dlen, char **args, bool restart)
{
	int n = 0;

	snprintf(dir, dlen, "%s/s%d", root, i);
	args[n++] = twkv;
	args[n++] = (char *)"serve";
	args[n++] = (char *)"--provider";
	args[n++] = (char *)prov;
	args[n++] = (char *)"--dir";
	args[n++] = dir;
	args[n++] = (char *)"--segment-size";
	args[n++] = (char *)"32K";
	args[n++] = (char *)"--memory";
	args[n++] = (char *)"512K";
	args[n++] = (char *)"--session-timeout";
	args[n++] = (char *)"2000";
	args[n++] = (char *)"--buffers";
	args[n++] = (char *)"8";
	if (connect_ms[0]) {
		args[n++] = (char *)"--connect-timeout";
		args[n++] = connect_ms;
	}
	if (rpc_ms[0]) {
		args[n++] = (char *)"--rpc-timeout";
		args[n++] = rpc_ms;
	}
	if (drive) {
		args[n++] = (char *)"--drive";
		args[n++] = (char *)drive;
	}
	if (restart) {
		args[n++] = (char *)"--port";
		args[n++] = srv_port[i];
	}
	/* shm: the embedded backup is named after its --backup-port from the start, so that a
	 * restart keeps its address (docs/fabric.md "Named shm endpoints"); a name of this run. */
	if (!strcmp(prov, "shm") && !srv_bport[i][0])
		snprintf(srv_bport[i], sizeof(srv_bport[i]), "kvh%d-%d", (int)getpid(), i);
	if (restart || !strcmp(prov, "shm")) {
		args[n++] = (char *)"--backup-port";
		args[n++] = srv_bport[i];
	}
	args[n] = NULL;
}

static void start_servers(void)
{
	for (int i = 0; i < nsrv; i++) {
		char dir[300], line[512], *kv, *bk, *args[32];
		int rc;

		serve_args(i, dir, sizeof(dir), args, false);
		srv[i] = proc_spawn(args, NULL);
		TAP_REQUIRE(srv[i], "spawn %s", twkv);
		rc = proc_wait_line(srv[i], "ready ", line, sizeof(line), 30000);
		TAP_REQUIRE(rc >= 0, "server %d did not get ready: %s", i, strerror(-rc));
		kv = strstr(line, "kv=");
		bk = strstr(line, "backup=");
		TAP_REQUIRE(kv && bk, "ready line: %s", line);
		*strchr(kv, ' ') = 0;
		bk[strcspn(bk, " \n")] = 0;
		snprintf(map.servers[i].kv, KV_ADDR_MAX, "%s", kv + 3);
		snprintf(map.servers[i].backup, KV_ADDR_MAX, "%s", bk + 7);
		snprintf(srv_port[i], sizeof(srv_port[i]), "%s", strrchr(kv + 3, ':') + 1);
		if (strcmp(prov, "shm")) /* shm: named by us (serve_args) */
			snprintf(srv_bport[i], sizeof(srv_bport[i]), "%s",
				 strrchr(bk + 7, ':') ? strrchr(bk + 7, ':') + 1 : bk + 7);
		if (i < NPART)
			map.servers[i].owns = UINT64_C(1) << i;
		else
			map.servers[i].standby = (UINT64_C(1) << NPART) - 1;
	}
	map.nservers = nsrv;
	map.partitions = NPART;
	map.replicas = 2;
	map.log_base = 4400;
	snprintf(map.coordinator, sizeof(map.coordinator), "%s", zk.url);
}

/* The partitions server i serves now (its STATS' "part N" lines); 0 when it does not answer. */
static uint64_t served_by(int i)
{
	uint8_t st;
	char *body = NULL;
	uint32_t len;
	uint64_t mask = 0;

	if (kv_call(map.servers[i].kv, KV_OP_STATS, NULL, 0, 3000, &st, &body, &len) == 0 &&
	    st == KV_S_OK)
		for (const char *p = body; (p = strstr(p, "part ")); p += 5) {
			unsigned n;

			if ((p == body || p[-1] == '\n') && sscanf(p, "part %u ", &n) == 1 &&
			    n < NPART)
				mask |= UINT64_C(1) << n;
		}
	free(body);
	return mask;
}

/* The partitions server i stands by for now (its STATS' "standby_for N"); -1 when it does not
 * answer. */
static int standby_for(int i)
{
	uint8_t st;
	char *body = NULL;
	const char *at;
	uint32_t len;
	int n = -1;

	if (kv_call(map.servers[i].kv, KV_OP_STATS, NULL, 0, 3000, &st, &body, &len) == 0 &&
	    st == KV_S_OK && (at = strstr(body, "\nstandby_for ")) != NULL)
		n = atoi(at + 13);
	free(body);
	return n;
}

/* Poll server i's STATS until it stands by for every partition, up to limit_ms: the time it
 * took (ns), or UINT64_MAX. */
static uint64_t wait_standby_all(int i, unsigned limit_ms)
{
	uint64_t t0 = now_ns();

	for (;;) {
		struct timespec ts = { 0, 20000000 };

		if (standby_for(i) == NPART)
			return now_ns() - t0;
		if (now_ns() - t0 > (uint64_t)limit_ms * 1000000u)
			return UINT64_MAX;
		nanosleep(&ts, NULL); /* polling a condition the server reports, every 20 ms */
	}
}

/* Who serves each partition now (-1: nobody answered for it). */
static void owners_now(int owner[NPART])
{
	for (unsigned p = 0; p < NPART; p++)
		owner[p] = -1;
	for (int i = 0; i < nsrv; i++) {
		uint64_t m = srv[i] ? served_by(i) : 0;

		for (unsigned p = 0; p < NPART; p++)
			if (m >> p & 1)
				owner[p] = i;
	}
}

/* Start server i again on its ports and directory, and configure it (CONFIGURE) as a standby
 * for every partition: the map it gets names it so, with the backup address it has now (the
 * same: on shm the backup is named after its --backup-port too), and gives what it owned at
 * the start to another server (a map needs one owner per partition; a server acts on its own
 * role only, and clients learn the current owners from NOT_OWNER answers). */
static void restart(int i)
{
	char dir[300], line[512], text[4096], *args[32], *bk, *body = NULL;
	struct kv_cluster m;
	uint8_t st = 0;
	uint32_t blen;
	int rc = -1, n;

	serve_args(i, dir, sizeof(dir), args, true);
	/* The port may still be held by the dead process' sockets for a moment: a few tries. */
	for (int attempt = 0; attempt < 20 && rc < 0; attempt++) {
		srv[i] = proc_spawn(args, NULL);
		TAP_REQUIRE(srv[i], "spawn %s", twkv);
		rc = proc_wait_line(srv[i], "ready ", line, sizeof(line), 30000);
		if (rc < 0) {
			struct timespec ts = { 0, 250000000 };

			proc_kill(srv[i], SIGKILL);
			proc_wait(srv[i], 10000);
			proc_free(srv[i]);
			srv[i] = NULL;
			tap_diag("restart of server %d failed (%s), trying again", i, strerror(-rc));
			nanosleep(&ts, NULL); /* a back-off, not a synchronisation */
		}
	}
	TAP_REQUIRE(rc >= 0, "server %d could not be restarted on its ports", i);
	bk = strstr(line, "backup=");
	TAP_REQUIRE(bk, "ready line: %s", line);
	bk[strcspn(bk, " \n")] = 0;
	snprintf(map.servers[i].backup, KV_ADDR_MAX, "%s", bk + 7);
	m = map;
	m.servers[(i + 1) % nsrv].owns |= m.servers[i].owns;
	m.servers[i].owns = 0;
	m.servers[i].standby = (UINT64_C(1) << NPART) - 1;
	n = snprintf(text, sizeof(text), "you %d\n", i);
	rc = kv_cluster_format(&m, text + n, sizeof(text) - (size_t)n);
	TAP_REQUIRE(rc > 0, "format the map");
	rc = kv_call(map.servers[i].kv, KV_OP_CONFIGURE, text, (uint32_t)(n + rc), 30000, &st,
		     &body, &blen);
	TAP_REQUIRE(rc == 0 && st == KV_S_OK, "configure the restarted server %d: %s", i,
		    rc ? strerror(-rc) : body);
	free(body);
}

/* Configure servers 0 .. NPART - 1 (the owners) one by one, each once the one before has opened
 * its logs, while the standby (server NPART) is down: then start the standby on its ports and
 * configure it. The owners' logs find its backup unreachable at their open and must take it up
 * once it runs (start order does not matter). False when a CONFIGURE failed (err says why). */
static bool configure_standby_late(char *err, size_t errlen)
{
	char text[4096];
	int sb = NPART;

	proc_kill(srv[sb], SIGKILL);
	proc_wait(srv[sb], 10000);
	proc_free(srv[sb]);
	srv[sb] = NULL;
	for (int i = 0; i < nsrv; i++) {
		char *body = NULL;
		uint8_t st = 0;
		uint32_t blen;
		int n, rc;

		if (i == sb)
			continue;
		n = snprintf(text, sizeof(text), "you %d\n", i);

		rc = kv_cluster_format(&map, text + n, sizeof(text) - (size_t)n);
		TAP_REQUIRE(rc > 0, "format the map");
		rc = kv_call(map.servers[i].kv, KV_OP_CONFIGURE, text, (uint32_t)(n + rc), 60000,
			     &st, &body, &blen);
		if (rc != 0 || st != KV_S_OK) {
			snprintf(err, errlen, "server %d: %s", i, rc ? strerror(-rc) : body);
			free(body);
			return false;
		}
		free(body);
	}
	tap_diag("owners configured with the standby (server %d) down; starting it", sb);
	restart(sb);
	return true;
}

/* ---------------------------------------------------------------- the nemesis */

enum ev_kind { EV_KILL, EV_PAUSE, EV_PAUSE_KILL };

struct event {
	uint64_t t, t_end;
	int victim;       /* the server killed (EV_KILL, EV_PAUSE_KILL) or paused (EV_PAUSE) */
	bool pause;       /* EV_PAUSE */
	enum ev_kind kind;
	int paused;       /* EV_PAUSE_KILL: the server paused at the kill; else -1 */
	uint64_t parts;   /* what the victim served just before */
	uint64_t pparts;  /* EV_PAUSE_KILL: what the paused server served just before */
	bool rejoined;    /* a pause: the paused server stood by again by itself (no restart) */
	uint64_t pool_ns; /* restart (kill) or SIGCONT (pause) -> the victim stands by for every
			   * partition; UINT64_MAX: not within the limit */
	uint64_t ppool_ns; /* EV_PAUSE_KILL: SIGCONT -> the paused server stands by for every
			    * partition */
	uint64_t moved;   /* partitions the victim did not serve whose server changed */
	bool settled;     /* every partition had a server again afterwards */
};
#define POOL_LIMIT_MS 10000   /* the standby pool is back to one within this */
#define SETTLE_LIMIT_MS 30000 /* every partition served again within this after an event */
static struct event events[MAX_EVENTS];
static unsigned nevents;

static unsigned crashes; /* servers that died on their own (not the nemesis' SIGKILL) */

/* Whether server i died on its own (a crash, an exit): counted and logged once, and true. */
static bool crashed(int i, const char *when)
{
	int st;

	if (!srv[i] || proc_alive(srv[i]))
		return false;
	st = proc_wait(srv[i], 0);
	crashes++;
	tap_diag("%7.2f s server %d died on its own %s (%s %d): a crash", rel(now_ns()), i, when,
		 st >= 128 ? "signal" : "exit status", st >= 128 ? st - 128 : st);
	proc_free(srv[i]);
	srv[i] = NULL;
	return true;
}

static void sleep_until(uint64_t t)
{
	uint64_t now = now_ns();

	if (t > now) {
		struct timespec ts = { (time_t)((t - now) / 1000000000u),
				       (long)((t - now) % 1000000000u) };
		nanosleep(&ts, NULL); /* the nemesis' schedule, not a synchronisation */
	}
}

/* SIGCONT server v, paused since `since`, and wait until it stands by for every partition by
 * itself (its lease session expired during the pause: it lets its partitions go, opens a new
 * session and stands by): the time that took (ns), or UINT64_MAX, and then it was restarted. */
static uint64_t resume(int v, uint64_t since)
{
	uint64_t t_back, pool;

	sleep_until(since + (uint64_t)pause_ms * 1000000u);
	proc_kill(srv[v], SIGCONT);
	t_back = now_ns();
	pool = wait_standby_all(v, POOL_LIMIT_MS);
	if (pool != UINT64_MAX) {
		tap_diag("%7.2f s nemesis: SIGCONT server %d; it stands by for every partition again "
			 "by itself %.0f ms later", rel(t_back), v, (double)pool / 1e6);
		return pool;
	}
	tap_diag("%7.2f s nemesis: SIGCONT server %d; no standby after %d ms: restarting it",
		 rel(t_back), v, POOL_LIMIT_MS);
	if (!crashed(v, "after its SIGCONT")) {
		proc_kill(srv[v], SIGTERM);
		if (proc_wait(srv[v], 30000) < 0 && proc_alive(srv[v])) {
			proc_kill(srv[v], SIGKILL);
			proc_wait(srv[v], 10000);
		}
		proc_free(srv[v]);
		srv[v] = NULL;
	}
	restart(v);
	return UINT64_MAX;
}

/* SIGKILL server v and start it again as a standby for every partition. */
static void kill_restart(struct event *ev, int v)
{
	if (!crashed(v, "before its SIGKILL")) {
		TAP_REQUIRE(proc_kill(srv[v], SIGKILL) == 0, "SIGKILL server %d", v);
		proc_wait(srv[v], 10000);
		proc_free(srv[v]);
		srv[v] = NULL;
	}
	tap_diag("%7.2f s nemesis: SIGKILL server %d (serving %#" PRIx64 "); restarting it",
		 rel(ev->t), v, ev->parts);
	restart(v);
	ev->t_end = now_ns();
	ev->pool_ns = wait_standby_all(v, POOL_LIMIT_MS);
	tap_diag("%7.2f s nemesis: server %d ready again (a standby for every partition %.0f ms "
		 "after the restart)", rel(ev->t_end), v,
		 ev->pool_ns == UINT64_MAX ? -1.0 : (double)ev->pool_ns / 1e6);
}

static void nemesis(uint64_t seed, unsigned duration_s, unsigned kills, unsigned pauses,
		    unsigned pause_kills)
{
	uint64_t rng = seed | 1, end = t_start + (uint64_t)duration_s * 1000000000u;
	unsigned total = kills + pauses + pause_kills, kleft = kills, pleft = pauses;
	unsigned pkleft = pause_kills;
	uint64_t gap = (uint64_t)duration_s * 1000000000u / (total + 1);

	for (unsigned e = 0; e < total && e < MAX_EVENTS; e++) {
		struct event *ev = &events[nevents];
		/* Evenly spread, each moved by up to a quarter of the gap. */
		uint64_t at = t_start + gap * (e + 1) - gap / 4 + xorshift(&rng) % (gap / 2 + 1);
		uint64_t pick = xorshift(&rng) % (kleft + pleft + pkleft);
		enum ev_kind kind = pick < pleft ? EV_PAUSE : pick < pleft + pkleft ? EV_PAUSE_KILL :
					   EV_KILL;
		int v, owners[MAXSRV], nown = 0, before[NPART], after[NPART];

		sleep_until(at);
		for (int i = 0; i < nsrv; i++)
			if (crashed(i, "between events"))
				restart(i);
		/* Three times in four a server that serves a partition (the outage is measured),
		 * else any; a kill with a pause always kills one that serves, and pauses another
		 * (any: an owner, a backup of the victim's logs, or a standby). */
		owners_now(before);
		for (int i = 0; i < nsrv; i++)
			for (unsigned p = 0; p < NPART; p++)
				if (before[p] == i) {
					owners[nown++] = i;
					break;
				}
		v = (int)(xorshift(&rng) % (uint64_t)nsrv);
		if (nown && (kind == EV_PAUSE_KILL || xorshift(&rng) % 4))
			v = owners[xorshift(&rng) % (uint64_t)nown];
		ev->victim = v;
		ev->kind = kind;
		ev->pause = kind == EV_PAUSE;
		ev->paused = -1;
		ev->parts = served_by(v);
		if (kind == EV_PAUSE_KILL) {
			ev->paused = (v + 1 + (int)(xorshift(&rng) % (uint64_t)(nsrv - 1))) % nsrv;
			ev->pparts = served_by(ev->paused);
		}
		ev->t = now_ns();
		switch (kind) {
		case EV_PAUSE:
			pleft--;
			TAP_REQUIRE(proc_kill(srv[v], SIGSTOP) == 0, "SIGSTOP server %d", v);
			tap_diag("%7.2f s nemesis: SIGSTOP server %d (serving %#" PRIx64 ") for %d ms",
				 rel(ev->t), v, ev->parts, pause_ms);
			ev->pool_ns = resume(v, ev->t);
			ev->rejoined = ev->pool_ns != UINT64_MAX;
			ev->t_end = now_ns();
			break;
		case EV_PAUSE_KILL:
			pkleft--;
			TAP_REQUIRE(proc_kill(srv[ev->paused], SIGSTOP) == 0, "SIGSTOP server %d",
				    ev->paused);
			ev->t = now_ns();
			tap_diag("%7.2f s nemesis: SIGSTOP server %d (serving %#" PRIx64 ") for %d ms, "
				 "and at once:", rel(ev->t), ev->paused, ev->pparts, pause_ms);
			kill_restart(ev, v);
			ev->ppool_ns = resume(ev->paused, ev->t);
			ev->rejoined = ev->ppool_ns != UINT64_MAX;
			break;
		case EV_KILL:
			kleft--;
			kill_restart(ev, v);
			break;
		}
		/* Every partition served again; which ones changed hands. */
		for (uint64_t t0 = now_ns();;) {
			struct timespec ts = { 0, 50000000 };
			bool all = true;

			owners_now(after);
			for (unsigned p = 0; p < NPART; p++)
				all = all && after[p] >= 0;
			if (all || now_ns() - t0 > (uint64_t)SETTLE_LIMIT_MS * 1000000u) {
				ev->settled = all;
				break;
			}
			nanosleep(&ts, NULL); /* polling the servers' STATS every 50 ms */
		}
		for (unsigned p = 0; p < NPART; p++)
			if (!((ev->parts | ev->pparts) >> p & 1) && before[p] >= 0 &&
			    after[p] != before[p])
				ev->moved |= UINT64_C(1) << p;
		tap_diag("%7.2f s nemesis: partitions served by %d %d %d before, %d %d %d after%s",
			 rel(now_ns()), before[0], before[1], before[2], after[0], after[1], after[2],
			 ev->moved ? " (a partition the victim did not serve moved)" : "");
		nevents++;
	}
	sleep_until(end);
}

/* ---------------------------------------------------------------- the checks */

struct ref {
	uint64_t t;        /* sort key */
	uint64_t version;
	uint16_t key;
	uint8_t thread;
	uint32_t idx;
};

static struct op *ref_op(const struct ref *r)
{
	return op_at(&clis[r->thread == LOAD_THREAD || r->thread == FINAL_THREAD ? nclients :
			    r->thread], r->idx);
}

static int by_key_t(const void *a, const void *b)
{
	const struct ref *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

static int by_thread_key_t(const void *a, const void *b)
{
	const struct ref *x = a, *y = b;

	if (x->thread != y->thread)
		return x->thread < y->thread ? -1 : 1;
	return by_key_t(a, b);
}

static void show_op(const char *what, const struct ref *r)
{
	const struct op *o = ref_op(r);
	static const char *res[] = { "pending", "ok", "not found", "failed" };

	if (o->type == OP_PUT)
		tap_diag("    %s: thread %u op %u PUT key %u invoked %.3f s completed %.3f s: %s "
			 "version %" PRIu64 "%s%s", what, r->thread, r->idx, o->key, rel(o->invoke),
			 rel(o->complete), res[o->result], o->version, o->err ? ", " : "",
			 o->err ? kvc_strerror(o->err) : "");
	else
		tap_diag("    %s: thread %u op %u GET%s key %u invoked %.3f s completed %.3f s: %s "
			 "version %" PRIu64 " value of thread %u op %u", what, r->thread, r->idx,
			 o->final ? " (final)" : "", o->key, rel(o->invoke), rel(o->complete),
			 res[o->result], o->version, o->got_thread, o->got_seq);
}

static unsigned thread_index(unsigned t)
{
	return t == LOAD_THREAD ? nclients : t;
}

/* The PUT that wrote a GET's value, or NULL (no such PUT, or one of another key). */
static struct op *writer_of(const struct op *g)
{
	unsigned t = g->got_thread;
	struct cli *c;

	if (t != LOAD_THREAD && t >= nclients)
		return NULL;
	c = &clis[thread_index(t)];
	if (g->got_seq >= c->n)
		return NULL;
	return op_at(c, g->got_seq);
}

struct counts {
	uint64_t puts, puts_ok, puts_failed, gets, gets_ok, gets_failed;
	uint64_t lost, stale, phantom, regress, duplicate, dup_around, dup_read_between;
	uint64_t resurrect;
};

static void check(struct counts *k)
{
	size_t nput = 0, nget = 0, cap = 0;
	struct ref *puts, *gets, *byc;

	for (unsigned t = 0; t <= nclients; t++)
		cap += clis[t].n;
	puts = calloc(cap + 1, sizeof(*puts));
	gets = calloc(cap + 1, sizeof(*gets));
	byc = calloc(cap + 1, sizeof(*byc));
	TAP_REQUIRE(puts && gets && byc, "out of memory");
	for (unsigned t = 0; t <= nclients; t++) {
		struct cli *c = &clis[t];

		for (uint32_t i = 0; i < c->n; i++) {
			struct op *o = op_at(c, i);
			struct ref r = { 0, o->version, o->key,
					 (uint8_t)(t == nclients ? (o->final ? FINAL_THREAD : LOAD_THREAD) :
						   t), i };

			if (o->type == OP_PUT) {
				k->puts++;
				k->puts_ok += o->result == RES_OK;
				k->puts_failed += o->result == RES_FAILED;
				if (o->result == RES_OK) {
					r.t = o->complete;
					puts[nput++] = r;
				}
			} else {
				k->gets++;
				k->gets_ok += o->result == RES_OK;
				k->gets_failed += o->result == RES_FAILED;
				if (o->result == RES_OK || o->result == RES_NOTFOUND) {
					r.t = o->invoke;
					r.version = o->result == RES_OK ? o->version : 0;
					gets[nget++] = r;
				}
			}
		}
	}

	/* Phantoms: every value read was sent by a PUT of that key before the GET ended. A value
	 * read at another version than its PUT's acknowledgement said is a PUT applied twice (a
	 * request sent again after a lost connection or an unanswered attempt, docs/kv.md,
	 * "Clients"): counted and shown; a violation (resurrection) when the reads show X, Y, X. */
	for (size_t i = 0; i < nget; i++) {
		struct op *g = ref_op(&gets[i]), *w;

		if (g->result != RES_OK)
			continue;
		w = writer_of(g);
		if (w && w->type == OP_PUT && w->key == g->key && w->invoke < g->complete &&
		    (w->result != RES_OK || w->version == g->version))
			continue;
		if (w && w->type == OP_PUT && w->key == g->key && w->invoke < g->complete) {
			uint64_t lo = w->version < g->version ? w->version : g->version;
			uint64_t hi = w->version ^ g->version ^ lo;
			size_t put_between = SIZE_MAX, get_between = SIZE_MAX, x_lo = SIZE_MAX;
			size_t x_hi = SIZE_MAX;
			struct ref wr = { 0, 0, w->key, g->got_thread, g->got_seq };
			bool proven;

			k->duplicate++;
			/* Looked into for the first few hundred only: each is a pass over all. The
			 * reads of X: its lowest and highest version read (x_lo, x_hi); a read of
			 * another value between those two is proof (X, Y, X read); one between X's
			 * lowest read and its acknowledgement only says that the acknowledgement
			 * orders X after a value that was read after X. */
			for (size_t j = 0; j < nget && k->duplicate < 256; j++) {
				const struct op *o = ref_op(&gets[j]);

				if (gets[j].key != g->key || o->result != RES_OK ||
				    o->got_thread != g->got_thread || o->got_seq != g->got_seq)
					continue;
				if (x_lo == SIZE_MAX || gets[j].version < gets[x_lo].version)
					x_lo = j;
				if (x_hi == SIZE_MAX || gets[j].version > gets[x_hi].version)
					x_hi = j;
			}
			if (x_lo != SIZE_MAX && gets[x_hi].version > hi)
				hi = gets[x_hi].version;
			for (size_t j = 0; j < nput && put_between == SIZE_MAX && k->duplicate < 256;
			     j++)
				if (puts[j].key == g->key && puts[j].version > lo &&
				    puts[j].version < hi)
					put_between = j;
			for (size_t j = 0; j < nget && x_lo != SIZE_MAX; j++) {
				const struct op *o = ref_op(&gets[j]);

				if (gets[j].key == g->key && o->result == RES_OK &&
				    gets[j].version > gets[x_lo].version && gets[j].version < hi &&
				    (o->got_thread != g->got_thread || o->got_seq != g->got_seq) &&
				    (get_between == SIZE_MAX || gets[j].version < gets[x_hi].version))
					get_between = j;
			}
			proven = get_between != SIZE_MAX &&
				 gets[get_between].version < gets[x_hi].version;
			k->dup_around += put_between != SIZE_MAX;
			k->dup_read_between += get_between != SIZE_MAX && !proven;
			if (proven ? k->resurrect++ < SHOW : k->duplicate <= SHOW) {
				tap_diag("%s: a PUT's value read at version %" PRIu64 ", its "
					 "acknowledgement said %" PRIu64 " (applied twice)%s",
					 proven ? "resurrection" : "duplicate", g->version, w->version,
					 proven ? "; X read, another value read at a later version, X "
					 "read again at a later one still: X, Y, X" :
					 get_between != SIZE_MAX ? "; another value was read at a version "
					 "between X's first read and its acknowledgement" :
					 put_between != SIZE_MAX ? "; another PUT of the key was "
					 "acknowledged between the two versions" : "");
				show_op("get", &gets[i]);
				show_op("its writer", &wr);
				if (x_lo != SIZE_MAX) {
					show_op("X's lowest read", &gets[x_lo]);
					show_op("X's highest read", &gets[x_hi]);
				}
				if (put_between != SIZE_MAX)
					show_op("the PUT between", &puts[put_between]);
				if (get_between != SIZE_MAX)
					show_op("the GET between", &gets[get_between]);
			}
			continue;
		}
		if (k->phantom++ < SHOW) {
			tap_diag("phantom: a value no PUT of the key sent before the GET ended");
			show_op("get", &gets[i]);
			if (w) {
				struct ref wr = { 0, 0, w->key, g->got_thread, g->got_seq };

				show_op("its writer", &wr);
			}
		}
	}

	/* Stale reads and lost writes: per key, the acknowledged PUTs by completion and the GETs by
	 * invocation; a GET must see at least the highest version acknowledged before it began. */
	qsort(puts, nput, sizeof(*puts), by_key_t);
	qsort(gets, nget, sizeof(*gets), by_key_t);
	for (size_t i = 0, j = 0; i < nget;) {
		uint16_t key = gets[i].key;
		size_t best = SIZE_MAX;

		while (j < nput && puts[j].key < key)
			j++;
		for (; i < nget && gets[i].key == key; i++) {
			struct op *g = ref_op(&gets[i]);

			for (; j < nput && puts[j].key == key && puts[j].t < gets[i].t; j++)
				if (best == SIZE_MAX || puts[j].version > puts[best].version)
					best = j;
			if (best == SIZE_MAX || gets[i].version >= puts[best].version)
				continue;
			if (g->final ? k->lost++ < SHOW : k->stale++ < SHOW) {
				tap_diag("%s: key %u read version %" PRIu64 ", below version %" PRIu64
					 " acknowledged before the read began",
					 g->final ? "lost write" : "stale read", key, gets[i].version,
					 puts[best].version);
				show_op("get", &gets[i]);
				show_op("acknowledged put", &puts[best]);
			}
		}
	}

	/* Regressions: per client thread and key, a GET that began after another ended sees at
	 * least its version. */
	memcpy(byc, gets, nget * sizeof(*gets));
	for (size_t i = 0; i < nget; i++)
		byc[i].t = ref_op(&byc[i])->complete;
	qsort(gets, nget, sizeof(*gets), by_thread_key_t);
	qsort(byc, nget, sizeof(*byc), by_thread_key_t);
	for (size_t i = 0, j = 0; i < nget;) {
		uint8_t th = gets[i].thread;
		uint16_t key = gets[i].key;
		size_t best = SIZE_MAX;

		while (j < nget && (byc[j].thread < th || (byc[j].thread == th && byc[j].key < key)))
			j++;
		for (; i < nget && gets[i].thread == th && gets[i].key == key; i++) {
			for (; j < nget && byc[j].thread == th && byc[j].key == key &&
			       byc[j].t < gets[i].t; j++)
				if (best == SIZE_MAX || byc[j].version > byc[best].version)
					best = j;
			if (th == LOAD_THREAD || th == FINAL_THREAD || best == SIZE_MAX ||
			    gets[i].version >= byc[best].version)
				continue;
			if (k->regress++ < SHOW) {
				tap_diag("version regression: thread %u read key %u at version %" PRIu64
					 " after it had read version %" PRIu64, th, key, gets[i].version,
					 byc[best].version);
				show_op("earlier get", &byc[best]);
				show_op("later get", &gets[i]);
			}
		}
	}
	free(puts);
	free(gets);
	free(byc);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static const char *kind_name(enum ev_kind kind, bool paused)
{
	return kind == EV_KILL ? "kill" : kind == EV_PAUSE ? "pause" :
	       paused ? "pause with a kill" : "kill with a pause";
}

/* For each event of a kind and each partition its victim served (`paused`: for a kill with a
 * pause, each partition the paused server served): from the signal to the first acknowledged
 * PUT on that partition sent after it. The median in *median_ms (UINT64_MAX: none). */
static void unavailability(enum ev_kind kind, bool paused, uint64_t *median_ms)
{
	uint64_t ms[MAX_EVENTS * NPART];
	unsigned n = 0, never = 0;
	const char *what = kind_name(kind, paused);

	*median_ms = UINT64_MAX;
	for (unsigned e = 0; e < nevents; e++) {
		uint64_t parts = paused ? events[e].pparts : events[e].parts;
		int who = paused ? events[e].paused : events[e].victim;

		if (events[e].kind != kind)
			continue;
		for (unsigned p = 0; p < NPART; p++) {
			uint64_t first = UINT64_MAX;

			if (!(parts >> p & 1))
				continue;
			for (unsigned t = 0; t < nclients; t++)
				for (uint32_t i = 0; i < clis[t].n; i++) {
					struct op *o = op_at(&clis[t], i);

					if (o->type == OP_PUT && o->result == RES_OK &&
					    keypart[o->key] == p && o->invoke >= events[e].t &&
					    o->complete < first)
						first = o->complete;
				}
			if (first == UINT64_MAX) {
				never++;
				tap_diag("%s at %.2f s: partition %u had no acknowledged PUT after it",
					 what, rel(events[e].t), p);
				continue;
			}
			ms[n] = (first - events[e].t) / 1000000u;
			tap_diag("%s of server %d at %.2f s: partition %u unavailable for %" PRIu64
				 " ms", what, who, rel(events[e].t), p, ms[n]);
			n++;
		}
	}
	if (n == 0) {
		tap_diag("unavailability per %s: no victim served a partition", what);
		return;
	}
	qsort(ms, n, sizeof(ms[0]), cmp_u64);
	*median_ms = ms[n / 2];
	tap_diag("unavailability per %s (signal -> first acknowledged PUT on each partition the "
		 "%s served; ZooKeeper session %d ms): min %" PRIu64 " ms, median %" PRIu64
		 " ms, max %" PRIu64 " ms over %u partition outages%s", what,
		 paused ? "paused server" : "victim", SESSION_MS, ms[0], ms[n / 2], ms[n - 1], n,
		 never ? " (and some never ended)" : "");
}

/* Every partition the event's victim did not serve, after every event: the longest a PUT to it
 * waited in the window from the signal to the next event (at most 30 s), counted from the
 * signal for a PUT already in flight then (a PUT still unanswered counts until the window
 * ends). A kill should stop only the victim's partitions; this shows the others that stopped
 * too (a primary whose log waits for a dead or paused backup, or fails it for want of a spare,
 * a standby then taking it over). Not the gaps between acknowledged PUTs: each client thread
 * keeps DEPTH requests in flight and issues a new one on a random key as one ends, so within
 * milliseconds of a kill every request in flight is one to the victim's partitions and the
 * others get none until those are served again, however well they are served. */
static void collateral(void)
{
	unsigned hit = 0, looked = 0, quiet = 0;
	uint64_t waits[MAX_EVENTS * NPART];

	for (unsigned e = 0; e < nevents; e++) {
		uint64_t from = events[e].t, to = from + 30000000000u;

		if (e + 1 < nevents && events[e + 1].t < to)
			to = events[e + 1].t;
		if (t_stop < to)
			to = t_stop;
		for (unsigned p = 0; p < NPART; p++) {
			uint64_t wait = 0;
			unsigned sent = 0;

			if ((events[e].parts | events[e].pparts) >> p & 1)
				continue;
			for (unsigned t = 0; t < nclients; t++)
				for (uint32_t i = 0; i < clis[t].n; i++) {
					struct op *o = op_at(&clis[t], i);
					uint64_t a, b;

					if (o->type != OP_PUT || keypart[o->key] != p)
						continue;
					a = o->invoke > from ? o->invoke : from;
					b = o->complete ? o->complete : t_stop;
					if (b > to)
						b = to;
					if (o->invoke >= to || b <= a)
						continue;
					sent++;
					if (b - a > wait)
						wait = b - a;
				}
			if (!sent) {
				quiet++;
				continue;
			}
			waits[looked++] = wait / 1000000u;
			if (wait < 1000000000u)
				continue;
			hit++;
			tap_diag("%s of server %d at %.2f s: partition %u, not the victim's: a PUT to it "
				 "waited %" PRIu64 " ms (the longest of %u)",
				 kind_name(events[e].kind, false), events[e].victim, rel(from), p,
				 wait / 1000000u, sent);
		}
	}
	tap_diag("partitions the victim did not serve where a PUT waited 1 s or more after a kill "
		 "or pause: %u of %u (%u more had no PUT in the window)", hit, looked, quiet);
	if (looked) {
		qsort(waits, looked, sizeof(waits[0]), cmp_u64);
		tap_diag("the longest wait of a PUT to such a partition, per event and partition: min "
			 "%" PRIu64 " ms, median %" PRIu64 " ms, max %" PRIu64 " ms over %u",
			 waits[0], waits[looked / 2], waits[looked - 1], looked);
	}
}

/* ---------------------------------------------------------------- main */

static const char *arg_str(int argc, char **argv, const char *name)
{
	for (int i = 2; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return NULL;
}

static unsigned arg_num(int argc, char **argv, const char *name, unsigned def)
{
	for (int i = 2; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return (unsigned)strtoul(argv[i + 1], NULL, 10);
	return def;
}

int main(int argc, char **argv)
{
	char err[512], why[256];
	const char *tmp = getenv("TMPDIR");
	unsigned duration, kills, pauses, pause_kills;
	uint64_t med_kill, med_pause, med_pk, med_pkp;
	struct cli *loader;
	struct counts k;
	uint64_t seed;
	int rc;

	if (argc < 2 || argc % 2) {
		fprintf(stderr, "usage: %s tcp|sockets|shm [--duration S] [--kills N] [--pauses N] "
			"[--pause-with-kill N] [--pause-ms MS] [--connect-timeout MS] [--rpc-timeout MS] "
			"[--clients N] [--keys N] [--drive thread|loop]\n", argv[0]);
		return 2;
	}
	prov = argv[1];
	duration = arg_num(argc, argv, "--duration", tap_sanitizer() ? 20 : 40);
	kills = arg_num(argc, argv, "--kills", tap_sanitizer() ? 1 : 3);
	pauses = arg_num(argc, argv, "--pauses", 1);
	pause_kills = arg_num(argc, argv, "--pause-with-kill", 0);
	pause_ms = arg_num(argc, argv, "--pause-ms", pause_ms);
	drive = arg_str(argc, argv, "--drive"); /* the servers' --drive (NULL: their default) */
	if (arg_num(argc, argv, "--connect-timeout", 0))
		snprintf(connect_ms, sizeof(connect_ms), "%u",
			 arg_num(argc, argv, "--connect-timeout", 0));
	if (arg_num(argc, argv, "--rpc-timeout", 0))
		snprintf(rpc_ms, sizeof(rpc_ms), "%u", arg_num(argc, argv, "--rpc-timeout", 0));
	if (pause_kills)
		nsrv = MAXSRV; /* a second standby: one remains while one is paused */
	nclients = arg_num(argc, argv, "--clients", 4);
	nkeys = arg_num(argc, argv, "--keys", 32);
	if (!nclients || nclients > MAX_CLIENTS || !nkeys || nkeys > 65535 || !duration ||
	    kills + pauses + pause_kills > MAX_EVENTS || pause_ms <= SESSION_MS) {
		fprintf(stderr, "kv_history: --clients 1..%d, --keys 1..65535, --duration > 0, "
			"--kills + --pauses + --pause-with-kill <= %d, --pause-ms > %d\n", MAX_CLIENTS,
			MAX_EVENTS, SESSION_MS);
		return 2;
	}
	if (!zkserver_available(why, sizeof(why)))
		tap_plan_skip_all("%s", why);
	TAP_REQUIRE(proc_find_tool("examples/kv/twkv", twkv, sizeof(twkv)) == 0,
		    "examples/kv/twkv not built");
	seed = tap_seed();
	tap_diag("history check on %s: %u s, %u kills, %u pauses of %u ms, %u kills with a pause, "
		 "%d servers, connect timeout %s ms, RPC timeout %s ms, logs driven by %s, %u client "
		 "threads x %d in flight, %u keys, seed %" PRIu64 " (TW_SEED=%" PRIu64 " repeats the "
		 "schedule)", prov, duration, kills, pauses, pause_ms, pause_kills, nsrv,
		 connect_ms[0] ? connect_ms : "(twkv's default)", rpc_ms[0] ? rpc_ms : "(default)",
		 drive ? drive : "(twkv's default)", nclients, DEPTH, nkeys, seed, seed);
	snprintf(root, sizeof(root), "%s/kvhist.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	TAP_REQUIRE(mkdtemp(root), "mkdtemp: %s", strerror(errno));
	/* Unavailability is measured against the session timeout + 0.5 s, and ZooKeeper expires a
	 * session up to one tickTime after its timeout: a 100 ms tick, as a deployment that wants
	 * fast failover runs (docs/coordination.md, "How fast a failure is detected"), not the
	 * tests' 500 ms, which alone could take the whole 0.5 s. */
	zkserver_tick_ms = 100;
	zkserver_start(&zk);
	start_servers();
	/* The standby starts after the owners opened their logs: a restart keeps its addresses
	 * (on shm too, since its backup is named after its --backup-port). */
	rc = configure_standby_late(err, sizeof(err)) ? 0 : -1;
	ok(rc == 0, "configured %d servers, %d partitions, r = 2, %s, one started after the "
	   "owners, 512 KiB log memory each: %s", nsrv, NPART,
	   nsrv > NPART + 1 ? "two standbys" : "one standby", rc ? err : "ok");
	TAP_REQUIRE(rc == 0, "cannot go on");

	keyname = calloc(nkeys, sizeof(*keyname));
	keylen = calloc(nkeys, 1);
	keypart = calloc(nkeys, sizeof(*keypart));
	TAP_REQUIRE(keyname && keylen && keypart, "out of memory");
	for (unsigned i = 0; i < nkeys; i++) {
		keylen[i] = (uint8_t)snprintf(keyname[i], sizeof(keyname[i]), "hist-%u", i);
		keypart[i] = kv_partition_of(kv_hash(keyname[i], keylen[i]), NPART);
	}
	/* The load: every key written once, so a GET never rightly finds nothing. */
	loader = &clis[nclients];
	loader->id = nclients;
	open_client(loader, 60000);
	for (unsigned i = 0; i < nkeys; i++)
		submit(loader, i, true, false);
	while (loader->inflight)
		TAP_REQUIRE(kvc_poll(loader->c, 1000000) >= 0, "kvc_poll");
	for (uint32_t i = 0; i < loader->n; i++)
		TAP_REQUIRE(op_at(loader, i)->result == RES_OK, "load: key %u not acknowledged",
			    op_at(loader, i)->key);

	t_start = now_ns();
	for (unsigned t = 0; t < nclients; t++) {
		clis[t].id = t;
		clis[t].rng = (seed + 0x9e3779b97f4a7c15u * (t + 1)) | 1;
		open_client(&clis[t], REQ_TIMEOUT_MS);
	}
	for (unsigned t = 0; t < nclients; t++)
		TAP_REQUIRE(pthread_create(&clis[t].th, NULL, client_main, &clis[t]) == 0,
			    "pthread_create");
	nemesis(seed, duration, kills, pauses, pause_kills);
	t_stop = now_ns();
	atomic_store(&stop_load, true);
	for (unsigned t = 0; t < nclients; t++)
		pthread_join(clis[t].th, NULL);
	tap_diag("%7.2f s workload stopped", rel(now_ns()));

	/* The final read of every key, with a long deadline: the cluster has settled. */
	for (unsigned i = 0; i < nkeys; i++)
		submit(loader, i, false, true);
	while (loader->inflight)
		TAP_REQUIRE(kvc_poll(loader->c, 1000000) >= 0, "kvc_poll");

	memset(&k, 0, sizeof(k));
	check(&k);
	for (unsigned t = 0; t <= nclients; t++) {
		struct kvc_stats cs;

		kvc_get_stats(clis[t].c, &cs);
		if (t < nclients)
			tap_diag("client thread %u: %u operations; NOT_OWNER %" PRIu64 ", redirects %"
				 PRIu64 ", RETRY %" PRIu64 ", resent %" PRIu64 ", timeouts %" PRIu64
				 ", unanswered attempts %" PRIu64 ", PUTs of unknown outcome %" PRIu64,
				 t, clis[t].n, cs.not_owner, cs.redirects, cs.retries, cs.resent,
				 cs.timeouts, cs.unanswered, cs.unknown);
	}
	tap_diag("history: %" PRIu64 " PUTs (%" PRIu64 " acknowledged, %" PRIu64 " failed or timed "
		 "out), %" PRIu64 " GETs (%" PRIu64 " ok, %" PRIu64 " failed or timed out)",
		 k.puts, k.puts_ok, k.puts_failed, k.gets, k.gets_ok, k.gets_failed);
	unavailability(EV_KILL, false, &med_kill);
	unavailability(EV_PAUSE, false, &med_pause);
	unavailability(EV_PAUSE_KILL, false, &med_pk);
	unavailability(EV_PAUSE_KILL, true, &med_pkp);
	if (med_kill != UINT64_MAX || med_pk != UINT64_MAX)
		tap_diag("median unavailability per kill %s, per kill with a pause %s, against the "
			 "session timeout + 0.5 s = %d ms",
			 med_kill == UINT64_MAX ? "-" : med_kill <= SESSION_MS + 500 ? "within" : "OVER",
			 med_pk == UINT64_MAX ? "-" : med_pk <= SESSION_MS + 500 ? "within" : "OVER",
			 SESSION_MS + 500);
	collateral();
	ok(nevents == kills + pauses + pause_kills, "the nemesis ran %u kills, %u pauses and %u "
	   "kills with a pause", kills, pauses, pause_kills);
	{
		unsigned moved = 0, moved_pause = 0, unsettled = 0, rejoined = 0, npause = 0, slow = 0;
		uint64_t worst = 0;

		for (unsigned e = 0; e < nevents; e++) {
			const struct event *ev = &events[e];

			/* A pause is not held to it: the 2.5 session timeouts of one server's
			 * pause, on a loaded machine, also let other sessions lapse (a run on
			 * sockets at load 36: the nemesis itself woke 6.7 s late). */
			if (ev->kind != EV_KILL)
				moved_pause += ev->moved != 0;
			else
				moved += ev->moved != 0;
			unsettled += !ev->settled;
			npause += ev->kind != EV_KILL;
			rejoined += ev->kind != EV_KILL && ev->rejoined;
			slow += ev->pool_ns > (uint64_t)POOL_LIMIT_MS * 1000000u;
			if (ev->pool_ns != UINT64_MAX && ev->pool_ns > worst)
				worst = ev->pool_ns;
			if (ev->kind == EV_PAUSE_KILL) {
				slow += ev->ppool_ns > (uint64_t)POOL_LIMIT_MS * 1000000u;
				if (ev->ppool_ns != UINT64_MAX && ev->ppool_ns > worst)
					worst = ev->ppool_ns;
			}
		}
		tap_diag("pauses (alone or with a kill) after which a partition neither the victim nor "
			 "the paused server served moved: %u of %u", moved_pause, npause);
		ok(moved == 0 && unsettled == 0, "each kill moved only the victim's partitions, and "
		   "every partition was served again after every event (%u kills moved another, %u "
		   "events did not settle within %d ms)", moved, unsettled, SETTLE_LIMIT_MS);
		ok(slow == 0, "the standby pool was back to one within %d ms of every restart or "
		   "SIGCONT (slowest %.0f ms; %u late)", POOL_LIMIT_MS, (double)worst / 1e6, slow);
		ok(rejoined == npause, "every paused server stood by again by itself, without a "
		   "restart (%u of %u)", rejoined, npause);
	}
	{
		unsigned answered = 0;

		for (uint32_t i = 0; i < loader->n; i++)
			answered += op_at(loader, i)->final && op_at(loader, i)->result == RES_OK;
		/* A final read that failed checks nothing: "every key answered its final read"
		 * below fails then. */
		ok(k.lost == 0, "no lost acknowledged PUT in the final reads that answered (%u of %u "
		   "keys; %" PRIu64 " violations)", answered, nkeys, k.lost);
	}
	ok(k.stale == 0, "no stale read (%" PRIu64 " violations)", k.stale);
	ok(k.phantom == 0, "no value never written (%" PRIu64 " violations, %" PRIu64
	   " of them unparsable)", k.phantom, (uint64_t)atomic_load(&bad_values));
	ok(k.resurrect == 0, "no PUT seen applied twice around another value (X, Y, X read: %"
	   PRIu64 " violations)", k.resurrect);
	tap_diag("values read at a version other than their PUT's acknowledgement (a PUT applied "
		 "twice): %" PRIu64 "; of the first 256, %" PRIu64 " with another PUT of the key "
		 "acknowledged between the two versions, %" PRIu64 " with another value read between "
		 "X's first read and X's acknowledgement (X then Y read, X acknowledged after Y)",
		 k.duplicate, k.dup_around, k.dup_read_between);
	ok(k.regress == 0, "versions rise per key as each client thread sees them (%" PRIu64
	   " violations)", k.regress);
	{
		uint64_t final_failed = 0;

		for (uint32_t i = 0; i < loader->n; i++)
			final_failed += op_at(loader, i)->final &&
					op_at(loader, i)->result != RES_OK;
		ok(final_failed == 0, "every key answered its final read (%" PRIu64 " did not)",
		   final_failed);
	}
	ok(k.puts_ok > 0 && k.gets_ok > 0, "the workload made progress");
	for (int i = 0; i < nsrv; i++)
		crashed(i, "by the end of the run");
	ok(crashes == 0, "no server died on its own (%u did; a crash, logged above)", crashes);

	for (unsigned t = 0; t <= nclients; t++) {
		kvc_close(clis[t].c);
		for (unsigned c = 0; c < MAX_CHUNKS && clis[t].chunk[c]; c++)
			free(clis[t].chunk[c]);
	}
	free(keyname);
	free(keylen);
	free(keypart);
	for (int i = 0; i < nsrv; i++)
		if (srv[i])
			proc_kill(srv[i], SIGTERM);
	for (int i = 0; i < nsrv; i++) {
		if (!srv[i])
			continue;
		proc_wait(srv[i], 30000);
		proc_free(srv[i]);
	}
	/* shm: a server killed last leaves its backup's named region and doorbell behind. */
	for (int i = 0; i < nsrv && !strcmp(prov, "shm"); i++) {
		char path[sizeof(srv_bport) + 32];

		snprintf(path, sizeof(path), "/dev/shm/%s", srv_bport[i]);
		unlink(path);
		snprintf(path, sizeof(path), "/dev/shm/tw_bell_%s", srv_bport[i]);
		unlink(path);
	}
	zkserver_stop(&zk);
	rm_tree(root);
	tap_done_testing();
	return tap_exit();
}
