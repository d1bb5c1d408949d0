/*
 * tests/lib/tstorage.c — a storage seam for tests (tstorage.h).
 */
#include "tstorage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>

static int fault(const struct tw__storage *s, const char *step)
{
	struct tstorage *t = (struct tstorage *)s; /* ops is the first member */
	const char *at = atomic_load(&t->fail_at);

	if (t->trace) {
		strncat(t->steps, step, sizeof(t->steps) - strlen(t->steps) - 2);
		strcat(t->steps, ",");
	}
	if (!at || strcmp(at, step) != 0)
		return 0;
	if (atomic_load(&t->fail_times) == 0)
		return 0;
	if (atomic_load(&t->fail_times) > 0)
		atomic_fetch_sub(&t->fail_times, 1);
	atomic_fetch_add(&t->failed, 1);
	return atomic_load(&t->fail_err) ? atomic_load(&t->fail_err) : -EIO;
}

static int t_openat(const struct tw__storage *s, int dirfd, const char *name, int flags,
		    mode_t mode)
{
	int rc = fault(s, (flags & O_DIRECT) ? "direct" : "create");

	return rc ? rc : tw__storage_posix.openat(s, dirfd, name, flags, mode);
}

static ssize_t t_pwritev(const struct tw__storage *s, int fd, const struct iovec *iov, int n,
			 off_t off)
{
	int rc = fault(s, "write");

	return rc ? rc : tw__storage_posix.pwritev(s, fd, iov, n, off);
}

static int t_fdatasync(const struct tw__storage *s, int fd)
{
	int rc = fault(s, "fsync");

	return rc ? rc : tw__storage_posix.fdatasync(s, fd);
}

static int t_fsync(const struct tw__storage *s, int fd)
{
	int rc = fault(s, "fsync-dir");

	return rc ? rc : tw__storage_posix.fsync(s, fd);
}

static int t_close(const struct tw__storage *s, int fd)
{
	int rc = fault(s, "close");
	int crc = tw__storage_posix.close(s, fd); /* the descriptor goes either way */

	return rc ? rc : crc;
}

static int t_renameat(const struct tw__storage *s, int od, const char *on, int nd, const char *nn)
{
	int rc = fault(s, "rename");

	return rc ? rc : tw__storage_posix.renameat(s, od, on, nd, nn);
}

static int t_unlinkat(const struct tw__storage *s, int dirfd, const char *name, int flags)
{
	int rc = fault(s, "remove");

	return rc ? rc : tw__storage_posix.unlinkat(s, dirfd, name, flags);
}

void tstorage_init(struct tstorage *t, bool trace)
{
	memset(t, 0, sizeof(*t));
	t->ops = (struct tw__storage){
		.openat = t_openat, .pwritev = t_pwritev, .fdatasync = t_fdatasync,
		.fsync = t_fsync, .close = t_close, .renameat = t_renameat,
		.unlinkat = t_unlinkat,
	};
	t->trace = trace;
}

void tstorage_fail(struct tstorage *t, const char *step, int err, int times)
{
	atomic_store(&t->fail_err, err);
	atomic_store(&t->fail_times, times);
	atomic_store(&t->fail_at, step);
}
