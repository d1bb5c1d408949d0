/*
 * tests/unit/test_coord.c — the coordinator's pure parts (coord/coord.c): URL parsing (good and
 * bad URLs, with their messages), the registration node's encoding (round trip, malformed nodes
 * each refused with a message naming the line), node names, and the replica order (zones
 * interleaved so that the first r of any rotation span r zones); the static backend's answers
 * to the phase-2 calls (no owners to wait for, no record, no log list, no registry changes) and
 * tw_primary_standby's refusals without a zk:// coordinator.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/standby.h>

#include "coord/coord.h"
#include "tap.h"

static void url_ok(const char *url, enum tw__coord_kind kind, const char *hosts, const char *root)
{
	struct tw_coord_url u;
	char err[512] = "";
	int rc = tw__coord_url_parse(url, &u, err, sizeof(err));

	is_int(rc, 0, "url \"%s\" parses%s%s", url, err[0] ? ": " : "", err);
	is_int(u.kind, kind, "url \"%s\": kind", url);
	ok(!strcmp(u.hosts, hosts), "url \"%s\": hosts \"%s\" (want \"%s\")", url, u.hosts, hosts);
	ok(!strcmp(u.chroot, root), "url \"%s\": chroot \"%s\" (want \"%s\")", url, u.chroot, root);
}

static void url_bad(const char *url, const char *says)
{
	struct tw_coord_url u;
	char err[512] = "";
	int rc = tw__coord_url_parse(url, &u, err, sizeof(err));

	is_int(rc, -EINVAL, "url \"%s\" refused", url);
	ok(strstr(err, says) && strstr(err, "expected zk://"), "url \"%s\": message \"%s\" says "
	   "\"%s\" and the expected form", url, err, says);
}

static void urls(void)
{
	url_ok("zk://127.0.0.1:2181", TW_COORD_ZK, "127.0.0.1:2181", "/tailwind");
	url_ok("zk://127.0.0.1:2181/", TW_COORD_ZK, "127.0.0.1:2181", "/tailwind");
	url_ok("zk://a:1,b.example.org:2181,[::1]:3/x/y_z-1.0", TW_COORD_ZK,
	       "a:1,b.example.org:2181,[::1]:3", "/x/y_z-1.0");
	url_ok("zk://zk1:65535/t/", TW_COORD_ZK, "zk1:65535", "/t");
	url_ok("static:h:1,h:2", TW_COORD_STATIC, "h:1,h:2", "");
	url_ok("", TW_COORD_STATIC, "", "");
	url_bad("http://x:1", "unknown scheme");
	url_bad("zk://", "no host:port");
	url_bad("zk:///t", "no host:port");
	url_bad("zk://host/t", "HOST:PORT");
	url_bad("zk://host:0", "port 1..65535");
	url_bad("zk://host:65536", "port 1..65535");
	url_bad("zk://host:12x", "HOST:PORT");
	url_bad("zk://a:1,", "empty server");
	url_bad("zk://a:1,,b:2", "HOST:PORT");
	url_bad("zk://a:1//t", "empty chroot component");
	url_bad("zk://a:1/t/../u", "may not be . or ..");
	url_bad("zk://a:1/t u", "may hold only");
	url_bad("zk://ho st:1", "HOST:PORT");
}

static struct tw_coord_backup mk(const char *addr, const char *zone, uint32_t fr)
{
	struct tw_coord_backup b;

	memset(&b, 0, sizeof(b));
	snprintf(b.addr, sizeof(b.addr), "%s", addr);
	snprintf(b.provider, sizeof(b.provider), "tcp");
	snprintf(b.zone, sizeof(b.zone), "%s", zone);
	b.buffers = 64;
	b.free_buffers = fr;
	b.buffer_size = 8u << 20;
	return b;
}

static void dec_bad(const char *node, const char *says)
{
	struct tw_coord_backup o;
	char err[256] = "";
	int rc = tw__coord_backup_decode(node, strlen(node), &o, err, sizeof(err));

	is_int(rc, -EINVAL, "malformed node refused (%s)", says);
	ok(strstr(err, says) != NULL, "message \"%s\" says \"%s\"", err, says);
}

static void encoding(void)
{
	struct tw_coord_backup b = mk("127.0.0.1:40001", "rack-1", 17), o;
	char buf[1024], err[256] = "";
	int n = tw__coord_backup_encode(&b, buf, sizeof(buf));

	ok(n > 0, "encode: %d bytes", n);
	is_int(tw__coord_backup_decode(buf, (size_t)n, &o, err, sizeof(err)), 0, "decode: %s", err);
	ok(!strcmp(o.addr, b.addr) && !strcmp(o.provider, "tcp") && !strcmp(o.zone, "rack-1") &&
	   o.buffers == 64 && o.free_buffers == 17 && o.buffer_size == (8u << 20),
	   "round trip keeps every field");
	/* shm addresses hold '/' and ':' */
	b = mk("fi_shm://1234:0:7", "", 3);
	n = tw__coord_backup_encode(&b, buf, sizeof(buf));
	ok(n > 0 && tw__coord_backup_decode(buf, (size_t)n, &o, err, sizeof(err)) == 0 &&
	   !strcmp(o.addr, "fi_shm://1234:0:7") && o.zone[0] == '\0', "shm address, no zone");
	is_int(tw__coord_backup_encode(&b, buf, 20), -ENOSPC, "encode into a short buffer: ENOSPC");
	b = mk("a\nfree=1", "", 1);
	is_int(tw__coord_backup_encode(&b, buf, sizeof(buf)), -EINVAL, "a newline in a field: EINVAL");
	b = mk("x:1", "z=1", 1);
	is_int(tw__coord_backup_encode(&b, buf, sizeof(buf)), -EINVAL, "'=' in the zone: EINVAL");
	/* Unknown keys are ignored (a newer twd), unknown version is not. */
	ok(tw__coord_backup_decode("tailwind-backup 1\naddr=x:1\nprovider=tcp\nfree=2\nnew=3\n", 53,
				  &o, err, sizeof(err)) == 0 && o.free_buffers == 2,
	   "an unknown key is ignored");
	dec_bad("tailwind-backup 2\naddr=x:1\nprovider=tcp\nfree=1\n", "does not start with");
	dec_bad("hello", "does not start with");
	dec_bad("tailwind-backup 1\naddr=x:1\nprovider=tcp\n", "no free");
	dec_bad("tailwind-backup 1\nprovider=tcp\nfree=1\n", "no addr");
	dec_bad("tailwind-backup 1\naddr=x:1\nfree=1\n", "no provider");
	dec_bad("tailwind-backup 1\naddr=x:1\nprovider=tcp\nfree=-1\n", "line 4: value is not a number");
	dec_bad("tailwind-backup 1\naddr=x:1\nprovider=tcp\nfree=4294967296\n", "not a number in range");
	dec_bad("tailwind-backup 1\naddr x:1\n", "line 2: not key=value");
	{
		char big[400];

		snprintf(big, sizeof(big), "tailwind-backup 1\nzone=%0200d\n", 0);
		dec_bad(big, "zone too long");
	}
	ok(tw__coord_backup_decode(NULL, 0, &o, err, sizeof(err)) == -EINVAL, "empty node refused");
}

static void names(void)
{
	struct tw_coord_backup a = mk("127.0.0.1:1", "", 0), b = mk("127.0.0.1:2", "", 0);
	char na[64], nb[64], na2[64];

	tw__coord_backup_node_name(&a, na, sizeof(na));
	tw__coord_backup_node_name(&b, nb, sizeof(nb));
	a.free_buffers = 9;
	snprintf(a.zone, sizeof(a.zone), "z");
	tw__coord_backup_node_name(&a, na2, sizeof(na2));
	ok(strlen(na) == 18 && !strncmp(na, "b-", 2), "node name b-<16 hex>: %s", na);
	ok(strcmp(na, nb) != 0, "different addresses, different names");
	ok(!strcmp(na, na2), "the name depends on provider and address only");
}

static void order(void)
{
	/* 5 backups in 3 zones (as the integration test): A A B B C. */
	struct tw_coord_backup v[6] = {
		mk("h:1", "A", 10), mk("h:2", "A", 12), mk("h:3", "B", 5),
		mk("h:4", "B", 7), mk("h:5", "C", 30),
	};
	size_t n = 5;

	tw__coord_backup_sort(v, n);
	ok(!strcmp(v[0].addr, "h:5") && !strcmp(v[1].addr, "h:2") && !strcmp(v[2].addr, "h:4") &&
	   !strcmp(v[3].addr, "h:1") && !strcmp(v[4].addr, "h:3"),
	   "zones interleaved, most free zone (C, 30) first, most free inside a zone first: "
	   "%s %s %s %s %s", v[0].addr, v[1].addr, v[2].addr, v[3].addr, v[4].addr);
	/* Every window of 3 consecutive entries (with rotation) from the first 3 spans 3 zones. */
	ok(strcmp(v[0].zone, v[1].zone) && strcmp(v[1].zone, v[2].zone) &&
	   strcmp(v[0].zone, v[2].zone), "the first three are in three zones");
	v[0] = mk("h:9", "", 1);
	tw__coord_backup_sort(v, 1);
	ok(!strcmp(v[0].addr, "h:9"), "one entry: unchanged");
}

static void static_phase2(void)
{
	struct tw_coord *c = NULL;
	struct tw_coord_backup b, *v = NULL;
	uint64_t *ids = NULL, gone = 1;
	size_t n = 9;
	bool waited = true;
	char err[256];

	TAP_REQUIRE(tw__coord_open("static:h1:1,h2:2", 0, &c, err, sizeof(err)) == 0, "static");
	is_int(tw__coord_wait_owner_gone(c, 7, 1000, NULL, NULL, &waited, &gone), 0,
	       "static: no owner to wait for (returns at once)");
	ok(!waited && gone == 0, "static: nothing was awaited");
	memset(&b, 0, sizeof(b));
	snprintf(b.addr, sizeof(b.addr), "h1:1");
	snprintf(b.provider, sizeof(b.provider), "tcp");
	is_int(tw__coord_log_add_backup(c, 7, &b), 0, "static: recording a backup is a no-op");
	is_int(tw__coord_log_backups(c, 7, &v, &n), -ENOTSUP, "static: no record (%s)",
	       tw__coord_errmsg(c));
	ok(!v && n == 0, "static: an empty answer");
	is_int(tw__coord_list_logs(c, &ids, &n), -ENOTSUP, "static: no log list");
	is_int(tw__coord_watch_backups(c, &v, &n), 0, "static: the list through the watch call");
	is_int(n, 2, "static: its two addresses");
	free(v);
	ok(!tw__coord_backups_changed(c) && !tw__coord_wait_backups_changed(c, 10),
	   "static: the list never changes");
	tw__coord_close(c);
}

static void standby_refusals(void)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_standby_result st;
	struct tw_primary *p = NULL;
	char err[512] = "";

	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	cfg.log_id = 1;
	is_int(tw_primary_standby(&tc, &cfg, NULL, &st, &p, err, sizeof(err)), -EINVAL,
	       "standby without a coordinator: -EINVAL");
	ok(strstr(err, "needs a coordinator") != NULL, "... saying so (%s)", err);
	tc.coordinator = "static:127.0.0.1:1";
	is_int(tw_primary_standby(&tc, &cfg, NULL, &st, &p, err, sizeof(err)), -EINVAL,
	       "standby with a static coordinator: -EINVAL");
	ok(strstr(err, "needs a zk:// coordinator") != NULL && !p, "... saying so (%s)", err);
}

int main(void)
{
	static_phase2();
	standby_refusals();
	urls();
	encoding();
	names();
	order();
	tap_done_testing();
	return tap_exit();
}
