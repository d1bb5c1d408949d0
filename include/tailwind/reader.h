/*
 * tailwind/reader.h — read a live log from its backups, in a process that is not its primary:
 * read replicas, change feeds, warm standbys (docs/readers.md).
 *
 *   tw_reader_config_init(&cfg); cfg.log_id = ...; cfg.backups = addrs; cfg.n_backups = n;
 *   cfg.from = TW_READ_OLDEST;                     (or TW_READ_TAIL, or TW_READ_LSN + cfg.lsn)
 *   tw_reader_open(&cfg, &r, err, sizeof(err));
 *   while ((rc = tw_reader_next(r, &e, 1000)) == 0 || rc == -ETIMEDOUT)
 *           if (rc == 0) use(e.lsn, e.data, e.len);
 *   tw_reader_close(r);
 *
 * What a reader returns (the visibility rule): entries in log order, each exactly once, and
 * only entries that were acknowledged to the writer (stored by all its r backups) or that a
 * recovery kept: never one that a later recovery could drop. The primary publishes how far it
 * has been acknowledged to the backups of its open segment (protocol 1.4, SetAcked); a closed
 * segment is readable to its closed length. So a reader trails the writer by about one round
 * trip: an append is readable once its acknowledgement was published. Since 1.5 the primary
 * publishes to a backup nobody reads about once a second; a reader's first request there waits
 * one more round trip for the newest position (docs/readers.md, "What SetAcked costs").
 *
 * Positions are the primary's LSNs (tw_pos_to_lsn: segment << 32 | offset of the entry). A
 * takeover keeps them: the new owner continues in later segments, and the reader follows (the
 * recovery closes the old owner's open segment at the length it recovered, which the reader
 * then reads to its end). A backup lost under a reader is replaced by another that holds the
 * segment; the reader reconnects to lost backups later.
 *
 * Waiting at the end of the log costs nothing on either side: the backup holds the read until
 * there is more (long-poll), and the reader blocks in the fabric meanwhile.
 *
 * Threading: one thread at a time per reader (the caller serialises); readers are independent.
 * Errors: negative codes (tailwind/common.h); tw_reader_errmsg() has the detail.
 */
#ifndef TAILWIND_READER_H
#define TAILWIND_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TW_READER_MAX_BACKUPS 64u

enum tw_read_from {
	TW_READ_OLDEST = 0, /* the first entry the backups keep (after log cleaning) */
	TW_READ_TAIL = 1,   /* the first entry appended after the open: only new entries */
	TW_READ_LSN = 2,    /* cfg.lsn: the entry at that position (an entry's LSN, or the end of
			     * a segment), e.g. the position after the last entry a standby applied */
};

struct tw_reader_config {
	uint32_t size;  /* set by tw_reader_config_init (tailwind/common.h, the ABI rule) */
	uint64_t log_id;
	const char *const *backups; /* the log's backups (addresses as twd prints them), or: */
	size_t n_backups;           /* 1 .. TW_READER_MAX_BACKUPS */
	const char *coordinator;    /* instead of backups: "zk://host:port/root" (the log's record
				     * of backups, else every registered backup) */
	const char *provider;       /* NULL: $FI_PROVIDER if set, else "tcp" */
	const char *key_file;       /* cluster key; NULL: $TW_KEY_FILE if set; "": none */
	enum tw_read_from from;
	uint64_t lsn;               /* TW_READ_LSN */
	unsigned connect_timeout_ms; /* per backup; default TW_DEFAULT_CONNECT_TIMEOUT_MS */
	unsigned rpc_timeout_ms;    /* beyond the long-poll's own wait; default
				     * TW_DEFAULT_RPC_TIMEOUT_MS */
	unsigned poll_ms;           /* longest wait the backup holds one read; default 1000 */
	uint32_t max_bytes;         /* per read; 0: what one control message holds (~64 KiB) */
	/* Move the bytes with one-sided reads (fi_read of a read grant of the segment, as a
	 * recovery fetches) instead of in the RPC replies; the RPC then only reports, and waits
	 * for, the readable end. The backup's CPU moves no byte where the provider reads by RDMA
	 * (verbs); tcp and sockets serve reads in the backup's process. A read that cannot be
	 * granted or fails goes over the RPC path. Up to 1 MiB per read. Default false. */
	bool one_sided;
};

TW_API void tw_reader_config_init_sized(struct tw_reader_config *cfg, size_t size);
#define tw_reader_config_init(cfg) tw_reader_config_init_sized((cfg), sizeof(*(cfg)))

struct tw_reader;

/* One entry. data is borrowed until the next call on the reader. Its size is fixed for 1.x:
 * new fields come from `reserved` (tw_reader_next zeroes it). */
struct tw_reader_entry {
	uint64_t lsn;     /* its position */
	const void *data;
	uint32_t len;
	uint64_t epoch;   /* the log's epoch on the backup that served it */
	uint64_t reserved[4]; /* 0 */
};

/*
 * Connect to the backups (the cluster key's challenge-response when there is a key) and find
 * the starting position. Returns 0 and *out, or: -EINVAL (configuration), -TW_ENOBACKUP (no
 * backup reachable; the message names each and why), -EACCES (refused: no or wrong key),
 * -TW_EFREED (cfg.lsn is below what log cleaning kept), -TW_ENOTFOUND (no backup holds the
 * log), -TW_EVERSION (the backups are older than protocol 1.4), -TW_ENOPROV, -ENOMEM.
 */
TW_API int tw_reader_open(const struct tw_reader_config *cfg, struct tw_reader **out,
			  char *errmsg_out, size_t errmsg_len);

/*
 * The next entry, waiting up to timeout_ms for one (-1: no limit; 0: only what is readable
 * now). Returns 0 and *e, or -ETIMEDOUT (nothing new yet: call again), -TW_EFREED (the
 * position was freed by log cleaning meanwhile), -TW_ENOBACKUP (no backup holding the segment
 * reachable, after trying each), -TW_ECORRUPT (every copy failed its checks), -EMSGSIZE (an
 * entry larger than one control message: read it with tw_recover), -EACCES.
 */
TW_API int tw_reader_next(struct tw_reader *r, struct tw_reader_entry *e, int timeout_ms);

/* Callback form: deliver entries to fn until it returns non-zero (returned), or no entry came
 * for timeout_ms (-ETIMEDOUT; -1: no limit), or an error of tw_reader_next. */
typedef int (*tw_reader_fn)(void *arg, const struct tw_reader_entry *e);
TW_API int tw_reader_run(struct tw_reader *r, tw_reader_fn fn, void *arg, int timeout_ms);

/* The position of the next entry to be returned (an LSN; give it as cfg.lsn to go on later). */
TW_API uint64_t tw_reader_position(const struct tw_reader *r);

struct tw_reader_stats {
	uint64_t entries;   /* returned */
	uint64_t bytes;     /* payload bytes returned */
	uint64_t reads;     /* ReadEntries answered */
	uint64_t waits;     /* of which held at the readable end (long-poll) */
	uint64_t switches;  /* times it moved to another backup (the next segment is elsewhere, or
			     * the one it read was lost, corrupt or behind) */
	uint64_t reconnects;
	uint64_t segments;  /* segments entered */
	uint64_t one_sided_reads; /* reads that moved bytes one-sided (cfg.one_sided) */
	uint64_t one_sided_fallbacks; /* reads that went over the RPC path instead */
	int backup;         /* index (in the backups given) of the backup being read; -1: none */
};
TW_API void tw_reader_get_stats_sized(const struct tw_reader *r, struct tw_reader_stats *out,
				      size_t size);
#define tw_reader_get_stats(r, out) tw_reader_get_stats_sized((r), (out), sizeof(*(out)))

TW_API const char *tw_reader_errmsg(const struct tw_reader *r);

/* Disconnect and free. NULL is fine. Returns 0 (an int, as every other close: a later 1.x
 * may report a failure here). */
TW_API int tw_reader_close(struct tw_reader *r);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_READER_H */
