/*
 * core/util.h — internal helpers used by every layer: logging macros, clocks, little-endian
 * loads and stores, branch hints. Pure C; no libfabric here.
 */
#ifndef TW_CORE_UTIL_H
#define TW_CORE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <tailwind/common.h>

#include "core/env.h" /* tw__env_get: every file that logs may read a setting */

#define tw_likely(x) __builtin_expect(!!(x), 1)
#define tw_unlikely(x) __builtin_expect(!!(x), 0)
#define TW_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TW_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TW_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define TW_BIG_ENDIAN 1
#endif

/* Little-endian loads and stores of any alignment: tw_load_le16/32/64(p) and
 * tw_store_le16/32/64(p, v), one definition for the three widths. */
#ifdef TW_BIG_ENDIAN
#define TW_LE_SWAP(bits, v) __builtin_bswap##bits(v)
#else
#define TW_LE_SWAP(bits, v) (v)
#endif
#define TW_DEFINE_LE(bits)                                                  \
	static inline uint##bits##_t tw_load_le##bits(const void *p)        \
	{                                                                   \
		uint##bits##_t v;                                           \
		memcpy(&v, p, sizeof(v));                                   \
		return TW_LE_SWAP(bits, v);                                 \
	}                                                                   \
	static inline void tw_store_le##bits(void *p, uint##bits##_t v)     \
	{                                                                   \
		v = TW_LE_SWAP(bits, v);                                    \
		memcpy(p, &v, sizeof(v));                                   \
	}
TW_DEFINE_LE(16)
TW_DEFINE_LE(32)
TW_DEFINE_LE(64)
#undef TW_DEFINE_LE

/*
 * Intrusive lists of structs with `next` (and, doubly linked, `prev`) members; `head` and
 * `tail` are lvalues (e.g. ch->ops_head), evaluated more than once. Nodes are unlinked with
 * next/prev set to NULL.
 */
#define TW_SLIST_APPEND(head, tail, n)          \
	do {                                    \
		(n)->next = NULL;               \
		if (tail)                       \
			(tail)->next = (n);     \
		else                            \
			(head) = (n);           \
		(tail) = (n);                   \
	} while (0)
#define TW_DLIST_APPEND(head, tail, n)          \
	do {                                    \
		(n)->prev = (tail);             \
		TW_SLIST_APPEND(head, tail, n); \
	} while (0)
#define TW_DLIST_PUSH(head, n)                  \
	do {                                    \
		(n)->prev = NULL;               \
		(n)->next = (head);             \
		if (head)                       \
			(head)->prev = (n);     \
		(head) = (n);                   \
	} while (0)
#define TW__DLIST_UNLINK(head, n, if_last)               \
	do {                                             \
		if ((n)->prev)                           \
			(n)->prev->next = (n)->next;     \
		else                                     \
			(head) = (n)->next;              \
		if ((n)->next)                           \
			(n)->next->prev = (n)->prev;     \
		else                                     \
			if_last;                         \
		(n)->next = (n)->prev = NULL;            \
	} while (0)
/* A list with a tail pointer, and one without. */
#define TW_DLIST_REMOVE(head, tail, n) TW__DLIST_UNLINK(head, n, (tail) = (n)->prev)
#define TW_DLIST_REMOVE_NT(head, n) TW__DLIST_UNLINK(head, n, (void)0)

/* pwrite/pread every byte of buf at `off`, retrying short transfers and EINTR: 0 or -errno;
 * tw__pread_all returns -ENODATA when the file ends first. */
int tw__pwrite_all(int fd, const void *buf, size_t len, int64_t off);
int tw__pread_all(int fd, void *buf, size_t len, int64_t off);

/* Room for element n of a growable array v of *cap elements of elem bytes: v itself while n <
 * *cap; else v moved by realloc to twice *cap (`first` when empty), *cap updated. NULL when out
 * of memory (v is then untouched and still the caller's to free). */
void *tw__grow(void *v, size_t *cap, size_t n, size_t elem, size_t first);
/* Append the elem bytes at item to the growable array whose pointer is at arrp (a T **, the
 * array of *n elements of *cap, grown as tw__grow does) and count it in *n: 0, or -ENOMEM with
 * the array, *cap and *n unchanged. */
int tw__push(void *arrp, size_t *cap, size_t *n, size_t elem, size_t first, const void *item);

/*
 * The ABI rule (tailwind/common.h, docs/api.md). Every public config struct starts with
 * `uint32_t size`, the size of the caller's struct.
 *
 * tw__cfg_init_copy: a tw_*_config_init_sized writes the defaults `d` (d_size bytes) into the
 * caller's struct of `size` bytes, no more than it has, zeroes the rest, and sets its `size`.
 *
 * tw__cfg_adopt: an open copies the caller's config `cfg` over `full` (full_size bytes, the
 * defaults already in it, size included) as far as cfg->size reaches, so that fields the caller
 * did not know keep their defaults. v1_size: the struct's size in version 1.0 (sizeof today;
 * a constant once a field is added). Returns 0, -EINVAL (cfg->size below v1_size: not
 * initialised by its tw_*_config_init) or -ENOTSUP (a bigger struct from a newer
 * header, whose unknown fields are not all zero); `what` names the struct in errmsg.
 * tw__out_copy: a tw_*_get_stats_sized fills the caller's `size` bytes from `full`.
 */
void tw__cfg_init_copy(void *cfg, size_t size, const void *d, size_t d_size);
int tw__cfg_adopt(void *full, size_t full_size, size_t v1_size, const void *cfg, const char *what,
		  char *errmsg, size_t errmsg_len);
void tw__out_copy(void *out, size_t size, const void *full, size_t full_size);
/* An open's first step: `local` gets the defaults (`init`, the tw_*_config_init macro), then
 * the caller's `config` over them (tw__cfg_adopt, 1.0's size as the least). */
#define TW__CFG_TAKE(local, config, init, what, errmsg, errmsg_len)                          \
	(init(&(local)), tw__cfg_adopt(&(local), sizeof(local), sizeof(local), (config), (what), \
				       (errmsg), (errmsg_len)))

/* Monotonic time in nanoseconds. */
static inline uint64_t tw_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Asymmetric fences (membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED, Linux 4.14). A store
 * followed by a load of another word needs a full fence between them for the pair to see each
 * other's stores (the store-buffering case of the Dekker pattern); on x86-64 that fence is a
 * locked instruction, which waits until every earlier store has left the core. Where one side
 * is hot and the other rare, the hot side keeps a plain store and a compiler barrier, and the
 * rare side calls tw__membarrier(): every thread of the process running at that moment executes
 * a full fence (an interrupt to each of their CPUs), and one not running has passed through the
 * kernel's context switch, which fences too. tw__membarrier_ready() registers the process once
 * and says whether the kernel offers it (a seccomp filter may refuse it); when it does not,
 * callers keep fences on both sides. Measured: about 2 us per tw__membarrier with one other
 * thread running (2-vCPU VM). docs/primary.md, "The append engine".
 */
bool tw__membarrier_ready(void);
void tw__membarrier(void);

/* Logging. tw__log formats and hands the message to the sink if `level` passes the threshold. */
void tw__log(enum tw_diag_level level, const char *fmt, ...) TW_PRINTF(2, 3);
bool tw__log_enabled(enum tw_diag_level level);

#define tw_log_error(...) tw__log(TW_DIAG_ERROR, __VA_ARGS__)
#define tw_log_warn(...) tw__log(TW_DIAG_WARN, __VA_ARGS__)
#define tw_log_info(...) tw__log(TW_DIAG_INFO, __VA_ARGS__)
#define tw_log_debug(...)                                  \
	do {                                               \
		if (tw__log_enabled(TW_DIAG_DEBUG))         \
			tw__log(TW_DIAG_DEBUG, __VA_ARGS__); \
	} while (0)

/*
 * Rate-limited logging for the data path: at most one message per call site per second; the
 * number of suppressed messages is reported with the next one that gets through.
 */
struct tw__ratelimit {
	uint64_t next_ns;
	uint64_t suppressed;
};
bool tw__ratelimit_pass(struct tw__ratelimit *rl, uint64_t *suppressed_out);

#define tw_log_ratelimited(level, ...)                                          \
	do {                                                                    \
		static struct tw__ratelimit tw__rl_;                            \
		uint64_t tw__sup_;                                              \
		if (tw__ratelimit_pass(&tw__rl_, &tw__sup_)) {                  \
			if (tw__sup_)                                           \
				tw__log((level), "(%llu similar messages suppressed)", \
					(unsigned long long)tw__sup_);          \
			tw__log((level), __VA_ARGS__);                          \
		}                                                               \
	} while (0)

#endif /* TW_CORE_UTIL_H */
