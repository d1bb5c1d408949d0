/*
 * tools/twctl.c — talk to Tailwind backups: list logs and segments, statistics, fence a log,
 * recover a log (to a file, or verify only), and inspect a flushed segment file offline.
 *
 *   twctl [-p PROVIDER] -b ADDR [-b ADDR ...] [--json] COMMAND [ARGS]
 *   the commands: the table `commands` below (name, overview line, help text, what runs
 *   it); ZooKeeper's in twctl_coord.c, tail in twctl_tail.c.
 *
 * Backups can also come from $TW_BACKUPS (comma-separated). Tables go to stdout, messages and
 * warnings to stderr. Exit status: the table of tools/exit.h, shared with twd and twbench.
 * docs/operations.md has the twctl section.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/admin.h>
#include <tailwind/common.h>
#include <tailwind/log_format.h>
#include <tailwind/recovery.h>

#include "env_defaults.h"
#include "exit.h"
#include "twctl_coord.h"
#include "twctl_tail.h"


#define MAX_BK TW_RECOVER_MAX_BACKUPS

static struct {
	const char *provider;
	const char *backups[MAX_BK];
	unsigned nbk;
	bool json;
	unsigned timeout_ms;
	const char *key_file;    /* --key-file (NULL: $TW_KEY_FILE) */
	bool key_checked;        /* need_backups checked the key file */
	const char *coord;       /* -c URL (twctl_coord.c) */
	bool no_provider;        /* connect_all: the provider is not available here */
} g;

/* ------------------------------------------------------------------ commands */

static int cmd_ls(int argc, char **argv);
static int cmd_stat(int argc, char **argv);
static int cmd_fence(int argc, char **argv);
static int cmd_recover(int argc, char **argv);
static int cmd_free(int argc, char **argv);
static int cmd_delete(int argc, char **argv);
static int cmd_inspect(int argc, char **argv);
static int cmd_ls_backups(int argc, char **argv);
static int cmd_owner(int argc, char **argv);
static int cmd_ls_logs(int argc, char **argv);
static int cmd_standby(int argc, char **argv);
static int cmd_tail(int argc, char **argv);
static void usage_main(FILE *f);

/*
 * Every command, in one place: its name and arguments and one line for the overview, its
 * `twctl NAME --help` text (usage line, description, options: also its section of twctl(8),
 * which help2man makes from --help), whether it needs the coordinator, and what runs it with
 * argv[0] = NAME. The overview, --help, the usage errors and the dispatch read this table.
 */
struct command {
	const char *name, *args;
	const char *summary;           /* the overview's line; "\n" continues it */
	const char *usage;             /* NULL: usage_fn prints it (its module's text) */
	void (*usage_fn)(FILE *f);
	bool coord;                    /* needs -c URL */
	int (*run)(int argc, char **argv);
};

static const struct command commands[] = {
	{ "ls", "[LOG]",
	  "logs and segments held by the backups (every log, or one)",
	  "Usage: twctl -b ADDR... ls [LOG]\n"
	  "List the segment copies each backup holds: of every log, or of LOG.\n"
	  "Open buffers are scanned by the backup for the listing (valid length,\n"
	  "checksum). Columns: backup, log, segment, state (open, closed, flushed, LOST),\n"
	  "valid bytes, entries, last checksum, replica version, epoch, corrupt.\n",
	  NULL, false, cmd_ls },
	{ "stat", "",
	  "statistics of each backup",
	  "Usage: twctl -b ADDR... stat\n"
	  "Statistics of each backup: buffers by state, flushes, RPC traffic, CPU time.\n",
	  NULL, false, cmd_stat },
	{ "fence", "LOG",
	  "fence LOG on every backup with a new epoch (its primary's writes\n"
	  "then fail; see docs/recovery.md for the limits on shm)",
	  "Usage: twctl -b ADDR... fence LOG [--epoch E]\n"
	  "Fence LOG on every reachable backup: new epoch (default: one past every\n"
	  "epoch the backups know), open buffers' registrations closed, the old\n"
	  "primary's connections closed, RPCs with older epochs refused.\n"
	  "  -e, --epoch E    fence with this epoch (must not be older than the log's;\n"
	  "                   the last one, 2^48-1, leaves no epoch for a takeover and\n"
	  "                   is refused without --force)\n"
	  "      --force      fence at the last epoch anyway (with a warning)\n",
	  NULL, false, cmd_fence },
	{ "recover", "LOG",
	  "rebuild LOG from the backups: -o FILE, or --verify",
	  "Usage: twctl -b ADDR... recover LOG (-o FILE | --verify) [options]\n"
	  "Fence LOG, list its segments, fetch one verified copy of each, and write\n"
	  "the entries in log order to FILE (or only verify them). The backups then\n"
	  "close open copies at the recovered length so a second recovery agrees.\n"
	  "  -o, --output FILE  write the entries: for each, its length (u32, little-\n"
	  "                     endian) then its bytes ('-' for stdout). FILE appears\n"
	  "                     only when the recovery succeeded (written as FILE.tmp,\n"
	  "                     renamed at the end)\n"
	  "      --verify       fetch and verify only\n"
	  "  -e, --epoch E      fence with this epoch (default automatic; the last one,\n"
	  "                     2^48-1, is refused without --force, as for fence)\n"
	  "      --force        fence at the last epoch anyway (with a warning)\n"
	  "      --no-record    leave open copies open (do not send RecoveredOffset)\n"
	  "      --no-fence     read without fencing (inspection of a live log; implies\n"
	  "                     --no-record; the answer may be stale at once)\n"
	  "      --create       go on when no backup holds anything of LOG and the\n"
	  "                     coordinator has no record of it: fence it (and record it\n"
	  "                     at the coordinator) so that it exists, empty. Without it\n"
	  "                     such a LOG is 'no such log', exit 6, nothing changed\n",
	  NULL, false, cmd_recover },
	{ "free", "LOG",
	  "log cleaning: drop LOG's segments below --below N everywhere",
	  "Usage: twctl -b ADDR... free LOG --below N\n"
	  "Log cleaning: every reachable backup drops LOG's segments below segment N\n"
	  "(files removed, buffers returned) after recording the mark durably;\n"
	  "recovery and takeover then start at N. Prints the copies dropped and the\n"
	  "segments they were. A backup refuses, and keeps all its copies, while the\n"
	  "log's primary still writes a segment below N (its open segment): exit 1,\n"
	  "nothing freed there (free below the open segment, or fence the log first).\n"
	  "Segments left open by a fenced primary are dropped like closed ones, and\n"
	  "an N past the log's last segment drops every segment. Does not fence: a\n"
	  "running primary goes on.\n"
	  "  -B, --below N     first segment to keep\n",
	  NULL, false, cmd_free },
	{ "delete", "LOG",
	  "fence LOG, then drop every segment of it everywhere",
	  "Usage: twctl -b ADDR... delete LOG [--epoch E]\n"
	  "Fence LOG with a new epoch (its primary, if any, is stopped), then drop\n"
	  "every segment of it on every fenced backup. The backups keep only the\n"
	  "log's epoch, so an old primary stays fenced; the id can be created anew.\n"
	  "  -e, --epoch E     fence with this epoch (default automatic)\n",
	  NULL, false, cmd_delete },
	{ "inspect", "FILE",
	  "check a flushed segment file offline (no backup needed)",
	  "Usage: twctl inspect FILE [-e N]\n"
	  "Read a flushed segment file (twd's storage directory, *.twseg) offline:\n"
	  "header, scan of the data (Algorithm 1 + payload CRCs) against the header.\n"
	  "  -e, --entries N   also list the first N entries (offset, length, bytes)\n"
	  "Exit status 1 when the file is corrupt.\n",
	  NULL, false, cmd_inspect },
	{ "ls-backups", "",
	  "backups registered at the coordinator (-c), zones, free buffers",
	  "Usage: twctl -c URL ls-backups\n"
	  "Every backup registered at the coordinator: its node, address, provider,\n"
	  "zone, free and total buffers, buffer size.\n",
	  NULL, true, cmd_ls_backups },
	{ "owner", "LOG",
	  "LOG's epoch and owner at the coordinator (-c)",
	  "Usage: twctl -c URL owner LOG\n"
	  "LOG's last epoch at the coordinator and its owner (the live primary's\n"
	  "description, '(none)' when no owner node exists).\n",
	  NULL, true, cmd_owner },
	{ "ls-logs", "",
	  "logs at the coordinator (-c): epoch, owner, backups used",
	  "Usage: twctl -c URL ls-logs\n"
	  "Every log the coordinator knows: its last epoch, its owner (the live\n"
	  "primary's description, '-' when none) and the backups recorded for it\n"
	  "(every backup ever asked to hold a segment of it; recovery asks these).\n",
	  NULL, true, cmd_ls_logs },
	{ "standby", "LOG",
	  "wait until LOG's owner is gone, take LOG over, append (-c)",
	  NULL, twctl_coord_standby_usage, true, cmd_standby },
	{ "tail", "LOG",
	  "print LOG's entries as they are acknowledged (--from, -n)",
	  NULL, twctl_tail_usage, false, cmd_tail },
	{ NULL, NULL, NULL, NULL, NULL, false, NULL },
};

static const struct command *find_command(const char *name)
{
	for (const struct command *c = commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

/* c's `--help` text (NULL: the overview). */
static void command_usage(FILE *f, const struct command *c)
{
	if (!c)
		usage_main(f);
	else if (c->usage)
		fputs(c->usage, f);
	else
		c->usage_fn(f);
}

/* The overview's list: "  NAME ARGS" in 16 columns, then the summary (its further lines
 * indented to the same column). */
static void list_commands(FILE *f)
{
	for (const struct command *c = commands; c->name; c++) {
		char head[64];
		const char *line = c->summary, *nl;

		snprintf(head, sizeof(head), "%s%s%s", c->name, c->args[0] ? " " : "", c->args);
		fprintf(f, "  %-16s", head);
		while ((nl = strchr(line, '\n'))) {
			fprintf(f, "%.*s\n%18s", (int)(nl - line), line, "");
			line = nl + 1;
		}
		fprintf(f, "%s\n", line);
	}
}

/* Every command's name, for usage errors: "ls, stat, ...". */
static void name_commands(FILE *f)
{
	for (const struct command *c = commands; c->name; c++)
		fprintf(f, "%s%s", c == commands ? "" : ", ", c->name);
}

/* ------------------------------------------------------------------ usage */

static void usage_main(FILE *f)
{
	fprintf(f,
		"Usage: twctl [options] COMMAND [ARGS]\n"
		"Talk to Tailwind backups (twd): list, statistics, fence, recover; inspect segment files.\n"
		"\n"
		"Commands:\n");
	list_commands(f);
	fprintf(f,
		"\n"
		"Options (before the command):\n"
		"  -b, --backup ADDR     a backup's address as twd printed it (repeat; or set\n"
		"                        TW_BACKUPS=addr1,addr2,...)\n"
		"  -c, --coordinator URL zk://HOST:PORT[,...][/chroot]: backups from its\n"
		"                        registrations when no -b is given; fence, recover and\n"
		"                        delete take their epoch from it (docs/coordination.md)\n"
		"  -p, --provider NAME   libfabric provider: tcp, sockets, shm, verbs, ... (default:\n"
		"                        $FI_PROVIDER, else tcp)\n"
		"  -t, --timeout MS      connect/RPC timeout in milliseconds (default %u)\n"
		"  -k, --key-file PATH   cluster key the backups require (default: $TW_KEY_FILE)\n"
		"  -j, --json            machine-readable output (one JSON document on stdout)\n"
		"  -v, --verbose         more log output on stderr (twice: debug)\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            this text; `twctl COMMAND --help` for a command\n"
		"\n"
		"LOG is a log id, decimal or 0x-prefixed hex.\n", TW_DEFAULT_CONNECT_TIMEOUT_MS);
}

/* --help: the overview, then every command's usage and options (the man page's), then the
 * exit codes. */
static void usage_full(FILE *f)
{
	usage_main(f);
	fprintf(f, "\nEach command (twctl COMMAND --help prints one):\n");
	for (const struct command *c = commands; c->name; c++) {
		char *text = NULL, *nl;
		size_t len = 0;
		FILE *m = open_memstream(&text, &len);

		if (!m)
			continue;
		command_usage(m, c);
		fclose(m);
		/* "NAME:" then the usage line alone: help2man makes them a subsection and a
		 * paragraph of their own in twctl(8). */
		nl = text ? strchr(text, '\n') : NULL;
		if (nl)
			fprintf(f, "\nCommand %s:\n  %.*s\n%s", c->name, (int)(nl + 1 - text), text,
				nl + 1);
		free(text);
	}
	fprintf(f, "\n" EXIT_HELP);
}

/*
 * getopt returned '?' or ':' in subcommand `cmd` (opterr is 0): one line saying what was wrong.
 * "-1" where a LOG id goes is a negative number, not an unknown option.
 */
static int bad_option(const char *cmd, int opt, char **argv)
{
	const char *arg = argv[optind - 1];

	if (opt == ':')
		fprintf(stderr, "twctl %s: %s needs a value (see twctl %s --help)\n", cmd, arg, cmd);
	else if (optopt >= '0' && optopt <= '9')
		fprintf(stderr, "twctl %s: '%s' is not a log id: expected an integer >= 0, decimal "
			"or 0x hex\n", cmd, arg);
	else
		fprintf(stderr, "twctl %s: unknown option '%s' (see twctl %s --help)\n", cmd, arg,
			cmd);
	return EXIT_USAGE;
}

static bool want_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return true;
	return false;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || *end || *out > TW_ID_MAX)
		return -1;
	return 0;
}

/* The usage error when a command's LOG argument is missing, doubled or not a number. */
static int bad_log_arg(const char *cmd, int argc, char **argv, int first)
{
	if (first == argc - 1)
		fprintf(stderr, "twctl %s: LOG id '%s' is not an integer in 0..%" PRId64 " (decimal, "
			"or hex with 0x)\n", cmd, argv[first], (int64_t)TW_ID_MAX);
	else
		fprintf(stderr, "twctl %s: expected exactly one LOG id, got %d arguments (see twctl "
			"%s --help)\n", cmd, argc - first, cmd);
	return EXIT_USAGE;
}

/* ------------------------------------------------------------------ JSON helpers */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* ------------------------------------------------------------------ connections */

/* The session with the backups (tailwind/admin.h); NULL when not connected. */
static struct tw_admin *adm;

/* Connect to every backup and handshake as an admin, proving the key when we have one; returns
 * how many answered. */
static unsigned connect_all(void)
{
	struct tw_admin_config ac;
	char err[768];
	unsigned up;
	int rc;

	tw_admin_config_init(&ac);
	ac.provider = g.provider;
	ac.backups = g.backups;
	ac.n_backups = g.nbk;
	ac.key_file = g.key_file;
	ac.connect_timeout_ms = g.timeout_ms;
	ac.rpc_timeout_ms = g.timeout_ms;
	ac.node_name = "twctl";
	ac.timeout_hint = "-t MS waits longer";
	rc = tw_admin_open(&ac, &adm, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "twctl: %s\n", err);
		g.no_provider = rc == -TW_ENOPROV;
		return 0;
	}
	up = 0;
	for (unsigned i = 0; i < g.nbk; i++) {
		if (tw_admin_backup_error(adm, i))
			fprintf(stderr, "twctl: backup %s: %s\n", tw_admin_backup_addr(adm, i),
				tw_admin_backup_error(adm, i));
		else
			up++;
	}
	return up;
}

static void disconnect_all(void)
{
	tw_admin_close(adm);
	adm = NULL;
}

/* Backup i answered the connect. */
static bool up_at(unsigned i)
{
	return adm && !tw_admin_backup_error(adm, i);
}

/* log: the log the command is about (NULL: every log): with -c, its recorded backups. */
static int need_backups(const uint64_t *log)
{
	if (g.nbk == 0 && g.coord &&
	    twctl_coord_backups(g.coord, g.timeout_ms, g.provider, log, g.backups, &g.nbk,
				MAX_BK) < 0)
		return EXIT_FAIL;
	if (g.nbk == 0) {
		fprintf(stderr, "twctl: no backups given: use -b ADDR (repeat for each) or set "
			"TW_BACKUPS=addr1,addr2 (see twctl --help)\n");
		return EXIT_USAGE;
	}
	if (!g.key_checked) {
		char why[512];

		if (tw_key_file_check(g.key_file, NULL, why, sizeof(why))) {
			fprintf(stderr, "twctl: %s\n", why);
			return EXIT_USAGE;
		}
		g.key_checked = true;
	}
	return 0;
}

/* ------------------------------------------------------------------ ls */

/*
 * Every segment copy backup i lists: of log `log_id` (one) or of every log, each handed to fn.
 * Returns 0, or the error of a failed request (said on stderr).
 */
typedef void (*seg_fn)(void *arg, unsigned i, const struct tw_admin_segment *s);

/* What the backups said about one log (check_log): known by one, or refused by one. */
struct log_seen {
	bool known;
	unsigned unavailable;    /* backups that refuse the log */
	char why[768];           /* the first of them: its address and its reason */
};

static int list_backup(unsigned i, uint64_t log_id, bool one, seg_fn fn, void *arg,
		       struct log_seen *seen)
{
	const struct tw_admin_log *lg = NULL;
	int rc = tw_admin_list(adm, i, log_id, !one, fn, arg, one ? &lg : NULL);

	if (rc) {
		fprintf(stderr, "twctl: backup %s: %s\n", tw_admin_backup_addr(adm, i),
			tw_admin_errmsg(adm, i));
		return rc;
	}
	if (seen && lg && lg->known)
		seen->known = true; /* segments, lost records, a freed prefix, or an epoch */
	if (seen && lg && lg->unavailable && seen->unavailable++ == 0)
		snprintf(seen->why, sizeof(seen->why), "backup %s refuses it: %s",
			 tw_admin_backup_addr(adm, i), lg->unavailable);
	return 0;
}

struct ls_out {
	uint64_t total;
};

static void ls_print(void *arg, unsigned i, const struct tw_admin_segment *s)
{
	struct ls_out *o = arg;
	const char *addr = tw_admin_backup_addr(adm, i);

	if (g.json) {
		printf("%s{\"backup\":", o->total ? "," : "");
		json_str(stdout, addr);
		printf(",\"log_id\":%" PRIu64 ",\"segment_id\":%" PRIu64 ",\"state\":\"%s\","
		       "\"valid_len\":%" PRIu64 ",\"entries\":%" PRIu64 ",\"checksum\":%u,"
		       "\"replica_version\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"corrupt\":%s,"
		       "\"length\":%" PRIu64 "}", s->log_id, s->segment_id, tw_segment_state_name(s->state),
		       s->valid_len, s->entries, s->checksum, s->replica_version, s->epoch,
		       s->corrupt ? "true" : "false", s->length);
	} else {
		printf("%-22s %#18" PRIx64 " %8" PRIu64 " %-8s %10" PRIu64 " %8" PRIu64
		       " 0x%08x %4" PRIu64 " %6" PRIu64 " %s\n", addr, s->log_id,
		       s->segment_id, tw_segment_state_name(s->state), s->valid_len, s->entries, s->checksum,
		       s->replica_version, s->epoch, s->corrupt ? "CORRUPT" : "-");
	}
	o->total++;
}

static int cmd_ls(int argc, char **argv)
{
	struct ls_out o = { 0 };
	uint64_t log_id = 0;
	bool one = false;
	unsigned up, failed = 0;

	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-') {
			fprintf(stderr, "twctl ls: unknown option '%s' (see twctl ls --help)\n",
				argv[i]);
			return EXIT_USAGE;
		}
	}
	if (argc > 2) {
		fprintf(stderr, "twctl ls: too many arguments (see twctl ls --help)\n");
		return EXIT_USAGE;
	}
	if (argc == 2) {
		if (parse_u64(argv[1], &log_id)) {
			fprintf(stderr, "twctl ls: '%s' is not a log id (decimal or 0x hex)\n",
				argv[1]);
			return EXIT_USAGE;
		}
		one = true;
	}
	if (need_backups(NULL))
		return EXIT_USAGE;
	up = connect_all();
	/* No table when no backup answered: stdout holds answers only (errors are on stderr). */
	if (g.json)
		printf("{\"segments\":[");
	else if (up)
		printf("%-22s %18s %8s %-8s %10s %8s %10s %4s %6s %s\n", "BACKUP", "LOG", "SEGMENT",
		       "STATE", "VALID", "ENTRIES", "CHECKSUM", "VER", "EPOCH", "CORRUPT");
	for (unsigned i = 0; i < g.nbk; i++)
		if (!up_at(i) || list_backup(i, log_id, one, ls_print, &o, NULL) != 0)
			failed++;
	if (g.json)
		printf("],\"backups\":%u,\"reachable\":%u,\"failed\":%u}\n", g.nbk, up, failed);
	else if (up)
		printf("# %" PRIu64 " segment copies on %u of %u backups\n", o.total, g.nbk - failed,
		       g.nbk);
	disconnect_all();
	return g.no_provider ? EXIT_PROVIDER : failed ? EXIT_FAIL : EXIT_OK;
}

/* ------------------------------------------------------------------ stat */

static int cmd_stat(int argc, char **argv)
{
	unsigned failed = 0;
	bool first = true;

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "twctl stat: no arguments expected (see twctl stat --help)\n");
		return EXIT_USAGE;
	}
	if (need_backups(NULL))
		return EXIT_USAGE;
	/* No table when no backup answered (errors are on stderr). */
	if (connect_all() == 0 && !g.json) {
		disconnect_all();
		return g.no_provider ? EXIT_PROVIDER : EXIT_FAIL;
	}
	if (g.json)
		printf("{\"backups\":[");
	else
		printf("%-22s %5s %5s %5s %5s %6s %7s %8s %12s %9s %9s %8s %9s\n", "BACKUP",
		       "BUFS", "MAX", "FREE", "OPEN", "CLOSED", "FLUSHED", "FLUSHES", "BYTES_FLUSHED", "RPC_IN",
		       "RPC_OUT", "CPU_S", "UPTIME_S");
	for (unsigned i = 0; i < g.nbk; i++) {
		const char *addr = tw_admin_backup_addr(adm, i);
		const struct tw_admin_stats *r;

		if (!up_at(i)) {
			failed++;
			continue;
		}
		if (tw_admin_stats(adm, i, &r) != 0) {
			fprintf(stderr, "twctl: backup %s: %s\n", addr, tw_admin_errmsg(adm, i));
			failed++;
			continue;
		}
		if (g.json) {
			printf("%s{\"backup\":", first ? "" : ",");
			json_str(stdout, addr);
			printf(",\"buffers_total\":%u,\"buffers_max\":%u,\"buffers_free\":%u,"
			       "\"buffers_open\":%u,\"buffers_closed\":%u,\"buffers_flushed\":%u,\"flushes\":%" PRIu64
			       ",\"bytes_flushed\":%" PRIu64 ",\"rpc_msgs_rx\":%" PRIu64
			       ",\"rpc_msgs_tx\":%" PRIu64 ",\"rpc_bytes_rx\":%" PRIu64
			       ",\"rpc_bytes_tx\":%" PRIu64 ",\"rpc_malformed\":%" PRIu64
			       ",\"cpu_seconds\":%.3f,\"uptime_ms\":%" PRIu64 ",\"handlers\":{",
			       r->buffers_total, r->buffers_max, r->buffers_free, r->buffers_open,
			       r->buffers_closed, r->buffers_flushed, r->flushes, r->bytes_flushed,
			       r->rpc_msgs_rx, r->rpc_msgs_tx, r->rpc_bytes_rx, r->rpc_bytes_tx,
			       r->rpc_malformed, r->cpu_seconds, r->uptime_ms);
			for (size_t k = 0; k < r->n_handlers; k++)
				printf("%s\"%s\":{\"calls\":%" PRIu64 ",\"errors\":%" PRIu64 "}",
				       k ? "," : "", r->handlers[k].kind, r->handlers[k].calls,
				       r->handlers[k].errors);
			printf("},\"detail\":");
			json_str(stdout, r->detail);
			printf("}");
		} else {
			printf("%-22s %5u %5u %5u %5u %6u %7u %8" PRIu64 " %12" PRIu64 " %9" PRIu64
			       " %9" PRIu64 " %8.2f %9.1f\n", addr, r->buffers_total, r->buffers_max,
			       r->buffers_free, r->buffers_open, r->buffers_closed, r->buffers_flushed,
			       r->flushes, r->bytes_flushed, r->rpc_msgs_rx, r->rpc_msgs_tx, r->cpu_seconds,
			       (double)r->uptime_ms / 1000.0);
			if (r->detail[0])
				printf("%-22s   %s\n", "", r->detail);
		}
		first = false;
	}
	if (g.json)
		printf("],\"failed\":%u}\n", failed);
	disconnect_all();
	return g.no_provider ? EXIT_PROVIDER : failed ? EXIT_FAIL : EXIT_OK;
}

/* ------------------------------------------------------------------ fence, recover */

static void recover_cfg(struct tw_recover_config *cfg, uint64_t log_id, uint64_t epoch)
{
	tw_recover_config_init(cfg);
	cfg->provider = g.provider;
	cfg->log_id = log_id;
	cfg->epoch = epoch;
	cfg->backups = g.backups;
	cfg->n_backups = g.nbk;
	cfg->connect_timeout_ms = g.timeout_ms;
	cfg->key_file = g.key_file;
	if (g.timeout_ms > cfg->rpc_timeout_ms)
		cfg->rpc_timeout_ms = g.timeout_ms;
}

/* The exit code of a failed library call (tools/exit.h). */
static int exit_for(int rc)
{
	return rc == -TW_ENOPROV ? EXIT_PROVIDER : EXIT_FAIL;
}

/*
 * An epoch given with -e must leave room for the next takeover: a fence at TW_EPOCH_MAX (the
 * backups' limit, tailwind/common.h) leaves the log with no epoch a recovery or a new primary
 * could take ("no epoch is left for a takeover"), for good. Refused (EXIT_USAGE, said on
 * stderr) unless --force, which warns. Returns 0 to go on.
 */
static int check_room(const char *cmd, uint64_t epoch, bool force)
{
	if (epoch < TW_EPOCH_MAX)
		return 0;
	if (!force) {
		fprintf(stderr, "twctl %s: --epoch %" PRIu64 " is the last epoch (TW_EPOCH_MAX): "
			"no epoch would be left for a takeover, so no recovery or primary could "
			"ever own the log again; give a smaller epoch, or add --force if that is "
			"what you want\n", cmd, epoch);
		return EXIT_USAGE;
	}
	fprintf(stderr, "twctl %s: warning: --epoch %" PRIu64 " is the last epoch "
		"(TW_EPOCH_MAX), with --force: after it no recovery or primary can own the log "
		"again\n", cmd, epoch);
	return 0;
}

/*
 * Before a command about an existing log (recover, free, delete) changes anything: does the log
 * exist? Yes when a reachable backup knows it — holds a segment, a lost record or a freed
 * prefix of it (ListSegments' log_known), or an epoch (it was fenced: a deleted log keeps
 * its epoch) — or the coordinator (-c) has a record of it. fn (may be NULL) sees
 * each segment listed. Returns EXIT_OK to go on (also when no backup could be asked: the
 * command then fails on its own), EXIT_NO_LOG after saying so (nothing was changed), or
 * EXIT_PROVIDER / EXIT_FAIL.
 */
static int check_log(const char *cmd, uint64_t log_id, seg_fn fn, void *arg)
{
	struct log_seen seen = { .known = false };
	unsigned up, asked = 0;
	int coord = 0;

	if (g.coord) {
		coord = twctl_coord_log_known(g.coord, g.timeout_ms, cmd, log_id);
		if (coord < 0)
			return EXIT_FAIL;
	}
	up = connect_all();
	for (unsigned i = 0; i < g.nbk; i++)
		if (up_at(i) && list_backup(i, log_id, true, fn, arg, &seen) == 0)
			asked++;
	disconnect_all();
	if (g.no_provider)
		return EXIT_PROVIDER;
	if (seen.known || coord > 0 || asked == 0)
		return EXIT_OK;
	if (seen.unavailable) {
		/* Held, but refused: not "no such log" (the fix is on that backup, not here). */
		fprintf(stderr, "twctl %s: log %#" PRIx64 " is unavailable: %s%s; no other "
			"reachable backup holds it; nothing was changed\n", cmd, log_id, seen.why,
			seen.unavailable > 1 ? " (and more backups refuse it the same way: see "
			"their logs)" : "");
		return EXIT_FAIL;
	}
	fprintf(stderr, "twctl %s: no such log: %#" PRIx64 " (none of the %u reachable backups "
		"has ever held or fenced it%s%s); nothing was changed\n", cmd, log_id,
		asked, up < g.nbk ? ", and some backups did not answer" : "",
		g.coord ? "; the coordinator has no record of it" : "");
	return EXIT_NO_LOG;
}

static int cmd_fence(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "epoch", required_argument, NULL, 'e' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct tw_recover_config cfg;
	uint64_t log_id, epoch = 0, got = 0;
	unsigned fenced = 0;
	bool force = false;
	char err[512];
	int opt, rc;

	optind = 0; /* 0: glibc re-initialises getopt (main used "+" ordering) */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":e:", lo, NULL)) != -1) {
		if (opt == 'f') {
			force = true;
			continue;
		}
		if (opt == 'e' && parse_u64(optarg, &epoch) == 0 && epoch > 0 &&
		    epoch <= TW_EPOCH_MAX)
			continue;
		if (opt == 'e')
			fprintf(stderr, "twctl fence: --epoch %s: expected an integer in 1..%" PRId64
				"\n", optarg, (int64_t)TW_EPOCH_MAX);
		else
			bad_option("fence", opt, argv);
		return EXIT_USAGE;
	}
	if (optind != argc - 1 || parse_u64(argv[optind], &log_id))
		return bad_log_arg("fence", argc, argv, optind);
	if (check_room("fence", epoch, force))
		return EXIT_USAGE;
	if (need_backups(&log_id))
		return EXIT_USAGE;
	recover_cfg(&cfg, log_id, epoch);
	if (g.coord && twctl_coord_epoch(g.coord, g.timeout_ms, "fence", &cfg) < 0)
		return EXIT_FAIL;
	rc = tw_admin_fence(&cfg, &got, &fenced, err, sizeof(err));
	if (g.json) {
		printf("{\"log_id\":%" PRIu64 ",\"ok\":%s,\"epoch\":%" PRIu64 ",\"fenced\":%u,"
		       "\"backups\":%u,\"error\":", log_id, rc ? "false" : "true", got, fenced, g.nbk);
		json_str(stdout, rc ? err : "");
		printf("}\n");
	} else if (rc == 0) {
		printf("log %#" PRIx64 " fenced at epoch %" PRIu64 " on %u of %u backups\n", log_id,
		       got, fenced, g.nbk);
	}
	if (rc) {
		fprintf(stderr, "twctl fence: %s\n", err);
		return exit_for(rc);
	}
	return fenced == g.nbk ? EXIT_OK : EXIT_FAIL;
}

struct out {
	FILE *f;
	int err;
	bool direct; /* a pipe or device, written as it comes (no FILE.tmp) */
};

static int write_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct out *o = arg;
	uint8_t len[4] = { (uint8_t)e->len, (uint8_t)(e->len >> 8), (uint8_t)(e->len >> 16),
			   (uint8_t)(e->len >> 24) }; /* little-endian */

	if (!o->f)
		return 0;
	if (fwrite(len, 1, 4, o->f) != 4 || fwrite(e->data, 1, e->len, o->f) != e->len) {
		o->err = errno ? errno : EIO;
		return 1;
	}
	return 0;
}

/*
 * recover -o: where the entries go. "-": stdout; a pipe or device: written as it comes; a file:
 * FILE.tmp (into tmp), renamed at the end. 0, or the exit code after saying why.
 */
static int open_output(const char *output, struct out *o, char *tmp, size_t tmplen)
{
	struct stat ost;

	if (!output)
		return 0;
	if (strcmp(output, "-") == 0) {
		o->f = stdout;
		return 0;
	}
	if (stat(output, &ost) == 0 && !S_ISREG(ost.st_mode)) {
		o->f = fopen(output, "wb");
		if (!o->f) {
			fprintf(stderr, "twctl recover: cannot open %s: %s\n", output,
				strerror(errno));
			return EXIT_STORAGE;
		}
		o->direct = true;
		return 0;
	}
	if (snprintf(tmp, tmplen, "%s.tmp", output) >= (int)tmplen) {
		fprintf(stderr, "twctl recover: output path too long\n");
		return EXIT_USAGE;
	}
	o->f = fopen(tmp, "wb");
	if (!o->f) {
		fprintf(stderr, "twctl recover: cannot create %s: %s\n", tmp, strerror(errno));
		return EXIT_STORAGE;
	}
	return 0;
}

/* Close what open_output opened; only a complete, successful recovery (rc 0) leaves FILE
 * behind. Returns rc, or the first error of writing, closing or renaming. */
static int close_output(const char *output, struct out *o, const char *tmp, int rc)
{
	if (o->f && o->f != stdout && fclose(o->f) != 0 && !o->err)
		o->err = errno;
	if (o->err) {
		fprintf(stderr, "twctl recover: writing %s: %s\n", output, strerror(o->err));
		rc = rc ? rc : -o->err;
	}
	if (o->f && o->f != stdout && !o->direct) {
		if (rc == 0 && rename(tmp, output) != 0) {
			fprintf(stderr, "twctl recover: renaming %s to %s: %s\n", tmp, output,
				strerror(errno));
			rc = -errno;
		}
		if (rc != 0)
			unlink(tmp);
	}
	return rc;
}

/* recover --json: one document on stdout. */
static void recover_json(uint64_t log_id, int rc, const char *err,
			 const struct tw_recover_result *r)
{
	printf("{\"log_id\":%" PRIu64 ",\"ok\":%s,\"error\":", log_id, rc ? "false" : "true");
	json_str(stdout, rc ? err : "");
	printf(",\"epoch\":%" PRIu64 ",\"backups\":%u,\"reachable\":%u,\"fenced\":%u,"
	       "\"segments\":%" PRIu64 ",\"first_segment\":%" PRIu64 ",\"last_segment\":%"
	       PRIu64 ",\"entries\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"log_bytes\":%"
	       PRIu64 ",\"copies_listed\":%" PRIu64 ",\"copies_corrupt\":%" PRIu64
	       ",\"copies_stale\":%" PRIu64 ",\"refetches\":%" PRIu64 ",\"segments_missing\":%"
	       PRIu64 ",\"offsets_recorded\":%" PRIu64 ",\"copies_lost\":%" PRIu64
	       ",\"segments_lost\":%" PRIu64 ",\"free_below\":%" PRIu64
	       ",\"copies_repaired\":%" PRIu64 ",\"phase_ms\":{",
	       r->epoch, r->backups, r->backups_reached, r->backups_fenced, r->segments,
	       r->first_segment, r->last_segment, r->entries, r->payload_bytes,
	       r->log_bytes, r->copies_listed, r->copies_corrupt, r->copies_stale,
	       r->refetches, r->segments_missing, r->offsets_recorded, r->copies_lost,
	       r->segments_lost, r->free_below, r->copies_repaired);
	for (int ph = 0; ph < TW_RECOVER_PHASES; ph++)
		printf("%s\"%s\":%.3f", ph ? "," : "",
		       tw_recover_phase_name((enum tw_recover_phase)ph),
		       (double)r->phase_ns[ph] / 1e6);
	printf("}}\n");
}

/* The recover summary for people, on f (stderr when the entries go to stdout). */
static void recover_text(FILE *f, uint64_t log_id, int rc, bool verify, bool no_fence,
			 const char *output, const struct tw_recover_result *r)
{
	fprintf(f, "log %#" PRIx64 ": %s\n", log_id, rc ? "recovery FAILED" :
		(verify ? "verified" : "recovered"));
	fprintf(f, "  epoch          %" PRIu64 "%s\n", r->epoch, no_fence ? " (not fenced)" : "");
	fprintf(f, "  backups        %u reachable of %u, %u fenced\n", r->backups_reached,
		r->backups, r->backups_fenced);
	if (r->segments)
		fprintf(f, "  segments       %" PRIu64 " (%" PRIu64 " .. %" PRIu64 ")\n",
			r->segments, r->first_segment, r->last_segment);
	else
		fprintf(f, "  segments       0\n");
	fprintf(f, "  entries        %" PRIu64 " (%" PRIu64 " payload bytes, %" PRIu64
		" log bytes verified)\n", r->entries, r->payload_bytes, r->log_bytes);
	fprintf(f, "  copies         %" PRIu64 " listed, %" PRIu64 " corrupt, %" PRIu64
		" stale, %" PRIu64 " refetched\n", r->copies_listed, r->copies_corrupt,
		r->copies_stale, r->refetches);
	if (r->copies_lost)
		fprintf(f, "  lost copies    %" PRIu64 " (opened on a backup, gone after its "
			"restart)\n", r->copies_lost);
	if (r->segments_lost)
		fprintf(f, "  LOST           %" PRIu64 " segment(s): every copy is gone\n",
			r->segments_lost);
	else if (r->segments_missing)
		fprintf(f, "  MISSING        %" PRIu64 " segment(s) without a usable copy\n",
			r->segments_missing);
	fprintf(f, "  recorded       %" PRIu64 " recovered offsets", r->offsets_recorded);
	if (r->copies_repaired)
		fprintf(f, ", %" PRIu64 " short copies completed", r->copies_repaired);
	fprintf(f, "\n");
	fprintf(f, "  time (ms)     ");
	for (int ph = 0; ph < TW_RECOVER_PHASES; ph++)
		fprintf(f, " %s %.2f", tw_recover_phase_name((enum tw_recover_phase)ph),
			(double)r->phase_ns[ph] / 1e6);
	fprintf(f, "\n");
	if (output && !rc)
		fprintf(f, "  output         %s\n", output);
}

static int cmd_recover(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "verify", no_argument, NULL, 'V' },
		{ "epoch", required_argument, NULL, 'e' },
		{ "no-record", no_argument, NULL, 'R' },
		{ "no-fence", no_argument, NULL, 'F' },
		{ "create", no_argument, NULL, 'C' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	const char *output = NULL;
	bool verify = false, no_record = false, no_fence = false, create = false, force = false;
	uint64_t log_id, epoch = 0;
	struct out o = { NULL, 0, false };
	char err[512], tmp[4096] = "";
	int opt, rc;

	optind = 0; /* 0: glibc re-initialises getopt (main used "+" ordering) */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":o:e:", lo, NULL)) != -1) {
		switch (opt) {
		case 'o':
			output = optarg;
			break;
		case 'V':
			verify = true;
			break;
		case 'R':
			no_record = true;
			break;
		case 'F':
			no_fence = true;
			break;
		case 'C':
			create = true;
			break;
		case 'f':
			force = true;
			break;
		case 'e':
			if (parse_u64(optarg, &epoch) == 0 && epoch > 0 &&
			    epoch <= TW_EPOCH_MAX)
				break;
			fprintf(stderr, "twctl recover: --epoch %s: expected an integer in 1..%"
				PRId64 "\n", optarg, (int64_t)TW_EPOCH_MAX);
			return EXIT_USAGE;
		default:
			return bad_option("recover", opt, argv);
		}
	}
	if (optind != argc - 1 || parse_u64(argv[optind], &log_id))
		return bad_log_arg("recover", argc, argv, optind);
	if (!no_fence && check_room("recover", epoch, force))
		return EXIT_USAGE;
	if (!!output == verify) {
		fprintf(stderr, "twctl recover: give either -o FILE or --verify\n");
		return EXIT_USAGE;
	}
	if (output && g.json && strcmp(output, "-") == 0) {
		fprintf(stderr, "twctl recover: --json and -o - both want stdout\n");
		return EXIT_USAGE;
	}
	if (need_backups(&log_id))
		return EXIT_USAGE;
	/* A log nothing holds: say so and change nothing (no fence, no coordinator record). */
	if (!create && (rc = check_log("recover", log_id, NULL, NULL)) != EXIT_OK)
		return rc;
	if ((rc = open_output(output, &o, tmp, sizeof(tmp))) != 0)
		return rc;
	recover_cfg(&cfg, log_id, epoch);
	cfg.no_record = no_record;
	cfg.no_fence = no_fence;
	if (g.coord && !no_fence && twctl_coord_epoch(g.coord, g.timeout_ms, "recover", &cfg) < 0)
		return EXIT_FAIL;
	rc = tw_recover(&cfg, write_entry, &o, &res, err, sizeof(err));
	rc = close_output(output, &o, tmp, rc);
	if (g.json)
		recover_json(log_id, rc, err, &res);
	else
		recover_text(o.f == stdout ? stderr : stdout, log_id, rc, verify, no_fence, output,
			     &res);
	if (rc) {
		fprintf(stderr, "twctl recover: %s\n", err[0] ? err : tw_strerror(rc));
		return o.err && rc == -o.err ? EXIT_STORAGE : exit_for(rc);
	}
	if (res.copies_listed == 0)
		fprintf(stderr, "twctl recover: note: no backup holds any segment of log %#" PRIx64
			"%s\n", log_id, create ? ": it exists now, empty, at the epoch above" :
			" (check the log id and the backup addresses)");
	return EXIT_OK;
}

/* ------------------------------------------------------------------ free, delete */

/* The segments of one log below a mark that the backups list before a free: what it drops. */
struct below {
	uint64_t mark, last; /* last: the highest segment listed (any), for "past the end" */
	uint64_t *ids;       /* segment ids below the mark, as listed (copies repeat them) */
	size_t n, cap;
	bool any;
};

static void below_add(void *arg, unsigned i, const struct tw_admin_segment *s)
{
	struct below *bl = arg;

	(void)i;
	if (!bl->any || s->segment_id > bl->last)
		bl->last = s->segment_id;
	bl->any = true;
	if (s->segment_id >= bl->mark)
		return;
	if (bl->n == bl->cap) {
		size_t cap = bl->cap ? bl->cap * 2 : 16;
		uint64_t *ids = realloc(bl->ids, cap * sizeof(*ids));

		if (!ids)
			return; /* out of memory: the report names fewer segments */
		bl->ids = ids;
		bl->cap = cap;
	}
	bl->ids[bl->n++] = s->segment_id;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* "0..2", "0..1, 4, 6..9" (sorted, duplicates ignored); "none" when empty. */
static void ranges(uint64_t *v, size_t n, char *out, size_t len)
{
	size_t used = 0;

	qsort(v, n, sizeof(*v), cmp_u64);
	snprintf(out, len, "none");
	for (size_t i = 0; i < n && used < len;) {
		size_t j = i;

		while (j + 1 < n && (v[j + 1] == v[j] || v[j + 1] == v[j] + 1))
			j++;
		used += (size_t)snprintf(out + used, len - used, "%s%" PRIu64, i ? ", " : "", v[i]);
		if (used < len && v[j] != v[i])
			used += (size_t)snprintf(out + used, len - used, "..%" PRIu64, v[j]);
		i = j + 1;
	}
}

static int cmd_clean(int argc, char **argv, bool delete_log)
{
	static const struct option lo[] = {
		{ "below", required_argument, NULL, 'B' },
		{ "epoch", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name = delete_log ? "delete" : "free";
	struct tw_recover_config cfg;
	uint64_t log_id, below = 0, epoch = 0, freed = 0;
	struct below bl = { 0 };
	bool have_below = false;
	char err[512], segs[200] = "none";
	int opt, rc;

	optind = 0; /* 0: glibc re-initialises getopt (main used "+" ordering) */
	while ((opt = getopt_long(argc, argv, delete_log ? "e:" : "B:", lo, NULL)) != -1) {
		if (opt == 'B' && !delete_log && parse_u64(optarg, &below) == 0 &&
		    below <= UINT32_MAX) { /* a segment id: 32 bits of the LSN */
			have_below = true;
			continue;
		}
		if (opt == 'e' && delete_log && parse_u64(optarg, &epoch) == 0 && epoch > 0 &&
		    epoch <= TW_EPOCH_MAX)
			continue;
		if (opt == 'B' || opt == 'e')
			fprintf(stderr, "twctl %s: --%s %s: expected an integer in %d..%" PRId64 "\n",
				name, opt == 'B' ? "below" : "epoch", optarg, opt == 'e',
				opt == 'e' ? (int64_t)TW_EPOCH_MAX : (int64_t)UINT32_MAX);
		else
			command_usage(stderr, find_command(name));
		return EXIT_USAGE;
	}
	if (optind != argc - 1 || parse_u64(argv[optind], &log_id))
		return bad_log_arg(name, argc, argv, optind);
	if (!delete_log && !have_below) {
		fprintf(stderr, "twctl free: give --below N (the first segment to keep)\n");
		return EXIT_USAGE;
	}
	bl.mark = below;
	if (need_backups(&log_id))
		return EXIT_USAGE;
	/* Nothing about a log that does not exist; for a free, the listing also names what
	 * it is about to drop (the backups count what they dropped). */
	rc = check_log(name, log_id, delete_log ? NULL : below_add, &bl);
	if (rc != EXIT_OK) {
		free(bl.ids);
		return rc;
	}
	ranges(bl.ids, bl.n, segs, sizeof(segs));
	recover_cfg(&cfg, log_id, epoch);
	if (g.coord && delete_log && twctl_coord_epoch(g.coord, g.timeout_ms, "delete", &cfg) < 0) {
		free(bl.ids);
		return EXIT_FAIL;
	}
	rc = delete_log ? tw_admin_delete(&cfg, &freed, err, sizeof(err))
			: tw_admin_trim(&cfg, (uint32_t)below, &freed, err, sizeof(err));
	if (g.json) {
		printf("{\"log_id\":%" PRIu64 ",\"ok\":%s,\"segments_dropped\":%" PRIu64,
		       log_id, rc ? "false" : "true", freed);
		if (!delete_log) {
			printf(",\"below\":%" PRIu64 ",\"segments\":", below);
			json_str(stdout, freed ? segs : "none");
		}
		printf(",\"error\":");
		json_str(stdout, rc ? err : "");
		printf("}\n");
	} else if (rc == 0 && delete_log) {
		printf("log %#" PRIx64 " deleted: %" PRIu64 " segment copies dropped\n", log_id,
		       freed);
	} else if (rc == 0) {
		printf("log %#" PRIx64 " freed below segment %" PRIu64 ": %" PRIu64 " segment copies "
		       "dropped (segments %s); recovery and takeover start at segment %" PRIu64
		       "%s\n", log_id, below, freed, freed ? segs : "none", below,
		       bl.any && below > bl.last + 1 ? ": the mark is past the log's last segment, "
		       "the backups hold none of it now" : "");
	}
	free(bl.ids);
	if (rc) {
		fprintf(stderr, "twctl %s: %s\n", name, err[0] ? err : tw_strerror(rc));
		if (!delete_log)
			fprintf(stderr, "twctl free: %s\n", freed ? "the backups that accepted dropped "
				"their copies below the mark; the others kept theirs" :
				"nothing was freed");
		return exit_for(rc);
	}
	return EXIT_OK;
}

/* ------------------------------------------------------------------ inspect */

/* inspect --json: the report as one object (left open: entries may follow). */
static void inspect_json(const char *path, const struct tw_segfile_report *r,
			 const char *verdict, const char *hdr_err)
{
	printf("{\"file\":");
	json_str(stdout, path);
	printf(",\"verdict\":\"%s\",\"reason\":", verdict);
	json_str(stdout, r->why);
	printf(",\"header_valid\":%s,\"log_id\":%" PRIu64 ",\"segment_id\":%" PRIu64
	       ",\"replica_version\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"state\":\"%s\","
	       "\"flags\":%u,\"checksum\":%u,\"valid_len\":%" PRIu64 ",\"entries\":%" PRIu64
	       ",\"buffer_size\":%" PRIu64 ",\"flush_time_ns\":%" PRIu64 ",\"chain_seed\":%u"
	       ",\"format_version\":%u"
	       ",\"data_offset\":%" PRIu64 ",\"data_bytes\":%" PRIu64 ",\"scan\":{\"valid_len\":%zu,\"entries\":%" PRIu64 ",\"checksum\":%u,"
	       "\"stop\":\"%s\",\"stop_offset\":%zu}", hdr_err ? "false" : "true", r->log_id,
	       r->segment_id, r->replica_version, r->epoch,
	       r->open ? "open" : "closed", r->flags, r->checksum,
	       r->valid_len, r->entries, r->buffer_size, r->flush_time_ns, r->chain_seed,
	       r->format_version, r->data_offset, r->data_len,
	       r->scan_valid_len, r->scan_entries, r->scan_checksum, tw_scan_stop_str(r->scan_stop),
	       r->scan_stop_offset);
}

/* The inspect report for people. */
static void inspect_text(const char *path, const struct tw_segfile_report *r,
			 const char *verdict, const char *hdr_err)
{
	printf("file            %s\n", path);
	printf("verdict         %s%s%s\n", verdict, r->why[0] ? ": " : "", r->why);
	if (hdr_err)
		printf("header          INVALID (%s); fields below as read\n", hdr_err);
	printf("log             %#" PRIx64 "\n", r->log_id);
	printf("segment         %" PRIu64 "\n", r->segment_id);
	printf("replica version %" PRIu64 "\n", r->replica_version);
	printf("epoch           %" PRIu64 "\n", r->epoch);
	printf("format          version %u, data at byte %" PRIu64 "\n", r->format_version,
	       r->data_offset);
	printf("chain seed      0x%08x%s\n", r->chain_seed, r->chain_seed ? "" : " (unseeded)");
	printf("state           %s\n", r->open ?
	       "open (flushed while open: battery / shutdown)" : "closed");
	printf("flags           0x%x%s\n", r->flags,
	       r->flags & TW_SEGFILE_F_CORRUPT ? " (CORRUPT)" : "");
	printf("header          %" PRIu64 " valid bytes, %" PRIu64 " entries, checksum "
	       "0x%08x, buffer %" PRIu64 " bytes\n", r->valid_len, r->entries, r->checksum,
	       r->buffer_size);
	printf("scan            %zu valid bytes, %" PRIu64 " entries, checksum 0x%08x, "
	       "stopped: %s at %zu (file has %" PRIu64 " data bytes)\n", r->scan_valid_len,
	       r->scan_entries, r->scan_checksum, tw_scan_stop_str(r->scan_stop), r->scan_stop_offset,
	       r->data_len);
}

/* inspect -e N: the first N entries of the valid prefix, offset, length, first bytes. */
static void inspect_entries(const struct tw_segfile_report *r, uint64_t show)
{
	struct tw_entry_iter it = { r->data, r->scan_valid_len, 0 };
	const void *p;
	uint32_t len;
	size_t off;
	uint64_t n = 0;

	if (g.json)
		printf(",\"entries_shown\":[");
	else
		printf("%10s %8s  %s\n", "OFFSET", "LENGTH", "FIRST BYTES");
	while (n < show && tw_entry_next(&it, &p, &len, &off) == 1) {
		char hex[3 * 16 + 1] = "";

		for (uint32_t k = 0; k < len && k < 16; k++)
			snprintf(hex + 3 * k, sizeof(hex) - 3 * k, "%02x ",
				 ((const uint8_t *)p)[k]);
		if (g.json)
			printf("%s{\"offset\":%zu,\"length\":%u,\"head\":\"%s\"}", n ? "," : "",
			       off, len, hex);
		else
			printf("%10zu %8u  %s%s\n", off, len, hex, len > 16 ? "..." : "");
		n++;
	}
	if (g.json)
		printf("]");
}

static int cmd_inspect(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "entries", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	struct tw_segfile_report *r;
	struct stat st;
	uint64_t show = 0;
	const char *path, *verdict, *hdr_err = NULL;
	int opt, fd, rc;

	optind = 0; /* 0: glibc re-initialises getopt (main used "+" ordering) */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":e:", lo, NULL)) != -1) {
		if (opt == 'e' && parse_u64(optarg, &show) == 0)
			continue;
		if (opt == 'e')
			fprintf(stderr, "twctl inspect: --entries %s: expected a count >= 0\n",
				optarg);
		else
			bad_option("inspect", opt, argv);
		return EXIT_USAGE;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "twctl inspect: expected exactly one FILE (see twctl inspect --help)\n");
		return EXIT_USAGE;
	}
	path = argv[optind];
	/* O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever. */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "twctl inspect: cannot open %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return EXIT_FAIL;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "twctl inspect: %s is not a regular file (%s); give a segment file "
			"(*.twseg) from twd's storage directory\n", path,
			S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
			S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" :
			S_ISSOCK(st.st_mode) ? "a socket" : "not a file");
		close(fd);
		return EXIT_FAIL;
	}
	/* Any content, any length: the check trusts no length it reads. */
	rc = tw_admin_inspect_file(fd, &r);
	close(fd);
	if (rc) {
		fprintf(stderr, "twctl inspect: %s: cannot read it: %s\n", path, tw_strerror(rc));
		return EXIT_FAIL;
	}
	if (r->short_file) {
		fprintf(stderr, "twctl inspect: %s: %s\n", path, r->why);
		tw_segfile_report_free(r);
		return EXIT_FAIL;
	}
	verdict = r->corrupt ? "CORRUPT" : "ok";
	if (r->header_rc)
		hdr_err = r->header_rc == -TW_EVERSION ? "newer format version" :
			  "bad magic, header CRC, state or sizes";

	if (g.json)
		inspect_json(path, r, verdict, hdr_err);
	else
		inspect_text(path, r, verdict, hdr_err);
	if (show > 0)
		inspect_entries(r, show);
	if (g.json)
		printf("}\n");
	rc = r->corrupt ? EXIT_FAIL : EXIT_OK;
	tw_segfile_report_free(r);
	return rc;
}

/* ------------------------------------------------------------------ the other commands' entries */

static int cmd_free(int argc, char **argv)
{
	return cmd_clean(argc, argv, false);
}

static int cmd_delete(int argc, char **argv)
{
	return cmd_clean(argc, argv, true);
}

/* argv[0], the command, was given an argument it does not take: said. */
static bool extra_args(int argc, char **argv)
{
	if (argc == 1)
		return false;
	fprintf(stderr, "twctl %s: takes no argument\n", argv[0]);
	return true;
}

static int cmd_ls_backups(int argc, char **argv)
{
	if (extra_args(argc, argv))
		return EXIT_USAGE;
	return twctl_coord_ls_backups(g.coord, g.timeout_ms, g.json);
}

static int cmd_owner(int argc, char **argv)
{
	uint64_t log_id = 0;

	if (argc != 2 || parse_u64(argv[1], &log_id)) {
		fprintf(stderr, "twctl owner: expected exactly one LOG id\n");
		return EXIT_USAGE;
	}
	return twctl_coord_owner(g.coord, g.timeout_ms, g.json, log_id);
}

static int cmd_ls_logs(int argc, char **argv)
{
	if (extra_args(argc, argv))
		return EXIT_USAGE;
	return twctl_coord_ls_logs(g.coord, g.timeout_ms, g.json);
}

static int cmd_standby(int argc, char **argv)
{
	return twctl_coord_standby(g.coord, g.timeout_ms, g.provider, g.key_file, argc, argv);
}

static int cmd_tail(int argc, char **argv)
{
	return twctl_tail(g.provider, g.backups, g.nbk, g.coord, g.key_file, g.timeout_ms, g.json,
			  argc, argv);
}

/* ------------------------------------------------------------------ main */

static int add_backups(const char *list)
{
	char *dup, *save = NULL, *tok;

	if (list[strspn(list, ",")] == '\0')
		return 0; /* nothing but commas (or an empty TW_BACKUPS): nothing to keep */
	dup = strdup(list);
	if (!dup)
		return -1;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!*tok)
			continue;
		if (g.nbk == MAX_BK) {
			fprintf(stderr, "twctl: at most %u backups\n", MAX_BK);
			return -1;
		}
		g.backups[g.nbk++] = tok; /* dup is kept for the process lifetime */
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "backup", required_argument, NULL, 'b' },
		{ "provider", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "coordinator", required_argument, NULL, 'c' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const struct command *cmd;
	const char *name;
	int opt, verbose = 0;
	uint64_t t;

	tw_tools_env_defaults(); /* first: no thread runs yet */
	g.timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS;
	/* $FI_PROVIDER is our default provider, passed by name; left set, libfabric would hide
	 * every other provider and an error could not list what this machine offers. */
	if (getenv("FI_PROVIDER") && getenv("FI_PROVIDER")[0]) {
		static char env_provider[256];

		snprintf(env_provider, sizeof(env_provider), "%s", getenv("FI_PROVIDER"));
		g.provider = env_provider;
		unsetenv("FI_PROVIDER");
	}
	while ((opt = getopt_long(argc, argv, "+b:p:t:k:c:jvhV", lo, NULL)) != -1) {
		switch (opt) {
		case 'b':
			if (add_backups(optarg))
				return EXIT_USAGE;
			break;
		case 'p':
			if (!optarg[0]) {
				fprintf(stderr, "twctl: --provider '': expected a provider name (tcp, "
					"sockets, shm, verbs, ...)\n");
				return EXIT_USAGE;
			}
			g.provider = optarg;
			break;
		case 't':
			if (parse_u64(optarg, &t) || t == 0 || t > 3600000) {
				fprintf(stderr, "twctl: --timeout %s: expected milliseconds, 1 .. "
					"3600000\n", optarg);
				return EXIT_USAGE;
			}
			g.timeout_ms = (unsigned)t;
			break;
		case 'k':
			g.key_file = optarg;
			break;
		case 'c':
			if (twctl_coord_check(optarg) < 0)
				return EXIT_USAGE;
			g.coord = optarg;
			break;
		case 'j':
			g.json = true;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			usage_full(stdout);
			return EXIT_OK;
		case 'V':
			printf("twctl (tailwind) %s\n", tw_version());
			return EXIT_OK;
		default:
			usage_main(stderr);
			return EXIT_USAGE;
		}
	}
	if (verbose)
		tw_diag_set_level(verbose > 1 ? TW_DIAG_DEBUG : TW_DIAG_INFO);
	if (optind >= argc) {
		fprintf(stderr, "twctl: no command given (");
		name_commands(stderr);
		fprintf(stderr, "; see twctl --help)\n");
		return EXIT_USAGE;
	}
	if (g.nbk == 0 && getenv("TW_BACKUPS") && add_backups(getenv("TW_BACKUPS")))
		return EXIT_USAGE;
	name = argv[optind];
	argc -= optind;
	argv += optind;
	if (strcmp(name, "help") == 0) {
		cmd = argc > 1 ? find_command(argv[1]) : NULL;
		if (cmd)
			command_usage(stdout, cmd);
		else if (argc > 1)
			command_usage(stdout, NULL);
		else
			usage_full(stdout);
		return EXIT_OK;
	}
	cmd = find_command(name);
	if (!cmd) {
		fprintf(stderr, "twctl: unknown command '%s' (", name);
		name_commands(stderr);
		fprintf(stderr, "; see twctl --help)\n");
		return EXIT_USAGE;
	}
	if (want_help(argc, argv)) {
		command_usage(stdout, cmd);
		return EXIT_OK;
	}
	if (cmd->coord && !g.coord) {
		fprintf(stderr, "twctl %s: needs -c URL (the coordinator)\n", name);
		return EXIT_USAGE;
	}
	return cmd->run(argc, argv);
}
