/*
 * examples/kv/kv_wire.h — the bytes of twkv: the client protocol and the log record
 * (docs/kv.md, "Protocol" and "The log record").
 *
 * Every message, request or reply, is a 16-byte header and `len` bytes of body, little-endian:
 *
 *   0  u32 len      body bytes (at most KV_MAX_BODY; more closes the connection)
 *   4  u8  op       KV_OP_*; a reply carries the request's op | KV_REPLY
 *   5  u8  status   replies: KV_S_*; requests: 0
 *   6  u16 magic    KV_MAGIC
 *   8  u64 id       chosen by the client, echoed in the reply (replies may come out of order)
 *
 * Bodies:
 *   GET       key                                  reply OK: u64 version, value
 *   PUT       a log record (below), version 0      reply OK: u64 version
 *   MAP       (empty)                              reply OK: the cluster map (kv_cluster.h)
 *   STATS     (empty)                              reply OK: "name value\n" lines
 *   CONFIGURE "you <id>\n" and a cluster map       reply OK once the server's partitions serve
 *   TAKEOVER  u32 partition                        reply OK once the server serves it
 * A reply that is not OK carries a short text saying why (may be empty).
 *
 * The log record is what one PUT appends to its partition's log, and also the body of the PUT
 * request: the server stamps the version into the request's bytes and hands them to
 * tw_primary_append_async(), which copies them once into the log. 16-byte header:
 *
 *   0  u64 version  > 0, assigned by the partition's owner, grows with every PUT
 *   8  u16 klen     1 .. KV_MAX_KEY
 *  10  u16 flags    0
 *  12  u32 vlen     0 .. KV_MAX_VALUE
 *  16  key, then value
 */
#ifndef TWKV_WIRE_H
#define TWKV_WIRE_H

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAGIC 0x4b56u
#define KV_HDR_SIZE 16u
#define KV_REC_HDR_SIZE 16u
#define KV_MAX_KEY 1024u
#define KV_MAX_VALUE (1u << 20)
#define KV_MAX_BODY (KV_REC_HDR_SIZE + KV_MAX_KEY + KV_MAX_VALUE)

enum kv_op {
	KV_OP_GET = 1,
	KV_OP_PUT = 2,
	KV_OP_MAP = 3,
	KV_OP_STATS = 4,
	KV_OP_CONFIGURE = 5,
	KV_OP_TAKEOVER = 6,
	KV_REPLY = 0x80,
};

enum kv_status {
	KV_S_OK = 0,
	KV_S_NOT_FOUND = 1,  /* GET: no such key */
	KV_S_NOT_OWNER = 2,  /* this server does not serve the key's partition (now): ask another */
	KV_S_RETRY = 3,      /* the server cannot take it now (log memory full): ask again later */
	KV_S_BAD = 4,        /* malformed or refused request (the text says why) */
	KV_S_ERROR = 5,      /* the server failed to do it (the text says why) */
	KV_S_UNKNOWN = 6,    /* PUT: the server tried to append it and failed; it may or may not
			      * be in the log. Do not send it again (it could be applied twice) */
};

struct kv_hdr {
	uint32_t len;
	uint8_t op;
	uint8_t status;
	uint64_t id;
};

static inline void kv_put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void kv_put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void kv_put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static inline uint16_t kv_get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t kv_get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t kv_get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

static inline void kv_hdr_encode(uint8_t *p, const struct kv_hdr *h)
{
	kv_put32(p, h->len);
	p[4] = h->op;
	p[5] = h->status;
	kv_put16(p + 6, KV_MAGIC);
	kv_put64(p + 8, h->id);
}

/* Decode a header; false when it is not one of ours or announces too long a body (the peer is
 * then not speaking this protocol: close the connection). */
static inline bool kv_hdr_decode(const uint8_t *p, struct kv_hdr *h)
{
	h->len = kv_get32(p);
	h->op = p[4];
	h->status = p[5];
	h->id = kv_get64(p + 8);
	return kv_get16(p + 6) == KV_MAGIC && h->len <= KV_MAX_BODY;
}

/* A decoded log record; key and value point into the bytes it was decoded from. */
struct kv_rec {
	uint64_t version;
	const uint8_t *key;
	const uint8_t *value;
	uint16_t klen;
	uint32_t vlen;
};

static inline void kv_rec_hdr_encode(uint8_t *p, uint64_t version, uint16_t klen, uint32_t vlen)
{
	kv_put64(p, version);
	kv_put16(p + 8, klen);
	kv_put16(p + 10, 0);
	kv_put32(p + 12, vlen);
}

/* Decode the record in buf[0..len): false unless the lengths add up exactly, the key is
 * 1..KV_MAX_KEY bytes, the value at most KV_MAX_VALUE and the flags 0. The version is not
 * checked (a PUT request carries 0). */
static inline bool kv_rec_decode(const void *buf, uint32_t len, struct kv_rec *r)
{
	const uint8_t *p = buf;

	if (len < KV_REC_HDR_SIZE)
		return false;
	r->version = kv_get64(p);
	r->klen = kv_get16(p + 8);
	r->vlen = kv_get32(p + 12);
	r->key = p + KV_REC_HDR_SIZE;
	r->value = r->key + r->klen;
	return r->klen >= 1 && r->klen <= KV_MAX_KEY && r->vlen <= KV_MAX_VALUE &&
	       kv_get16(p + 10) == 0 &&
	       (uint64_t)KV_REC_HDR_SIZE + r->klen + r->vlen == len;
}

/* Make room for `need` bytes in a growing message buffer (doubling from 4 KiB; the buffers of a
 * connection stay at their largest, so a steady load allocates nothing). 0 or -ENOMEM. */
static inline int kv_buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 4096;
	uint8_t *p;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	p = realloc(*buf, n);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = n;
	return 0;
}

/* 64-bit FNV-1a of a key: the partition is chosen from its high half, the index slot from its
 * low half (kv_partition_of, kv_index.c). */
static inline uint64_t kv_hash(const void *key, size_t len)
{
	const uint8_t *p = key;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static inline unsigned kv_partition_of(uint64_t hash, unsigned partitions)
{
	return (unsigned)((hash >> 32) % partitions);
}

static inline const char *kv_status_str(int status)
{
	switch (status) {
	case KV_S_OK: return "ok";
	case KV_S_NOT_FOUND: return "not found";
	case KV_S_NOT_OWNER: return "not the owner";
	case KV_S_RETRY: return "retry";
	case KV_S_BAD: return "bad request";
	case KV_S_ERROR: return "error";
	case KV_S_UNKNOWN: return "outcome unknown";
	default: return "unknown status";
	}
}

#endif
