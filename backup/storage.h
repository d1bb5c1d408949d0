/*
 * backup/storage.h — the storage seam: every system call through which the backup makes its
 * segment files and its metadata journal durable. Internal to libtailwind.
 *
 * The backup holds a `const struct tw__storage *` and calls through it; production code uses
 * tw__storage_posix, the system calls themselves. A test wraps it to inject a failure or a
 * crash at one step (tests/unit/test_segfile.c, test_metalog.c), as raft's fixture does with
 * `struct raft_io` (raft/fixture.h): no test branch and no global on the production path.
 *
 * Each call returns what the system call returns on success (a descriptor, a byte count, 0)
 * and -errno on failure. `s` is the table itself, so a wrapper can find its state around it.
 */
#ifndef TW_BACKUP_STORAGE_H
#define TW_BACKUP_STORAGE_H

#include <stdbool.h>
#include <sys/types.h>
#include <sys/uio.h>

struct tw__storage {
	int (*openat)(const struct tw__storage *s, int dirfd, const char *name, int flags,
		      mode_t mode);
	ssize_t (*pwritev)(const struct tw__storage *s, int fd, const struct iovec *iov, int n,
			   off_t off);
	int (*fdatasync)(const struct tw__storage *s, int fd);
	int (*fsync)(const struct tw__storage *s, int fd); /* also a directory's */
	int (*close)(const struct tw__storage *s, int fd);
	int (*renameat)(const struct tw__storage *s, int olddirfd, const char *oldname,
			int newdirfd, const char *newname);
	int (*unlinkat)(const struct tw__storage *s, int dirfd, const char *name, int flags);
};

/* The system calls. */
extern const struct tw__storage tw__storage_posix;

/* s, or tw__storage_posix when s is NULL. */
static inline const struct tw__storage *tw__storage_or_posix(const struct tw__storage *s)
{
	return s ? s : &tw__storage_posix;
}

/* pwritev until every byte of iov[0..n) is written at `off` (iov is consumed): 0 or -errno. */
int tw__storage_pwritev_all(const struct tw__storage *s, int fd, struct iovec *iov, int n,
			    off_t off);

#endif /* TW_BACKUP_STORAGE_H */
