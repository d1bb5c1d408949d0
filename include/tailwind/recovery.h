/*
 * tailwind/recovery.h — rebuild a crashed primary's log from its backups (Tailwind §3.4.1).
 *
 *   tw_recover_config_init(&cfg); cfg.log_id = ...; cfg.backups = addrs; cfg.n_backups = n;
 *   rc = tw_recover(&cfg, on_entry, arg, &res, err, sizeof(err));
 *
 * What tw_recover() does, in order (docs/recovery.md has the argument for each step):
 *   1. fence   connect to every backup, fence the log with a new epoch on each reachable one:
 *              the backup stores the epoch, closes the memory registrations of the log's open
 *              buffers (the old primary's writes now fail on tcp, sockets and verbs) and closes
 *              the old primary's connection. It refuses RPCs of the log carrying an older epoch.
 *              shm's fast path (process_vm_writev) checks no keys: there the backup also moves
 *              the log's open buffers to new addresses and guards the old ones (PROT_NONE), so
 *              a zombie primary's late writes fail with EFAULT (docs/fabric.md).
 *   2. list    ask every backup for its copies of the log's segments. Open buffers are scanned
 *              by the backup (Algorithm 1 + payload CRCs) for the reply: valid length, checksum.
 *   3. choose  one copy per segment: highest replica version; a closed (verified) copy over an
 *              open one; among open copies the longest valid prefix (safe: an append is
 *              acknowledged only once all r replicas hold it, so every copy holds every
 *              acknowledged byte and the longest one holds nothing that is not a whole,
 *              verified write); a copy the backup reports corrupt is skipped with a warning.
 *   4. fetch   for each segment a read grant (ReadSegment RPC; the backup loads a flushed
 *              segment into a buffer first) and one-sided reads (tw_chan_read) of its valid
 *              prefix, several segments from different backups in flight at once.
 *   5. verify  tw_scan() over the fetched bytes: the valid length, checksum and entry count must
 *              equal what the backup reported. A copy that fails is skipped (warning naming the
 *              backup) and the segment is fetched from the next best copy.
 *   6. deliver every data entry to the callback, in log order (segment by segment, offset order).
 *   7. record  unless cfg.no_record: tell every backup holding a copy of a segment that was still
 *              open the recovered length (RecoveredOffset RPC). The backup closes its open copy
 *              at that length (a shorter copy at its own verified length), so a second recovery
 *              sees closed copies and gives the same answer.
 *
 * Guarantee: with every backup of the log reachable (or, per segment, at least one copy holding
 * every acknowledged byte), the entries delivered are every acknowledged append, in order,
 * possibly followed by appends that were not acknowledged but whose writes are complete and
 * verified; nothing that fails a check is ever delivered. Segments are delivered from the lowest
 * segment id any backup holds; the walk stops at the first segment id with no usable copy.
 *
 * Threading: tw_recover() is blocking and uses its own fabric instance; it may run on any
 * thread; concurrent calls are independent (but two recoveries of the same log race: give them
 * distinct epochs from one coordinator). The callback runs on the calling thread; an internal
 * fetch thread (started and joined inside the call) drives the fabric meanwhile.
 *
 * Errors: 0 or a negative code (tw_strerror()); errmsg_out receives the detail. Warnings (a
 * backup unreachable, a corrupt copy skipped) are logged with tw_log_warn and counted in the
 * result; they do not fail the call as long as the log can be rebuilt.
 */
#ifndef TAILWIND_RECOVERY_H
#define TAILWIND_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TW_RECOVER_MAX_BACKUPS 64u

struct tw_recover_config {
	uint32_t size;  /* set by tw_recover_config_init (tailwind/common.h, the ABI rule) */
	uint64_t log_id;
	const char *const *backups; /* addresses of the backups to ask (as twd prints them) */
	size_t n_backups;           /* 1 .. TW_RECOVER_MAX_BACKUPS */
	const char *provider;       /* NULL: $FI_PROVIDER if set, else "tcp" ("mem" for tests) */
	/* Epoch to fence with. 0: automatic, 1 + the highest epoch any backup reports (retried
	 * higher when a backup answers that it is already past it). */
	uint64_t epoch;
	unsigned connect_timeout_ms; /* per backup; default TW_DEFAULT_CONNECT_TIMEOUT_MS */
	unsigned rpc_timeout_ms;     /* default TW_DEFAULT_RECOVER_RPC_TIMEOUT_MS (a read grant
				      * may load a file first) */
	unsigned op_timeout_ms;      /* one-sided reads; default TW_DEFAULT_OP_TIMEOUT_MS */
	unsigned segs_per_backup;    /* segments being fetched from one backup at once; default 2 */
	unsigned window;             /* segments fetched ahead of delivery; default 3 per backup */
	size_t chunk_size;           /* bytes per one-sided read; default 1 MiB */
	unsigned reads_per_seg;      /* reads in flight per segment; default 4 */
	bool busy_poll; /* poll the fabric instead of blocking waits (one core at 100%) */
	bool no_fence;  /* do not fence (inspection of a live log: the answer may be stale) */
	bool no_record; /* do not send RecoveredOffset (leave open copies open) */
	/* Deliver only entries at or after this LSN (0: all): segments below its segment are
	 * neither fetched nor delivered (they are still fenced, and counted for the first segment
	 * of a takeover). For a caller whose state already holds the entries before it, e.g. a
	 * warm standby that read them with a reader (docs/readers.md). */
	uint64_t from_lsn;
	/* Cluster key for peer authentication (tailwind/backup.h, docs/operations.md): every
	 * backup must prove it in the handshake, and we prove it to them; a backup that does not
	 * is left out like an unreachable one. NULL: $TW_KEY_FILE if set and not empty, else
	 * none; "": none. */
	const char *key_file;
};

/* Fill `cfg` with the defaults above (backups NULL: the caller must set them). Never fails. */
TW_API void tw_recover_config_init_sized(struct tw_recover_config *cfg, size_t size);
#define tw_recover_config_init(cfg) tw_recover_config_init_sized((cfg), sizeof(*(cfg)))

/* One recovered entry, handed to the callback (the library's struct: a later 1.x may add fields
 * at its end). `data` is borrowed until the callback returns. */
struct tw_recovered_entry {
	uint64_t index;      /* 0, 1, 2 ... in log order over the whole recovery */
	uint64_t segment_id;
	uint64_t offset;     /* of the entry's header in its segment */
	uint64_t lsn;        /* segment << 32 | offset, as tw_pos_to_lsn() (tailwind/primary.h) */
	const void *data;
	uint32_t len;
};

/* Return 0 to go on, anything else to stop the recovery (tw_recover returns -ECANCELED). */
typedef int (*tw_recover_entry_fn)(void *arg, const struct tw_recovered_entry *e);

/* Phases, for the timings. */
enum tw_recover_phase {
	TW_RECOVER_PHASE_CONNECT = 0,
	TW_RECOVER_PHASE_FENCE,
	TW_RECOVER_PHASE_LIST,
	TW_RECOVER_PHASE_FETCH,   /* wall time of fetch + verify + deliver (they overlap) */
	TW_RECOVER_PHASE_VERIFY,  /* time inside the fetch phase spent in tw_scan of fetched bytes */
	TW_RECOVER_PHASE_DELIVER, /* time inside the fetch phase spent walking entries + callback */
	TW_RECOVER_PHASE_RECORD,
	TW_RECOVER_PHASE_TOTAL,
	TW_RECOVER_PHASES,
};
/* Room for phases in tw_recover_result.phase_ns: a later 1.x may add phases up to this many
 * without moving a field. */
#define TW_RECOVER_PHASES_MAX 16

/* Short name of a phase ("fence", "list", ...). Static string, never NULL. */
TW_API const char *tw_recover_phase_name(enum tw_recover_phase ph);

/*
 * Counts and timings of a recovery. Its size is fixed for 1.x: a later 1.x takes its new fields
 * from `reserved` (the library zeroes the whole struct), so the caller's struct and the
 * library's are always the same size, also where another result embeds it.
 */
struct tw_recover_result {
	uint64_t epoch;                /* the epoch the log was fenced with (0: no_fence) */
	unsigned backups, backups_reached, backups_fenced;
	uint64_t segments;             /* segments delivered */
	uint64_t first_segment, last_segment; /* ids delivered (valid when segments > 0) */
	uint64_t entries;              /* entries delivered */
	uint64_t payload_bytes;        /* payload bytes delivered */
	uint64_t log_bytes;            /* log bytes fetched and verified (headers, checksums) */
	uint64_t copies_listed;        /* segment copies seen on all backups */
	uint64_t copies_corrupt;       /* skipped: reported corrupt, or failed verification/load */
	uint64_t copies_stale;         /* skipped: older replica version */
	uint64_t refetches;            /* segments fetched again from another copy */
	uint64_t segments_missing;     /* listed segments that could not be delivered (the call
					* failed before delivering anything) */
	uint64_t offsets_recorded;     /* RecoveredOffset accepted by a backup */
	uint64_t copies_lost;          /* copies listed LOST (opened there, gone after a restart) */
	uint64_t segments_lost;        /* segments whose every copy is LOST (the call failed) */
	uint64_t free_below;           /* first live segment (log cleaning); delivery starts here */
	uint64_t incarnation;          /* owner id this recovery fenced with */
	uint64_t copies_repaired;      /* shorter open copies sent the bytes they lacked and
					* closed at the recovered length (docs/recovery.md, "Record") */
	/* Time per phase, indexed by enum tw_recover_phase (the first TW_RECOVER_PHASES used). */
	uint64_t phase_ns[TW_RECOVER_PHASES_MAX];
	uint64_t reserved[16];         /* 0 */
};

/*
 * Recover log cfg->log_id: see the steps above. `cb` (may be NULL: verify only) receives every
 * entry in log order; `arg` is passed to it. `cfg` is borrowed for the call. *res_out (may be NULL)
 * receives counts and timings, also on failure (as far as the recovery got). errmsg_out (may
 * be NULL, errmsg_len bytes) receives the detail of a failure.
 * Returns 0, or:
 *   -EINVAL        bad configuration;
 *   -TW_ENOBACKUP  no backup reachable, or a segment in the middle of the log has no usable
 *                  copy (entries before it were delivered; res_out->segments_missing counts what
 *                  follows);
 *   -TW_EFENCED    a backup kept refusing the fence (another recovery with a higher epoch);
 *   -ECANCELED     the callback returned non-zero;
 *   -TW_ENOPROV, -ENOMEM, and codes from the fabric.
 * When a call fails, entries already delivered stay delivered (the callback is never called
 * again for them).
 */
TW_API int tw_recover(const struct tw_recover_config *cfg, tw_recover_entry_fn cb, void *arg,
		      struct tw_recover_result *res_out, char *errmsg_out, size_t errmsg_len);

/*
 * Fence only (step 1): fence log cfg->log_id on every reachable backup with cfg->epoch (0:
 * automatic as above). *epoch_out (may be NULL) receives the epoch used, *fenced_out (may be
 * NULL) how many backups accepted it. Returns 0 when at least one backup accepted, else as
 * tw_recover(). Blocking; borrowed arguments as tw_recover().
 */
TW_API int tw_admin_fence(const struct tw_recover_config *cfg, uint64_t *epoch_out,
			    unsigned *fenced_out, char *errmsg_out, size_t errmsg_len);

/*
 * Log cleaning without a primary (twctl free): free log cfg->log_id's segments below
 * `below_segment` on every reachable backup, at the highest epoch they report (no fence: the
 * log's primary, if any, keeps running). A backup refuses when a segment below the mark is still
 * open (being written). Each backup records the mark durably before it removes files; recovery
 * and takeover then start at the mark. *freed_out (may be NULL): segments dropped in all.
 * Returns 0 when every reachable backup accepted, else the first refusal (-EINVAL: an open
 * segment below the mark; -TW_EFENCED), -TW_ENOBACKUP (none reachable), -EINVAL (cfg).
 */
TW_API int tw_admin_trim(const struct tw_recover_config *cfg, uint32_t below_segment,
		       uint64_t *freed_out, char *errmsg_out, size_t errmsg_len);

/*
 * Delete log cfg->log_id (twctl delete): fence it with a new epoch (as tw_admin_fence; the
 * owner, if it runs, is stopped), then drop every segment of it on every fenced backup, open ones
 * included. Afterwards the backups hold no segment file and no buffer of the log; each keeps only
 * the log's epoch (one journal record) so that an old primary stays fenced. A plain
 * tw_primary_open of the same log id then creates it anew (at a higher epoch). Returns as
 * tw_admin_trim, or -TW_EFENCED when another owner won the fence.
 */
TW_API int tw_admin_delete(const struct tw_recover_config *cfg, uint64_t *freed_out,
			 char *errmsg_out, size_t errmsg_len);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_RECOVERY_H */
