/*
 * tests/integration/auth_e2e.c — peer authentication against real twd processes over one
 * provider (argv[1]): a twd with a key file and one without. Checks that a client with the key
 * is served; that no key, a wrong key, a key on only one side, a request before the handshake,
 * a replayed proof (captured from a good client's handshake and sent on a new connection) and
 * garbage bytes are refused, counted, and cost only that connection; that the daemon keeps
 * serving the good client after each; that twctl, twbench and the primary work with a key file.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "proc.h"
#include "proto/auth.h"
#include "child.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

static const char *prov;
static char dir[256], key1[300], key2[300], key_open[300], twd_exe[1024];
static char addr_k[320], addr_nok[320];

static void write_file(const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	TAP_REQUIRE(fd >= 0 && write(fd, buf, len) == (ssize_t)len, "write %s", path);
	close(fd);
	TAP_REQUIRE(chmod(path, mode) == 0, "chmod %s", path);
}

static struct proc *start_twd(const char *sub, const char *key, char *addr, size_t len)
{
	char d[300];
	char *argv[] = { twd_exe, (char *)"-p", (char *)prov, (char *)"-d", d, (char *)"-b",
			 (char *)"4", (char *)"-s", (char *)"1M", (char *)"--key-file",
			 (char *)key, NULL };
	struct proc *p;

	snprintf(d, sizeof(d), "%s/%s", dir, sub);
	if (!key)
		argv[9] = NULL;
	p = child_ready(argv, NULL, 20000, addr, len, NULL);
	TAP_REQUIRE(p, "twd ready");
	return p;
}

/* Handshake on a fresh connection; returns the handshake's code, message in why. */
static int try_handshake(struct twc *c, const char *addr, const char *keyfile, char *why,
			 size_t len)
{
	struct tw_auth_key *key = NULL;
	struct tw_rpc_reply rep;
	int rc;

	why[0] = '\0';
	rc = twc_connect(c, prov, addr);
	if (rc)
		return rc;
	if (keyfile && tw__auth_key_load(keyfile, &key, why, len))
		return -EINVAL;
	rc = tw__auth_client_handshake(c->rpc, key, 42, TAILWIND__ROLE__ROLE_ADMIN, "auth_e2e",
				      &rep, why, len);
	tw__rpc_reply_release(&rep);
	tw__auth_key_free(key);
	return rc;
}

/* A good client still gets served: authenticated handshake and a listing. */
static void good_client(const char *when)
{
	struct twc c;
	struct twc_info info[4];
	char why[512];
	int rc;

	rc = try_handshake(&c, addr_k, key1, why, sizeof(why));
	/*
	 * sockets: the provider's connection manager reports any failed exchange of its own
	 * connect protocol as -ECONNREFUSED (prov/sockets/src/sock_ep_msg.c,
	 * sock_ep_cm_report_connect_fail); once in CI, right after twd closed refused peers'
	 * connections, a good client's connect failed so while twd logged no rejection. What is
	 * checked here is twd's service, so a refused *connect* (never a refused handshake) is
	 * tried once more, and said.
	 */
	if (rc == -ECONNREFUSED && !strcmp(prov, "sockets")) {
		tap_diag("%s: sockets connect refused by the provider; once more", when);
		twc_close(&c);
		rc = try_handshake(&c, addr_k, key1, why, sizeof(why));
	}
	if (rc == 0)
		rc = twc_list(&c, 0, true, info, 4);
	ok(rc >= 0, "%s: a client with the key is served (%s %s)", when, tw_strerror(rc), why);
	twc_close(&c);
}

/* ---- raw frames (replay, garbage) */

struct raw {
	struct tw_fab *fab;
	struct tw_chan *ch;
	bool lost, got;
	unsigned char msg[65536];
	size_t len;
	struct tw_rpc_arena arena;
};

static void raw_recv(void *arg, struct tw_chan *ch, const void *m, size_t len)
{
	struct raw *r = arg;

	(void)ch;
	r->len = len < sizeof(r->msg) ? len : sizeof(r->msg);
	memcpy(r->msg, m, r->len);
	r->got = true;
}

static void raw_lost(void *arg, struct tw_chan *ch, int err)
{
	(void)ch;
	(void)err;
	((struct raw *)arg)->lost = true;
}

static int raw_open(struct raw *r, const char *addr)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .arg = r, .on_recv = raw_recv, .on_lost = raw_lost };
	int rc;

	memset(r, 0, sizeof(*r));
	tw__rpc_arena_init(&r->arena, NULL, 0, 0);
	tw__fab_config_init(&fc);
	fc.provider = prov;
	rc = tw__fab_open(&fc, &ev, &r->fab);
	if (rc == 0)
		rc = tw__fab_connect(r->fab, addr, &r->ch);
	return rc;
}

static void raw_close(struct raw *r)
{
	if (r->ch)
		tw__chan_close(r->ch);
	if (r->fab)
		tw__fab_close(r->fab);
	tw__rpc_arena_fini(&r->arena);
}

/* Send bytes and wait for one reply (decoded into *env) or the loss of the channel.
 * 0: reply; -TW_EPEERLOST; -ETIMEDOUT after wait_ms (a bound, not a timing assert). */
static int raw_call_wait(struct raw *r, const void *frame, size_t len, Tailwind__Envelope **env,
			 unsigned wait_ms)
{
	uint64_t deadline = tw_now_ns() + wait_ms * 1000000ull;
	struct tw_rpc_hdr hdr;
	char why[256];
	int rc;

	r->got = false;
	tw__rpc_arena_reset(&r->arena);
	if (r->lost)
		return -TW_EPEERLOST;
	rc = tw__chan_send(r->ch, frame, len);
	if (rc)
		return rc;
	while (!r->got && !r->lost && tw_now_ns() < deadline)
		tw__fab_progress(r->fab, 100);
	if (r->got)
		return tw__rpc_decode(r->msg, r->len, sizeof(r->msg), &r->arena, env, &hdr, why,
				     sizeof(why));
	return r->lost ? -TW_EPEERLOST : -ETIMEDOUT;
}

static int raw_call(struct raw *r, const void *frame, size_t len, Tailwind__Envelope **env)
{
	return raw_call_wait(r, frame, len, env, 10000);
}

/* After a refusal the connection is closed: a further request is not served (on MSG
 * providers the channel is lost; on shm the backup forgot the peer and refuses it again). */
static bool raw_not_served(struct raw *r)
{
	struct tw_rpc_req req;
	unsigned char f[512];
	size_t len;
	Tailwind__Envelope *env;
	int rc;

	tw__rpc_req_list_segments(&req, 0, true, 0);
	req.env.request_id = 99;
	if (tw__rpc_encode(&req.env, f, sizeof(f), sizeof(f), &len))
		return false;
	/* A refused connection is closed unanswered: lost (MSG providers) or silence (shm). */
	rc = raw_call_wait(r, f, len, &env, 3000);
	if (rc)
		return true;
	return tw__rpc_reply_status(env, NULL) != TAILWIND__STATUS__STATUS_OK;
}

static void replay_tests(void)
{
	struct tw_auth_key *key;
	struct tw_auth_transcript t;
	struct tw_rpc_req req;
	unsigned char nonce[TW_AUTH_NONCE_LEN], first_sn[TW_AUTH_NONCE_LEN];
	unsigned char hello[512], proof_frame[512], proof[TW_AUTH_MAC_LEN];
	size_t hello_len = 0, proof_len = 0;
	Tailwind__Envelope *env;
	struct raw r;
	char why[256];
	int rc;

	TAP_REQUIRE(tw__auth_key_load(key1, &key, why, sizeof(why)) == 0, "key1: %s", why);
	/* A legitimate handshake, frame by frame, keeping the client's frames. */
	TAP_REQUIRE(raw_open(&r, addr_k) == 0, "raw connect");
	tw__auth_nonce(nonce);
	tw__rpc_req_handshake(&req, 7, TAILWIND__ROLE__ROLE_PRIMARY, NULL);
	req.env.request_id = 1;
	req.body.handshake.auth_nonce.data = nonce;
	req.body.handshake.auth_nonce.len = sizeof(nonce);
	TAP_REQUIRE(tw__rpc_encode(&req.env, hello, sizeof(hello), sizeof(hello), &hello_len) == 0,
		    "encode");
	rc = raw_call(&r, hello, hello_len, &env);
	TAP_REQUIRE(rc == 0 && env->body_case == TAILWIND__ENVELOPE__BODY_HANDSHAKE_REPLY &&
		    env->handshake_reply->auth_nonce.len == TW_AUTH_NONCE_LEN,
		    "challenge from the keyed twd (%s)", tw_strerror(rc));
	memset(&t, 0, sizeof(t));
	memcpy(t.client_nonce, nonce, sizeof(nonce));
	memcpy(t.server_nonce, env->handshake_reply->auth_nonce.data, TW_AUTH_NONCE_LEN);
	memcpy(first_sn, t.server_nonce, sizeof(first_sn));
	t.client_node_id = 7;
	t.client_role = TAILWIND__ROLE__ROLE_PRIMARY;
	t.server_node_id = env->handshake_reply->node_id;
	ok(tw__auth_verify(key, TW_AUTH_LABEL_SERVER, &t, env->handshake_reply->auth_mac.data,
			  env->handshake_reply->auth_mac.len), "the twd proves the key");
	tw__auth_mac(key, TW_AUTH_LABEL_CLIENT, &t, proof);
	tw__rpc_req_handshake(&req, 7, TAILWIND__ROLE__ROLE_PRIMARY, NULL);
	req.env.request_id = 2;
	req.body.handshake.auth_proof.data = proof;
	req.body.handshake.auth_proof.len = sizeof(proof);
	TAP_REQUIRE(tw__rpc_encode(&req.env, proof_frame, sizeof(proof_frame), sizeof(proof_frame),
				  &proof_len) == 0, "encode");
	rc = raw_call(&r, proof_frame, proof_len, &env);
	ok(rc == 0 && tw__rpc_reply_status(env, NULL) == TAILWIND__STATUS__STATUS_OK,
	   "the proof is accepted (%s)", tw_strerror(rc));
	ok(!raw_not_served(&r), "the authenticated connection is served");
	raw_close(&r);

	/* Replay the captured proof alone on a new connection. */
	TAP_REQUIRE(raw_open(&r, addr_k) == 0, "raw connect");
	rc = raw_call(&r, proof_frame, proof_len, &env);
	ok(rc == 0 && tw__rpc_reply_status(env, NULL) == TAILWIND__STATUS__STATUS_UNAUTHENTICATED,
	   "a replayed proof on a new connection is refused: UNAUTHENTICATED (%s)",
	   tw_strerror(rc));
	ok(raw_not_served(&r), "and that connection is not served any more");
	raw_close(&r);

	/* Replay the whole client side (hello, then proof): the twd's nonce is fresh. */
	TAP_REQUIRE(raw_open(&r, addr_k) == 0, "raw connect");
	rc = raw_call(&r, hello, hello_len, &env);
	ok(rc == 0 && env->body_case == TAILWIND__ENVELOPE__BODY_HANDSHAKE_REPLY &&
	   env->handshake_reply->auth_nonce.len == TW_AUTH_NONCE_LEN &&
	   memcmp(env->handshake_reply->auth_nonce.data, first_sn, TW_AUTH_NONCE_LEN) != 0,
	   "a replayed hello gets a fresh challenge");
	rc = raw_call(&r, proof_frame, proof_len, &env);
	ok(rc == 0 && tw__rpc_reply_status(env, NULL) == TAILWIND__STATUS__STATUS_UNAUTHENTICATED,
	   "the replayed proof does not answer it: UNAUTHENTICATED (%s)", tw_strerror(rc));
	ok(raw_not_served(&r), "and that connection is not served any more");
	raw_close(&r);
	good_client("after the replays");

	/* Garbage: not a frame, then a frame of junk. */
	TAP_REQUIRE(raw_open(&r, addr_k) == 0, "raw connect");
	{
		unsigned char junk[300];

		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (unsigned char)(i * 131 + 7);
		(void)raw_call(&r, junk, sizeof(junk), &env);
		ok(raw_not_served(&r), "a garbage client is not served");
	}
	raw_close(&r);
	good_client("after the garbage client");
	tw__auth_key_free(key);
}

/* Run a tool; exit status, first stdout line starting with `prefix` into line. */
static int run_tool(char *const argv[], char *const env[], const char *prefix, char *line,
		    size_t len)
{
	struct proc *p = proc_spawn(argv, env);
	int st;

	if (!p)
		return -1;
	line[0] = '\0';
	if (prefix)
		(void)proc_wait_line(p, prefix, line, len, 120000);
	st = proc_wait(p, 180000);
	proc_free(p);
	return st;
}

static uint64_t stat_counter(const char *name)
{
	struct twc c;
	struct tw_rpc_req req;
	struct tw_rpc_reply rep;
	char why[256], pat[64];
	uint64_t v = UINT64_MAX;
	const char *s;

	if (try_handshake(&c, addr_k, key1, why, sizeof(why)) == 0) {
		tw__rpc_req_stats(&req);
		if (tw__rpc_call_sync(c.rpc, &req.env, &rep) == 0 && rep.env->stats_reply->message) {
			snprintf(pat, sizeof(pat), "%s=", name);
			s = strstr(rep.env->stats_reply->message, pat);
			if (s)
				v = strtoull(s + strlen(pat), NULL, 10);
		}
		tw__rpc_reply_release(&rep);
	}
	twc_close(&c);
	return v;
}

int main(int argc, char **argv)
{
	unsigned char k[32];
	struct proc *tk, *tn;
	struct twc c;
	char why[512], line[4096], ctl[1024], bench[1024];
	uint64_t failures;
	int rc;

	prov = argc > 1 ? argv[1] : "tcp";
	child_tool("tools/twd", twd_exe, sizeof(twd_exe));
	child_tool("tools/twctl", ctl, sizeof(ctl));
	child_tool("tools/twbench", bench, sizeof(bench));
	tmpdir_make(dir, sizeof(dir), NULL, "tw_auth_e2e");
	tap_plan(31);
	snprintf(key1, sizeof(key1), "%s/key1", dir);
	snprintf(key2, sizeof(key2), "%s/key2", dir);
	snprintf(key_open, sizeof(key_open), "%s/key_open", dir);
	tw__auth_nonce(k);
	write_file(key1, k, sizeof(k), 0600);
	tw__auth_nonce(k);
	write_file(key2, k, sizeof(k), 0600);
	write_file(key_open, k, sizeof(k), 0644);

	{
		char d[300];
		char *a[] = { twd_exe, (char *)"-p", (char *)prov, (char *)"-d", d,
			      (char *)"--key-file", key_open, NULL };

		snprintf(d, sizeof(d), "%s/never", dir);
		is_int(run_tool(a, NULL, NULL, line, sizeof(line)), 2,
		       "twd refuses a world-readable key file (exit 2)");
	}
	tk = start_twd("k", key1, addr_k, sizeof(addr_k));
	tn = start_twd("n", NULL, addr_nok, sizeof(addr_nok));

	good_client("first");

	rc = try_handshake(&c, addr_k, NULL, why, sizeof(why));
	ok(rc == -EACCES && strstr(why, "backup requires authentication: give --key-file"),
	   "no key: refused (%s: %s)", tw_strerror(rc), why);
	twc_close(&c);

	rc = try_handshake(&c, addr_k, key2, why, sizeof(why));
	ok(rc == -EACCES && strstr(why, "backup did not prove the key"),
	   "wrong key: refused (%s: %s)", tw_strerror(rc), why);
	twc_close(&c);

	rc = try_handshake(&c, addr_nok, key1, why, sizeof(why));
	ok(rc == -EACCES && strstr(why, "backup did not prove the key: it has no key"),
	   "key only on the client: refused (%s: %s)", tw_strerror(rc), why);
	twc_close(&c);

	{
		struct twc_info info[4];

		rc = twc_connect(&c, prov, addr_k);
		if (rc == 0)
			rc = twc_list(&c, 0, true, info, 4);
		ok(rc == -EACCES && strstr(tw__rpc_client_errmsg(c.rpc), "requires authentication"),
		   "a request before the handshake: refused (%s: %s)", tw_strerror(rc),
		   c.rpc ? tw__rpc_client_errmsg(c.rpc) : "");
		rc = twc_list(&c, 0, true, info, 4);
		ok(rc < 0, "and the connection is not served any more (%s)", tw_strerror(rc));
		twc_close(&c);
	}
	good_client("after the refusals");

	replay_tests();

	failures = stat_counter("auth_failures");
	ok(failures != UINT64_MAX && failures >= 5,
	   "the twd counted the refusals: auth_failures=%llu (>= 5)",
	   (unsigned long long)failures);

	/* twctl */
	{
		char *a[] = { ctl, (char *)"-p", (char *)prov, (char *)"-b", addr_k,
			      (char *)"--key-file", key1, (char *)"stat", NULL };
		char *b[] = { ctl, (char *)"-p", (char *)prov, (char *)"-b", addr_k, (char *)"stat",
			      NULL };
		char envk[400];
		char *env[] = { envk, NULL };

		snprintf(envk, sizeof(envk), "TW_KEY_FILE=%s", key1);
		is_int(run_tool(a, NULL, NULL, line, sizeof(line)), 0, "twctl --key-file stat: 0");
		is_int(run_tool(b, env, NULL, line, sizeof(line)), 0, "twctl with TW_KEY_FILE: 0");
		is_int(run_tool(b, NULL, NULL, line, sizeof(line)), 1, "twctl without a key: 1");
	}
	/* twbench: primary over the keyed twd (and its stats connection), then local twd's. */
	{
		char *a[] = { bench, (char *)"--provider", (char *)prov, (char *)"--backups", addr_k,
			      (char *)"-r", (char *)"1", (char *)"--count", (char *)"2000",
			      (char *)"--segment-size", (char *)"1048576", (char *)"--latency-count",
			      (char *)"100", (char *)"--json", (char *)"--no-progress",
			      (char *)"--key-file", key1, NULL };

		is_int(run_tool(a, NULL, "{", line, sizeof(line)), 0,
		       "twbench --backups (keyed twd) --key-file: 0");
		ok(strstr(line, "\"objects_per_s\""), "and it reported a result");
		a[15] = NULL;
		ok(run_tool(a, NULL, NULL, line, sizeof(line)) != 0,
		   "twbench without the key fails");
		a[3] = (char *)"--buffers";
		a[4] = (char *)"4";
		a[15] = (char *)"--key-file";
		is_int(run_tool(a, NULL, "{", line, sizeof(line)), 0,
		       "twbench with local twd's and --key-file: 0");
	}
	good_client("at the end");
	ok(proc_alive(tk) && proc_alive(tn), "both twd's are still running");
	proc_kill(tk, SIGTERM);
	proc_kill(tn, SIGTERM);
	is_int(proc_wait(tk, 30000), 0, "keyed twd exits 0 at SIGTERM");
	is_int(proc_wait(tn, 30000), 0, "twd without a key exits 0 at SIGTERM");
	proc_free(tk);
	proc_free(tn);
	tmpdir_remove(dir);
	return tap_exit();
}
