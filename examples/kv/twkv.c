/*
 * examples/kv/twkv.c — twkv: a replicated key-value server on Tailwind, and its command-line
 * client (docs/kv.md).
 *
 *   twkv serve --dir DIR [options]        a server; prints `ready kv=ADDR backup=ADDR`
 *   twkv configure MAPFILE                send the cluster map to every server in it
 *   twkv -s ADDR put KEY VALUE | get KEY | stats | map | takeover PARTITION
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tailwind/common.h>

#include "kv_client.h"
#include "kv_metrics.h"
#include "kv_server.h"

static const char timeout_hint[] =
	" (no server answered within the -T timeout: a server may be paused or unreachable;"
	" try again, or raise -T)";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: twkv serve --dir DIR [options]\n"
		"       twkv configure MAPFILE\n"
		"       twkv -s ADDR [-s ADDR...] put KEY VALUE | get KEY | stats | map |"
		" takeover PARTITION\n"
		"\n"
		"A replicated key-value server on Tailwind (docs/kv.md): the primary of its\n"
		"partitions' logs and a backup for the other servers' logs, in one process.\n"
		"\n"
		"serve options:\n"
		"  -d, --dir DIR              the embedded backup's segment files (required)\n"
		"  -p, --provider NAME        libfabric provider for replication (default $FI_PROVIDER"
		" or tcp)\n"
		"  -l, --listen HOST          address of both listeners (default 127.0.0.1)\n"
		"      --port PORT            client port (default: ephemeral)\n"
		"      --backup-port PORT     the embedded backup's port (default: ephemeral; fixed\n"
		"                             ports let a cluster map be written before the start)\n"
		"  -c, --cluster FILE         start from this cluster map as server --id (else wait\n"
		"                             for `twkv configure`)\n"
		"  -i, --id N                 this server's id in the map\n"
		"  -r, --replication MODE     onesided (Tailwind, default) or rpc (the baseline:\n"
		"                             backups receive, check and copy every write)\n"
		"  -S, --segment-size SIZE    log segment and backup buffer size (default 8M)\n"
		"  -m, --memory SIZE          log memory budget of the server's partitions; the\n"
		"                             cleaner keeps below it (default 1G; 0: none)\n"
		"  -t, --session-timeout MS   ZooKeeper session timeout: how soon a dead server's\n"
		"                             partitions are taken over (default 4000); also the\n"
		"                             read leases': with a coordinator a server answers a\n"
		"                             GET only within T*0.99 - 100 ms of its last renewal\n"
		"                             that ZooKeeper answered (docs/kv.md, \"Leased reads\")\n"
		"      --connect-timeout MS   how long a connect to another server's backup may\n"
		"                             take (default 1000): a takeover's recovery waits an\n"
		"                             eighth of it on a paused server when the others\n"
		"                             hold every segment, else all of it\n"
		"      --rpc-timeout MS       how long a request to another server's backup (open,\n"
		"                             close or fence a segment) may go unanswered before\n"
		"                             that backup counts as lost (default: the library's,\n"
		"                             5000): a paused backup holds a log's appends that long\n"
		"  -b, --buffers N            backup buffers registered at start (default 16)\n"
		"  -k, --keys N               index size hint per partition (default 1024)\n"
		"      --drive MODE           who drives the partitions' logs: thread (default: a\n"
		"                             progress thread per log) or loop (the serving\n"
		"                             thread, from its epoll loop: no hand-off between\n"
		"                             threads per PUT; not on shm, whose logs keep their\n"
		"                             threads; docs/kv.md, \"Threads\")\n"
		"      --metrics [HOST:]PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
		"                             (off by default; a bare PORT is on 127.0.0.1; 0: a\n"
		"                             free port, printed as `metrics ADDR` before the ready\n"
		"                             line; docs/metrics.md)\n"
		"\n"
		"client options:\n"
		"  -s, --server ADDR          a server's client address (any one: the map names the"
		" rest)\n"
		"  -T, --timeout MS           give up after so long, whatever the servers do (a\n"
		"                             paused server, a connection that hangs): the whole\n"
		"                             command, the map's fetch included (default 30000)\n"
		"\n"
		"serve prints `ready kv=ADDR backup=ADDR` once it listens, and a `serving partition"
		" ...`\n"
		"line for each partition it starts serving (opened, or taken over).\n");
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'K': case 'k': mul = 1u << 10; end++; break;
	case 'M': case 'm': mul = 1u << 20; end++; break;
	case 'G': case 'g': mul = 1u << 30; end++; break;
	default: break;
	}
	if (*end || v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

/* Before any thread: the libfabric defaults Tailwind wants (TW_ENV_PROGRAM rows of
 * tw_env_describe()), unless the environment sets them; the library never sets them itself. */
static void env_defaults(void)
{
	const struct tw_env_var *v;

	for (size_t i = 0; (v = tw_env_describe(i)) != NULL; i++)
		if ((v->flags & TW_ENV_PROGRAM) && !getenv(v->name))
			setenv(v->name, v->default_value, 0);
}

static int serve(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "provider", required_argument, NULL, 'p' },
		{ "listen", required_argument, NULL, 'l' },
		{ "port", required_argument, NULL, 'P' },
		{ "backup-port", required_argument, NULL, 'B' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "id", required_argument, NULL, 'i' },
		{ "replication", required_argument, NULL, 'r' },
		{ "segment-size", required_argument, NULL, 'S' },
		{ "memory", required_argument, NULL, 'm' },
		{ "session-timeout", required_argument, NULL, 't' },
		{ "connect-timeout", required_argument, NULL, 'C' },
		{ "rpc-timeout", required_argument, NULL, 'R' },
		{ "buffers", required_argument, NULL, 'b' },
		{ "keys", required_argument, NULL, 'k' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "drive", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kv_server_config cfg;
	uint64_t v;
	int o;

	env_defaults();
	kv_server_config_init(&cfg);
	while ((o = getopt_long(argc, argv, "d:p:l:c:i:r:S:m:t:b:k:h", opts, NULL)) != -1) {
		switch (o) {
		case 'd': cfg.dir = optarg; break;
		case 'p': cfg.provider = optarg; break;
		case 'l': cfg.listen = optarg; break;
		case 'P': cfg.port = optarg; break;
		case 'B': cfg.backup_port = optarg; break;
		case 'c': cfg.cluster_file = optarg; break;
		case 'i': cfg.id = atoi(optarg); break;
		case 'r':
			/* libtailwind's switch for the baseline is the environment (docs/api.md):
			 * set here, before any thread runs. */
			if (!strcmp(optarg, "onesided"))
				cfg.rpc_baseline = false;
			else if (!strcmp(optarg, "rpc"))
				cfg.rpc_baseline = true;
			else
				goto bad;
			if (setenv("TW_DATA_PATH", cfg.rpc_baseline ? "rpc" : "onesided", 1) != 0)
				goto bad;
			break;
		case 'S':
			if (parse_size(optarg, &v) < 0 || v < 4096 || v >= (UINT64_C(1) << 32))
				goto bad;
			cfg.segment_size = (size_t)v;
			break;
		case 'm':
			if (parse_size(optarg, &v) < 0)
				goto bad;
			cfg.memory = v;
			break;
		case 't':
			if (parse_size(optarg, &v) < 0 || !v || v > 600000)
				goto bad;
			cfg.session_ms = (unsigned)v;
			break;
		case 'C':
			if (parse_size(optarg, &v) < 0 || !v || v > 600000)
				goto bad;
			cfg.connect_ms = (unsigned)v;
			break;
		case 'R':
			if (parse_size(optarg, &v) < 0 || !v || v > 600000)
				goto bad;
			cfg.rpc_ms = (unsigned)v;
			break;
		case 'b':
			if (parse_size(optarg, &v) < 0 || !v || v > 4096)
				goto bad;
			cfg.backup_buffers = (unsigned)v;
			break;
		case 'k':
			if (parse_size(optarg, &v) < 0 || v > (UINT64_C(1) << 32))
				goto bad;
			cfg.expect_keys = (size_t)v;
			break;
		case 'M': {
			char why[256];

			if (kv_metrics_check(optarg, why, sizeof(why)) != 0) {
				fprintf(stderr, "twkv serve: --metrics %s: %s\n", optarg, why);
				return 2;
			}
			cfg.metrics = optarg;
			break;
		}
		case 'D':
			if (!strcmp(optarg, "thread"))
				cfg.loop_logs = false;
			else if (!strcmp(optarg, "loop"))
				cfg.loop_logs = true;
			else
				goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!cfg.dir || optind != argc || (cfg.cluster_file && cfg.id < 0)) {
		fprintf(stderr, "twkv serve: %s\n", !cfg.dir ? "--dir is required" :
			optind != argc ? "unexpected arguments" : "--cluster needs --id");
		return 2;
	}
	if (cfg.memory && cfg.memory < 4 * (uint64_t)cfg.segment_size) {
		fprintf(stderr, "twkv serve: --memory must hold at least 4 segments (the cleaner "
			"needs room to move live records)\n");
		return 2;
	}
	return kv_server_run(&cfg);
bad:
	fprintf(stderr, "twkv serve: bad value for --%s: %s\n",
		o == 'r' ? "replication" : o == 'S' ? "segment-size" : o == 'm' ? "memory" :
		o == 't' ? "session-timeout" : o == 'C' ? "connect-timeout" :
		o == 'R' ? "rpc-timeout" : o == 'b' ? "buffers" : o == 'D' ? "drive" : "keys",
		optarg);
	return 2;
}

static int configure(const char *file, unsigned timeout_ms)
{
	struct kv_cluster map;
	char text[65536], err[512];
	size_t len;
	FILE *f = fopen(file, "r");

	if (!f) {
		fprintf(stderr, "twkv: %s: %s\n", file, strerror(errno));
		return 1;
	}
	len = fread(text, 1, sizeof(text), f);
	fclose(f);
	if (kv_cluster_parse(text, len, &map, err, sizeof(err)) < 0 ||
	    kv_configure(&map, timeout_ms, err, sizeof(err)) < 0) {
		fprintf(stderr, "twkv: %s\n", err);
		return 1;
	}
	return 0;
}

/* stats, map, takeover: one request to the first server. */
static int admin(const char *addr, uint8_t op, const void *body, uint32_t len, unsigned timeout)
{
	uint8_t status;
	char *reply;
	uint32_t rlen;
	int rc = kv_call(addr, op, body, len, timeout, &status, &reply, &rlen);

	if (rc < 0) {
		fprintf(stderr, "twkv: %s: %s\n", addr, strerror(-rc));
		return 1;
	}
	if (status != KV_S_OK)
		fprintf(stderr, "twkv: %s: %s%s%s\n", addr, kv_status_str(status), rlen ? ": " : "",
			reply);
	else
		fputs(reply, stdout);
	if (status == KV_S_OK && rlen && reply[rlen - 1] != '\n')
		putchar('\n');
	free(reply);
	return status == KV_S_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *servers[KV_MAX_SERVERS];
	size_t n = 0;
	unsigned timeout = 30000;
	const char *cmd;
	char err[512];
	struct kvc *c;
	uint64_t version, spent;
	struct timespec t0, t1;
	int o, rc;

	if (argc > 1 && !strcmp(argv[1], "serve"))
		return serve(argc - 1, argv + 1);
	while ((o = getopt_long(argc, argv, "+s:T:hV", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			if (n == KV_MAX_SERVERS) {
				fprintf(stderr, "twkv: at most %u servers\n", KV_MAX_SERVERS);
				return 2;
			}
			servers[n++] = optarg;
			break;
		case 'T':
			timeout = (unsigned)atoi(optarg);
			if (!timeout) {
				fprintf(stderr, "twkv: bad value for --timeout: %s (milliseconds, "
					"more than 0)\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("twkv (Tailwind %s)\n", tw_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	if (!strcmp(cmd, "configure") && optind + 1 == argc)
		return configure(argv[optind], timeout);
	if (!n) {
		fprintf(stderr, "twkv %s: which server? (-s ADDR)\n", cmd);
		return 2;
	}
	if (!strcmp(cmd, "stats") && optind == argc)
		return admin(servers[0], KV_OP_STATS, NULL, 0, timeout);
	if (!strcmp(cmd, "map") && optind == argc)
		return admin(servers[0], KV_OP_MAP, NULL, 0, timeout);
	if (!strcmp(cmd, "takeover") && optind + 1 == argc) {
		uint8_t b[4];

		kv_put32(b, (uint32_t)atoi(argv[optind]));
		return admin(servers[0], KV_OP_TAKEOVER, b, 4, timeout);
	}
	if (!(!strcmp(cmd, "get") && optind + 1 == argc) &&
	    !(!strcmp(cmd, "put") && optind + 2 == argc)) {
		usage(stderr);
		return 2;
	}
	if (strlen(argv[optind]) > KV_MAX_KEY) {
		fprintf(stderr, "twkv: a key has at most %u bytes\n", KV_MAX_KEY);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kvc_open(servers, n, timeout, &c, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twkv: %s%s\n", err, rc == -ETIMEDOUT ? timeout_hint : "");
		return 1;
	}
	/* One deadline for the whole command: the map's fetch took part of it. */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	spent = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000u +
		(uint64_t)((t1.tv_nsec - t0.tv_nsec) / 1000000);
	kvc_set_timeout(c, spent < timeout ? (unsigned)(timeout - spent) : 1);
	if (cmd[0] == 'p') {
		rc = kvc_put_sync(c, argv[optind], (uint16_t)strlen(argv[optind]), argv[optind + 1],
				  (uint32_t)strlen(argv[optind + 1]), &version);
		if (rc == 0)
			printf("version %" PRIu64 "\n", version);
	} else {
		static char value[KV_MAX_VALUE];
		uint32_t vlen;

		rc = kvc_get_sync(c, argv[optind], (uint16_t)strlen(argv[optind]), value,
				  sizeof(value), &vlen, &version);
		if (rc == 0) {
			fwrite(value, 1, vlen, stdout);
			putchar('\n');
		}
	}
	if (rc < 0)
		fprintf(stderr, "twkv %s: %s%s\n", cmd, rc == -ENOENT ? "no such key" : kvc_strerror(rc),
			rc == -ETIMEDOUT ? timeout_hint : "");
	kvc_close(c);
	return rc < 0;
}
