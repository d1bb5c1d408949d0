/* tests/lib/tbackup.c — see tbackup.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <tailwind/backup.h>
#include <tailwind/common.h>
#include <tailwind/recovery.h>

#include "tap.h"
#include "tbackup.h"
#include "tlog.h"
#include "tmpdir.h"

static void *backup_main(void *arg)
{
	struct tbackup *t = arg;

	tw_backup_run(t->b);
	return NULL;
}

void tbackup_start(struct tbackup *t, const char *root, unsigned i, const char *provider,
		   unsigned buffers, size_t buffer_size, unsigned unflushed_limit)
{
	struct tw_backup_config bc;
	int rc;

	memset(t, 0, sizeof(*t));
	TAP_REQUIRE(snprintf(t->dir, sizeof(t->dir), "%s/b%u", root, i) < (int)sizeof(t->dir), "path");
	tw_backup_config_init(&bc);
	bc.provider = provider;
	bc.dir = t->dir;
	bc.buffers = buffers;
	bc.max_buffers = buffers; /* a fixed pool: tests count on its size */
	bc.buffer_size = buffer_size;
	bc.unflushed_limit = unflushed_limit;
	rc = tw_backup_open(&bc, &t->b, NULL, 0);
	TAP_REQUIRE(rc == 0, "tw_backup_open: %s", tw_strerror(rc));
	snprintf(t->addr, sizeof(t->addr), "%s", tw_backup_listen_addr(t->b));
	TAP_REQUIRE(pthread_create(&t->th, NULL, backup_main, t) == 0, "pthread_create");
	t->running = true;
}

/* Stop the thread and join it; with `flush`, write every buffer first (twd's SIGTERM); close. */
static void halt(struct tbackup *t, bool flush)
{
	if (!t->b)
		return;
	if (t->running) {
		tw_backup_stop(t->b);
		pthread_join(t->th, NULL);
		t->running = false;
	}
	if (flush) {
		int rc = tw_backup_flush_all(t->b);

		TAP_REQUIRE(rc == 0, "tw_backup_flush_all: %s", tw_strerror(rc));
	}
	tw_backup_close(t->b);
	t->b = NULL;
}

void tbackup_stop(struct tbackup *t)
{
	halt(t, false);
}

void tbackup_pause(struct tbackup *t)
{
	TAP_REQUIRE(t->b && t->running, "pause a backup that is not running");
	tw_backup_stop(t->b);
	pthread_join(t->th, NULL);
	t->running = false;
}

void tbackup_resume(struct tbackup *t)
{
	TAP_REQUIRE(t->b && !t->running, "resume a backup that is not paused");
	TAP_REQUIRE(pthread_create(&t->th, NULL, backup_main, t) == 0, "pthread_create");
	t->running = true;
}

void tbackups_start(struct tbackups *s, const char *name, unsigned n, const char *provider,
		    unsigned buffers, size_t buffer_size)
{
	memset(s, 0, sizeof(*s));
	tmpdir_make(s->root, sizeof(s->root), NULL, name);
	for (unsigned i = 0; i < n; i++)
		tbackups_add(s, provider, buffers, buffer_size, 0);
}

unsigned tbackups_add(struct tbackups *s, const char *provider, unsigned buffers,
		      size_t buffer_size, unsigned unflushed_limit)
{
	unsigned i = s->n;

	TAP_REQUIRE(i < TBACKUPS_MAX, "more than %u backups", TBACKUPS_MAX);
	tbackup_start(&s->b[i], s->root, i, provider, buffers, buffer_size, unflushed_limit);
	s->addrs[i] = s->b[i].addr;
	s->n++;
	return i;
}

void tbackups_stop(struct tbackups *s)
{
	for (unsigned i = 0; i < s->n; i++)
		tbackup_stop(&s->b[i]);
	tmpdir_remove(s->root);
}

void tbackup_shutdown(struct tbackup *t)
{
	halt(t, true);
}

int tbackup_recover(const char **addrs, size_t n, uint64_t log_id, tw_recover_entry_fn cb,
		    void *arg, struct tw_recover_result *res)
{
	struct tw_recover_config rc;
	char err[512];
	int r;

	tlog_recover_config(&rc, "mem", addrs, n, log_id);
	rc.rpc_timeout_ms = 3000;
	rc.op_timeout_ms = 3000;
	r = tw_recover(&rc, cb, arg, res, err, sizeof(err));
	if (r)
		tap_diag("recover log %" PRIu64 ": %s: %s", log_id, tw_strerror(r), err);
	return r;
}
