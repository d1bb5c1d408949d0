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

#define tw_likely(x) __builtin_expect(!!(x), 1)
#define tw_unlikely(x) __builtin_expect(!!(x), 0)
#define TW_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TW_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TW_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define TW_BIG_ENDIAN 1
#endif

static inline uint16_t tw_load_le16(const void *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof(v));
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap16(v);
#endif
	return v;
}

static inline uint32_t tw_load_le32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap32(v);
#endif
	return v;
}

static inline uint64_t tw_load_le64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline void tw_store_le16(void *p, uint16_t v)
{
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap16(v);
#endif
	memcpy(p, &v, sizeof(v));
}

static inline void tw_store_le32(void *p, uint32_t v)
{
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap32(v);
#endif
	memcpy(p, &v, sizeof(v));
}

static inline void tw_store_le64(void *p, uint64_t v)
{
#ifdef TW_BIG_ENDIAN
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, sizeof(v));
}

/* Monotonic time in nanoseconds. */
static inline uint64_t tw_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Logging. tw__log formats and hands the message to the sink if `level` passes the threshold. */
void tw__log(enum tw_log_level level, const char *fmt, ...) TW_PRINTF(2, 3);
bool tw__log_enabled(enum tw_log_level level);

#define tw_log_error(...) tw__log(TW_LOG_ERROR, __VA_ARGS__)
#define tw_log_warn(...) tw__log(TW_LOG_WARN, __VA_ARGS__)
#define tw_log_info(...) tw__log(TW_LOG_INFO, __VA_ARGS__)
#define tw_log_debug(...)                                  \
	do {                                               \
		if (tw__log_enabled(TW_LOG_DEBUG))         \
			tw__log(TW_LOG_DEBUG, __VA_ARGS__); \
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
