/*
 * backup/backup_flush.c — the flusher thread and its jobs (segment files written, removed,
 * their version rewritten), what the progress thread does with a finished job, retries of
 * failed flushes, and tw_backup_flush_all.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "backup/backup_int.h"

#define FLUSH_RETRIES 3
#define FLUSH_RETRY_NS (5ull * 1000000000u) /* after FLUSH_RETRIES failures in a row */

static void job_done(struct tw_backup *b, struct job *j);

/* ------------------------------------------------------------------ flusher */

void tw__bk_submit(struct tw_backup *b, struct job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&b->fl_lock);
	if (b->todo_tail)
		b->todo_tail->next = j;
	else
		b->todo_head = j;
	b->todo_tail = j;
	b->jobs_pending++;
	pthread_cond_signal(&b->fl_cond);
	pthread_mutex_unlock(&b->fl_lock);
}

static void run_job(struct tw_backup *b, struct job *j)
{
	switch (j->kind) {
	case JOB_FLUSH:
		j->result = tw__segfile_write(b->dirfd, &j->hdr, j->buf->mem, &b->fio);
		break;
	case JOB_REMOVE:
		/* Kept as a spare for a later flush to overwrite (docs/operations.md, "Spare
		 * files"). */
		j->result = tw__segfile_recycle(b->dirfd, j->hdr.log_id, j->hdr.segment_id,
						 &b->fio);
		if (j->result == -ENOENT)
			j->result = 0;
		break;
	case JOB_SETVER:
		j->result = tw__segfile_set_version(b->dirfd, j->hdr.log_id, j->hdr.segment_id,
						j->hdr.replica_version, &b->fio);
		break;
	}
	if (b->fio.direct_err && !b->fio_reported) {
		b->fio_reported = true;
		tw_log_info("backup: %s does not take O_DIRECT (%s): segment files are written "
			    "through the page cache (more CPU per flush; docs/operations.md)",
			    b->cfg.dir, strerror(-b->fio.direct_err));
	}
}

void *tw__bk_flusher_main(void *arg)
{
	struct tw_backup *b = arg;

	pthread_mutex_lock(&b->fl_lock);
	for (;;) {
		struct job *j;

		while (!b->todo_head && !b->fl_quit)
			pthread_cond_wait(&b->fl_cond, &b->fl_lock);
		if (!b->todo_head)
			break;
		j = b->todo_head;
		b->todo_head = j->next;
		if (!b->todo_head)
			b->todo_tail = NULL;
		pthread_mutex_unlock(&b->fl_lock);

		run_job(b, j);

		pthread_mutex_lock(&b->fl_lock);
		j->next = NULL;
		if (b->done_tail)
			b->done_tail->next = j;
		else
			b->done_head = j;
		b->done_tail = j;
		b->jobs_pending--;
		pthread_cond_broadcast(&b->fl_done_cond);
		pthread_mutex_unlock(&b->fl_lock);
		tw__fab_wakeup(b->fab);
		pthread_mutex_lock(&b->fl_lock);
	}
	pthread_mutex_unlock(&b->fl_lock);
	tw__segfile_drop_spares(b->dirfd, &b->fio);
	return NULL;
}

/* Take the finished jobs and apply them (progress / owner thread). */
unsigned tw__bk_drain_done(struct tw_backup *b)
{
	struct job *j;
	unsigned n = 0;

	pthread_mutex_lock(&b->fl_lock);
	j = b->done_head;
	b->done_head = b->done_tail = NULL;
	pthread_mutex_unlock(&b->fl_lock);
	while (j) {
		struct job *next = j->next;

		job_done(b, j);
		j = next;
		n++;
	}
	return n;
}

void tw__bk_release_buf(struct tw_backup *b, struct pool_buf *pb)
{
	/* The key of its last use dies; the bytes stay. The next open draws a chain seed other
	 * than pb->seed, under which they cannot validate (docs/log-format.md §7, "Reuse without
	 * zeroing"), so there is nothing to zero. */
	tw__pool_revoke_mr(&b->pool, pb);
	pb->seg = NULL;
	if (tw__pool_ensure_mr(&b->pool, pb) != 0)
		tw_log_warn("backup: cannot register buffer %u again (%s); the next open retries",
			    pb->idx, tw__fab_errmsg(b->fab));
	tw__pool_set_state(&b->pool, pb, POOL_FREE);
}

/* Queue a flush of a segment's buffer (closed, or open for the battery case). */
static void submit_flush(struct tw_backup *b, struct seg *s, bool open_flush)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {
		b->flush_err = b->flush_err ? b->flush_err : -ENOMEM;
		if (!open_flush) {
			/* Not queued: mark it failed so that the progress loop retries it on its
			 * next pass (else the buffer would hold the unflushed limit forever). */
			s->buf->flush_failed = true;
			if (!b->flush_retry || b->flush_retry_ns > tw_now_ns())
				b->flush_retry_ns = tw_now_ns();
			b->flush_retry = true;
			tw_log_warn("backup: no memory to queue the flush of segment %016" PRIx64
				    "-%016" PRIx64 "; retried on the next pass", s->log_id,
				    s->segment_id);
		}
		return;
	}
	j->kind = JOB_FLUSH;
	j->buf = s->buf;
	j->hdr.flags = s->corrupt ? SEGFILE_F_CORRUPT : 0;
	j->hdr.log_id = s->log_id;
	j->hdr.segment_id = s->segment_id;
	j->hdr.replica_version = s->version;
	j->hdr.epoch = s->epoch;
	j->hdr.state = open_flush ? SEGFILE_OPEN : SEGFILE_CLOSED;
	j->hdr.checksum = s->checksum;
	j->hdr.valid_len = s->valid_len;
	j->hdr.entries = s->entries;
	j->hdr.buffer_size = b->pool.size;
	j->hdr.seed = s->seed;
	s->buf->in_flush = true;
	tw__bk_submit(b, j);
}

void tw__bk_flush_closed(struct tw_backup *b, struct seg *s)
{
	submit_flush(b, s, false);
}

void tw__bk_retry_failed_flushes(struct tw_backup *b)
{
	b->flush_retry = false;
	for (size_t i = 0; i < b->nsegs; i++) {
		struct seg *s = b->segs[i];

		if (s->state == SEG_CLOSED && s->buf && s->buf->flush_failed && !s->buf->in_flush) {
			s->flush_tries = 0;
			submit_flush(b, s, false);
		}
	}
}

/* A job came back from the flusher (progress thread). */
static void job_done(struct tw_backup *b, struct job *j)
{
	struct pool_buf *pb = j->buf;
	struct seg *s;

	switch (j->kind) {
	case JOB_REMOVE:
		if (j->result != 0)
			tw_log_warn("backup: removing segment %016" PRIx64 "-%016" PRIx64 " failed: %s",
				    j->hdr.log_id, j->hdr.segment_id, tw_strerror(j->result));
		break;
	case JOB_SETVER:
		if (j->result != 0)
			tw_log_warn("backup: updating the version of segment file %016" PRIx64
				    "-%016" PRIx64 " failed: %s", j->hdr.log_id, j->hdr.segment_id,
				    tw_strerror(j->result));
		break;
	case JOB_FLUSH:
		pb->in_flush = false;
		s = pb->seg;
		pthread_mutex_lock(&b->st_lock);
		if (j->result == 0) {
			b->st.flushes++;
			b->st.bytes_flushed += j->hdr.valid_len;
		} else {
			b->st.flush_errors++;
		}
		pthread_mutex_unlock(&b->st_lock);
		if (j->result != 0) {
			tw_log_error("backup: flushing segment %016" PRIx64 "-%016" PRIx64 " to %s "
				     "failed: %s; the buffer is kept and the flush retried",
				     j->hdr.log_id, j->hdr.segment_id, b->cfg.dir,
				     tw_strerror(j->result));
			if (!b->flush_err)
				b->flush_err = j->result;
		}
		if (!s)
			break;
		if (j->hdr.state == SEGFILE_OPEN) {
			/* Battery flush of an open buffer: it stays open in memory. */
			if (j->result == 0) {
				s->on_disk = true;
				s->disk_open = true;
				b->index_dirty = true;
			}
			break;
		}
		if (j->result != 0 && !s->freed) {
			pb->flush_failed = true;
			if (++s->flush_tries < FLUSH_RETRIES) {
				submit_flush(b, s, false);
			} else if (!b->flush_retry) {
				/* Keep the buffer (it still counts against the unflushed limit, so
				 * opens get refused while the disk fails) and try again later. */
				b->flush_retry = true;
				b->flush_retry_ns = tw_now_ns() + FLUSH_RETRY_NS;
			}
			break;
		}
		pb->flush_failed = false;
		s->on_disk = s->on_disk || j->result == 0;
		s->disk_open = false;
		s->listed_open = false;
		b->index_dirty = true;
		if (s->freed) {
			struct job *rm = s->on_disk ? calloc(1, sizeof(*rm)) : NULL;

			if (rm) {
				rm->kind = JOB_REMOVE;
				rm->hdr.log_id = s->log_id;
				rm->hdr.segment_id = s->segment_id;
				tw__bk_submit(b, rm);
			} else if (s->on_disk) {
				/* No memory for a job: remove it here (blocking, rare), as drop_seg
				 * does, so that the freed segment does not come back on a restart. */
				int rc = tw__segfile_remove(b->dirfd, s->log_id, s->segment_id, &b->fio);

				if (rc != 0 && rc != -ENOENT)
					tw_log_warn("backup: removing freed segment %016" PRIx64
						    "-%016" PRIx64 ": %s", s->log_id, s->segment_id,
						    tw_strerror(rc));
			}
			s->buf = NULL;
			tw__bk_release_buf(b, pb);
			tw__bk_seg_delete(b, s);
			break;
		}
		s->state = SEG_FLUSHED;
		if (s->version != j->hdr.replica_version) {
			struct job *sv = calloc(1, sizeof(*sv));

			if (sv) {
				sv->kind = JOB_SETVER;
				sv->hdr.log_id = s->log_id;
				sv->hdr.segment_id = s->segment_id;
				sv->hdr.replica_version = s->version;
				tw__bk_submit(b, sv);
			}
		}
		if (s->readers > 0) {
			tw__pool_set_state(&b->pool, pb, POOL_LOADED); /* keep it for the readers */
		} else {
			s->buf = NULL;
			tw__bk_release_buf(b, pb);
		}
		break;
	}
	free(j);
}

int tw_backup_flush_all(struct tw_backup *b)
{
	unsigned n = 0;

	tw__bk_scans_settle(b); /* no close half done: its buffer is closed, or open, below */
	b->flush_err = 0;
	/* No write may land after an open buffer's scan: on a provider whose own thread moves
	 * the bytes and acknowledges them (sockets), a write acknowledged after the scan would
	 * be missing from the file. Shutting every connection first closes its endpoint, which
	 * the provider serialises with its progress thread; a primary sees its backup lost and
	 * replaces it. shm's fast path is not stopped by that (the writer copies without the
	 * target), so an open buffer is moved away from the address its writer knows before its
	 * scan, as at a fence: a later write fails and is never acknowledged (docs/fabric.md,
	 * "Passive shm backups"). */
	for (struct conn *c = b->conns; c; c = c->next) {
		if (c->ch)
			tw__chan_shut(c->ch);
		c->drop = true;
		b->reap = true;
	}
	for (size_t i = 0; i < b->nsegs; i++) {
		struct seg *s = b->segs[i];

		if (!s->buf || s->buf->in_flush)
			continue;
		if (s->state == SEG_OPEN) {
			tw__bk_fence_buf(b, s); /* shm: no write lands after the scan */
			tw__bk_scan_open(b, s);
			submit_flush(b, s, true);
			n++;
		} else if (s->state == SEG_CLOSED) {
			s->flush_tries = 0;
			submit_flush(b, s, false);
			n++;
		}
	}
	/* Wait for the flusher, applying results as they come (they may queue more jobs). */
	for (;;) {
		bool idle;

		pthread_mutex_lock(&b->fl_lock);
		while (b->jobs_pending > 0 && !b->done_head)
			pthread_cond_wait(&b->fl_done_cond, &b->fl_lock);
		idle = b->jobs_pending == 0 && !b->done_head;
		pthread_mutex_unlock(&b->fl_lock);
		if (idle)
			break;
		tw__bk_drain_done(b);
	}
	tw__bk_stats_sync(b);
	if (n)
		tw_log_info("backup: flushed %u buffers to %s%s", n, b->cfg.dir,
			    b->flush_err ? " (with errors)" : "");
	return b->flush_err;
}
