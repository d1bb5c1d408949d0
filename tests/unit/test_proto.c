/*
 * tests/unit/test_proto.c — the pure part of proto/: every message round-trips (encode -> frame
 * -> decode -> deep-equal, every field set to a non-default value by walking the descriptors),
 * unknown fields and unknown body kinds, a newer minor version, frame errors, validation of every
 * request and reply field, status <-> error mapping, conversions, builders, the arena.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"
#include "tap.h"
#include "wire_ref.h"

#define MAXMSG TW_RPC_MAX_MSG_DEFAULT

static struct tw_rpc_arena fill_arena;

/* ------------------------------------------------------------------ generic fill and compare */

static void fill_msg(const ProtobufCMessageDescriptor *d, void *msg, unsigned seed, int depth);

static void fill_value(const ProtobufCFieldDescriptor *f, void *p, unsigned seed, int depth)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		*(int32_t *)p = (int32_t)(1000 + seed);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		*(uint32_t *)p = 0x80000000u + seed;
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		*(int64_t *)p = (int64_t)0x100000000ll + seed;
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		*(uint64_t *)p = 0x123456789ull + seed;
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		*(float *)p = 1.5f + (float)seed;
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		*(double *)p = 2.25 + seed;
		break;
	case PROTOBUF_C_TYPE_BOOL:
		*(protobuf_c_boolean *)p = 1;
		break;
	case PROTOBUF_C_TYPE_ENUM:
		*(int *)p = 1 + (int)(seed % 2);
		break;
	case PROTOBUF_C_TYPE_STRING: {
		char s[32];

		snprintf(s, sizeof(s), "str-%u", seed);
		*(char **)p = tw__rpc_arena_strdup(&fill_arena, s);
		break;
	}
	case PROTOBUF_C_TYPE_BYTES: {
		ProtobufCBinaryData *b = p;
		unsigned i;

		b->len = 5 + seed % 7;
		b->data = tw__rpc_arena_alloc(&fill_arena, b->len);
		for (i = 0; i < b->len; i++)
			b->data[i] = (uint8_t)(seed + i);
		break;
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessageDescriptor *sd = f->descriptor;
		void *m = tw__rpc_arena_alloc(&fill_arena, sd->sizeof_message);

		protobuf_c_message_init(sd, m);
		fill_msg(sd, m, seed + 17, depth + 1);
		*(void **)p = m;
		break;
	}
	}
}

static size_t value_size(const ProtobufCFieldDescriptor *f)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_ENUM:
		return 4;
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	default:
		return 8;
	}
}

static void fill_msg(const ProtobufCMessageDescriptor *d, void *msg, unsigned seed, int depth)
{
	unsigned i, j;

	for (i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		char *base = msg;

		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
			continue;
		if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth > 3)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = 3, sz = value_size(f);
			char *arr = tw__rpc_arena_alloc(&fill_arena, n * sz);

			for (j = 0; j < n; j++)
				fill_value(f, arr + j * sz, seed + i * 31 + j, depth);
			memcpy(base + f->quantifier_offset, &n, sizeof(n));
			memcpy(base + f->offset, &arr, sizeof(arr));
		} else {
			fill_value(f, base + f->offset, seed + i * 31, depth);
		}
	}
}

static bool eq_msg(const ProtobufCMessageDescriptor *d, const void *a, const void *b, char *path,
		   size_t plen);

static bool eq_value(const ProtobufCFieldDescriptor *f, const void *a, const void *b, char *path,
		     size_t plen)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING: {
		const char *x = *(char *const *)a, *y = *(char *const *)b;

		return x && y && strcmp(x, y) == 0;
	}
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *x = a, *y = b;

		return x->len == y->len && (x->len == 0 || memcmp(x->data, y->data, x->len) == 0);
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const void *x = *(void *const *)a, *y = *(void *const *)b;

		if (!x || !y)
			return x == y;
		return eq_msg(f->descriptor, x, y, path, plen);
	}
	case PROTOBUF_C_TYPE_BOOL:
		return !*(const protobuf_c_boolean *)a == !*(const protobuf_c_boolean *)b;
	default:
		return memcmp(a, b, value_size(f)) == 0;
	}
}

static bool eq_msg(const ProtobufCMessageDescriptor *d, const void *a, const void *b, char *path,
		   size_t plen)
{
	unsigned i, j;

	for (i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *x = a, *y = b;
		bool ok = true;

		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			uint32_t ca, cb;

			memcpy(&ca, x + f->quantifier_offset, sizeof(ca));
			memcpy(&cb, y + f->quantifier_offset, sizeof(cb));

			if (ca != cb)
				ok = false;
			else if (ca != f->id)
				continue;
			else
				ok = eq_value(f, x + f->offset, y + f->offset, path, plen);
		} else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t na, nb, sz = value_size(f);
			const char *pa, *pb;

			memcpy(&na, x + f->quantifier_offset, sizeof(na));
			memcpy(&nb, y + f->quantifier_offset, sizeof(nb));
			memcpy(&pa, x + f->offset, sizeof(pa));
			memcpy(&pb, y + f->offset, sizeof(pb));

			ok = na == nb;
			for (j = 0; ok && j < na; j++)
				ok = eq_value(f, pa + j * sz, pb + j * sz, path, plen);
		} else {
			ok = eq_value(f, x + f->offset, y + f->offset, path, plen);
		}
		if (!ok) {
			size_t l = strlen(path);

			snprintf(path + l, plen - l, " <- %s.%s", d->short_name, f->name);
			return false;
		}
	}
	return true;
}

/* Every body kind of the Envelope, with all fields of the body (and sub-messages) set. */
static void test_roundtrip_all(void)
{
	const ProtobufCMessageDescriptor *ed = &tailwind__envelope__descriptor;
	static unsigned char buf[MAXMSG];
	struct tw_rpc_arena da;
	unsigned i, kinds = 0;

	tw__rpc_arena_init(&da, NULL, 0, 0);
	for (i = 0; i < ed->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &ed->fields[i];
		const ProtobufCMessageDescriptor *bd = f->descriptor;
		Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT, *out = NULL;
		struct tw_rpc_hdr hdr;
		char path[512] = "";
		size_t len = 0;
		void *body;
		int rc;

		if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
			continue;
		kinds++;
		body = tw__rpc_arena_alloc(&fill_arena, bd->sizeof_message);
		protobuf_c_message_init(bd, body);
		fill_msg(bd, body, i * 101, 0);
		env.request_id = 0xfeedfacecafe0000ull + i;
		env.epoch = 77 + i;
		env.body_case = (Tailwind__Envelope__BodyCase)f->id;
		memcpy((char *)&env + f->offset, &body, sizeof(body));

		rc = tw__rpc_encode(&env, buf, sizeof(buf), MAXMSG, &len);
		ok(rc == 0 && len > TW_RPC_HDR_SIZE, "encode %s (%zu bytes)", f->name, len);
		rc = tw__rpc_decode(buf, len, MAXMSG, &da, &out, &hdr, NULL, 0);
		ok(rc == 0 && out, "decode %s", f->name);
		if (!out)
			continue;
		ok(hdr.magic == TW_RPC_MAGIC && hdr.major == TW_RPC_MAJOR && hdr.minor == TW_RPC_MINOR &&
		   hdr.length == len - TW_RPC_HDR_SIZE, "%s: header fields", f->name);
		ok(eq_msg(ed, &env, out, path, sizeof(path)), "%s: decoded equals original%s", f->name,
		   path);
		ok(out->base.n_unknown_fields == 0, "%s: no unknown fields", f->name);
		tw__rpc_arena_reset(&da);
	}
	is_int(kinds, 29, "29 body kinds (14 requests, 14 replies, ErrorReply)");
	tw__rpc_arena_fini(&da);
}

/* ------------------------------------------------------------------ hand-crafted protobuf bytes */

static void test_unknown_fields(void)
{
	unsigned char fence[64], env[256], msg[300];
	struct tw_rpc_arena a;
	Tailwind__Envelope *out;
	size_t fl = 0, el = 0, ml;
	char why[256];
	int rc;

	/* Fence{log_id=5, new_epoch=9, field 99 (varint) = 12345, field 100 (bytes) = "zz"} */
	fl += put_uint_field(fence + fl, 1, 5);
	fl += put_uint_field(fence + fl, 99, 12345);
	fl += put_uint_field(fence + fl, 2, 9);
	fl += put_bytes_field(fence + fl, 100, "zz", 2);
	/* Envelope{request_id=42, epoch=9, field 7 (future header, fixed64), fence=..., field 300 (fixed32)} */
	el += put_uint_field(env + el, 1, 42);
	el += put_uint_field(env + el, 2, 9);
	el += put_tag(env + el, 7, 1);
	memset(env + el, 0xab, 8);
	el += 8;
	el += put_bytes_field(env + el, 26, fence, fl);
	el += put_tag(env + el, 300, 5);
	memset(env + el, 0xcd, 4);
	el += 4;
	ml = put_frame(msg, TW_RPC_MAJOR, TW_RPC_MINOR, env, el);

	tw__rpc_arena_init(&a, NULL, 0, 0);
	rc = tw__rpc_decode(msg, ml, MAXMSG, &a, &out, NULL, why, sizeof(why));
	ok(rc == 0, "envelope with unknown fields decodes (%s)", rc ? why : "ok");
	if (rc == 0) {
		ok(out->request_id == 42 && out->epoch == 9 &&
		   out->body_case == TAILWIND__ENVELOPE__BODY_FENCE && out->fence->log_id == 5 &&
		   out->fence->new_epoch == 9, "known fields read around the unknown ones");
		is_int(out->base.n_unknown_fields, 2, "two unknown envelope fields kept aside");
		is_int(out->fence->base.n_unknown_fields, 2, "two unknown Fence fields kept aside");
		is_int(tw__rpc_validate_request(out, why, sizeof(why)), TAILWIND__STATUS__STATUS_OK,
		       "request with unknown fields is valid (ignored)");
	}
	tw__rpc_arena_reset(&a);

	/* Unknown body kind (field 200, length-delimited, as a newer minor would send). */
	el = put_uint_field(env, 1, 43);
	el += put_bytes_field(env + el, 200, (const unsigned char[]){ 1 << 3, 1, 2 << 3, 2 }, 4);
	ml = put_frame(msg, TW_RPC_MAJOR, TW_RPC_MINOR + 1, env, el);
	rc = tw__rpc_decode(msg, ml, MAXMSG, &a, &out, NULL, why, sizeof(why));
	ok(rc == 0, "envelope with an unknown body kind decodes");
	if (rc == 0) {
		ok(out->body_case == TAILWIND__ENVELOPE__BODY__NOT_SET, "no known body");
		is_int(tw__rpc_validate_request(out, why, sizeof(why)),
		       TAILWIND__STATUS__STATUS_UNSUPPORTED, "unknown body kind -> UNSUPPORTED (%s)",
		       why);
		ok(strstr(why, "200") != NULL, "message names the kind");
		is_int(tw__rpc_validate_reply(out, why, sizeof(why)),
		       TAILWIND__STATUS__STATUS_UNSUPPORTED, "unknown reply kind -> UNSUPPORTED");
	}
	tw__rpc_arena_reset(&a);

	/* Empty envelope: no body at all. */
	ml = put_frame(msg, TW_RPC_MAJOR, TW_RPC_MINOR, env, 0);
	rc = tw__rpc_decode(msg, ml, MAXMSG, &a, &out, NULL, why, sizeof(why));
	ok(rc == 0 && tw__rpc_validate_request(out, why, sizeof(why)) ==
			       TAILWIND__STATUS__STATUS_INVALID_ARGUMENT,
	   "empty envelope -> INVALID_ARGUMENT (%s)", why);
	tw__rpc_arena_fini(&a);
}

static void test_minor(void)
{
	struct tw_rpc_req r;
	unsigned char buf[256];
	struct tw_rpc_arena a;
	Tailwind__Envelope *out;
	struct tw_rpc_hdr hdr;
	size_t len;
	int rc;

	tw__rpc_req_fence(&r, 3, 4);
	r.env.request_id = 1;
	rc = tw__rpc__encode_minor(&r.env, TW_RPC_MINOR + 1, buf, sizeof(buf), MAXMSG, &len);
	ok(rc == 0, "encode with minor + 1");
	tw__rpc_arena_init(&a, NULL, 0, 0);
	rc = tw__rpc_decode(buf, len, MAXMSG, &a, &out, &hdr, NULL, 0);
	ok(rc == 0 && hdr.minor == TW_RPC_MINOR + 1 && out->fence->new_epoch == 4,
	   "frame of minor + 1 accepted and decoded");
	rc = tw__rpc__encode_minor(&r.env, 255, buf, sizeof(buf), MAXMSG, &len);
	ok(rc == 0 && tw__rpc_frame_check(buf, len, MAXMSG, &hdr, NULL, 0) == 0 && hdr.minor == 255,
	   "any minor accepted");
	tw__rpc_arena_fini(&a);
}

/* ------------------------------------------------------------------ frames */

static void test_frames(void)
{
	struct tw_rpc_req r;
	unsigned char buf[512], big[600];
	struct tw_rpc_hdr hdr;
	char why[256];
	size_t len;

	tw__rpc_req_stats(&r);
	r.env.request_id = 7;
	TAP_REQUIRE(tw__rpc_encode(&r.env, buf, sizeof(buf), MAXMSG, &len) == 0, "encode");
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), 0, "good frame");
	is_int(buf[0], 0x54, "magic byte 0 is 'T'");
	is_int(buf[1], 0x57, "magic byte 1 is 'W'");
	is_int(tw__rpc_frame_check(buf, 0, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED, "empty");
	is_int(tw__rpc_frame_check(buf, 7, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED,
	       "shorter than the header");
	is_int(tw__rpc_frame_check(buf, len - 1, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED,
	       "truncated body (%s)", why);
	buf[0] ^= 1;
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED,
	       "bad magic (%s)", why);
	buf[0] ^= 1;
	buf[2] = 2;
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), -TW_EVERSION,
	       "major 2 (%s)", why);
	buf[2] = 0;
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), -TW_EVERSION, "major 0");
	buf[2] = TW_RPC_MAJOR;
	tw_store_le32(buf + 4, 0xffffffffu);
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED,
	       "huge declared length (%s)", why);
	tw_store_le32(buf + 4, (uint32_t)(len - TW_RPC_HDR_SIZE + 1));
	is_int(tw__rpc_frame_check(buf, len, MAXMSG, &hdr, why, sizeof(why)), -TW_EMALFORMED,
	       "declared length one more than received");
	tw_store_le32(buf + 4, (uint32_t)(len - TW_RPC_HDR_SIZE));
	memset(big, 0, sizeof(big));
	memcpy(big, buf, len);
	tw_store_le32(big + 4, (uint32_t)(sizeof(big) - TW_RPC_HDR_SIZE));
	is_int(tw__rpc_frame_check(big, sizeof(big), 512, &hdr, why, sizeof(why)), -EMSGSIZE,
	       "over the max message size (%s)", why);

	/* encode refuses what does not fit */
	{
		static unsigned char payload[70000];
		static unsigned char out[80000];

		tw__rpc_req_ping(&r, 1, payload, sizeof(payload));
		r.env.request_id = 1;
		is_int(tw__rpc_encode(&r.env, out, sizeof(out), MAXMSG, &len), -EMSGSIZE,
		       "encode: larger than max_msg -> -EMSGSIZE");
		tw__rpc_req_ping(&r, 1, payload, MAXMSG - 64);
		is_int(tw__rpc_encode(&r.env, out, sizeof(out), MAXMSG, &len), 0,
		       "encode: just under max_msg fits");
		ok(len <= MAXMSG, "within the limit (%zu)", len);
		is_int(tw__rpc_encode(&r.env, out, 100, MAXMSG, &len), -EMSGSIZE, "small buffer");
	}

	/* protobuf garbage inside a good frame */
	{
		unsigned char g[64], m[80];
		struct tw_rpc_arena a;
		Tailwind__Envelope *out;
		size_t ml;

		memset(g, 0xff, sizeof(g));
		ml = put_frame(m, TW_RPC_MAJOR, TW_RPC_MINOR, g, sizeof(g));
		tw__rpc_arena_init(&a, NULL, 0, 0);
		is_int(tw__rpc_decode(m, ml, MAXMSG, &a, &out, NULL, why, sizeof(why)), -TW_EMALFORMED,
		       "undecodable envelope (%s)", why);
		tw__rpc_arena_fini(&a);
	}
}

/* ------------------------------------------------------------------ validation */

static Tailwind__Status vreq(struct tw_rpc_req *r, char *why, size_t wl)
{
	unsigned char buf[1024];
	struct tw_rpc_arena a;
	Tailwind__Envelope *out;
	Tailwind__Status st;
	size_t len;

	if (!r->env.request_id)
		r->env.request_id = 99;
	/* through the wire, so the validator sees what a server sees */
	if (tw__rpc_encode(&r->env, buf, sizeof(buf), MAXMSG, &len))
		return (Tailwind__Status)-1;
	tw__rpc_arena_init(&a, NULL, 0, 0);
	if (tw__rpc_decode(buf, len, MAXMSG, &a, &out, NULL, NULL, 0)) {
		tw__rpc_arena_fini(&a);
		return (Tailwind__Status)-2;
	}
	st = tw__rpc_validate_request(out, why, wl);
	tw__rpc_arena_fini(&a);
	return st;
}

#define INV TAILWIND__STATUS__STATUS_INVALID_ARGUMENT
#define OKS TAILWIND__STATUS__STATUS_OK
#define UNS TAILWIND__STATUS__STATUS_UNSUPPORTED

static void test_validate_requests(void)
{
	struct tw_rpc_seg_meta m = { .log_id = 1, .segment_id = 2, .checksum = 3, .offset = 100 };
	struct tw_rpc_req r;
	char why[256], name[100];
	uint64_t big = (uint64_t)TW_RPC_ID_MAX + 1;

	tw__rpc_req_handshake(&r, 7, TAILWIND__ROLE__ROLE_PRIMARY, "p0");
	is_int(vreq(&r, why, sizeof(why)), OKS, "handshake ok");
	tw__rpc_req_handshake(&r, 7, TAILWIND__ROLE__ROLE_PRIMARY, NULL);
	r.body.handshake.major = 2;
	is_int(vreq(&r, why, sizeof(why)), UNS, "handshake major 2 -> UNSUPPORTED (%s)", why);
	tw__rpc_req_handshake(&r, 0, TAILWIND__ROLE__ROLE_PRIMARY, NULL);
	is_int(vreq(&r, why, sizeof(why)), INV, "node_id 0 (%s)", why);
	tw__rpc_req_handshake(&r, 7, (Tailwind__Role)9, NULL);
	is_int(vreq(&r, why, sizeof(why)), INV, "unknown role (%s)", why);
	tw__rpc_req_handshake(&r, 7, (Tailwind__Role)-1, NULL);
	is_int(vreq(&r, why, sizeof(why)), INV, "negative role (%s)", why);
	memset(name, 'n', sizeof(name));
	name[sizeof(name) - 1] = 0;
	tw__rpc_req_handshake(&r, 7, TAILWIND__ROLE__ROLE_ADMIN, name);
	is_int(vreq(&r, why, sizeof(why)), INV, "node_name too long (%s)", why);

	tw__rpc_req_open_segment(&r, 1, &m, 0, 8 << 20);
	is_int(vreq(&r, why, sizeof(why)), OKS, "open ok");
	tw__rpc_req_open_segment(&r, 1, &m, 0, 0);
	is_int(vreq(&r, why, sizeof(why)), INV, "open length 0 (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, 0, 50);
	is_int(vreq(&r, why, sizeof(why)), INV, "open offset beyond length (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, 0, TW_RPC_LEN_MAX + 1);
	is_int(vreq(&r, why, sizeof(why)), INV, "open length too big (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, 0, 4096);
	r.body.open_segment.meta = NULL;
	is_int(vreq(&r, why, sizeof(why)), INV, "open without meta (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, big, 4096);
	is_int(vreq(&r, why, sizeof(why)), INV, "open version out of range (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, 0, 4096);
	r.meta.log_id = big;
	is_int(vreq(&r, why, sizeof(why)), INV, "open log_id out of range (%s)", why);
	tw__rpc_req_open_segment(&r, 1, &m, 0, 4096);
	r.meta.segment_id = UINT64_MAX;
	is_int(vreq(&r, why, sizeof(why)), INV, "open segment_id out of range (%s)", why);
	tw__rpc_req_open_segment(&r, big, &m, 0, 4096);
	is_int(vreq(&r, why, sizeof(why)), INV, "envelope epoch out of range (%s)", why);

	tw__rpc_req_close_segment(&r, 1, &m, 0);
	is_int(vreq(&r, why, sizeof(why)), OKS, "close ok");
	r.body.close_segment.meta = NULL;
	is_int(vreq(&r, why, sizeof(why)), INV, "close without meta (%s)", why);
	tw__rpc_req_close_segment(&r, 1, &m, 0);
	r.meta.offset = TW_RPC_LEN_MAX + 1;
	is_int(vreq(&r, why, sizeof(why)), INV, "close offset out of range (%s)", why);

	tw__rpc_req_list_segments(&r, 1, false, 0);
	is_int(vreq(&r, why, sizeof(why)), OKS, "list ok");
	tw__rpc_req_list_segments(&r, 1, true, big);
	is_int(vreq(&r, why, sizeof(why)), INV, "list from_segment_id out of range (%s)", why);

	tw__rpc_req_set_replica_version(&r, 1, 1, 2, 3);
	is_int(vreq(&r, why, sizeof(why)), OKS, "set version ok");
	tw__rpc_req_set_replica_version(&r, 1, 1, 2, big);
	is_int(vreq(&r, why, sizeof(why)), INV, "version out of range (%s)", why);

	tw__rpc_req_fence(&r, 1, 2);
	is_int(vreq(&r, why, sizeof(why)), OKS, "fence ok");
	tw__rpc_req_fence(&r, 1, 0);
	is_int(vreq(&r, why, sizeof(why)), INV, "fence new_epoch 0 (%s)", why);
	tw__rpc_req_fence(&r, 1, 2);
	r.body.fence.new_epoch = big;
	is_int(vreq(&r, why, sizeof(why)), INV, "fence new_epoch out of range (%s)", why);

	tw__rpc_req_free_segments(&r, 1, 1, 10);
	is_int(vreq(&r, why, sizeof(why)), OKS, "free ok");
	tw__rpc_req_read_segment(&r, 1, 1, big);
	is_int(vreq(&r, why, sizeof(why)), INV, "read segment_id out of range (%s)", why);
	tw__rpc_req_release_segment(&r, 1, 1, 1);
	is_int(vreq(&r, why, sizeof(why)), OKS, "release ok");
	tw__rpc_req_stats(&r);
	is_int(vreq(&r, why, sizeof(why)), OKS, "stats ok");
	tw__rpc_req_recovered_offset(&r, 1, &m, 0);
	is_int(vreq(&r, why, sizeof(why)), OKS, "recovered offset ok");
	{
		static uint8_t bytes[40];

		tw__rpc_req_recovered_offset(&r, 1, &m, 0);
		r.body.recovered_offset.repair_from = 60;
		r.body.recovered_offset.repair.data = bytes;
		r.body.recovered_offset.repair.len = sizeof(bytes);
		is_int(vreq(&r, why, sizeof(why)), OKS, "recovered offset with repair bytes up to it");
		r.body.recovered_offset.repair_from = 61;
		is_int(vreq(&r, why, sizeof(why)), INV, "repair bytes past the offset (%s)", why);
		r.body.recovered_offset.repair_from = 101;
		r.body.recovered_offset.repair.len = 0;
		is_int(vreq(&r, why, sizeof(why)), INV, "repair start past the offset (%s)", why);
	}
	tw__rpc_req_ping(&r, 1, "abc", 3);
	is_int(vreq(&r, why, sizeof(why)), OKS, "ping ok");

	/* envelope-level */
	tw__rpc_req_stats(&r);
	r.env.request_id = 0;
	{
		Tailwind__Status st;
		unsigned char buf[64];
		struct tw_rpc_arena a;
		Tailwind__Envelope *out;
		size_t len;

		tw__rpc_encode(&r.env, buf, sizeof(buf), MAXMSG, &len);
		tw__rpc_arena_init(&a, NULL, 0, 0);
		tw__rpc_decode(buf, len, MAXMSG, &a, &out, NULL, NULL, 0);
		st = tw__rpc_validate_request(out, why, sizeof(why));
		is_int(st, INV, "request_id 0 (%s)", why);
		tw__rpc_arena_fini(&a);
	}
	{
		Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT;
		Tailwind__StatsReply sr = TAILWIND__STATS_REPLY__INIT;

		env.request_id = 5;
		env.body_case = TAILWIND__ENVELOPE__BODY_STATS_REPLY;
		env.stats_reply = &sr;
		is_int(tw__rpc_validate_request(&env, why, sizeof(why)), INV,
		       "a reply kind sent as a request (%s)", why);
	}
}

static void test_validate_replies(void)
{
	Tailwind__Envelope env = TAILWIND__ENVELOPE__INIT;
	Tailwind__OpenSegmentReply o = TAILWIND__OPEN_SEGMENT_REPLY__INIT;
	Tailwind__ListSegmentsReply l = TAILWIND__LIST_SEGMENTS_REPLY__INIT;
	Tailwind__SegmentInfo si = TAILWIND__SEGMENT_INFO__INIT, *sip = &si;
	Tailwind__Rkey rk = TAILWIND__RKEY__INIT;
	Tailwind__ErrorReply er = TAILWIND__ERROR_REPLY__INIT;
	Tailwind__Ping ping = TAILWIND__PING__INIT;
	char why[256], longmsg[TW_RPC_MESSAGE_MAX + 10];
	const char *msg;

	env.request_id = 1;
	env.body_case = TAILWIND__ENVELOPE__BODY_OPEN_SEGMENT_REPLY;
	env.open_segment_reply = &o;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "OK open reply without rkey (%s)",
	       why);
	o.status = TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), OKS, "refused open reply needs no rkey");
	o.status = TAILWIND__STATUS__STATUS_OK;
	o.rkey = &rk;
	rk.len = 4096;
	rk.addr = UINT64_MAX - 10;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "rkey range wraps (%s)", why);
	rk.addr = 0x7f0000000000ull;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), OKS, "good open reply");
	o.status = (Tailwind__Status)42;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), OKS,
	       "unknown status from a newer peer accepted");
	is_int(tw__rpc_reply_status(&env, &msg), 42, "reply status read generically");
	memset(longmsg, 'x', sizeof(longmsg));
	longmsg[sizeof(longmsg) - 1] = 0;
	o.message = longmsg;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "message too long (%s)", why);
	o.message = (char *)"";

	env.body_case = TAILWIND__ENVELOPE__BODY_LIST_SEGMENTS_REPLY;
	env.list_segments_reply = &l;
	l.n_segments = 1;
	l.segments = &sip;
	si.state = TAILWIND__SEGMENT_STATE__SEGMENT_STATE_CLOSED;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), OKS, "list reply ok");
	si.state = (Tailwind__SegmentState)9;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "unknown segment state (%s)", why);
	si.state = TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN;
	si.valid_len = TW_RPC_LEN_MAX + 1;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "valid_len out of range (%s)", why);

	env.body_case = TAILWIND__ENVELOPE__BODY_ERROR_REPLY;
	env.error_reply = &er;
	er.status = TAILWIND__STATUS__STATUS_UNSUPPORTED;
	er.message = (char *)"nope";
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), OKS, "error reply ok");
	ok(tw__rpc_reply_status(&env, &msg) == TAILWIND__STATUS__STATUS_UNSUPPORTED &&
	   strcmp(msg, "nope") == 0, "error reply status and message");

	env.body_case = TAILWIND__ENVELOPE__BODY_PING;
	env.ping = &ping;
	is_int(tw__rpc_validate_reply(&env, why, sizeof(why)), INV, "a request is not a reply (%s)",
	       why);
	is_int(tw__rpc_reply_status(&env, NULL), -1, "reply_status of a request: -1");
}

/* ------------------------------------------------------------------ mapping, conversions, names */

static void test_mapping(void)
{
	static const struct {
		Tailwind__Status st;
		int err;
	} pairs[] = {
		{ TAILWIND__STATUS__STATUS_OK, 0 },
		{ TAILWIND__STATUS__STATUS_INVALID_ARGUMENT, -EINVAL },
		{ TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED, -TW_EREFUSED },
		{ TAILWIND__STATUS__STATUS_NOT_FOUND, -TW_ENOTFOUND },
		{ TAILWIND__STATUS__STATUS_FENCED, -TW_EFENCED },
		{ TAILWIND__STATUS__STATUS_STALE_VERSION, -TW_ESTALE },
		{ TAILWIND__STATUS__STATUS_CORRUPT, -TW_ECORRUPT },
		{ TAILWIND__STATUS__STATUS_UNSUPPORTED, -ENOTSUP },
		{ TAILWIND__STATUS__STATUS_ALREADY_EXISTS, -EEXIST },
		{ TAILWIND__STATUS__STATUS_INTERNAL, -TW_EREMOTE },
	};
	unsigned i;

	for (i = 0; i < TW_ARRAY_SIZE(pairs); i++) {
		is_int(tw__rpc_status_to_err(pairs[i].st), pairs[i].err, "%s -> %s",
		       tw__rpc_status_name(pairs[i].st), tw_strerror(pairs[i].err));
		is_int(tw__rpc_err_to_status(pairs[i].err), pairs[i].st, "%s -> %s",
		       tw_strerror(pairs[i].err), tw__rpc_status_name(pairs[i].st));
	}
	is_int(tw__rpc_status_to_err(1000), -TW_EREMOTE, "unknown status -> -TW_EREMOTE");
	is_int(tw__rpc_err_to_status(-TW_EVERSION), UNS, "-TW_EVERSION -> UNSUPPORTED");
	is_int(tw__rpc_err_to_status(-ENOMEM), TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED,
	       "-ENOMEM -> RESOURCE_EXHAUSTED");
	is_int(tw__rpc_err_to_status(-EIO), TAILWIND__STATUS__STATUS_INTERNAL, "-EIO -> INTERNAL");
	is_int(tw__rpc_err_to_status(TW_EFENCED), TAILWIND__STATUS__STATUS_FENCED,
	       "positive code accepted");
	ok(strcmp(tw__rpc_status_name(77), "unknown") == 0, "status name of unknown");
	ok(strcmp(tw__rpc_op_name(TW_RPC_FENCE), "fence") == 0, "op name");
	ok(strcmp(tw__rpc_body_name(TAILWIND__ENVELOPE__BODY_FENCE_REPLY), "fence_reply") == 0,
	   "body name");
	is_int(tw__rpc_op_of_case(TAILWIND__ENVELOPE__BODY_PING), TW_RPC_PING, "op of ping");
	is_int(tw__rpc_op_of_case(TAILWIND__ENVELOPE__BODY_PING_REPLY), -1, "reply is not an op");
	is_int(tw__rpc_op_of_case(44), -1, "unknown kind");
	is_int(TW_RPC_OP_REQ_CASE(TW_RPC_STATS), TAILWIND__ENVELOPE__BODY_STATS, "req case macro");
	is_int(TW_RPC_OP_REPLY_CASE(TW_RPC_STATS), TAILWIND__ENVELOPE__BODY_STATS_REPLY,
	       "reply case macro");
}

static void test_conversions(void)
{
	struct tw_rpc_seg_meta m = { 1ull << 40, 7, 0xdeadbeef, 8u << 20 }, m2;
	struct tw_rkey k = { 0x7f00001000ull, 0xabcdef0123ull, 8u << 20 }, k2;
	Tailwind__SegmentMeta pm;
	Tailwind__Rkey pk;

	tw__rpc_meta_to_pb(&m, &pm);
	tw__rpc_meta_from_pb(&pm, &m2);
	ok(m.log_id == m2.log_id && m.segment_id == m2.segment_id && m.checksum == m2.checksum &&
	   m.offset == m2.offset && pm.log_id == m.log_id && pm.base.descriptor == &tailwind__segment_meta__descriptor,
	   "SegmentMeta <-> struct");
	tw__rpc_meta_from_pb(NULL, &m2);
	ok(m2.log_id == 0 && m2.offset == 0, "NULL meta -> zeroes");
	tw__rpc_rkey_to_pb(&k, &pk);
	tw__rpc_rkey_from_pb(&pk, &k2);
	ok(memcmp(&k, &k2, sizeof(k)) == 0, "Rkey <-> struct tw_rkey");
}

/* ------------------------------------------------------------------ arena */

static void test_arena(void)
{
	struct tw_rpc_arena a;
	unsigned char block[100];
	void *p, *q;
	unsigned i;
	bool aligned = true, inside = true;

	tw__rpc_arena_init(&a, block + 1, sizeof(block) - 1, 1 << 20);
	for (i = 0; i < 5; i++) {
		p = tw__rpc_arena_alloc(&a, 7);
		aligned &= ((uintptr_t)p % 16) == 0;
		inside &= (unsigned char *)p >= block && (unsigned char *)p < block + sizeof(block);
	}
	ok(aligned, "allocations 16-byte aligned");
	ok(inside, "first allocations come from the caller's block");
	q = tw__rpc_arena_alloc(&a, 1000);
	ok(q && ((unsigned char *)q < block || (unsigned char *)q >= block + sizeof(block)),
	   "overflow goes to a chunk");
	memset(q, 1, 1000);
	p = tw__rpc_arena_alloc(&a, 2u << 20);
	ok(p == NULL, "limit enforced");
	tw__rpc_arena_reset(&a);
	p = tw__rpc_arena_alloc(&a, 16);
	ok((unsigned char *)p >= block && (unsigned char *)p < block + sizeof(block),
	   "reset rewinds to the caller's block");
	for (i = 0; i < 1000; i++)
		TAP_REQUIRE(tw__rpc_arena_alloc(&a, 900), "growth");
	ok(1, "many chunks");
	tw__rpc_arena_fini(&a);

	/* protobuf-c through the arena: amplification is bounded by the limit */
	{
		static unsigned char env[40000], msg[40100];
		Tailwind__Envelope *out;
		size_t el = 0, ml, inner = 0;
		unsigned char list[39000];

		/* ListSegmentsReply with thousands of empty SegmentInfo entries (2 bytes each) */
		while (inner + 2 <= 38000) {
			inner += put_tag(list + inner, 3, 2);
			list[inner++] = 0;
		}
		el += put_tag(env + el, 1, 0);
		el += put_varint(env + el, 5);
		el += put_tag(env + el, 23, 2);
		el += put_varint(env + el, inner);
		memcpy(env + el, list, inner);
		el += inner;
		ml = put_frame(msg, TW_RPC_MAJOR, TW_RPC_MINOR, env, el);
		tw__rpc_arena_init(&a, NULL, 0, 64 * 1024);
		is_int(tw__rpc_decode(msg, ml, MAXMSG, &a, &out, NULL, NULL, 0), -TW_EMALFORMED,
		       "decode over the arena limit fails cleanly");
		tw__rpc_arena_fini(&a);
		tw__rpc_arena_init(&a, NULL, 0, 64 * MAXMSG);
		is_int(tw__rpc_decode(msg, ml, MAXMSG, &a, &out, NULL, NULL, 0), 0,
		       "same message within the default limit");
		ok(out && out->list_segments_reply->n_segments == 19000, "19000 entries decoded");
		tw__rpc_arena_fini(&a);
	}
}

static void test_builders(void)
{
	struct tw_rpc_seg_meta m = { 9, 8, 7, 6 };
	struct tw_rpc_req r;

	tw__rpc_req_open_segment(&r, 5, &m, 4, 4096);
	ok(r.env.body_case == TAILWIND__ENVELOPE__BODY_OPEN_SEGMENT && r.env.epoch == 5 &&
	   r.env.open_segment == &r.body.open_segment && r.body.open_segment.meta == &r.meta &&
	   r.meta.log_id == 9 && r.meta.offset == 6 && r.body.open_segment.length == 4096 &&
	   r.body.open_segment.replica_version == 4, "open builder");
	tw__rpc_req_fence(&r, 3, 11);
	ok(r.env.epoch == 11 && r.body.fence.new_epoch == 11 && r.body.fence.log_id == 3,
	   "fence builder sets the envelope epoch");
	tw__rpc_req_handshake(&r, 5, TAILWIND__ROLE__ROLE_ADMIN, NULL);
	ok(r.body.handshake.major == TW_RPC_MAJOR && r.body.handshake.minor == TW_RPC_MINOR &&
	   r.body.handshake.node_name && r.body.handshake.node_name[0] == 0, "handshake builder");
	tw__rpc_req_recovered_offset(&r, 2, &m, 3);
	ok(r.body.recovered_offset.offset == 6 && r.body.recovered_offset.checksum == 7,
	   "recovered offset builder");
}

/* tw__rpc_peek_request_id: the id without decoding, equal to what the decoder sees; malformed
 * fields are refused, never read past the end. */
static void test_peek(void)
{
	static const uint64_t ids[] = { 1, 127, 128, 16383, 1ull << 35, TW_RPC_ID_MAX };
	struct tw_rpc_req r;
	unsigned char buf[512];
	size_t len;
	unsigned good = 0, refused = 0, cut_ok = 0;
	uint64_t id;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		tw__rpc_req_open_segment(&r, 3, &(struct tw_rpc_seg_meta){ 9, 2, 0, 0 }, 1, 4096);
		r.env.request_id = ids[i];
		r.env.incarnation = 0x1234567;
		TAP_REQUIRE(tw__rpc_encode(&r.env, buf, sizeof(buf), MAXMSG, &len) == 0, "encode");
		good += tw__rpc_peek_request_id(buf, len, &id) == 0 && id == ids[i];
		/* Every truncation of the body: refused, or an id the truncated prefix holds. */
		for (size_t cut = TW_RPC_HDR_SIZE; cut < len; cut++)
			cut_ok += tw__rpc_peek_request_id(buf, cut, &id) != 0 || id == 0 ||
				  id == ids[i];
		cut_ok -= (unsigned)(len - TW_RPC_HDR_SIZE);
	}
	is_int(good, sizeof(ids) / sizeof(ids[0]), "peek reads the request_id of every encoding "
	       "size (1 to 10 varint bytes)");
	is_int(cut_ok, 0, "truncated bodies: refused or a consistent id, never a read past the end");
	buf[TW_RPC_HDR_SIZE] = 0x0b; /* field 1, wire type 3 (group): not in our messages */
	refused += tw__rpc_peek_request_id(buf, len, &id) == -TW_EMALFORMED;
	buf[TW_RPC_HDR_SIZE] = 0x12; /* field 2, length-delimited, length past the end */
	buf[TW_RPC_HDR_SIZE + 1] = 0x7f;
	refused += tw__rpc_peek_request_id(buf, TW_RPC_HDR_SIZE + 3, &id) == -TW_EMALFORMED;
	is_int(refused, 2, "a group or an overlong length is refused");
	is_int(tw__rpc_peek_request_id(buf, TW_RPC_HDR_SIZE, &id), 0, "an empty body: id 0");
	is_int((long long)id, 0, "... which is 0");
}

int main(void)
{
	tw__rpc_arena_init(&fill_arena, NULL, 0, 0);
	test_roundtrip_all();
	test_unknown_fields();
	test_minor();
	test_frames();
	test_peek();
	test_validate_requests();
	test_validate_replies();
	test_mapping();
	test_conversions();
	test_arena();
	test_builders();
	tw__rpc_arena_fini(&fill_arena);
	tap_done_testing();
	return tap_exit();
}
