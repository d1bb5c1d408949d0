/*
 * tests/unit/test_kv.c — the pure parts of examples/kv (docs/kv.md):
 *   - YCSB's key names and scrambled Zipfian: the first key YCSB itself names
 *     ("user6284781860667377211"), 30-byte keys, the most and second most popular keys where
 *     YCSB puts them (FNV hash of Zipfian items 0 and 1) with the Zipfian's frequencies;
 *   - the hash index: many keys, updates in place, growth keeps every key;
 *   - the log record decoder: exact lengths, bounds, flags;
 *   - the cluster map: a map survives format and parse; bad maps are refused with the line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_cluster.h"
#include "kv_index.h"
#include "kv_wire.h"
#include "tap.h"
#include "ycsb.h"

static void test_keys(void)
{
	char k[64];

	is_int(ycsb_key(k, sizeof(k), 0, 23), 23, "key 0, 23 bytes");
	ok(!strcmp(k, "user6284781860667377211"), "key 0 is YCSB's first key: %s", k);
	is_int(ycsb_key(k, sizeof(k), 0, 30), 30, "key 0, 30 bytes");
	ok(!strcmp(k, "user00000006284781860667377211"), "zero padding as YCSB's zeropadding: %s", k);
	ok(ycsb_fnvhash64(0) == 6284781860667377211LL, "fnvhash64(0)");
}

static void test_zipf(void)
{
	enum { RECORDS = 1000, DRAWS = 1000000 };
	static unsigned count[RECORDS];
	struct ycsb_scrambled s;
	struct ycsb_rng r = { 42 };
	unsigned top = 0, second = 1, beyond = 0;
	/* Item 0 of a theta-0.99 Zipfian over 10^10 items has probability 1/zeta = 1/26.469;
	 * item 1 has 2^-0.99 of that; every key also gets ~1/1001 of the tail beyond the first
	 * thousand items (1 - zeta(1000)/zeta(10^10) of the mass). */
	double tail = (1 - ycsb_zeta(RECORDS, 0.99) / 26.46902820178302) / (RECORDS + 1);
	double p0 = 1 / 26.46902820178302 + tail, p1 = pow(2, -0.99) / 26.46902820178302 + tail;

	ycsb_scrambled_init(&s, 0, RECORDS);
	for (int i = 0; i < DRAWS; i++) {
		uint64_t k = ycsb_next_keynum(&s, &r, RECORDS);

		if (k >= RECORDS)
			beyond++;
		else
			count[k]++;
	}
	is_int(beyond, 0, "no key number beyond the records (drawn again as CoreWorkload does)");
	for (unsigned i = 0; i < RECORDS; i++) {
		if (count[i] > count[top]) {
			second = top;
			top = i;
		} else if (i != top && count[i] > count[second]) {
			second = i;
		}
	}
	is_int(top, ycsb_fnvhash64(0) % (RECORDS + 1), "the most popular key is FNV(item 0)");
	is_int(second, ycsb_fnvhash64(1) % (RECORDS + 1), "the second is FNV(item 1)");
	ok(fabs(count[top] / (double)DRAWS - p0) < 0.002, "its share %.4f, expected %.4f",
	   count[top] / (double)DRAWS, p0);
	ok(fabs(count[second] / (double)DRAWS - p1) < 0.002, "the second's %.4f, expected %.4f",
	   count[second] / (double)DRAWS, p1);
}

/* Records in one buffer, as in a log. */
static uint8_t *make_rec(uint8_t *p, const char *key, uint64_t version, uint32_t vlen)
{
	size_t klen = strlen(key);

	kv_rec_hdr_encode(p, version, (uint16_t)klen, vlen);
	memcpy(p + KV_REC_HDR_SIZE, key, klen);
	memset(p + KV_REC_HDR_SIZE + klen, 'v', vlen);
	return p + KV_REC_HDR_SIZE + klen + vlen;
}

static void test_index(void)
{
	enum { N = 20000 };
	uint8_t *buf = malloc((size_t)N * 2 * 64), *p = buf;
	struct kv_index ix;
	unsigned missing = 0, wrong = 0;

	TAP_REQUIRE(buf, "malloc");
	is_int(kv_index_init(&ix, 16), 0, "index with room for 16");
	for (int pass = 1; pass <= 2; pass++) {
		for (unsigned i = 0; i < N; i++) {
			char key[32];
			uint8_t *rec = p;
			struct kv_slot *s;

			snprintf(key, sizeof(key), "key-%u", i);
			p = make_rec(p, key, pass, 8);
			s = kv_index_slot(&ix, kv_hash(key, strlen(key)), (const uint8_t *)key,
					  (uint16_t)strlen(key));
			TAP_REQUIRE(s, "kv_index_slot");
			if ((pass == 1) != !s->rec)
				wrong++;
			s->rec = rec;
			s->len = (uint32_t)(p - rec);
			s->lsn = i;
		}
	}
	is_int(wrong, 0, "a new key gets an empty slot, a known one its own");
	is_int(ix.count, N, "%u keys after two passes", N);
	ok(ix.grows >= 8, "the index grew (%llu times)", (unsigned long long)ix.grows);
	for (unsigned i = 0; i < N; i++) {
		char key[32];
		struct kv_slot *s;

		snprintf(key, sizeof(key), "key-%u", i);
		s = kv_index_find(&ix, kv_hash(key, strlen(key)), key, (uint16_t)strlen(key));
		if (!s)
			missing++;
		else if (kv_slot_version(s) != 2 || s->lsn != i)
			wrong++;
	}
	is_int(missing, 0, "every key found after growing");
	is_int(wrong, 0, "each at its latest record");
	ok(!kv_index_find(&ix, kv_hash("nope", 4), "nope", 4), "an unknown key is not found");
	kv_index_free(&ix);
	free(buf);
}

static void test_record(void)
{
	uint8_t b[64];
	struct kv_rec r;

	make_rec(b, "k", 7, 3);
	ok(kv_rec_decode(b, 20, &r) && r.version == 7 && r.klen == 1 && r.vlen == 3 &&
	   r.key[0] == 'k' && r.value[0] == 'v', "a record decodes");
	ok(!kv_rec_decode(b, 19, &r), "one byte short: refused");
	ok(!kv_rec_decode(b, 21, &r), "one byte too many: refused");
	ok(!kv_rec_decode(b, 15, &r), "shorter than a header: refused");
	kv_rec_hdr_encode(b, 7, 0, 4);
	ok(!kv_rec_decode(b, 20, &r), "an empty key: refused");
	kv_rec_hdr_encode(b, 7, 1, 3);
	b[10] = 1;
	ok(!kv_rec_decode(b, 20, &r), "flags set: refused");
	kv_rec_hdr_encode(b, 7, 1, UINT32_MAX - 8);
	ok(!kv_rec_decode(b, 20, &r), "a value length that wraps: refused");
}

static void bad_map(const char *text, const char *want)
{
	struct kv_cluster c;
	char err[256] = "";
	int rc = kv_cluster_parse(text, strlen(text), &c, err, sizeof(err));

	ok(rc == -EINVAL && strstr(err, want), "refused, \"%s\": %s", want, err);
}

static void test_cluster(void)
{
	static const char text[] =
		"# three owners and a standby\n"
		"partitions 3\nreplicas 2\nlog-base 77\ncoordinator zk://127.0.0.1:2181/kv\n"
		"server 0 kv=127.0.0.1:7000 backup=127.0.0.1:7001 owns=0\n"
		"server 1 kv=127.0.0.1:7002 backup=fi_shm://42:0:1 owns=1,2\n"
		"server 2 kv=[::1]:7004 backup=127.0.0.1:7005 standby=0,1,2\n";
	struct kv_cluster c, d;
	char err[256], out[4096];
	int n;

	is_int(kv_cluster_parse(text, strlen(text), &c, err, sizeof(err)), 0, "a map parses");
	ok(c.partitions == 3 && c.replicas == 2 && c.log_base == 77 && c.nservers == 3 &&
	   c.servers[1].owns == 6 && c.servers[2].standby == 7 &&
	   !strcmp(c.servers[1].backup, "fi_shm://42:0:1") && !strcmp(c.servers[2].kv, "[::1]:7004"),
	   "its fields");
	is_int(kv_cluster_owner(&c, 2), 1, "partition 2's owner");
	n = kv_cluster_format(&c, out, sizeof(out));
	ok(n > 0 && kv_cluster_parse(out, (size_t)n, &d, err, sizeof(err)) == 0 &&
	   !memcmp(&c, &d, sizeof(c)), "format then parse gives the same map");
	bad_map("partitions 2\nserver 0 kv=a:1 backup=b:1 owns=0,1\n",
		"need 1 <= replicas < servers");
	bad_map("partitions 2\nreplicas 1\nserver 0 kv=a:1 backup=b:1 owns=0\n"
		"server 1 kv=a:2 backup=b:2\n", "partition 1 has 0 owners");
	bad_map("partitions 1\nreplicas 1\nserver 0 kv=a:1 backup=b:1 owns=0\n"
		"server 1 kv=a:2 backup=b:2 owns=0\n", "partition 0 has 2 owners");
	bad_map("partitions 1\nserver 1 kv=a:1 backup=b:1\n", "line 2: server 1 out of order");
	bad_map("partitions 1\nserver 0 kv=a:1\n", "line 2: server 0 needs kv= and backup=");
	bad_map("partitions 1\nserver 0 kv=a:1 backup=b:1 owns=0,x\n", "line 2: owns=0,x");
	bad_map("partitions 1\nreplicas 1\nserver 0 kv=a:1 backup=b:1 owns=0\n"
		"server 1 kv=a:2 backup=b:2 standby=3\n", "names a partition beyond 0");
	bad_map("partitions 1\nspeed 11\n", "line 2: unknown item \"speed\"");
	bad_map("partitions x\n", "line 1: partitions: expected a number");
	bad_map("partitions 1\nserver 0 kv=a:1 backup=b:1 colour=red\n",
		"unknown server field \"colour\"");
}

int main(void)
{
	test_keys();
	test_zipf();
	test_index();
	test_record();
	test_cluster();
	tap_done_testing();
	return tap_exit();
}
