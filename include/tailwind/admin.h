/*
 * tailwind/admin.h — an operator's view of running backups: list their logs and segment
 * copies, read their statistics, check a key file. twctl is built on it (and on recovery.h's
 * tw_recover and tw_admin_fence/trim/delete); an operator's own tool can be too.
 *
 *   struct tw_admin_config cfg;
 *   struct tw_admin *a;
 *   tw_admin_config_init(&cfg); cfg.backups = addrs; cfg.n_backups = n;
 *   rc = tw_admin_open(&cfg, &a, err, sizeof(err));       // connects to each backup
 *   for (unsigned i = 0; i < n; i++)
 *       if (!tw_admin_backup_error(a, i))
 *           tw_admin_list(a, i, log_id, 0, on_segment, arg);
 *   tw_admin_close(a);
 *
 * Threading: an admin session is used by one thread at a time; every call is blocking (it
 * drives its own fabric). Different sessions are independent. Structs the library hands out
 * (const pointers) are the library's: borrowed until the next call on the same session, and
 * they may grow at their end in a later 1.x, so read only the fields named here.
 */
#ifndef TAILWIND_ADMIN_H
#define TAILWIND_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>
#include <tailwind/log_format.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A key file as every Tailwind program reads it (cluster key: 32 to 4096 bytes, not readable
 * by group or others). key_file NULL: $TW_KEY_FILE; "": none. Loads the key, checks it and
 * forgets it. Returns 0 with *path_out (may be NULL) the file that applies (NULL: none, nothing
 * checked), or a negative error with why_out saying what is wrong and what to do. Thread-safe;
 * key_file borrowed until return (*path_out points into it or into the environment).
 */
TW_API int tw_key_file_check(const char *key_file, const char **path_out, char *why_out,
			     size_t why_len);

struct tw_admin_config {
	uint32_t size;                /* set by tw_admin_config_init (docs/api.md, ABI rule) */
	const char *provider;         /* NULL: $FI_PROVIDER, else "tcp" */
	const char *const *backups;   /* addresses as twd printed them; borrowed until open
				       * returns */
	unsigned n_backups;           /* 1..TW_ADMIN_MAX_BACKUPS (64) */
	const char *key_file;         /* NULL: $TW_KEY_FILE; "": no authentication */
	unsigned connect_timeout_ms;  /* per backup; default TW_DEFAULT_CONNECT_TIMEOUT_MS */
	unsigned rpc_timeout_ms;      /* per request; default TW_DEFAULT_RPC_TIMEOUT_MS */
	const char *node_name;        /* named in the backups' logs; NULL: "admin" */
	const char *timeout_hint;     /* said after a timeout, e.g. "-t MS waits longer"; NULL ok */
};

#define TW_ADMIN_MAX_BACKUPS 64u

TW_API void tw_admin_config_init_sized(struct tw_admin_config *cfg, size_t size);
#define tw_admin_config_init(cfg) tw_admin_config_init_sized((cfg), sizeof(*(cfg)))

struct tw_admin;

/*
 * Open the fabric and connect to every backup of cfg, as an administrator (with the key, when
 * there is one). Returns 0 when the fabric opened, even if some backups did not answer
 * (tw_admin_backup_error() says which and why); -TW_ENOPROV when the provider is not available
 * here, -EINVAL for a bad cfg or key file, -ENOMEM; errmsg_out says why. *out is set on 0 only.
 */
TW_API int tw_admin_open(const struct tw_admin_config *cfg, struct tw_admin **out,
			 char *errmsg_out, size_t errmsg_len);

/* Backup i's address (as given), or NULL past the last. */
TW_API const char *tw_admin_backup_addr(const struct tw_admin *a, unsigned i);

/* NULL while backup i is connected; else why it is not (connect, authentication, loss). */
TW_API const char *tw_admin_backup_error(const struct tw_admin *a, unsigned i);

/* How many backups are connected. */
TW_API unsigned tw_admin_reachable(const struct tw_admin *a);

/* The message of the last failed call about backup i ("" when none). */
TW_API const char *tw_admin_errmsg(const struct tw_admin *a, unsigned i);

/* Close the connections and free the session. NULL is a no-op. Always 0. */
TW_API int tw_admin_close(struct tw_admin *a);

enum tw_segment_state {
	TW_SEGMENT_UNKNOWN = 0,
	TW_SEGMENT_OPEN = 1,    /* in a buffer, being written */
	TW_SEGMENT_CLOSED = 2,  /* in a buffer, closed and verified */
	TW_SEGMENT_FLUSHED = 3, /* in its segment file */
	TW_SEGMENT_LOST = 4,    /* opened on this backup, gone after its restart */
};

/* "open", "closed", "flushed", "LOST", "unknown". */
TW_API const char *tw_segment_state_name(enum tw_segment_state st);

/* One segment copy a backup holds. */
struct tw_admin_segment {
	uint64_t log_id;
	uint64_t segment_id;
	enum tw_segment_state state;
	uint64_t valid_len;       /* open: from the scan made for the listing; else as verified */
	uint32_t checksum;        /* the last valid checksum entry */
	uint64_t replica_version;
	uint64_t epoch;           /* the epoch the copy was opened at */
	bool corrupt;             /* failed a check on the backup */
	uint64_t entries;         /* data entries in the valid prefix */
	uint64_t length;          /* the buffer length granted at open */
	uint32_t chain_seed;      /* 0: unseeded */
};

/* What a backup says of one log (tw_admin_list with all_logs 0). */
struct tw_admin_log {
	bool known;               /* it holds a segment, a lost record or a freed prefix of it */
	uint64_t epoch;           /* the log's epoch there (0: never fenced or opened) */
	uint64_t owner;           /* the owner's incarnation at that epoch (0: unknown) */
	uint64_t free_below;      /* segments below this one were freed (log cleaning) */
	const char *unavailable;  /* NULL, or why this backup refuses every request about it */
};

typedef void (*tw_admin_segment_fn)(void *arg, unsigned backup,
				    const struct tw_admin_segment *s);

/*
 * Every segment copy backup i holds of log log_id (all_logs 0) or of every log from log_id
 * on (all_logs 1), in (log, segment) order, each handed to fn (may be NULL; s borrowed for the
 * call). With all_logs 0 and log_out non-NULL, *log_out is set to what the backup says of the
 * log (borrowed until the next call on a). Returns 0, or the error of the failed request
 * (tw_admin_errmsg(a, i) says why); -ENOTCONN when backup i is not connected.
 */
TW_API int tw_admin_list(struct tw_admin *a, unsigned i, uint64_t log_id, int all_logs,
			 tw_admin_segment_fn fn, void *arg, const struct tw_admin_log **log_out);

/* RPC handler calls of one request kind on a backup. */
struct tw_admin_handler {
	const char *kind;         /* "open", "close", "list", ... ("other": unknown here) */
	uint64_t calls;
	uint64_t errors;
};

/* A backup's statistics (its Stats request). */
struct tw_admin_stats {
	uint32_t buffers_total;   /* allocated now */
	uint32_t buffers_max;     /* the pool's cap (buffers_total for a fixed pool) */
	uint32_t buffers_free;
	uint32_t buffers_open;
	uint32_t buffers_closed;
	uint32_t buffers_flushed;
	uint64_t flushes;
	uint64_t bytes_flushed;
	uint64_t rpc_msgs_rx;
	uint64_t rpc_msgs_tx;
	uint64_t rpc_bytes_rx;
	uint64_t rpc_bytes_tx;
	uint64_t rpc_malformed;
	double cpu_seconds;
	uint64_t uptime_ms;
	const char *detail;       /* more counters as "key=value ..." ("" when none) */
	size_t n_handlers;
	const struct tw_admin_handler *handlers; /* n_handlers of them */
};

/*
 * Backup i's statistics into *out (the library's, borrowed until the next call on a).
 * Returns 0, or as tw_admin_list.
 */
TW_API int tw_admin_stats(struct tw_admin *a, unsigned i, const struct tw_admin_stats **out);

/* What an offline check of a segment file found (tw_admin_inspect_file); the library's, freed
 * with tw_segfile_report_free. Nothing read from the file is trusted as a length. */
struct tw_segfile_report {
	uint64_t file_size;
	int short_file;           /* shorter than a header: only `why` below is filled */
	int header_rc;            /* 0, -TW_ECORRUPT (bad magic, CRC, state or sizes: the fields
				   * below as decoded that far) or -TW_EVERSION (a newer format) */
	unsigned format_version;  /* the header's version field as read */
	uint64_t log_id;
	uint64_t segment_id;
	uint64_t replica_version;
	uint64_t epoch;
	int open;                 /* flushed while still open (battery power, shutdown) */
	uint32_t flags;           /* TW_SEGFILE_F_* */
	uint32_t checksum;        /* as the header says */
	uint64_t valid_len;       /* as the header says */
	uint64_t entries;         /* as the header says */
	uint64_t buffer_size;
	uint64_t flush_time_ns;
	uint32_t chain_seed;
	uint64_t data_offset;     /* where the data starts in the file */
	uint64_t data_len;        /* bytes the file holds from there */
	const void *data;         /* those bytes */
	/* tw_scan_seeded of the data with the header's seed (tailwind/log_format.h). */
	size_t scan_valid_len;
	uint64_t scan_entries;
	uint32_t scan_checksum;
	enum tw_scan_stop scan_stop;
	size_t scan_stop_offset;
	int corrupt;              /* the verdict */
	const char *why;          /* why it is corrupt ("" when it is not) */
};

/* The backup marked the copy corrupt (a failed check while it held it). */
#define TW_SEGFILE_F_CORRUPT 1u

/*
 * Read the regular file open as fd (a segment file of a twd directory, of any content and any
 * length) and check it as recovery does: header, sizes, the scan of its data, the CORRUPT flag.
 * Returns 0 and *out (the verdict is in it), or a negative errno when the file could not be
 * read or the memory for it not had. fd is borrowed; the caller closes it.
 */
TW_API int tw_admin_inspect_file(int fd, struct tw_segfile_report **out);
/* NULL is fine. Always 0. */
TW_API int tw_segfile_report_free(struct tw_segfile_report *r);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_ADMIN_H */
