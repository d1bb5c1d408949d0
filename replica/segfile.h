/*
 * replica/segfile.h — segment files: one flushed segment replica per file in the backup's
 * storage directory. Internal to libtailwind (tests link the static library).
 *
 * File name: "<log_id as 16 hex digits>-<segment_id as 16 hex digits>.twseg". A flush writes
 * "<name>.tmp" first, fsyncs it, renames it over the final name and fsyncs the directory, so a
 * crash leaves either the previous state or the complete new file (plus at worst a stale .tmp,
 * which the next start removes).
 *
 * Layout (little-endian): a 128-byte header, then `valid_len` bytes of log data exactly as they
 * were in the buffer (include/tailwind/log_format.h).
 *
 *   off size field
 *     0    8 magic "TWSEGv1\0"
 *     8    2 format version (2)
 *    10    2 header size (128)
 *    12    4 flags (bit 0: CORRUPT, the buffer failed verification when it was closed)
 *    16    8 log_id
 *    24    8 segment_id
 *    32    8 replica_version
 *    40    8 epoch
 *    48    4 state (1 CLOSED, 2 OPEN: flushed while still open, at shutdown / on battery)
 *    52    4 checksum (stored value of the last valid checksum entry; 0 when none)
 *    56    8 valid_len (bytes of data following the header)
 *    64    8 entries (data entries inside valid_len)
 *    72    8 buffer_size (capacity of the buffer the data came from)
 *    80    8 flush time, nanoseconds since the Unix epoch (informational)
 *    88   36 reserved, zero
 *   124    4 CRC32C of bytes 0..123
 *
 * Readers check the magic, version, header CRC and file size, then rescan the data with
 * tw_scan(): valid_len, checksum and entry count must all match the header (a bit flip anywhere
 * is reported as -TW_ECORRUPT).
 */
#ifndef TW_REPLICA_SEGFILE_H
#define TW_REPLICA_SEGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEGFILE_MAGIC "TWSEGv1"
#define SEGFILE_VERSION 2u /* 2: data entry headers carry a header check */
#define SEGFILE_HDR_SIZE 128u
#define SEGFILE_NAME_MAX 64u /* "xxxxxxxxxxxxxxxx-xxxxxxxxxxxxxxxx.twseg.tmp" + NUL fits */
#define SEGFILE_SUFFIX ".twseg"
#define SEGFILE_TMP_SUFFIX ".tmp"

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
};

/* Encode / decode the 128-byte header. Decode returns 0 or -TW_ECORRUPT (bad magic, CRC,
 * state or sizes) or -TW_EVERSION (a newer format). */
void segfile_hdr_encode(const struct segfile_hdr *h, uint8_t out[SEGFILE_HDR_SIZE]);
int segfile_hdr_decode(const uint8_t in[SEGFILE_HDR_SIZE], struct segfile_hdr *h);

/* "<log>-<seg>.twseg" into out (SEGFILE_NAME_MAX bytes). */
void segfile_name(uint64_t log_id, uint64_t segment_id, char *out, size_t len);
/* Parse a final file name; false for anything else (tmp files included). */
bool segfile_parse_name(const char *name, uint64_t *log_id, uint64_t *segment_id);

/*
 * Durably write a segment file into the directory open as `dirfd`: tmp file, write header and
 * data, fsync, rename, fsync the directory. `data` (h->valid_len bytes) is borrowed for the
 * call. Returns 0 or -errno; on failure the tmp file is removed and no final file is changed.
 * Blocking: call it on the flusher thread, never on the progress thread.
 */
int segfile_write(int dirfd, const struct segfile_hdr *h, const void *data);

/*
 * Read and validate a segment file's header (name relative to dirfd). Checks the file size
 * against valid_len. Returns 0, -TW_ECORRUPT, -TW_EVERSION or -errno.
 */
int segfile_read_header(int dirfd, const char *name, struct segfile_hdr *h);

/*
 * Read a whole segment file into buf (cap bytes; the bytes after valid_len are left untouched)
 * and verify it: header as above, then tw_scan() over the data must give the header's
 * valid_len, checksum and entries. Returns 0, -TW_ECORRUPT (h is still filled when the header
 * itself was valid), -EFBIG when valid_len > cap, or -errno.
 */
int segfile_load(int dirfd, const char *name, void *buf, size_t cap, struct segfile_hdr *h);

/* Verify a file without keeping its data (allocates a temporary buffer of valid_len bytes). */
int segfile_verify(int dirfd, const char *name, struct segfile_hdr *h);

/* Rewrite a segment file with a new replica version (read, verify, durable write). Blocking. */
int segfile_set_version(int dirfd, uint64_t log_id, uint64_t segment_id, uint64_t version);

/* Remove a segment file and fsync the directory. Returns 0 or -errno (-ENOENT included). */
int segfile_remove(int dirfd, uint64_t log_id, uint64_t segment_id);

/*
 * Fence epochs, one small file per fenced log: "<log_id hex16>.twepoch" (24 bytes: magic "EPCH",
 * log_id, epoch, CRC32C of the first 20 bytes), written durably like a segment file (tmp, fsync,
 * rename, fsync directory). Blocking.
 */
#define SEGFILE_EPOCH_SUFFIX ".twepoch"
void segfile_epoch_name(uint64_t log_id, char *out, size_t len);
bool segfile_parse_epoch_name(const char *name, uint64_t *log_id);
int segfile_write_epoch(int dirfd, uint64_t log_id, uint64_t epoch);
/* 0, -TW_ECORRUPT or -errno. */
int segfile_read_epoch(int dirfd, const char *name, uint64_t *log_id, uint64_t *epoch);

/*
 * Test hook: when set, called at every step of segfile_write with the step's name ("create",
 * "write", "fsync", "close", "rename", "fsync-dir"); a non-zero return makes the step fail with
 * that value (a negative errno), to simulate a crash or an I/O error there. May be switched
 * while a flusher runs (atomic); the hook itself runs on the flusher thread.
 */
typedef int (*segfile_hook_fn)(void *arg, const char *step);
void segfile_set_hook(segfile_hook_fn fn, void *arg);

#endif /* TW_REPLICA_SEGFILE_H */
