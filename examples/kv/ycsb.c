/*
 * examples/kv/ycsb.c — YCSB's scrambled Zipfian distribution and key names (ycsb.h).
 */
#include "ycsb.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ScrambledZipfianGenerator.ITEM_COUNT and ZETAN (zeta(10^10, 0.99), precomputed by YCSB). */
#define SCRAMBLED_ITEM_COUNT 10000000000ull
#define SCRAMBLED_ZETAN 26.46902820178302
#define SCRAMBLED_THETA 0.99

double ycsb_zeta(uint64_t n, double theta)
{
	double sum = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += 1 / pow((double)(i + 1), theta);
	return sum;
}

void ycsb_zipf_init(struct ycsb_zipf *z, uint64_t min, uint64_t max, double theta, double zetan)
{
	z->items = max - min + 1;
	z->base = min;
	z->theta = theta;
	z->zeta2theta = ycsb_zeta(2, theta);
	z->alpha = 1.0 / (1.0 - theta);
	z->zetan = zetan;
	z->eta = (1 - pow(2.0 / (double)z->items, 1 - theta)) / (1 - z->zeta2theta / zetan);
}

uint64_t ycsb_zipf_next(const struct ycsb_zipf *z, struct ycsb_rng *r)
{
	double u = ycsb_uniform(r), uz = u * z->zetan;

	if (uz < 1.0)
		return z->base;
	if (uz < 1.0 + pow(0.5, z->theta))
		return z->base + 1;
	return z->base + (uint64_t)((double)z->items * pow(z->eta * u - z->eta + 1, z->alpha));
}

int64_t ycsb_fnvhash64(int64_t val)
{
	uint64_t h = 0xCBF29CE484222325ull, v = (uint64_t)val;

	for (int i = 0; i < 8; i++) {
		h ^= v & 0xff;
		h *= 1099511628211ull;
		v >>= 8; /* Java's >> on a negative long keeps the sign; keys are never negative */
	}
	/* Math.abs of a Java long; Long.MIN_VALUE stays negative. */
	return (int64_t)h == INT64_MIN ? INT64_MIN : (int64_t)h < 0 ? -(int64_t)h : (int64_t)h;
}

void ycsb_scrambled_init(struct ycsb_scrambled *s, uint64_t min, uint64_t max)
{
	ycsb_zipf_init(&s->gen, 0, SCRAMBLED_ITEM_COUNT, SCRAMBLED_THETA, SCRAMBLED_ZETAN);
	s->min = min;
	s->itemcount = max - min + 1;
}

uint64_t ycsb_scrambled_next(const struct ycsb_scrambled *s, struct ycsb_rng *r)
{
	int64_t h = ycsb_fnvhash64((int64_t)ycsb_zipf_next(&s->gen, r));

	/* h < 0 only for Long.MIN_VALUE (odds 2^-64), where Java's % would give a negative key
	 * number; we fold it into the range instead. */
	return s->min + (uint64_t)(h < 0 ? -(h % (int64_t)s->itemcount) :
				    h % (int64_t)s->itemcount);
}

uint64_t ycsb_next_keynum(const struct ycsb_scrambled *s, struct ycsb_rng *r, uint64_t records)
{
	uint64_t k;

	do
		k = ycsb_scrambled_next(s, r);
	while (k > records - 1);
	return k;
}

size_t ycsb_key(char *buf, size_t cap, uint64_t keynum, size_t keysize)
{
	char digits[24];
	int n = snprintf(digits, sizeof(digits), "%" PRId64, ycsb_fnvhash64((int64_t)keynum));
	size_t fill = keysize > 4 + (size_t)n ? keysize - 4 - (size_t)n : 0;

	if (4 + fill + (size_t)n >= cap)
		return 0;
	memcpy(buf, "user", 4);
	memset(buf + 4, '0', fill);
	memcpy(buf + 4 + fill, digits, (size_t)n + 1);
	return 4 + fill + (size_t)n;
}
