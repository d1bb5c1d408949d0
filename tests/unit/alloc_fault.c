/*
 * tests/unit/alloc_fault.c — the --wrap hooks of tests/unit/alloc_fault.h. One countdown for
 * the whole process (atomic); each thread opts in. Once the armed allocation failed, later ones
 * succeed again (one fault per run: the sweep moves k instead).
 */
#include "alloc_fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

/* GNU ld's --wrap: __real_X is libc's X, __wrap_X takes its calls; both have libc's prototype. */
__typeof__(malloc) __real_malloc, __wrap_malloc;
__typeof__(calloc) __real_calloc, __wrap_calloc;
__typeof__(realloc) __real_realloc, __wrap_realloc;
__typeof__(strdup) __real_strdup, __wrap_strdup;
__typeof__(strndup) __real_strndup, __wrap_strndup;
__typeof__(mmap) __real_mmap, __wrap_mmap;

static _Thread_local bool counted;
static atomic_long countdown; /* 0: disarmed */
static atomic_long injected;
static atomic_long seen;
static atomic_size_t only_size;

void tw_af_count_thread(bool on)
{
	counted = on;
}

void tw_af_arm(long k, size_t size)
{
	atomic_store(&injected, 0);
	atomic_store(&seen, 0);
	atomic_store(&only_size, size);
	atomic_store(&countdown, k);
}

long tw_af_disarm(void)
{
	atomic_store(&countdown, 0);
	return atomic_load(&injected);
}

long tw_af_seen(void)
{
	return atomic_load(&seen);
}

/* True when this allocation is the one to fail. */
static bool fail_now(size_t n)
{
	size_t only;
	long c;

	if (!counted || atomic_load(&countdown) <= 0)
		return false;
	only = atomic_load(&only_size);
	if (only && n != only)
		return false;
	atomic_fetch_add(&seen, 1);
	c = atomic_fetch_sub(&countdown, 1);
	if (c != 1)
		return false;
	atomic_fetch_add(&injected, 1);
	errno = ENOMEM;
	return true;
}

void *__wrap_malloc(size_t n)
{
	return fail_now(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return fail_now(n * size) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return fail_now(n) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	return fail_now(strlen(s) + 1) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return fail_now(strnlen(s, n) + 1) ? NULL : __real_strndup(s, n);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((flags & MAP_ANONYMOUS) && fail_now(len))
		return MAP_FAILED;
	return __real_mmap(addr, len, prot, flags, fd, off);
}
