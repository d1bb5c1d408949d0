/*
 * tests/lib/tear.c — see tear.h.
 */
#include "tear.h"

#include <stdlib.h>

#include "rng.h"
#include "tap.h"

const char *const tl_order_name[TL_ORDER_COUNT] = { "asc", "desc", "chunks" };

void tl_write_order(enum tl_order o, size_t s, size_t e, size_t *perm)
{
	size_t n = e - s;

	if (o == TL_ORDER_ASC) {
		for (size_t i = 0; i < n; i++)
			perm[i] = i;
	} else if (o == TL_ORDER_DESC) {
		for (size_t i = 0; i < n; i++)
			perm[i] = n - 1 - i;
	} else {
		/* Chunks: [max(s, 64k), min(e, 64k+64)), shuffled, ascending inside. */
		size_t first = s / 64, last = (e - 1) / 64, nch = last - first + 1, k = 0;
		size_t *ch = malloc(nch * sizeof(*ch));

		TAP_REQUIRE(ch, "malloc");
		for (size_t i = 0; i < nch; i++)
			ch[i] = first + i;
		for (size_t i = nch - 1; i > 0; i--) {
			size_t j = (size_t)(rnd() % (i + 1)), t = ch[i];

			ch[i] = ch[j];
			ch[j] = t;
		}
		for (size_t i = 0; i < nch; i++) {
			size_t lo = ch[i] * 64 < s ? s : ch[i] * 64;
			size_t hi = ch[i] * 64 + 64 > e ? e : ch[i] * 64 + 64;

			for (size_t b = lo; b < hi; b++)
				perm[k++] = b - s;
		}
		free(ch);
	}
}

uint32_t tl_log_seed(void)
{
	const char *e = getenv("TW_LOG_SEED");
	uint32_t seed = e ? (uint32_t)strtoul(e, NULL, 0) : 0;

	if (seed)
		tap_diag("chain seed 0x%08x", seed);
	return seed;
}
