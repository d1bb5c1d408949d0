/*
 * proto/auth.h — peer authentication: the cluster key file, and the mutual challenge-response
 * carried by the Handshake RPC (docs/wire-protocol.md, "Authentication").
 *
 * Every peer of a cluster (primaries, backups, twctl, recovery) holds the same secret, read from
 * a key file. A connection is authenticated by two MACs over one transcript (both fresh 32-byte
 * nonces, the client's node id and role, the server's node id):
 *   server proves the key:  MAC(key, "tw-server" || transcript)
 *   client proves the key:  MAC(key, "tw-client" || transcript)
 * MAC = HMAC-SHA-256 (libsodium's crypto_auth_hmacsha256, keyed with the key file's bytes);
 * nonces come from randombytes_buf; MACs are compared with sodium_memcmp (constant time).
 * The server's nonce is fresh per connection, so a recorded proof never verifies again.
 *
 * The crypto here is libsodium's; this file only frames the transcript.
 */
#ifndef TW_PROTO_AUTH_H
#define TW_PROTO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rpc.h"

#define TW_AUTH_NONCE_LEN 32u
#define TW_AUTH_MAC_LEN 32u   /* crypto_auth_hmacsha256_BYTES */
#define TW_AUTH_KEY_MIN 32u   /* bytes in a key file, at least */
#define TW_AUTH_KEY_MAX 4096u /* and at most */
#define TW_AUTH_ENV "TW_KEY_FILE"

struct tw_auth_key; /* opaque: the key bytes (wiped when freed) */

/*
 * The key file to use: `configured` when not NULL (an empty string means "no key"), else
 * $TW_KEY_FILE when set and not empty, else NULL (no authentication). Borrowed pointers.
 */
const char *tw__auth_key_path(const char *configured);

/*
 * Read a key file: a regular file of TW_AUTH_KEY_MIN..TW_AUTH_KEY_MAX bytes, used verbatim as
 * the HMAC key (make one with `head -c 32 /dev/urandom > KEY && chmod 600 KEY`). Refused when
 * group or others may read or write it. Returns 0 and *out (free with tw__auth_key_free), or
 * -ENOENT/-EACCES/... (cannot open), -EPERM (permissions too open), -EINVAL (size, not a
 * regular file), -ENOMEM, with a one-line reason naming the file in `err`.
 */
int tw__auth_key_load(const char *path, struct tw_auth_key **out, char *err, size_t err_len);

/* Same from memory (tests). */
int tw__auth_key_from_bytes(const void *bytes, size_t len, struct tw_auth_key **out);

/* Wipe and free; NULL is fine. */
void tw__auth_key_free(struct tw_auth_key *key);

/* Fresh random bytes for a nonce (libsodium's CSPRNG). */
void tw__auth_nonce(unsigned char out[TW_AUTH_NONCE_LEN]);

/* HMAC-SHA-256 of `len` bytes with the key. */
void tw__auth_hmac(const struct tw_auth_key *key, const void *data, size_t len,
		  unsigned char out[TW_AUTH_MAC_LEN]);

/* What both MACs cover. */
struct tw_auth_transcript {
	unsigned char client_nonce[TW_AUTH_NONCE_LEN];
	unsigned char server_nonce[TW_AUTH_NONCE_LEN];
	uint64_t client_node_id;
	uint32_t client_role; /* Tailwind__Role */
	uint64_t server_node_id;
};

#define TW_AUTH_LABEL_SERVER "tw-server"
#define TW_AUTH_LABEL_CLIENT "tw-client"

/* MAC(key, label || client_nonce || server_nonce || client_node_id (u64 LE) ||
 *     client_role (u32 LE) || server_node_id (u64 LE)). */
void tw__auth_mac(const struct tw_auth_key *key, const char *label,
		 const struct tw_auth_transcript *t, unsigned char out[TW_AUTH_MAC_LEN]);

/* True when `mac` (`len` bytes, from the network) is the MAC of the transcript; constant time. */
bool tw__auth_verify(const struct tw_auth_key *key, const char *label,
		    const struct tw_auth_transcript *t, const void *mac, size_t len);

/*
 * Client side of the Handshake RPC on `cl` (blocking, tw__rpc_call_sync). Without a key: one
 * plain Handshake. With a key: Handshake with a fresh nonce, check the server's MAC, send the
 * proof, wait for its OK. Returns 0 with `rep` holding the server's (first) HandshakeReply, or
 * a negative code with a one-line reason in `err`:
 *   -EACCES  authentication failed: the backup requires a key we do not have ("backup requires
 *            authentication: give --key-file"), did not prove the key ("backup did not prove
 *            the key: ..."), or refused our proof;
 *   other    the call failed (timeout, lost connection, version).
 * `rep` is initialised here; call tw__rpc_reply_release(rep) whatever the result.
 */
int tw__auth_client_handshake(struct tw_rpc_client *cl, const struct tw_auth_key *key,
			     uint64_t node_id, Tailwind__Role role, const char *node_name,
			     struct tw_rpc_reply *rep, char *err, size_t err_len);

#endif /* TW_PROTO_AUTH_H */
