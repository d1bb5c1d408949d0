/*
 * examples/kv/kv_index.h — a partition's hash index: key -> the key's record in the log.
 *
 * Open addressing with linear probing over a power-of-two array of slots (RAMCloud's hash table
 * also keeps, per object, a hash and a reference into the log, not the object). A slot holds the
 * key's 64-bit hash, the log position (lsn) of its record and a pointer to the record's bytes;
 * the key itself and its version are read from the record. The pointer is what
 * tw_primary_read() returned for the lsn: it stays valid until the record's segment is freed,
 * and the partition frees segments only after the cleaner moved every record the index points
 * to out of them (docs/kv.md, "Cleaning"). During a takeover the same table holds heap copies of
 * the recovered records (`owned` set) until they are appended to the new log.
 *
 * No deletion (the service has no DELETE), so no tombstones in the table. Not thread-safe: one
 * thread owns an index at a time (the serving thread, or the thread taking a partition over
 * before it hands the partition to the serving thread).
 */
#ifndef TWKV_INDEX_H
#define TWKV_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv_wire.h"

struct kv_slot {
	uint64_t hash;
	uint64_t lsn;
	const uint8_t *rec; /* the record (KV_REC_HDR_SIZE + key + value bytes); NULL: empty */
	uint32_t len;       /* its length */
};

struct kv_index {
	struct kv_slot *slots;
	size_t mask;  /* slots - 1 */
	size_t count; /* keys */
	uint64_t grows;
};

/* An empty index with room for `expect` keys before it grows. 0 or -ENOMEM. */
int kv_index_init(struct kv_index *ix, size_t expect);
/* Free the table (and nothing it points to). */
void kv_index_free(struct kv_index *ix);

/* The slot of `key`, or NULL. */
struct kv_slot *kv_index_find(const struct kv_index *ix, uint64_t hash, const void *key,
			      uint16_t klen);

/*
 * The slot for the key of record `r` (hash `hash`): the existing one, or a new one (with
 * rec NULL: the caller fills it) when the key is new. NULL only when growing failed (-ENOMEM).
 * Growing moves slots: slot pointers from earlier calls are stale afterwards.
 */
struct kv_slot *kv_index_slot(struct kv_index *ix, uint64_t hash, const uint8_t *key,
			      uint16_t klen);

/*
 * Hints for a batch of lookups (each a cache miss on a large index: the slot, then the record
 * it points to, somewhere in the log): start loading the first slot `hash` probes, and, once
 * that slot has arrived, the record it points to when its hash is this one. Lookups issued
 * after both hints for a batch overlap their misses instead of taking them one by one.
 * Nothing is changed; a stale hint costs a load.
 */
static inline void kv_index_prefetch(const struct kv_index *ix, uint64_t hash)
{
	if (ix->slots)
		__builtin_prefetch(&ix->slots[hash & ix->mask]);
}

static inline void kv_index_prefetch_rec(const struct kv_index *ix, uint64_t hash)
{
	const struct kv_slot *s;

	if (!ix->slots) /* a partition no longer served (kv_index_free) */
		return;
	s = &ix->slots[hash & ix->mask];
	if (s->rec && s->hash == hash)
		__builtin_prefetch(s->rec);
}

/* Version of the record a slot points to. */
static inline uint64_t kv_slot_version(const struct kv_slot *s)
{
	return kv_get64(s->rec);
}

#endif
