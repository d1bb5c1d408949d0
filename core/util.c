/*
 * core/util.c — error names, logging sink and level, rate limiting, whole-buffer file I/O.
 *
 * tw_strerror() names libfabric's own codes (256..1023) with fi_strerror(), so this file, alone
 * in core/, uses libfabric (the library, not fabric/): the error space is shared on purpose
 * (negative errno, -FI_E* passes through unchanged, ours from 1024).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/membarrier.h>

#include <rdma/fi_errno.h>

#include "core/util.h"

const char *tw_version(void)
{
	return TW_VERSION_STRING;
}

const char *tw_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
#define TW__ERR_CASE(name, value, text) \
	case value:                     \
		return text;
		TW_ERRORS(TW__ERR_CASE)
#undef TW__ERR_CASE
	default:
		break;
	}
	if (err >= 256 && err < 1024)
		return fi_strerror(err);
	if (err < 256)
		return strerror(err); /* glibc: static text for known codes; thread-safe in practice */
	return "unknown error";
}

static tw_diag_fn log_sink;
static void *log_sink_arg;
static int log_level = -1; /* -1: not read from the environment yet */
static bool log_time;      /* TW_LOG_TIME=1: wall-clock time on every stderr line */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
	const char *s = tw__env_get(TW__ENV_LOG_LEVEL), *t = tw__env_get(TW__ENV_LOG_TIME);
	int lvl = TW_DIAG_WARN;

	if (s && *s) {
		if (!strcasecmp(s, "error"))
			lvl = TW_DIAG_ERROR;
		else if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning"))
			lvl = TW_DIAG_WARN;
		else if (!strcasecmp(s, "info"))
			lvl = TW_DIAG_INFO;
		else if (!strcasecmp(s, "debug"))
			lvl = TW_DIAG_DEBUG;
		else
			fprintf(stderr, "tailwind[%d] warn: TW_LOG_LEVEL=%s is not a log level "
				"(error, warn, info, debug); using warn\n", (int)getpid(), s);
	}
	log_time = t && *t && strcmp(t, "0") != 0;
	if (__atomic_load_n(&log_level, __ATOMIC_RELAXED) < 0)
		__atomic_store_n(&log_level, lvl, __ATOMIC_RELAXED);
}

void tw_diag_set_sink(tw_diag_fn fn, void *arg)
{
	log_sink = fn;
	log_sink_arg = arg;
}

void tw_diag_set_level(enum tw_diag_level level)
{
	pthread_once(&log_once, log_init);
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

bool tw__log_enabled(enum tw_diag_level level)
{
	pthread_once(&log_once, log_init);
	return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

void tw__log(enum tw_diag_level level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char msg[1024];
	va_list ap;

	if (!tw__log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_sink) {
		log_sink(log_sink_arg, level, msg);
		return;
	}
	if (log_time) {
		struct timespec ts;
		struct tm tm;
		char when[48], zone[8];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		strftime(zone, sizeof(zone), "%z", &tm);
		fprintf(stderr, "%s.%03ld%s tailwind[%d] %s: %s\n", when, ts.tv_nsec / 1000000L,
			zone, (int)getpid(), names[level], msg);
		return;
	}
	fprintf(stderr, "tailwind[%d] %s: %s\n", (int)getpid(), names[level], msg);
}

bool tw__ratelimit_pass(struct tw__ratelimit *rl, uint64_t *suppressed_out)
{
	uint64_t now = tw_now_ns();
	uint64_t next = __atomic_load_n(&rl->next_ns, __ATOMIC_RELAXED);

	if (now < next) {
		__atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
		return false;
	}
	if (!__atomic_compare_exchange_n(&rl->next_ns, &next, now + 1000000000u, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
		return false;
	}
	*suppressed_out = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_RELAXED);
	return true;
}

/* Whole-buffer pwrite or pread (the cast drops const for pwrite, which only reads it). */
static int pio_all(int fd, uint8_t *p, size_t len, int64_t off, bool wr)
{
	while (len > 0) {
		ssize_t n = wr ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return wr ? -EIO : -ENODATA;
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

int tw__pwrite_all(int fd, const void *buf, size_t len, int64_t off)
{
	return pio_all(fd, (uint8_t *)(uintptr_t)buf, len, off, true);
}

int tw__pread_all(int fd, void *buf, size_t len, int64_t off)
{
	return pio_all(fd, buf, len, off, false);
}

void *tw__grow(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t ncap;
	void *nv;

	if (n < *cap)
		return v;
	ncap = *cap ? 2 * *cap : first;
	if (ncap > SIZE_MAX / elem)
		return NULL;
	nv = realloc(v, ncap * elem);
	if (nv)
		*cap = ncap;
	return nv;
}

int tw__push(void *arrp, size_t *cap, size_t *n, size_t elem, size_t first, const void *item)
{
	void *v;

	memcpy(&v, arrp, sizeof(v)); /* a T * read as a void *: same representation */
	v = tw__grow(v, cap, *n, elem, first);
	if (!v)
		return -ENOMEM;
	memcpy(arrp, &v, sizeof(v));
	memcpy((char *)v + *n * elem, item, elem);
	(*n)++;
	return 0;
}

void tw__cfg_init_copy(void *cfg, size_t size, const void *d, size_t d_size)
{
	uint32_t sz = (uint32_t)size;

	if (!cfg || size < sizeof(sz))
		return;
	memset(cfg, 0, size);
	memcpy(cfg, d, size < d_size ? size : d_size);
	memcpy(cfg, &sz, sizeof(sz)); /* the first member: `size` */
}

int tw__cfg_adopt(void *full, size_t full_size, size_t v1_size, const void *cfg, const char *what,
		  char *errmsg, size_t errmsg_len)
{
	uint32_t size;
	const unsigned char *extra;

	memcpy(&size, cfg, sizeof(size));
	/* Version 1.0's structs are the smallest there will be: nothing shorter is a config. */
	if (size < v1_size || size > (1u << 20)) {
		if (errmsg && errmsg_len)
			snprintf(errmsg, errmsg_len, "%s not initialised: call %s_init() first "
				 "(size field %u)", what, what, size);
		return -EINVAL;
	}
	if (size > full_size) {
		for (extra = (const unsigned char *)cfg + full_size;
		     extra < (const unsigned char *)cfg + size; extra++) {
			if (*extra) {
				if (errmsg && errmsg_len)
					snprintf(errmsg, errmsg_len, "%s from a newer libtailwind "
						 "header (%u bytes, this library knows %zu) sets "
						 "fields this library does not have: upgrade it",
						 what, size, full_size);
				return -ENOTSUP;
			}
		}
		size = (uint32_t)full_size;
	}
	memcpy((char *)full + sizeof(uint32_t), (const char *)cfg + sizeof(uint32_t),
	       size - sizeof(uint32_t));
	return 0;
}

void tw__out_copy(void *out, size_t size, const void *full, size_t full_size)
{
	if (!out)
		return;
	if (size > full_size) {
		memset((char *)out + full_size, 0, size - full_size);
		size = full_size;
	}
	memcpy(out, full, size);
}

static pthread_once_t mb_once = PTHREAD_ONCE_INIT;
static bool mb_ok;

static void mb_init(void)
{
	long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return;
	mb_ok = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool tw__membarrier_ready(void)
{
	pthread_once(&mb_once, mb_init);
	return mb_ok;
}

void tw__membarrier(void)
{
	/* Registered (tw__membarrier_ready), it does not fail. If it ever did, the hot side's
	 * store could go unseen until the rare side looks again: the progress thread's sleep is
	 * bounded (PWAIT_SLICE_MS), so an entry would wait that long, not for ever. */
	(void)syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}
