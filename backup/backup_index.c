/*
 * backup/backup_index.c — the backup's segment index (segments sorted by log and segment id,
 * and what it knows of each log) and how a restart rebuilds it: the metadata journal replayed
 * (backup/metalog.h), the storage directory scanned, and the journal rewritten when it is full.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/log_format.h>

#include "core/util.h"
#include "backup/backup_int.h"

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

/* Mark a log unavailable on this backup (a bad file about it at start): logs an error naming it
 * and the reason; later marks keep the first reason. 0 or -ENOMEM. */
static int log_unavailable(struct tw_backup *b, uint64_t log_id, const char *fmt, ...)
	TW_PRINTF(3, 4);
static int log_unavailable(struct tw_backup *b, uint64_t log_id, const char *fmt, ...)
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
		return log_unavailable(b, log_id, "%s/" METALOG_NAME " records epoch %" PRIu64
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
	rc = tw__metalog_rewrite(&b->ml, v, n, b->meta_cap);
	free(v);
	if (rc == 0)
		tw_log_info("backup: metadata journal rewritten with %zu records", n);
	return rc;
}

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
				tw__segfile_remove(b->dirfd, s->log_id, s->segment_id, &b->fio);
			tw__bk_seg_delete(b, s);
			continue;
		}
		i++;
	}
	*lost_out = lost;
	return 0;
}

/* An epoch file of Tailwind 0.1 (one file per log, a fence's epoch): the log's epoch, or the
 * log unavailable for an epoch above TW_EPOCH_MAX. 0, or a fatal error. */
static int scan_epoch_file(struct tw_backup *b, const char *name, uint64_t log_id)
{
	uint64_t file_log, epoch;
	struct logst *lg;
	int rc;

	if (tw__segfile_read_epoch(b->dirfd, name, &file_log, &epoch) != 0 ||
	    file_log != log_id) {
		tw_log_warn("backup: epoch file %s/%s is corrupt: ignored (the log's epoch falls "
			    "back to its segment files)", b->cfg.dir, name);
		return 0;
	}
	if (epoch > TW_EPOCH_MAX) {
		/* That log only: the others are served. Not ignored: a fence never
		 * goes back. */
		rc = log_unavailable(
			b, log_id, "epoch file %s/%s holds epoch %" PRIu64 ", above the "
			"maximum %" PRIu64 " (an unchecked fence of an older twd, or a "
			"damaged file): no takeover could follow it. If no primary of the "
			"log is alive, stop twd, remove the file, start twd and fence the "
			"log again (twctl fence)", b->cfg.dir, name, epoch,
			(uint64_t)TW_EPOCH_MAX);
		if (rc)
			return rc;
		return 0;
	}
	lg = tw__bk_log(b, log_id, true);
	if (!lg)
		return -ENOMEM;
	if (epoch > lg->epoch)
		lg->epoch = epoch;
	return 0;
}

/* A segment file: into the index as flushed (corrupt, kept for inspection, when it fails its
 * checks), its epoch into the log's. Counts it in *good or *bad. 0, or a fatal error. */
static int scan_segment_file(struct tw_backup *b, const char *name, uint64_t log_id,
			     uint64_t seg_id, unsigned *good, unsigned *bad)
{
	struct segfile_hdr h;
	struct seg *s;
	int rc;

	memset(&h, 0, sizeof(h));
	rc = tw__segfile_verify(b->dirfd, name, &h);
	if (rc == 0 && (h.log_id != log_id || h.segment_id != seg_id))
		rc = -TW_ECORRUPT;
	s = tw__bk_seg_insert(b, log_id, seg_id);
	if (!s)
		return -ENOMEM;
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
			    "replica", b->cfg.dir, name, tw_strerror(rc));
		(*bad)++;
	} else {
		(*good)++;
	}
	if (s->epoch > TW_EPOCH_MAX) {
		rc = log_unavailable(b, log_id, "segment file %s/%s says epoch %" PRIu64
				     ", above the maximum %" PRIu64, b->cfg.dir,
				     name, s->epoch, (uint64_t)TW_EPOCH_MAX);
		if (rc)
			return rc;
	} else if (s->epoch > 0) {
		struct logst *lg = tw__bk_log(b, log_id, true);

		if (!lg)
			return -ENOMEM;
		if (s->epoch > lg->epoch)
			lg->epoch = s->epoch;
	}
	return 0;
}

int tw__bk_rebuild_index(struct tw_backup *b)
{
	DIR *d;
	struct dirent *de;
	int dfd;
	unsigned good = 0, bad = 0, tmps = 0, lost = 0;
	struct replay rp = { .b = b };
	char why[256];
	int rc;

	rc = tw__metalog_open(&b->ml, b->fio.storage, b->dirfd, b->meta_cap, replay_rec, &rp, why,
			      sizeof(why));
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
		uint64_t log_id, seg_id;

		if (de->d_name[0] == '.')
			continue;
		if (tw__segfile_parse_epoch_name(de->d_name, &log_id)) {
			rc = scan_epoch_file(b, de->d_name, log_id);
			if (rc)
				goto out_dir;
			continue;
		}
		if (has_suffix(de->d_name, SEGFILE_SUFFIX SEGFILE_TMP_SUFFIX) ||
		    has_suffix(de->d_name, SEGFILE_EPOCH_SUFFIX SEGFILE_TMP_SUFFIX) ||
		    tw__segfile_is_spare(de->d_name)) {
			/* An interrupted flush: the buffer it came from is gone, and the final file
			 * (if any) is the previous complete version. Or a spare file of the last
			 * run (a freed segment's blocks, never read). */
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
		rc = scan_segment_file(b, de->d_name, log_id, seg_id, &good, &bad);
		if (rc)
			goto out_dir;
	}
	closedir(d);
	rc = finish_replay(b, &rp, &lost);
	if (rc == 0 && (good || bad || tmps || lost))
		tw_log_info("backup: %s: %u segment files, %u corrupt, %u leftover tmp or spare "
			    "files removed, %u segments lost", b->cfg.dir, good + bad, bad, tmps,
			    lost);
	goto out;
out_dir:
	closedir(d);
out:
	free(rp.v);
	free(rp.del);
	return rc;
}
