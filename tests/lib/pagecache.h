/*
 * tests/lib/pagecache.h — how much of a file is in the page cache (tests of O_DIRECT writes).
 */
#ifndef TW_TESTS_PAGECACHE_H
#define TW_TESTS_PAGECACHE_H

#include <sys/types.h>

/* Pages of `name` (relative to dirfd, or AT_FDCWD) resident in the page cache: mincore(2) over
 * a read-only mapping, which faults none in. The file's size goes to *size_out if not NULL.
 * A file that cannot be opened, mapped or is empty ends the test (TAP_REQUIRE). */
long tl_cached_pages(int dirfd, const char *name, off_t *size_out);

#endif
