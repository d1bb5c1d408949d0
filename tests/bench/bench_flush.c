/*
 * tests/bench/bench_flush.c — what it costs to make one segment file durable, per way of writing
 * it: CPU (user + system of this process) and wall time per file, for N files of SIZE bytes in
 * DIR (default: the current directory; use a directory on the disk twd would use, not tmpfs).
 *
 *   tests/bench/bench_flush [-n 32] [-s 8M] [DIR]
 *
 * Every variant writes "<i>.tmp" from a page-aligned, registered-pool-like buffer, makes it
 * durable, renames it to "<i>" and fsyncs the directory (the segment file protocol), then the
 * files are removed (not timed). The last row is tw__segfile_write itself. CPU that the kernel
 * spends in its own threads (writeback workers) is not counted; with fsync/fdatasync right after
 * the write most writeback runs in the caller.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "backup/segfile.h"

enum how { BUF_FSYNC, BUF_FDATASYNC, DIRECT_FDATASYNC, DIRECT_DSYNC, DIRECT_FALLOC, DIRECT_NORENAME,
	   SEGFILE };

static const char *const names[] = {
	"buffered write + fsync (before)",
	"buffered write + fdatasync",
	"O_DIRECT + fdatasync (twd now)",
	"O_DIRECT|O_DSYNC, no fdatasync",
	"fallocate + O_DIRECT + fdatasync",
	"O_DIRECT + fdatasync, no rename/dir fsync",
	"tw__segfile_write (O_DIRECT + fdatasync)",
};

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_flush: %s: %s\n", what, strerror(err));
	exit(1);
}

static void one(int dfd, enum how how, unsigned i, const uint8_t *buf, size_t size)
{
	char tmp[32], name[32];
	int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, fd;
	size_t off = 0;

	snprintf(tmp, sizeof(tmp), "%u.tmp", i);
	snprintf(name, sizeof(name), "%u", i);
	if (how == DIRECT_FDATASYNC || how == DIRECT_DSYNC || how == DIRECT_FALLOC ||
	    how == DIRECT_NORENAME)
		flags |= O_DIRECT;
	if (how == DIRECT_DSYNC)
		flags |= O_DSYNC;
	fd = openat(dfd, tmp, flags, 0644);
	if (fd < 0)
		die("open", errno);
	if (how == DIRECT_FALLOC && fallocate(fd, 0, 0, (off_t)size) != 0)
		die("fallocate", errno);
	while (off < size) {
		ssize_t n = pwrite(fd, buf + off, size - off, (off_t)off);

		if (n <= 0)
			die("pwrite", n < 0 ? errno : EIO);
		off += (size_t)n;
	}
	if (how == BUF_FSYNC ? fsync(fd) != 0 : how != DIRECT_DSYNC && fdatasync(fd) != 0)
		die("fsync", errno);
	close(fd);
	if (how == DIRECT_NORENAME) /* unsafe: a torn file under its name; for comparison only */
		snprintf(name, sizeof(name), "%s", tmp);
	else if (renameat(dfd, tmp, dfd, name) != 0)
		die("rename", errno);
	if (how != DIRECT_NORENAME && fsync(dfd) != 0)
		die("fsync dir", errno);
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end)
		v = 0;
	return (size_t)v;
}

int main(int argc, char **argv)
{
	unsigned n = 32;
	size_t size = 8u << 20;
	const char *dir = ".";
	uint8_t *buf;
	int opt, dfd;

	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		if (opt == 'n')
			n = (unsigned)strtoul(optarg, NULL, 10);
		else if (opt == 's')
			size = parse_size(optarg);
		else {
			fprintf(stderr, "usage: bench_flush [-n FILES] [-s SIZE] [DIR]\n");
			return 2;
		}
	}
	if (optind < argc)
		dir = argv[optind];
	if (n == 0 || size == 0 || size % SEGFILE_BLOCK != 0) {
		fprintf(stderr, "bench_flush: -n >= 1, -s a multiple of 4096\n");
		return 2;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		die(dir, errno);
	buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap", errno);
	for (size_t k = 0; k < size; k++)
		buf[k] = (uint8_t)(k * 131 + 7);
	printf("%u files of %zu bytes in %s\n", n, size, dir);
	printf("%-42s %12s %13s %8s\n", "variant", "CPU ms/file", "wall ms/file", "MB/s");
	for (int how = BUF_FSYNC; how <= SEGFILE; how++) {
		double c0 = cpu_s(), w0 = wall_s(), c, w;

		for (unsigned i = 0; i < n; i++) {
			if (how == SEGFILE) {
				struct segfile_hdr h = { .log_id = 1, .segment_id = i,
							 .state = SEGFILE_CLOSED,
							 .valid_len = size - 100,
							 .buffer_size = size };
				struct segfile_io io = { 0 };
				int rc = tw__segfile_write(dfd, &h, buf, &io);

				if (rc)
					die("tw__segfile_write", -rc);
				if (io.buffered)
					fprintf(stderr, "bench_flush: %s refuses O_DIRECT\n", dir);
			} else {
				one(dfd, (enum how)how, i, buf, size);
			}
		}
		c = (cpu_s() - c0) * 1e3 / n;
		w = (wall_s() - w0) * 1e3 / n;
		printf("%-42s %12.2f %13.2f %8.0f\n", names[how], c, w,
		       (double)size / 1e6 / (w / 1e3));
		for (unsigned i = 0; i < n; i++) {
			char name[64];

			if (how == SEGFILE)
				tw__segfile_name(1, i, name, sizeof(name));
			else if (how == DIRECT_NORENAME)
				snprintf(name, sizeof(name), "%u.tmp", i);
			else
				snprintf(name, sizeof(name), "%u", i);
			unlinkat(dfd, name, 0);
		}
		fsync(dfd);
	}
	close(dfd);
	return 0;
}
