/*
 * tests/unit/test_crc32c.c — CRC32C against the RFC 3720 B.4 vectors, the "123456789" check
 * value, and the hardware path against the portable one on random buffers of every length up
 * to a little over 4 KiB at every alignment, plus long buffers and the chaining property.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/log_format.h>

#include "rng.h"
#include "tap.h"

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

/* Both implementations must give `want`. */
static void vector(const char *name, const void *buf, size_t len, uint32_t want)
{
	is_int(tw_crc32c(0, buf, len), want, "%s (%s)", name, tw_crc32c_impl());
	is_int(tw_crc32c_portable(0, buf, len), want, "%s (table)", name);
}

static void rfc3720_vectors(void)
{
	/* RFC 3720 appendix B.4: an iSCSI SCSI Read (10) command PDU. */
	static const uint8_t read_pdu[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	uint8_t b[32];

	memset(b, 0, sizeof(b));
	vector("32 bytes of zeros", b, sizeof(b), 0x8A9136AA);
	memset(b, 0xff, sizeof(b));
	vector("32 bytes of 0xff", b, sizeof(b), 0x62A8AB43);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	vector("32 incrementing bytes", b, sizeof(b), 0x46DD794E);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	vector("32 decrementing bytes", b, sizeof(b), 0x113FDB5C);
	vector("iSCSI read PDU", read_pdu, sizeof(read_pdu), 0xD9963A56);
	vector("\"123456789\"", "123456789", 9, 0xE3069283);
	vector("empty", "", 0, 0);
	is_int(tw_crc32c(0xE3069283, "", 0), 0xE3069283, "empty input leaves the CRC unchanged");
}

/* Every length 0..max at a random alignment, random initial CRC: hardware == table. */
static void every_length(size_t max)
{
	uint8_t *buf = malloc(max + 64);
	size_t bad = 0, first_bad = 0;

	TAP_REQUIRE(buf, "malloc");
	fill(buf, max + 64);
	for (size_t len = 0; len <= max; len++) {
		size_t align = (size_t)(rnd() % 64);
		uint32_t init = (len % 3) ? (uint32_t)rnd() : 0;

		if (tw_crc32c(init, buf + align, len) != tw_crc32c_portable(init, buf + align, len)) {
			if (!bad++)
				first_bad = len;
		}
	}
	ok(bad == 0, "%s == table for every length 0..%zu at random alignments", tw_crc32c_impl(),
	   max);
	if (bad)
		tap_diag("%zu lengths differ, first %zu", bad, first_bad);
	free(buf);
}

/* Long buffers, exact-size allocations (ASan sees any overread), lengths around the tiers. */
static void long_buffers(void)
{
	static const size_t lens[] = { 96, 383, 384, 385, 1535, 1536, 1537, 12287, 12288,
				       12289, 12288 * 3 + 1536 + 384 + 96 + 7, 1 << 20,
				       (1 << 20) + 13 };
	size_t bad = 0;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint8_t *b = malloc(lens[i]);

		TAP_REQUIRE(b, "malloc");
		fill(b, lens[i]);
		if (tw_crc32c(0, b, lens[i]) != tw_crc32c_portable(0, b, lens[i])) {
			tap_diag("length %zu differs", lens[i]);
			bad++;
		}
		free(b);
	}
	ok(bad == 0, "long buffers: %s == table", tw_crc32c_impl());
}

/* crc(crc(a), b) == crc(a || b), for both implementations, at random split points. */
static void chaining(int rounds)
{
	size_t bad = 0;
	uint8_t *buf = malloc(20000);

	TAP_REQUIRE(buf, "malloc");
	fill(buf, 20000);
	for (int r = 0; r < rounds; r++) {
		size_t len = (size_t)(rnd() % 20000);
		size_t cut = len ? (size_t)(rnd() % (len + 1)) : 0;
		uint32_t whole = tw_crc32c(0, buf, len);

		if (tw_crc32c(tw_crc32c(0, buf, cut), buf + cut, len - cut) != whole)
			bad++;
		if (tw_crc32c_portable(tw_crc32c_portable(0, buf, cut), buf + cut, len - cut) != whole)
			bad++;
		/* Mixed: hardware for the first part, table for the rest. */
		if (tw_crc32c_portable(tw_crc32c(0, buf, cut), buf + cut, len - cut) != whole)
			bad++;
	}
	ok(bad == 0, "chaining holds at %d random split points (hardware, table, mixed)", rounds);
	free(buf);
}

int main(void)
{
	rng_state = tap_seed();
	tap_diag("tw_crc32c implementation: %s", tw_crc32c_impl());
	rfc3720_vectors();
	every_length(4200);
	long_buffers();
	chaining(tap_long_mode() ? 200000 : 2000);
	tap_done_testing();
	return tap_exit();
}
