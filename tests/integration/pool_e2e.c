/*
 * tests/integration/pool_e2e.c — a backup serving more logs than its initial buffers, over a
 * real provider (argv[1]: tcp, sockets, shm). Three twd processes started with the defaults
 * (16 initial buffers of 8 MiB, growing on demand: docs/operations.md, "Sizing the buffer
 * pool"); LOGS primaries (LOGS_SAN under a sanitizer) in this process (the single-log API,
 * distinct log ids, pre-open on), so each twd holds 2 x LOGS segment replicas open at once,
 * more than the old fixed pool of 16.
 * Every primary appends and waits for its acknowledgements; the twd's stats show the grown pool
 * (total above 16, cap reported); SIGTERM flushes every buffer; every log's segment files on
 * every backup hold exactly its acknowledged entries, in order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>

#include "core/util.h"
#include "proc.h"
#include "backup/segfile.h"
#include "recover_util.h"
#include "tap.h"
#include "tlog.h"
#include "twd_client.h"

#define NB 3
#define LOGS 24      /* x 2 (pre-open) = 48 replicas open per twd: 3 times the old 16 */
#define LOGS_SAN 12  /* under a sanitizer: 24 replicas, still more than the 16 preallocated */
#define OBJ 100u
#define PER_LOG 300u /* appends per log */

static uint8_t segbuf[TW_BACKUP_DEFAULT_BUFFER_SIZE];

static void payload_for(uint8_t *buf, uint64_t log, uint64_t seq)
{
	for (unsigned i = 0; i < OBJ; i++)
		buf[i] = (uint8_t)(seq + log + i * 7);
	memcpy(buf, &seq, sizeof(seq));
}

/* Entries of log_id in `dir`, in segment order: how many match the appended sequence, and how
 * many do not (wrong payload or order, unreadable file). */
static void check_log(int dfd, uint64_t log_id, unsigned li, uint64_t *good, uint64_t *bad)
{
	uint64_t seq = 0;

	*good = *bad = 0;
	for (uint64_t s = 0;; s++) {
		char name[SEGFILE_NAME_MAX];
		struct segfile_hdr h;
		struct tw_entry_iter it;
		const void *pl;
		uint32_t len;
		uint8_t want[OBJ];
		int rc;

		tw__segfile_name(log_id, s, name, sizeof(name));
		if (faccessat(dfd, name, F_OK, 0) != 0)
			break;
		rc = tw__segfile_load(dfd, name, segbuf, sizeof(segbuf), &h);
		if (rc < 0) {
			tap_diag("log %u: %s: %s", li, name, tw_strerror(rc));
			(*bad)++;
			continue;
		}
		it.buf = segbuf;
		it.len = h.valid_len;
		it.pos = 0;
		while ((rc = tw_entry_next(&it, &pl, &len, NULL)) == 1) {
			payload_for(want, li, seq);
			if (len == OBJ && !memcmp(pl, want, OBJ))
				(*good)++;
			else
				(*bad)++;
			seq++;
		}
		if (rc < 0)
			(*bad)++;
	}
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct rt_cluster cl;
	char err[1024];
	struct tw_primary *p[LOGS] = { 0 };
	uint64_t log_base = 0x900100000000000ull | ((uint64_t)getpid() << 8);
	unsigned logs = tap_sanitizer() ? LOGS_SAN : LOGS, opened = 0, bad_appends = 0, flushed = 0;
	struct tlog_acks acks = { 0 }; /* every log's */
	uint8_t buf[OBJ];
	int rc;

	tap_diag("provider %s, %u logs x %u appends of %u B, 3 twd's with default pools", prov,
		 logs, PER_LOG, OBJ);
	rt_start_with(&cl, NULL, prov, NB, NULL, NULL, NULL); /* twd's default pool */

	for (unsigned l = 0; l < logs; l++) {
		struct tw_ctx_config tc;
		struct tw_primary_config cfg;

		tlog_primary_config(&tc, &cfg, prov, cl.addrs, NB, log_base + l);
		cfg.mode = TW_PRIMARY_ASYNC;
		cfg.preopen = true; /* two replicas open per log on every backup */
		rc = tw_primary_open(&tc, &cfg, &p[l], err, sizeof(err));
		if (rc) {
			tap_diag("primary %u: %s: %s", l, tw_strerror(rc), err);
			p[l] = NULL;
			break;
		}
		opened++;
	}
	is_int(opened, logs, "%u primaries opened, each with a segment and a pre-opened next one "
	       "on the three twd's", logs);

	/* Interleave the logs' appends, then wait for each one's acknowledgements. */
	for (unsigned k = 0; k < PER_LOG; k++)
		for (unsigned l = 0; l < opened; l++) {
			payload_for(buf, l, k);
			if (k % 50 == 0)
				rc = tw_primary_append(p[l], buf, OBJ, NULL);
			else
				rc = tw_primary_append_async(p[l], buf, OBJ, tlog_ack_cb, &acks,
							     NULL);
			if (rc < 0 && !bad_appends++)
				tap_diag("log %u append %u: %s: %s", l, k, tw_strerror(rc),
					 tw_primary_errmsg(p[l]));
		}
	is_int(bad_appends, 0, "every append accepted");
	for (unsigned l = 0; l < opened; l++)
		flushed += tw_primary_flush(p[l]) == 0;
	is_int(flushed, opened, "every log's appends acknowledged by its 3 backups");
	is_int(acks.errors, 0, "no callback reported an error");

	/* The pools grew past the 16 initial buffers; the cap is reported. */
	for (unsigned i = 0; i < NB; i++) {
		struct twc c;
		struct twc_stats s;

		memset(&c, 0, sizeof(c));
		rc = twc_connect(&c, prov, cl.addrs[i]);
		if (rc == 0)
			rc = twc_stats(&c, &s);
		if (rc) {
			ok(0, "twd %u: stats: %s", i, tw_strerror(rc));
			twc_close(&c);
			continue;
		}
		ok(s.buffers_total >= 2 * opened && s.buffers_total > TW_BACKUP_DEFAULT_BUFFERS &&
		   s.buffers_max == TW_BACKUP_DEFAULT_MAX_BUFFERS && s.buffers_open >= 2 * opened,
		   "twd %u: the pool grew to %u buffers (cap %u), %u open", i, s.buffers_total,
		   s.buffers_max, s.buffers_open);
		twc_close(&c);
	}

	/* SIGTERM: each twd flushes every buffer, the open ones included. */
	for (unsigned i = 0; i < NB; i++)
		proc_kill(cl.p[i], SIGTERM);
	for (unsigned i = 0; i < NB; i++)
		is_int(proc_wait(cl.p[i], 60000), 0, "twd %u exited cleanly after SIGTERM", i);
	for (unsigned l = 0; l < opened; l++)
		tw_primary_close(p[l]); /* the backups are gone: reports the loss, must not hang */

	for (unsigned i = 0; i < NB; i++) {
		int dfd = open(cl.dir[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		uint64_t good_logs = 0, bad = 0;

		for (unsigned l = 0; l < opened && dfd >= 0; l++) {
			uint64_t g, b;

			check_log(dfd, log_base + l, l, &g, &b);
			good_logs += g == PER_LOG && b == 0;
			bad += b;
		}
		if (dfd >= 0)
			close(dfd);
		is_int(good_logs, opened, "backup %u: every log holds its %u acknowledged entries, in "
		       "order (%llu bad entries)", i, PER_LOG, (unsigned long long)bad);
	}
	rt_stop(&cl);
	tap_done_testing();
	return tap_exit();
}
