/*
 * examples/kv/kv_index.c — the hash index (kv_index.h).
 */
#include "kv_index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kv_index_init(struct kv_index *ix, size_t expect)
{
	size_t n = 64;

	while (n < expect + expect / 2) /* load factor at most 2/3 before the first growth */
		n *= 2;
	memset(ix, 0, sizeof(*ix));
	ix->slots = calloc(n, sizeof(*ix->slots));
	if (!ix->slots)
		return -ENOMEM;
	ix->mask = n - 1;
	return 0;
}

void kv_index_free(struct kv_index *ix)
{
	free(ix->slots);
	memset(ix, 0, sizeof(*ix));
}

static bool same_key(const struct kv_slot *s, uint64_t hash, const void *key, uint16_t klen)
{
	return s->hash == hash && kv_get16(s->rec + 8) == klen &&
	       !memcmp(s->rec + KV_REC_HDR_SIZE, key, klen);
}

struct kv_slot *kv_index_find(const struct kv_index *ix, uint64_t hash, const void *key,
			      uint16_t klen)
{
	for (size_t i = hash & ix->mask;; i = (i + 1) & ix->mask) {
		struct kv_slot *s = &ix->slots[i];

		if (!s->rec)
			return NULL;
		if (same_key(s, hash, key, klen))
			return s;
	}
}

static int grow(struct kv_index *ix)
{
	size_t n = (ix->mask + 1) * 2;
	struct kv_slot *old = ix->slots, *slots = calloc(n, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i <= ix->mask; i++) {
		size_t j;

		if (!old[i].rec)
			continue;
		for (j = old[i].hash & (n - 1); slots[j].rec; j = (j + 1) & (n - 1))
			;
		slots[j] = old[i];
	}
	free(old);
	ix->slots = slots;
	ix->mask = n - 1;
	ix->grows++;
	return 0;
}

struct kv_slot *kv_index_slot(struct kv_index *ix, uint64_t hash, const uint8_t *key,
			      uint16_t klen)
{
	size_t i;

	if ((ix->count + 1) * 3 > (ix->mask + 1) * 2 && grow(ix) < 0)
		return NULL;
	for (i = hash & ix->mask; ix->slots[i].rec; i = (i + 1) & ix->mask)
		if (same_key(&ix->slots[i], hash, key, klen))
			return &ix->slots[i];
	ix->count++;
	ix->slots[i].hash = hash;
	return &ix->slots[i];
}
