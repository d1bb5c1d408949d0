/*
 * proto/auth.c — cluster key file and the Handshake challenge-response (see auth.h).
 * All cryptography is libsodium's (HMAC-SHA-256, CSPRNG, constant-time compare).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "core/util.h"
#include "proto/auth.h"

struct tw_auth_key {
	size_t len;
	unsigned char bytes[];
};

static int sodium_ready(void)
{
	/* Thread-safe and idempotent (libsodium >= 1.0.11): 0 first time, 1 afterwards. */
	return sodium_init() < 0 ? -ENOSYS : 0;
}

const char *tw__auth_key_path(const char *configured)
{
	const char *env;

	if (configured)
		return configured[0] ? configured : NULL;
	env = tw__env_get(TW__ENV_KEY_FILE);
	return env;
}

int tw__auth_key_from_bytes(const void *bytes, size_t len, struct tw_auth_key **out)
{
	struct tw_auth_key *k;

	if (len < TW_AUTH_KEY_MIN || len > TW_AUTH_KEY_MAX)
		return -EINVAL;
	if (sodium_ready() < 0)
		return -ENOSYS;
	k = malloc(sizeof(*k) + len);
	if (!k)
		return -ENOMEM;
	k->len = len;
	memcpy(k->bytes, bytes, len);
	*out = k;
	return 0;
}

int tw__auth_key_load(const char *path, struct tw_auth_key **out, char *err, size_t err_len)
{
	unsigned char buf[TW_AUTH_KEY_MAX + 1];
	struct stat st;
	size_t n = 0;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot open key file %s: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot stat key file %s: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, err_len, "key file %s is not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		snprintf(err, err_len, "key file %s is accessible by group or others (mode %04o): "
			 "run chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
		close(fd);
		return -EPERM;
	}
	while (n < sizeof(buf)) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			snprintf(err, err_len, "cannot read key file %s: %s", path, strerror(-rc));
			close(fd);
			sodium_memzero(buf, sizeof(buf));
			return rc;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n < TW_AUTH_KEY_MIN || n > TW_AUTH_KEY_MAX) {
		snprintf(err, err_len, "key file %s has %s%zu bytes; it must hold %u to %u random "
			 "bytes (make one with: head -c 32 /dev/urandom > %s)", path,
			 n > TW_AUTH_KEY_MAX ? "more than " : "", n > TW_AUTH_KEY_MAX ?
			 (size_t)TW_AUTH_KEY_MAX : n, TW_AUTH_KEY_MIN, TW_AUTH_KEY_MAX, path);
		sodium_memzero(buf, sizeof(buf));
		return -EINVAL;
	}
	rc = tw__auth_key_from_bytes(buf, n, out);
	sodium_memzero(buf, sizeof(buf));
	if (rc == -ENOSYS)
		snprintf(err, err_len, "libsodium failed to initialise");
	else if (rc)
		snprintf(err, err_len, "key file %s: %s", path, strerror(-rc));
	return rc;
}

void tw__auth_key_free(struct tw_auth_key *key)
{
	if (!key)
		return;
	sodium_memzero(key->bytes, key->len);
	free(key);
}

void tw__auth_nonce(unsigned char out[TW_AUTH_NONCE_LEN])
{
	(void)sodium_ready();
	randombytes_buf(out, TW_AUTH_NONCE_LEN);
}

void tw__auth_hmac(const struct tw_auth_key *key, const void *data, size_t len,
		  unsigned char out[TW_AUTH_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key->bytes, key->len);
	crypto_auth_hmacsha256_update(&st, data, len);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

static void put_le(unsigned char *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

void tw__auth_mac(const struct tw_auth_key *key, const char *label,
		 const struct tw_auth_transcript *t, unsigned char out[TW_AUTH_MAC_LEN])
{
	unsigned char msg[16 + 2 * TW_AUTH_NONCE_LEN + 8 + 4 + 8];
	size_t l = strlen(label), n = 0;

	if (l > 16)
		l = 16;
	memcpy(msg, label, l);
	n = l;
	memcpy(msg + n, t->client_nonce, TW_AUTH_NONCE_LEN);
	n += TW_AUTH_NONCE_LEN;
	memcpy(msg + n, t->server_nonce, TW_AUTH_NONCE_LEN);
	n += TW_AUTH_NONCE_LEN;
	put_le(msg + n, t->client_node_id, 8);
	n += 8;
	put_le(msg + n, t->client_role, 4);
	n += 4;
	put_le(msg + n, t->server_node_id, 8);
	n += 8;
	tw__auth_hmac(key, msg, n, out);
}

bool tw__auth_verify(const struct tw_auth_key *key, const char *label,
		    const struct tw_auth_transcript *t, const void *mac, size_t len)
{
	unsigned char want[TW_AUTH_MAC_LEN];
	bool good;

	if (!mac || len != TW_AUTH_MAC_LEN)
		return false;
	tw__auth_mac(key, label, t, want);
	good = sodium_memcmp(want, mac, TW_AUTH_MAC_LEN) == 0;
	sodium_memzero(want, sizeof(want));
	return good;
}

int tw__auth_client_handshake(struct tw_rpc_client *cl, const struct tw_auth_key *key,
			     uint64_t node_id, Tailwind__Role role, const char *node_name,
			     struct tw_rpc_reply *rep, char *err, size_t err_len)
{
	struct tw_auth_transcript t;
	unsigned char proof[TW_AUTH_MAC_LEN];
	const Tailwind__HandshakeReply *h;
	struct tw_rpc_reply rep2;
	struct tw_rpc_req req;
	int rc;

	memset(&t, 0, sizeof(t));
	tw__rpc_req_handshake(&req, node_id, role, node_name);
	if (key) {
		tw__auth_nonce(t.client_nonce);
		req.body.handshake.auth_nonce.data = t.client_nonce;
		req.body.handshake.auth_nonce.len = TW_AUTH_NONCE_LEN;
	}
	rc = tw__rpc_call_sync(cl, &req.env, rep);
	if (rc == -EACCES) {
		snprintf(err, err_len, "%s", tw__rpc_client_errmsg(cl)[0] ? tw__rpc_client_errmsg(cl) :
			 "backup requires authentication: give --key-file");
		return rc;
	}
	if (rc) {
		snprintf(err, err_len, "handshake failed: %s%s%s", tw_strerror(rc),
			 tw__rpc_client_errmsg(cl)[0] ? ": " : "", tw__rpc_client_errmsg(cl));
		return rc;
	}
	h = rep->env ? rep->env->handshake_reply : NULL;
	if (!h) {
		snprintf(err, err_len, "handshake: unexpected reply");
		return -TW_EMALFORMED;
	}
	if (!key)
		return 0;
	if (h->auth_nonce.len != TW_AUTH_NONCE_LEN || h->auth_mac.len != TW_AUTH_MAC_LEN) {
		snprintf(err, err_len, "backup did not prove the key: it has no key configured "
			 "(give it --key-file with the cluster key, or drop ours)");
		return -EACCES;
	}
	memcpy(t.server_nonce, h->auth_nonce.data, TW_AUTH_NONCE_LEN);
	t.client_node_id = node_id;
	t.client_role = (uint32_t)role;
	t.server_node_id = h->node_id;
	if (!tw__auth_verify(key, TW_AUTH_LABEL_SERVER, &t, h->auth_mac.data, h->auth_mac.len)) {
		snprintf(err, err_len, "backup did not prove the key: its MAC does not match ours "
			 "(different key files?)");
		return -EACCES;
	}
	tw__auth_mac(key, TW_AUTH_LABEL_CLIENT, &t, proof);
	tw__rpc_req_handshake(&req, node_id, role, node_name);
	req.body.handshake.auth_proof.data = proof;
	req.body.handshake.auth_proof.len = TW_AUTH_MAC_LEN;
	rc = tw__rpc_call_sync(cl, &req.env, &rep2);
	if (rc) {
		snprintf(err, err_len, "backup refused our key proof: %s%s%s", tw_strerror(rc),
			 tw__rpc_client_errmsg(cl)[0] ? ": " : "", tw__rpc_client_errmsg(cl));
		rc = rc == -EACCES || rc == -TW_EPEERLOST ? -EACCES : rc;
	}
	tw__rpc_reply_release(&rep2);
	sodium_memzero(proof, sizeof(proof));
	return rc;
}
