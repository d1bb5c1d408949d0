/*
 * tests/lib/wire_ref.h — control-message bytes written by hand from the wire format
 * (docs/wire-protocol.md), independently of proto/'s encoder: the 8-byte frame header, protobuf
 * varints, tags and fields. For tests that send what no encoder would (unknown fields, bad frames).
 * Header-only (the fuzz targets build without tests/lib's library).
 */
#ifndef TW_TESTS_WIRE_REF_H
#define TW_TESTS_WIRE_REF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"

/* The frame header: magic, major, minor, body length (LE); TW_RPC_HDR_SIZE bytes at out. */
static inline void put_frame_hdr(unsigned char *out, unsigned major, unsigned minor, uint32_t blen)
{
	tw_store_le16(out, TW_RPC_MAGIC);
	out[2] = (unsigned char)major;
	out[3] = (unsigned char)minor;
	tw_store_le32(out + 4, blen);
}

/* The header, then the body: returns the frame's length. */
static inline size_t put_frame(unsigned char *out, unsigned major, unsigned minor, const void *body,
			       size_t blen)
{
	put_frame_hdr(out, major, minor, (uint32_t)blen);
	memcpy(out + TW_RPC_HDR_SIZE, body, blen);
	return TW_RPC_HDR_SIZE + blen;
}

/* A protobuf varint: returns its length (at most 10). */
static inline size_t put_varint(unsigned char *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (unsigned char)v;
	return n;
}

/* A protobuf field tag (field number, wire type). */
static inline size_t put_tag(unsigned char *p, uint32_t field, unsigned wt)
{
	return put_varint(p, ((uint64_t)field << 3) | wt);
}

/* A varint field (wire type 0): its tag, then v. */
static inline size_t put_uint_field(unsigned char *p, uint32_t field, uint64_t v)
{
	size_t n = put_tag(p, field, 0);

	return n + put_varint(p + n, v);
}

/* A length-delimited field (wire type 2): its tag, len, then the len bytes. */
static inline size_t put_bytes_field(unsigned char *p, uint32_t field, const void *b, size_t len)
{
	size_t n = put_tag(p, field, 2);

	n += put_varint(p + n, len);
	memcpy(p + n, b, len);
	return n + len;
}

#endif
