/*
 * tests/unit/test_segfile.c — segment files: header round trip, file round trip, the durability
 * sequence (tmp, fsync, rename, fsync dir) and crashes between its steps, corruption detection
 * (bit flips in header and data, truncation), names, version rewrite; O_DIRECT writes (the file
 * bypasses the page cache: mincore), the buffered fallback when O_DIRECT is refused, and files
 * of the previous format (version 2) read back.
 *
 * The directory is made under $TW_BUILD_ROOT (the build tree, a disk file system) when set, so
 * O_DIRECT really is used; /tmp otherwise.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/log_format.h>

#include "core/util.h"

#include "backup/segfile.h"
#include "pagecache.h"
#include "tap.h"
#include "tstorage.h"
#include "tmpdir.h"

static char dir[512];
static int dirfd_;

static size_t build_seeded(uint8_t *buf, size_t cap, unsigned writes, uint32_t seed,
			   struct tw_scan_result *sr)
{
	struct tw_log_writer w;
	uint8_t payload[100];

	memset(buf, 0, cap);
	tw_log_writer_init_seeded(&w, buf, cap, seed);
	for (unsigned i = 0; i < writes; i++) {
		size_t off, len;

		for (unsigned k = 0; k < sizeof(payload); k++)
			payload[k] = (uint8_t)(i * 7 + k);
		if (tw_log_writer_append(&w, payload, sizeof(payload), NULL) != 0)
			break;
		tw_log_writer_seal(&w, &off, &len);
	}
	tw_scan_seeded(buf, cap, seed, sr);
	return w.pos;
}

static size_t build(uint8_t *buf, size_t cap, unsigned writes, struct tw_scan_result *sr)
{
	return build_seeded(buf, cap, writes, 0, sr);
}

static void hdr_for(struct segfile_hdr *h, uint64_t log, uint64_t seg,
		    const struct tw_scan_result *sr, size_t cap)
{
	memset(h, 0, sizeof(*h));
	h->log_id = log;
	h->segment_id = seg;
	h->replica_version = 3;
	h->epoch = 7;
	h->state = SEGFILE_CLOSED;
	h->checksum = sr->last_checksum;
	h->valid_len = sr->valid_len;
	h->entries = sr->entries;
	h->buffer_size = cap;
}

static bool exists(const char *name)
{
	struct stat st;

	return fstatat(dirfd_, name, &st, 0) == 0;
}

static void flip_byte(const char *name, off_t off)
{
	int fd = openat(dirfd_, name, O_RDWR);
	uint8_t c;

	TAP_REQUIRE(fd >= 0, "open %s", name);
	TAP_REQUIRE(pread(fd, &c, 1, off) == 1, "pread");
	c ^= 0x10;
	TAP_REQUIRE(pwrite(fd, &c, 1, off) == 1, "pwrite");
	close(fd);
}

/* The storage seam (backup/storage.h) of these tests: it records the steps and fails one. */
static struct tstorage ts;


static void test_header(void)
{
	struct segfile_hdr h, g;
	uint8_t raw[SEGFILE_HDR_SIZE];

	memset(&h, 0, sizeof(h));
	h.flags = SEGFILE_F_CORRUPT;
	h.log_id = 0x0123456789abcdefull;
	h.segment_id = 42;
	h.replica_version = 5;
	h.epoch = 9;
	h.state = SEGFILE_OPEN;
	h.checksum = 0xdeadbeef;
	h.valid_len = 1000;
	h.entries = 10;
	h.buffer_size = 4096;
	h.flush_time_ns = 12345;
	h.seed = 0x9e3779b9;
	h.version = SEGFILE_VERSION; /* what decode reports */
	h.data_off = SEGFILE_DATA_OFF;
	tw__segfile_hdr_encode(&h, raw);
	ok(memcmp(raw, "TWSEGv1", 8) == 0, "header starts with the magic");
	is_int(tw__segfile_hdr_decode(raw, &g), 0, "header decodes");
	ok(memcmp(&h, &g, sizeof(h)) == 0, "header round trip keeps every field");
	raw[20] ^= 1;
	is_int(tw__segfile_hdr_decode(raw, &g), -TW_ECORRUPT, "header bit flip: CRC mismatch");
	raw[20] ^= 1;
	raw[8] = (uint8_t)(SEGFILE_VERSION + 1);
	{
		/* the next version with a valid CRC: reported as a newer format */
		uint32_t crc = tw_crc32c(0, raw, 124);

		raw[124] = (uint8_t)crc;
		raw[125] = (uint8_t)(crc >> 8);
		raw[126] = (uint8_t)(crc >> 16);
		raw[127] = (uint8_t)(crc >> 24);
		is_int(tw__segfile_hdr_decode(raw, &g), -TW_EVERSION, "newer format version refused");
	}
}

static void test_names(void)
{
	char name[SEGFILE_NAME_MAX];
	uint64_t l, s;

	tw__segfile_name(0xabcull, 0x12ull, name, sizeof(name));
	ok(strcmp(name, "0000000000000abc-0000000000000012.twseg") == 0, "file name %s", name);
	ok(tw__segfile_parse_name(name, &l, &s) && l == 0xabc && s == 0x12, "name parses back");
	ok(!tw__segfile_parse_name("0000000000000abc-0000000000000012.twseg.tmp", &l, &s),
	   "tmp name is not a segment");
	ok(!tw__segfile_parse_name("0000000000000ABC-0000000000000012.twseg", &l, &s),
	   "upper-case hex refused");
	ok(!tw__segfile_parse_name("foo.twseg", &l, &s), "short name refused");
}

static void test_round_trip(void)
{
	size_t cap = 64 * 1024;
	uint8_t *buf = aligned_alloc(SEGFILE_BLOCK, cap), *back = calloc(1, cap);
	struct segfile_io io = { .storage = &ts.ops };
	struct stat st;
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];

	tstorage_init(&ts, true);
	build(buf, cap, 50, &sr);
	ok(sr.valid_len > 0 && sr.entries == 50, "built 50 entries (%zu bytes)", sr.valid_len);
	hdr_for(&h, 1, 2, &sr, cap);
	is_int(tw__segfile_write(dirfd_, &h, buf, &io), 0, "tw__segfile_write");
	ok(strcmp(ts.steps, "direct,write,fsync,close,rename,fsync-dir,") == 0,
	   "durability sequence: %s", ts.steps);
	ok(io.direct_files == 1 && io.buffered_files == 0 && !io.buffered && io.direct_err == 0,
	   "written with O_DIRECT (%s must be on a file system that takes it)", dir);
	tw__segfile_name(1, 2, name, sizeof(name));
	ok(exists(name), "final file exists");
	TAP_REQUIRE(fstatat(dirfd_, name, &st, 0) == 0, "stat %s", name);
	ok((uint64_t)st.st_size == SEGFILE_BLOCK + (sr.valid_len + SEGFILE_BLOCK - 1) /
	   SEGFILE_BLOCK * SEGFILE_BLOCK, "file is a header block + data padded to 4096 (%lld)",
	   (long long)st.st_size);
	is_int(tl_cached_pages(dirfd_, name, NULL), 0, "no page of the O_DIRECT file is in the page cache");
	ok(!exists("0000000000000001-0000000000000002.twseg.tmp"), "no tmp file left");
	is_int(tw__segfile_load(dirfd_, name, back, cap, &g), 0, "tw__segfile_load verifies");
	ok(memcmp(buf, back, sr.valid_len) == 0, "data round trip");
	ok(g.valid_len == h.valid_len && g.checksum == h.checksum && g.entries == h.entries &&
	   g.replica_version == 3 && g.epoch == 7 && g.state == SEGFILE_CLOSED,
	   "header fields round trip");
	ok(g.flush_time_ns != 0, "flush time recorded");
	is_int(tw__segfile_load(dirfd_, name, back, sr.valid_len - 1, &g), -EFBIG,
	       "load into a too small buffer: -EFBIG");

	/* version rewrite */
	is_int(tw__segfile_set_version(dirfd_, 1, 2, 4, &io), 0, "set version");
	ok(io.direct_files == 2, "the rewrite went out with O_DIRECT too");
	is_int(tw__segfile_verify(dirfd_, name, &g), 0, "still verifies");
	is_int((long long)g.replica_version, 4, "version updated in the file");

	/* empty segment */
	memset(buf, 0, cap);
	tw_scan(buf, cap, &sr);
	hdr_for(&h, 1, 3, &sr, cap);
	h.state = SEGFILE_OPEN;
	is_int(tw__segfile_write(dirfd_, &h, buf, &io), 0, "empty open segment written");
	tw__segfile_name(1, 3, name, sizeof(name));
	is_int(tw__segfile_verify(dirfd_, name, &g), 0, "empty segment verifies");
	ok(g.state == SEGFILE_OPEN && g.valid_len == 0, "state open, length 0");
	ok(fstatat(dirfd_, name, &st, 0) == 0 && st.st_size == SEGFILE_BLOCK,
	   "empty segment: the header block only");
	free(buf);
	free(back);
}

static void test_crash_steps(void)
{
	/* A failure at each step, of an O_DIRECT write and of a buffered one ("create": the
	 * buffered open; "direct": the O_DIRECT one). */
	static const char *const at[] = { "direct", "create", "write", "fsync", "close", "rename" };
	size_t cap = 16 * 1024;
	uint8_t *buf = aligned_alloc(SEGFILE_BLOCK, cap);
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];

	build(buf, cap, 10, &sr);
	hdr_for(&h, 5, 1, &sr, cap);
	tw__segfile_name(5, 1, name, sizeof(name));
	is_int(tw__segfile_write(dirfd_, &h, buf, NULL), 0, "first version written");
	build(buf, cap, 20, &sr); /* a longer replacement */
	hdr_for(&h, 5, 1, &sr, cap);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		struct segfile_io io = { .storage = &ts.ops, .buffered = i == 1 };

		tstorage_init(&ts, false);
		tstorage_fail(&ts, at[i], -EIO, 1);
		ok(tw__segfile_write(dirfd_, &h, buf, &io) == -EIO && ts.failed == 1,
		   "failure at %s reported", at[i]);
		ok(!exists("0000000000000005-0000000000000001.twseg.tmp"),
		   "failure at %s: tmp removed", at[i]);
		ok(tw__segfile_verify(dirfd_, name, &g) == 0 && g.entries == 10,
		   "failure at %s: previous complete file intact", at[i]);
	}
	{
		struct segfile_io io = { .storage = &ts.ops };

		tstorage_init(&ts, false);
		tstorage_fail(&ts, "fsync-dir", -EIO, 1);
		ok(tw__segfile_write(dirfd_, &h, buf, &io) == -EIO,
		   "directory fsync failure reported");
	}
	ok(tw__segfile_verify(dirfd_, name, &g) == 0 && g.entries == 20, "renamed file is complete");
	free(buf);
}

static void test_corruption(void)
{
	size_t cap = 32 * 1024;
	uint8_t *buf = malloc(cap);
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];
	int fd;

	build(buf, cap, 30, &sr);
	hdr_for(&h, 9, 9, &sr, cap);
	tw__segfile_name(9, 9, name, sizeof(name));
	TAP_REQUIRE(tw__segfile_write(dirfd_, &h, buf, NULL) == 0, "write");

	/* a flip in a payload, in an entry header, in a checksum entry, in the header */
	{
		off_t offs[] = { SEGFILE_DATA_OFF + TW_ENTRY_HDR_SIZE + 50,      /* payload */
				 SEGFILE_DATA_OFF + 4,                           /* length */
				 SEGFILE_DATA_OFF + (off_t)sr.valid_len - 2,    /* last checksum */
				 40 /* epoch in the header */ };
		const char *what[] = { "payload", "entry header", "checksum entry", "file header" };

		for (size_t i = 0; i < 4; i++) {
			flip_byte(name, offs[i]);
			is_int(tw__segfile_verify(dirfd_, name, &g), -TW_ECORRUPT,
			       "bit flip in the %s detected", what[i]);
			flip_byte(name, offs[i]);
			is_int(tw__segfile_verify(dirfd_, name, &g), 0, "flipped back: verifies");
		}
	}
	/* truncation */
	fd = openat(dirfd_, name, O_RDWR);
	TAP_REQUIRE(fd >= 0, "open");
	TAP_REQUIRE(ftruncate(fd, (off_t)(SEGFILE_DATA_OFF + sr.valid_len)) == 0, "truncate");
	close(fd);
	is_int(tw__segfile_verify(dirfd_, name, &g), -TW_ECORRUPT, "truncated file detected");
	is_int(tw__segfile_read_header(dirfd_, name, &g), -TW_ECORRUPT,
	       "header check sees the size (the padding was cut)");
	is_int(tw__segfile_verify(dirfd_, "nope.twseg", &g), -ENOENT, "missing file: -ENOENT");
	is_int(tw__segfile_remove(dirfd_, 9, 9, NULL), 0, "remove");
	ok(!exists(name), "removed");
	free(buf);
}

/* The number of spare files in the directory. */
static unsigned spare_files(void)
{
	int fd = dup(dirfd_);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	unsigned n = 0;

	TAP_REQUIRE(d, "opendir");
	rewinddir(d);
	while ((de = readdir(d)) != NULL)
		n += tw__segfile_is_spare(de->d_name);
	closedir(d);
	return n;
}

/* Write segment (9, seg) of `entries` entries with `io`; the file's expected size in *size. */
static void write_seg(struct segfile_io *io, uint64_t seg, size_t entries, uint8_t *buf,
		      size_t cap, uint64_t *size)
{
	struct tw_scan_result sr;
	struct segfile_hdr h;

	memset(buf, 0, cap);
	build(buf, cap, entries, &sr);
	hdr_for(&h, 9, seg, &sr, cap);
	*size = SEGFILE_BLOCK + (sr.valid_len + SEGFILE_BLOCK - 1) / SEGFILE_BLOCK * SEGFILE_BLOCK;
	TAP_REQUIRE(tw__segfile_write(dirfd_, &h, buf, io) == 0, "write segment %llu",
		    (unsigned long long)seg);
}

/* A freed segment file kept as a spare and overwritten by the next write. */
static void test_spares(void)
{
	size_t cap = 64 * 1024;
	uint8_t *buf = aligned_alloc(SEGFILE_BLOCK, cap), *back = calloc(1, cap);
	struct segfile_io io = { .storage = &ts.ops };
	struct segfile_hdr g;
	char name[SEGFILE_NAME_MAX];
	struct stat st;
	uint64_t size, spare_was;

	ok(tw__segfile_is_spare("0000002a.twspare") && !tw__segfile_is_spare(".twspare") &&
	   !tw__segfile_is_spare("0000000000000009-0000000000000001.twseg") &&
	   !tw__segfile_is_spare("0000000000000009-0000000000000001.twseg.tmp"),
	   "spare file names told apart from segment and tmp files");
	tstorage_init(&ts, false);
	write_seg(&io, 1, 200, buf, cap, &size);
	tstorage_init(&ts, true);
	is_int(tw__segfile_recycle(dirfd_, 9, 1, &io), 0, "segment 1 freed");
	ok(strcmp(ts.steps, "rename,fsync-dir,") == 0, "freed by a rename and a directory fsync: %s",
	   ts.steps);
	tw__segfile_name(9, 1, name, sizeof(name));
	ok(!exists(name) && io.n_spare == 1 && spare_files() == 1,
	   "its name is gone, one spare file kept");
	spare_was = io.spare_size[0];
	is_int(tw__segfile_recycle(dirfd_, 9, 1, &io), -ENOENT, "freeing it again: -ENOENT");

	/* A shorter segment over the spare: the tail is cut, the file verifies. */
	tstorage_init(&ts, true);
	write_seg(&io, 2, 20, buf, cap, &size);
	ok(strcmp(ts.steps, "rename,direct,write,fsync,close,rename,fsync-dir,") == 0,
	   "the spare renamed to the tmp file and overwritten: %s", ts.steps);
	ok(io.recycled_files == 1 && io.n_spare == 0 && spare_files() == 0,
	   "the spare was used (recycled %llu)", (unsigned long long)io.recycled_files);
	tw__segfile_name(9, 2, name, sizeof(name));
	TAP_REQUIRE(fstatat(dirfd_, name, &st, 0) == 0, "stat %s", name);
	ok((uint64_t)st.st_size == size && spare_was > size,
	   "cut to its own size (%lld bytes, the spare had %llu)", (long long)st.st_size,
	   (unsigned long long)spare_was);
	is_int(tw__segfile_load(dirfd_, name, back, cap, &g), 0, "it verifies");
	ok(memcmp(buf, back, g.valid_len) == 0 && g.entries == 20 && g.segment_id == 2,
	   "its data and header are segment 2's");

	/* A longer segment over that shorter spare. */
	tstorage_init(&ts, false);
	is_int(tw__segfile_recycle(dirfd_, 9, 2, &io), 0, "segment 2 freed");
	spare_was = io.spare_size[0];
	write_seg(&io, 3, 300, buf, cap, &size);
	tw__segfile_name(9, 3, name, sizeof(name));
	TAP_REQUIRE(fstatat(dirfd_, name, &st, 0) == 0, "stat %s", name);
	ok(io.recycled_files == 2 && (uint64_t)st.st_size == size && size > spare_was,
	   "a longer segment over a shorter spare: %lld bytes (the spare had %llu)",
	   (long long)st.st_size, (unsigned long long)spare_was);
	is_int(tw__segfile_load(dirfd_, name, back, cap, &g), 0, "it verifies");
	ok(memcmp(buf, back, g.valid_len) == 0 && g.entries == 300, "its data is segment 3's");

	/* A failed write over a spare changes no final file and leaves no tmp file. */
	is_int(tw__segfile_recycle(dirfd_, 9, 3, &io), 0, "segment 3 freed");
	write_seg(&io, 4, 10, buf, cap, &size);
	tstorage_fail(&ts, "write", -EIO, 1);
	{
		struct tw_scan_result sr;
		struct segfile_hdr h;

		build(buf, cap, 30, &sr);
		hdr_for(&h, 9, 4, &sr, cap);
		is_int(tw__segfile_write(dirfd_, &h, buf, &io), -EIO, "a failed write reported");
	}
	tw__segfile_name(9, 4, name, sizeof(name));
	ok(!exists("0000000000000009-0000000000000004.twseg.tmp") &&
	   tw__segfile_verify(dirfd_, name, &g) == 0 && g.entries == 10,
	   "no tmp file left, the previous version intact");

	/* At most SEGFILE_SPARES kept; the others are removed. */
	tstorage_init(&ts, false);
	for (uint64_t seg = 10; seg < 10 + SEGFILE_SPARES + 2; seg++)
		write_seg(&io, seg, 5, buf, cap, &size);
	for (uint64_t seg = 10; seg < 10 + SEGFILE_SPARES + 2; seg++)
		TAP_REQUIRE(tw__segfile_recycle(dirfd_, 9, seg, &io) == 0, "free %llu",
			    (unsigned long long)seg);
	tw__segfile_name(9, 10 + SEGFILE_SPARES + 1, name, sizeof(name));
	ok(io.n_spare == SEGFILE_SPARES && spare_files() == SEGFILE_SPARES && !exists(name),
	   "%u spares kept, the freed files past them removed", spare_files());
	tw__segfile_drop_spares(dirfd_, &io);
	ok(io.n_spare == 0 && spare_files() == 0, "tw__segfile_drop_spares removes them all");
	is_int(tw__segfile_remove(dirfd_, 9, 4, NULL), 0, "cleanup");
	free(buf);
	free(back);
}

static void test_epoch_file(void)
{
	char name[SEGFILE_NAME_MAX];
	uint64_t log, epoch;

	tw__segfile_epoch_name(0x42, name, sizeof(name));
	ok(strcmp(name, "0000000000000042.twepoch") == 0, "epoch file name %s", name);
	ok(tw__segfile_parse_epoch_name(name, &log) && log == 0x42, "epoch name parses back");
	is_int(tw__segfile_write_epoch(dirfd_, 0x42, 9), 0, "epoch written");
	is_int(tw__segfile_write_epoch(dirfd_, 0x42, 11), 0, "epoch replaced");
	ok(tw__segfile_read_epoch(dirfd_, name, &log, &epoch) == 0 && log == 0x42 && epoch == 11,
	   "epoch read back");
	ok(!exists("0000000000000042.twepoch.tmp"), "no tmp left");
	flip_byte(name, 13);
	is_int(tw__segfile_read_epoch(dirfd_, name, &log, &epoch), -TW_ECORRUPT,
	       "bit flip in the epoch file detected");
}

/* The file system refuses O_DIRECT (the seam plays a tmpfs before Linux 6.6: EINVAL at open, or
 * EINVAL at the first write): written through the page cache, the refusal kept for the caller's
 * one log line, and later files go buffered without trying again. */
static void test_direct_refused(void)
{
	static const char *const where[] = { "direct", "write" };
	size_t cap = 32 * 1024;
	uint8_t *buf = aligned_alloc(SEGFILE_BLOCK, cap), *back = calloc(1, cap);
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];

	build(buf, cap, 25, &sr);
	for (size_t i = 0; i < 2; i++) {
		struct segfile_io io = { .storage = &ts.ops };

		hdr_for(&h, 0x77, i, &sr, cap);
		tw__segfile_name(0x77, i, name, sizeof(name));
		tstorage_init(&ts, true);
		tstorage_fail(&ts, where[i], -EINVAL, 1);
		is_int(tw__segfile_write(dirfd_, &h, buf, &io), 0, "EINVAL at %s: the file is written "
		       "anyway", where[i]);
		ok(io.buffered && io.direct_err == -EINVAL && io.buffered_files == 1 &&
		   io.direct_files == 0, "EINVAL at %s: refusal kept, written buffered", where[i]);
		ok(tw__segfile_load(dirfd_, name, back, cap, &g) == 0 &&
		   memcmp(back, buf, sr.valid_len) == 0 && g.version == SEGFILE_VERSION,
		   "EINVAL at %s: the same format, verifies, same bytes", where[i]);
		ok(tl_cached_pages(dirfd_, name, NULL) > 0, "EINVAL at %s: the buffered file went through the page "
		   "cache", where[i]);
		ts.steps[0] = '\0';
		hdr_for(&h, 0x77, 10 + i, &sr, cap);
		is_int(tw__segfile_write(dirfd_, &h, buf, &io), 0, "next file");
		ok(strcmp(ts.steps, "create,write,fsync,close,rename,fsync-dir,") == 0 &&
		   io.buffered_files == 2, "after a refusal O_DIRECT is not tried again: %s",
		   ts.steps);
	}
	/* unaligned memory (not a pool buffer): buffered, and no refusal recorded */
	{
		struct segfile_io io = { 0 };

		memmove(buf + 8, buf, sr.valid_len);
		hdr_for(&h, 0x77, 20, &sr, cap);
		tw__segfile_name(0x77, 20, name, sizeof(name));
		is_int(tw__segfile_write(dirfd_, &h, buf + 8, &io), 0, "unaligned data written");
		ok(io.buffered_files == 1 && !io.buffered && io.direct_err == 0,
		   "unaligned data: buffered for that file only, O_DIRECT not given up");
		is_int(tw__segfile_verify(dirfd_, name, &g), 0, "and it verifies");
	}
	free(buf);
	free(back);
}

/* A file of the previous format (version 2: 128-byte header, data right after, no padding),
 * written here byte by byte as the previous release did. */
static void write_v2(const char *name, const struct segfile_hdr *h, const uint8_t *data)
{
	uint8_t hdr[SEGFILE_HDR_SIZE];
	int fd;

	tw__segfile_hdr_encode(h, hdr);
	tw_store_le16(hdr + 8, 2);
	tw_store_le16(hdr + 10, 128);
	tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
	fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	TAP_REQUIRE(fd >= 0, "create %s", name);
	TAP_REQUIRE(write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr) &&
		    write(fd, data, (size_t)h->valid_len) == (ssize_t)h->valid_len, "write v2");
	close(fd);
}

static void test_old_version(void)
{
	size_t cap = 32 * 1024;
	uint8_t *buf = malloc(cap), *back = calloc(1, cap);
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];
	struct stat st;
	int fd;

	build(buf, cap, 40, &sr);
	hdr_for(&h, 0x2, 5, &sr, cap);
	tw__segfile_name(0x2, 5, name, sizeof(name));
	write_v2(name, &h, buf);
	is_int(tw__segfile_read_header(dirfd_, name, &g), 0, "version-2 header read");
	ok(g.version == 2 && g.data_off == 128 && g.valid_len == sr.valid_len &&
	   g.entries == 40 && tw__segfile_file_size(&g) == 128 + sr.valid_len,
	   "version 2: data at 128, file 128 + valid_len bytes");
	is_int(tw__segfile_load(dirfd_, name, back, cap, &g), 0, "version-2 file loads and verifies");
	ok(memcmp(back, buf, sr.valid_len) == 0, "version-2 data read back");
	flip_byte(name, 128 + 60);
	is_int(tw__segfile_verify(dirfd_, name, &g), -TW_ECORRUPT, "version 2: a bit flip is detected");
	flip_byte(name, 128 + 60);
	is_int(tw__segfile_set_version(dirfd_, 0x2, 5, 9, NULL), 0, "version-2 file rewritten");
	ok(tw__segfile_load(dirfd_, name, back, cap, &g) == 0 && g.version == SEGFILE_VERSION &&
	   g.replica_version == 9 && memcmp(back, buf, sr.valid_len) == 0,
	   "the rewrite is in the current format, same data");
	/* a version-2 file cut short */
	write_v2(name, &h, buf);
	fd = openat(dirfd_, name, O_RDWR);
	TAP_REQUIRE(fd >= 0 && ftruncate(fd, (off_t)(128 + sr.valid_len - 1)) == 0, "truncate");
	close(fd);
	is_int(tw__segfile_verify(dirfd_, name, &g), -TW_ECORRUPT, "truncated version-2 file detected");
	/* version 2 with the version-3 offset (or the reverse) is not a file we wrote */
	write_v2(name, &h, buf);
	{
		uint8_t hdr[SEGFILE_HDR_SIZE];

		fd = openat(dirfd_, name, O_RDWR);
		TAP_REQUIRE(fd >= 0 && pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "rd");
		tw_store_le16(hdr + 10, SEGFILE_DATA_OFF);
		tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
		TAP_REQUIRE(pwrite(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "wr");
		close(fd);
		is_int(tw__segfile_hdr_decode(hdr, &g), -TW_ECORRUPT,
		       "version 2 with a 4096-byte data offset refused");
	}
	ok(fstatat(dirfd_, name, &st, 0) == 0, "file still there");
	free(buf);
	free(back);
}

/* Version 4 stores the chain seed; version 3 files (no seed field) read as seed 0. */
static void test_seed(void)
{
	size_t cap = 32 * 1024;
	uint8_t *buf = malloc(cap), *back = calloc(1, cap);
	uint8_t hdr[SEGFILE_HDR_SIZE];
	struct tw_scan_result sr;
	struct segfile_hdr h, g;
	char name[SEGFILE_NAME_MAX];
	int fd;

	TAP_REQUIRE(buf && back, "alloc");
	build_seeded(buf, cap, 30, 0xa5a5f00d, &sr);
	hdr_for(&h, 0x3, 1, &sr, cap);
	h.seed = 0xa5a5f00d;
	tw__segfile_name(0x3, 1, name, sizeof(name));
	is_int(tw__segfile_write(dirfd_, &h, buf, NULL), 0, "seeded segment written");
	ok(tw__segfile_load(dirfd_, name, back, cap, &g) == 0 && g.version == 4 &&
	   g.seed == 0xa5a5f00d && g.entries == 30 && memcmp(back, buf, sr.valid_len) == 0,
	   "version 4: the seed is stored and the data verifies with it");
	is_int(tw__segfile_set_version(dirfd_, 0x3, 1, 8, NULL), 0, "seeded file: version rewrite");
	ok(tw__segfile_load(dirfd_, name, back, cap, &g) == 0 && g.seed == 0xa5a5f00d &&
	   g.replica_version == 8, "the rewrite keeps the seed");
	/* The same file claiming another seed (header CRC fixed): the data no longer verifies. */
	fd = openat(dirfd_, name, O_RDWR);
	TAP_REQUIRE(fd >= 0 && pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "rd");
	tw_store_le32(hdr + 88, 0xa5a5f00c);
	tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
	TAP_REQUIRE(pwrite(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "wr");
	is_int(tw__segfile_verify(dirfd_, name, &g), -TW_ECORRUPT,
	       "a wrong seed in the header: the data fails verification");
	/* Claiming version 3 (no seed field: seed 0) with the seeded data: corrupt as well. */
	tw_store_le16(hdr + 8, 3);
	tw_store_le32(hdr + 88, 0xa5a5f00d);
	tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
	TAP_REQUIRE(pwrite(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "wr");
	ok(tw__segfile_verify(dirfd_, name, &g) == -TW_ECORRUPT && g.version == 3 && g.seed == 0,
	   "version 3 reads seed 0 whatever bytes 88..91 hold");
	/* A version-3 file as a twd before chain seeds wrote it: unseeded data. */
	build(buf, cap, 30, &sr);
	hdr_for(&h, 0x3, 1, &sr, cap);
	TAP_REQUIRE(ftruncate(fd, 0) == 0, "truncate");
	tw__segfile_hdr_encode(&h, hdr);
	tw_store_le16(hdr + 8, 3);
	tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
	memset(back, 0, cap);
	memcpy(back, buf, sr.valid_len);
	TAP_REQUIRE(pwrite(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
		    pwrite(fd, back, (sr.valid_len + 4095) / 4096 * 4096, SEGFILE_DATA_OFF) ==
		    (ssize_t)((sr.valid_len + 4095) / 4096 * 4096), "write v3");
	close(fd);
	ok(tw__segfile_load(dirfd_, name, back, cap, &g) == 0 && g.version == 3 && g.seed == 0 &&
	   g.entries == 30, "a version-3 file loads with seed 0");
	ok(tw__segfile_set_version(dirfd_, 0x3, 1, 9, NULL) == 0 &&
	   tw__segfile_load(dirfd_, name, back, cap, &g) == 0 && g.version == 4 && g.seed == 0,
	   "its rewrite is version 4 with seed 0");
	free(buf);
	free(back);
}

/* Write the first `len` bytes of `full` as `name` (a truncated copy). */
static void write_prefix(const char *name, const uint8_t *full, size_t len)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	TAP_REQUIRE(fd >= 0 && tw__pwrite_all(fd, full, len, 0) == 0, "write %zu bytes", len);
	close(fd);
}

/* The sweep's next length: every one up to 4,200 bytes and in the last 8, every 61st between. */
static size_t next_len(size_t len, size_t full_len)
{
	if (len < 4200 || len + 8 >= full_len)
		return len + 1;
	return len + 61 < full_len - 8 ? len + 61 : full_len - 8;
}

/*
 * Truncations of a version-4 and of a version-2 file, 0 bytes to one short of the whole file
 * (every length of the 4096-byte header block of version 4 and up to 4,200 bytes, then a dense
 * sample and the last bytes): the readers refuse each one with
 * -TW_ECORRUPT, and the inspection (twctl inspect) reports it corrupt, holding no more data
 * than the file has. It used to compute the data length of a file shorter than its header
 * block as a negative number (an 18 EB read, issue 28).
 */
static void sweep_truncations(const char *what, const char *src, unsigned want_truncated)
{
	struct stat st;
	size_t full_len = fstatat(dirfd_, src, &st, 0) == 0 ? (size_t)st.st_size : 0;
	const char *name = "0000000000000033-00000000000000ff.twseg";
	unsigned bad_read = 0, bad_report = 0, short_reports = 0, trunc_reports = 0;
	uint8_t *full = malloc(full_len + 1);
	struct segfile_report r;
	struct segfile_hdr g;
	int fd;

	fd = openat(dirfd_, src, O_RDONLY);
	TAP_REQUIRE(full && fd >= 0 && tw__pread_all(fd, full, full_len, 0) == 0, "read %s", src);
	close(fd);
	/* Every length through the header block and a little past it (0..4,200 bytes), then
	 * every 61st length and the last 8 ones (the sweep of every length took 30 s under load). */
	for (size_t len = 0; len <= full_len; len = next_len(len, full_len)) {
		bool whole = len == full_len;

		write_prefix(name, full, len);
		if (tw__segfile_verify(dirfd_, name, &g) != (whole ? 0 : -TW_ECORRUPT) ||
		    tw__segfile_read_header(dirfd_, name, &g) != (whole ? 0 : -TW_ECORRUPT))
			bad_read++;
		fd = openat(dirfd_, name, O_RDONLY);
		TAP_REQUIRE(fd >= 0, "open %s", name);
		if (tw__segfile_inspect(fd, &r) != 0 || r.corrupt == whole ||
		    r.data_len > len || r.file_size != len || (whole && r.why[0])) {
			if (bad_report++ < 3)
				tap_diag("%s, %zu bytes: corrupt %d, data %" PRIu64 ": %s", what, len,
					 r.corrupt, r.data_len, r.why);
		}
		short_reports += r.short_file && strstr(r.why, "shorter than a segment file header");
		trunc_reports += strstr(r.why, "truncated: the file has") != NULL;
		free(r.data);
		close(fd);
	}
	unlinkat(dirfd_, name, 0);
	is_int(bad_read, 0, "%s: truncations (0..%zu bytes) refused by the readers", what,
	       full_len - 1);
	is_int(bad_report, 0, "%s: and reported corrupt by the inspection, within the file", what);
	is_int(short_reports, SEGFILE_HDR_SIZE, "%s: 0..127 bytes: shorter than a header", what);
	is_int(trunc_reports, want_truncated, "%s: a valid header, the file ending before its "
	       "data offset: 'truncated'", what);
	free(full);
}

static void test_truncations(void)
{
	size_t cap = 32 * 1024;
	uint8_t *buf = malloc(cap);
	struct tw_scan_result sr;
	struct segfile_hdr h;
	char name[SEGFILE_NAME_MAX];

	TAP_REQUIRE(buf, "malloc");
	build_seeded(buf, cap, 40, 0x2828, &sr); /* 40 x 100 bytes: two data blocks */
	hdr_for(&h, 0x33, 1, &sr, cap);
	h.seed = 0x2828;
	tw__segfile_name(0x33, 1, name, sizeof(name));
	TAP_REQUIRE(sr.valid_len > SEGFILE_BLOCK, "more than one data block");
	TAP_REQUIRE(tw__segfile_write(dirfd_, &h, buf, NULL) == 0, "write");
	sweep_truncations("format 4", name, SEGFILE_DATA_OFF - SEGFILE_HDR_SIZE);

	build(buf, cap, 20, &sr);
	hdr_for(&h, 0x33, 2, &sr, cap);
	tw__segfile_name(0x33, 2, name, sizeof(name));
	write_v2(name, &h, buf);
	sweep_truncations("format 2", name, 0);
	free(buf);
}

int main(void)
{
	const char *root = getenv("TW_BUILD_ROOT");

	tmpdir_make(dir, sizeof(dir), root && root[0] ? root : "/tmp", "tw-segfile");
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
	TAP_REQUIRE(dirfd_ >= 0, "open dir");
	test_header();
	test_names();
	test_round_trip();
	test_crash_steps();
	test_corruption();
	test_spares();
	test_epoch_file();
	test_direct_refused();
	test_old_version();
	test_seed();
	test_truncations();
	close(dirfd_);
	tmpdir_remove(dir);
	tap_done_testing();
	return tap_exit();
}
