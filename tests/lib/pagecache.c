/*
 * tests/lib/pagecache.c — see pagecache.h.
 */
#include "pagecache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

long tl_cached_pages(int dirfd, const char *name, off_t *size_out)
{
	struct stat st;
	long n = 0, pg = sysconf(_SC_PAGESIZE);
	unsigned char *vec;
	void *m;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	TAP_REQUIRE(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0, "open %s", name);
	if (size_out)
		*size_out = st.st_size;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	TAP_REQUIRE(m != MAP_FAILED, "mmap %s", name);
	vec = calloc((size_t)((st.st_size + pg - 1) / pg), 1);
	TAP_REQUIRE(vec && mincore(m, (size_t)st.st_size, vec) == 0, "mincore %s", name);
	for (off_t i = 0; i < (st.st_size + pg - 1) / pg; i++)
		n += vec[i] & 1;
	free(vec);
	munmap(m, (size_t)st.st_size);
	close(fd);
	return n;
}
