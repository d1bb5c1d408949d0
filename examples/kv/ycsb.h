/*
 * examples/kv/ycsb.h — YCSB's request distribution and key names, as YCSB's core workload
 * computes them (brianfrankcooper/YCSB, core/src/main/java/site/ycsb/):
 *
 *   generator/ZipfianGenerator.java           Gray et al., "Quickly Generating Billion-Record
 *                                             Synthetic Databases", SIGMOD 1994
 *   generator/ScrambledZipfianGenerator.java  a Zipfian over 10^10 items (zeta precomputed
 *                                             for theta 0.99), hashed with FNV into the
 *                                             key space, so the popular keys are spread out
 *   Utils.java                                fnvhash64
 *   workloads/CoreWorkload.java               buildKeyName ("user" + zero padding + the
 *                                             FNV hash of the key number), nextKeynum (draws
 *                                             past the last inserted key are drawn again), and
 *                                             the key chooser over recordcount + 1 items
 *
 * Uniform numbers come from a splitmix64 stream (YCSB uses java.util.Random), so the sequence
 * differs from YCSB's and the distribution does not.
 */
#ifndef TWKV_YCSB_H
#define TWKV_YCSB_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014). */
struct ycsb_rng {
	uint64_t s;
};

static inline uint64_t ycsb_rand(struct ycsb_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double ycsb_uniform(struct ycsb_rng *r)
{
	return (double)(ycsb_rand(r) >> 11) * 0x1.0p-53;
}

/* ZipfianGenerator(min, max, theta, zetan): items min..max, min the most popular. */
struct ycsb_zipf {
	uint64_t base, items;
	double theta, zetan, alpha, eta, zeta2theta;
};

void ycsb_zipf_init(struct ycsb_zipf *z, uint64_t min, uint64_t max, double theta, double zetan);
uint64_t ycsb_zipf_next(const struct ycsb_zipf *z, struct ycsb_rng *r);
/* zeta(n, theta) = sum_{i=1..n} 1 / i^theta (O(n): for small n, and to check the constant). */
double ycsb_zeta(uint64_t n, double theta);

/* ScrambledZipfianGenerator(min, max): theta 0.99 over 10^10 items, FNV-hashed into
 * min..max. */
struct ycsb_scrambled {
	struct ycsb_zipf gen;
	uint64_t min, itemcount;
};

void ycsb_scrambled_init(struct ycsb_scrambled *s, uint64_t min, uint64_t max);
uint64_t ycsb_scrambled_next(const struct ycsb_scrambled *s, struct ycsb_rng *r);

/* CoreWorkload's key chooser for a workload without inserts over `records` keys: a scrambled
 * Zipfian over 0..records (records + 1 items), drawn again past records - 1. */
uint64_t ycsb_next_keynum(const struct ycsb_scrambled *s, struct ycsb_rng *r, uint64_t records);

/* Utils.fnvhash64: FNV-1 over the 8 bytes of val, low byte first, as a non-negative Java long. */
int64_t ycsb_fnvhash64(int64_t val);

/* CoreWorkload.buildKeyName(keynum, keysize - 4, false): "user", zeros, decimal FNV hash;
 * exactly keysize bytes for 23 <= keysize < cap. Returns the length. */
size_t ycsb_key(char *buf, size_t cap, uint64_t keynum, size_t keysize);

#endif
