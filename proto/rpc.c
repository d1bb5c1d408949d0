/*
 * proto/rpc.c — the pure part of the RPC layer: names, configuration, the arena allocator,
 * framing, decoding, validation, status mapping, conversions. No fabric calls. See rpc.h and
 * docs/wire-protocol.md.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "proto/rpc_int.h"

/* ------------------------------------------------------------------ names and kinds */

/* Names of the ops and of their replies, and descriptors of the request and reply bodies, by op:
 * all from the one list TW_RPC_OPS in rpc.h. */
#define OP_NAME(op, name, req, reply) [TW_RPC_##op] = #name,
#define OP_REPLY_NAME(op, name, req, reply) [TW_RPC_##op] = #name "_reply",
#define OP_REPLY_DESC(op, name, req, reply) [TW_RPC_##op] = &tailwind__##reply##__descriptor,

static const char *const op_names[TW_RPC_OP_COUNT] = { TW_RPC_OPS(OP_NAME) };
static const char *const reply_names[TW_RPC_OP_COUNT] = { TW_RPC_OPS(OP_REPLY_NAME) };
static const ProtobufCMessageDescriptor *const reply_desc[TW_RPC_OP_COUNT] = {
	TW_RPC_OPS(OP_REPLY_DESC)
};

const char *tw__rpc_op_name(int op)
{
	if (op < 0 || op >= TW_RPC_OP_COUNT)
		return "unknown";
	return op_names[op];
}

int tw__rpc_op_of_case(int body_case)
{
	if (body_case < 16 || (body_case & 1) || body_case >= 16 + 2 * TW_RPC_OP_COUNT)
		return -1;
	return (body_case - 16) / 2;
}

/* Op of a reply body kind, -1 when not a reply we know (ErrorReply included). */
static int op_of_reply_case(int body_case)
{
	if (body_case < 17 || !(body_case & 1) || body_case >= 17 + 2 * TW_RPC_OP_COUNT)
		return -1;
	return (body_case - 17) / 2;
}

const char *tw__rpc_body_name(int body_case)
{
	int op;

	if (body_case == TAILWIND__ENVELOPE__BODY_ERROR_REPLY)
		return "error_reply";
	if (body_case == TAILWIND__ENVELOPE__BODY__NOT_SET)
		return "none";
	op = tw__rpc_op_of_case(body_case);
	if (op >= 0)
		return op_names[op];
	op = op_of_reply_case(body_case);
	if (op >= 0)
		return reply_names[op];
	return "unknown";
}

const char *tw__rpc_status_name(int status)
{
	switch (status) {
	case TAILWIND__STATUS__STATUS_OK: return "STATUS_OK";
	case TAILWIND__STATUS__STATUS_INVALID_ARGUMENT: return "STATUS_INVALID_ARGUMENT";
	case TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED: return "STATUS_RESOURCE_EXHAUSTED";
	case TAILWIND__STATUS__STATUS_NOT_FOUND: return "STATUS_NOT_FOUND";
	case TAILWIND__STATUS__STATUS_FENCED: return "STATUS_FENCED";
	case TAILWIND__STATUS__STATUS_STALE_VERSION: return "STATUS_STALE_VERSION";
	case TAILWIND__STATUS__STATUS_CORRUPT: return "STATUS_CORRUPT";
	case TAILWIND__STATUS__STATUS_UNSUPPORTED: return "STATUS_UNSUPPORTED";
	case TAILWIND__STATUS__STATUS_INTERNAL: return "STATUS_INTERNAL";
	case TAILWIND__STATUS__STATUS_ALREADY_EXISTS: return "STATUS_ALREADY_EXISTS";
	case TAILWIND__STATUS__STATUS_UNAUTHENTICATED: return "STATUS_UNAUTHENTICATED";
	default: return "unknown";
	}
}

const ProtobufCMessageDescriptor *tw__rpc__reply_desc(int op)
{
	return op >= 0 && op < TW_RPC_OP_COUNT ? reply_desc[op] : NULL;
}

/* ------------------------------------------------------------------ configuration */

void tw__rpc_config_init(struct tw_rpc_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_msg_size = TW_RPC_MAX_MSG_DEFAULT;
	cfg->timeout_ms = TW_DEFAULT_RPC_TIMEOUT_MS;
	cfg->max_inflight = 64;
	cfg->max_strikes = 8;
	cfg->arena_limit = 64 * (size_t)TW_RPC_MAX_MSG_DEFAULT;
}

static int config_fix(const struct tw_rpc_config *in, struct tw_rpc_config *out)
{
	struct tw_rpc_config def;
	unsigned n;

	tw__rpc_config_init(&def);
	*out = in ? *in : def;
	if (!out->max_msg_size)
		out->max_msg_size = def.max_msg_size;
	if (out->max_msg_size < TW_RPC_MAX_MSG_MIN || out->max_msg_size > UINT32_MAX)
		return -EINVAL;
	if (!out->timeout_ms)
		out->timeout_ms = def.timeout_ms;
	if (!out->max_inflight)
		out->max_inflight = def.max_inflight;
	if (out->max_inflight > 4096)
		return -EINVAL;
	for (n = 1; n < out->max_inflight; n <<= 1)
		;
	out->max_inflight = n;
	if (!out->max_strikes)
		out->max_strikes = def.max_strikes;
	if (!out->arena_limit)
		out->arena_limit = 64 * out->max_msg_size;
	return 0;
}

int tw__rpc__alloc(const struct tw_rpc_config *in, size_t head, size_t per_call,
		   size_t arena_first, struct tw_rpc_config *cfg, void **out)
{
	int rc = config_fix(in, cfg);

	if (rc)
		return rc;
	*out = calloc(1, head + per_call * cfg->max_inflight + arena_first + cfg->max_msg_size);
	return *out ? 0 : -ENOMEM;
}

/* ------------------------------------------------------------------ arena */

struct chunk {
	union {
		struct {
			struct chunk *next;
			size_t cap;
		} h;
		max_align_t align;
	} u;
};

#define ARENA_ALIGN 16u
#define ARENA_CHUNK_MIN 8192u

static void *arena_pb_alloc(void *data, size_t size)
{
	return tw__rpc_arena_alloc(data, size);
}

static void arena_pb_free(void *data, void *ptr)
{
	(void)data;
	(void)ptr; /* freed all at once by tw__rpc_arena_reset */
}

void tw__rpc_arena_init(struct tw_rpc_arena *a, void *buf, size_t cap, size_t limit)
{
	uintptr_t p = (uintptr_t)buf;
	size_t skip = buf ? (ARENA_ALIGN - (p % ARENA_ALIGN)) % ARENA_ALIGN : 0;

	memset(a, 0, sizeof(*a));
	if (buf && cap > skip) {
		a->first = (unsigned char *)buf + skip;
		a->first_cap = cap - skip;
	}
	a->cur = a->first;
	a->cap = a->first_cap;
	a->limit = limit ? limit : SIZE_MAX;
	a->pb.alloc = arena_pb_alloc;
	a->pb.free = arena_pb_free;
	a->pb.allocator_data = a;
}

void *tw__rpc_arena_alloc(struct tw_rpc_arena *a, size_t n)
{
	struct chunk *c;
	size_t csize;
	void *p;

	if (n == 0)
		n = 1;
	if (n > SIZE_MAX / 2)
		return NULL;
	n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	if (n > a->limit - a->total)
		return NULL;
	if (a->cur && a->cap - a->used >= n) {
		p = a->cur + a->used;
		a->used += n;
		a->total += n;
		return p;
	}
	csize = TW_MAX((size_t)ARENA_CHUNK_MIN, n);
	if (a->chunks) {
		size_t prev = ((struct chunk *)a->chunks)->u.h.cap;
		if (prev < (1u << 20))
			csize = TW_MAX(csize, prev * 2);
	}
	c = malloc(sizeof(*c) + csize);
	if (!c)
		return NULL;
	c->u.h.cap = csize;
	c->u.h.next = a->chunks;
	a->chunks = c;
	a->cur = (unsigned char *)(c + 1);
	a->cap = csize;
	a->used = n;
	a->total += n;
	return a->cur;
}

char *tw__rpc_arena_strdup(struct tw_rpc_arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = tw__rpc_arena_alloc(a, n);

	if (d)
		memcpy(d, s, n);
	return d;
}

void tw__rpc_arena_reset(struct tw_rpc_arena *a)
{
	struct chunk *c = a->chunks, *next;

	for (; c; c = next) {
		next = c->u.h.next;
		free(c);
	}
	a->chunks = NULL;
	a->cur = a->first;
	a->cap = a->first_cap;
	a->used = 0;
	a->total = 0;
}

void tw__rpc_arena_fini(struct tw_rpc_arena *a)
{
	tw__rpc_arena_reset(a);
	a->first = a->cur = NULL;
	a->first_cap = a->cap = 0;
}

/* ------------------------------------------------------------------ framing */

/* Write the message into `why` (when the caller gave room) and return `rc`: an errno code in
 * framing, a Tailwind__Status in validation. */
static int why_set(char *why, size_t why_len, int rc, const char *fmt, ...) TW_PRINTF(4, 5);

static int why_set(char *why, size_t why_len, int rc, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

int tw__rpc_frame_check(const void *buf, size_t len, size_t max_msg, struct tw_rpc_hdr *hdr_out,
		       char *why, size_t why_len)
{
	const unsigned char *b = buf;
	struct tw_rpc_hdr h;

	if (len < TW_RPC_HDR_SIZE)
		return why_set(why, why_len, -TW_EMALFORMED, "message of %zu bytes is shorter than the "
			       "%u-byte frame header", len, TW_RPC_HDR_SIZE);
	if (len > max_msg)
		return why_set(why, why_len, -EMSGSIZE, "message of %zu bytes exceeds the %zu-byte "
			       "limit", len, max_msg);
	h.magic = tw_load_le16(b);
	h.major = b[2];
	h.minor = b[3];
	h.length = tw_load_le32(b + 4);
	if (h.magic != TW_RPC_MAGIC)
		return why_set(why, why_len, -TW_EMALFORMED, "bad magic 0x%04x", h.magic);
	if (h.major != TW_RPC_MAJOR) {
		if (hdr_out)
			*hdr_out = h;
		return why_set(why, why_len, -TW_EVERSION, "protocol major %u not supported (this "
			       "peer speaks %u.%u)", h.major, TW_RPC_MAJOR, TW_RPC_MINOR);
	}
	if ((size_t)h.length != len - TW_RPC_HDR_SIZE)
		return why_set(why, why_len, -TW_EMALFORMED, "frame declares %u bytes of body, %zu "
			       "received", h.length, len - TW_RPC_HDR_SIZE);
	if (hdr_out)
		*hdr_out = h;
	return 0;
}

int tw__rpc__encode_minor(const Tailwind__Envelope *env, unsigned minor, void *buf, size_t cap,
			 size_t max_msg, size_t *len_out)
{
	unsigned char *b = buf;
	size_t body = tailwind__envelope__get_packed_size(env);
	size_t lim = TW_MIN(cap, max_msg);

	if (lim < TW_RPC_HDR_SIZE || body > lim - TW_RPC_HDR_SIZE)
		return -EMSGSIZE;
	tw_store_le16(b, TW_RPC_MAGIC);
	b[2] = TW_RPC_MAJOR;
	b[3] = (unsigned char)minor;
	tw_store_le32(b + 4, (uint32_t)body);
	if (tailwind__envelope__pack(env, b + TW_RPC_HDR_SIZE) != body)
		return -TW_EMALFORMED;
	*len_out = TW_RPC_HDR_SIZE + body;
	return 0;
}

int tw__rpc_encode(const Tailwind__Envelope *env, void *buf, size_t cap, size_t max_msg,
		  size_t *len_out)
{
	return tw__rpc__encode_minor(env, TW_RPC_MINOR, buf, cap, max_msg, len_out);
}

/*
 * protobuf-c 1.4.1 accepts a field number 0 written as an overlong varint tag (0x80 0x00) and
 * keeps it as an unknown field, which it then re-encodes as a tag it rejects itself (found by
 * fuzz_proto). Field number 0 is invalid protobuf: refuse such messages, at every depth.
 */
static bool tags_ok(const ProtobufCMessage *m, int depth)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	unsigned i;
	size_t j;

	if (depth > 8)
		return false;
	for (i = 0; i < m->n_unknown_fields; i++)
		if (m->unknown_fields[i].tag == 0)
			return false;
	for (i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)m;

		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			uint32_t c;

			memcpy(&c, base + f->quantifier_offset, sizeof(c));
			if (c != f->id)
				continue;
		}
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n;
			ProtobufCMessage *const *arr;

			memcpy(&n, base + f->quantifier_offset, sizeof(n));
			memcpy(&arr, base + f->offset, sizeof(arr));
			for (j = 0; j < n; j++)
				if (arr[j] && !tags_ok(arr[j], depth + 1))
					return false;
		} else {
			const ProtobufCMessage *sub;

			memcpy(&sub, base + f->offset, sizeof(sub));
			if (sub && !tags_ok(sub, depth + 1))
				return false;
		}
	}
	return true;
}

int tw__rpc_decode(const void *buf, size_t len, size_t max_msg, struct tw_rpc_arena *a,
		  Tailwind__Envelope **env_out, struct tw_rpc_hdr *hdr_out, char *why,
		  size_t why_len)
{
	struct tw_rpc_hdr h;
	Tailwind__Envelope *env;
	int rc;

	rc = tw__rpc_frame_check(buf, len, max_msg, &h, why, why_len);
	if (rc)
		return rc;
	if (hdr_out)
		*hdr_out = h;
	env = tailwind__envelope__unpack(&a->pb, h.length,
					 (const uint8_t *)buf + TW_RPC_HDR_SIZE);
	if (!env)
		return why_set(why, why_len, -TW_EMALFORMED, "envelope of %u bytes does not decode",
			       h.length);
	if (!tags_ok(&env->base, 0))
		return why_set(why, why_len, -TW_EMALFORMED, "envelope contains field number 0");
	*env_out = env;
	return 0;
}

/* A protobuf varint at *p (bounded by end); false when truncated or longer than 10 bytes. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned shift = 0; shift < 70 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;

		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return true;
		}
	}
	return false;
}

int tw__rpc_peek_request_id(const void *buf, size_t len, uint64_t *id_out)
{
	const uint8_t *p = (const uint8_t *)buf + TW_RPC_HDR_SIZE, *end = (const uint8_t *)buf + len;
	uint64_t id = 0, tag, v;

	if (len < TW_RPC_HDR_SIZE)
		return -TW_EMALFORMED;
	while (p < end) {
		if (!get_varint(&p, end, &tag))
			return -TW_EMALFORMED;
		switch (tag & 7) {
		case 0:
			if (!get_varint(&p, end, &v))
				return -TW_EMALFORMED;
			if (tag >> 3 == 1)
				id = v; /* the last occurrence wins, as in the full decoder */
			break;
		case 1: /* 64-bit, 32-bit and length-delimited fields: skipped */
		case 5:
		case 2:
			v = (tag & 7) == 1 ? 8 : 4;
			if ((tag & 7) == 2 && !get_varint(&p, end, &v))
				return -TW_EMALFORMED;
			if (v > (uint64_t)(end - p))
				return -TW_EMALFORMED;
			p += v;
			break;
		default:
			return -TW_EMALFORMED;
		}
	}
	*id_out = id;
	return 0;
}

/* ------------------------------------------------------------------ validation */

#define INVALID TAILWIND__STATUS__STATUS_INVALID_ARGUMENT
#define UNSUPPORTED TAILWIND__STATUS__STATUS_UNSUPPORTED

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond))                                                \
			return why_set(why, why_len, INVALID, __VA_ARGS__); \
	} while (0)

#define ULL(x) ((unsigned long long)(x))
#define CHECK_ID(v, name) CHECK((v) <= (uint64_t)TW_RPC_ID_MAX, "%s %llu out of range", name, ULL(v))
#define CHECK_LEN(v, name) CHECK((v) <= TW_RPC_LEN_MAX, "%s %llu out of range", name, ULL(v))

static bool str_ok(const char *s, size_t max)
{
	return s && strnlen(s, max + 1) <= max;
}

#define SUB(expr)                                                  \
	do {                                                       \
		Tailwind__Status s_ = (expr);                      \
		if (s_ != TAILWIND__STATUS__STATUS_OK)             \
			return s_;                                 \
	} while (0)

/* A log and a segment id of it that a request names (seg_name: the segment field's name). */
static Tailwind__Status check_ref(uint64_t log_id, uint64_t seg_id, const char *seg_name,
				  char *why, size_t why_len)
{
	CHECK_ID(log_id, "log_id");
	CHECK_ID(seg_id, seg_name);
	return TAILWIND__STATUS__STATUS_OK;
}

static Tailwind__Status check_meta(const Tailwind__SegmentMeta *m, char *why, size_t why_len)
{
	CHECK(m, "segment metadata missing");
	SUB(check_ref(m->log_id, m->segment_id, "segment_id", why, why_len));
	CHECK_LEN(m->offset, "offset");
	return TAILWIND__STATUS__STATUS_OK;
}

static Tailwind__Status check_rkey(const Tailwind__Rkey *k, char *why, size_t why_len)
{
	CHECK(k, "rkey missing");
	CHECK_LEN(k->len, "rkey length");
	CHECK(k->addr <= UINT64_MAX - k->len, "rkey range wraps");
	return TAILWIND__STATUS__STATUS_OK;
}

/* Field number of the first unknown field that could be a body kind, 0 if none. */
static uint32_t unknown_body_tag(const Tailwind__Envelope *env)
{
	unsigned i;

	for (i = 0; i < env->base.n_unknown_fields; i++)
		if (env->base.unknown_fields[i].tag >= 15)
			return env->base.unknown_fields[i].tag;
	return 0;
}

/* An envelope carries a body: else it is a newer peer's kind (unsupported) or nothing (invalid). */
static Tailwind__Status check_body_set(const Tailwind__Envelope *env, char *why, size_t why_len)
{
	uint32_t tag;

	if (env->body_case != TAILWIND__ENVELOPE__BODY__NOT_SET)
		return TAILWIND__STATUS__STATUS_OK;
	tag = unknown_body_tag(env);
	if (tag)
		return why_set(why, why_len, UNSUPPORTED, "unknown body kind %u", tag);
	return why_set(why, why_len, INVALID, "envelope has no body");
}

Tailwind__Status tw__rpc_validate_request(const Tailwind__Envelope *env, char *why, size_t why_len)
{
	int op;

	SUB(check_body_set(env, why, why_len));
	op = tw__rpc_op_of_case(env->body_case);
	if (op < 0)
		return why_set(why, why_len, INVALID, "body %s (%d) is not a request",
			       tw__rpc_body_name(env->body_case), env->body_case);
	CHECK(env->request_id != 0, "request_id 0 in a request");
	CHECK_ID(env->epoch, "epoch");
	CHECK_ID(env->incarnation, "incarnation");

	switch (op) {
	case TW_RPC_HANDSHAKE: {
		const Tailwind__Handshake *m = env->handshake;

		if (m->major != TW_RPC_MAJOR)
			return why_set(why, why_len, UNSUPPORTED,
				       "protocol major %u not supported (this peer speaks %u.%u)",
				       m->major, TW_RPC_MAJOR, TW_RPC_MINOR);
		CHECK(m->minor <= 255, "minor %u out of range", m->minor);
		CHECK(m->node_id != 0, "node_id 0");
		CHECK(m->role >= TAILWIND__ROLE__ROLE_UNSPECIFIED &&
		      m->role <= TAILWIND__ROLE__ROLE_READER, "unknown role %d", (int)m->role);
		CHECK(str_ok(m->node_name, TW_RPC_NAME_MAX), "node_name longer than %u bytes",
		      TW_RPC_NAME_MAX);
		CHECK(m->auth_nonce.len == 0 || m->auth_nonce.len == TW_RPC_AUTH_LEN,
		      "auth_nonce of %zu bytes (must be %u)", m->auth_nonce.len, TW_RPC_AUTH_LEN);
		CHECK(m->auth_proof.len == 0 || m->auth_proof.len == TW_RPC_AUTH_LEN,
		      "auth_proof of %zu bytes (must be %u)", m->auth_proof.len, TW_RPC_AUTH_LEN);
		CHECK(m->auth_nonce.len == 0 || m->auth_proof.len == 0,
		      "auth_nonce and auth_proof in one handshake");
		break;
	}
	case TW_RPC_OPEN_SEGMENT: {
		const Tailwind__OpenSegment *m = env->open_segment;

		SUB(check_meta(m->meta, why, why_len));
		CHECK_ID(m->replica_version, "replica_version");
		CHECK(m->length > 0, "length 0");
		CHECK_LEN(m->length, "length");
		CHECK(m->meta->offset <= m->length, "offset %llu beyond length %llu",
		      ULL(m->meta->offset), ULL(m->length));
		break;
	}
	case TW_RPC_CLOSE_SEGMENT: {
		const Tailwind__CloseSegment *m = env->close_segment;

		SUB(check_meta(m->meta, why, why_len));
		CHECK_ID(m->replica_version, "replica_version");
		break;
	}
	case TW_RPC_LIST_SEGMENTS:
		return check_ref(env->list_segments->log_id, env->list_segments->from_segment_id,
				 "from_segment_id", why, why_len);
	case TW_RPC_SET_REPLICA_VERSION: {
		const Tailwind__SetReplicaVersion *m = env->set_replica_version;

		SUB(check_ref(m->log_id, m->segment_id, "segment_id", why, why_len));
		CHECK_ID(m->version, "version");
		break;
	}
	case TW_RPC_FENCE: {
		const Tailwind__Fence *m = env->fence;

		CHECK_ID(m->log_id, "log_id");
		CHECK(m->new_epoch > 0, "new_epoch 0");
		CHECK_ID(m->new_epoch, "new_epoch");
		break;
	}
	case TW_RPC_FREE_SEGMENTS:
		return check_ref(env->free_segments->log_id, env->free_segments->below_segment_id,
				 "below_segment_id", why, why_len);
	case TW_RPC_READ_SEGMENT:
		return check_ref(env->read_segment->log_id, env->read_segment->segment_id,
				 "segment_id", why, why_len);
	case TW_RPC_RELEASE_SEGMENT:
		return check_ref(env->release_segment->log_id, env->release_segment->segment_id,
				 "segment_id", why, why_len);
	case TW_RPC_STATS:
		break;
	case TW_RPC_RECOVERED_OFFSET: {
		const Tailwind__RecoveredOffset *m = env->recovered_offset;

		SUB(check_ref(m->log_id, m->segment_id, "segment_id", why, why_len));
		CHECK_LEN(m->offset, "offset");
		CHECK_ID(m->replica_version, "replica_version");
		CHECK(m->repair.len == 0 || m->repair.data, "bad repair bytes");
		CHECK(m->repair_from <= m->offset && m->repair.len <= m->offset - m->repair_from,
		      "repair bytes past the recovered offset");
		break;
	}
	case TW_RPC_PING:
		CHECK(env->ping->payload.len == 0 || env->ping->payload.data, "bad payload");
		break;
	case TW_RPC_SET_ACKED:
		SUB(check_ref(env->set_acked->log_id, env->set_acked->segment_id, "segment_id", why,
			      why_len));
		CHECK_LEN(env->set_acked->acked, "acked");
		break;
	case TW_RPC_READ_ENTRIES:
		SUB(check_ref(env->read_entries->log_id, env->read_entries->segment_id,
			      "segment_id", why, why_len));
		CHECK_LEN(env->read_entries->offset, "offset");
		break;
	default:
		return why_set(why, why_len, UNSUPPORTED, "unknown request kind %d",
			       env->body_case);
	}
	return TAILWIND__STATUS__STATUS_OK;
}

static bool state_known(int s)
{
	return s >= TAILWIND__SEGMENT_STATE__SEGMENT_STATE_UNSPECIFIED &&
	       s <= TAILWIND__SEGMENT_STATE__SEGMENT_STATE_LOST;
}

static Tailwind__Status check_seginfo(const Tailwind__SegmentInfo *s, char *why, size_t why_len)
{
	CHECK(s, "segment info missing");
	CHECK_ID(s->log_id, "log_id");
	CHECK_ID(s->segment_id, "segment_id");
	CHECK(state_known(s->state), "unknown segment state %d", (int)s->state);
	CHECK_LEN(s->valid_len, "valid_len");
	CHECK_LEN(s->length, "length");
	CHECK_ID(s->replica_version, "replica_version");
	CHECK_ID(s->epoch, "epoch");
	CHECK_LEN(s->entries, "entries");
	return TAILWIND__STATUS__STATUS_OK;
}

static const ProtobufCMessage *env_body(const Tailwind__Envelope *env)
{
	/* Every member of the oneof is a pointer to a message; they share storage. */
	return (const ProtobufCMessage *)env->handshake;
}

int tw__rpc_reply_status(const Tailwind__Envelope *env, const char **message_out)
{
	const ProtobufCMessage *body;
	const ProtobufCFieldDescriptor *fs, *fm;
	int status;

	if (env->body_case != TAILWIND__ENVELOPE__BODY_ERROR_REPLY &&
	    op_of_reply_case(env->body_case) < 0)
		return -1;
	body = env_body(env);
	if (!body)
		return -1;
	fs = protobuf_c_message_descriptor_get_field(body->descriptor, 1);
	fm = protobuf_c_message_descriptor_get_field(body->descriptor, 2);
	if (!fs || !fm || fs->type != PROTOBUF_C_TYPE_ENUM || fm->type != PROTOBUF_C_TYPE_STRING)
		return -1;
	memcpy(&status, (const char *)body + fs->offset, sizeof(status));
	if (message_out) {
		const char *msg;

		memcpy(&msg, (const char *)body + fm->offset, sizeof(msg));
		*message_out = msg ? msg : "";
	}
	return status;
}

Tailwind__Status tw__rpc_validate_reply(const Tailwind__Envelope *env, char *why, size_t why_len)
{
	const char *msg = NULL;
	int status, op;
	size_t i;

	SUB(check_body_set(env, why, why_len));
	status = tw__rpc_reply_status(env, &msg);
	if (status < 0)
		return why_set(why, why_len, INVALID, "body %s (%d) is not a reply",
			       tw__rpc_body_name(env->body_case), env->body_case);
	/* Unknown statuses from a newer minor are allowed: they map to -TW_EREMOTE. */
	CHECK(str_ok(msg, TW_RPC_MESSAGE_MAX), "reply message longer than %u bytes",
	      TW_RPC_MESSAGE_MAX);
	CHECK_ID(env->epoch, "epoch");
	if (env->body_case == TAILWIND__ENVELOPE__BODY_ERROR_REPLY)
		return TAILWIND__STATUS__STATUS_OK;
	op = op_of_reply_case(env->body_case);
	switch (op) {
	case TW_RPC_HANDSHAKE: {
		const Tailwind__HandshakeReply *m = env->handshake_reply;

		CHECK(m->minor <= 255 && m->major <= 255, "version out of range");
		CHECK(str_ok(m->node_name, TW_RPC_NAME_MAX), "node_name too long");
		CHECK_LEN(m->buffer_size, "buffer_size");
		CHECK(m->auth_nonce.len == 0 || m->auth_nonce.len == TW_RPC_AUTH_LEN,
		      "auth_nonce of %zu bytes (must be %u)", m->auth_nonce.len, TW_RPC_AUTH_LEN);
		CHECK(m->auth_mac.len == 0 || m->auth_mac.len == TW_RPC_AUTH_LEN,
		      "auth_mac of %zu bytes (must be %u)", m->auth_mac.len, TW_RPC_AUTH_LEN);
		break;
	}
	case TW_RPC_OPEN_SEGMENT:
		if (status == TAILWIND__STATUS__STATUS_OK)
			SUB(check_rkey(env->open_segment_reply->rkey, why, why_len));
		break;
	case TW_RPC_CLOSE_SEGMENT:
		if (env->close_segment_reply->scanned)
			SUB(check_meta(env->close_segment_reply->scanned, why, why_len));
		break;
	case TW_RPC_LIST_SEGMENTS: {
		const Tailwind__ListSegmentsReply *m = env->list_segments_reply;

		for (i = 0; i < m->n_segments; i++)
			SUB(check_seginfo(m->segments[i], why, why_len));
		CHECK_ID(m->next_log_id, "next_log_id");
		CHECK_ID(m->next_segment_id, "next_segment_id");
		break;
	}
	case TW_RPC_FENCE:
		CHECK_ID(env->fence_reply->epoch, "epoch");
		break;
	case TW_RPC_FREE_SEGMENTS:
		break;
	case TW_RPC_READ_SEGMENT: {
		const Tailwind__ReadSegmentReply *m = env->read_segment_reply;

		if (status == TAILWIND__STATUS__STATUS_OK) {
			SUB(check_rkey(m->rkey, why, why_len));
			SUB(check_meta(m->meta, why, why_len));
			CHECK(m->meta->offset <= m->rkey->len, "valid length %llu beyond the grant "
			      "(%llu bytes)", ULL(m->meta->offset), ULL(m->rkey->len));
		}
		CHECK_ID(m->replica_version, "replica_version");
		CHECK(state_known(m->state), "unknown segment state %d", (int)m->state);
		break;
	}
	case TW_RPC_READ_ENTRIES: {
		const Tailwind__ReadEntriesReply *m = env->read_entries_reply;

		CHECK(m->data.len == 0 || m->data.data, "bad data bytes");
		CHECK_LEN(m->readable, "readable");
		CHECK_ID(m->next_segment_id, "next_segment_id");
		CHECK_ID(m->free_below, "free_below");
		CHECK_ID(m->log_epoch, "log_epoch");
		CHECK(state_known(m->state), "unknown segment state %d", (int)m->state);
		break;
	}
	case TW_RPC_STATS: {
		const Tailwind__StatsReply *m = env->stats_reply;

		CHECK(m->n_handlers <= 4096, "too many handler counters");
		for (i = 0; i < m->n_handlers; i++)
			CHECK(m->handlers[i], "handler counter missing");
		break;
	}
	default:
		break;
	}
	return TAILWIND__STATUS__STATUS_OK;
}

/* ------------------------------------------------------------------ status mapping, conversions */

int tw__rpc_status_to_err(int status)
{
	switch (status) {
	case TAILWIND__STATUS__STATUS_OK: return 0;
	case TAILWIND__STATUS__STATUS_INVALID_ARGUMENT: return -EINVAL;
	case TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED: return -TW_EREFUSED;
	case TAILWIND__STATUS__STATUS_NOT_FOUND: return -TW_ENOTFOUND;
	case TAILWIND__STATUS__STATUS_FENCED: return -TW_EFENCED;
	case TAILWIND__STATUS__STATUS_STALE_VERSION: return -TW_ESTALE;
	case TAILWIND__STATUS__STATUS_CORRUPT: return -TW_ECORRUPT;
	case TAILWIND__STATUS__STATUS_UNSUPPORTED: return -ENOTSUP;
	case TAILWIND__STATUS__STATUS_ALREADY_EXISTS: return -EEXIST;
	case TAILWIND__STATUS__STATUS_UNAUTHENTICATED: return -EACCES;
	case TAILWIND__STATUS__STATUS_INTERNAL:
	default: return -TW_EREMOTE;
	}
}

Tailwind__Status tw__rpc_err_to_status(int err)
{
	if (err > 0)
		err = -err;
	switch (err) {
	case 0: return TAILWIND__STATUS__STATUS_OK;
	case -EINVAL:
	case -TW_EMALFORMED:
	case -EMSGSIZE:
	case -ERANGE:
		return TAILWIND__STATUS__STATUS_INVALID_ARGUMENT;
	case -TW_EREFUSED:
	case -ENOMEM:
	case -ENOSPC:
	case -TW_EFULL:
		return TAILWIND__STATUS__STATUS_RESOURCE_EXHAUSTED;
	case -TW_ENOTFOUND:
	case -ENOENT:
		return TAILWIND__STATUS__STATUS_NOT_FOUND;
	case -TW_EFENCED: return TAILWIND__STATUS__STATUS_FENCED;
	case -TW_ESTALE: return TAILWIND__STATUS__STATUS_STALE_VERSION;
	case -TW_ECORRUPT: return TAILWIND__STATUS__STATUS_CORRUPT;
	case -ENOTSUP:
	case -TW_EVERSION:
		return TAILWIND__STATUS__STATUS_UNSUPPORTED;
	case -EEXIST: return TAILWIND__STATUS__STATUS_ALREADY_EXISTS;
	case -EACCES: return TAILWIND__STATUS__STATUS_UNAUTHENTICATED;
	default: return TAILWIND__STATUS__STATUS_INTERNAL;
	}
}

/* Each conversion is one compound literal, so a field left out is zero rather than stale. */
void tw__rpc_meta_to_pb(const struct tw_rpc_seg_meta *m, Tailwind__SegmentMeta *pb)
{
	*pb = (Tailwind__SegmentMeta){
		.base = PROTOBUF_C_MESSAGE_INIT(&tailwind__segment_meta__descriptor),
		.log_id = m->log_id, .segment_id = m->segment_id,
		.checksum = m->checksum, .offset = m->offset,
	};
}

void tw__rpc_meta_from_pb(const Tailwind__SegmentMeta *pb, struct tw_rpc_seg_meta *out)
{
	*out = pb ? (struct tw_rpc_seg_meta){ .log_id = pb->log_id, .segment_id = pb->segment_id,
					      .checksum = pb->checksum, .offset = pb->offset }
		  : (struct tw_rpc_seg_meta){ 0 };
}

void tw__rpc_rkey_to_pb(const struct tw_rkey *k, Tailwind__Rkey *pb)
{
	*pb = (Tailwind__Rkey){
		.base = PROTOBUF_C_MESSAGE_INIT(&tailwind__rkey__descriptor),
		.addr = k->addr, .key = k->key, .len = k->len,
	};
}

void tw__rpc_rkey_from_pb(const Tailwind__Rkey *pb, struct tw_rkey *out)
{
	*out = pb ? (struct tw_rkey){ .addr = pb->addr, .key = pb->key, .len = pb->len }
		  : (struct tw_rkey){ 0 };
}
