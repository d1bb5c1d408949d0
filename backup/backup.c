/*
 * backup/backup.c — the backup object: configuration, open (storage directory, index rebuild,
 * fabric, pool, RPC server, flusher, scanner), the progress loop (tw_backup_run), stop and
 * close. The segment index and its rebuild at start are in backup_index.c, connections in
 * backup_conn.c, the flusher in backup_flush.c, the scanner of closes in backup_scan.c,
 * statistics in backup_stats.c; the RPC operations in backup_ops.c, their wire glue in
 * backup_rpc.c, the buffer pool in pool.c and segment files in segfile.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/backup.h>

#include "core/clock.h"
#include "core/util.h"
#include "proto/auth.h"
#include "backup/backup_int.h"
#include "backup/metalog.h"

static const struct tw_backup_config backup_defaults = {
	.buffers = TW_BACKUP_DEFAULT_BUFFERS,
	.buffer_size = TW_BACKUP_DEFAULT_BUFFER_SIZE,
	.max_buffers = TW_BACKUP_DEFAULT_MAX_BUFFERS,
};

void tw_backup_config_init_sized(struct tw_backup_config *cfg, size_t size)
{
	tw__cfg_init_copy(cfg, size, &backup_defaults, sizeof(backup_defaults));
}

void tw__bk_seterr(struct tw_backup *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b->errmsg, sizeof(b->errmsg), fmt, ap);
	va_end(ap);
}

const char *tw_backup_errmsg(const struct tw_backup *b)
{
	return b ? b->errmsg : "no backup";
}

const char *tw_backup_listen_addr(const struct tw_backup *b)
{
	return b->addr;
}

/* ------------------------------------------------------------------ life cycle */

static uint64_t default_node_id(void)
{
	char host[256] = "";
	uint64_t id;

	gethostname(host, sizeof(host) - 1);
	id = tw_crc32c(0, host, strlen(host));
	id = (id << 32) | ((uint64_t)getpid() & 0xffffffffu);
	return id ? id : 1;
}

/* The strings of b->cfg (the caller's), copied into one block, b->strs, that b->cfg then
 * points into. */
static int copy_strings(struct tw_backup *b)
{
	const char **v[] = {&b->cfg.provider, &b->cfg.node, &b->cfg.service, &b->cfg.dir};
	size_t len = 1;
	char *p;

	for (size_t i = 0; i < TW_ARRAY_SIZE(v); i++)
		len += *v[i] ? strlen(*v[i]) + 1 : 0;
	p = b->strs = malloc(len);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < TW_ARRAY_SIZE(v); i++) {
		if (!*v[i])
			continue;
		len = strlen(*v[i]) + 1;
		*v[i] = memcpy(p, *v[i], len);
		p += len;
	}
	return 0;
}

static int check_config(const struct tw_backup_config *cfg, char *why, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);

	if (page <= 0)
		page = 4096;
	if (!cfg->dir || !cfg->dir[0]) {
		snprintf(why, len, "no storage directory given (where closed segments are flushed)");
		return -EINVAL;
	}
	if (cfg->buffers == 0 || cfg->buffers > 1u << 20) {
		snprintf(why, len, "pool size %u: must be between 1 and %u buffers", cfg->buffers,
			 1u << 20);
		return -EINVAL;
	}
	if (cfg->buffer_size < (size_t)page || cfg->buffer_size % (size_t)page != 0 ||
	    cfg->buffer_size > (1ull << 40)) {
		snprintf(why, len, "buffer size %zu: must be a multiple of the page size (%ld) "
			 "between %ld bytes and 1 TiB", cfg->buffer_size, page, page);
		return -EINVAL;
	}
	if (cfg->max_buffers > 1u << 20) {
		snprintf(why, len, "pool cap %u: at most %u buffers", cfg->max_buffers, 1u << 20);
		return -EINVAL;
	}
	if ((uint64_t)cfg->buffers * cfg->buffer_size / cfg->buffers != cfg->buffer_size ||
	    (cfg->max_buffers &&
	     (uint64_t)cfg->max_buffers * cfg->buffer_size / cfg->max_buffers != cfg->buffer_size)) {
		snprintf(why, len, "pool size overflows");
		return -EINVAL;
	}
	return 0;
}

static int open_dir(struct tw_backup *b)
{
	if (mkdir(b->cfg.dir, 0755) != 0 && errno != EEXIST) {
		int rc = -errno;

		tw__bk_seterr(b, "cannot create storage directory %s: %s (create it, or pick another "
			  "with --dir)", b->cfg.dir, strerror(errno));
		return rc;
	}
	b->dirfd = open(b->cfg.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b->dirfd < 0) {
		int rc = -errno;

		tw__bk_seterr(b, "cannot open storage directory %s: %s", b->cfg.dir, strerror(errno));
		return rc;
	}
	if (flock(b->dirfd, LOCK_EX | LOCK_NB) != 0) {
		int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;

		tw__bk_seterr(b, "storage directory %s is in use by another backup (lock held); give "
			  "each twd its own --dir", b->cfg.dir);
		return rc;
	}
	return 0;
}

/* The fabric, the buffer pool, the RPC server, the flusher thread, then listening. 0, or the
 * error with b->errmsg saying what failed. */
static int start_serving(struct tw_backup *b)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	int rc;

	tw__fab_config_init(&fc);
	fc.provider = b->cfg.provider;
	fc.node = b->cfg.node;
	fc.service = b->cfg.service;
	fc.busy_poll = b->cfg.busy_poll;
	memset(&ev, 0, sizeof(ev));
	ev.arg = b;
	ev.on_accept = tw__bk_on_accept;
	ev.on_recv = tw__bk_on_recv;
	ev.on_lost = tw__bk_on_lost;
	rc = tw__fab_open(&fc, &ev, &b->fab);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot open the fabric (provider %s): %s",
			  fc.provider ? fc.provider : "default", tw_strerror(rc));
		return rc;
	}
	rc = tw__pool_init(&b->pool, b->fab, b->cfg.buffers, b->cfg.max_buffers, b->cfg.buffer_size);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot allocate and register %u buffers of %zu bytes: %s%s",
			  b->cfg.buffers, b->cfg.buffer_size, tw_strerror(rc),
			  rc == -ENOMEM || rc == -EAGAIN ?
			  " (lower --buffers/--buffer-size; on verbs raise RLIMIT_MEMLOCK: "
			  "ulimit -l unlimited, or LimitMEMLOCK=infinity for a systemd unit)" : "");
		return rc;
	}
	rc = tw__bk_rpc_init(b);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot create the RPC server: %s", tw_strerror(rc));
		return rc;
	}
	rc = pthread_create(&b->flusher, NULL, tw__bk_flusher_main, b);
	if (rc != 0) {
		rc = -rc;
		tw__bk_seterr(b, "cannot start the flusher thread: %s", strerror(-rc));
		return rc;
	}
	b->flusher_started = true;
	rc = tw__bk_scanner_start(b);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot start the scanner thread: %s", strerror(-rc));
		return rc;
	}
	rc = tw__fab_listen(b->fab, b->addr, sizeof(b->addr));
	if (rc != 0) {
		tw__bk_seterr(b, "cannot listen on %s:%s: %s (%s)",
			      b->cfg.node ? b->cfg.node : "default",
			      b->cfg.service ? b->cfg.service : "ephemeral", tw_strerror(rc),
			      tw__fab_errmsg(b->fab));
		return rc;
	}
	return 0;
}

int tw_backup_open(const struct tw_backup_config *config, struct tw_backup **out,
		   char *errmsg_out, size_t errmsg_len)
{
	return tw__backup_open_on(config, NULL, out, errmsg_out, errmsg_len);
}

int tw__backup_open_on(const struct tw_backup_config *config, const struct tw__backup_opts *opts,
		       struct tw_backup **out, char *errmsg_out, size_t errmsg_len)
{
	struct tw_backup_config c, *cfg = &c;
	struct tw_backup *b;
	char why[256];
	int rc;

	if (errmsg_out && errmsg_len)
		errmsg_out[0] = '\0';
	if (!config || !out) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "invalid argument");
		return -EINVAL;
	}
	*out = NULL;
	rc = TW__CFG_TAKE(c, config, tw_backup_config_init, "tw_backup_config", why, sizeof(why));
	if (rc == 0)
		rc = check_config(cfg, why, sizeof(why));
	if (rc != 0) {
		tw_log_error("backup: %s", why);
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "%s", why);
		return rc;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		if (errmsg_out && errmsg_len)
			snprintf(errmsg_out, errmsg_len, "out of memory");
		return -ENOMEM;
	}
	b->cfg = *cfg;
	b->fio.storage = opts ? opts->storage : NULL;
	b->meta_cap = opts && opts->meta_cap ? opts->meta_cap : METALOG_DEFAULT_CAP;
	b->clock = tw__clock_or_system(opts ? opts->clock : NULL);
	b->dirfd = -1;
	b->ml.fd = -1;
	pthread_mutex_init(&b->fl_lock, NULL);
	pthread_cond_init(&b->fl_cond, NULL);
	pthread_cond_init(&b->fl_done_cond, NULL);
	pthread_mutex_init(&b->st_lock, NULL);
	pthread_mutex_init(&b->sc_lock, NULL);
	pthread_cond_init(&b->sc_cond, NULL);
	pthread_cond_init(&b->sc_done_cond, NULL);
	atomic_init(&b->stop, false);
	rc = copy_strings(b);
	if (rc)
		goto fail;
	if (b->cfg.max_buffers < b->cfg.buffers)
		b->cfg.max_buffers = b->cfg.buffers; /* no growth */
	if (b->cfg.unflushed_limit == 0 || b->cfg.unflushed_limit > b->cfg.max_buffers)
		b->cfg.unflushed_limit = b->cfg.max_buffers;
	b->node_id = cfg->node_id ? cfg->node_id : default_node_id();
	b->start_ns = tw_now_ns();
	b->cfg.key_file = NULL; /* not kept: the key is read once, here */
	if (tw__auth_key_path(cfg->key_file)) {
		rc = tw__auth_key_load(tw__auth_key_path(cfg->key_file), &b->key, why, sizeof(why));
		if (rc) {
			tw__bk_seterr(b, "%s", why);
			goto fail_logged;
		}
	}

	rc = open_dir(b);
	if (rc != 0)
		goto fail_logged;
	rc = tw__bk_rebuild_index(b);
	if (rc != 0) {
		if (!b->errmsg[0])
			tw__bk_seterr(b, "cannot read storage directory %s: %s", b->cfg.dir,
				  tw_strerror(rc));
		goto fail_logged;
	}

	rc = start_serving(b);
	if (rc != 0)
		goto fail_logged;
	b->index_dirty = true;
	tw__bk_stats_sync(b);
	tw_log_info("backup: listening on %s (%s), %u buffers of %zu bytes (grows to %u), "
		    "unflushed limit %u, storage %s", b->addr, tw__fab_provider(b->fab), b->pool.n,
		    b->pool.size, b->pool.max, b->cfg.unflushed_limit, b->cfg.dir);
	*out = b;
	return 0;

fail_logged:
	tw_log_error("backup: %s", b->errmsg);
fail:
	if (errmsg_out && errmsg_len)
		snprintf(errmsg_out, errmsg_len, "%s", b->errmsg[0] ? b->errmsg : tw_strerror(rc));
	(void)tw_backup_close(b);
	return rc;
}

void tw_backup_stop(struct tw_backup *b)
{
	atomic_store(&b->stop, true);
	if (b->fab)
		tw__fab_wakeup(b->fab);
}

/*
 * Out of file descriptors, libfabric's listener (tcp, sockets: 1.17) fails every accept with
 * EMFILE while its socket stays readable, so it spins and no peer can connect, and nothing
 * reports it: a stranger holding idle connections is enough. Probe for one free descriptor
 * once a second and say what is wrong, every 30 s while it lasts (docs/operations.md, "File
 * descriptors").
 */
static void check_fds(struct tw_backup *b)
{
	uint64_t now = tw_now_ns();
	struct rlimit rl;
	int fd, err;

	if (now < b->fd_check_ns)
		return;
	b->fd_check_ns = now + 1000000000u;
	fd = fcntl(b->dirfd, F_DUPFD_CLOEXEC, 0);
	if (fd >= 0) {
		close(fd);
		b->fd_warn_ns = 0;
		return;
	}
	err = errno;
	if ((err != EMFILE && err != ENFILE) || now < b->fd_warn_ns)
		return;
	b->fd_warn_ns = now + 30000000000u;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		rl.rlim_cur = 0;
	tw_log_error("backup: out of file descriptors (%s, limit %llu): no new connection can be "
		     "accepted; raise the limit (LimitNOFILE=, ulimit -n) and find who holds "
		     "connections to this daemon (ss -tnp)", err == EMFILE ? "this process" :
		     "the system", (unsigned long long)rl.rlim_cur);
}

int tw_backup_run(struct tw_backup *b)
{
	uint64_t next_sync = 0;
	int rc = 0;

	b->running = true;
	while (!atomic_load(&b->stop)) {
		int wait_ms = tw__bk_readers_tick(b); /* held reads due (docs/readers.md) */
		bool busy;

		if (wait_ms < 0 || wait_ms > 1000)
			wait_ms = 1000;
		rc = tw__fab_progress(b->fab, b->cfg.busy_poll ? 0 : wait_ms);
		busy = rc > 0;
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIMEDOUT) {
			tw__bk_seterr(b, "fabric progress failed: %s (%s)", tw_strerror(rc),
				  tw__fab_errmsg(b->fab));
			tw_log_error("backup: %s", b->errmsg);
			break;
		}
		rc = 0;
		if (tw__bk_drain_done(b))
			busy = true;
		if (tw__bk_scans_drain(b))
			busy = true;
		tw__bk_auth_sweep(b);
		tw__bk_reap_conns(b);
		if (b->flush_retry && tw_now_ns() >= b->flush_retry_ns)
			tw__bk_retry_failed_flushes(b);
		check_fds(b);
		/* Publish the counters when something happened, else at most every 50 ms (a
		 * busy-polling loop would otherwise take the stats lock millions of times). */
		if (busy || tw_now_ns() >= next_sync) {
			tw__bk_stats_sync(b);
			next_sync = tw_now_ns() + 50000000u;
		}
	}
	tw__bk_stats_sync(b);
	/* Consume the request so the next run works. */
	atomic_store(&b->stop, false);
	b->running = false;
	return rc;
}


int tw_backup_close(struct tw_backup *b)
{
	unsigned unflushed = 0;

	if (!b)
		return 0;
	/* Scans first: applying one queues its segment's flush. */
	tw__bk_scanner_stop(b);
	if (b->flusher_started) {
		pthread_mutex_lock(&b->fl_lock);
		b->fl_quit = true;
		pthread_cond_signal(&b->fl_cond);
		pthread_mutex_unlock(&b->fl_lock);
		pthread_join(b->flusher, NULL);
		b->flusher_started = false;
	}
	/* The flusher finished what was queued. A closed segment still in memory is one whose
	 * flush failed (or was never queued): it goes with the pool below. */
	for (size_t i = 0; i < b->nsegs; i++)
		if (b->segs[i]->state == SEG_CLOSED && b->segs[i]->buf)
			unflushed++;
	if (unflushed)
		tw_log_error("backup: closing with %u closed segment%s not written to %s (the "
			     "flush failed): their copies here are lost", unflushed,
			     unflushed == 1 ? "" : "s", b->cfg.dir ? b->cfg.dir : "the directory");
	while (b->conns)
		tw__bk_conn_free(b, b->conns, false); /* tw__fab_close closes the channels */
	/* Jobs finished by the flusher, and any queued after it stopped (buffer releases of the
	 * connections just freed): drop them, the pool goes away below. */
	for (struct job *j = b->done_head, *next; j; j = next) {
		next = j->next;
		free(j);
	}
	for (struct job *j = b->todo_head, *next; j; j = next) {
		next = j->next;
		free(j);
	}
	b->done_head = b->done_tail = b->todo_head = b->todo_tail = NULL;
	tw__bk_readers_fini(b);
	tw__bk_rpc_fini(b);
	tw__auth_key_free(b->key);
	tw__pool_fini(&b->pool);
	if (b->fab)
		tw__fab_close(b->fab);
	for (size_t i = 0; i < b->nsegs; i++)
		free(b->segs[i]);
	free(b->segs);
	for (size_t i = 0; i < b->nlogs; i++)
		free(b->logs[i].unavail);
	free(b->logs);
	tw__metalog_close(&b->ml);
	if (b->dirfd >= 0)
		close(b->dirfd); /* releases the flock */
	pthread_mutex_destroy(&b->fl_lock);
	pthread_cond_destroy(&b->fl_cond);
	pthread_cond_destroy(&b->fl_done_cond);
	pthread_mutex_destroy(&b->st_lock);
	pthread_mutex_destroy(&b->sc_lock);
	pthread_cond_destroy(&b->sc_cond);
	pthread_cond_destroy(&b->sc_done_cond);
	free(b->strs);
	free(b);
	return unflushed ? -EIO : 0;
}
