/*
 * tools/twctl_coord.c — twctl's coordinator side (twctl_coord.h).
 */
#include "twctl_coord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <signal.h>
#include <time.h>

#include <tailwind/common.h>
#include <tailwind/coordinator.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>
#include <tailwind/standby.h>


static struct tw_coordinator *coord; /* held until exit: the owner node of fence/recover/delete */
static struct tw_registrations *regs;   /* the addresses twctl_coord_backups handed out */

static void close_at_exit(void)
{
	tw_coordinator_close(coord);
	coord = NULL;
	tw_registrations_free(regs);
	regs = NULL;
}

static int open_once(const char *url, unsigned timeout_ms)
{
	char err[768];
	int rc;

	if (coord)
		return 0;
	rc = tw_coordinator_open(url, timeout_ms, &coord, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twctl: coordinator: %s\n", err);
		return -1;
	}
	atexit(close_at_exit);
	return 0;
}

int twctl_coord_check(const char *url)
{
	char err[768];

	if (tw_coordinator_check_url(url, err, sizeof(err)) < 0) {
		fprintf(stderr, "twctl: --coordinator: %s\n", err);
		return -1;
	}
	return 0;
}

int twctl_coord_backups(const char *url, unsigned timeout_ms, const char *provider,
			const uint64_t *log, const char **backups, unsigned *n, unsigned max)
{
	size_t nr = 0, other = 0;
	bool recorded = false;

	if (open_once(url, timeout_ms) < 0)
		return -1;
	if (!provider)
		provider = "tcp";
	tw_registrations_free(regs);
	regs = NULL;
	/* A log's own record first: the backups that were ever asked to hold a segment of it
	 * (a backup that died since is still asked; one never used by the log is not). */
	if (log) {
		int rc = tw_coordinator_list(coord, log, &regs);

		if (rc < 0 && rc != -ENOTSUP && rc != -TW_ENOTFOUND) {
			fprintf(stderr, "twctl: %s\n", tw_coordinator_errmsg(coord));
			return -1;
		}
		recorded = rc == 0 && tw_registrations_count(regs) > 0;
		if (!recorded) {
			tw_registrations_free(regs);
			regs = NULL;
		}
	}
	if (!recorded && tw_coordinator_list(coord, NULL, &regs) < 0) {
		fprintf(stderr, "twctl: %s\n", tw_coordinator_errmsg(coord));
		return -1;
	}
	nr = tw_registrations_count(regs);
	*n = 0;
	for (size_t i = 0; i < nr && *n < max; i++) {
		const struct tw_registration *r = tw_registrations_at(regs, i);

		if (r->provider[0] && strcmp(r->provider, provider)) {
			other++;
			continue;
		}
		backups[(*n)++] = r->addr;
	}
	if (*n == 0) {
		fprintf(stderr, "twctl: no backup %s at %s for provider %s (%zu for other "
			"providers): start twd --coordinator URL, or give -b ADDR\n",
			recorded ? "recorded for the log" : "registered", url, provider, other);
		return -1;
	}
	return 0;
}

int twctl_coord_epoch(const char *url, unsigned timeout_ms, const char *cmd,
		      struct tw_recover_config *cfg)
{
	char owner[256], host[128] = "?";
	uint64_t epoch = 0;

	if (open_once(url, timeout_ms) < 0)
		return -1;
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "twctl %s host=%s pid=%ld", cmd, host, (long)getpid());
	if (tw_coordinator_take_log(coord, cfg->log_id, cfg->epoch, owner, 1, &epoch) < 0) {
		fprintf(stderr, "twctl %s: %s\n", cmd, tw_coordinator_errmsg(coord));
		return -1;
	}
	cfg->epoch = epoch;
	return 0;
}

int twctl_coord_log_known(const char *url, unsigned timeout_ms, const char *cmd,
			  uint64_t log_id)
{
	char owner[512];
	uint64_t epoch = 0;
	int rc;

	if (open_once(url, timeout_ms) < 0)
		return -1;
	rc = tw_coordinator_log_info(coord, log_id, &epoch, owner, sizeof(owner));
	if (rc == -TW_ENOTFOUND)
		return 0;
	if (rc < 0) {
		fprintf(stderr, "twctl %s: %s\n", cmd, tw_coordinator_errmsg(coord));
		return -1;
	}
	return 1;
}

int twctl_coord_ls_backups(const char *url, unsigned timeout_ms, bool json)
{
	struct tw_registrations *v = NULL;
	size_t n;

	if (open_once(url, timeout_ms) < 0)
		return 1;
	if (tw_coordinator_list(coord, NULL, &v) < 0) {
		fprintf(stderr, "twctl ls-backups: %s\n", tw_coordinator_errmsg(coord));
		return 1;
	}
	if (json)
		printf("{\"backups\":[");
	else
		printf("%-18s %-28s %-8s %-12s %9s %12s\n", "NODE", "ADDRESS", "PROVIDER", "ZONE",
		       "FREE/BUFS", "BUFFER_SIZE");
	n = tw_registrations_count(v);
	for (size_t i = 0; i < n; i++) {
		const struct tw_registration *b = tw_registrations_at(v, i);

		/* The fields hold no '"', '\\' or control characters except what twd was given:
		 * escape those two to stay valid JSON. */
		if (json) {
			const char *f[3] = { b->addr, b->provider, b->zone };
			const char *k[3] = { "address", "provider", "zone" };

			printf("%s{\"node\":\"%s\"", i ? "," : "", b->node);
			for (int j = 0; j < 3; j++) {
				printf(",\"%s\":\"", k[j]);
				for (const char *s = f[j]; *s; s++)
					if (*s == '"' || *s == '\\')
						printf("\\%c", *s);
					else if ((unsigned char)*s < 0x20)
						printf("\\u%04x", (unsigned char)*s);
					else
						putchar(*s);
				putchar('"');
			}
			printf(",\"buffers\":%" PRIu32 ",\"free\":%" PRIu32 ",\"buffer_size\":%" PRIu64
			       "}", b->buffers, b->free_buffers, b->buffer_size);
		} else {
			char fb[32];

			snprintf(fb, sizeof(fb), "%" PRIu32 "/%" PRIu32, b->free_buffers, b->buffers);
			printf("%-18s %-28s %-8s %-12s %9s %12" PRIu64 "\n", b->node, b->addr,
			       b->provider, b->zone[0] ? b->zone : "-", fb, b->buffer_size);
		}
	}
	if (json)
		printf("]}\n");
	tw_registrations_free(v);
	return 0;
}

int twctl_coord_owner(const char *url, unsigned timeout_ms, bool json, uint64_t log_id)
{
	char owner[512] = "";
	uint64_t epoch = 0;
	int rc;

	if (open_once(url, timeout_ms) < 0)
		return 1;
	rc = tw_coordinator_log_info(coord, log_id, &epoch, owner, sizeof(owner));
	if (rc < 0) {
		fprintf(stderr, "twctl owner: %s\n", tw_coordinator_errmsg(coord));
		return 1;
	}
	if (json)
		printf("{\"log_id\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"owner\":\"%s\"}\n", log_id,
		       epoch, owner); /* owner: "epoch=N owner=host=H pid=P": no quotes */
	else
		printf("log %#" PRIx64 " epoch %" PRIu64 " owner %s\n", log_id, epoch,
		       owner[0] ? owner : "(none)");
	return 0;
}

/* JSON string body: escape '"', '\\' and control characters. */
static void json_str(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
}

int twctl_coord_ls_logs(const char *url, unsigned timeout_ms, bool json)
{
	uint64_t *ids = NULL;
	size_t n = 0;
	int st = 0;

	if (open_once(url, timeout_ms) < 0)
		return 1;
	if (tw_coordinator_logs(coord, &ids, &n) < 0) {
		fprintf(stderr, "twctl ls-logs: %s\n", tw_coordinator_errmsg(coord));
		return 1;
	}
	if (json)
		printf("{\"logs\":[");
	else
		printf("%-20s %6s %-32s %s\n", "LOG", "EPOCH", "OWNER", "BACKUPS USED");
	for (size_t i = 0; i < n; i++) {
		struct tw_registrations *v = NULL;
		size_t nb;
		char owner[512] = "", *o = owner;
		uint64_t epoch = 0;

		if (tw_coordinator_log_info(coord, ids[i], &epoch, owner, sizeof(owner)) < 0 ||
		    tw_coordinator_list(coord, &ids[i], &v) < 0) {
			fprintf(stderr, "twctl ls-logs: log %" PRIu64 ": %s\n", ids[i],
				tw_coordinator_errmsg(coord));
			st = 1;
			continue;
		}
		nb = tw_registrations_count(v);
		/* "epoch=N owner=host=H pid=P": the description after "owner=". */
		if (strstr(owner, "owner="))
			o = strstr(owner, "owner=") + 6;
		for (char *e = o + strlen(o); e > o && e[-1] == ' '; e--)
			e[-1] = '\0';
		if (json) {
			printf("%s{\"log_id\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"owner\":\"", i ? ","
			       : "", ids[i], epoch);
			json_str(o);
			printf("\",\"backups\":[");
			for (size_t k = 0; k < nb; k++) {
				const struct tw_registration *b = tw_registrations_at(v, k);

				printf("%s{\"address\":\"", k ? "," : "");
				json_str(b->addr);
				printf("\",\"provider\":\"");
				json_str(b->provider);
				printf("\",\"zone\":\"");
				json_str(b->zone);
				printf("\"}");
			}
			printf("]}");
		} else {
			printf("%#-20" PRIx64 " %6" PRIu64 " %-32s", ids[i], epoch, o[0] ? o : "-");
			for (size_t k = 0; k < nb; k++) {
				const struct tw_registration *b = tw_registrations_at(v, k);

				printf("%s%s%s%s%s", k ? "," : " ", b->addr, b->zone[0] ? "(" : "",
				       b->zone, b->zone[0] ? ")" : "");
			}
			printf("%s\n", nb ? "" : " -");
		}
		tw_registrations_free(v);
	}
	if (json)
		printf("]}\n");
	free(ids);
	return st;
}

/* ------------------------------------------------------------------ standby */

static int parse_num(const char *s, uint64_t *out, bool suffix)
{
	char *end;
	unsigned long long x;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	x = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	if (suffix && (*end == 'K' || *end == 'k'))
		x <<= 10, end++;
	else if (suffix && (*end == 'M' || *end == 'm'))
		x <<= 20, end++;
	if (*end)
		return -1;
	*out = x;
	return 0;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The new owner's first append was acknowledged (it started at t0): how long it took, and
 * when (CLOCK_REALTIME, comparable with the moment the old owner was killed). */
static void print_first(uint64_t t0)
{
	uint64_t t = now_ns();
	struct timespec rt;

	clock_gettime(CLOCK_REALTIME, &rt);
	printf("first_append_ms=%.3f acked_realtime_ns=%" PRIu64 "\n", ms(t - t0),
	       (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec);
}

/* The standby's watch is set on an owner node: say so (a script kills the owner after it). */
static void print_watching(void *arg, const char *owner)
{
	printf("watching log %#" PRIx64 ": owner node %s\n", *(const uint64_t *)arg, owner);
	fflush(stdout);
}

/* --warm: the standby's view of the log (the entries the reader, then the takeover's recovery,
 * handed over). on_entry runs on the reader's thread while the standby waits, then on ours
 * during the recovery, never on both at once (tailwind/standby.h). */
struct warm_view {
	uint64_t log_id;
	uint64_t entries;    /* delivered so far */
	uint64_t next_print; /* monotonic ns: the next progress line is due */
};

#define WARM_PRINT_NS 100000000u /* a progress line at most every 100 ms */

static int warm_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct warm_view *w = arg;
	uint64_t now = now_ns();

	w->entries++;
	if (now >= w->next_print) {
		printf("warm log=%#" PRIx64 " entries=%" PRIu64 " lsn=%#" PRIx64 "\n", w->log_id,
		       w->entries, e->lsn);
		fflush(stdout);
		w->next_print = now + WARM_PRINT_NS;
	}
	return 0;
}

void twctl_coord_standby_usage(FILE *f)
{
	fprintf(f, "Usage: twctl -c URL standby LOG [--warm] [--append N [--size BYTES] [--hold]]\n"
		"       [options]\n"
		"Stand by for LOG: wait (a ZooKeeper watch, no polling) until its owner node\n"
		"is gone -- the owner closed the log, or died and its ZooKeeper session\n"
		"expired (-t MS is our session timeout too) -- then take the log over: next\n"
		"epoch and owner node from the coordinator (if several standbys wait, exactly\n"
		"one wins; the others watch the winner), fence and recover on the backups\n"
		"recorded for the log, open a new segment on registered backups. Prints\n"
		"  watching log L: owner node epoch=N owner=...   (each time the watch is set)\n"
		"  warm log=L entries=N lsn=X   (--warm: at most every 100 ms while entries\n"
		"                    arrive; N entries read so far, X the last one's LSN)\n"
		"  took-over log=... epoch=E watched=0|1 lost_races=N gone_realtime_ns=T\n"
		"            claim_ms= connect_ms= fence_ms= recover_ms= entries= backups=\n"
		"            open_ms= takeover_ms=   (backups: how many the recovery asked;\n"
		"            entries: how many it replayed)\n"
		"            [warm_entries= warm_lsn= warm_stop_ms=]   (--warm: entries read\n"
		"            while waiting, where the recovery started, stopping the reader)\n"
		"  first_append_ms=X acked_realtime_ns=T   (once the first entry is\n"
		"                    acknowledged; T: CLOCK_REALTIME then, to compare with the\n"
		"                    time the old owner died)\n"
		"then appends, as the log's primary:\n"
		"  (default)         each line of stdin is one entry (without its newline);\n"
		"                    prints \"acked LSN\" (hex) per entry; closes at end of input\n"
		"  -n, --append N    N generated entries of --size bytes: an 8-byte little-\n"
		"                    endian sequence number (continuing after the entries\n"
		"                    read and recovered) then that number's low byte repeated;\n"
		"                    prints \"acked COUNT\" (entries in the log) per entry\n"
		"  -s, --size BYTES  generated entry size (>= 8; default 64; K/M suffixes)\n"
		"      --hold        after the N entries keep the log open (owner node held)\n"
		"                    until SIGTERM or SIGINT, then close it cleanly\n"
		"Options:\n"
		"      --warm        warm standby: while waiting, read the log from its oldest\n"
		"                    entry as the owner's appends are acknowledged (a reader,\n"
		"                    docs/readers.md); the takeover's recovery then replays\n"
		"                    only the entries after the last one read\n"
		"  -w, --wait MS     give up (exit 1) if still owned after MS (default: wait)\n"
		"  -r, --replicas R  replicas per segment (default 3)\n"
		"  -S, --segment-size BYTES  segment size (default 8M; the twd buffer size\n"
		"                    or less)\n"
		"Exit status 0 when the log was closed cleanly, 1 when the takeover or an\n"
		"append failed: then \"append failed: [fenced: ]REASON\" on stdout (fenced:\n"
		"a newer owner took the log over) and the detail on stderr.\n");
}

/* twctl standby's command line. */
struct standby_opts {
	uint64_t log_id, n_append, size, wait_ms, replicas, seg;
	bool hold, generated, warm;
};

/* Parse ARGS after `standby`; 0, or 2 (usage) after saying why. */
static int standby_args(int argc, char **argv, struct standby_opts *o)
{
	bool have_log = false;

	*o = (struct standby_opts){ .size = 64, .replicas = 3 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t *dst = NULL;
		bool suffix = false;

		if (!strcmp(a, "--hold")) {
			o->hold = true;
			continue;
		}
		if (!strcmp(a, "--warm")) {
			o->warm = true;
			continue;
		}
		if (!strcmp(a, "-n") || !strcmp(a, "--append"))
			dst = &o->n_append, o->generated = true;
		else if (!strcmp(a, "-s") || !strcmp(a, "--size"))
			dst = &o->size, suffix = true;
		else if (!strcmp(a, "-w") || !strcmp(a, "--wait"))
			dst = &o->wait_ms;
		else if (!strcmp(a, "-r") || !strcmp(a, "--replicas"))
			dst = &o->replicas;
		else if (!strcmp(a, "-S") || !strcmp(a, "--segment-size"))
			dst = &o->seg, suffix = true;
		else if (a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
			fprintf(stderr, "twctl standby: unknown option '%s' (see twctl standby "
				"--help)\n", a);
			return 2;
		} else if (!have_log && parse_num(a, &o->log_id, false) == 0) {
			have_log = true;
			continue;
		} else {
			fprintf(stderr, "twctl standby: '%s' is not a log id: expected one integer "
				">= 0, decimal or 0x hex\n", a);
			return 2;
		}
		if (!v || parse_num(v, dst, suffix) < 0) {
			fprintf(stderr, "twctl standby: %s needs a number%s\n", a,
				suffix ? " (K/M suffixes allowed)" : "");
			return 2;
		}
		i++;
	}
	if (!have_log) {
		fprintf(stderr, "twctl standby: expected a LOG id (see twctl standby --help)\n");
		return 2;
	}
	if (o->size < 8 || o->size > (64u << 20) || o->replicas < 1 ||
	    o->replicas > TW_PRIMARY_MAX_REPLICAS || o->wait_ms > 0xffffffffu ||
	    (o->hold && !o->generated)) {
		fprintf(stderr, "twctl standby: %s\n", o->hold && !o->generated ?
			"--hold goes with --append N" : o->size < 8 || o->size > (64u << 20) ?
			"--size: 8 .. 64M bytes" : o->wait_ms > 0xffffffffu ? "--wait: too long" :
			"--replicas: 1 .. 16");
		return 2;
	}
	return 0;
}

/* The took-over line: where the failover time went. */
static void print_took_over(uint64_t log_id, bool warm, const struct tw_standby_result *st)
{
	printf("took-over log=%#" PRIx64 " epoch=%" PRIu64 " watched=%d lost_races=%u "
	       "gone_realtime_ns=%" PRIu64 " claim_ms=%.2f connect_ms=%.2f fence_ms=%.2f "
	       "recover_ms=%.2f entries=%" PRIu64 " backups=%u open_ms=%.2f takeover_ms=%.2f",
	       log_id, st->epoch, st->watched, st->lost_races, st->gone_realtime_ns,
	       ms(st->claim_ns), ms(st->connect_ns), ms(st->fence_ns), ms(st->recover_ns),
	       st->recovery.entries, st->recovery.backups, ms(st->open_ns), ms(st->takeover_ns));
	if (warm)
		printf(" warm_entries=%" PRIu64 " warm_lsn=%#" PRIx64 " warm_stop_ms=%.2f",
		       st->warm_entries, st->warm_lsn, ms(st->warm_stop_ns));
	printf("\n");
	fflush(stdout);
}

/* --append N: N entries of `size` bytes, entry k (counted from `base`, the entries already in
 * the log) starting with k as 8 little-endian bytes. 0, the failed append's error, or 1 when
 * there is no memory for the entry (said on stderr). */
static int append_generated(struct tw_primary *p, uint64_t base, uint64_t n, uint64_t size)
{
	uint8_t *buf = malloc(size);
	int rc = 0;

	if (!buf) {
		fprintf(stderr, "twctl standby: out of memory for a %" PRIu64 "-byte entry\n", size);
		return 1;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t seq = base + i, t0;

		memset(buf, (int)(seq & 0xff), size);
		for (int b = 0; b < 8; b++)
			buf[b] = (uint8_t)(seq >> (8 * b));
		t0 = now_ns();
		rc = tw_primary_append(p, buf, (uint32_t)size, NULL);
		if (rc < 0)
			break;
		if (i == 0)
			print_first(t0);
		printf("acked %" PRIu64 "\n", seq + 1);
		fflush(stdout);
	}
	free(buf);
	return rc < 0 ? rc : 0;
}

/* Without --append: one entry per line of stdin (empty lines skipped). */
static int append_stdin(struct tw_primary *p)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	bool first = true;
	int rc = 0;

	while ((len = getline(&line, &cap, stdin)) > 0) {
		uint64_t lsn = 0, t0;

		if (line[len - 1] == '\n')
			line[--len] = '\0';
		if (!len)
			continue; /* an entry has at least one byte */
		t0 = now_ns();
		rc = tw_primary_append(p, line, (uint32_t)len, &lsn);
		if (rc < 0)
			break;
		if (first)
			print_first(t0);
		first = false;
		printf("acked %#" PRIx64 "\n", lsn);
		fflush(stdout);
	}
	free(line);
	return rc < 0 ? rc : 0;
}

/* --hold: keep the log open until SIGTERM or SIGINT. */
static void hold_log(uint64_t log_id)
{
	sigset_t set;
	int sig = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("holding log %#" PRIx64 " (SIGTERM or SIGINT closes it)\n", log_id);
	fflush(stdout);
	sigwait(&set, &sig);
}

int twctl_coord_standby(const char *url, unsigned timeout_ms, const char *provider,
			const char *key_file, int argc, char **argv)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_standby_result st;
	struct tw_standby_config sc;
	struct tw_primary *p = NULL;
	struct warm_view wv = { 0 };
	struct standby_opts o;
	char err[1024], owner[512] = "";
	uint64_t epoch = 0;
	int rc, status = 0;

	if ((rc = standby_args(argc, argv, &o)) != 0)
		return rc;
	if (open_once(url, timeout_ms) < 0)
		return 1;
	if (tw_coordinator_log_info(coord, o.log_id, &epoch, owner, sizeof(owner)) < 0)
		owner[0] = '\0'; /* a log the coordinator does not know yet: no owner */
	printf("standby: log %#" PRIx64 ": %s%s\n", o.log_id, owner[0] ? "waiting for its owner "
	       "to go: " : "no owner: taking it over now", owner);
	fflush(stdout);
	/* One ZooKeeper handle per process from here on: the primary's. (The C client's two
	 * handles in one process share its static formatting buffers: ThreadSanitizer reports
	 * the race inside libzookeeper_mt.) */
	close_at_exit();

	tw_ctx_config_init(&tc);
	tc.coordinator = url;
	tc.provider = provider;
	tc.connect_timeout_ms = timeout_ms;
	tc.session_timeout_ms = timeout_ms; /* -t: the session timeout too, as before */
	tc.key_file = key_file;
	tw_primary_config_init(&cfg);
	cfg.log_id = o.log_id;
	cfg.replicas = (unsigned)o.replicas;
	if (o.seg)
		cfg.segment_size = o.seg;
	/* The recovered entries are verified and counted (st.recovery.entries); twctl has no state to
	 * rebuild from them. --warm: counted as the reader hands them over too (warm_entry). */
	tw_standby_config_init(&sc);
	sc.wait_ms = (unsigned)o.wait_ms;
	sc.on_wait = print_watching;
	sc.wait_arg = &o.log_id;
	sc.warm = o.warm;
	wv.log_id = o.log_id;
	sc.on_entry = o.warm ? warm_entry : NULL;
	sc.entry_arg = o.warm ? &wv : NULL;
	rc = tw_primary_standby(&tc, &cfg, &sc, &st, &p, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twctl standby: log %#" PRIx64 ": %s: %s\n", o.log_id,
			tw_strerror(rc), err);
		return 1;
	}
	print_took_over(o.log_id, o.warm, &st);
	/* The entries in the log: the reader's (warm), then the recovery's. */
	rc = o.generated ? append_generated(p, st.warm_entries + st.recovery.entries, o.n_append,
					    o.size) : append_stdin(p);
	if (rc > 0) {
		tw_primary_close(p);
		return 1;
	}
	if (rc < 0) {
		/* On stdout too (after the acked lines): a script sees why the stream ended. */
		printf("append failed: %s%s\n", rc == -TW_EFENCED ? "fenced: " : "", tw_strerror(rc));
		fflush(stdout);
		fprintf(stderr, "twctl standby: log %#" PRIx64 ": append: %s: %s\n", o.log_id,
			tw_strerror(rc), tw_primary_errmsg(p));
		status = 1;
	} else if (o.hold) {
		hold_log(o.log_id);
	}
	rc = tw_primary_close(p);
	if (rc < 0 && !status) {
		fprintf(stderr, "twctl standby: log %#" PRIx64 ": close: %s\n", o.log_id,
			tw_strerror(rc));
		status = 1;
	}
	return status;
}
