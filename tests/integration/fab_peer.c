/*
 * tests/integration/fab_peer.c — the passive peer of the fabric integration tests and of
 * bench_fabric: `fab_peer --listen [--provider P] [--size BYTES] [--fault noback|reqkey]`
 * (--fault: one memory-registration rule broken on purpose, tests/lib/fab_rules.h).
 *
 * Listens on an ephemeral address, prints "ready <address>" on stdout, and serves until
 * SIGTERM/SIGINT: every accepted channel first receives "RKEY <addr> <key> <len>" for one
 * registered buffer (8 MiB + 64 KiB by default, shared by all channels), then text commands:
 *   RKEY                       → RKEY <addr> <key> <len>
 *   SUM <off> <len>            → SUM <fnv1a-64 hex> of that region
 *   FILL <off> <len> <seed>    → OK   (writes the test pattern there, for read tests)
 *   ZERO                       → OK   (zeroes the whole buffer)
 *   ECHO<bytes>                → the same message back (any bytes)
 *   P<bytes>                   → the same message back (pingpong, no parsing)
 * Lost channels are closed and forgotten; the peer keeps serving new ones.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab_pattern.h"
#include "fab_rules.h"
#include "fabric/fabric.h"

/*
 * LeakSanitizer (ASan builds): the sockets provider's listener thread allocates a request for
 * every incoming TCP connection and never frees the ones whose handshake never completed (the
 * half-open connections fabric_rma makes on purpose). Its stack holds only libfabric frames
 * (fast unwinding), so the suppression names the library; the driver (fabric_rma) is not
 * suppressed and covers our own use of libfabric.
 */
const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void)
{
	return "leak:libfabric.so\n";
}

static struct tw_fab *fab;
static volatile sig_atomic_t stop;
static unsigned char *buf;
static size_t buf_len;
static struct tw_mr *mr;

static void on_signal(int sig)
{
	stop = 1;
	if (fab)
		tw__fab_wakeup(fab); /* an eventfd write: async-signal-safe */
}

static void reply(struct tw_chan *ch, const char *s)
{
	int rc = tw__chan_send(ch, s, strlen(s));
	if (rc < 0)
		fprintf(stderr, "fab_peer: send: %s\n", tw_strerror(rc));
}

static void send_rkey(struct tw_chan *ch)
{
	struct tw_rkey rk;
	char m[128];

	tw__mr_rkey(mr, &rk);
	snprintf(m, sizeof(m), "RKEY %" PRIu64 " %" PRIu64 " %" PRIu64, rk.addr, rk.key, rk.len);
	reply(ch, m);
}

static void on_accept(void *arg, struct tw_chan *ch)
{
	send_rkey(ch);
}

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	char cmd[128], out[128];
	unsigned long long off, l, seed;

	if (len >= 1 && ((const char *)msg)[0] == 'P') {
		tw__chan_send(ch, msg, len);
		return;
	}
	if (len >= 4 && !memcmp(msg, "ECHO", 4)) {
		tw__chan_send(ch, msg, len);
		return;
	}
	if (len >= sizeof(cmd))
		return;
	memcpy(cmd, msg, len);
	cmd[len] = '\0';
	if (!strcmp(cmd, "RKEY")) {
		send_rkey(ch);
	} else if (sscanf(cmd, "SUM %llu %llu", &off, &l) == 2) {
		if (off > buf_len || l > buf_len - off) {
			reply(ch, "ERR range");
			return;
		}
		snprintf(out, sizeof(out), "SUM %016" PRIx64, fab_fnv1a(buf + off, l));
		reply(ch, out);
	} else if (sscanf(cmd, "FILL %llu %llu %llu", &off, &l, &seed) == 3) {
		if (off > buf_len || l > buf_len - off) {
			reply(ch, "ERR range");
			return;
		}
		fab_pattern(buf + off, l, seed);
		reply(ch, "OK");
	} else if (!strcmp(cmd, "ZERO")) {
		memset(buf, 0, buf_len);
		reply(ch, "OK");
	} else {
		reply(ch, "ERR unknown");
	}
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	fprintf(stderr, "fab_peer: channel from %s lost: %s\n", tw__chan_peer(ch), tw_strerror(err));
	tw__chan_close(ch);
}

int main(int argc, char **argv)
{
	static struct tw_fab_mr_rules rules; /* --fault: a registration rule broken on purpose */
	struct tw_fab_config cfg;
	struct tw_fab_events ev = {.on_accept = on_accept, .on_recv = on_recv, .on_lost = on_lost};
	bool listen = false;
	char addr[TW_ADDR_MAX];
	int rc;

	tw__fab_config_init(&cfg);
	buf_len = 8u * 1024 * 1024 + 65536;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--listen"))
			listen = true;
		else if (!strcmp(argv[i], "--provider") && i + 1 < argc)
			cfg.provider = argv[++i];
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			buf_len = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--busy-poll"))
			cfg.busy_poll = true;
		else if (!strcmp(argv[i], "--fault") && i + 1 < argc &&
			 fab_rules_fault(&rules, argv[i + 1])) {
			cfg.mr_rules = &rules;
			i++;
		} else {
			fprintf(stderr, "usage: fab_peer --listen [--provider P] [--size N] [--busy-poll] "
				"[--fault noback|reqkey]\n");
			return 2;
		}
	}
	if (!listen) {
		fprintf(stderr, "fab_peer: only --listen is implemented\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = tw__fab_open(&cfg, &ev, &fab);
	if (rc < 0) {
		fprintf(stderr, "fab_peer: %s: %s\n", tw_strerror(rc), tw__fab_errmsg(NULL));
		return 1;
	}
	buf = tw__fab_alloc(buf_len);
	if (!buf || (rc = tw__mr_reg(fab, buf, buf_len, TW_MR_REMOTE_WRITE | TW_MR_REMOTE_READ, &mr)) < 0) {
		fprintf(stderr, "fab_peer: buffer: %s %s\n", tw_strerror(rc), tw__fab_errmsg(fab));
		return 1;
	}
	rc = tw__fab_listen(fab, addr, sizeof(addr));
	if (rc < 0) {
		fprintf(stderr, "fab_peer: listen: %s %s\n", tw_strerror(rc), tw__fab_errmsg(fab));
		return 1;
	}
	printf("ready %s\n", addr);
	fflush(stdout);
	while (!stop) {
		rc = tw__fab_progress(fab, -1);
		if (rc < 0) {
			fprintf(stderr, "fab_peer: progress: %s\n", tw_strerror(rc));
			break;
		}
	}
	tw__fab_close(fab); /* also removes shm's /dev/shm file */
	tw__fab_free(buf, buf_len);
	return 0;
}
