/*
 * tests/bench/bench_scan.c — micro-benchmark of the log format code (a program, not a test).
 *
 *   bench_scan [seconds-per-measurement]   (default 0.5)
 *
 * Prints, one line each: scan throughput on 8 MiB buffers of 100-byte and 4 KiB entries (one
 * entry per write, and 100-byte entries batched 16 per write), the generic walk for
 * comparison, writer throughput (append + seal), and raw CRC32C throughput of the dispatched
 * implementation and of the portable table. GB/s are 10^9 bytes per second of buffer. "best"
 * is the fastest pass over the 8 MiB buffer (robust on a machine shared with other jobs),
 * "mean" the average over the whole measurement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "core/util.h"

#define BUF_SIZE (8u << 20)

void tw__scan_generic(const void *buf, size_t len, struct tw_scan_result *out);

static double seconds = 0.5;
static volatile uint64_t sink; /* keeps results alive */

/* Fills a zeroed buf with entries of `payload` bytes, `per_write` per write, until full. */
static size_t fill(uint8_t *buf, size_t cap, uint32_t payload, int per_write, uint64_t *n_out)
{
	struct tw_log_writer w;
	uint8_t *src = malloc(payload ? payload : 1);

	if (!src)
		abort();
	for (uint32_t i = 0; i < payload; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	tw_log_writer_init(&w, buf, cap);
	for (;;) {
		size_t off, len;
		int k = 0;

		while (k < per_write && tw_log_writer_append(&w, src, payload, NULL) == 0)
			k++;
		tw_log_writer_seal(&w, &off, &len);
		if (k < per_write)
			break;
	}
	free(src);
	*n_out = w.entries;
	return w.pos;
}

typedef void (*scan_fn)(const void *buf, size_t len, struct tw_scan_result *out);

static void bench_scan(const char *name, scan_fn fn, uint32_t payload, int per_write)
{
	uint8_t *buf = malloc(BUF_SIZE);
	struct tw_scan_result r;
	uint64_t n, iters = 0, t0, t, best = UINT64_MAX;
	size_t used;

	if (!buf)
		abort();
	memset(buf, 0, BUF_SIZE);
	used = fill(buf, BUF_SIZE, payload, per_write, &n);
	fn(buf, BUF_SIZE, &r); /* warm up, check */
	if (r.valid_len != used || r.entries != n) {
		fprintf(stderr, "bench_scan: scan found %zu/%llu, wrote %zu/%llu\n", r.valid_len,
			(unsigned long long)r.entries, used, (unsigned long long)n);
		exit(1);
	}
	t0 = tw_now_ns();
	do {
		uint64_t i0 = tw_now_ns(), it;

		fn(buf, BUF_SIZE, &r);
		it = tw_now_ns() - i0;
		sink += r.valid_len;
		if (it < best)
			best = it;
		iters++;
		t = tw_now_ns() - t0;
	} while (t < (uint64_t)(seconds * 1e9));
	printf("scan %-8s %5u B entries, %2d/write: %6.2f GB/s best, %6.2f mean  %6.2f M entries/s\n",
	       name, payload, per_write, (double)used / (double)best,
	       (double)used * (double)iters / (double)t, (double)n * 1e3 / (double)best);
	free(buf);
}

static void bench_writer(uint32_t payload, int per_write)
{
	uint8_t *buf = malloc(BUF_SIZE);
	uint64_t n, t = 0, best = UINT64_MAX;
	size_t used = 0;

	if (!buf)
		abort();
	do {
		uint64_t t0, it;

		/* A backup zeroes a buffer before reuse; that is not the writer's cost. */
		memset(buf, 0, BUF_SIZE);
		t0 = tw_now_ns();
		used = fill(buf, BUF_SIZE, payload, per_write, &n);
		it = tw_now_ns() - t0;
		t += it;
		if (it < best)
			best = it;
	} while (t < (uint64_t)(seconds * 1e9));
	printf("writer   %5u B entries, %2d/write: %6.2f GB/s best  %6.2f M entries/s (append+seal)\n",
	       payload, per_write, (double)used / (double)best, (double)n * 1e3 / (double)best);
	free(buf);
}

typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);

static void bench_crc(const char *name, crc_fn fn, size_t chunk)
{
	uint8_t *buf = malloc(BUF_SIZE);
	uint64_t t0, t, best = UINT64_MAX;

	if (!buf)
		abort();
	for (size_t i = 0; i < BUF_SIZE; i++)
		buf[i] = (uint8_t)(i * 31);
	sink += fn(0, buf, BUF_SIZE);
	t0 = tw_now_ns();
	do {
		uint64_t i0 = tw_now_ns(), it;
		uint32_t c = 0;

		for (size_t off = 0; off + chunk <= BUF_SIZE; off += chunk)
			c ^= fn(0, buf + off, chunk);
		it = tw_now_ns() - i0;
		if (it < best)
			best = it;
		sink += c;
		t = tw_now_ns() - t0;
	} while (t < (uint64_t)(seconds * 1e9));
	printf("crc32c %-15s %8zu B calls: %6.2f GB/s best\n", name, chunk,
	       (double)(BUF_SIZE / chunk * chunk) / (double)best);
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	printf("# tw_crc32c implementation: %s; 8 MiB buffers; %.2f s per line\n", tw_crc32c_impl(),
	       seconds);
	bench_scan("tw_scan", tw_scan, 100, 1);
	bench_scan("tw_scan", tw_scan, 100, 16);
	bench_scan("tw_scan", tw_scan, 4096, 1);
	bench_scan("tw_scan", tw_scan, 1024, 1);
	bench_scan("tw_scan", tw_scan, 0, 1);
	bench_scan("generic", tw__scan_generic, 100, 1);
	bench_scan("generic", tw__scan_generic, 4096, 1);
	bench_writer(100, 1);
	bench_writer(100, 16);
	bench_writer(4096, 1);
	bench_crc(tw_crc32c_impl(), tw_crc32c, BUF_SIZE);
	bench_crc(tw_crc32c_impl(), tw_crc32c, 4096);
	bench_crc(tw_crc32c_impl(), tw_crc32c, 100);
	bench_crc("table", tw_crc32c_portable, BUF_SIZE);
	bench_crc("table", tw_crc32c_portable, 4096);
	return 0;
}
