/*
 * tailwind/common.h — export macro, error codes and logging shared by every part of the API.
 *
 * Error model: every function that can fail returns 0 (or a non-negative count) on success and a
 * negative error code on failure. Codes below 1024 are negated errno values (so libfabric's -FI_E*
 * codes pass through unchanged); Tailwind's own codes start at 1024. tw_strerror() names any of them.
 */
#ifndef TAILWIND_COMMON_H
#define TAILWIND_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TW_API __attribute__((visibility("default")))
#define TW_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define TW_API
#define TW_PRINTF(fmt, args)
#endif

/* Tailwind's own error codes: one X-macro feeds the enum and tw_strerror(). */
#define TW_ERRORS(X)                                                                  \
	X(TW_ECORRUPT, 1024, "data failed an integrity check")                        \
	X(TW_EMALFORMED, 1025, "malformed or unexpected protocol message")            \
	X(TW_EVERSION, 1026, "incompatible protocol version")                         \
	X(TW_EFENCED, 1027, "log was fenced by a newer epoch")                        \
	X(TW_ENOBACKUP, 1028, "not enough backups available")                         \
	X(TW_EFULL, 1029, "segment is full")                                          \
	X(TW_EPEERLOST, 1030, "peer lost (connection closed or failed)")             \
	X(TW_ENOPROV, 1031, "requested libfabric provider is not available")          \
	X(TW_EREFUSED, 1032, "backup refused: resource exhausted")                    \
	X(TW_ESTALE, 1033, "stale replica version")                                   \
	X(TW_ENOTFOUND, 1034, "no such log or segment")                               \
	X(TW_ECLOSED, 1035, "object is closed")                                       \
	X(TW_EREMOTE, 1036, "the peer reported an error")                            \
	X(TW_ELOGEXISTS, 1037, "log already exists on the backups (take it over)")    \
	X(TW_ELOST, 1038, "a segment of the log is lost on every backup")                 \
	X(TW_EFREED, 1039, "position was freed by log cleaning")

enum tw_error {
#define TW__ERR_ENUM(name, value, text) name = value,
	TW_ERRORS(TW__ERR_ENUM)
#undef TW__ERR_ENUM
};

/*
 * Name an error code. Accepts the negative return value of any Tailwind function (or its absolute
 * value). Returns a static string; never NULL. Thread-safe.
 */
TW_API const char *tw_strerror(int err);

/* Log ids, segment ids and replica versions are at most TW_ID_MAX (2^63 - 1): a backup refuses
 * a larger one. Epochs are at most TW_EPOCH_MAX below. */
#define TW_ID_MAX ((uint64_t)INT64_MAX)

/*
 * Epochs name a log's owner generation (docs/recovery.md). They are at most TW_EPOCH_MAX: a
 * backup refuses a fence beyond it, so that a log always has room for the next takeover (a
 * million takeovers a second would take 8 years to use the range up).
 */
#define TW_EPOCH_MAX ((UINT64_C(1) << 48) - 1)

/*
 * The default timeouts, in milliseconds, of every config that has them (tw_ctx_config,
 * tw_reader_config, tw_recover_config) and of the tools: a field left 0 takes these.
 *   CONNECT: a connection to one backup, handshake included;
 *   RPC:     a control request without a reply fails (readers: beyond their long-poll's wait);
 *   OP:      a one-sided write or read not completed by then fails its channel;
 *   RECOVER_RPC: a recovery's requests, longer (a read grant may load a segment file first).
 */
#define TW_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define TW_DEFAULT_SESSION_TIMEOUT_MS 4000 /* a coordinator session (tw_ctx_config,
					    * tw_coordinator_open) */
#define TW_DEFAULT_RPC_TIMEOUT_MS 5000
#define TW_DEFAULT_OP_TIMEOUT_MS 10000
#define TW_DEFAULT_RECOVER_RPC_TIMEOUT_MS 10000
#define TW_DEFAULT_OPEN_RETRY_MS 3000 /* a segment open refused: retried for so long
				       * (tw_primary_config.open_retry_ms) */

/*
 * A backup refuses a fence from another incarnation while the last accepted fence's connection
 * is open and made a request within this many milliseconds (the "hold", docs/recovery.md): a
 * recovery or takeover at work is not cut off half-way.
 */
#define TW_FENCE_HOLD_MS 10000

/* Log levels. The default sink writes to stderr (never stdout); the level comes from the
 * environment variable TW_LOG_LEVEL (error, warn, info, debug; default warn). */
enum tw_diag_level {
	TW_DIAG_ERROR = 0,
	TW_DIAG_WARN = 1,
	TW_DIAG_INFO = 2,
	TW_DIAG_DEBUG = 3,
};

typedef void (*tw_diag_fn)(void *arg, enum tw_diag_level level, const char *msg);

/*
 * Replace the log sink (NULL restores the stderr default) and the level threshold.
 * Not thread-safe with respect to concurrent logging: call it once at start-up.
 */
TW_API void tw_diag_set_sink(tw_diag_fn fn, void *arg);
TW_API void tw_diag_set_level(enum tw_diag_level level);

/*
 * The environment variables Tailwind reads, one table (docs/api.md, "Environment"): the library
 * reads no other, reads each where it is used (so a variable set before that point counts), and
 * never writes the environment (setenv() would race the program's other threads).
 */
struct tw_env_var {
	const char *name;          /* e.g. "TW_LOG_LEVEL" */
	const char *type;          /* its values, in words: "enum: error, warn, info, debug" */
	const char *default_value; /* what applies while it is unset or empty */
	const char *help;          /* what it does: one or more sentences, no newline */
	unsigned flags;            /* TW_ENV_* */
};
/* For tests and experiments, not for a service. */
#define TW_ENV_TESTING 1u
/* A libfabric variable whose default_value suits Tailwind better than libfabric's (the library
 * only reads it, to say at info level when it is unset). libfabric reads it when the process first calls it, so a program sets it at the
 * start of main, before any thread, unless the environment sets it (twd and twctl do):
 *   if (!getenv(v->name)) setenv(v->name, v->default_value, 0); */
#define TW_ENV_PROGRAM 2u

/*
 * Row i of the table, 0 first; NULL past the last. The rows are the library's (static, never
 * freed); a later 1.x may add rows and fields at the end of struct tw_env_var, so read only the
 * fields named here. Thread-safe.
 */
TW_API const struct tw_env_var *tw_env_describe(size_t i);

/* Library version string, e.g. "1.0.0". */
TW_API const char *tw_version(void);

/*
 * Binary compatibility (docs/api.md, "The ABI rule"). Within major version 1 (soname
 * libtailwind.so.1, symbols versioned TAILWIND_1.0 and later) no function is removed or changes
 * its signature, and a public struct only grows at its end. So that a program built against
 * an older 1.x runs on a newer one, and the other way round:
 *
 *   - every configuration struct starts with `size`, which its tw_*_config_init() sets to the
 *     size of the struct the CALLER was compiled with (the macros below pass sizeof). The
 *     library reads the fields that size covers and takes defaults for the rest; a struct not
 *     initialised that way (size 0) is refused with -EINVAL, and one from a newer header whose
 *     unknown fields are not all zero with -ENOTSUP. Set fields after the init, never copy a
 *     config between programs.
 *   - every statistics getter takes the size of the caller's struct (the macros pass it) and
 *     fills only that much.
 */

/*
 * Log positions, which the primary, readers and recovery share. Position of an entry: segment id
 * and byte offset of the entry's header in that segment. A 64-bit log sequence number (LSN)
 * packs it as segment << 32 | offset; LSNs grow with the log.
 */
struct tw_pos {
	uint32_t segment;
	uint32_t offset;
};

static inline uint64_t tw_pos_to_lsn(struct tw_pos pos)
{
	return (uint64_t)pos.segment << 32 | pos.offset;
}

static inline struct tw_pos tw_lsn_to_pos(uint64_t lsn)
{
	struct tw_pos pos = { (uint32_t)(lsn >> 32), (uint32_t)lsn };
	return pos;
}

/* An LSN that names no entry (tw_primary_append_batch: an entry it did not append). */
#define TW_LSN_NONE UINT64_MAX

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_COMMON_H */
