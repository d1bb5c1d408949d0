/*
 * tests/integration/ownership_e2e.c — one writer per log, takeover, cleaning and loss, over a
 * real provider (argv[1]: tcp, sockets, shm), with three local twd's and owner_primary
 * processes (docs/recovery.md, "Ownership"):
 *   chain     five incarnations, each killed with SIGKILL at a random point, each but the first
 *             taking the log over; the final recovery holds every acknowledged object of all
 *             five, in order, with strictly increasing LSNs;
 *   restart   a killed primary started again with its old configuration: the plain open fails
 *             with -TW_ELOGEXISTS, and every acknowledged object is still recoverable;
 *   duplicate two primaries with the same epoch: the second is refused at open, the first goes on;
 *   racing    4 processes take a log over at once, each appends, then (all appended or failed)
 *             one more object each: exactly one ends as the owner, every other fails with
 *             -TW_EFENCED, and after the winner's recovered tail the log holds exactly its objects
 *             (20 rounds; 6 under a sanitizer: tap_sanitizer());
 *   recovers  two `twctl recover` of one log at once with automatic epochs (20 rounds, 6 under a
 *             sanitizer): the
 *             loser fails at once, naming the winner's epoch, and delivers nothing;
 *   clean     tw_admin_trim below segment N: the backups' files of those segments are gone (files
 *             and bytes counted), recovery starts at N; `twctl free` does the same;
 *   loss      every backup SIGKILLed after acknowledged appends and restarted: recovery fails
 *             with -TW_ELOST naming the segment, and `twctl recover` exits 1;
 *   sighup    SIGHUP to every twd during a stream: each flushes and exits 0; every acknowledged
 *             object is recovered after their restart.
 * After racing and recovers (fences under connection churn) every twd must still be alive: they
 * are stopped with SIGTERM and restarted, and each must exit 0.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "child.h"
#include "owner_util.h"
#include "proc.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"
#include "tmpdir.h"

#define NB 3
#define RACERS 4

static const char *prov;
static struct rt_cluster cl;
static char prim[1024], twctl[1024];
static uint64_t rng;
static char late[4096]; /* failures of the racing phases, repeated at the end of the log */

static void late_diag(const char *what, unsigned round, const char *why)
{
	size_t n = strlen(late);

	tap_diag("%s round %u: %s", what, round, why);
	if (n < sizeof(late) - 1)
		snprintf(late + n, sizeof(late) - n, "%s round %u: %s\n", what, round, why);
}

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static struct proc *spawn_primary(uint64_t log_id, const char *mode, uint64_t tag, uint64_t count,
				  char *const env[])
{
	char logid[32], tg[32], cnt[32];
	char *argv[] = { prim, (char *)prov, logid, (char *)mode, tg, cnt, cl.addr[0],
			 cl.addr[1], cl.addr[2], NULL };

	snprintf(logid, sizeof(logid), "0x%" PRIx64, log_id);
	snprintf(tg, sizeof(tg), "%" PRIu64, tag);
	snprintf(cnt, sizeof(cnt), "%" PRIu64, count);
	/* One "acked" line per object: not echoed when skipped, so that a failure's diagnostics
	 * stay in the last lines of the log. */
	return proc_spawn_opts(argv, env, &(struct proc_opts){ .drop_prefix = "acked " });
}

/* Log log_id written whole by one primary (tag 1): `count` objects, the primary done and gone. */
static void write_log(uint64_t log_id, uint64_t count, const char *what)
{
	char line[256];
	struct proc *p = spawn_primary(log_id, "open", 1, count, NULL);

	TAP_REQUIRE(p && proc_wait_line(p, "done", line, sizeof(line), 60000) >= 0, "%s", what);
	proc_wait(p, 30000);
	proc_free(p);
}

struct acks {
	uint64_t n;              /* objects acknowledged (highest seq + 1 seen) */
	uint64_t lsn_min, lsn_max;
};

static void take_ack(struct acks *a, const char *line)
{
	uint64_t seq, lsn;

	if (sscanf(line, "acked %" SCNu64 " %" SCNu64, &seq, &lsn) != 2)
		return;
	if (seq + 1 > a->n)
		a->n = seq + 1;
	if (!a->lsn_min || lsn < a->lsn_min)
		a->lsn_min = lsn;
	if (lsn > a->lsn_max)
		a->lsn_max = lsn;
}

/*
 * Read acks until `target` objects are acknowledged, crash the primary, take the acks left in the
 * pipe. SIGKILL on every provider: on shm a twd frees a region lock that a primary killed inside
 * a send left held (docs/fabric.md, "A writer killed holding a region lock").
 */
static int kill_after(struct proc *p, uint64_t target, struct acks *a)
{
	char line[256];
	int rc, pid = (int)proc_pid(p);

	while (a->n < target) {
		rc = proc_wait_line(p, "acked ", line, sizeof(line), 30000);
		if (rc < 0)
			return rc;
		take_ack(a, line);
	}
	proc_kill(p, SIGKILL);
	while (proc_wait_line(p, NULL, line, sizeof(line), 30000) >= 0)
		take_ack(a, line);
	rc = proc_wait(p, 30000);
	proc_free(p);
	if (strcmp(prov, "shm") == 0)
		rt_shm_cleanup(pid);
	return rc == 128 + SIGKILL ? 0 : -EIO;
}

/* The final recovery's view: objects 0..n-1 in order, LSNs strictly increasing, tags. */
struct check {
	uint64_t n, bad, last_lsn;
	bool any_start;  /* the first object may be any (after log cleaning) */
	uint64_t tags[4096]; /* tag of object i, for the first 4096 objects */
	char why[200];
};

static uint64_t seq_of(const struct tw_recovered_entry *e)
{
	uint64_t seq = 0, tag = 0;

	return ow_parse(e->data, e->len, &seq, &tag) ? seq : 0;
}

static int check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct check *c = arg;
	uint64_t seq = 0, tag = 0;

	if (c->any_start && e->index == 0)
		c->n = seq_of(e);
	if (!ow_parse(e->data, e->len, &seq, &tag) || seq != c->n ||
	    (c->n > 0 && e->lsn <= c->last_lsn)) {
		if (!c->bad++)
			snprintf(c->why, sizeof(c->why), "entry %" PRIu64 " (lsn %#" PRIx64 "): seq %"
				 PRIu64 ", previous lsn %#" PRIx64, e->index, e->lsn, seq,
				 c->last_lsn);
	}
	if (!c->any_start && c->n < sizeof(c->tags) / sizeof(c->tags[0]))
		c->tags[c->n] = tag;
	c->n++;
	c->last_lsn = e->lsn;
	return 0;
}

static int recover_from(uint64_t log_id, bool any_start, struct check *c,
			struct tw_recover_result *res, char *err, size_t len)
{
	struct tw_recover_config cfg;

	tlog_recover_config(&cfg, prov, cl.addrs, NB, log_id);
	memset(c, 0, sizeof(*c));
	c->any_start = any_start;
	return tw_recover(&cfg, check_cb, c, res, err, len);
}

static int recover(uint64_t log_id, struct check *c, struct tw_recover_result *res, char *err,
		   size_t len)
{
	return recover_from(log_id, false, c, res, err, len);
}

/* A TAP test, named what: the recovery of log_id holds at least the acked objects that were
 * acknowledged, in order with strictly increasing LSNs. */
static void recovers_acked(uint64_t log_id, uint64_t acked, const char *what)
{
	static struct check c;
	struct tw_recover_result res = { 0 };
	char err[512];
	int rc = recover(log_id, &c, &res, err, sizeof(err));

	ok(rc == 0 && c.bad == 0 && c.n >= acked,
	   "%s: all %" PRIu64 " acknowledged objects in order with strictly increasing LSNs (%"
	   PRIu64 " recovered, epoch %" PRIu64 ")%s%s", what, acked, c.n, res.epoch,
	   rc ? ": " : c.bad ? ": " : "", rc ? err : c.why);
}

static int wait_ready(struct proc *p, char *line, size_t len)
{
	return proc_wait_line(p, "ready", line, len, 60000);
}

/* A primary of log log_id (tag 1) that opens it and appends without end, ready. */
static struct proc *endless_primary(uint64_t log_id, const char *what)
{
	char line[256];
	struct proc *p = spawn_primary(log_id, "open", 1, 100000000, NULL);

	TAP_REQUIRE(p && wait_ready(p, line, sizeof(line)) >= 0, "%s", what);
	return p;
}

/* ---------------------------------------------------------------- chain */

static void test_chain(void)
{
	uint64_t log_id = 0x7100, acked = 0, prev_lsn = 0;
	char line[256];
	bool lsn_ok = true, ready_ok = true;
	int rc;

	for (unsigned inc = 0; inc < 5; inc++) {
		struct acks a = { 0 };
		struct proc *p = spawn_primary(log_id, inc ? "takeover" : "open", inc + 1,
					       100000000, NULL);
		uint64_t recovered = 0, next = 0, target;

		TAP_REQUIRE(p, "spawn incarnation %u", inc);
		rc = wait_ready(p, line, sizeof(line));
		TAP_REQUIRE(rc >= 0, "incarnation %u ready: %s", inc, strerror(-rc));
		sscanf(line, "ready recovered=%" SCNu64 " next=%" SCNu64, &recovered, &next);
		if (recovered < acked || next < acked)
			ready_ok = false;
		a.n = next;
		target = next + 30 + rnd() % 1500;
		rc = kill_after(p, target, &a);
		TAP_REQUIRE(rc == 0, "incarnation %u killed after %" PRIu64 " acks", inc, a.n);
		if (a.lsn_min <= prev_lsn)
			lsn_ok = false;
		tap_diag("incarnation %u: recovered %" PRIu64 ", acknowledged up to %" PRIu64
			 ", lsn %#" PRIx64 "..%#" PRIx64, inc, recovered, a.n, a.lsn_min, a.lsn_max);
		prev_lsn = a.lsn_max;
		acked = a.n;
	}
	ok(ready_ok, "chain: each takeover recovered every object acknowledged before it");
	ok(lsn_ok, "chain: each incarnation's LSNs are above the previous one's");
	recovers_acked(log_id, acked, "chain: the final recovery of five incarnations holds them");
}

/* ---------------------------------------------------------------- restart, duplicate */

static void test_restart(void)
{
	uint64_t log_id = 0x7200;
	struct acks a = { 0 };
	char line[1200];
	struct proc *p = endless_primary(log_id, "first primary ready");
	int rc;

	TAP_REQUIRE(kill_after(p, 100, &a) == 0, "killed after 100 acks");
	p = spawn_primary(log_id, "open", 2, 10, NULL);
	TAP_REQUIRE(p, "spawn the restarted primary");
	rc = proc_wait_line(p, "error", line, sizeof(line), 60000);
	ok(rc >= 0 && strstr(line, "take it over") != NULL,
	   "restart with the old config: the plain open is refused and says to take over (%s)",
	   rc >= 0 ? line : strerror(-rc));
	is_int(proc_wait(p, 30000), 5, "... with -TW_ELOGEXISTS (exit 5)");
	proc_free(p);
	recovers_acked(log_id, a.n, "restart: every acknowledged object is still there");
}

static void test_duplicate(void)
{
	uint64_t log_id = 0x7300;
	char line[1200];
	char *env[] = { (char *)"OWNER_EPOCH=7", NULL };
	struct proc *a = spawn_primary(log_id, "race", 1, 50, env), *b;
	int rc;

	TAP_REQUIRE(a && proc_wait_line(a, "appended", line, sizeof(line), 60000) >= 0,
		    "first primary at epoch 7 appended");
	b = spawn_primary(log_id, "open", 2, 50, env);
	TAP_REQUIRE(b, "spawn the second primary at epoch 7");
	rc = proc_wait(b, 60000);
	ok(rc == 5 || rc == 4, "same-epoch duplicate: the second open is refused (exit %d)", rc);
	proc_free(b);
	is_int(child_stop(a, SIGUSR1, 60000), 0,
	       "the first primary still owns the log (last append ok)");
}

/* ---------------------------------------------------------------- racing takeovers */

static bool race_round(unsigned round, char *why, size_t len)
{
	uint64_t log_id = 0x7400 + round, rec[RACERS] = { 0 };
	struct proc *base, *r[RACERS];
	bool appended[RACERS] = { false };
	int st[RACERS], winner = -1, winners = 0;
	struct tw_recover_result res;
	static struct check c;
	char line[1200], err[512];
	int rc;

	base = spawn_primary(log_id, "open", 100, 20, NULL);
	if (!base || proc_wait_line(base, "done", line, sizeof(line), 60000) < 0 ||
	    proc_wait(base, 30000) != 0) {
		snprintf(why, len, "base log not written");
		proc_free(base);
		return false;
	}
	proc_free(base);
	for (int i = 0; i < RACERS; i++)
		r[i] = spawn_primary(log_id, "race", (uint64_t)i + 1, 10, NULL);
	for (int i = 0; i < RACERS; i++) {
		if (!r[i])
			continue;
		if (proc_wait_line(r[i], "ready", line, sizeof(line), 60000) >= 0)
			sscanf(line, "ready recovered=%" SCNu64, &rec[i]);
		appended[i] = proc_wait_line(r[i], "appended", line, sizeof(line), 60000) >= 0;
	}
	for (int i = 0; i < RACERS; i++) {
		if (appended[i])
			proc_kill(r[i], SIGUSR1);
		st[i] = r[i] ? proc_wait(r[i], 60000) : -1;
		proc_free(r[i]);
		if (st[i] == 0) {
			winners++;
			winner = i;
		}
	}
	if (winners != 1) {
		snprintf(why, len, "%d winners (exit %d %d %d %d)", winners, st[0], st[1], st[2],
			 st[3]);
		return false;
	}
	for (int i = 0; i < RACERS; i++) {
		if (i != winner && st[i] != 4) {
			snprintf(why, len, "racer %d exited %d, not 4 (-TW_EFENCED)", i, st[i]);
			return false;
		}
	}
	rc = recover(log_id, &c, &res, err, sizeof(err));
	if (rc || c.bad || c.n != rec[winner] + 11) {
		snprintf(why, len, "recovered %" PRIu64 " (want %" PRIu64 " + 11): %.150s", c.n,
			 rec[winner], rc ? err : c.why);
		return false;
	}
	for (uint64_t i = rec[winner]; i < c.n && i < 4096; i++) {
		if (c.tags[i] != (uint64_t)winner + 1) {
			snprintf(why, len, "object %" PRIu64 " after the winner's tail was written by "
				 "racer %" PRIu64, i, c.tags[i] - 1);
			return false;
		}
	}
	snprintf(why, len, "winner %d (recovered %" PRIu64 ", exits %d %d %d %d)", winner,
		 rec[winner], st[0], st[1], st[2], st[3]);
	return true;
}

static void test_racing_takeovers(void)
{
	unsigned rounds = tap_sanitizer() ? 6 : 20, good = 0;
	char why[300] = "";

	for (unsigned i = 0; i < rounds; i++) {
		if (race_round(i, why, sizeof(why)))
			good++;
		else
			late_diag("racing takeovers", i, why);
	}
	tap_diag("last round: %s", why);
	is_int(good, rounds, "racing takeovers: in every round exactly one of 4 owns the log, the "
	       "others fail with -TW_EFENCED, and the log after the winner's tail is its own");
}

/* ---------------------------------------------------------------- racing recoveries */

static int drain_fd(int fd)
{
	char buf[65536];
	ssize_t n;
	int total = 0;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += (int)n;
	return total;
}

static bool recover_round(const char *dir, uint64_t log_id, unsigned round, char *why,
			  size_t len)
{
	char fifo[2][300], line[2][2048], logid[32];
	struct proc *t[2];
	int fd[2], st[2] = { -1, -1 }, first = -1;
	unsigned long long wepoch = 0;
	char needle[64];

	snprintf(logid, sizeof(logid), "0x%" PRIx64, log_id);
	for (int i = 0; i < 2; i++) {
		snprintf(fifo[i], sizeof(fifo[i]), "%s/out%u-%d", dir, round, i);
		if (mkfifo(fifo[i], 0600) != 0) {
			snprintf(why, len, "mkfifo: %s", strerror(errno));
			return false;
		}
	}
	for (int i = 0; i < 2; i++) {
		char *argv[] = { twctl, (char *)"-p", (char *)prov, (char *)"-j", (char *)"-b",
				 cl.addr[0], (char *)"-b", cl.addr[1], (char *)"-b", cl.addr[2],
				 (char *)"recover", logid, (char *)"-o", fifo[i], NULL };

		t[i] = proc_spawn(argv, NULL);
	}
	/* Both block opening their FIFO until we open the read ends: a start line. Then neither
	 * output is read until one process has exited: the winner fills its pipe and waits there,
	 * holding the log, so the loser always meets it. */
	for (int i = 0; i < 2; i++)
		fd[i] = open(fifo[i], O_RDONLY | O_NONBLOCK);
	while (first < 0) {
		for (int i = 0; i < 2 && first < 0; i++) {
			st[i] = proc_wait(t[i], 20);
			if (st[i] >= 0)
				first = i;
		}
	}
	if (st[first] == 0) {
		snprintf(why, len, "twctl %d succeeded while the other had not finished", first);
		goto out;
	}
	if (proc_wait_line(t[first], "{", line[first], sizeof(line[first]), 1000) < 0)
		line[first][0] = '\0';
	if (drain_fd(fd[first]) != 0) {
		snprintf(why, len, "the loser delivered entries");
		goto out;
	}
	for (;;) { /* the winner: read its output to the end */
		struct pollfd pf = { fd[!first], POLLIN, 0 };

		if (poll(&pf, 1, 100) > 0 && read(fd[!first], line[!first], 1) == 0 &&
		    !proc_alive(t[!first]))
			break;
		drain_fd(fd[!first]);
		if (!proc_alive(t[!first]))
			break;
	}
	st[!first] = proc_wait(t[!first], 60000);
	if (st[!first] != 0 ||
	    proc_wait_line(t[!first], "{", line[!first], sizeof(line[!first]), 5000) < 0 ||
	    !strstr(line[!first], "\"ok\":true")) {
		snprintf(why, len, "the other twctl did not succeed (exit %d)", st[!first]);
		goto out;
	}
	{
		const char *e = strstr(line[!first], "\"epoch\":");

		wepoch = e ? strtoull(e + 8, NULL, 10) : 0;
	}
	snprintf(needle, sizeof(needle), "epoch %llu", wepoch);
	if (!strstr(line[first], needle)) {
		snprintf(why, len, "the loser's error does not name the winner's epoch %llu: %.200s",
			 wepoch, line[first]);
		goto out;
	}
	snprintf(why, len, "winner epoch %llu; loser: %.200s", wepoch, line[first]);
	for (int i = 0; i < 2; i++) {
		close(fd[i]);
		unlink(fifo[i]);
		proc_free(t[i]);
	}
	return true;
out:
	for (int i = 0; i < 2; i++) {
		if (fd[i] >= 0) {
			drain_fd(fd[i]);
			close(fd[i]);
		}
		unlink(fifo[i]);
		proc_free(t[i]);
	}
	return false;
}

static void test_racing_recoveries(void)
{
	uint64_t log_id = 0x7500;
	char dir[256], why[600] = "";
	unsigned rounds = tap_sanitizer() ? 6 : 20, good = 0;

	write_log(log_id, 3000, "a log of 3000 objects (300 KB, more than a pipe holds)");
	tmpdir_make(dir, sizeof(dir), NULL, "tw-race");
	for (unsigned i = 0; i < rounds; i++) {
		if (recover_round(dir, log_id, i, why, sizeof(why)))
			good++;
		else
			late_diag("racing recoveries", i, why);
	}
	tap_diag("last round: %s", why);
	tmpdir_remove(dir);
	is_int(good, rounds, "racing recoveries: in every round one twctl recover wins, the other "
	       "fails at once naming the winner's epoch and delivers nothing");
}

/* ---------------------------------------------------------------- cleaning */

/* Segment files of `log_id` below `below` in every twd directory: count and bytes. */
static void count_files(uint64_t log_id, uint64_t below, unsigned *files, uint64_t *bytes)
{
	char prefix[32];

	snprintf(prefix, sizeof(prefix), "%016" PRIx64 "-", log_id);
	*files = 0;
	*bytes = 0;
	for (unsigned i = 0; i < NB; i++) {
		DIR *d = opendir(cl.dir[i]);
		struct dirent *de;

		while (d && (de = readdir(d)) != NULL) {
			char path[512];
			struct stat st;

			if (strncmp(de->d_name, prefix, 17) != 0 || !strstr(de->d_name, ".twseg") ||
			    strstr(de->d_name, ".tmp") ||
			    strtoull(de->d_name + 17, NULL, 16) >= below)
				continue;
			snprintf(path, sizeof(path), "%s/%s", cl.dir[i], de->d_name);
			if (stat(path, &st) == 0) {
				(*files)++;
				*bytes += (uint64_t)st.st_size;
			}
		}
		if (d)
			closedir(d);
	}
}

/*
 * The flusher removes freed segment files after the Free reply, so wait for the removals
 * themselves: inotify watches on the backups' directories, set up before the free, wake this
 * thread at each deletion or rename (bounded by 30 s without any event).
 */
static int watch_dirs(void)
{
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

	for (unsigned i = 0; fd >= 0 && i < NB; i++)
		if (inotify_add_watch(fd, cl.dir[i], IN_DELETE | IN_MOVED_FROM) < 0) {
			close(fd);
			fd = -1;
		}
	return fd;
}

static void wait_files_gone(int wfd, uint64_t log_id, uint64_t below, unsigned *files,
			    uint64_t *bytes)
{
	char ev[4096];

	for (;;) {
		struct pollfd pfd = { .fd = wfd, .events = POLLIN };

		count_files(log_id, below, files, bytes);
		if (*files == 0 || wfd < 0 || poll(&pfd, 1, 30000) <= 0)
			break;
		while (read(wfd, ev, sizeof(ev)) > 0)
			; /* drain: the count above is what matters */
	}
	if (wfd >= 0)
		close(wfd);
}

static void test_clean(void)
{
	uint64_t log_id = 0x7600, freed = 0, bytes0, bytes1;
	unsigned files0, files1;
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	static struct check c;
	char line[256], err[512];
	int rc, wfd;

	write_log(log_id, 4000, "a log of 4000 objects (7 segments)");
	tlog_recover_config(&cfg, prov, cl.addrs, NB, log_id);
	count_files(log_id, 4, &files0, &bytes0);
	wfd = watch_dirs();
	rc = tw_admin_trim(&cfg, 4, &freed, err, sizeof(err));
	ok(rc == 0 && freed >= 4 * NB, "tw_admin_trim below segment 4: %" PRIu64 " copies dropped%s%s",
	   freed, rc ? ": " : "", rc ? err : "");
	wait_files_gone(wfd, log_id, 4, &files1, &bytes1);
	ok(files1 == 0 && bytes1 == 0, "the backups' files of segments 0..3 are gone (%u files, %"
	   PRIu64 " bytes before; %u files, %" PRIu64 " bytes after)", files0, bytes0, files1,
	   bytes1);
	rc = recover_from(log_id, true, &c, &res, err, sizeof(err));
	ok(rc == 0 && res.first_segment == 4 && res.free_below == 4 && c.bad == 0,
	   "recovery starts at segment 4 (first %" PRIu64 ", %" PRIu64 " entries)%s%s",
	   res.first_segment, res.entries, rc ? ": " : "", rc ? err : "");

	/* The same from the command line, on another log. */
	log_id = 0x7601;
	write_log(log_id, 4000, "log 0x7601");
	{
		char *argv[] = { twctl, (char *)"-p", (char *)prov, (char *)"-b", cl.addr[0],
				 (char *)"-b", cl.addr[1], (char *)"-b", cl.addr[2], (char *)"free",
				 (char *)"0x7601", (char *)"--below", (char *)"3", NULL };
		struct proc *t;

		wfd = watch_dirs();
		t = proc_spawn(argv, NULL);
		rc = proc_wait_line(t, "log", line, sizeof(line), 60000);
		is_int(proc_wait(t, 60000), 0, "twctl free 0x7601 --below 3: exit 0 (%s)",
		       rc >= 0 ? line : "no output");
		proc_free(t);
	}
	wait_files_gone(wfd, log_id, 3, &files1, &bytes1);
	ok(files1 == 0, "twctl free: files of segments 0..2 gone (%u left)", files1);
	rc = recover_from(log_id, true, &c, &res, err, sizeof(err));
	ok(rc == 0 && res.first_segment == 3 && c.bad == 0, "twctl free: recovery starts at segment 3 (%" PRIu64
	   ")%s%s", res.first_segment, rc ? ": " : "", rc ? err : "");
}

/* ---------------------------------------------------------------- loss, SIGHUP */

static void restart_all(void)
{
	for (unsigned i = 0; i < NB; i++)
		rt_restart(&cl, i, "64K", "64");
}

static void test_loss(void)
{
	uint64_t log_id = 0x7700;
	struct acks a = { 0 };
	struct tw_recover_result res;
	static struct check c;
	char line[2048], err[1024], logid[32];
	/* 300 objects of a 584-object segment, then the primary holds: segment 0 is still open
	 * (unflushed) when the backups die, however slow this machine is. */
	struct proc *p = spawn_primary(log_id, "hold", 1, 300, NULL);
	int rc;

	TAP_REQUIRE(p && wait_ready(p, line, sizeof(line)) >= 0, "primary ready");
	while (proc_wait_line(p, NULL, line, sizeof(line), 30000) >= 0 &&
	       strncmp(line, "appended", 8) != 0)
		take_ack(&a, line);
	for (unsigned i = 0; i < NB; i++)
		proc_kill(cl.p[i], SIGKILL);
	for (unsigned i = 0; i < NB; i++) {
		proc_wait(cl.p[i], 30000);
		if (strcmp(prov, "shm") == 0)
			rt_shm_cleanup((int)proc_pid(cl.p[i]));
	}
	proc_kill(p, SIGKILL);
	proc_wait(p, 30000);
	proc_free(p);
	restart_all();
	rc = recover(log_id, &c, &res, err, sizeof(err));
	ok(rc == -TW_ELOST && strstr(err, "lost") && c.n == 0,
	   "all backups SIGKILLed after %" PRIu64 " acks: recovery fails with -TW_ELOST, nothing "
	   "delivered (%s: %s)", a.n, tw_strerror(rc), err);
	snprintf(logid, sizeof(logid), "0x%" PRIx64, log_id);
	{
		char *argv[] = { twctl, (char *)"-p", (char *)prov, (char *)"-j", (char *)"-b",
				 cl.addr[0], (char *)"-b", cl.addr[1], (char *)"-b", cl.addr[2],
				 (char *)"recover", logid, (char *)"--verify", NULL };
		struct proc *t = proc_spawn(argv, NULL);

		rc = proc_wait_line(t, "{", line, sizeof(line), 60000);
		ok(rc >= 0 && strstr(line, "is lost") && strstr(line, "\"segments_lost\":"),
		   "twctl recover names the lost segment: %.300s", rc >= 0 ? line : "no output");
		is_int(proc_wait(t, 60000), 1, "twctl recover exits 1");
		proc_free(t);
	}
}

static void test_sighup(void)
{
	uint64_t log_id = 0x7800;
	struct acks a = { 0 };
	char line[256];
	struct proc *p = endless_primary(log_id, "primary ready");
	int exits = 0;

	/* Signal early, while the primary is still writing segment 0: on sockets the provider's
	 * thread placed and acknowledged writes after the shutdown flush had scanned the buffer
	 * (2 runs in 16 lost acknowledged objects, four copies at once) until twd shut its
	 * connections before the scan. */
	while (a.n < 100 && proc_wait_line(p, "acked ", line, sizeof(line), 30000) >= 0)
		take_ack(&a, line);
	for (unsigned i = 0; i < NB; i++)
		proc_kill(cl.p[i], SIGHUP);
	for (unsigned i = 0; i < NB; i++)
		exits += proc_wait(cl.p[i], 60000) == 0;
	/* Acks the primary reported before its backups went. */
	while (proc_wait_line(p, "acked ", line, sizeof(line), 2000) >= 0)
		take_ack(&a, line);
	proc_kill(p, SIGKILL);
	proc_wait(p, 30000);
	proc_free(p);
	is_int(exits, NB, "SIGHUP: every twd flushed and exited 0");
	restart_all();
	recovers_acked(log_id, a.n, "SIGHUP: every acknowledged object is recovered");
}

/* Restart every twd on its directory (SIGTERM: flushed). Seen on shm: after the racing phases
 * (over 150 peer processes connected to each twd in one run), new connections to the twd timed
 * out. Not pinned down yet (the likely cause: the fabric layer never removes a departed peer's
 * address-vector entry, and shm bounds its peers); a fresh twd per phase keeps each run below
 * it. The limit itself is reported in the closing note of the ownership issue. */
static void cycle_backups(const char *phase)
{
	unsigned alive = 0;

	for (unsigned i = 0; i < NB; i++) {
		int st = rt_stop_one(&cl, i);

		if (st == 0)
			alive++;
		else
			tap_diag("%s: twd %u (%s) did not exit 0 on SIGTERM: status %d (128+N: "
				 "killed by signal N, i.e. it had died during the phase)", phase, i,
				 cl.addr[i], st);
		rt_restart(&cl, i, "64K", "64");
	}
	is_int(alive, NB, "%s: every twd survived the phase (stopped with SIGTERM, exit 0)", phase);
}

static const struct phase {
	const char *name;
	void (*run)(void);
	unsigned tests;
	bool cycle_after; /* restart the twd's after it (many peer processes on shm), one test */
} phases[] = {
	{ "chain", test_chain, 3, false },
	{ "restart", test_restart, 3, false },
	{ "duplicate", test_duplicate, 2, false },
	{ "racing", test_racing_takeovers, 2, true },
	{ "recovers", test_racing_recoveries, 2, true },
	{ "clean", test_clean, 6, false },
	{ "loss", test_loss, 3, false },
	{ "sighup", test_sighup, 2, false },
};

/* argv[2], optional: a comma-separated list of phases to run (default: all), for debugging. */
static bool wanted(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0))
			return true;
	return !list;
}

int main(int argc, char **argv)
{
	const char *only = argc > 2 ? argv[2] : NULL;
	unsigned plan = 0;

	prov = argc > 1 ? argv[1] : "tcp";
	child_tool("tests/integration/owner_primary", prim, sizeof(prim));
	child_tool("tools/twctl", twctl, sizeof(twctl));
	rng = tap_seed() | 1;
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
		plan += wanted(only, phases[i].name) ? phases[i].tests : 0;
	if (!plan)
		tap_plan_skip_all("no phase named in '%s'", only);
	tap_plan(plan);
	rt_start(&cl, prov, NB, "64K", "64");
	tap_diag("provider %s, backups %s %s %s", prov, cl.addr[0], cl.addr[1], cl.addr[2]);
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		if (!wanted(only, phases[i].name))
			continue;
		phases[i].run();
		if (phases[i].cycle_after)
			cycle_backups(phases[i].name);
	}
	rt_stop(&cl);
	if (late[0])
		fprintf(stderr, "# failed rounds (repeated from above):\n%s", late);
	return tap_exit();
}
