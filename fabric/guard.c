/*
 * fabric/guard.c — moving registered memory away from the address a fenced writer knows
 * (docs/fabric.md, "Passive shm backups": "Fencing a writer that checks no key").
 *
 * On shm's CMA fast path the writer's own process_vm_writev(2) places the bytes at the virtual
 * address it was given; the target checks no key. Closing a registration therefore does not stop
 * such a writer: only the target's page tables can. tw__fab_move_away takes the pages of a
 * buffer to a new address (mremap, no copy, contents kept) and leaves a PROT_NONE guard at the
 * old one, so the writer's next process_vm_writev there fails with EFAULT, and nothing else of
 * this process is ever mapped at that address while the guard stands.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/ofi_int.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7 */
#endif

static void *sys_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	return mremap(old, old_len, new_len, flags, new_addr);
}

static const struct tw_vm_ops vm_sys = { .mremap = sys_mremap, .mmap = mmap };

bool tw__fab_keyless_writes(const struct tw_fab *fab)
{
	if (!fab || strcmp(fab->ops->name, "ofi") != 0)
		return false;
	return ((const struct ofi_fab *)fab)->shm;
}

int tw__chan_peer_pid(const struct tw_chan *ch)
{
	const struct ofi_chan *oc = (const struct ofi_chan *)ch;

	if (!ch || strcmp(ch->fab->ops->name, "ofi") != 0 || !((struct ofi_fab *)ch->fab)->shm)
		return 0;
	return oc->watched && oc->peer_pid > 0 ? oc->peer_pid : 0;
}

int tw__fab_move_away(void **mem, size_t len, const char **why_out)
{
	return tw__fab_move_away_vm(&vm_sys, mem, len, why_out);
}

int tw__fab_move_away_vm(const struct tw_vm_ops *vm, void **mem, size_t len,
			 const char **why_out)
{
	uint8_t *old = *mem, *nu;
	void *g;

	*why_out = NULL;
	/* 1. From here on a write to the old address fails (process_vm_writev honours the
	 *    protection: it never forces access). A copy already inside the kernel with the pages
	 *    pinned still finishes into those same pages, which move along. */
	if (mprotect(old, len, PROT_NONE) != 0) {
		*why_out = "mprotect";
		return -errno;
	}
	/* 2. The pages go to a new address; with DONTUNMAP the old range stays mapped (PROT_NONE,
	 *    now empty): there is no instant at which it is unmapped and could be handed out. */
	nu = vm->mremap(old, len, len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
	if (nu == MAP_FAILED && errno == EINVAL) {
		/* A kernel before 5.7: move, then put the guard at once where the pages were. If
		 * another thread of ours mapped something there in between, MAP_FIXED_NOREPLACE
		 * says so (EEXIST) and nothing is replaced. */
		void *resv = vm->mmap(NULL, len, PROT_NONE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (resv == MAP_FAILED) {
			*why_out = "mmap (a new address)";
			goto undo;
		}
		nu = vm->mremap(old, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, resv);
		if (nu == MAP_FAILED) {
			int e = errno;

			munmap(resv, len);
			errno = e;
			*why_out = "mremap";
			goto undo;
		}
		g = vm->mmap(old, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			     MAP_FIXED_NOREPLACE, -1, 0);
		if (g != old) {
			if (g != MAP_FAILED)
				munmap(g, len); /* a kernel without MAP_FIXED_NOREPLACE: elsewhere */
			*why_out = "the guard (the old range was taken at once)";
			/* The pages came with step 1's PROT_NONE: usable again, or the next read of
			 * the buffer (a recovery's listing scans it) faults. */
			*mem = nu;
			if (mprotect(nu, len, PROT_READ | PROT_WRITE) != 0) {
				*why_out = "mprotect (the new address)";
				return -errno;
			}
			return 1;
		}
	} else if (nu == MAP_FAILED) {
		*why_out = "mremap";
		goto undo;
	} else {
		/* 3. The guard without the commit charge of a writable mapping (address space
		 *    only): replaced in place, never unmapped in between. A failure keeps the
		 *    charged one, which guards as well. */
		g = vm->mmap(old, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			     MAP_FIXED, -1, 0);
		(void)g;
	}
	if (mprotect(nu, len, PROT_READ | PROT_WRITE) != 0) {
		/* Cannot happen for our own anonymous pages; leave them unreadable rather than lose
		 * track of them. */
		*why_out = "mprotect (the new address)";
		*mem = nu;
		return -errno;
	}
	*mem = nu;
	return 0;
undo: {
		int e = errno;

		mprotect(old, len, PROT_READ | PROT_WRITE);
		return -e;
	}
}

void tw__fab_guard_free(void *guard, size_t len)
{
	if (guard)
		munmap(guard, len);
}
