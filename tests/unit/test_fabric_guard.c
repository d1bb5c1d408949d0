/*
 * tests/unit/test_fabric_guard.c — fabric/guard.c: a buffer moved away from the address a
 * fenced writer knows (docs/fabric.md, "Fencing a writer that checks no key").
 *
 * The writer's process_vm_writev is played by this process writing into itself (CMA to one's
 * own pid takes the same kernel path): before the move it lands, after it it fails with EFAULT.
 * The bytes move with the pages, the new address is writable, the old one stays mapped
 * (PROT_NONE: MAP_FIXED_NOREPLACE there fails with EEXIST) until the guard is freed. Which
 * fabs move at all: shm only (tw__fab_keyless_writes).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tap.h"

#define LEN ((size_t)1 << 20)
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7 */
#endif

/* What a fast-path writer does: one process_vm_writev of `len` bytes at `addr` in "the
 * target" (ourselves). Bytes written, or -errno. */
static long cma_write(void *addr, const void *src, size_t len)
{
	struct iovec l = { .iov_base = (void *)src, .iov_len = len };
	struct iovec r = { .iov_base = addr, .iov_len = len };
	ssize_t n = process_vm_writev(getpid(), &l, 1, &r, 1, 0);

	return n < 0 ? -errno : (long)n;
}

/* Whether [p, p + len) is mapped (a MAP_FIXED_NOREPLACE map there fails with EEXIST). */
static bool mapped(void *p, size_t len)
{
	void *q = mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
		       0);

	if (q == MAP_FAILED)
		return errno == EEXIST;
	munmap(q, len);
	return q != p; /* a kernel that ignores the flag maps elsewhere: say "mapped" */
}

/* The seam: a kernel that refuses MREMAP_DONTUNMAP (EINVAL), and, when `steal`, another thread
 * mapping something at the old range in the window that path then has. */
static bool steal;

static void *no_dontunmap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	if (flags & MREMAP_DONTUNMAP) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	return mremap(old, old_len, new_len, flags, new_addr);
}

static void *mmap_stealing(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (steal && addr && (flags & MAP_FIXED_NOREPLACE))
		mmap(addr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	return mmap(addr, len, prot, flags, fd, off);
}

static const struct tw_vm_ops vm_old_kernel = { .mremap = no_dontunmap, .mmap = mmap_stealing };

int main(void)
{
	static uint8_t src[4096];
	struct tw_fab_config cfg;
	struct tw_fab *fab = NULL;
	const char *why = NULL;
	uint8_t *buf = tw__fab_alloc(LEN), *old;
	void *mem;
	bool same = true;
	int rc;

	tap_plan(18);
	TAP_REQUIRE(buf, "allocate %zu bytes", LEN);
	memset(src, 0x5a, sizeof(src));
	for (size_t i = 0; i < LEN; i += 4096)
		buf[i] = (uint8_t)(i >> 12);
	is_int(cma_write(buf + 8192, src, sizeof(src)), sizeof(src),
	       "a CMA write to the buffer lands before the move");

	old = buf;
	mem = buf;
	rc = tw__fab_move_away(&mem, LEN, &why);
	is_int(rc, 0, "moved and guarded (%s)", why ? why : "ok");
	buf = mem;
	ok(buf != old, "the buffer is at a new address (%p -> %p)", (void *)old, (void *)buf);
	for (size_t i = 0; i < LEN; i += 4096)
		if (i != 8192 && buf[i] != (uint8_t)(i >> 12))
			same = false;
	ok(same && memcmp(buf + 8192, src, sizeof(src)) == 0, "every byte moved with the pages");
	is_int(cma_write(old + 8192, src, sizeof(src)), -EFAULT,
	       "a CMA write to the old address fails with EFAULT (never lands, never succeeds)");
	is_int(cma_write(buf + 4096, src, sizeof(src)), sizeof(src),
	       "a CMA write to the new address lands");
	ok(mapped(old, LEN), "the old address stays taken (nothing else can be placed there)");
	tw__fab_guard_free(old, LEN);
	ok(!mapped(old, LEN), "freeing the guard gives the address back");
	tw__fab_free(buf, LEN);

	/* The second path (a kernel without MREMAP_DONTUNMAP, or one that refuses it for the
	 * range with EINVAL: a twkv server on shm took it on this machine's Linux 6.18), first as
	 * it mostly goes, then with the old range taken in its window: the buffer must still be
	 * usable where it went (it was left PROT_NONE, and a recovery's listing then faulted on
	 * it: a twkv server crashed so in a long kv_history run on shm). */
	for (int k = 0; k < 2; k++) {
		buf = tw__fab_alloc(LEN);
		TAP_REQUIRE(buf, "allocate %zu bytes", LEN);
		for (size_t i = 0; i < LEN; i += 4096)
			buf[i] = (uint8_t)(i >> 12);
		old = buf;
		mem = buf;
		steal = k == 1;
		rc = tw__fab_move_away_vm(&vm_old_kernel, &mem, LEN, &why);
		buf = mem;
		is_int(rc, steal ? 1 : 0, "%s: moved (%s)",
		       steal ? "old range taken in the window" : "without MREMAP_DONTUNMAP",
		       why ? why : "guarded");
		same = buf != old;
		for (size_t i = 0; same && i < LEN; i += 4096)
			if (buf[i] != (uint8_t)(i >> 12))
				same = false;
		ok(same, "every byte readable at the new address %p", (void *)buf);
		is_int(cma_write(buf + 4096, src, sizeof(src)), sizeof(src),
		       "and a write to it lands");
		if (!steal)
			is_int(cma_write(old + 8192, src, sizeof(src)), -EFAULT,
			       "a CMA write to the old address fails with EFAULT");
		munmap(old, LEN); /* the guard, or what took its place */
		tw__fab_free(buf, LEN);
	}

	ok(!tw__fab_keyless_writes(NULL), "no fab: nothing to move");
	tw__fab_config_init(&cfg);
	cfg.provider = "tcp";
	rc = tw__fab_open(&cfg, NULL, &fab);
	if (rc == 0) {
		ok(!tw__fab_keyless_writes(fab), "tcp checks keys at the target: fences move nothing");
		tw__fab_close(fab);
	} else {
		tap_skip(1, "tcp not available (%s)", tw_strerror(rc));
	}
	fab = NULL;
	cfg.provider = "shm";
	rc = tw__fab_open(&cfg, NULL, &fab);
	if (rc == 0) {
		ok(tw__fab_keyless_writes(fab), "shm: its CMA fast path checks no key, fences move");
		tw__fab_close(fab);
	} else {
		tap_skip(1, "shm not available (%s)", tw_strerror(rc));
	}
	return tap_exit();
}
