/*
 * backup/storage.c — the storage seam's production table: the system calls (storage.h).
 */
#include "backup/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static int posix_openat(const struct tw__storage *s, int dirfd, const char *name, int flags,
			mode_t mode)
{
	int fd = openat(dirfd, name, flags, mode);

	(void)s;
	return fd < 0 ? -errno : fd;
}

static ssize_t posix_pwritev(const struct tw__storage *s, int fd, const struct iovec *iov, int n,
			     off_t off)
{
	ssize_t w = pwritev(fd, iov, n, off);

	(void)s;
	return w < 0 ? -errno : w;
}

static int posix_fdatasync(const struct tw__storage *s, int fd)
{
	(void)s;
	return fdatasync(fd) != 0 ? -errno : 0;
}

static int posix_fsync(const struct tw__storage *s, int fd)
{
	(void)s;
	return fsync(fd) != 0 ? -errno : 0;
}

static int posix_close(const struct tw__storage *s, int fd)
{
	(void)s;
	return close(fd) != 0 ? -errno : 0;
}

static int posix_renameat(const struct tw__storage *s, int olddirfd, const char *oldname,
			  int newdirfd, const char *newname)
{
	(void)s;
	return renameat(olddirfd, oldname, newdirfd, newname) != 0 ? -errno : 0;
}

static int posix_unlinkat(const struct tw__storage *s, int dirfd, const char *name, int flags)
{
	(void)s;
	return unlinkat(dirfd, name, flags) != 0 ? -errno : 0;
}

const struct tw__storage tw__storage_posix = {
	.openat = posix_openat,
	.pwritev = posix_pwritev,
	.fdatasync = posix_fdatasync,
	.fsync = posix_fsync,
	.close = posix_close,
	.renameat = posix_renameat,
	.unlinkat = posix_unlinkat,
};

int tw__storage_pwritev_all(const struct tw__storage *s, int fd, struct iovec *iov, int n,
			    off_t off)
{
	s = tw__storage_or_posix(s);
	while (n > 0) {
		ssize_t w = s->pwritev(s, fd, iov, n, off);

		if (w == -EINTR)
			continue;
		if (w < 0)
			return (int)w;
		if (w == 0)
			return -EIO;
		off += w;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}
