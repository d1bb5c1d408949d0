/*
 * tools/twd.c — the Tailwind backup daemon: a tw_backup (include/tailwind/backup.h) run by the
 * main thread, with a sigwait() thread that turns SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGPWR into
 * tw_backup_stop() (every one of them flushes every buffer before the exit).
 *
 * stdout carries exactly one line, "ready <address>", once connections are accepted (scripts
 * and tests wait for it; never sleep), preceded by "metrics <address>" with --metrics (the
 * bound address of /metrics, twd_metrics.c). Everything else goes to stderr.
 *
 * Exit status: see usage() and docs/operations.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <tailwind/admin.h>
#include <tailwind/backup.h>
#include <tailwind/common.h>

#include "env_defaults.h"
#include "exit.h"
#include "twd_coord.h"
#include "twd_metrics.h"

/* One line of words wrapped at 79 columns, each line indented by `ind`. */
static void wrap(FILE *f, const char *text, int ind)
{
	const char *p = text;
	int col = ind;

	fprintf(f, "%*s", ind, "");
	while (*p) {
		size_t w = strcspn(p, " ");

		if (col > ind && col + 1 + (int)w > 79) {
			fprintf(f, "\n%*s", ind, "");
			col = ind;
		} else if (col > ind) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", (int)w, p);
		col += (int)w;
		p += w;
		p += strspn(p, " ");
	}
	fputc('\n', f);
}

/* The library's environment table (tw_env_describe), as the man page's ENVIRONMENT section. */
static void usage_env(FILE *f)
{
	const struct tw_env_var *v;
	char line[512];

	fputs("Environment:\n", f);
	for (size_t i = 0; (v = tw_env_describe(i)) != NULL; i++) {
		fprintf(f, "  %s (%s; default %s)%s\n", v->name, v->type, v->default_value,
			v->flags & TW_ENV_TESTING ? " [tests, experiments]" : "");
		snprintf(line, sizeof(line), "%s%s.", v->help, v->flags & TW_ENV_PROGRAM ?
			 " (twd does, at start)" : "");
		wrap(f, line, 6);
	}
	fputs("  NOTIFY_SOCKET\n", f);
	wrap(f, "set by systemd for Type=notify units: twd sends READY=1 there after the ready "
	     "line, and STOPPING=1 when a signal starts its shutdown flush.", 6);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: twd -d DIR [options]\n"
		"Tailwind backup daemon: holds segment replicas that primaries fill with one-sided\n"
		"RDMA writes, and flushes closed ones to DIR.\n"
		"\n"
		"  -d, --dir DIR            storage directory for segment files (required; created if\n"
		"                           missing, its parent must exist)\n"
		"  -p, --provider NAME      libfabric provider: tcp, sockets, shm, verbs (default:\n"
		"                           $FI_PROVIDER, else tcp; tcp;ofi_rxm is refused)\n"
		"  -l, --listen HOST[:PORT]\n"
		"                           address to listen on (default 127.0.0.1, ephemeral port;\n"
		"                           IPv6 as [addr]:port; ignored by shm)\n"
		"  -b, --buffers N          buffers allocated and registered at start (default %u)\n"
		"  -M, --max-buffers N      most buffers the pool grows to, one per open that finds\n"
		"                           none free; at the cap opens are refused (default %u;\n"
		"                           below --buffers: no growth). Memory: N x --buffer-size\n"
		"  -s, --buffer-size SIZE   bytes per buffer, K/M/G suffixes accepted, a multiple of the\n"
		"                           page size (default 8M)\n"
		"  -u, --unflushed-limit N  most buffers open or awaiting flush at once: what this machine\n"
		"                           can flush on battery power (default: --max-buffers)\n"
		"  -B, --busy-poll          poll the fabric instead of blocking (one core at 100%%)\n"
		"  -n, --node-id ID         node id reported to peers (default: from host name and pid)\n"
		"  -k, --key-file PATH      cluster key: peers must prove it before any request is\n"
		"                           served (default: $TW_KEY_FILE; none: every peer that can\n"
		"                           reach the address is served). 32+ random bytes, mode 0600:\n"
		"                           head -c 32 /dev/urandom > KEY && chmod 600 KEY\n"
		"  -c, --coordinator URL    register with a coordinator (zk://HOST:PORT[,...][/chroot]):\n"
		"                           an ephemeral node with this address, provider, zone and free\n"
		"                           buffers, before the ready line; removed at shutdown\n"
		"                           (docs/coordination.md)\n"
		"  -z, --zone ZONE          failure domain (rack, host) in the registration: a primary\n"
		"                           puts no two replicas of a segment in one zone\n"
		"      --metrics [HOST:]PORT\n"
		"                           serve Prometheus metrics at http://HOST:PORT/metrics\n"
		"                           (off by default; a bare PORT listens on 127.0.0.1; port 0\n"
		"                           picks a free one; IPv6 as [addr]:port); prints \"metrics\n"
		"                           <address>\" on stdout before the ready line\n"
		"                           (docs/metrics.md)\n"
		"  -v, --verbose            more log output on stderr (twice: debug)\n"
		"  -V, --version            print the version and exit\n"
		"  -h, --help               this text\n"
		"\n"
		"Prints one line \"ready <address>\" on stdout once it accepts connections; logs go to\n"
		"stderr (level: -v, or TW_LOG_LEVEL below). SIGTERM, SIGINT, SIGHUP, SIGQUIT and\n"
		"SIGPWR flush every buffer, open ones included, then exit.\n"
		"\n",
		TW_BACKUP_DEFAULT_BUFFERS, TW_BACKUP_DEFAULT_MAX_BUFFERS);
	usage_env(f);
	fputs("\n" EXIT_HELP, f);
}

/* "8M", "64k", "1G", "4096", "8MiB": bytes. */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v, mul = 1;

	errno = 0;
	if (!s[0] || s[0] == '-')
		return -EINVAL;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	default: break;
	}
	if (mul > 1 && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	if (*end)
		return -EINVAL;
	if (v > ULLONG_MAX / mul || v * mul > SIZE_MAX)
		return -ERANGE;
	*out = (size_t)(v * mul);
	return 0;
}

static int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (!s[0] || s[0] == '-')
		return -EINVAL;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* "host", "host:port", "[v6]:port", ":port". Writes into node/service buffers. */
static int parse_listen(const char *s, char *node, size_t nlen, char *svc, size_t slen)
{
	const char *colon;

	node[0] = svc[0] = '\0';
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || (size_t)(close - s - 1) >= nlen)
			return -EINVAL;
		memcpy(node, s + 1, (size_t)(close - s - 1));
		node[close - s - 1] = '\0';
		if (close[1] == '\0')
			return 0;
		if (close[1] != ':')
			return -EINVAL;
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon && strchr(s, ':') != colon)
			colon = NULL; /* bare IPv6 address without a port */
		if ((size_t)(colon ? colon - s : (ptrdiff_t)strlen(s)) >= nlen)
			return -EINVAL;
		memcpy(node, s, (size_t)(colon ? colon - s : (ptrdiff_t)strlen(s)));
		node[colon ? colon - s : (ptrdiff_t)strlen(s)] = '\0';
	}
	if (colon) {
		unsigned long long port;

		if (parse_uint(colon + 1, 65535, &port) != 0 || strlen(colon + 1) >= slen)
			return -EINVAL;
		snprintf(svc, slen, "%llu", port);
	}
	return 0;
}

/*
 * systemd's notification protocol (Type=notify in twd@.service): one datagram of "KEY=value"
 * lines to $NOTIFY_SOCKET, the whole protocol as sd_notify(3) and systemd.service(5) document
 * it; written here rather than linking libsystemd for one sendto per state change. "READY=1"
 * after the ready line; "STOPPING=1" with a STATUS= line when a signal stopped the progress
 * loop and the shutdown flush starts (the unit is then "deactivating", and TimeoutStopSec=
 * bounds the flush, also when the signal did not come from systemd). No-op without the variable.
 */
static void notify(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
		return;
	len = strlen(path);
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		fprintf(stderr, "twd: warning: cannot notify systemd at %s: %s\n", path,
			strerror(errno));
	close(fd);
}

/* ------------------------------------------------------------------ signals */

static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tw_backup *sig_backup; /* NULL once main stops listening to signals */
static volatile sig_atomic_t sig_seen;

static void *signal_main(void *arg)
{
	sigset_t *set = arg;

	for (;;) {
		int sig;

		if (sigwait(set, &sig) != 0)
			continue;
		if (sig == SIGUSR2)
			return NULL; /* main is done with us */
		pthread_mutex_lock(&sig_lock);
		sig_seen = sig;
		if (sig_backup)
			tw_backup_stop(sig_backup);
		pthread_mutex_unlock(&sig_lock);
	}
}

static char env_provider[256]; /* $FI_PROVIDER, copied before it is unset */

static void memlock_hint(const char *provider, unsigned buffers, size_t size, bool cap)
{
	struct rlimit rl;
	unsigned long long need = (unsigned long long)buffers * size;

	if (!provider || !strstr(provider, "verbs"))
		return;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur >= need + (64ull << 20))
		return;
	fprintf(stderr, "twd: warning: RLIMIT_MEMLOCK is %llu bytes but the pool needs %llu "
		"(%u x %zu) plus the fabric's own buffers%s; registration will likely fail on "
		"verbs%s. Raise it: `ulimit -l unlimited` in the shell, LimitMEMLOCK=infinity in a "
		"systemd unit, or a memlock line in /etc/security/limits.conf\n",
		(unsigned long long)rl.rlim_cur, need, buffers, size,
		cap ? " when it grows to its cap (--max-buffers)" : "",
		cap ? " past the limit, and opens are then refused" : "");
}

/*
 * Every connection costs twd descriptors, and once they run out libfabric's listener accepts
 * nobody (docs/operations.md, "File descriptors"). A login shell's soft limit (1024) is low
 * for a daemon: raise it to the hard limit, up to what the systemd unit asks for (65536).
 */
static void raise_nofile(void)
{
	struct rlimit rl;
	rlim_t want = 65536;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want || rl.rlim_cur == rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
}

/* MemAvailable from /proc/meminfo in bytes; 0 when unknown. */
static unsigned long long mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

/*
 * The initial buffers are allocated and zeroed at start: refuse more than the memory available
 * now (it would grow toward the OOM killer), and on verbs more than RLIMIT_MEMLOCK (every
 * buffer is pinned). The cap is only warned about: growth past what the machine has is refused
 * open by open (docs/operations.md, "Sizing the buffer pool"). Returns 0 or EXIT_MEMORY after
 * a message with the numbers.
 */
static int check_pool(const char *provider, unsigned buffers, unsigned max, size_t size)
{
	unsigned long long need = (unsigned long long)buffers * size, avail = mem_available();
	struct rlimit rl;

	if (avail && need > avail) {
		fprintf(stderr, "twd: the buffer pool needs %llu bytes (%u buffers x %zu) but only "
			"%llu bytes of memory are available (MemAvailable in /proc/meminfo); use "
			"fewer --buffers or a smaller --buffer-size\n", need, buffers, size, avail);
		return EXIT_MEMORY;
	}
	if (provider && strstr(provider, "verbs") && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY && need > rl.rlim_cur) {
		fprintf(stderr, "twd: the buffer pool needs %llu bytes (%u buffers x %zu) of pinned "
			"memory on verbs but RLIMIT_MEMLOCK is %llu bytes; raise it (`ulimit -l "
			"unlimited`, LimitMEMLOCK=infinity in the systemd unit) or shrink the pool "
			"(and check that this machine has a verbs device at all: fi_info -p verbs)\n",
			need, buffers, size, (unsigned long long)rl.rlim_cur);
		return EXIT_MEMORY;
	}
	memlock_hint(provider, buffers, size, false);
	if (max > buffers) {
		unsigned long long cap = (unsigned long long)max * size;

		if (avail && cap > avail)
			fprintf(stderr, "twd: warning: the pool may grow to %llu bytes (--max-buffers "
				"%u x %zu) but only %llu bytes of memory are available; lower "
				"--max-buffers so that growth stops before the OOM killer does\n", cap,
				max, size, avail);
		memlock_hint(provider, max, size, true);
	}
	return 0;
}

/*
 * Whether `dir` can hold a segment file: create, write a page, fsync and remove a probe file,
 * as a flush would. A directory that cannot (read-only, sysfs, procfs, full) would otherwise
 * acknowledge writes it could never flush. Returns 0 or EXIT_STORAGE after a message.
 */
static int probe_dir(const char *dir)
{
	static char page[4096];
	char path[PATH_MAX];
	const char *step = "creating";
	int fd, err = 0;

	if (snprintf(path, sizeof(path), "%s/.twd-probe-%ld", dir, (long)getpid()) >=
	    (int)sizeof(path)) {
		fprintf(stderr, "twd: storage directory %s: path too long\n", dir);
		return EXIT_STORAGE;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = errno;
	} else {
		step = "writing";
		if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
			err = errno ? errno : ENOSPC;
		else if ((step = "syncing", fsync(fd) != 0))
			err = errno;
		if (close(fd) != 0 && !err)
			err = errno;
		if (unlink(path) != 0 && !err) {
			step = "removing";
			err = errno;
		}
	}
	if (err) {
		fprintf(stderr, "twd: storage directory %s cannot hold segment files: %s the probe "
			"file %s: %s (closed segments could never be flushed; give a writable "
			"directory on a local file system)\n", dir, step, path, strerror(err));
		return EXIT_STORAGE;
	}
	return 0;
}

static int exit_code_for(int rc)
{
	switch (rc) {
	case -ENOMEM:
	case -EAGAIN:
	case -EPERM:
	case -EFAULT:
		return EXIT_MEMORY;
	case -TW_ENOPROV:
	case -EADDRINUSE:
	case -EADDRNOTAVAIL:
	case -ENODATA:
		return EXIT_PROVIDER;
	case -EACCES:
	case -ENOENT:
	case -ENOTDIR:
	case -EBUSY:
	case -EROFS:
	case -ENOSPC:
	case -TW_ECORRUPT: /* the directory's metadata journal (one bad log's file is not fatal) */
	case -TW_EVERSION:
		return EXIT_STORAGE;
	case -EINVAL:
		return EXIT_USAGE;
	default:
		return rc <= -256 && rc > -1024 ? EXIT_PROVIDER : EXIT_FAIL;
	}
}

/* What the command line asked for. */
struct opts {
	struct tw_backup_config cfg;
	char node[256], svc[16];
	const char *coord_url, *zone;
	const char *metrics; /* --metrics: the endpoint's address */
	int verbose;
};

/*
 * Parse the command line into o->cfg (whose defaults are set). Returns -1 to go on, or the
 * exit status: EXIT_OK after --help or --version, EXIT_USAGE with the reason said.
 */
/* One option of the command line: -1 to go on, or the exit code to end with. */
static int parse_opt(int opt, struct opts *o, bool *max_given)
{
	struct tw_backup_config *cfg = &o->cfg;
	unsigned long long v;

	switch (opt) {
	case 'd':
		cfg->dir = optarg;
		return -1;
	case 'p':
		if (!optarg[0]) {
			fprintf(stderr, "twd: --provider '': expected a provider name (tcp, "
				"sockets, shm, verbs, ...)\n");
			return EXIT_USAGE;
		}
		cfg->provider = optarg;
		return -1;
	case 'l':
		if (parse_listen(optarg, o->node, sizeof(o->node), o->svc,
				 sizeof(o->svc)) != 0) {
			fprintf(stderr, "twd: --listen %s: expected HOST, HOST:PORT or "
				"[IPV6]:PORT\n", optarg);
			return EXIT_USAGE;
		}
		cfg->node = o->node[0] ? o->node : NULL;
		cfg->service = o->svc[0] ? o->svc : NULL;
		return -1;
	case 'b':
		if (parse_uint(optarg, 1u << 20, &v) != 0 || v == 0) {
			fprintf(stderr, "twd: --buffers %s: expected a count from 1 to %u\n",
				optarg, 1u << 20);
			return EXIT_USAGE;
		}
		cfg->buffers = (unsigned)v;
		return -1;
	case 'M':
		if (parse_uint(optarg, 1u << 20, &v) != 0 || v == 0) {
			fprintf(stderr, "twd: --max-buffers %s: expected a count from 1 to %u\n",
				optarg, 1u << 20);
			return EXIT_USAGE;
		}
		cfg->max_buffers = (unsigned)v;
		*max_given = true;
		return -1;
	case 's':
		if (parse_size(optarg, &cfg->buffer_size) != 0 || cfg->buffer_size == 0) {
			fprintf(stderr, "twd: --buffer-size %s: expected a size in bytes, with "
				"an optional K, M or G suffix (e.g. 8M)\n", optarg);
			return EXIT_USAGE;
		}
		return -1;
	case 'u':
		if (parse_uint(optarg, 1u << 20, &v) != 0 || v == 0) {
			fprintf(stderr, "twd: --unflushed-limit %s: expected a count >= 1\n",
				optarg);
			return EXIT_USAGE;
		}
		cfg->unflushed_limit = (unsigned)v;
		return -1;
	case 'B':
		cfg->busy_poll = true;
		return -1;
	case 'n':
		if (parse_uint(optarg, UINT64_MAX, &v) != 0 || v == 0) {
			fprintf(stderr, "twd: --node-id %s: expected a non-zero integer\n",
				optarg);
			return EXIT_USAGE;
		}
		cfg->node_id = v;
		return -1;
	case 'k':
		cfg->key_file = optarg;
		return -1;
	case 'c':
		o->coord_url = optarg;
		return -1;
	case 'z':
		o->zone = optarg;
		return -1;
	case 'm' + 256: {
		char why[256];

		if (twd_metrics_check(optarg, why, sizeof(why)) != 0) {
			fprintf(stderr, "twd: --metrics %s: %s\n", optarg, why);
			return EXIT_USAGE;
		}
		o->metrics = optarg;
		return -1;
	}
	case 'v':
		o->verbose++;
		return -1;
	case 'V':
		printf("twd (tailwind) %s\n", tw_version());
		return EXIT_OK;
	case 'h':
		usage(stdout);
		return EXIT_OK;
	default:
		usage(stderr);
		return EXIT_USAGE;
	}
}

/* The options together, once all are read: -1 to go on, or the exit code to end with. */
static int check_args(struct opts *o, bool max_given)
{
	struct tw_backup_config *cfg = &o->cfg;

	if (!cfg->dir) {
		fprintf(stderr, "twd: no storage directory: give one with -d/--dir DIR (closed "
			"segments are flushed there; see twd --help)\n");
		return EXIT_USAGE;
	}
	if (o->coord_url || o->zone) {
		char why[768];

		if (o->zone && !o->coord_url) {
			fprintf(stderr, "twd: --zone needs --coordinator URL (the zone is part of the "
				"registration)\n");
			return EXIT_USAGE;
		}
		if (twd_coord_check(o->coord_url, o->zone, why, sizeof(why)) < 0) {
			fprintf(stderr, "twd: --coordinator: %s\n", why);
			return EXIT_USAGE;
		}
	}
	if (cfg->max_buffers < cfg->buffers) {
		/* The default cap below --buffers: a fixed pool of --buffers, as asked. Given
		 * explicitly below it: the same, said. */
		if (max_given)
			fprintf(stderr, "twd: --max-buffers %u is below --buffers %u: the pool stays "
				"at %u buffers (no growth)\n", cfg->max_buffers, cfg->buffers,
				cfg->buffers);
		cfg->max_buffers = cfg->buffers;
	}
	if (cfg->unflushed_limit > cfg->max_buffers) {
		fprintf(stderr, "twd: --unflushed-limit %u is larger than --max-buffers %u; using "
			"%u\n", cfg->unflushed_limit, cfg->max_buffers, cfg->max_buffers);
		cfg->unflushed_limit = cfg->max_buffers;
	}
	return -1;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "provider", required_argument, NULL, 'p' },
		{ "listen", required_argument, NULL, 'l' },
		{ "buffers", required_argument, NULL, 'b' },
		{ "max-buffers", required_argument, NULL, 'M' },
		{ "buffer-size", required_argument, NULL, 's' },
		{ "unflushed-limit", required_argument, NULL, 'u' },
		{ "busy-poll", no_argument, NULL, 'B' },
		{ "node-id", required_argument, NULL, 'n' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "coordinator", required_argument, NULL, 'c' },
		{ "zone", required_argument, NULL, 'z' },
		{ "metrics", required_argument, NULL, 'm' + 256 },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool max_given = false;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "d:p:l:b:M:s:u:Bn:k:c:z:vVh", longopts, NULL)) != -1)
		if ((rc = parse_opt(opt, o, &max_given)) != -1)
			return rc;
	if (optind < argc) {
		fprintf(stderr, "twd: unexpected argument '%s' (see twd --help)\n", argv[optind]);
		return EXIT_USAGE;
	}
	return check_args(o, max_given);
}

/* The key file, checked here for a clear message and exit 2 (the backup reads it again). */
static int check_key(struct tw_backup_config *cfg)
{
	const char *path = NULL;
	char why[512];

	if (tw_key_file_check(cfg->key_file, &path, why, sizeof(why)) != 0) {
		fprintf(stderr, "twd: %s\n", why);
		return EXIT_USAGE;
	}
	cfg->key_file = path ? path : ""; /* the file checked, or none */
	return 0;
}

/* Signals: blocked in every thread (set before any thread starts), taken by sigwait in the
 * signal thread. */
static int start_signals(pthread_t *thr)
{
	static sigset_t set;
	int rc;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);  /* a closed terminal or a careless reload must not lose data */
	sigaddset(&set, SIGQUIT); /* no core dump of a daemon holding acknowledged entries */
	sigaddset(&set, SIGPWR);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = pthread_create(thr, NULL, signal_main, &set);
	if (rc != 0) {
		fprintf(stderr, "twd: cannot start the signal thread: %s\n", strerror(rc));
		return EXIT_FAIL;
	}
	return 0;
}

static void stop_signals(pthread_t thr)
{
	pthread_kill(thr, SIGUSR2);
	pthread_join(thr, NULL);
}

/* Open the backup on a pool the machine can hold and a directory it can write. */
static int start_backup(const struct tw_backup_config *cfg, struct tw_backup **out)
{
	struct tw_backup *b;
	int status, rc;

	raise_nofile();
	status = check_pool(cfg->provider, cfg->buffers, cfg->max_buffers, cfg->buffer_size);
	if (status)
		return status;
	rc = tw_backup_open(cfg, &b, NULL, 0); /* the library logs the detail */
	if (rc != 0) {
		status = exit_code_for(rc);
		if (status == EXIT_STORAGE && rc != -EBUSY && rc != -TW_ECORRUPT &&
		    rc != -TW_EVERSION)
			fprintf(stderr, "twd: storage directory %s cannot hold segment files: "
				"%s (give twd a writable directory on a local file system)\n",
				cfg->dir, tw_strerror(rc));
		else
			fprintf(stderr, "twd: cannot start: %s\n", tw_strerror(rc));
		return status;
	}
	status = probe_dir(cfg->dir);
	if (status) {
		(void)tw_backup_close(b);
		return status;
	}
	*out = b;
	return 0;
}

/* Serve until a signal or an error, then deregister and flush every buffer (the battery
 * case: open buffers too, whatever stopped us). The exit status. */
static int serve(const struct tw_backup_config *cfg, struct tw_backup *b)
{
	char msg[PATH_MAX + 64];
	int status = EXIT_OK, rc;

	printf("ready %s\n", tw_backup_listen_addr(b));
	fflush(stdout);
	notify("READY=1");

	rc = tw_backup_run(b);
	pthread_mutex_lock(&sig_lock);
	sig_backup = NULL;
	pthread_mutex_unlock(&sig_lock);
	twd_coord_stop(); /* deregister first: no primary should choose us while we flush */
	if (rc != 0) {
		fprintf(stderr, "twd: stopped: %s\n", tw_backup_errmsg(b));
		status = EXIT_FAIL;
	} else {
		fprintf(stderr, "twd: signal %d (%s): flushing every buffer to %s\n", (int)sig_seen,
			sig_seen ? strsignal(sig_seen) : "none", cfg->dir);
	}
	snprintf(msg, sizeof(msg), "STOPPING=1\nSTATUS=flushing every buffer to %s", cfg->dir);
	notify(msg);
	rc = tw_backup_flush_all(b);
	if (rc != 0) {
		fprintf(stderr, "twd: flushing at shutdown failed: %s (%s); data of the failed "
			"buffers is lost\n", tw_strerror(rc), tw_backup_errmsg(b));
		status = EXIT_FAIL;
	}
	return status;
}

int main(int argc, char **argv)
{
	static struct opts o;
	struct tw_backup_config *cfg = &o.cfg;
	struct tw_backup *b;
	pthread_t sigthr;
	int status;

	tw_tools_env_defaults(); /* first: no thread runs yet */
	tw_backup_config_init(cfg);
	cfg->provider = getenv("FI_PROVIDER");
	if (cfg->provider && !cfg->provider[0])
		cfg->provider = NULL;
	/* Ours to pass by name: left in the environment, libfabric would also hide every other
	 * provider, and "this machine offers" could list none. */
	if (cfg->provider) {
		snprintf(env_provider, sizeof(env_provider), "%s", cfg->provider);
		cfg->provider = env_provider;
		unsetenv("FI_PROVIDER");
	}
	status = parse_args(argc, argv, &o);
	if (status >= 0)
		return status;
	if (o.verbose)
		tw_diag_set_level(o.verbose > 1 ? TW_DIAG_DEBUG : TW_DIAG_INFO);
	status = check_key(cfg);
	if (status)
		return status;
	status = start_signals(&sigthr);
	if (status)
		return status;
	status = start_backup(cfg, &b);
	if (status) {
		stop_signals(sigthr);
		return status;
	}
	pthread_mutex_lock(&sig_lock);
	sig_backup = b;
	if (sig_seen)
		tw_backup_stop(b); /* a signal arrived during start-up */
	pthread_mutex_unlock(&sig_lock);

	if (!cfg->key_file[0]) /* check_key: "" when there is none */
		fprintf(stderr, "twd: warning: no key file (--key-file or $TW_KEY_FILE): peers are "
			"not authenticated; anyone who can reach this daemon can read, write and "
			"fence its logs\n");
	if (o.coord_url) {
		char why[768];

		/* Registered before the ready line: whoever waits for it finds the node. */
		if (twd_coord_start(o.coord_url, o.zone, cfg->provider, b, why, sizeof(why)) < 0) {
			fprintf(stderr, "twd: cannot register with the coordinator: %s\n", why);
			(void)tw_backup_close(b);
			stop_signals(sigthr);
			return EXIT_FAIL;
		}
	}
	if (o.metrics) {
		char addr[300], why[512];

		/* After the signal mask (its thread inherits it), before the ready line. */
		if (twd_metrics_start(o.metrics, b, addr, sizeof(addr), why, sizeof(why)) != 0) {
			fprintf(stderr, "twd: --metrics %s: %s\n", o.metrics, why);
			twd_coord_stop();
			(void)tw_backup_close(b);
			stop_signals(sigthr);
			return EXIT_PROVIDER;
		}
		printf("metrics %s\n", addr);
	}
	status = serve(cfg, b);
	twd_metrics_stop(); /* its thread reads the backup's counters: before the close */
	/* Closed segments whose flush failed are lost with the pool (logged): not a clean exit. */
	if (tw_backup_close(b) < 0 && status == EXIT_OK)
		status = EXIT_FAIL; /* as a failed flush at shutdown (docs/operations.md) */
	stop_signals(sigthr);
	return status;
}
