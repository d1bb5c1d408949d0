/*
 * tests/unit/test_abi.c — the ABI rule at run time (tailwind/common.h, docs/api.md): a config
 * struct carries the size of the caller's struct, so that programs built against an older or
 * newer 1.x header work with this library. Checked through the public API only:
 *   - tw_*_config_init_sized writes no byte past the caller's size;
 *   - an open refuses a config that did not go through its init (size 0), and one from a
 *     "newer header" whose fields this library does not know are set; it takes one whose
 *     unknown fields are zero;
 *   - a statistics getter fills no byte past the caller's size: every one (backup, reader,
 *     context, the per-kind RPC counts), with an older caller's smaller struct and a canary
 *     after it; the fixed-size results (recovery, standby, reader entry, arena) keep the sizes
 *     1.0 recorded and the library writes exactly that much, zeroing the reserved tail;
 *   - tw_backup_open says why it failed (1.0: every open returns its detail).
 * The structural half (symbols, layout against abi/libtailwind.abi) is the meson test abi_check.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <tailwind/tailwind.h>

#include "tap.h"

#define CANARY 0xa5

/* A struct from a "newer header": the 1.0 struct followed by fields this library lacks. */
struct newer_ctx_config {
	struct tw_ctx_config v1;
	uint64_t unknown[2];
};

static int canary_intact(const unsigned char *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (p[i] != CANARY)
			return 0;
	return 1;
}

static void init_writes_no_more_than_size(void)
{
	unsigned char buf[sizeof(struct tw_primary_config) + 64];
	struct tw_ctx_config tc;

	memset(buf, CANARY, sizeof(buf));
	tw_primary_config_init_sized((struct tw_primary_config *)(void *)buf, 16);
	ok(canary_intact(buf, 16, sizeof(buf)), "tw_primary_config_init_sized(16) writes 16 bytes");
	memset(buf, CANARY, sizeof(buf));
	tw_primary_config_init_sized((struct tw_primary_config *)(void *)buf,
				     sizeof(struct tw_primary_config) + 32);
	ok(buf[sizeof(struct tw_primary_config)] == 0 &&
	   canary_intact(buf, sizeof(struct tw_primary_config) + 32, sizeof(buf)),
	   "... and a bigger struct (a newer header) gets its unknown tail zeroed, no more");
	tw_ctx_config_init(&tc);
	is_int((int)tc.size, (int)sizeof(tc), "tw_ctx_config_init records the caller's sizeof");
	{
		unsigned char ab[sizeof(struct tw_admin_config) + 32];
		struct tw_admin_config zeroed;
		struct tw_admin *a = NULL;
		char err[256] = "";

		memset(ab, CANARY, sizeof(ab));
		tw_admin_config_init_sized((struct tw_admin_config *)(void *)ab, 8);
		ok(canary_intact(ab, 8, sizeof(ab)), "tw_admin_config_init_sized(8) writes 8 bytes");
		memset(&zeroed, 0, sizeof(zeroed));
		ok(tw_admin_open(&zeroed, &a, err, sizeof(err)) == -EINVAL && !a &&
		   strstr(err, "tw_admin_config_init"), "tw_admin_open of a zeroed config: -EINVAL "
		   "naming the init (%s)", err);
	}
}

static void open_checks_size(void)
{
	struct tw_ctx_config zeroed, tc;
	struct newer_ctx_config newer;
	struct tw_ctx *ctx = NULL;
	char err[256] = "";
	int rc;

	memset(&zeroed, 0, sizeof(zeroed));
	rc = tw_ctx_open(&zeroed, &ctx, err, sizeof(err));
	is_int(rc, -EINVAL, "a zeroed tw_ctx_config (no init): -EINVAL");
	ok(!ctx && strstr(err, "tw_ctx_config_init") != NULL, "... naming the init (%s)", err);

	tw_ctx_config_init(&tc);
	rc = tw_ctx_open(&tc, &ctx, err, sizeof(err));
	is_int(rc, -EINVAL, "an initialised one passes the size check (then: no backups, -EINVAL)");
	ok(strstr(err, "no backups") != NULL, "... for the backups (%s)", err);

	tw_ctx_config_init_sized(&newer.v1, sizeof(newer)); /* as its header's macro would */
	rc = tw_ctx_open(&newer.v1, &ctx, err, sizeof(err));
	ok(rc == -EINVAL && strstr(err, "no backups") != NULL,
	   "a newer header's struct with its unknown fields zero is taken (%s)", err);
	newer.unknown[1] = 7;
	rc = tw_ctx_open(&newer.v1, &ctx, err, sizeof(err));
	is_int(rc, -ENOTSUP, "... with an unknown field set: -ENOTSUP");
	ok(strstr(err, "newer") != NULL, "... saying the library is older (%s)", err);

	tw_ctx_config_init_sized(&tc, 12);
	rc = tw_ctx_open(&tc, &ctx, err, sizeof(err));
	is_int(rc, -EINVAL, "a struct smaller than 1.0's: -EINVAL (%s)", err);
}

static void stats_write_no_more_than_size(void)
{
	unsigned char buf[sizeof(struct tw_ctx_stats) + 32];

	memset(buf, CANARY, sizeof(buf));
	tw_ctx_get_stats_sized(NULL, (struct tw_ctx_stats *)(void *)buf, 8);
	ok(canary_intact(buf, 8, sizeof(buf)) && buf[0] == 0, "tw_ctx_get_stats_sized(8) fills 8 bytes");
	memset(buf, CANARY, sizeof(buf));
	tw_ctx_get_stats_sized(NULL, (struct tw_ctx_stats *)(void *)buf, sizeof(buf));
	ok(buf[sizeof(buf) - 1] == 0, "... and zeroes a newer header's tail it does not know");
}

/* An older caller: its struct ends `size` bytes in; the canary after it must stay. */
#define OLDER(getter, type, size)                                                             \
	do {                                                                                  \
		unsigned char b_[sizeof(type) + 64];                                          \
                                                                                              \
		memset(b_, CANARY, sizeof(b_));                                               \
		getter(NULL, (type *)(void *)b_, (size));                                     \
		ok(canary_intact(b_, (size), sizeof(b_)) && b_[0] == 0,                       \
		   #getter "(%zu of %zu bytes): filled to the caller's size, canary intact",  \
		   (size_t)(size), sizeof(type));                                             \
	} while (0)

static void every_stats_struct(void)
{
	uint64_t calls[TW_BACKUP_RPC_KINDS + 4];
	size_t n;

	OLDER(tw_backup_get_stats_sized, struct tw_backup_stats, 8);
	OLDER(tw_backup_get_stats_sized, struct tw_backup_stats,
	      offsetof(struct tw_backup_stats, buffers_max));
	OLDER(tw_reader_get_stats_sized, struct tw_reader_stats, 8);
	OLDER(tw_reader_get_stats_sized, struct tw_reader_stats,
	      offsetof(struct tw_reader_stats, backup));
	OLDER(tw_ctx_get_stats_sized, struct tw_ctx_stats, offsetof(struct tw_ctx_stats, arena));
	memset(calls, CANARY, sizeof(calls));
	n = tw_backup_get_rpc_calls(NULL, calls, 2);
	ok(n == TW_BACKUP_RPC_KINDS && calls[0] == 0 && calls[1] == 0 &&
	   canary_intact((const unsigned char *)&calls[2], 0, sizeof(calls) - 2 * sizeof(calls[0])),
	   "tw_backup_get_rpc_calls(2 kinds): 2 filled, canary intact, returns the library's %zu",
	   n);
}

/* 1.0's sizes of the structs that do not grow (new fields come from their reserved tails). */
static void fixed_size_results(void)
{
	unsigned char b[sizeof(struct tw_standby_result) + 64];
	struct tw_recover_config rc0;
	char err[256];
	int rc, zero = 1;

	is_int(sizeof(struct tw_recover_result), 416, "tw_recover_result: 416 bytes for 1.x");
	is_int(sizeof(struct tw_standby_result), 584, "tw_standby_result: 584 bytes for 1.x");
	is_int(sizeof(struct tw_reader_entry), 64, "tw_reader_entry: 64 bytes for 1.x");
	is_int(sizeof(struct tw_arena_stats), 104, "tw_arena_stats: 104 bytes for 1.x");

	/* A recovery that fails at once still fills its result: all of it, and no more. */
	memset(b, CANARY, sizeof(b));
	memset(&rc0, 0, sizeof(rc0)); /* not initialised: refused */
	rc = tw_recover(&rc0, NULL, NULL, (struct tw_recover_result *)(void *)b, err, sizeof(err));
	for (size_t i = offsetof(struct tw_recover_result, reserved);
	     i < sizeof(struct tw_recover_result); i++)
		zero &= b[i] == 0;
	ok(rc < 0 && zero && canary_intact(b, sizeof(struct tw_recover_result), sizeof(b)),
	   "tw_recover's result (a failed call): filled to its size, reserved tail zero, canary "
	   "intact");
	memset(b, CANARY, sizeof(b));
	rc = tw_primary_standby(NULL, NULL, NULL, (struct tw_standby_result *)(void *)b, NULL, err,
				sizeof(err));
	zero = 1;
	for (size_t i = 0; i < sizeof(struct tw_standby_result); i++)
		zero &= b[i] == 0;
	ok(rc == -EINVAL && zero && canary_intact(b, sizeof(struct tw_standby_result), sizeof(b)),
	   "tw_primary_standby's result (a failed call): zeroed to its size, canary intact");
}

static void backup_open_says_why(void)
{
	struct tw_backup_config bc;
	struct tw_backup *b = NULL;
	char err[256] = "";
	int rc;

	tw_backup_config_init(&bc); /* no dir */
	rc = tw_backup_open(&bc, &b, err, sizeof(err));
	is_int(rc, -EINVAL, "tw_backup_open without a directory: -EINVAL");
	ok(!b && err[0] != '\0', "... with the detail in errmsg (%s)", err);
	is_int(tw_backup_close(NULL), 0, "tw_backup_close(NULL) returns 0");
}

int main(void)
{
	tap_plan(30);
	tw_diag_set_level(TW_DIAG_ERROR);
	init_writes_no_more_than_size();
	open_checks_size();
	stats_write_no_more_than_size();
	every_stats_struct();
	fixed_size_results();
	backup_open_says_why();
	return tap_exit();
}
