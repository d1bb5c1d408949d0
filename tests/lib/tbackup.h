/*
 * tests/lib/tbackup.h — an in-process backup (libtailwind's tw_backup) on a thread of its own,
 * for unit tests that drive a primary against real backups ("mem" or a real provider), and a
 * recovery from "mem" backups.
 *
 *   struct tbackup b;
 *   tbackup_start(&b, root, 0, "mem", 16, SEG, 0);   // storage in <root>/b0; b.addr to connect
 *   ...
 *   tbackup_stop(&b);                                 // stop, join, close; again is a no-op
 */
#ifndef TW_TESTS_TBACKUP_H
#define TW_TESTS_TBACKUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include <tailwind/recovery.h>

struct tw_backup;

struct tbackup {
	struct tw_backup *b;
	pthread_t th;
	char dir[256];
	char addr[128];
	bool running;
};

/*
 * Open a backup with storage directory <root>/b<i> (created by the backup), a fixed pool of
 * `buffers` buffers (no growth) of `buffer_size` bytes, `unflushed_limit` (0: the default),
 * listen on `provider`, and run it on a new thread. Fails the test (TAP_REQUIRE) when it cannot.
 */
void tbackup_start(struct tbackup *t, const char *root, unsigned i, const char *provider,
		   unsigned buffers, size_t buffer_size, unsigned unflushed_limit);

/* Stop the thread, join it, close the backup. Nothing when it is not open. */
void tbackup_stop(struct tbackup *t);

/* Stop the thread and join it, the backup staying open (a backup that answers nothing: its
 * peers' operations time out); tbackup_resume runs it on a new thread. */
void tbackup_pause(struct tbackup *t);
void tbackup_resume(struct tbackup *t);

/* What twd does on SIGTERM: stop, join, write every buffer (open ones as "open at shutdown")
 * with tw_backup_flush_all, close. tbackup_start with the same root and i restarts it. */
void tbackup_shutdown(struct tbackup *t);

/*
 * A set of backups, the unit tests' cluster: b[i] stores in <root>/b<i>, root a fresh scratch
 * directory (tmpdir.h) named after the test; addrs[i] is b[i]'s address (the array a primary's
 * or a recovery's config takes).
 *
 *   struct tbackups s;
 *   tbackups_start(&s, "test_ctx", 5, "mem", 64, SEG);
 *   ... cfg.backups = s.addrs; ... tbackup_stop(&s.b[2]); ...
 *   tbackups_stop(&s);
 */
#define TBACKUPS_MAX 8

struct tbackups {
	char root[256];
	unsigned n;
	struct tbackup b[TBACKUPS_MAX];
	const char *addrs[TBACKUPS_MAX];
};

/* n backups as tbackup_start (unflushed_limit 0); fails the test when one cannot start. */
void tbackups_start(struct tbackups *s, const char *name, unsigned n, const char *provider,
		    unsigned buffers, size_t buffer_size);
/* One more backup, b[s->n] with settings of its own (tbackup_start); returns its index. */
unsigned tbackups_add(struct tbackups *s, const char *provider, unsigned buffers,
		      size_t buffer_size, unsigned unflushed_limit);
/* Stop every backup (tbackup_stop) and remove the directory. */
void tbackups_stop(struct tbackups *s);

/*
 * tw_recover of log_id from the "mem" backups at addrs[0..n), with 3 s RPC and op timeouts,
 * every entry to cb(arg, ...); res may be NULL. On failure a TAP diagnostic says why. Returns
 * tw_recover's result.
 */
int tbackup_recover(const char **addrs, size_t n, uint64_t log_id, tw_recover_entry_fn cb,
		    void *arg, struct tw_recover_result *res);

#endif
