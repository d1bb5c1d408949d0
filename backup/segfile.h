/*
 * backup/segfile.h — segment files: one flushed segment replica per file in the backup's
 * storage directory. Internal to libtailwind (tests link the static library).
 *
 * File name: "<log_id as 16 hex digits>-<segment_id as 16 hex digits>.twseg". A flush writes
 * "<name>.tmp" first, fsyncs it, renames it over the final name and fsyncs the directory, so a
 * crash leaves either the previous state or the complete new file (plus at worst a stale .tmp,
 * which the next start removes).
 *
 * Layout (little-endian), version 4: a header block of SEGFILE_BLOCK (4096) bytes, then the
 * buffer's `valid_len` bytes of log data exactly as they were in the buffer
 * (include/tailwind/log_format.h), zero-padded to a multiple of SEGFILE_BLOCK. The file is
 * therefore 4096 + round_up(valid_len, 4096) bytes, and every part of it is block aligned, so the
 * flusher writes it with O_DIRECT straight from the registered buffer (no copy through the page
 * cache). The header block holds the 128-byte header below, then zeros.
 *
 *   off size field
 *     0    8 magic "TWSEGv1\0"
 *     8    2 format version (4)
 *    10    2 offset of the data (4096)
 *    12    4 flags (bit 0: CORRUPT, the buffer failed verification when it was closed)
 *    16    8 log_id
 *    24    8 segment_id
 *    32    8 replica_version
 *    40    8 epoch
 *    48    4 state (1 CLOSED, 2 OPEN: flushed while still open, at shutdown / on battery)
 *    52    4 checksum (stored value of the last valid checksum entry; 0 when none)
 *    56    8 valid_len (bytes of log data at the data offset)
 *    64    8 entries (data entries inside valid_len)
 *    72    8 buffer_size (capacity of the buffer the data came from)
 *    80    8 flush time, nanoseconds since the Unix epoch (informational)
 *    88    4 chain seed: initial value of the header chain the data was written with
 *             (docs/log-format.md §4; 0: unseeded)
 *    92   32 reserved, zero
 *   124    4 CRC32C of bytes 0..123
 *
 * Version 3 (before chain seeds) is still read: the same layout with bytes 88..91 reserved; its
 * seed is 0. Version 2 (written before O_DIRECT flushes) is still read: the same 128-byte
 * header with field 10 = 128, the data right after it, no padding (the file is 128 + valid_len
 * bytes), seed 0. Rewriting a version-2 or -3 file (tw__segfile_set_version) writes version 4
 * (seed 0 kept).
 *
 * Readers check the magic, version, header CRC and file size, then rescan the data with
 * tw_scan_seeded() and the header's seed: valid_len, checksum and entry count must all match
 * the header (a bit flip anywhere in the header, the seed included, or in the valid data is
 * reported as -TW_ECORRUPT; the padding is not read).
 */
#ifndef TW_BACKUP_SEGFILE_H
#define TW_BACKUP_SEGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

#define SEGFILE_MAGIC "TWSEGv1"
#define SEGFILE_VERSION 4u /* 4: the header stores the chain seed */
#define SEGFILE_VERSION_V3 3u /* 3: header block and data aligned for O_DIRECT; seed 0 */
#define SEGFILE_VERSION_V2 2u /* 2: data entry headers carry a header check; still read */
#define SEGFILE_HDR_SIZE 128u /* the encoded header (both versions) */
#define SEGFILE_BLOCK 4096u /* O_DIRECT alignment used for offsets, lengths and memory */
#define SEGFILE_DATA_OFF SEGFILE_BLOCK /* version 3: where the data starts */
#define SEGFILE_NAME_MAX 64u /* "xxxxxxxxxxxxxxxx-xxxxxxxxxxxxxxxx.twseg.tmp" + NUL fits */
#define SEGFILE_SUFFIX ".twseg"
#define SEGFILE_TMP_SUFFIX ".tmp"
#define SEGFILE_SPARE_SUFFIX ".twspare" /* "<n hex8>.twspare": a freed file kept for reuse */
#define SEGFILE_SPARES 8u /* spare files kept at most per storage directory */

enum segfile_state {
	SEGFILE_CLOSED = 1,
	SEGFILE_OPEN = 2,
};

enum {
	SEGFILE_F_CORRUPT = 1u << 0,
};

struct segfile_hdr {
	uint32_t flags;
	uint64_t log_id;
	uint64_t segment_id;
	uint64_t replica_version;
	uint64_t epoch;
	uint32_t state; /* enum segfile_state */
	uint32_t checksum;
	uint64_t valid_len;
	uint64_t entries;
	uint64_t buffer_size;
	uint64_t flush_time_ns;
	uint32_t seed;  /* chain seed (version 4; 0 in older files) */
	/* Set by decode (ignored by encode, which writes the current version): */
	uint32_t version;  /* format version of the file */
	uint32_t data_off; /* where its data starts: 128 (version 2) or 4096 */
};

/* Encode / decode the 128-byte header. Encode writes the current version (4). Decode accepts
 * versions 2, 3 and 4 and returns 0 or -TW_ECORRUPT (bad magic, CRC, state or sizes) or
 * -TW_EVERSION (a newer format). */
void tw__segfile_hdr_encode(const struct segfile_hdr *h, uint8_t out[SEGFILE_HDR_SIZE]);
int tw__segfile_hdr_decode(const uint8_t in[SEGFILE_HDR_SIZE], struct segfile_hdr *h);

/* The size a file with this (decoded) header must have: data_off + valid_len, rounded up to
 * SEGFILE_BLOCK for versions 3 and 4. */
uint64_t tw__segfile_file_size(const struct segfile_hdr *h);

/* "<log>-<seg>.twseg" into out (SEGFILE_NAME_MAX bytes). */
void tw__segfile_name(uint64_t log_id, uint64_t segment_id, char *out, size_t len);
/* Parse a final file name; false for anything else (tmp files included). */
bool tw__segfile_parse_name(const char *name, uint64_t *log_id, uint64_t *segment_id);

/*
 * How a storage directory is written; one per backup, used by its flusher thread only.
 * Zero-initialise it. tw__segfile_write tries O_DIRECT first; when the file system refuses it
 * (EINVAL at open or at the first write) the file is written through the page cache instead,
 * `buffered` is set so later files go there directly, and `direct_err` keeps the refusal for the
 * caller to report once.
 */
struct tw__storage;
struct segfile_io {
	const struct tw__storage *storage; /* the system calls (storage.h); NULL: tw__storage_posix */
	bool buffered;            /* in/out: write through the page cache (refused, or forced) */
	int direct_err;           /* out: the refusal (-EINVAL), 0 while none */
	uint64_t direct_files;    /* out: files written with O_DIRECT */
	uint64_t buffered_files;  /* out: files written through the page cache */
	/* Spare files: freed segment files renamed aside (tw__segfile_recycle) for the next
	 * writes to overwrite, a stack of their numbers and sizes. */
	uint32_t spare_id[SEGFILE_SPARES];
	uint64_t spare_size[SEGFILE_SPARES];
	unsigned n_spare;
	uint32_t next_spare;      /* the number the next spare file is given */
	/* out, written by the one thread that uses `io` and read by others (stats) with
	 * __atomic loads: */
	uint64_t spared_files;    /* freed files renamed to a spare */
	uint64_t recycled_files;  /* files written over a spare */
};

/*
 * Durably write a segment file into the directory open as `dirfd`: tmp file, write header and
 * data, fdatasync, rename, fsync the directory. `data` (h->valid_len bytes) is borrowed for the
 * call and only read; with O_DIRECT it must be SEGFILE_BLOCK aligned (a pool buffer is; other
 * memory is written through the page cache). The last partial block is copied into a zeroed
 * block on the stack: nothing past valid_len is read. `io` may be NULL (try O_DIRECT, keep no
 * state). With a spare file in `io` (tw__segfile_recycle), the tmp file is that spare renamed
 * and overwritten, cut to the new size when it was larger. Returns 0 or -errno; on failure the
 * tmp file is removed and no final file is changed.
 * Blocking: call it on the flusher thread, never on the progress thread. No allocation.
 */
int tw__segfile_write(int dirfd, const struct segfile_hdr *h, const void *data,
		  struct segfile_io *io);

/*
 * Read and validate a segment file's header (name relative to dirfd). Checks the file size
 * against valid_len. Returns 0, -TW_ECORRUPT, -TW_EVERSION or -errno.
 */
int tw__segfile_read_header(int dirfd, const char *name, struct segfile_hdr *h);

/*
 * Read a whole segment file into buf (cap bytes; the bytes after valid_len are left untouched)
 * and verify it: header as above, then tw_scan_seeded() with the header's seed over the data
 * must give the header's valid_len, checksum and entries. Returns 0, -TW_ECORRUPT (h is still
 * filled when the header itself was valid), -EFBIG when valid_len > cap, or -errno.
 */
int tw__segfile_load(int dirfd, const char *name, void *buf, size_t cap, struct segfile_hdr *h);

/* Verify a file without keeping its data (allocates a temporary buffer of valid_len bytes). */
int tw__segfile_verify(int dirfd, const char *name, struct segfile_hdr *h);

/*
 * What `twctl inspect` reports about a segment file of any content and any length. Nothing read
 * from the file is trusted as a length: the data is what the file holds after the data offset
 * (none when the file ends before it), and the header's sizes are only compared with it.
 */
struct segfile_report {
	uint64_t file_size;
	bool short_file;          /* shorter than the 128-byte header: nothing below is filled */
	int hdr_rc;               /* tw__segfile_hdr_decode: 0, -TW_ECORRUPT or -TW_EVERSION */
	unsigned version_field;   /* bytes 8..9 as read */
	struct segfile_hdr h;     /* decoded (with hdr_rc != 0: the fields decode got to) */
	uint64_t data_off;        /* the header's; for an invalid one, guessed from the version
				   * field as read (2: byte 128, else the 4096-byte header block) */
	uint64_t data_len;        /* bytes the file holds from data_off on (0 when it ends before) */
	void *data;               /* those bytes (malloc'd; free it), scanned into `scan` */
	struct tw_scan_result scan; /* tw_scan_seeded with the header's seed (0 if invalid) */
	bool corrupt;             /* the verdict */
	char why[256];            /* why it is corrupt ("" when not) */
};

/* Read the regular file open as `fd` whole and check it as readers do (header, size, scan,
 * CORRUPT flag) into `r`. Returns 0 (the report holds the verdict) or a negative errno when the
 * file could not be read or the memory for it not allocated. */
int tw__segfile_inspect(int fd, struct segfile_report *r);

/* Rewrite a segment file with a new replica version (read, verify, durable write in the current
 * format; `io` as for tw__segfile_write). Blocking. */
int tw__segfile_set_version(int dirfd, uint64_t log_id, uint64_t segment_id, uint64_t version,
			struct segfile_io *io);

/* Remove a segment file and fsync the directory (through io->storage; io may be NULL). Returns
 * 0 or -errno (-ENOENT included). */
int tw__segfile_remove(int dirfd, uint64_t log_id, uint64_t segment_id,
		       const struct segfile_io *io);

/*
 * Free a segment file like tw__segfile_remove, but keep its blocks: the file is renamed to a
 * spare name and the directory fsynced, so its segment is gone across a crash as after an
 * unlink, and the next tw__segfile_write through the same `io` overwrites it instead of
 * allocating a new file (on tmpfs a third of the CPU of a new file and its unlink; on ext4
 * with O_DIRECT an overwrite of allocated blocks). With SEGFILE_SPARES spares already kept, or
 * no `io`, it removes the file. Spares are never read: a restart removes them
 * (tw__segfile_is_spare), and so does tw__segfile_drop_spares. The flusher thread only.
 * Returns 0 or -errno (-ENOENT included).
 */
int tw__segfile_recycle(int dirfd, uint64_t log_id, uint64_t segment_id, struct segfile_io *io);
/* Remove every spare file `io` keeps (at a backup's close). */
void tw__segfile_drop_spares(int dirfd, struct segfile_io *io);
/* Whether a directory entry is a spare file (removed when a backup starts). */
bool tw__segfile_is_spare(const char *name);

/*
 * Fence epochs, one small file per fenced log: "<log_id hex16>.twepoch" (24 bytes: magic "EPCH",
 * log_id, epoch, CRC32C of the first 20 bytes), written durably like a segment file (tmp, fsync,
 * rename, fsync directory). Blocking.
 */
#define SEGFILE_EPOCH_SUFFIX ".twepoch"
void tw__segfile_epoch_name(uint64_t log_id, char *out, size_t len);
bool tw__segfile_parse_epoch_name(const char *name, uint64_t *log_id);
int tw__segfile_write_epoch(int dirfd, uint64_t log_id, uint64_t epoch);
/* 0, -TW_ECORRUPT or -errno. */
int tw__segfile_read_epoch(int dirfd, const char *name, uint64_t *log_id, uint64_t *epoch);


#endif /* TW_BACKUP_SEGFILE_H */
