/*
 * backup/metalog.h — the backup's metadata journal: small durable records of who owns each log
 * (fence epochs), which segments were opened here, and which prefixes were freed or deleted.
 * Internal to libtailwind.
 *
 * Why a journal and not one file per fact: a fence, and the record of an open that must precede
 * the grant, are on the critical path of a takeover and of every segment rollover. Creating,
 * renaming and fsyncing a new file per fact makes the file system commit its journal, and with
 * ext4's default data=ordered mode that commit first writes out every dirty data block of the
 * files in the same transaction — the flusher's 8 MiB segment files — so a fence waited half a
 * second behind them. Here a record is a 64-byte pwrite into a file whose blocks were written
 * (with zeros) when it was created, through an O_DSYNC descriptor: an overwrite of allocated,
 * initialised blocks changes no metadata that fdatasync must commit, so the write costs one
 * data block and a cache flush. See docs/operations.md, "Metadata journal".
 *
 * File "meta.twlog" in the storage directory, little-endian:
 *   0     64 header: magic "TWMETA1\0", u32 version (1), u32 record size (64), u32 capacity
 *              (records), u64 generation (random per file), reserved, u32 CRC32C of bytes 0..59
 *   64 + 64k   record k: u32 type, u32 reserved, u64 seq (1, 2, 3 ... in this file), u64 log_id,
 *              u64 a, u64 b, u64 c, 12 bytes reserved, u32 CRC32C of bytes 0..59
 * The rest of the file is zero. Replay stops at the first record whose type is 0, whose CRC does
 * not match or whose seq is not the previous one plus one: a record torn by a crash was never
 * acknowledged (the reply follows the write), and nothing after it was written. When the file
 * is full it is rewritten from the backup's state (tmp file, fsync, rename, fsync directory).
 */
#ifndef TW_BACKUP_METALOG_H
#define TW_BACKUP_METALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define METALOG_NAME "meta.twlog"
#define METALOG_REC_SIZE 64u
#define METALOG_HDR_SIZE 64u
#define METALOG_DEFAULT_CAP 16384u /* records: 1 MiB */

enum metalog_type {
	METALOG_OWNER = 1,  /* log_id, a = epoch, b = owner incarnation (a fence) */
	METALOG_OPEN = 2,   /* log_id, a = segment id, b = epoch, c = owner incarnation */
	METALOG_FREE = 3,   /* log_id, a = first live segment (segments below were freed) */
	METALOG_DELETE = 4, /* log_id: every segment dropped; epoch and owner kept */
};

struct metalog_rec {
	uint32_t type;
	uint64_t log_id, a, b, c;
};

struct tw__storage;
struct metalog {
	const struct tw__storage *st; /* the system calls it writes through (storage.h) */
	int dirfd;      /* borrowed */
	int fd;         /* O_DSYNC */
	uint32_t cap;   /* records the file holds */
	uint32_t used;  /* records written */
	uint64_t seq;   /* of the last record */
};

/* Called for each valid record in order during tw__metalog_open; non-zero stops with that code. */
typedef int (*metalog_replay_fn)(void *arg, const struct metalog_rec *r);

/*
 * Open (or create, with `cap` zeroed records) the journal in `dirfd` and replay it through `fn`.
 * It writes through `st` (backup/storage.h; NULL: the system calls).
 * Returns 0, or a negative code with a reason in why: -TW_ECORRUPT (bad header: the file is not
 * ours or its header was damaged), -TW_EVERSION (a newer format), -errno.
 */
int tw__metalog_open(struct metalog *m, const struct tw__storage *st, int dirfd, uint32_t cap,
		     metalog_replay_fn fn, void *arg, char *why, size_t why_len);

/* Append one record durably (O_DSYNC). -ENOSPC when the file is full (rewrite it first). */
int tw__metalog_append(struct metalog *m, const struct metalog_rec *r);

/* Replace the journal by one holding exactly recs[0..n) (capacity at least 2n and `cap`):
 * tmp file, fsync, rename, fsync directory; then appends go to the new file. */
int tw__metalog_rewrite(struct metalog *m, const struct metalog_rec *recs, size_t n, uint32_t cap);

void tw__metalog_close(struct metalog *m);

#endif /* TW_BACKUP_METALOG_H */
