/*
 * backup/backup.c — the backup object: life cycle, progress loop, segment index, connections,
 * the flusher thread and statistics. The RPC operations are in backup_ops.c, their wire glue in
 * backup_rpc.c, the buffer pool in pool.c and segment files in segfile.c.
 */
#include <dirent.h>
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
#include <tailwind/log_format.h>

#include "core/util.h"
#include "proto/auth.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"

#define FLUSH_RETRIES 3
#define FLUSH_RETRY_NS (5ull * 1000000000u) /* after FLUSH_RETRIES failures in a row */

static void backup_config_defaults(struct tw_backup_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->buffers = TW_BACKUP_DEFAULT_BUFFERS;
	cfg->buffer_size = TW_BACKUP_DEFAULT_BUFFER_SIZE;
	cfg->max_buffers = TW_BACKUP_DEFAULT_MAX_BUFFERS;
}

void tw_backup_config_init_sized(struct tw_backup_config *cfg, size_t size)
{
	struct tw_backup_config d;

	backup_config_defaults(&d);
	d.size = (uint32_t)size;
	tw__cfg_init_copy(cfg, size, &d, sizeof(d));
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

const char *tw_backup_rpc_name(enum tw_backup_rpc kind)
{
	/* In the order of enum tw_backup_rpc (tailwind/backup.h). */
	static const char *const names[] = {
		"handshake", "open", "close", "free", "list", "stats", "set-version", "fence",
		"read", "release", "ping", "recovered-offset", "other",
	};
	_Static_assert(TW_ARRAY_SIZE(names) == TW_BACKUP_RPC_KINDS, "a name for every kind");

	if ((unsigned)kind >= TW_BACKUP_RPC_KINDS)
		return "unknown";
	return names[kind];
}

/* ------------------------------------------------------------------ segment index */

static int seg_cmp(const struct seg *s, uint64_t log_id, uint64_t segment_id)
{
	if (s->log_id != log_id)
		return s->log_id < log_id ? -1 : 1;
	if (s->segment_id != segment_id)
		return s->segment_id < segment_id ? -1 : 1;
	return 0;
}

size_t tw__bk_seg_lower_bound(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	size_t lo = 0, hi = b->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (seg_cmp(b->segs[mid], log_id, segment_id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct seg *tw__bk_seg_find(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	size_t i = tw__bk_seg_lower_bound(b, log_id, segment_id);

	if (i < b->nsegs && seg_cmp(b->segs[i], log_id, segment_id) == 0)
		return b->segs[i];
	return NULL;
}

struct seg *tw__bk_seg_insert(struct tw_backup *b, uint64_t log_id, uint64_t segment_id)
{
	size_t i = tw__bk_seg_lower_bound(b, log_id, segment_id);
	struct seg **n, *s;

	if (i < b->nsegs && seg_cmp(b->segs[i], log_id, segment_id) == 0)
		return b->segs[i];
	n = tw__grow(b->segs, &b->segs_cap, b->nsegs, sizeof(*n), 64);
	if (!n)
		return NULL;
	b->segs = n;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->log_id = log_id;
	s->segment_id = segment_id;
	memmove(&b->segs[i + 1], &b->segs[i], (b->nsegs - i) * sizeof(*b->segs));
	b->segs[i] = s;
	b->nsegs++;
	b->index_dirty = true;
	return s;
}

void tw__bk_seg_delete(struct tw_backup *b, struct seg *s)
{
	size_t i = tw__bk_seg_lower_bound(b, s->log_id, s->segment_id);

	if (i < b->nsegs && b->segs[i] == s) {
		memmove(&b->segs[i], &b->segs[i + 1], (b->nsegs - i - 1) * sizeof(*b->segs));
		b->nsegs--;
	}
	free(s);
	b->index_dirty = true;
}

struct logst *tw__bk_log(struct tw_backup *b, uint64_t log_id, bool create)
{
	struct logst *n;

	for (size_t i = 0; i < b->nlogs; i++)
		if (b->logs[i].log_id == log_id)
			return &b->logs[i];
	if (!create)
		return NULL;
	n = tw__grow(b->logs, &b->logs_cap, b->nlogs, sizeof(*n), 16);
	if (!n)
		return NULL;
	b->logs = n;
	memset(&b->logs[b->nlogs], 0, sizeof(b->logs[b->nlogs]));
	b->logs[b->nlogs].log_id = log_id;
	return &b->logs[b->nlogs++];
}

int tw__bk_log_unavailable(struct tw_backup *b, uint64_t log_id, const char *fmt, ...)
{
	struct logst *lg = tw__bk_log(b, log_id, true);
	char why[400];
	va_list ap;

	if (!lg)
		return -ENOMEM;
	if (lg->unavail)
		return 0;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	lg->unavail = strdup(why);
	if (!lg->unavail)
		return -ENOMEM;
	tw_log_error("backup: log %016" PRIx64 " is unavailable on this backup: %s. Every request "
		     "about it is refused; the other logs are served (docs/operations.md, "
		     "\"A log unavailable at start\")", log_id, why);
	return 0;
}

size_t tw__bk_logs_unavailable(const struct tw_backup *b)
{
	size_t n = 0;

	for (size_t i = 0; i < b->nlogs; i++)
		n += b->logs[i].unavail != NULL;
	return n;
}

/* ------------------------------------------------------------------ restart: rebuild the index */

static bool has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);

	return a >= b && strcmp(s + a - b, suf) == 0;
}

/* ---- the metadata journal (backup/metalog.h) */

/* Segments the journal says were opened here (since the log's last delete). */
struct opened {
	uint64_t log_id, seg;
};

struct replay {
	struct tw_backup *b;
	struct opened *v;
	size_t n, cap;
	uint64_t *del; /* logs whose last event is a delete (files left by an interrupted one
			* are removed at the end of the replay) */
	size_t ndel, delcap;
};

static void del_forget(struct replay *rp, uint64_t log_id)
{
	for (size_t i = 0; i < rp->ndel; i++)
		if (rp->del[i] == log_id)
			rp->del[i--] = rp->del[--rp->ndel];
}

static int set_owner(struct tw_backup *b, uint64_t log_id, uint64_t epoch, uint64_t owner)
{
	struct logst *lg = tw__bk_log(b, log_id, true);

	if (!lg)
		return -ENOMEM;
	if (epoch > TW_EPOCH_MAX) {
		/* Not trusted, not dropped: a fence must never go back (a rewrite keeps it). */
		if (epoch > lg->bad_epoch)
			lg->bad_epoch = epoch;
		return tw__bk_log_unavailable(b, log_id, "%s/" METALOG_NAME " records epoch %" PRIu64
					      " for it, above the maximum %" PRIu64, b->cfg.dir,
					      epoch, (uint64_t)TW_EPOCH_MAX);
	}
	if (epoch >= lg->epoch) {
		lg->epoch = epoch;
		lg->owner = owner;
	}
	return 0;
}

static int replay_rec(void *arg, const struct metalog_rec *r)
{
	struct replay *rp = arg;
	struct tw_backup *b = rp->b;
	struct logst *lg;
	struct opened op;

	switch (r->type) {
	case METALOG_OWNER:
		return set_owner(b, r->log_id, r->a, r->b);
	case METALOG_OPEN:
		op = (struct opened){.log_id = r->log_id, .seg = r->a};
		if (tw__push(&rp->v, &rp->cap, &rp->n, sizeof(op), 64, &op))
			return -ENOMEM;
		del_forget(rp, r->log_id);
		return set_owner(b, r->log_id, r->b, r->c);
	case METALOG_FREE:
		lg = tw__bk_log(b, r->log_id, true);
		if (!lg)
			return -ENOMEM;
		if (r->a > lg->free_below)
			lg->free_below = r->a;
		return 0;
	case METALOG_DELETE:
		lg = tw__bk_log(b, r->log_id, true);
		if (!lg)
			return -ENOMEM;
		lg->free_below = 0;
		del_forget(rp, r->log_id);
		if (tw__push(&rp->del, &rp->delcap, &rp->ndel, sizeof(r->log_id), 16, &r->log_id))
			return -ENOMEM;
		/* Opens before the delete are gone with it. */
		for (size_t i = 0; i < rp->n;) {
			if (rp->v[i].log_id == r->log_id)
				rp->v[i] = rp->v[--rp->n];
			else
				i++;
		}
		for (size_t i = tw__bk_seg_lower_bound(b, r->log_id, 0);
		     i < b->nsegs && b->segs[i]->log_id == r->log_id;)
			tw__bk_seg_delete(b, b->segs[i]);
		return 0;
	default:
		return -TW_ECORRUPT;
	}
}

/* The journal's view of the state, for a rewrite: owners, freed prefixes, and the segments
 * whose bytes are not on disk yet (open, closed) or already lost. */
static int meta_compact(struct tw_backup *b)
{
	size_t n = 0, cap = 4 * b->nlogs + b->nsegs + 1;
	struct metalog_rec *v = calloc(cap, sizeof(*v));
	int rc;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < b->nlogs; i++) {
		const struct logst *lg = &b->logs[i];
		bool live = false;

		for (size_t k = tw__bk_seg_lower_bound(b, lg->log_id, 0);
		     k < b->nsegs && b->segs[k]->log_id == lg->log_id && !live; k++)
			live = !b->segs[k]->freed;
		/* A log with no live segment here (deleted, or all of it freed) may still have
		 * files whose removal is pending or failed: a DELETE first makes a restart remove
		 * them instead of serving them again; the records after it restore the epoch and
		 * the freed mark. */
		if (!live)
			v[n++] = (struct metalog_rec){ METALOG_DELETE, lg->log_id, 0, 0, 0 };
		if (lg->epoch)
			v[n++] = (struct metalog_rec){ METALOG_OWNER, lg->log_id, lg->epoch,
						       lg->owner, 0 };
		if (lg->bad_epoch) /* still unavailable after the next start */
			v[n++] = (struct metalog_rec){ METALOG_OWNER, lg->log_id, lg->bad_epoch,
						       0, 0 };
		if (lg->free_below)
			v[n++] = (struct metalog_rec){ METALOG_FREE, lg->log_id, lg->free_below, 0,
						       0 };
	}
	for (size_t i = 0; i < b->nsegs; i++) {
		const struct seg *s = b->segs[i];

		if (!s->freed && (s->state == SEG_OPEN || s->state == SEG_CLOSED ||
				  s->state == SEG_LOST))
			v[n++] = (struct metalog_rec){ METALOG_OPEN, s->log_id, s->segment_id,
						       s->epoch, 0 };
	}
	rc = tw__metalog_rewrite(&b->ml, v, n, tw__bk_meta_cap);
	free(v);
	if (rc == 0)
		tw_log_info("backup: metadata journal rewritten with %zu records", n);
	return rc;
}

uint32_t tw__bk_meta_cap = METALOG_DEFAULT_CAP;

int tw__bk_meta_append(struct tw_backup *b, const struct metalog_rec *r)
{
	int rc = tw__metalog_append(&b->ml, r);

	if (rc == -ENOSPC) {
		rc = meta_compact(b);
		if (rc == 0)
			rc = tw__metalog_append(&b->ml, r);
	}
	return rc;
}

/* After the directory scan: segments opened here that are neither in memory nor on disk are
 * LOST (the backup restarted before flushing them); files the journal freed are removed. */
static int finish_replay(struct tw_backup *b, struct replay *rp, unsigned *lost_out)
{
	unsigned lost = 0;

	for (size_t i = 0; i < rp->n; i++) {
		struct logst *lg = tw__bk_log(b, rp->v[i].log_id, false);
		struct seg *s;

		if (lg && rp->v[i].seg < lg->free_below)
			continue;
		if (tw__bk_seg_find(b, rp->v[i].log_id, rp->v[i].seg))
			continue;
		s = tw__bk_seg_insert(b, rp->v[i].log_id, rp->v[i].seg);
		if (!s)
			return -ENOMEM;
		s->state = SEG_LOST;
		s->epoch = lg ? lg->epoch : 0;
		tw_log_warn("backup: segment %016" PRIx64 "-%016" PRIx64 " was opened here but its "
			    "bytes are gone (this backup stopped without flushing it): listed as "
			    "LOST", rp->v[i].log_id, rp->v[i].seg);
		lost++;
	}
	for (size_t i = 0; i < b->nsegs;) {
		struct seg *s = b->segs[i];
		struct logst *lg = tw__bk_log(b, s->log_id, false);

		bool deleted = false;

		for (size_t k = 0; k < rp->ndel; k++)
			deleted |= rp->del[k] == s->log_id;
		if (deleted || (lg && s->segment_id < lg->free_below)) {
			/* A free or delete interrupted before its files were removed. */
			if (s->on_disk)
				tw__segfile_remove(b->dirfd, s->log_id, s->segment_id);
			tw__bk_seg_delete(b, s);
			continue;
		}
		i++;
	}
	*lost_out = lost;
	return 0;
}

static int rebuild_index(struct tw_backup *b)
{
	DIR *d;
	struct dirent *de;
	int dfd;
	unsigned good = 0, bad = 0, tmps = 0, lost = 0;
	struct replay rp = { .b = b };
	char why[256];
	int rc;

	rc = tw__metalog_open(&b->ml, b->dirfd, tw__bk_meta_cap, replay_rec, &rp, why, sizeof(why));
	if (rc != 0) {
		tw__bk_seterr(b, "storage directory %s: %s", b->cfg.dir, why);
		goto out;
	}
	dfd = dup(b->dirfd);
	if (dfd < 0) {
		rc = -errno;
		goto out;
	}
	d = fdopendir(dfd);
	if (!d) {
		rc = -errno;
		close(dfd);
		goto out;
	}
	while ((de = readdir(d)) != NULL) {
		struct segfile_hdr h;
		uint64_t log_id, seg_id;
		struct seg *s;

		if (de->d_name[0] == '.')
			continue;
		if (tw__segfile_parse_epoch_name(de->d_name, &log_id)) {
			/* A fence epoch written by Tailwind 0.1 (one file per log). */
			uint64_t file_log, epoch;
			struct logst *lg;

			if (tw__segfile_read_epoch(b->dirfd, de->d_name, &file_log, &epoch) != 0 ||
			    file_log != log_id) {
				tw_log_warn("backup: epoch file %s/%s is corrupt: ignored (the log's "
					    "epoch falls back to its segment files)", b->cfg.dir,
					    de->d_name);
				continue;
			}
			if (epoch > TW_EPOCH_MAX) {
				/* That log only: the others are served. Not ignored: a fence never
				 * goes back. */
				rc = tw__bk_log_unavailable(
					b, log_id, "epoch file %s/%s holds epoch %" PRIu64 ", above the "
					"maximum %" PRIu64 " (an unchecked fence of an older twd, or a "
					"damaged file): no takeover could follow it. If no primary of the "
					"log is alive, stop twd, remove the file, start twd and fence the "
					"log again (twctl fence)", b->cfg.dir, de->d_name, epoch,
					(uint64_t)TW_EPOCH_MAX);
				if (rc)
					goto out_dir;
				continue;
			}
			lg = tw__bk_log(b, log_id, true);
			if (!lg) {
				rc = -ENOMEM;
				goto out_dir;
			}
			if (epoch > lg->epoch)
				lg->epoch = epoch;
			continue;
		}
		if (has_suffix(de->d_name, SEGFILE_SUFFIX SEGFILE_TMP_SUFFIX) ||
		    has_suffix(de->d_name, SEGFILE_EPOCH_SUFFIX SEGFILE_TMP_SUFFIX)) {
			/* An interrupted flush: the buffer it came from is gone, and the final file
			 * (if any) is the previous complete version. */
			tw_log_info("backup: removing leftover %s/%s", b->cfg.dir, de->d_name);
			unlinkat(b->dirfd, de->d_name, 0);
			tmps++;
			continue;
		}
		if (!tw__segfile_parse_name(de->d_name, &log_id, &seg_id)) {
			if (has_suffix(de->d_name, SEGFILE_SUFFIX))
				tw_log_warn("backup: ignoring %s/%s: not a segment file name",
					    b->cfg.dir, de->d_name);
			continue;
		}
		memset(&h, 0, sizeof(h));
		rc = tw__segfile_verify(b->dirfd, de->d_name, &h);
		if (rc == 0 && (h.log_id != log_id || h.segment_id != seg_id))
			rc = -TW_ECORRUPT;
		s = tw__bk_seg_insert(b, log_id, seg_id);
		if (!s) {
			rc = -ENOMEM;
			goto out_dir;
		}
		/* A new entry (the index is empty and names are unique): what the header says of
		 * it, where the header names this segment. */
		if (rc == 0 || (rc == -TW_ECORRUPT && h.log_id == log_id && h.segment_id == seg_id))
			*s = (struct seg){
				.log_id = log_id, .segment_id = seg_id, .version = h.replica_version,
				.epoch = h.epoch, .length = h.buffer_size, .valid_len = h.valid_len,
				.entries = h.entries, .checksum = h.checksum, .seed = h.seed,
				.disk_open = h.state == SEGFILE_OPEN,
				.listed_open = h.state == SEGFILE_OPEN,
				.corrupt = (h.flags & SEGFILE_F_CORRUPT) != 0,
			};
		s->state = SEG_FLUSHED;
		s->on_disk = true;
		if (rc != 0) {
			s->corrupt = true;
			tw_log_warn("backup: segment file %s/%s is corrupt (%s): listed as corrupt, "
				    "kept for inspection (twctl inspect); recovery will use another "
				    "replica", b->cfg.dir, de->d_name, tw_strerror(rc));
			bad++;
		} else {
			good++;
		}
		if (s->epoch > TW_EPOCH_MAX) {
			rc = tw__bk_log_unavailable(b, log_id, "segment file %s/%s says epoch %" PRIu64
						    ", above the maximum %" PRIu64, b->cfg.dir,
						    de->d_name, s->epoch, (uint64_t)TW_EPOCH_MAX);
			if (rc)
				goto out_dir;
		} else if (s->epoch > 0) {
			struct logst *lg = tw__bk_log(b, log_id, true);

			if (!lg) {
				rc = -ENOMEM;
				goto out_dir;
			}
			if (s->epoch > lg->epoch)
				lg->epoch = s->epoch;
		}
	}
	closedir(d);
	rc = finish_replay(b, &rp, &lost);
	if (rc == 0 && (good || bad || tmps || lost))
		tw_log_info("backup: %s: %u segment files, %u corrupt, %u leftover tmp files removed, "
			    "%u segments lost", b->cfg.dir, good + bad, bad, tmps, lost);
	goto out;
out_dir:
	closedir(d);
out:
	free(rp.v);
	free(rp.del);
	return rc;
}

/* ------------------------------------------------------------------ connections */

struct conn *tw__bk_conn_find(struct tw_backup *b, uint64_t id)
{
	for (struct conn *c = b->conns; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

static void conn_free(struct tw_backup *b, struct conn *c, bool close_chan)
{
	struct conn **pp;

	tw__bk_readers_conn_gone(b, c);
	tw__bk_conn_release_grants(b, c);
	tw__bk_auth_conn_gone(b, c);
	for (pp = &b->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	if (c->ch) {
		tw__chan_set_user(c->ch, NULL);
		if (close_chan) {
			tw__rpc_server_on_lost(b->srv, c->ch);
			tw__chan_close(c->ch);
		}
	}
	free(c->grants);
	free(c->auth_t);
	free(c);
}

static void on_accept(void *arg, struct tw_chan *ch)
{
	struct tw_backup *b = arg;
	struct conn *c = calloc(1, sizeof(*c));

	if (!c) {
		tw_log_error("backup: out of memory accepting %s; closing it", tw__chan_peer(ch));
		tw__chan_close(ch);
		return;
	}
	c->id = ++b->next_conn_id;
	c->ch = ch;
	c->next = b->conns;
	b->conns = c;
	tw__chan_set_user(ch, c);
	tw_log_info("backup: connection %" PRIu64 " from %s", c->id, tw__chan_peer(ch));
	pthread_mutex_lock(&b->st_lock);
	b->st.connections++;
	pthread_mutex_unlock(&b->st_lock);
}

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_backup *b = arg;
	struct conn *c = tw__chan_user(ch);

	if (!c || c->lost || c->drop)
		return;
	tw__bk_rpc_recv(b, c, msg, len);
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct conn *c = tw__chan_user(ch);

	if (!c)
		return;
	tw_log_info("backup: connection %" PRIu64 " (%s) lost: %s", c->id, tw__chan_peer(ch),
		    tw_strerror(err));
	c->lost = true;
	((struct tw_backup *)arg)->reap = true;
}

/* Close what was lost or dropped, outside fabric callbacks. */
static void reap_conns(struct tw_backup *b)
{
	struct conn *c = b->conns, *next;

	if (!b->reap)
		return;
	b->reap = false;
	for (; c; c = next) {
		next = c->next;
		if (!c->lost && !c->drop)
			continue;
		pthread_mutex_lock(&b->st_lock);
		if (c->lost)
			b->st.connections_lost++;
		else
			b->st.connections_dropped++;
		pthread_mutex_unlock(&b->st_lock);
		conn_free(b, c, true);
	}
}

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
		j->result = tw__segfile_remove(b->dirfd, j->hdr.log_id, j->hdr.segment_id);
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

static void *flusher_main(void *arg)
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
	return NULL;
}

/* Take the finished jobs and apply them (progress / owner thread). */
static unsigned drain_done(struct tw_backup *b)
{
	struct job *j;
	unsigned n = 0;

	pthread_mutex_lock(&b->fl_lock);
	j = b->done_head;
	b->done_head = b->done_tail = NULL;
	pthread_mutex_unlock(&b->fl_lock);
	while (j) {
		struct job *next = j->next;

		tw__bk_job_done(b, j);
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

/* ------------------------------------------------------------------ statistics */

static enum tw_backup_rpc rpc_kind_of_op(int op)
{
	switch (op) {
	case TW_RPC_HANDSHAKE: return TW_BACKUP_RPC_HANDSHAKE;
	case TW_RPC_OPEN_SEGMENT: return TW_BACKUP_RPC_OPEN;
	case TW_RPC_CLOSE_SEGMENT: return TW_BACKUP_RPC_CLOSE;
	case TW_RPC_LIST_SEGMENTS: return TW_BACKUP_RPC_LIST;
	case TW_RPC_SET_REPLICA_VERSION: return TW_BACKUP_RPC_SET_VERSION;
	case TW_RPC_FENCE: return TW_BACKUP_RPC_FENCE;
	case TW_RPC_FREE_SEGMENTS: return TW_BACKUP_RPC_FREE;
	case TW_RPC_READ_SEGMENT: return TW_BACKUP_RPC_READ;
	case TW_RPC_RELEASE_SEGMENT: return TW_BACKUP_RPC_RELEASE;
	case TW_RPC_STATS: return TW_BACKUP_RPC_STATS;
	case TW_RPC_PING: return TW_BACKUP_RPC_PING;
	case TW_RPC_RECOVERED_OFFSET: return TW_BACKUP_RPC_RECOVERED;
	default: return TW_BACKUP_RPC_OTHER;
	}
}

void tw__bk_stats_sync(struct tw_backup *b)
{
	struct tw_fab_stats fs;
	struct tw_rpc_server_stats rs;
	struct tw_backup_stats *st = &b->st;
	uint64_t on_disk = 0, corrupt = 0;
	bool recount = b->index_dirty;

	tw__fab_get_stats(b->fab, &fs);
	if (b->srv)
		tw__rpc_server_get_stats(b->srv, &rs);
	else
		memset(&rs, 0, sizeof(rs));
	if (recount) {
		for (size_t i = 0; i < b->nsegs; i++) {
			on_disk += b->segs[i]->on_disk;
			corrupt += b->segs[i]->corrupt;
		}
		b->index_dirty = false;
	}

	pthread_mutex_lock(&b->st_lock);
	memset(st->rpc_calls, 0, sizeof(st->rpc_calls));
	st->handler_calls = 0;
	st->rpc_errors = 0;
	for (int op = 0; op < TW_RPC_OP_COUNT; op++) {
		st->rpc_calls[rpc_kind_of_op(op)] += rs.calls[op];
		st->handler_calls += rs.calls[op];
		st->rpc_errors += rs.errors[op];
	}
	st->rpc_calls[TW_BACKUP_RPC_OTHER] += rs.malformed + rs.unsupported;
	st->handler_calls += rs.malformed + rs.unsupported;
	st->rpc_errors += rs.malformed + rs.unsupported;
	st->ctrl_msgs_in = rs.msgs_rx;
	st->ctrl_bytes_in = rs.bytes_rx;
	st->ctrl_msgs_out = rs.msgs_tx;
	st->ctrl_bytes_out = rs.bytes_tx;
	st->cq_polls = fs.cq_polls;
	st->cq_entries = fs.cq_entries;
	st->buffers = b->pool.n;
	st->buffers_max = b->pool.max;
	st->buffers_grown = b->pool.grown;
	st->buffer_size = b->pool.size;
	st->unflushed_limit = b->cfg.unflushed_limit;
	st->buffers_free = b->pool.count[POOL_FREE];
	st->buffers_open = b->pool.count[POOL_OPEN];
	st->buffers_closed = b->pool.count[POOL_CLOSED];
	st->buffers_loaded = b->pool.count[POOL_LOADED];
	st->buffers_zeroing = b->pool.count[POOL_ZEROING];
	st->set_acked = b->set_acked_served;
	st->set_acked_held = b->set_acked_held;
	st->set_acked_holding = b->naholds;
	if (recount) {
		st->segments_on_disk = on_disk;
		st->segments_corrupt = corrupt;
	}
	pthread_mutex_unlock(&b->st_lock);
}

static void backup_stats(const struct tw_backup *b, struct tw_backup_stats *out)
{
	struct tw_backup *mb = (struct tw_backup *)b; /* the lock is the only thing we change */
	struct rusage ru;

	pthread_mutex_lock(&mb->st_lock);
	*out = b->st;
	pthread_mutex_unlock(&mb->st_lock);
	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		out->cpu_user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000u +
				   (uint64_t)ru.ru_utime.tv_usec;
		out->cpu_sys_us = (uint64_t)ru.ru_stime.tv_sec * 1000000u +
				  (uint64_t)ru.ru_stime.tv_usec;
	}
}

void tw_backup_get_stats_sized(const struct tw_backup *b, struct tw_backup_stats *out, size_t size)
{
	struct tw_backup_stats full;

	backup_stats(b, &full);
	tw__out_copy(out, size, &full, sizeof(full));
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

int tw_backup_open(const struct tw_backup_config *cfg, struct tw_backup **out)
{
	struct tw_backup *b;
	struct tw_fab_config fc;
	struct tw_fab_events ev;
	char why[256];
	int rc;

	*out = NULL;
	rc = check_config(cfg, why, sizeof(why));
	if (rc != 0) {
		tw_log_error("backup: %s", why);
		return rc;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cfg = *cfg;
	b->dirfd = -1;
	b->ml.fd = -1;
	pthread_mutex_init(&b->fl_lock, NULL);
	pthread_cond_init(&b->fl_cond, NULL);
	pthread_cond_init(&b->fl_done_cond, NULL);
	pthread_mutex_init(&b->st_lock, NULL);
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
	rc = rebuild_index(b);
	if (rc != 0) {
		if (!b->errmsg[0])
			tw__bk_seterr(b, "cannot read storage directory %s: %s", b->cfg.dir,
				  tw_strerror(rc));
		goto fail_logged;
	}

	tw__fab_config_init(&fc);
	fc.provider = b->cfg.provider;
	fc.node = b->cfg.node;
	fc.service = b->cfg.service;
	fc.busy_poll = b->cfg.busy_poll;
	memset(&ev, 0, sizeof(ev));
	ev.arg = b;
	ev.on_accept = on_accept;
	ev.on_recv = on_recv;
	ev.on_lost = on_lost;
	rc = tw__fab_open(&fc, &ev, &b->fab);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot open the fabric (provider %s): %s",
			  fc.provider ? fc.provider : "default", tw_strerror(rc));
		goto fail_logged;
	}
	rc = tw__pool_init(&b->pool, b->fab, b->cfg.buffers, b->cfg.max_buffers, b->cfg.buffer_size);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot allocate and register %u buffers of %zu bytes: %s%s",
			  b->cfg.buffers, b->cfg.buffer_size, tw_strerror(rc),
			  rc == -ENOMEM || rc == -EAGAIN ?
			  " (lower --buffers/--buffer-size; on verbs raise RLIMIT_MEMLOCK: "
			  "ulimit -l unlimited, or LimitMEMLOCK=infinity for a systemd unit)" : "");
		goto fail_logged;
	}
	rc = tw__bk_rpc_init(b);
	if (rc != 0) {
		tw__bk_seterr(b, "cannot create the RPC server: %s", tw_strerror(rc));
		goto fail_logged;
	}
	rc = pthread_create(&b->flusher, NULL, flusher_main, b);
	if (rc != 0) {
		rc = -rc;
		tw__bk_seterr(b, "cannot start the flusher thread: %s", strerror(-rc));
		goto fail_logged;
	}
	b->flusher_started = true;
	rc = tw__fab_listen(b->fab, b->addr, sizeof(b->addr));
	if (rc != 0) {
		tw__bk_seterr(b, "cannot listen on %s:%s: %s (%s)", fc.node ? fc.node : "default",
			  fc.service ? fc.service : "ephemeral", tw_strerror(rc),
			  tw__fab_errmsg(b->fab));
		goto fail_logged;
	}
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
	tw_backup_close(b);
	return rc;
}

void tw_backup_stop(struct tw_backup *b)
{
	atomic_store(&b->stop, true);
	if (b->fab)
		tw__fab_wakeup(b->fab);
}

static void retry_failed_flushes(struct tw_backup *b);

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
		if (drain_done(b))
			busy = true;
		tw__bk_auth_sweep(b);
		reap_conns(b);
		if (b->flush_retry && tw_now_ns() >= b->flush_retry_ns)
			retry_failed_flushes(b);
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

static void retry_failed_flushes(struct tw_backup *b)
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

void tw__bk_job_done(struct tw_backup *b, struct job *j)
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
				int rc = tw__segfile_remove(b->dirfd, s->log_id, s->segment_id);

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

	b->flush_err = 0;
	/* No write may land after an open buffer's scan: on a provider whose own thread moves
	 * the bytes and acknowledges them (sockets), a write acknowledged after the scan would
	 * be missing from the file. Shutting every connection first closes its endpoint, which
	 * the provider serialises with its progress thread; a primary sees its backup lost and
	 * replaces it. (shm's opt-in fast path is not stopped by this: the writer copies
	 * without the target; docs/fabric.md, "Passive shm backups".) */
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
		drain_done(b);
	}
	tw__bk_stats_sync(b);
	if (n)
		tw_log_info("backup: flushed %u buffers to %s%s", n, b->cfg.dir,
			    b->flush_err ? " (with errors)" : "");
	return b->flush_err;
}

void tw_backup_close(struct tw_backup *b)
{
	if (!b)
		return;
	if (b->flusher_started) {
		pthread_mutex_lock(&b->fl_lock);
		b->fl_quit = true;
		pthread_cond_signal(&b->fl_cond);
		pthread_mutex_unlock(&b->fl_lock);
		pthread_join(b->flusher, NULL);
		b->flusher_started = false;
	}
	while (b->conns)
		conn_free(b, b->conns, false); /* tw__fab_close closes the channels */
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
	free(b->strs);
	free(b);
}
