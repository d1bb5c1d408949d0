/*
 * tests/lib/tstorage.h — a storage seam for tests (backup/storage.h): the system calls, with a
 * trace of the steps taken and a failure injected at one of them.
 *
 * Steps: "direct" (the O_DIRECT open of a new file), "create" (the buffered open), "write",
 * "fsync" (fdatasync of a file), "close", "rename", "fsync-dir" (fsync of a directory),
 * "remove" (unlinkat). Hand `&t->ops` to tw__segfile_* through segfile_io.storage, or to a
 * backup with tw__backup_set_storage before its first flush.
 */
#ifndef TW_TESTS_TSTORAGE_H
#define TW_TESTS_TSTORAGE_H

#include <stdatomic.h>

#include "backup/storage.h"

struct tstorage {
	struct tw__storage ops; /* first: the table the code calls */
	char steps[256];        /* "direct,write,...," (tstorage_trace on) */
	_Atomic(const char *) fail_at; /* this step fails ... */
	atomic_int fail_err;           /* ... with this error (0: -EIO) ... */
	atomic_int fail_times;         /* ... this many times (< 0: every time) */
	atomic_int failed;             /* failures injected so far */
	bool trace;                    /* record steps (single-threaded users only) */
};

void tstorage_init(struct tstorage *t, bool trace);
/* Fail `step` with `err` (0: -EIO), `times` times (< 0: until changed); NULL: fail nothing. */
void tstorage_fail(struct tstorage *t, const char *step, int err, int times);

#endif /* TW_TESTS_TSTORAGE_H */
