/*
 * tests/integration/replicate_e2e.c — end to end over a real provider (argv[1]: tcp, sockets, shm):
 * three twd processes with 256 KiB buffers, a primary in this process with 256 KiB segments,
 * many segments' worth of 100-byte appends (async mode with a progress thread, plus synchronous
 * ones), then SIGTERM (the twd's flush their buffers, the open one included) and a check that
 * every backup's segment files hold exactly the appended sequence, in order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "core/util.h"
#include "proc.h"
#include "backup/segfile.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"

#define NB 3
#define SEG (256u * 1024u)
#define OBJ 100u

static void payload_for(uint8_t *buf, uint64_t seq)
{
	for (unsigned i = 0; i < OBJ; i++)
		buf[i] = (uint8_t)(seq + i * 3);
	memcpy(buf, &seq, sizeof(seq));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Check one backup's directory: the segments of `log_id` hold sequence 0..n-1 in order. */
static void check_dir(const char *dir, unsigned idx, uint64_t log_id, uint64_t n)
{
	uint64_t segs[4096], nseg = 0, seq = 0, bad = 0, files_bad = 0, open_state = 0;
	struct dirent *de;
	uint8_t *buf = malloc(SEG);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	DIR *d = dfd >= 0 ? fdopendir(dup(dfd)) : NULL;

	if (!buf || !d) {
		ok(0, "backup %u: cannot read %s", idx, dir);
		tap_skip(2, "no directory");
		if (d)
			closedir(d);
		if (dfd >= 0)
			close(dfd);
		free(buf);
		return;
	}
	while ((de = readdir(d))) {
		uint64_t l, s;

		if (tw__segfile_parse_name(de->d_name, &l, &s) && l == log_id && nseg < 4096)
			segs[nseg++] = s;
	}
	closedir(d);
	qsort(segs, nseg, sizeof(segs[0]), cmp_u64);
	for (uint64_t i = 0; i < nseg; i++) {
		struct segfile_hdr h;
		char name[SEGFILE_NAME_MAX];
		struct tw_entry_iter it;
		const void *pl;
		uint32_t len;
		int rc;

		if (segs[i] != i) {
			files_bad++;
			break;
		}
		tw__segfile_name(log_id, segs[i], name, sizeof(name));
		memset(buf, 0, SEG);
		rc = tw__segfile_load(dfd, name, buf, SEG, &h);
		if (rc < 0) {
			tap_diag("backup %u: %s: %s", idx, name, tw_strerror(rc));
			files_bad++;
			continue;
		}
		if (h.state == SEGFILE_OPEN)
			open_state++;
		it.buf = buf;
		it.len = h.valid_len;
		it.pos = 0;
		while ((rc = tw_entry_next(&it, &pl, &len, NULL)) == 1) {
			uint64_t got;

			if (len != OBJ) {
				bad++;
				continue;
			}
			memcpy(&got, pl, sizeof(got));
			if (got != seq)
				bad++;
			seq = got + 1;
		}
		if (rc < 0)
			files_bad++;
	}
	close(dfd);
	free(buf);
	is_int(files_bad, 0, "backup %u: %llu segment files of the log, all verify (%llu flushed while open)",
	       idx, (unsigned long long)nseg, (unsigned long long)open_state);
	is_int(seq, n, "backup %u: holds every appended entry", idx);
	is_int(bad, 0, "backup %u: exactly the appended sequence, in order", idx);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct rt_cluster cl;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_primary *p = NULL;
	struct tw_primary_stats st;
	struct tlog_acks a = { 0 };
	uint8_t buf[OBJ];
	char err[1024];
	uint64_t n, log_id = 0x7e57000000000000ull | (uint64_t)getpid();
	bool san = tap_sanitizer();
	int rc;

	n = san ? 12000 : 60000; /* 256 KiB / 112 B: ~2300 per segment -> ~5 or ~26 segments */
	if (tap_long_mode())
		n *= 10;
	tap_diag("provider %s, %llu objects of %u B, segments of %u B%s", prov, (unsigned long long)n,
		 OBJ, SEG, san ? " (sanitizer: fewer objects)" : "");
	rt_start(&cl, prov, NB, "256K", "16");

	tlog_primary_config(&tc, &cfg, prov, cl.addrs, NB, log_id);
	cfg.segment_size = SEG;
	cfg.mode = TW_PRIMARY_ASYNC;
	cfg.max_batch = 64;
	cfg.max_inflight = 4;
	cfg.open_retry_ms = 20000; /* the backups' flushers must keep up with 16 buffers */
	cfg.preopen = true;        /* the next segment's opens overlap the current one's writes */
	rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
	is_int(rc, 0, "primary open over %s (%s)", prov, rc ? err : "ok");
	if (rc)
		goto stop;
	{
		uint64_t bad = 0;

		for (uint64_t i = 0; i < n; i++) {
			payload_for(buf, i);
			if (i % 97 == 0)
				rc = tw_primary_append(p, buf, OBJ, NULL);
			else
				rc = tw_primary_append_async(p, buf, OBJ, tlog_ack_cb, &a, NULL);
			if (rc < 0 && !bad++)
				tap_diag("append %llu: %s: %s", (unsigned long long)i, tw_strerror(rc),
					 tw_primary_errmsg(p));
		}
		is_int(bad, 0, "%llu appends accepted", (unsigned long long)n);
	}
	is_int(tw_primary_flush(p), 0, "flush: every append acknowledged by 3 backups");
	is_int(a.errors, 0, "no callback reported an error");
	is_int(a.out_of_order, 0, "callbacks in log order");
	tw_primary_get_stats(p, &st);
	ok(st.segments >= 4, "%llu segments rolled over", (unsigned long long)st.segments);
	ok(st.writes < n, "batching: %llu writes for %llu appends", (unsigned long long)st.writes,
	   (unsigned long long)n);
	{
		uint64_t lsn = 0;
		const void *d;
		uint32_t len;

		payload_for(buf, n);
		rc = tw_primary_append(p, buf, OBJ, &lsn);
		ok(rc == 0 && tw_primary_read(p, lsn, &d, &len) == 0 && len == OBJ && !memcmp(d, buf, OBJ),
		   "a last append reads back from the primary's memory");
		n++;
	}

stop:
	/* SIGTERM: each twd flushes every buffer, the still-open last segment included. */
	for (unsigned i = 0; i < NB; i++)
		proc_kill(cl.p[i], SIGTERM);
	for (unsigned i = 0; i < NB; i++)
		is_int(proc_wait(cl.p[i], 30000), 0, "twd %u exited cleanly after SIGTERM", i);
	if (p) {
		/* The backups are gone: closing reports the loss, but must not hang. */
		uint64_t t0 = tw_now_ns();

		tw_primary_close(p);
		ok(tw_now_ns() - t0 < 20000000000ull, "primary close with the backups gone returns");
		for (unsigned i = 0; i < NB; i++)
			check_dir(cl.dir[i], i, log_id, n);
	}
	rt_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
