/*
 * tests/unit/test_metrics.c — the Prometheus text writers (tailwind/metrics.h) over "mem"
 * backups and logs: the buffer contract (too small: -ENOSPC and the size needed, then the whole
 * text), HELP and TYPE before every family's samples, each family once in an exposition made of
 * every writer's text, values that follow the counters, and `promtool check metrics` on that
 * exposition when promtool is installed (Debian's prometheus package; a skip otherwise, the
 * integration test metrics_prometheus needs it anyway).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/context.h>
#include <tailwind/metrics.h>
#include <tailwind/primary.h>

#include "tap.h"
#include "tbackup.h"
#include "tlog.h"

#define SEG (1u << 20)
#define BIG (256u << 10)

static char text[BIG * 4];
static size_t text_len;

/* The value of the sample `series` (name and labels exactly as written) in t, or -1. */
static double value_of(const char *t, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	return -1;
}

/*
 * The format's rules we rely on: every sample's metric name is that of the last TYPE line (no
 * histograms here: no _bucket/_sum/_count suffixes), a HELP line right before each TYPE line of
 * the same name, and no family twice. Returns the number of families, or -1 after a diagnostic.
 */
static int check_structure(const char *t)
{
	char fam[256] = "", seen[8192] = " ";
	int families = 0;

	for (const char *l = t; *l;) {
		const char *nl = strchr(l, '\n');
		char name[256], help[256];
		size_t len = nl ? (size_t)(nl - l) : strlen(l);

		if (!nl) {
			tap_diag("last line without a newline: %.*s", (int)len, l);
			return -1;
		}
		if (!strncmp(l, "# HELP ", 7)) {
			if (sscanf(l, "# HELP %255s", help) != 1)
				return -1;
			if (strncmp(nl + 1, "# TYPE ", 7) || sscanf(nl + 1, "# TYPE %255s", name) != 1 ||
			    strcmp(name, help)) {
				tap_diag("HELP %s not followed by its TYPE", help);
				return -1;
			}
		} else if (!strncmp(l, "# TYPE ", 7)) {
			char key[260];

			sscanf(l, "# TYPE %255s", fam);
			snprintf(key, sizeof(key), " %s ", fam);
			if (strstr(seen, key)) {
				tap_diag("family %s twice", fam);
				return -1;
			}
			if (strlen(seen) + strlen(fam) + 2 < sizeof(seen)) {
				strcat(seen, fam);
				strcat(seen, " ");
			}
			families++;
		} else {
			size_t k = strcspn(l, "{ ");

			if (!fam[0] || k != strlen(fam) || strncmp(l, fam, k)) {
				tap_diag("sample outside its family (%s): %.*s", fam, (int)len, l);
				return -1;
			}
		}
		l = nl + 1;
	}
	return families;
}

static void append_text(int (*fn)(void *, char *, size_t, size_t *), void *arg)
{
	size_t need = 0;

	if (fn(arg, text + text_len, sizeof(text) - text_len, &need) == 0)
		text_len += need;
}

static int backup_fn(void *arg, char *b, size_t l, size_t *n)
{
	return tw_backup_metrics_text(arg, b, l, n);
}

static int ctx_fn(void *arg, char *b, size_t l, size_t *n)
{
	return tw_ctx_metrics_text(arg, b, l, n);
}

static int process_fn(void *arg, char *b, size_t l, size_t *n)
{
	(void)arg;
	return tw_process_metrics_text(b, l, n);
}

static struct tw_primary **logs_arg;
static size_t nlogs_arg;

static int logs_fn(void *arg, char *b, size_t l, size_t *n)
{
	(void)arg;
	return tw_primary_metrics_text(logs_arg, nlogs_arg, b, l, n);
}

static void test_contract(struct tw_backup *b)
{
	static char buf[BIG];
	size_t need = 0, need2 = 0;
	char *small;

	is_int(tw_backup_metrics_text(b, NULL, 0, &need), -ENOSPC, "size query: -ENOSPC");
	ok(need > 1000, "size query: %zu bytes needed", need);
	small = malloc(need);
	TAP_REQUIRE(small, "malloc");
	is_int(tw_backup_metrics_text(b, small, need, &need2), -ENOSPC,
	       "room for the text but not its NUL: -ENOSPC");
	is_int(small[0], 0, "a refused buffer holds an empty string");
	ok(need2 == need, "the same size asked again (%zu)", need2);
	free(small);
	is_int(tw_backup_metrics_text(b, buf, sizeof(buf), &need2), 0, "enough room: 0");
	is_int(strlen(buf), need2, "the text is *needed_out bytes, NUL-terminated");
	is_int(tw_backup_metrics_text(NULL, buf, sizeof(buf), NULL), -EINVAL, "NULL backup: -EINVAL");
	is_int(tw_backup_metrics_text(b, NULL, 10, NULL), -EINVAL, "NULL buffer, len 10: -EINVAL");
	is_int(tw_primary_metrics_text(NULL, 0, buf, sizeof(buf), &need), 0, "no logs: 0");
	is_int(need, 0, "no logs: no text");
	is_int(tw_process_metrics_text(buf, 10, &need), -ENOSPC, "process, 10 bytes: -ENOSPC");
}

/* Run promtool on the exposition, if installed: 1 passed, 0 failed, -1 not installed. */
static int promtool(const char *path)
{
	char cmd[1024];
	int st;

	if (system("command -v promtool >/dev/null 2>&1") != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' >&2", path);
	st = system(cmd);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
	struct tbackups cl;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *logs[2];
	struct tw_ctx *ctx;
	char err[512], path[512], series[128];
	uint8_t entry[100] = { 1 };
	int families, rc;
	FILE *f;

	tap_plan(35);
	tbackups_start(&cl, "test_metrics", 3, "mem", 8, SEG);
	tlog_primary_config(&tc, &cfg, "mem", cl.addrs, 3, 71);
	cfg.segment_size = SEG;
	logs[0] = tlog_open(&tc, &cfg, "log 71");
	cfg.log_id = 72;
	logs[1] = tlog_open(&tc, &cfg, "log 72");
	TAP_REQUIRE(logs[0] && logs[1], "logs open");
	for (int i = 0; i < 10; i++)
		TAP_REQUIRE(tw_primary_append(logs[0], entry, sizeof(entry), NULL) == 0, "append");
	TAP_REQUIRE(tw_primary_append(logs[1], entry, sizeof(entry), NULL) == 0, "append");
	rc = tw_ctx_open(&tc, &ctx, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "context open: %s", err);

	test_contract(cl.b[0].b);

	logs_arg = logs;
	nlogs_arg = 2;
	append_text(backup_fn, cl.b[0].b);
	append_text(logs_fn, NULL);
	append_text(ctx_fn, ctx);
	append_text(process_fn, NULL);
	ok(text_len > 0 && strlen(text) == text_len, "the four texts concatenated (%zu bytes)",
	   text_len);
	families = check_structure(text);
	ok(families > 60, "HELP and TYPE before every family, each once (%d families)", families);
	ok(strstr(text, "# TYPE tailwind_backup_buffers_free gauge\n") != NULL,
	   "tailwind_backup_buffers_free is a gauge");
	ok(strstr(text, "# TYPE tailwind_backup_rpc_total counter\n") != NULL,
	   "tailwind_backup_rpc_total is a counter");
	ok(value_of(text, "tailwind_backup_rpc_total{kind=\"open\"}") >= 2,
	   "backup: open RPCs counted (%.0f)", value_of(text, "tailwind_backup_rpc_total{kind=\"open\"}"));
	ok(value_of(text, "tailwind_backup_buffers") == 8, "backup: 8 buffers");
	ok(value_of(text, "tailwind_backup_buffers_open") == 2, "backup: 2 open (one per log)");
	is_int(value_of(text, "tailwind_primary_appends_total{log=\"71\"}"), 10,
	       "log 71: 10 appends");
	is_int(value_of(text, "tailwind_primary_appends_acked_total{log=\"72\"}"), 1,
	       "log 72: 1 acknowledged");
	is_int(value_of(text, "tailwind_primary_append_bytes_total{log=\"71\"}"), 1000,
	       "log 71: 1000 payload bytes");
	snprintf(series, sizeof(series), "tailwind_primary_rpc_total{log=\"71\",kind=\"open\"}");
	ok(value_of(text, series) >= 3, "log 71: an open RPC per replica (%.0f)",
	   value_of(text, series));
	is_int(value_of(text, "tailwind_context_logs"), 0, "context: no logs on it");
	ok(value_of(text, "process_cpu_seconds_total") > 0, "process: CPU seconds");
	ok(value_of(text, "process_resident_memory_bytes") > 1e6, "process: resident bytes %.0f",
	   value_of(text, "process_resident_memory_bytes"));
	ok(value_of(text, "process_open_fds") > 3, "process: open fds");
	ok(value_of(text, "process_start_time_seconds") > 1.6e9, "process: start time");
	ok(strstr(text, "tailwind_build_info{version=\"") != NULL, "build info");

	snprintf(path, sizeof(path), "%s/metrics.txt", cl.root);
	f = fopen(path, "w");
	TAP_REQUIRE(f && fwrite(text, 1, text_len, f) == text_len && fclose(f) == 0, "write %s",
		    path);
	rc = promtool(path);
	if (rc < 0)
		tap_skip(1, "promtool is not installed (Debian package prometheus)");
	else
		ok(rc == 1, "promtool check metrics passes on backup + logs + context + process");

	is_int(tw_primary_close(logs[0]), 0, "close log 71");
	is_int(tw_primary_close(logs[1]), 0, "close log 72");
	is_int(tw_ctx_close(ctx), 0, "close the context");
	tbackups_stop(&cl);
	return tap_exit();
}
