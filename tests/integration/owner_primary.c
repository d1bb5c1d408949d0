/*
 * tests/integration/owner_primary.c — the primary the ownership tests start, kill and race.
 *
 * usage: owner_primary PROVIDER LOG_ID MODE TAG COUNT ADDR...
 *   MODE open      tw_primary_open (a new log), then append objects 0, 1, 2 ...
 *        takeover  tw_primary_takeover, then append after the recovered tail: the objects go on
 *                  from 1 + the last recovered sequence number
 *        race      as takeover; after COUNT appends print "appended" and wait for SIGUSR1, then
 *                  append one more object and close: the exit status says whether this process
 *                  still owned the log at the end
 *        hold      as open; after COUNT appends (all acknowledged) print "appended" and wait to
 *                  be killed: the open segment stays open on the backups
 * Objects are tests/integration/owner_util.h's, tagged TAG. Asynchronous appends; every
 * acknowledgement is reported with one write(2) of "acked SEQ LSN" (nothing is lost in a stdio
 * buffer at a SIGKILL). After open/takeover: "ready recovered=N next=SEQ epoch=E first=SEG".
 * With COUNT objects acknowledged: "done", close, exit 0.
 * Env OWNER_EPOCH: cfg.epoch (default 0: automatic). OWNER_SEGSIZE: segment size (64K).
 * Exit status: 0 ok, 4 -TW_EFENCED, 5 -TW_ELOGEXISTS, 6 -TW_ELOST, 1 other errors; on failure one
 * line "error CODE-NAME: message" on stdout too.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/primary.h>

#include "owner_util.h"
#include "say.h"

static volatile int failed;
static int fail_code;
static uint64_t tag, next_seq, last_seq;
static bool any, bad_order;

static int exit_of(int rc)
{
	switch (rc) {
	case 0: return 0;
	case -TW_EFENCED: return 4;
	case -TW_ELOGEXISTS: return 5;
	case -TW_ELOST: return 6;
	default: return 1;
	}
}

static int fail(const char *what, int rc, const char *msg)
{
	fprintf(stderr, "owner_primary: %s: %s: %s\n", what, tw_strerror(rc), msg);
	sayf("error %s: %s: %s\n", tw_strerror(rc), what, msg);
	return exit_of(rc);
}

static void on_ack(void *arg, int status, uint64_t lsn)
{
	if (status) {
		if (!failed)
			fail_code = status;
		failed = 1;
		return;
	}
	sayf("acked %" PRIuPTR " %" PRIu64 "\n", (uintptr_t)arg, lsn);
}

/* Takeover: the recovered objects must be 0, 1, 2 ... (any writers); remember the last. */
static int on_entry(void *arg, const struct tw_recovered_entry *e)
{
	uint64_t seq = 0, t = 0;

	(void)arg;
	if (!ow_parse(e->data, e->len, &seq, &t) || seq != (any ? last_seq + 1 : 0))
		bad_order = true;
	last_seq = seq;
	any = true;
	return 0;
}

int main(int argc, char **argv)
{
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct tw_recover_result res;
	struct tw_primary *p = NULL;
	const char *mode;
	char err[1024];
	uint8_t obj[OW_OBJ];
	uint64_t count;
	sigset_t usr1;
	int rc;

	if (argc < 7) {
		fprintf(stderr, "usage: owner_primary PROVIDER LOG_ID MODE TAG COUNT ADDR...\n");
		return 2;
	}
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL); /* before any thread starts */
	tw_ctx_config_init(&tc);
	tw_primary_config_init(&cfg);
	tc.provider = argv[1];
	cfg.log_id = strtoull(argv[2], NULL, 0);
	mode = argv[3];
	tag = strtoull(argv[4], NULL, 0);
	count = strtoull(argv[5], NULL, 0);
	tc.backups = (const char *const *)&argv[6];
	tc.n_backups = (size_t)(argc - 6);
	cfg.replicas = tc.n_backups < 3 ? (unsigned)tc.n_backups : 3;
	cfg.segment_size = getenv("OWNER_SEGSIZE") ? strtoull(getenv("OWNER_SEGSIZE"), NULL, 0)
						   : 64u << 10;
	cfg.mode = TW_PRIMARY_ASYNC;
	if (getenv("OWNER_EPOCH"))
		cfg.epoch = strtoull(getenv("OWNER_EPOCH"), NULL, 0);
	memset(&res, 0, sizeof(res));
	if (strcmp(mode, "open") == 0 || strcmp(mode, "hold") == 0) {
		rc = tw_primary_open(&tc, &cfg, &p, err, sizeof(err));
		if (rc)
			return fail("open", rc, err);
	} else {
		rc = tw_primary_takeover(&tc, &cfg, on_entry, NULL, &res, &p, err, sizeof(err));
		if (rc)
			return fail("takeover", rc, err);
		if (bad_order)
			return fail("takeover", -TW_ECORRUPT, "recovered objects out of order");
		next_seq = any ? last_seq + 1 : 0;
	}
	sayf("ready recovered=%" PRIu64 " next=%" PRIu64 " epoch=%" PRIu64 " first=%u\n",
	     res.entries, next_seq, tw_primary_epoch(p), tw_primary_first_segment(p));
	for (uint64_t i = 0; i < count && !failed; i++) {
		uint64_t seq = next_seq++;

		ow_fill(obj, seq, tag);
		rc = tw_primary_append_async(p, obj, OW_OBJ, on_ack, (void *)(uintptr_t)seq, NULL);
		if (rc) {
			failed = 1;
			fail_code = rc;
			break;
		}
	}
	rc = tw_primary_flush(p);
	if (!rc && failed)
		rc = fail_code;
	if (rc == 0 && strcmp(mode, "hold") == 0) {
		int sig;

		say("appended\n", 9);
		for (;;)
			sigwait(&usr1, &sig);
	}
	if (rc == 0 && strcmp(mode, "race") == 0) {
		int sig;

		say("appended\n", 9);
		sigwait(&usr1, &sig);
		ow_fill(obj, next_seq, tag);
		rc = tw_primary_append(p, obj, OW_OBJ, NULL);
		if (rc == 0)
			next_seq++;
	}
	if (rc) {
		snprintf(err, sizeof(err), "%s", tw_primary_errmsg(p));
		tw_primary_close(p);
		return fail("append", rc, err);
	}
	rc = tw_primary_close(p);
	if (rc)
		return fail("close", rc, "closing the log");
	say("done\n", 5);
	return 0;
}
