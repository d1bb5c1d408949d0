/*
 * tests/integration/reader_e2e.c — readers of a live log over a real provider (argv[1]: tcp,
 * sockets, shm), against three local twd backups with 64 KiB buffers (a segment rolls over
 * every ~550 objects), the writer a primary in this process (async mode, r = 2 of the 3).
 *
 *  1. follow: a reader opened at the oldest entry follows a writer appending 4000 objects
 *     (sockets: 1500) and returns exactly those objects, in order, intact, each one only once the primary had
 *     acknowledged it (its LSN below tw_primary_acked_lsn at that moment), and nothing more;
 *     a reader opened at the tail returns only what is appended after its open; a reader
 *     opened at an LSN starts exactly there; a one-sided reader (cfg.one_sided) returns the
 *     same objects, the bytes moved by one-sided reads of read grants.
 *  2. eight readers at once, each a `twctl tail` process, follow one writer to the end.
 *  3. cleaning: after tw_primary_trim, a reader at a freed position gets -TW_EFREED.
 *  4. a backup killed under a reader: the backup it reads from gets SIGKILL while the writer
 *     goes on (the primary replaces the replica on the third backup); the reader moves to
 *     another copy and still returns every object exactly once, in order.
 *  5. authentication: against keyed backups a reader without the key is refused (-EACCES)
 *     and one with the key is served.
 *  6. `twctl tail`: from the oldest entry with -j (one JSON object per entry, the payload in
 *     base64), and from an LSN while the writer appends (each object printed as it comes).
 * The kill of the primary itself, and takeovers, are reader_crash.c.
 *
 * With argv[2] "cost" (reader_cost_*: tcp, shm), what publishing the acknowledged position
 * (SetAcked, docs/readers.md "What SetAcked costs") costs when nobody reads, with 1 MiB
 * segments instead:
 *  7. no reader: 200,000 objects appended asynchronously; the primary sends at most
 *     (seconds / hold + 1 + segments + 3) x r SetAcked (hold: 1 s), far below one per round
 *     trip, the backups serve as many and hold some; a reader opened at the tail at once
 *     returns exactly the 100 objects appended after its open (its first read waited for the
 *     newest position); a reader that then opens at the oldest entry returns the 200,000 in
 *     order (the held positions were applied);
 *  8. a live reader follows a writer appending 200,000 objects asynchronously and returns
 *     every one in order, none before the primary acknowledged it; the SetAcked count and the
 *     time from the writer's flush to the reader's last entry are printed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/reader.h>

#include <sodium.h>

#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "twd_client.h"

#define SEGSZ 65536u

static const char *prov;
static struct rt_cluster cl;
static size_t seg_size = SEGSZ;
/* Objects per phase: the writer in test 1, and in test 2; sockets, ten times slower per append
 * here and slower still under load, writes fewer. mid: where the reader at an LSN starts. */
static unsigned n1 = 4000, n8 = 3000, mid = 2345;
static char n8s[16];

struct writer {
	struct tw_primary *p;
	uint64_t from, n;     /* objects from..from+n-1 */
	unsigned pause_every; /* yield every so many appends (0: never) */
	atomic_uint_fast64_t done;
	int rc;
	pthread_t th;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint8_t obj[RT_OBJ];

	for (uint64_t i = 0; i < w->n; i++) {
		uint64_t lsn;

		rt_fill(obj, w->from + i);
		w->rc = tw_primary_append(w->p, obj, RT_OBJ, &lsn);
		if (w->rc)
			break;
		atomic_store(&w->done, i + 1);
		if (w->pause_every && i % w->pause_every == 0)
			usleep(1000); /* the writer's pace (a live log, idle now and then), not a wait */
	}
	return NULL;
}

static struct tw_primary *open_log(uint64_t log_id, unsigned replicas)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	char err[512];
	int rc;

	tw_ctx_config_init(&tc);
	tc.provider = prov;
	tc.backups = cl.addrs;
	tc.n_backups = cl.n;
	tw_primary_config_init(&cfg);
	cfg.log_id = log_id;
	cfg.replicas = replicas;
	cfg.segment_size = seg_size;
	cfg.mode = TW_PRIMARY_ASYNC;
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open log %" PRIx64 ": %s", log_id, err);
	return p;
}

static int open_reader(uint64_t log_id, enum tw_read_from from, uint64_t lsn, const char *key,
		       struct tw_reader **out, char *err, size_t len)
{
	struct tw_reader_config rc;

	tw_reader_config_init(&rc);
	rc.provider = prov;
	rc.log_id = log_id;
	rc.backups = cl.addrs;
	rc.n_backups = cl.n;
	rc.from = from;
	rc.lsn = lsn;
	rc.key_file = key;
	rc.poll_ms = 500;
	return tw_reader_open(&rc, out, err, len);
}

/* Whether entry e is object `seq`, intact. */
static bool is_obj(const struct tw_reader_entry *e, uint64_t seq)
{
	uint8_t want[RT_OBJ];

	rt_fill(want, seq);
	return e->len == RT_OBJ && memcmp(e->data, want, RT_OBJ) == 0;
}

/* Read objects first..first+n-1 in order. Returns how many came right; *bad_out counts the
 * ones that came before the primary acknowledged them (p may be NULL: not checked). */
static uint64_t follow(struct tw_reader *r, struct tw_primary *p, uint64_t first, uint64_t n,
		       uint64_t *early_out, char *why, size_t len)
{
	uint64_t got = 0, early = 0;

	why[0] = '\0';
	while (got < n) {
		struct tw_reader_entry e;
		int rc = tw_reader_next(r, &e, 20000);

		if (rc) {
			snprintf(why, len, "after %" PRIu64 ": %s: %s", got, tw_strerror(rc),
				 tw_reader_errmsg(r));
			break;
		}
		if (p && e.lsn >= tw_primary_acked_lsn(p))
			early++;
		if (!is_obj(&e, first + got)) {
			snprintf(why, len, "entry %" PRIu64 " (lsn %016" PRIx64 ", %u bytes) is not "
				 "object %" PRIu64, got, e.lsn, e.len, first + got);
			break;
		}
		got++;
	}
	if (early_out)
		*early_out = early;
	return got;
}

static void test_follow(void)
{
	struct tw_primary *p = open_log(0x7100, 2);
	struct writer w = { .p = p, .from = 0, .n = n1 };
	struct tw_reader *r, *rt, *rl;
	struct tw_reader_entry e;
	struct tw_reader_stats st;
	uint64_t got, early, mid_lsn = 0;
	char err[512], why[512];
	int rc;

	rc = open_reader(0x7100, TW_READ_OLDEST, 0, NULL, &r, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "reader open: %s", err);
	TAP_REQUIRE(pthread_create(&w.th, NULL, writer_main, &w) == 0, "writer thread");
	got = follow(r, p, 0, n1, &early, why, sizeof(why));
	pthread_join(w.th, NULL);
	ok(w.rc == 0 && got == n1, "%s: the reader returned objects 0..%" PRIu64 " of %u in "
	   "order, intact %s", prov, got, n1, why);
	ok(early == 0, "%s: none before the primary acknowledged it (%" PRIu64 " early)", prov,
	   early);
	rc = tw_reader_next(r, &e, 300);
	ok(rc == -ETIMEDOUT, "%s: nothing more after the last acknowledged entry (%s)", prov,
	   tw_strerror(rc));
	tw_reader_get_stats(r, &st);
	ok(st.entries == n1 && st.segments >= n1 / 600, "%s: %" PRIu64 " entries from %" PRIu64
	   " segments in %" PRIu64 " reads (%" PRIu64 " held at the end), %" PRIu64 " switches",
	   prov, st.entries, st.segments, st.reads, st.waits, st.switches);
	tap_diag("reads %" PRIu64 ", of which held %" PRIu64, st.reads, st.waits);

	/* From the tail: only what comes after. From an LSN: exactly there. */
	rc = open_reader(0x7100, TW_READ_TAIL, 0, NULL, &rt, err, sizeof(err));
	ok(rc == 0, "%s: reader at the tail opens (%s)", prov, err);
	{
		struct tw_reader *r2;

		rc = open_reader(0x7100, TW_READ_OLDEST, 0, NULL, &r2, err, sizeof(err));
		TAP_REQUIRE(rc == 0, "second reader: %s", err);
		for (unsigned i = 0; i < mid && rc == 0; i++)
			rc = tw_reader_next(r2, &e, 10000);
		mid_lsn = tw_reader_position(r2);
		tw_reader_close(r2);
	}
	w.from = n1;
	w.n = 300;
	TAP_REQUIRE(pthread_create(&w.th, NULL, writer_main, &w) == 0, "writer thread");
	got = rt ? follow(rt, p, n1, 300, NULL, why, sizeof(why)) : 0;
	pthread_join(w.th, NULL);
	ok(got == 300, "%s: the tail reader returns exactly the 300 objects appended after its "
	   "open (%" PRIu64 ") %s", prov, got, why);
	rc = open_reader(0x7100, TW_READ_LSN, mid_lsn, NULL, &rl, err, sizeof(err));
	got = rc == 0 ? follow(rl, NULL, mid, n1 + 300 - mid, NULL, why, sizeof(why)) : 0;
	ok(got == n1 + 300 - mid, "%s: a reader opened at LSN %016" PRIx64 " starts at object %u "
	   "(%" PRIu64 " of %u) %s%s", prov, mid_lsn, mid, got, n1 + 300 - mid, rc ? err : "",
	   why);
	tw_reader_close(rl);
	tw_reader_close(rt);

	/* One-sided reads of read grants: the same objects, the bytes moved by fi_read. */
	{
		struct tw_reader_config oc;
		struct tw_reader *ro;

		tw_reader_config_init(&oc);
		oc.provider = prov;
		oc.log_id = 0x7100;
		oc.backups = cl.addrs;
		oc.n_backups = cl.n;
		oc.one_sided = true;
		rc = tw_reader_open(&oc, &ro, err, sizeof(err));
		got = rc == 0 ? follow(ro, NULL, 0, n1 + 300, NULL, why, sizeof(why)) : 0;
		memset(&st, 0, sizeof(st));
		tw_reader_get_stats(ro, &st);
		ok(got == n1 + 300 && st.one_sided_reads > 0 && st.one_sided_fallbacks == 0,
		   "%s: a one-sided reader returns the %u objects in order (%" PRIu64 "), %" PRIu64
		   " one-sided reads, %" PRIu64 " over RPC %s%s", prov, n1 + 300, got,
		   st.one_sided_reads,
		   st.one_sided_fallbacks, rc ? err : "", why);
		tw_reader_close(ro);
	}

	/* Cleaning: free the first segments; a reader below gets a clear error. The log is in
	 * async mode, where tw_primary_trim hands its FreeSegments to the progress thread and
	 * returns at once: tw_admin_trim, which returns when every reachable backup recorded the
	 * mark, makes sure the readers below look after the free (frees are cumulative). */
	rc = tw_primary_trim(p, 3);
	{
		struct tw_recover_config fc;
		uint64_t freed = 0;

		tw_recover_config_init(&fc);
		fc.provider = prov;
		fc.backups = cl.addrs;
		fc.n_backups = cl.n;
		fc.log_id = 0x7100;
		rc = tw_admin_trim(&fc, 3, &freed, err, sizeof(err));
		ok(rc == 0, "%s: the free below segment 3 is on every backup (%s)", prov,
		   rc ? err : "ok");
	}
	tw_reader_close(r);
	rc = open_reader(0x7100, TW_READ_LSN, tw_pos_to_lsn((struct tw_pos){ 1, 0 }), NULL, &r,
			 err, sizeof(err));
	ok(rc == -TW_EFREED && strstr(err, "freed"), "%s: a reader at a freed position is refused"
	   " with -TW_EFREED (%s: %s)", prov, tw_strerror(rc), err);
	rc = open_reader(0x7100, TW_READ_OLDEST, 0, NULL, &r, err, sizeof(err));
	ok(rc == 0 && tw_reader_next(r, &e, 5000) == 0 && tw_lsn_to_pos(e.lsn).segment >= 3,
	   "%s: the oldest kept entry is in segment 3 after the free (%s)", prov, err);
	tw_reader_close(r);
	tw_primary_close(p);
}

/* Whether a `twctl -j tail` line carries object `seq` (base64 of its 100 bytes). */
static bool line_is_obj(const char *line, uint64_t seq)
{
	const char *d = strstr(line, "\"data\":\"");
	uint8_t obj[RT_OBJ];
	char b64[200];

	rt_fill(obj, seq);
	sodium_bin2base64(b64, sizeof(b64), obj, RT_OBJ, sodium_base64_VARIANT_ORIGINAL);
	return d && strncmp(d + 8, b64, strlen(b64)) == 0 && strstr(line, "\"len\":100,");
}

/* `twctl tail` on log 0x7200 (n8 objects): -j from the oldest; then from the end while 50
 * more are appended. */
static void test_tail(struct tw_primary *p)
{
	char twctl[1024], bk[1024], line[4096], from[40];
	char *av[] = { twctl, (char *)"-p", (char *)prov, (char *)"-b", bk, (char *)"-j",
		       (char *)"tail", (char *)"0x7200", (char *)"--from", (char *)"oldest",
		       (char *)"-n", n8s, NULL };
	struct writer w = { .p = p, .from = n8, .n = 50 };
	unsigned lines = 0, good = 0;
	struct proc *t;
	int rc;

	if (proc_find_tool("tools/twctl", twctl, sizeof(twctl)) != 0) {
		ok(0, "twctl not built");
		ok(0, "twctl not built");
		return;
	}
	snprintf(bk, sizeof(bk), "%s,%s,%s", cl.addr[0], cl.addr[1], cl.addr[2]);
	t = proc_spawn(av, NULL);
	TAP_REQUIRE(t, "spawn twctl tail");
	while ((rc = proc_wait_line(t, "{", line, sizeof(line), 20000)) >= 0)
		good += line_is_obj(line, lines++);
	rc = proc_wait(t, 20000);
	proc_free(t);
	ok(lines == n8 && good == n8 && rc == 0, "%s: twctl -j tail --from oldest -n %u printed "
	   "%u lines, %u of them the right object in base64, exit %d", prov, n8, lines, good, rc);

	/* From the end (an LSN), while the writer appends: a line per new object. */
	{
		struct tw_reader *r;
		struct tw_reader_entry e;
		char err[512];

		rc = open_reader(0x7200, TW_READ_TAIL, 0, NULL, &r, err, sizeof(err));
		TAP_REQUIRE(rc == 0, "reader: %s", err);
		rc = tw_reader_next(r, &e, 0);
		snprintf(from, sizeof(from), "0x%" PRIx64, tw_reader_position(r));
		tw_reader_close(r);
	}
	av[5] = (char *)"-v";
	av[9] = from;
	av[11] = (char *)"50";
	t = proc_spawn(av, NULL);
	TAP_REQUIRE(t, "spawn twctl tail");
	TAP_REQUIRE(pthread_create(&w.th, NULL, writer_main, &w) == 0, "writer thread");
	lines = good = 0;
	while ((rc = proc_wait_line(t, "0x", line, sizeof(line), 20000)) >= 0) {
		char want[80];

		snprintf(want, sizeof(want), " 100 e1 ");
		good += strstr(line, want) != NULL;
		lines++;
	}
	pthread_join(w.th, NULL);
	rc = proc_wait(t, 20000);
	proc_free(t);
	ok(lines == 50 && good == 50 && rc == 0, "%s: twctl tail --from %s -n 50 printed the 50 "
	   "objects appended meanwhile (%u lines, exit %d)", prov, from, lines, rc);
}

/* Eight readers at once, each a `twctl -j tail --from oldest -n N` process, while the writer
 * appends the N objects. */
static void test_eight(void)
{
	struct tw_primary *p = open_log(0x7200, 2);
	struct writer w = { .p = p, .from = 0, .n = n8 };
	char twctl[1024], bk[1024], line[4096];
	char *av[] = { twctl, (char *)"-p", (char *)prov, (char *)"-b", bk, (char *)"-j",
		       (char *)"tail", (char *)"0x7200", (char *)"--from", (char *)"oldest",
		       (char *)"-n", n8s, NULL };
	struct proc *t[8];
	unsigned good = 0, lines[8] = { 0 }, right[8] = { 0 };
	bool open[8];
	uint8_t obj[RT_OBJ];
	uint64_t lsn;
	int left = 8;

	TAP_REQUIRE(proc_find_tool("tools/twctl", twctl, sizeof(twctl)) == 0, "twctl not built");
	snprintf(bk, sizeof(bk), "%s,%s,%s", cl.addr[0], cl.addr[1], cl.addr[2]);
	/* The log must exist before the readers open at its oldest entry. */
	rt_fill(obj, 0);
	TAP_REQUIRE(tw_primary_append(p, obj, RT_OBJ, &lsn) == 0, "first append");
	w.from = 1;
	w.n = n8 - 1;
	for (int i = 0; i < 8; i++) {
		t[i] = proc_spawn(av, NULL);
		TAP_REQUIRE(t[i], "spawn twctl tail %d", i);
		open[i] = true;
	}
	TAP_REQUIRE(pthread_create(&w.th, NULL, writer_main, &w) == 0, "writer thread");
	/* Read the eight in turns: each line as it comes (the pipes hold what waits). */
	while (left > 0) {
		for (int i = 0; i < 8; i++) {
			int rc;

			if (!open[i])
				continue;
			rc = proc_wait_line(t[i], "{", line, sizeof(line), 30000);
			if (rc < 0) {
				open[i] = false;
				left--;
				continue;
			}
			right[i] += line_is_obj(line, lines[i]);
			lines[i]++;
		}
	}
	pthread_join(w.th, NULL);
	for (int i = 0; i < 8; i++) {
		int rc = proc_wait(t[i], 20000);

		proc_free(t[i]);
		good += lines[i] == n8 && right[i] == n8 && rc == 0;
		if (lines[i] != n8 || right[i] != n8 || rc != 0)
			tap_diag("reader %d: %u lines, %u right, exit %d", i, lines[i], right[i], rc);
	}
	ok(w.rc == 0 && good == 8, "%s: 8 readers at once (twctl tail processes) each printed all "
	   "%u objects in order (%u did)", prov, n8, good);
	test_tail(p);
	tw_primary_close(p);
}

static void test_backup_killed(void)
{
	struct tw_primary *p = open_log(0x7300, 2);
	struct writer w = { .p = p, .from = 0, .n = 3000, .pause_every = 50 };
	struct tw_reader *r;
	struct tw_reader_stats st;
	uint64_t got, got2;
	char err[512], why[512];
	int rc, victim;

	rc = open_reader(0x7300, TW_READ_TAIL, 0, NULL, &r, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "reader: %s", err);
	TAP_REQUIRE(pthread_create(&w.th, NULL, writer_main, &w) == 0, "writer thread");
	got = follow(r, p, 0, 1000, NULL, why, sizeof(why));
	tw_reader_get_stats(r, &st);
	victim = st.backup;
	TAP_REQUIRE(got == 1000 && victim >= 0, "first 1000 objects %s (backup %d)", why, victim);
	proc_kill(cl.p[victim], SIGKILL);
	proc_wait(cl.p[victim], 10000);
	got2 = follow(r, p, 1000, 2000, NULL, why, sizeof(why));
	pthread_join(w.th, NULL);
	tw_reader_get_stats(r, &st);
	ok(w.rc == 0 && got2 == 2000 && st.backup != victim && st.switches >= 1,
	   "%s: backup %d killed under the reader after 1000 objects: it read the other 2000 in "
	   "order from backup %d (%" PRIu64 " switches) %s (writer: %s)", prov, victim, st.backup,
	   st.switches, why, tw_strerror(w.rc));
	tw_reader_close(r);
	tw_primary_close(p);
	rt_restart(&cl, (unsigned)victim, "64K", "64");
}

static void test_auth(void)
{
	struct rt_cluster kc;
	struct tw_reader_config rc;
	struct tw_reader *r = NULL;
	char key[300], err[512];
	unsigned char k[32];
	FILE *f;
	int rv;

	snprintf(key, sizeof(key), "/tmp/tw_reader_key.%d", (int)getpid());
	for (unsigned i = 0; i < sizeof(k); i++)
		k[i] = (unsigned char)(i * 7 + 3);
	f = fopen(key, "wb");
	TAP_REQUIRE(f && fwrite(k, 1, sizeof(k), f) == sizeof(k), "key file");
	fclose(f);
	TAP_REQUIRE(chmod(key, 0600) == 0, "chmod key");
	setenv("TW_KEY_FILE", key, 1); /* the twd below read it */
	rt_start(&kc, prov, 1, "64K", "8");
	unsetenv("TW_KEY_FILE");
	tw_reader_config_init(&rc);
	rc.provider = prov;
	rc.log_id = 0x7400;
	rc.backups = kc.addrs;
	rc.n_backups = 1;
	rc.key_file = "";
	rv = tw_reader_open(&rc, &r, err, sizeof(err));
	ok(rv == -EACCES, "%s: a reader without the key is refused: %s (%s)", prov, tw_strerror(rv),
	   err);
	tw_reader_close(r);
	r = NULL;
	rc.key_file = key;
	rv = tw_reader_open(&rc, &r, err, sizeof(err));
	ok(rv == -TW_ENOTFOUND, "%s: a reader with the key is served (the log does not exist: "
	   "%s: %s)", prov, tw_strerror(rv), err);
	tw_reader_close(r);
	rt_stop(&kc);
	unlink(key);
}

/* ---- what SetAcked costs (argv[2] "cost") */

#define COST_N 200000u
#define HOLD_S 1.0 /* min(1000 ms, RPC timeout 5000 / 4) */

/* SetAcked the three backups served so far, and held. */
static void backups_count(uint64_t *served, uint64_t *held)
{
	*served = *held = 0;
	for (unsigned i = 0; i < cl.n; i++) {
		struct twc c;
		struct twc_stats st;

		TAP_REQUIRE(twc_connect(&c, prov, cl.addrs[i]) == 0, "stats connection %u", i);
		TAP_REQUIRE(twc_stats(&c, &st) == 0, "stats of backup %u", i);
		*served += st.set_acked;
		*held += st.set_acked_held;
		twc_close(&c);
	}
}

struct async_writer {
	struct tw_primary *p;
	uint64_t from, n;
	int rc;
	uint64_t done_ns; /* when the flush returned */
	pthread_t th;
};

/* Append objects from..from+n-1 asynchronously, then wait for all of them. */
static void *async_main(void *arg)
{
	struct async_writer *w = arg;
	uint8_t obj[RT_OBJ];

	w->rc = 0;
	for (uint64_t i = 0; i < w->n && w->rc == 0; i++) {
		rt_fill(obj, w->from + i);
		w->rc = tw_primary_append_async(w->p, obj, RT_OBJ, NULL, NULL, NULL);
	}
	if (w->rc == 0)
		w->rc = tw_primary_flush(w->p);
	w->done_ns = tw_now_ns();
	return NULL;
}

static void test_cost(void)
{
	struct tw_primary *p = open_log(0x7500, 2);
	struct async_writer w = { .p = p, .from = 0, .n = COST_N };
	struct tw_primary_stats st;
	struct tw_reader *r;
	uint64_t t0, bound, served0, held0, served1, held1, got, early;
	char err[512], why[512];
	uint8_t obj[RT_OBJ];
	double secs;
	int rc;

	/* 7. Nobody reads. */
	backups_count(&served0, &held0);
	t0 = tw_now_ns();
	async_main(&w);
	TAP_REQUIRE(w.rc == 0, "append %u objects: %s", COST_N, tw_strerror(w.rc));
	tw_primary_get_stats(p, &st);
	backups_count(&served1, &held1);
	secs = (double)(w.done_ns - t0) / 1e9;
	bound = ((uint64_t)(secs / HOLD_S) + 1 + st.segments + 3) * 2;
	ok(st.rpc_set_acked >= 1 && st.rpc_set_acked <= bound, "%s: no reader: %" PRIu64
	   " SetAcked sent for %u objects in %.2f s over %" PRIu64 " segments (bound %" PRIu64
	   "; one per round trip sends thousands)", prov, st.rpc_set_acked, COST_N, secs,
	   st.segments, bound);
	ok(served1 - served0 <= bound && held1 - held0 >= 1, "%s: the backups served %" PRIu64
	   " and held %" PRIu64 " of them", prov, served1 - served0, held1 - held0);
	/* At once, a reader at the tail: the backups' positions may be a hold old, but its first
	 * read waits for the owner's newest, so it returns exactly what comes after its open. */
	rc = open_reader(0x7500, TW_READ_TAIL, 0, NULL, &r, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "tail reader: %s", err);
	w = (struct async_writer){ .p = p, .from = COST_N, .n = 100 };
	async_main(&w);
	got = follow(r, NULL, COST_N, 100, NULL, why, sizeof(why));
	ok(w.rc == 0 && got == 100, "%s: a reader opened at the tail right after the writer "
	   "stopped returns exactly the 100 objects appended after its open (%" PRIu64 ") %s",
	   prov, got, why);
	tw_reader_close(r);
	rc = open_reader(0x7500, TW_READ_OLDEST, 0, NULL, &r, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "reader: %s", err);
	t0 = tw_now_ns();
	got = follow(r, NULL, 0, COST_N, NULL, why, sizeof(why));
	ok(got == COST_N, "%s: a reader opened afterwards returns all %" PRIu64 " of %u objects "
	   "in order (%.2f s) %s", prov, got, COST_N, (double)(tw_now_ns() - t0) / 1e9, why);
	tw_reader_close(r);
	tw_primary_close(p);

	/* 8. A live reader. The log must exist before it opens at the oldest entry. */
	p = open_log(0x7600, 2);
	rt_fill(obj, 0);
	TAP_REQUIRE(tw_primary_append(p, obj, RT_OBJ, NULL) == 0, "first append");
	rc = open_reader(0x7600, TW_READ_OLDEST, 0, NULL, &r, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "reader: %s", err);
	w = (struct async_writer){ .p = p, .from = 1, .n = COST_N - 1 };
	TAP_REQUIRE(pthread_create(&w.th, NULL, async_main, &w) == 0, "writer thread");
	got = follow(r, p, 0, COST_N, &early, why, sizeof(why));
	t0 = tw_now_ns();
	pthread_join(w.th, NULL);
	tw_primary_get_stats(p, &st);
	ok(w.rc == 0 && got == COST_N && early == 0, "%s: a live reader returned %" PRIu64 " of %u "
	   "objects in order, %" PRIu64 " before their acknowledgement %s", prov, got, COST_N,
	   early, why);
	tap_diag("%s: with a reader: %" PRIu64 " SetAcked sent, the last entry %.1f ms after the "
		 "writer's flush returned", prov, st.rpc_set_acked,
		 t0 > w.done_ns ? (double)(t0 - w.done_ns) / 1e6 : 0.0);
	tw_reader_close(r);
	tw_primary_close(p);
}

int main(int argc, char **argv)
{
	prov = argc > 1 ? argv[1] : "tcp";
	if (argc > 2 && strcmp(argv[2], "cost") == 0) {
		tap_plan(5);
		seg_size = 1u << 20;
		rt_start(&cl, prov, 3, "1M", "64");
		test_cost();
		rt_stop(&cl);
		return tap_exit();
	}
	if (strcmp(prov, "sockets") == 0) {
		n1 = 1500;
		n8 = 1000;
		mid = 877;
	}
	snprintf(n8s, sizeof(n8s), "%u", n8);
	tap_plan(17);
	rt_start(&cl, prov, 3, "64K", "64");
	tap_diag("provider %s, backups %s %s %s", prov, cl.addr[0], cl.addr[1], cl.addr[2]);
	test_follow();
	test_eight();
	test_backup_killed();
	test_auth();
	rt_stop(&cl);
	return tap_exit();
}
