/*
 * backup/metalog.c — the backup's metadata journal (backup/metalog.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/common.h>
#include <tailwind/log_format.h>

#include "core/util.h"
#include "backup/metalog.h"
#include "backup/storage.h"

#define MAGIC "TWMETA1"
#define VERSION 1u
#define TMP_NAME METALOG_NAME ".tmp"

static void hdr_encode(uint8_t out[METALOG_HDR_SIZE], uint32_t cap, uint64_t gen)
{
	memset(out, 0, METALOG_HDR_SIZE);
	memcpy(out, MAGIC, sizeof(MAGIC));
	tw_store_le32(out + 8, VERSION);
	tw_store_le32(out + 12, METALOG_REC_SIZE);
	tw_store_le32(out + 16, cap);
	tw_store_le64(out + 20, gen);
	tw_store_le32(out + 60, tw_crc32c(0, out, 60));
}

static void rec_encode(uint8_t out[METALOG_REC_SIZE], const struct metalog_rec *r, uint64_t seq)
{
	memset(out, 0, METALOG_REC_SIZE);
	tw_store_le32(out, r->type);
	tw_store_le64(out + 8, seq);
	tw_store_le64(out + 16, r->log_id);
	tw_store_le64(out + 24, r->a);
	tw_store_le64(out + 32, r->b);
	tw_store_le64(out + 40, r->c);
	tw_store_le32(out + 60, tw_crc32c(0, out, 60));
}

static bool rec_decode(const uint8_t in[METALOG_REC_SIZE], uint64_t want_seq,
		       struct metalog_rec *r)
{
	uint32_t type = tw_load_le32(in);

	if (type < METALOG_OWNER || type > METALOG_DELETE)
		return false;
	if (tw_load_le32(in + 60) != tw_crc32c(0, in, 60))
		return false;
	if (tw_load_le64(in + 8) != want_seq)
		return false;
	r->type = type;
	r->log_id = tw_load_le64(in + 16);
	r->a = tw_load_le64(in + 24);
	r->b = tw_load_le64(in + 32);
	r->c = tw_load_le64(in + 40);
	return true;
}

static int create_file(const struct tw__storage *st, int dirfd, const char *name, uint32_t cap,
		       const struct metalog_rec *recs, size_t n)
{
	struct iovec iov;
	size_t size = METALOG_HDR_SIZE + (size_t)cap * METALOG_REC_SIZE;
	uint8_t *buf = calloc(1, size);
	uint64_t gen = 0;
	int fd, rc;

	if (!buf)
		return -ENOMEM;
	if (getrandom(&gen, sizeof(gen), 0) != (ssize_t)sizeof(gen))
		gen = tw_now_ns();
	hdr_encode(buf, cap, gen);
	for (size_t i = 0; i < n; i++)
		rec_encode(buf + METALOG_HDR_SIZE + i * METALOG_REC_SIZE, &recs[i], i + 1);
	fd = st->openat(st, dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(buf);
		return fd;
	}
	/* Real zeros, not a sparse file or fallocate's unwritten extents: later overwrites then
	 * change no block mapping, so an O_DSYNC write commits no file-system metadata. */
	iov = (struct iovec){ buf, size };
	rc = tw__storage_pwritev_all(st, fd, &iov, 1, 0);
	if (rc == 0)
		rc = st->fsync(st, fd);
	st->close(st, fd);
	free(buf);
	return rc;
}

static int open_fd(struct metalog *m)
{
	m->fd = m->st->openat(m->st, m->dirfd, METALOG_NAME, O_RDWR | O_DSYNC | O_CLOEXEC, 0);
	return m->fd < 0 ? m->fd : 0;
}

int tw__metalog_open(struct metalog *m, const struct tw__storage *st, int dirfd, uint32_t cap,
		     metalog_replay_fn fn, void *arg, char *why, size_t why_len)
{
	uint8_t hdr[METALOG_HDR_SIZE];
	uint8_t *recs = NULL;
	struct stat sb;
	ssize_t n;
	int rc;

	memset(m, 0, sizeof(*m));
	m->st = st = tw__storage_or_posix(st);
	m->dirfd = dirfd;
	m->fd = -1;
	if (cap < 64)
		cap = 64;
	if (faccessat(dirfd, METALOG_NAME, F_OK, 0) != 0) {
		if (errno != ENOENT) {
			rc = -errno;
			snprintf(why, why_len, "cannot access %s: %s", METALOG_NAME, strerror(errno));
			return rc;
		}
		rc = create_file(st, dirfd, TMP_NAME, cap, NULL, 0);
		if (rc == 0)
			rc = st->renameat(st, dirfd, TMP_NAME, dirfd, METALOG_NAME);
		if (rc == 0)
			rc = st->fsync(st, dirfd);
		if (rc != 0) {
			unlinkat(dirfd, TMP_NAME, 0);
			snprintf(why, why_len, "cannot create %s: %s", METALOG_NAME, strerror(-rc));
			return rc;
		}
	}
	unlinkat(dirfd, TMP_NAME, 0); /* an interrupted rewrite */
	rc = open_fd(m);
	if (rc != 0) {
		snprintf(why, why_len, "cannot open %s: %s", METALOG_NAME, strerror(-rc));
		return rc;
	}
	n = pread(m->fd, hdr, sizeof(hdr), 0);
	if (n != (ssize_t)sizeof(hdr) || memcmp(hdr, MAGIC, sizeof(MAGIC)) != 0 ||
	    tw_load_le32(hdr + 60) != tw_crc32c(0, hdr, 60)) {
		snprintf(why, why_len, "%s: bad header (not a Tailwind metadata journal, or "
			 "damaged); move it away only if this directory's logs are expendable",
			 METALOG_NAME);
		rc = -TW_ECORRUPT;
		goto fail;
	}
	if (tw_load_le32(hdr + 8) != VERSION) {
		snprintf(why, why_len, "%s: format version %u is newer than this twd's %u",
			 METALOG_NAME, tw_load_le32(hdr + 8), VERSION);
		rc = -TW_EVERSION;
		goto fail;
	}
	m->cap = tw_load_le32(hdr + 16);
	if (tw_load_le32(hdr + 12) != METALOG_REC_SIZE || m->cap == 0 || m->cap > (1u << 26) ||
	    fstat(m->fd, &sb) != 0 ||
	    (uint64_t)sb.st_size < METALOG_HDR_SIZE + (uint64_t)m->cap * METALOG_REC_SIZE) {
		snprintf(why, why_len, "%s: header and file size disagree (truncated?)",
			 METALOG_NAME);
		rc = -TW_ECORRUPT;
		goto fail;
	}
	recs = malloc((size_t)m->cap * METALOG_REC_SIZE);
	if (!recs) {
		rc = -ENOMEM;
		snprintf(why, why_len, "out of memory reading %s", METALOG_NAME);
		goto fail;
	}
	n = pread(m->fd, recs, (size_t)m->cap * METALOG_REC_SIZE, METALOG_HDR_SIZE);
	if (n != (ssize_t)((size_t)m->cap * METALOG_REC_SIZE)) {
		rc = n < 0 ? -errno : -EIO;
		snprintf(why, why_len, "cannot read %s: %s", METALOG_NAME, strerror(-rc));
		goto fail;
	}
	for (m->used = 0; m->used < m->cap; m->used++) {
		struct metalog_rec r;

		if (!rec_decode(recs + (size_t)m->used * METALOG_REC_SIZE, m->seq + 1, &r))
			break;
		m->seq++;
		if (fn) {
			rc = fn(arg, &r);
			if (rc != 0) {
				snprintf(why, why_len, "%s: record %u: %s", METALOG_NAME, m->used + 1,
					 tw_strerror(rc));
				goto fail;
			}
		}
	}
	free(recs);
	return 0;
fail:
	free(recs);
	tw__metalog_close(m);
	return rc;
}

int tw__metalog_append(struct metalog *m, const struct metalog_rec *r)
{
	uint8_t buf[METALOG_REC_SIZE];
	struct iovec iov;
	int rc;

	if (m->fd < 0)
		return -EBADF;
	if (m->used >= m->cap)
		return -ENOSPC;
	rec_encode(buf, r, m->seq + 1);
	iov = (struct iovec){ buf, sizeof(buf) };
	rc = tw__storage_pwritev_all(m->st, m->fd, &iov, 1,
				     (off_t)(METALOG_HDR_SIZE + (size_t)m->used * METALOG_REC_SIZE));
	if (rc != 0)
		return rc;
	m->used++;
	m->seq++;
	return 0;
}

int tw__metalog_rewrite(struct metalog *m, const struct metalog_rec *recs, size_t n, uint32_t cap)
{
	int rc;

	while ((size_t)cap < 2 * n + 64)
		cap *= 2;
	rc = create_file(m->st, m->dirfd, TMP_NAME, cap, recs, n);
	if (rc == 0)
		rc = m->st->renameat(m->st, m->dirfd, TMP_NAME, m->dirfd, METALOG_NAME);
	if (rc == 0)
		rc = m->st->fsync(m->st, m->dirfd);
	if (rc != 0) {
		unlinkat(m->dirfd, TMP_NAME, 0);
		return rc;
	}
	if (m->fd >= 0)
		m->st->close(m->st, m->fd);
	rc = open_fd(m);
	if (rc != 0)
		return rc;
	m->cap = cap;
	m->used = (uint32_t)n;
	m->seq = n;
	return 0;
}

void tw__metalog_close(struct metalog *m)
{
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
}
