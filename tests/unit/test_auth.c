/*
 * tests/unit/test_auth.c — proto/auth.c: HMAC-SHA-256 against RFC 4231, the transcript MAC
 * (labels, nonces and ids all matter), verification of bad MACs, and key file checks
 * (permissions, size, missing file) with their messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/auth.h"
#include "tap.h"
#include "tmpdir.h"

static char dir[256];

static void put(const char *name, const void *buf, size_t len, mode_t mode, char *path, size_t pl)
{
	int fd;

	snprintf(path, pl, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	TAP_REQUIRE(fd >= 0 && write(fd, buf, len) == (ssize_t)len, "write %s", path);
	close(fd);
	TAP_REQUIRE(chmod(path, mode) == 0, "chmod");
}

int main(void)
{
	/* RFC 4231 test case 6: 131-byte key 0xaa, "Test Using Larger Than Block-Size Key - Hash
	 * Key First". */
	static const unsigned char want6[32] = {
		0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f, 0x0d, 0x8a, 0x26, 0xaa, 0xcb, 0xf5,
		0xb7, 0x7f, 0x8e, 0x0b, 0xc6, 0x21, 0x37, 0x28, 0xc5, 0x14, 0x05, 0x46, 0x04, 0x0f,
		0x0e, 0xe3, 0x7f, 0x54 };
	const char *data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	unsigned char kb[131], mac[32], mac2[32], big[TW_AUTH_KEY_MAX + 1];
	struct tw_auth_key *k, *k2, *kf;
	struct tw_auth_transcript t, t2;
	char path[300], err[512];
	int rc;

	tap_plan(17);
	memset(kb, 0xaa, sizeof(kb));
	TAP_REQUIRE(tw__auth_key_from_bytes(kb, sizeof(kb), &k) == 0, "key");
	tw__auth_hmac(k, data6, strlen(data6), mac);
	ok(memcmp(mac, want6, 32) == 0, "HMAC-SHA-256 matches RFC 4231 test case 6");

	memset(&t, 0, sizeof(t));
	tw__auth_nonce(t.client_nonce);
	tw__auth_nonce(t.server_nonce);
	ok(memcmp(t.client_nonce, t.server_nonce, TW_AUTH_NONCE_LEN) != 0, "two nonces differ");
	t.client_node_id = 5;
	t.client_role = 1;
	t.server_node_id = 9;
	tw__auth_mac(k, TW_AUTH_LABEL_SERVER, &t, mac);
	ok(tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t, mac, 32), "a MAC verifies");
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_CLIENT, &t, mac, 32),
	   "the server's MAC is not a client proof (labels differ)");
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t, mac, 31), "a short MAC is refused");
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t, NULL, 0), "no MAC is refused");
	t2 = t;
	t2.server_nonce[0] ^= 1;
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t2, mac, 32), "another server nonce: refused");
	t2 = t;
	t2.client_node_id = 6;
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t2, mac, 32), "another node id: refused");
	t2 = t;
	t2.client_role = 3;
	ok(!tw__auth_verify(k, TW_AUTH_LABEL_SERVER, &t2, mac, 32), "another role: refused");
	kb[0] ^= 1;
	TAP_REQUIRE(tw__auth_key_from_bytes(kb, sizeof(kb), &k2) == 0, "key2");
	ok(!tw__auth_verify(k2, TW_AUTH_LABEL_SERVER, &t, mac, 32), "another key: refused");
	tw__auth_mac(k, TW_AUTH_LABEL_SERVER, &t, mac2);
	ok(memcmp(mac, mac2, 32) == 0, "the MAC is deterministic");

	tmpdir_make(dir, sizeof(dir), NULL, "tw_test_auth");
	put("good", kb, 32, 0600, path, sizeof(path));
	rc = tw__auth_key_load(path, &kf, err, sizeof(err));
	ok(rc == 0, "a 32-byte key file of mode 0600 loads (%s)", rc ? err : "");
	if (rc == 0) {
		struct tw_auth_key *kc;

		TAP_REQUIRE(tw__auth_key_from_bytes(kb, 32, &kc) == 0, "kc");
		tw__auth_mac(kf, "x", &t, mac);
		ok(tw__auth_verify(kc, "x", &t, mac, 32), "the file's bytes are the key");
		tw__auth_key_free(kc);
		tw__auth_key_free(kf);
	} else {
		tap_skip(1, "no key");
	}
	unlink(path);
	put("open", kb, 32, 0640, path, sizeof(path));
	rc = tw__auth_key_load(path, &kf, err, sizeof(err));
	ok(rc == -EPERM && strstr(err, "chmod 600"), "a group-readable key file is refused: %s",
	   err);
	unlink(path);
	put("short", kb, 16, 0600, path, sizeof(path));
	rc = tw__auth_key_load(path, &kf, err, sizeof(err));
	ok(rc == -EINVAL && strstr(err, "head -c 32 /dev/urandom"),
	   "a 16-byte key file is refused: %s", err);
	unlink(path);
	memset(big, 1, sizeof(big));
	put("big", big, sizeof(big), 0600, path, sizeof(path));
	rc = tw__auth_key_load(path, &kf, err, sizeof(err));
	ok(rc == -EINVAL, "a key file over %u bytes is refused: %s", TW_AUTH_KEY_MAX, err);
	unlink(path);
	rc = tw__auth_key_load(path, &kf, err, sizeof(err));
	ok(rc == -ENOENT && strstr(err, path), "a missing key file: %s", err);
	tmpdir_remove(dir);
	tw__auth_key_free(k);
	tw__auth_key_free(k2);
	return tap_exit();
}
