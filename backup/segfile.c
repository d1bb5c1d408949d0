/*
 * backup/segfile.c — segment files: encode/decode, durable write, validated read.
 * See segfile.h for the layout.
 */
#include "backup/segfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <tailwind/log_format.h>

#include "backup/storage.h"
#include "core/util.h"

/*
 * The header's fields after magic, version and data offset, in file order from byte 12 with no
 * gap (segfile.h has the layout): each little-endian in as many bytes as its member of struct
 * segfile_hdr has (4 or 8). One list for encode and decode. Version 2 and 3 files end with
 * flush_time_ns: seed came with version 4, and decode leaves it 0 in older files.
 */
#define HDR_FIELDS(F)                                                                          \
	F(flags) F(log_id) F(segment_id) F(replica_version) F(epoch) F(state) F(checksum)      \
	F(valid_len) F(entries) F(buffer_size) F(flush_time_ns) F(seed)
#define HDR_FIELDS_OFF 12
#define HDR_FIELDS_V3 11 /* all but seed */
#define MEMBER_SIZE(m) sizeof(((struct segfile_hdr *)0)->m)

static const struct hdr_field {
	uint8_t size;
	uint8_t member; /* offsetof(struct segfile_hdr, ...) */
} hdr_fields[] = {
#define F(m) {MEMBER_SIZE(m), offsetof(struct segfile_hdr, m)},
	HDR_FIELDS(F)
#undef F
};
#define F(m) +MEMBER_SIZE(m)
_Static_assert(HDR_FIELDS_OFF HDR_FIELDS(F) == 92, "the fields end at byte 92 (segfile.h)");
#undef F
_Static_assert(sizeof(struct segfile_hdr) <= UINT8_MAX, "hdr_field.member holds an offset");

void tw__segfile_hdr_encode(const struct segfile_hdr *h, uint8_t out[SEGFILE_HDR_SIZE])
{
	memset(out, 0, SEGFILE_HDR_SIZE);
	memcpy(out, SEGFILE_MAGIC, 8); /* includes the NUL */
	tw_store_le16(out + 8, SEGFILE_VERSION);
	tw_store_le16(out + 10, SEGFILE_DATA_OFF);
	for (size_t i = 0, off = HDR_FIELDS_OFF; i < TW_ARRAY_SIZE(hdr_fields); i++) {
		const struct hdr_field *f = &hdr_fields[i];
		const void *m = (const uint8_t *)h + f->member;

		if (f->size == 8)
			tw_store_le64(out + off, *(const uint64_t *)m);
		else
			tw_store_le32(out + off, *(const uint32_t *)m);
		off += f->size;
	}
	tw_store_le32(out + 124, tw_crc32c(0, out, 124));
}

int tw__segfile_hdr_decode(const uint8_t in[SEGFILE_HDR_SIZE], struct segfile_hdr *h)
{
	if (memcmp(in, SEGFILE_MAGIC, 8) != 0)
		return -TW_ECORRUPT;
	if (tw_load_le32(in + 124) != tw_crc32c(0, in, 124))
		return -TW_ECORRUPT;
	uint16_t version = tw_load_le16(in + 8), off = tw_load_le16(in + 10);

	if (version > SEGFILE_VERSION)
		return -TW_EVERSION;
	if (version < SEGFILE_VERSION_V2)
		return -TW_ECORRUPT; /* never written by a released twd */
	if (off != (version == SEGFILE_VERSION_V2 ? SEGFILE_HDR_SIZE : SEGFILE_DATA_OFF))
		return -TW_ECORRUPT;
	memset(h, 0, sizeof(*h));
	h->version = version;
	h->data_off = off;
	size_t n = version < SEGFILE_VERSION ? HDR_FIELDS_V3 : TW_ARRAY_SIZE(hdr_fields);

	for (size_t i = 0, at = HDR_FIELDS_OFF; i < n; i++) {
		const struct hdr_field *f = &hdr_fields[i];
		void *m = (uint8_t *)h + f->member;

		if (f->size == 8)
			*(uint64_t *)m = tw_load_le64(in + at);
		else
			*(uint32_t *)m = tw_load_le32(in + at);
		at += f->size;
	}
	if (h->state != SEGFILE_CLOSED && h->state != SEGFILE_OPEN)
		return -TW_ECORRUPT;
	if (h->valid_len > h->buffer_size ||
	    h->valid_len > (uint64_t)SIZE_MAX - SEGFILE_DATA_OFF - SEGFILE_BLOCK)
		return -TW_ECORRUPT;
	return 0;
}

static uint64_t round_block(uint64_t n)
{
	return (n + SEGFILE_BLOCK - 1) / SEGFILE_BLOCK * SEGFILE_BLOCK;
}

uint64_t tw__segfile_file_size(const struct segfile_hdr *h)
{
	if (h->version == SEGFILE_VERSION_V2)
		return h->data_off + h->valid_len;
	return h->data_off + round_block(h->valid_len);
}

void tw__segfile_name(uint64_t log_id, uint64_t segment_id, char *out, size_t len)
{
	snprintf(out, len, "%016" PRIx64 "-%016" PRIx64 SEGFILE_SUFFIX, log_id, segment_id);
}

static bool parse_hex16(const char *s, uint64_t *v)
{
	uint64_t x = 0;

	for (int i = 0; i < 16; i++) {
		char c = s[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return false;
		x = (x << 4) | d;
	}
	*v = x;
	return true;
}

bool tw__segfile_parse_name(const char *name, uint64_t *log_id, uint64_t *segment_id)
{
	if (strlen(name) != 33 + strlen(SEGFILE_SUFFIX))
		return false;
	if (name[16] != '-' || strcmp(name + 33, SEGFILE_SUFFIX) != 0)
		return false;
	return parse_hex16(name, log_id) && parse_hex16(name + 17, segment_id);
}

/* The file is shorter than its header says: corrupt. */
static int read_all(int fd, void *buf, size_t len, off_t off)
{
	int rc = tw__pread_all(fd, buf, len, off);

	return rc == -ENODATA ? -TW_ECORRUPT : rc;
}

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The header block and the zero-padded last partial block of the data, aligned for O_DIRECT. */
struct wblocks {
	_Alignas(SEGFILE_BLOCK) uint8_t hdr[SEGFILE_BLOCK];
	_Alignas(SEGFILE_BLOCK) uint8_t tail[SEGFILE_BLOCK];
};

/* Header block, the data's whole blocks straight from `data`, the tail block: 2 or 3 vectors. */
static int file_iov(struct wblocks *wb, const void *data, uint64_t valid_len,
		    struct iovec iov[3])
{
	size_t body = (size_t)(valid_len / SEGFILE_BLOCK * SEGFILE_BLOCK);
	size_t rest = (size_t)valid_len - body;
	int n = 0;

	iov[n].iov_base = wb->hdr;
	iov[n++].iov_len = SEGFILE_BLOCK;
	if (body > 0) {
		iov[n].iov_base = (void *)(uintptr_t)data;
		iov[n++].iov_len = body;
	}
	if (rest > 0) {
		memcpy(wb->tail, (const uint8_t *)data + body, rest);
		memset(wb->tail + rest, 0, SEGFILE_BLOCK - rest);
		iov[n].iov_base = wb->tail;
		iov[n++].iov_len = SEGFILE_BLOCK;
	}
	return n;
}

/* Refused O_DIRECT: note it for the caller (reported once per directory) and go buffered. */
static void direct_refused(struct segfile_io *io, int err)
{
	io->buffered = true;
	if (!io->direct_err)
		io->direct_err = err;
}

static void spare_name(uint32_t n, char *out, size_t len)
{
	snprintf(out, len, "%08" PRIx32 SEGFILE_SPARE_SUFFIX, n);
}

bool tw__segfile_is_spare(const char *name)
{
	size_t n = strlen(name), k = strlen(SEGFILE_SPARE_SUFFIX);

	return n > k && strcmp(name + n - k, SEGFILE_SPARE_SUFFIX) == 0;
}

/* Open the tmp file `tmp` for writing: a spare of `io` renamed to it when there is one (not
 * truncated: its blocks are overwritten; *spare_size is its size), else a new file (size 0).
 * The fd or -errno. */
static int open_tmp(const struct tw__storage *st, int dirfd, const char *tmp, int flags,
		    struct segfile_io *io, uint64_t *spare_size)
{
	*spare_size = 0;
	while (io && io->n_spare) {
		char sp[SEGFILE_NAME_MAX];
		unsigned k = --io->n_spare;
		int fd;

		spare_name(io->spare_id[k], sp, sizeof(sp));
		if (st->renameat(st, dirfd, sp, dirfd, tmp) != 0) {
			unlinkat(dirfd, sp, 0); /* not usable: forget it */
			continue;
		}
		fd = st->openat(st, dirfd, tmp, (flags & ~(O_CREAT | O_TRUNC)), 0644);
		if (fd >= 0) {
			*spare_size = io->spare_size[k];
			__atomic_store_n(&io->recycled_files, io->recycled_files + 1,
					 __ATOMIC_RELAXED);
			return fd;
		}
		unlinkat(dirfd, tmp, 0);
		if (fd == -EINVAL && (flags & O_DIRECT))
			return fd; /* O_DIRECT refused: the caller goes buffered and comes back */
	}
	return st->openat(st, dirfd, tmp, flags, 0644);
}

int tw__segfile_write(int dirfd, const struct segfile_hdr *h, const void *data,
		  struct segfile_io *io)
{
	char name[SEGFILE_NAME_MAX], tmp[SEGFILE_NAME_MAX + 8];
	struct wblocks wb;
	struct segfile_io local = { 0 };
	const struct tw__storage *st;
	struct segfile_hdr hh = *h;
	struct iovec iov[3];
	uint64_t size = 0, spare = 0;
	bool direct;
	int fd = -1, rc = 0, n;

	if (!io)
		io = &local;
	st = tw__storage_or_posix(io->storage);
	direct = !io->buffered && ((uintptr_t)data % SEGFILE_BLOCK) == 0;
	tw__segfile_name(h->log_id, h->segment_id, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "%s" SEGFILE_TMP_SUFFIX, name);
	if (hh.flush_time_ns == 0)
		hh.flush_time_ns = wall_ns();
	memset(wb.hdr, 0, sizeof(wb.hdr));
	tw__segfile_hdr_encode(&hh, wb.hdr);

	if (direct) {
		/* O_DIRECT: the data goes from the buffer to the device, no copy into the page
		 * cache (and no page cache to drop). tmpfs before Linux 6.6 and some other
		 * file systems refuse it at open with EINVAL. */
		fd = open_tmp(st, dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, io,
			      &spare);
		if (fd == -EINVAL) {
			direct_refused(io, fd);
			direct = false;
		} else if (fd < 0) {
			rc = fd;
		}
	}
	if (rc == 0 && fd < 0) {
		fd = open_tmp(st, dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, io, &spare);
		if (fd < 0)
			rc = fd;
	}
	if (rc == 0) {
		n = file_iov(&wb, data, h->valid_len, iov);
		for (int i = 0; i < n; i++)
			size += iov[i].iov_len;
		rc = tw__storage_pwritev_all(st, fd, iov, n, 0);
	}
	if (rc == -EINVAL && direct && fd >= 0) {
		/* Accepted at open, refused at the write (an alignment the file system does not
		 * support): clear O_DIRECT and write the whole file again, buffered. */
		int fl = fcntl(fd, F_GETFL);

		direct_refused(io, rc);
		direct = false;
		rc = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0 ? -errno : 0;
		if (rc == 0) {
			n = file_iov(&wb, data, h->valid_len, iov);
			rc = tw__storage_pwritev_all(st, fd, iov, n, 0);
		}
	}
	/* A spare longer than this file: cut its tail, so that the size says where the data ends. */
	if (rc == 0 && spare > size && ftruncate(fd, (off_t)size) != 0)
		rc = -errno;
	/* fdatasync: the data, and the size and block allocation needed to read it back (a new
	 * file: this is a journal commit on ext4 and xfs; an overwritten spare of the same size
	 * needs none); not the timestamps. */
	if (rc == 0)
		rc = st->fdatasync(st, fd);
	if (fd >= 0) {
		int crc = st->close(st, fd);

		if (rc == 0)
			rc = crc;
	}
	fd = -1;
	if (rc == 0)
		rc = st->renameat(st, dirfd, tmp, dirfd, name);
	if (rc != 0) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	if (direct)
		io->direct_files++;
	else
		io->buffered_files++;
	rc = st->fsync(st, dirfd);
	/* The final file is in place; a failed directory fsync means the rename may not survive
	 * a crash, so report it (the caller keeps the buffer and retries). */
	return rc;
}

static int open_and_header(int dirfd, const char *name, struct segfile_hdr *h, int *fd_out)
{
	uint8_t hdr[SEGFILE_HDR_SIZE];
	struct stat st;
	int fd, rc;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto fail;
	}
	if ((uint64_t)st.st_size < SEGFILE_HDR_SIZE) {
		rc = -TW_ECORRUPT;
		goto fail;
	}
	rc = read_all(fd, hdr, sizeof(hdr), 0);
	if (rc != 0)
		goto fail;
	rc = tw__segfile_hdr_decode(hdr, h);
	if (rc != 0)
		goto fail;
	if ((uint64_t)st.st_size != tw__segfile_file_size(h)) {
		rc = -TW_ECORRUPT;
		goto fail;
	}
	*fd_out = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

int tw__segfile_read_header(int dirfd, const char *name, struct segfile_hdr *h)
{
	int fd, rc;

	rc = open_and_header(dirfd, name, h, &fd);
	if (rc == 0)
		close(fd);
	return rc;
}

static int check_data(const void *buf, const struct segfile_hdr *h)
{
	struct tw_scan_result sr;

	tw_scan_seeded(buf, (size_t)h->valid_len, h->seed, &sr);
	if (sr.valid_len != h->valid_len || sr.last_checksum != h->checksum ||
	    sr.entries != h->entries)
		return -TW_ECORRUPT;
	return 0;
}

int tw__segfile_load(int dirfd, const char *name, void *buf, size_t cap, struct segfile_hdr *h)
{
	int fd, rc;

	rc = open_and_header(dirfd, name, h, &fd);
	if (rc != 0)
		return rc;
	if (h->valid_len > cap) {
		close(fd);
		return -EFBIG;
	}
	rc = read_all(fd, buf, (size_t)h->valid_len, h->data_off);
	close(fd);
	if (rc != 0)
		return rc;
	return check_data(buf, h);
}

int tw__segfile_verify(int dirfd, const char *name, struct segfile_hdr *h)
{
	void *buf;
	int fd, rc;

	rc = open_and_header(dirfd, name, h, &fd);
	if (rc != 0)
		return rc;
	buf = malloc(h->valid_len ? (size_t)h->valid_len : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	rc = read_all(fd, buf, (size_t)h->valid_len, h->data_off);
	close(fd);
	if (rc == 0)
		rc = check_data(buf, h);
	free(buf);
	return rc;
}

int tw__segfile_inspect(int fd, struct segfile_report *r)
{
	uint8_t hb[SEGFILE_HDR_SIZE];
	struct stat st;
	int rc;

	memset(r, 0, sizeof(*r));
	if (fstat(fd, &st) != 0)
		return -errno;
	r->file_size = (uint64_t)st.st_size;
	if (r->file_size < SEGFILE_HDR_SIZE) {
		r->short_file = true;
		r->corrupt = true;
		snprintf(r->why, sizeof(r->why), "%" PRIu64 " bytes, shorter than a segment file "
			 "header (%u bytes)", r->file_size, SEGFILE_HDR_SIZE);
		return 0;
	}
	rc = tw__pread_all(fd, hb, sizeof(hb), 0);
	if (rc == -ENODATA) { /* shrunk since the fstat */
		r->short_file = true;
		r->corrupt = true;
		snprintf(r->why, sizeof(r->why), "shorter than a segment file header");
		return 0;
	}
	if (rc)
		return rc;
	r->version_field = tw_load_le16(hb + 8);
	r->hdr_rc = tw__segfile_hdr_decode(hb, &r->h);
	r->data_off = r->hdr_rc == 0 ? r->h.data_off :
		      r->version_field == SEGFILE_VERSION_V2 || r->file_size < SEGFILE_DATA_OFF ?
		      SEGFILE_HDR_SIZE : SEGFILE_DATA_OFF;
	r->data_len = r->file_size > r->data_off ? r->file_size - r->data_off : 0;
	if (r->data_len > SIZE_MAX - 1)
		return -EFBIG;
	r->data = malloc(r->data_len ? (size_t)r->data_len : 1);
	if (!r->data)
		return -ENOMEM;
	rc = r->data_len ? tw__pread_all(fd, r->data, (size_t)r->data_len, (off_t)r->data_off) : 0;
	if (rc == -ENODATA) { /* shrunk since the fstat: check what is there */
		r->data_len = 0;
		rc = 0;
	}
	if (rc) {
		free(r->data);
		r->data = NULL;
		return rc;
	}
	/* The header's chain seed (0 for format 2 and 3 files, and when the header is invalid
	 * before the seed was read): the data was written with it (docs/log-format.md §4). */
	tw_scan_seeded(r->data, (size_t)r->data_len, r->h.seed, &r->scan);
	r->corrupt = true;
	if (r->hdr_rc)
		snprintf(r->why, sizeof(r->why), "header: %s", r->hdr_rc == -TW_EVERSION ?
			 "newer format version" : "bad magic, header CRC, state or sizes");
	else if (r->file_size < r->data_off)
		snprintf(r->why, sizeof(r->why), "truncated: the file has %" PRIu64 " bytes, its "
			 "data would start at byte %" PRIu64 " (header says %" PRIu64 " data bytes)",
			 r->file_size, r->data_off, r->h.valid_len);
	else if (r->file_size != tw__segfile_file_size(&r->h))
		snprintf(r->why, sizeof(r->why), "file holds %" PRIu64 " data bytes, header says %"
			 PRIu64 "%s", r->data_len, r->h.valid_len,
			 r->h.version == SEGFILE_VERSION_V2 ? "" : " (padded to 4096-byte blocks)");
	else if (r->scan.valid_len != r->h.valid_len || r->scan.last_checksum != r->h.checksum ||
		 r->scan.entries != r->h.entries)
		snprintf(r->why, sizeof(r->why), "scan: valid %zu bytes, checksum 0x%08x, %" PRIu64
			 " entries; header: %" PRIu64 " bytes, 0x%08x, %" PRIu64 " entries",
			 r->scan.valid_len, r->scan.last_checksum, r->scan.entries, r->h.valid_len,
			 r->h.checksum, r->h.entries);
	else if (r->h.flags & SEGFILE_F_CORRUPT)
		snprintf(r->why, sizeof(r->why), "flagged corrupt when it was closed");
	else
		r->corrupt = false;
	return 0;
}

int tw__segfile_remove(int dirfd, uint64_t log_id, uint64_t segment_id,
		       const struct segfile_io *io)
{
	const struct tw__storage *st = tw__storage_or_posix(io ? io->storage : NULL);
	char name[SEGFILE_NAME_MAX];
	int rc;

	tw__segfile_name(log_id, segment_id, name, sizeof(name));
	rc = st->unlinkat(st, dirfd, name, 0);
	return rc ? rc : st->fsync(st, dirfd);
}

int tw__segfile_recycle(int dirfd, uint64_t log_id, uint64_t segment_id, struct segfile_io *io)
{
	const struct tw__storage *st = tw__storage_or_posix(io ? io->storage : NULL);
	char name[SEGFILE_NAME_MAX], sp[SEGFILE_NAME_MAX];
	struct stat sb;
	int rc;

	if (!io || io->n_spare >= SEGFILE_SPARES)
		return tw__segfile_remove(dirfd, log_id, segment_id, io);
	tw__segfile_name(log_id, segment_id, name, sizeof(name));
	if (fstatat(dirfd, name, &sb, 0) != 0)
		return -errno;
	spare_name(io->next_spare, sp, sizeof(sp));
	rc = st->renameat(st, dirfd, name, dirfd, sp);
	if (rc != 0)
		return rc;
	io->spare_id[io->n_spare] = io->next_spare++;
	io->spare_size[io->n_spare++] = (uint64_t)sb.st_size;
	__atomic_store_n(&io->spared_files, io->spared_files + 1, __ATOMIC_RELAXED);
	return st->fsync(st, dirfd);
}

void tw__segfile_drop_spares(int dirfd, struct segfile_io *io)
{
	char sp[SEGFILE_NAME_MAX];

	while (io->n_spare) {
		spare_name(io->spare_id[--io->n_spare], sp, sizeof(sp));
		unlinkat(dirfd, sp, 0);
	}
}

int tw__segfile_set_version(int dirfd, uint64_t log_id, uint64_t segment_id, uint64_t version,
			struct segfile_io *io)
{
	char name[SEGFILE_NAME_MAX];
	struct segfile_hdr h;
	void *buf;
	int fd, rc;

	tw__segfile_name(log_id, segment_id, name, sizeof(name));
	rc = open_and_header(dirfd, name, &h, &fd);
	if (rc != 0)
		return rc;
	/* Block aligned, so the rewrite goes out with O_DIRECT like a flush. */
	buf = aligned_alloc(SEGFILE_BLOCK, (size_t)round_block(h.valid_len ? h.valid_len : 1));
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	rc = read_all(fd, buf, (size_t)h.valid_len, h.data_off);
	close(fd);
	if (rc == 0)
		rc = check_data(buf, &h);
	if (rc == 0 && h.replica_version != version) {
		h.replica_version = version;
		h.flush_time_ns = 0;
		rc = tw__segfile_write(dirfd, &h, buf, io);
	}
	free(buf);
	return rc;
}

/* ---- fence epochs: "<log_id hex16>.twepoch" = magic u32, log_id u64, epoch u64, CRC32C u32 */

#define EPOCH_MAGIC 0x48435045u /* "EPCH" */
#define EPOCH_FILE_SIZE 24u

void tw__segfile_epoch_name(uint64_t log_id, char *out, size_t len)
{
	snprintf(out, len, "%016" PRIx64 SEGFILE_EPOCH_SUFFIX, log_id);
}

bool tw__segfile_parse_epoch_name(const char *name, uint64_t *log_id)
{
	if (strlen(name) != 16 + strlen(SEGFILE_EPOCH_SUFFIX))
		return false;
	if (strcmp(name + 16, SEGFILE_EPOCH_SUFFIX) != 0)
		return false;
	return parse_hex16(name, log_id);
}

int tw__segfile_write_epoch(int dirfd, uint64_t log_id, uint64_t epoch)
{
	char name[SEGFILE_NAME_MAX], tmp[SEGFILE_NAME_MAX + 8];
	uint8_t buf[EPOCH_FILE_SIZE];
	int fd, rc = 0;

	tw__segfile_epoch_name(log_id, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "%s" SEGFILE_TMP_SUFFIX, name);
	tw_store_le32(buf, EPOCH_MAGIC);
	tw_store_le64(buf + 4, log_id);
	tw_store_le64(buf + 12, epoch);
	tw_store_le32(buf + 20, tw_crc32c(0, buf, 20));
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	rc = tw__pwrite_all(fd, buf, sizeof(buf), 0); /* a new, truncated file */
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
		rc = -errno;
	if (rc != 0) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	return fsync(dirfd) != 0 ? -errno : 0;
}

int tw__segfile_read_epoch(int dirfd, const char *name, uint64_t *log_id, uint64_t *epoch)
{
	uint8_t buf[EPOCH_FILE_SIZE + 1];
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n != EPOCH_FILE_SIZE || tw_load_le32(buf) != EPOCH_MAGIC ||
	    tw_load_le32(buf + 20) != tw_crc32c(0, buf, 20))
		return -TW_ECORRUPT;
	*log_id = tw_load_le64(buf + 4);
	*epoch = tw_load_le64(buf + 12);
	return 0;
}
