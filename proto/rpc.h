/*
 * proto/rpc.h — Tailwind control RPCs over fabric channels: framing, validation, message helpers,
 * an RPC client (one per channel) and an RPC server (dispatch table, many channels).
 * Wire format: docs/wire-protocol.md. Messages: proto/tailwind.proto (generated tailwind.pb-c.h).
 *
 * Threading: a client and a server are driven by the thread that drives their fab (the one calling
 * tw__fab_progress). Every function here, and every callback and handler, runs on that thread;
 * nothing is thread-safe. The blocking call (tw__rpc_call_sync) progresses the fab itself, so it
 * must not be called from inside a fab callback or an RPC callback/handler.
 *
 * Wiring (the fab's callbacks route to us; we never use tw__chan_set_user, which stays yours):
 *
 *   backup (server):                           primary / twctl (client):
 *     on_recv:  tw__rpc_server_on_recv(srv, ch, msg, len);   on_recv: tw__rpc_client_on_recv(cl, msg, len);
 *     on_lost:  tw__rpc_server_on_lost(srv, ch);             on_lost: tw__rpc_client_on_lost(cl, err);
 *               tw__chan_close(ch);                          after each tw__fab_progress:
 *                                                               tw__rpc_client_expire(cl);
 *
 * Errors: negative codes (tailwind/common.h). A reply with a non-OK status completes the call with
 * tw__rpc_status_to_err(status) (e.g. STATUS_FENCED -> -TW_EFENCED); its message is kept in
 * tw__rpc_client_errmsg().
 */
#ifndef TW_PROTO_RPC_H
#define TW_PROTO_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <tailwind/common.h>

#include "fabric/fabric.h"
#include "proto/tailwind.pb-c.h"

/* ------------------------------------------------------------------ constants and limits */

#define TW_RPC_MAGIC 0x5754u      /* "TW" as a little-endian u16: bytes 0x54 0x57 */
#define TW_RPC_MAJOR 1u
#define TW_RPC_MINOR 5u
#define TW_RPC_HDR_SIZE 8u        /* [magic u16][major u8][minor u8][length u32], LE */
#define TW_RPC_MAX_MSG_DEFAULT 65536u /* frame header included; = fabric's default max_msg_size */
#define TW_RPC_MAX_MSG_MIN 256u

#define TW_RPC_ID_MAX INT64_MAX      /* log ids, segment ids, epochs, versions: 0 .. 2^63-1 */
#define TW_RPC_LEN_MAX (1ull << 40)  /* segment lengths, offsets, rkey lengths: <= 1 TiB */
#define TW_RPC_MESSAGE_MAX 512u      /* reply message strings (bytes, NUL excluded) */
#define TW_RPC_NAME_MAX 64u          /* Handshake node_name */
#define TW_RPC_AUTH_LEN 32u          /* Handshake auth_nonce / auth_proof / auth_mac (proto/auth.h) */

/*
 * The RPC ops, one line each, X(ENUM, name, request message, reply message), the messages by
 * their protobuf-c lower-case names (tailwind__<msg>__descriptor). An op whose messages are its
 * own, request <name> and reply <name>_reply, is written TW_RPC__OWN(X, ENUM, name); the others
 * (those that share SegmentRef or StatusReply) name their messages. This one list makes the enum
 * below and, in rpc.c, the op and body names and the request/reply descriptor tables, so an op is
 * added in one place. The order is the wire's: the Envelope body field number of a request is
 * 16 + 2 * op and that of its reply 17 + 2 * op (ErrorReply is 15); append only.
 */
#define TW_RPC__OWN(X, op, name) X(op, name, name, name##_reply)
#define TW_RPC_OPS(X)                                                                       \
	TW_RPC__OWN(X, HANDSHAKE, handshake)                                                \
	TW_RPC__OWN(X, OPEN_SEGMENT, open_segment)                                          \
	TW_RPC__OWN(X, CLOSE_SEGMENT, close_segment)                                        \
	TW_RPC__OWN(X, LIST_SEGMENTS, list_segments)                                        \
	X(SET_REPLICA_VERSION, set_replica_version, set_replica_version, status_reply)      \
	TW_RPC__OWN(X, FENCE, fence)                                                        \
	TW_RPC__OWN(X, FREE_SEGMENTS, free_segments)                                        \
	X(READ_SEGMENT, read_segment, segment_ref, read_segment_reply)                      \
	X(RELEASE_SEGMENT, release_segment, segment_ref, status_reply)                      \
	TW_RPC__OWN(X, STATS, stats)                                                        \
	X(RECOVERED_OFFSET, recovered_offset, recovered_offset, status_reply)               \
	TW_RPC__OWN(X, PING, ping)                                                          \
	TW_RPC__OWN(X, SET_ACKED, set_acked)                                                \
	TW_RPC__OWN(X, READ_ENTRIES, read_entries)

/* Request kinds, dense (0..TW_RPC_OP_COUNT-1), in TW_RPC_OPS order. */
enum tw_rpc_op {
#define TW_RPC__OP_ENUM(op, name, req, reply) TW_RPC_##op,
	TW_RPC_OPS(TW_RPC__OP_ENUM)
#undef TW_RPC__OP_ENUM
	TW_RPC_OP_COUNT
};

#define TW_RPC_OP_REQ_CASE(op) ((Tailwind__Envelope__BodyCase)(16 + 2 * (int)(op)))
#define TW_RPC_OP_REPLY_CASE(op) ((Tailwind__Envelope__BodyCase)(17 + 2 * (int)(op)))

/* Name of an op / a body kind / a status for messages ("open_segment", "STATUS_FENCED", ...).
 * Static strings, never NULL ("unknown" for values we do not know). */
const char *tw__rpc_op_name(int op);
const char *tw__rpc_body_name(int body_case);
const char *tw__rpc_status_name(int status);

/* Request op of a body kind: 0..TW_RPC_OP_COUNT-1, or -1 when it is not a request we know. */
int tw__rpc_op_of_case(int body_case);

/* ------------------------------------------------------------------ configuration */

struct tw_rpc_config {
	size_t max_msg_size;   /* largest frame, header included; default 65536, min 256. Must be
				* <= the fab's max_msg_size. Larger frames are refused both ways. */
	unsigned timeout_ms;   /* client: a request without reply by then completes with
				* -ETIMEDOUT (its reply, if it comes later, is dropped); default
				* TW_DEFAULT_RPC_TIMEOUT_MS */
	unsigned max_inflight; /* client: requests in flight per channel; rounded up to a power of
				* two, 1..4096; default 64. More gives -EBUSY. */
	unsigned max_strikes;  /* server: malformed messages tolerated per channel; the next one
				* closes it; default 8 */
	size_t arena_limit;    /* bytes a single decode may allocate (protobuf-c amplifies small
				* inputs); default 64 * max_msg_size */
};

/* Fill `cfg` with the defaults above. */
void tw__rpc_config_init(struct tw_rpc_config *cfg);

/* ------------------------------------------------------------------ arena (protobuf-c allocator) */

/*
 * Bump allocator used as the ProtobufCAllocator of every unpack, so a decoded message is freed
 * at once by resetting its arena (free() of individual objects is a no-op). Starts in a
 * caller-provided block (no allocation on the hot path); grows with malloc'd chunks when that
 * block is full, up to `limit` bytes in total; reset frees the chunks. Fields are private.
 */
struct tw_rpc_arena {
	unsigned char *first; /* caller's block */
	size_t first_cap;
	unsigned char *cur;   /* current block */
	size_t cap, used;
	void *chunks;         /* overflow chunks (singly linked) */
	size_t total, limit;
	ProtobufCAllocator pb; /* pass &arena->pb to protobuf-c; allocator_data = the arena */
};

/* `buf` (may be NULL if cap == 0) is borrowed until tw__rpc_arena_fini; limit 0: unlimited. */
void tw__rpc_arena_init(struct tw_rpc_arena *a, void *buf, size_t cap, size_t limit);
/* 16-byte aligned memory valid until the next reset; NULL when the limit would be passed. */
void *tw__rpc_arena_alloc(struct tw_rpc_arena *a, size_t n);
char *tw__rpc_arena_strdup(struct tw_rpc_arena *a, const char *s);
void tw__rpc_arena_reset(struct tw_rpc_arena *a);
void tw__rpc_arena_fini(struct tw_rpc_arena *a);

/* ------------------------------------------------------------------ framing and validation
 * Pure functions (no fabric): used by the client and server, the tests and the fuzzer. */

struct tw_rpc_hdr {
	uint16_t magic;
	uint8_t major;
	uint8_t minor;
	uint32_t length; /* bytes of packed Envelope after the header */
};

/*
 * Check the frame header of a received message of `len` bytes. Returns 0 and *hdr_out, or
 *   -TW_EMALFORMED    shorter than the header, bad magic, or length != len - TW_RPC_HDR_SIZE
 *                 (not a frame: close the connection),
 *   -EMSGSIZE     len > max_msg (not a frame either),
 *   -TW_EVERSION  major != TW_RPC_MAJOR (a frame we must not decode).
 * Any minor is accepted. `why` (may be NULL) receives a message.
 */
int tw__rpc_frame_check(const void *buf, size_t len, size_t max_msg, struct tw_rpc_hdr *hdr_out,
		       char *why, size_t why_len);

/*
 * Encode `env` as a frame (header with TW_RPC_MAJOR/TW_RPC_MINOR + packed envelope) into `buf`
 * of `cap` bytes. Returns 0 and *len_out, or -EMSGSIZE when it does not fit in
 * min(cap, max_msg). `env` is borrowed for the call.
 */
int tw__rpc_encode(const Tailwind__Envelope *env, void *buf, size_t cap, size_t max_msg,
		  size_t *len_out);

/*
 * Check the frame and unpack the envelope into arena `a`. Returns 0 and *env_out (valid until
 * the arena is reset), or the tw__rpc_frame_check codes, or -TW_EMALFORMED when the protobuf bytes do
 * not decode (including arena limit reached). Does not validate field values (see below).
 */
int tw__rpc_decode(const void *buf, size_t len, size_t max_msg, struct tw_rpc_arena *a,
		  Tailwind__Envelope **env_out, struct tw_rpc_hdr *hdr_out, char *why,
		  size_t why_len);

/*
 * The Envelope's request_id (field 1) of a frame that passed tw__rpc_frame_check, read without
 * decoding the message (0 when absent); -TW_EMALFORMED when the fields do not parse. Lets a client
 * decode a reply straight into the arena of the call waiting for it.
 */
int tw__rpc_peek_request_id(const void *buf, size_t len, uint64_t *id_out);

/*
 * Validate every field of a decoded request (ids/lengths/epochs in range, enums known, required
 * sub-messages present, strings bounded, body is a request we know). Returns TAILWIND__STATUS__
 * STATUS_OK (0), STATUS_INVALID_ARGUMENT or STATUS_UNSUPPORTED (unknown body kind or version),
 * with a message in `why`.
 */
Tailwind__Status tw__rpc_validate_request(const Tailwind__Envelope *env, char *why, size_t why_len);

/* Same for a reply: status known, message bounded, fields in range, body is a reply or ErrorReply. */
Tailwind__Status tw__rpc_validate_reply(const Tailwind__Envelope *env, char *why, size_t why_len);

/* Status and message of any reply body (ErrorReply included). -1 when `env` is not a reply. */
int tw__rpc_reply_status(const Tailwind__Envelope *env, const char **message_out);

/* ------------------------------------------------------------------ conversions */

/* Segment metadata carried by every open and close (see SegmentMeta in tailwind.proto). */
struct tw_rpc_seg_meta {
	uint64_t log_id;
	uint64_t segment_id;
	uint32_t checksum; /* latest checksum entry value (0: none yet) */
	uint64_t offset;   /* valid length in bytes */
};

/* Initialise `pb` (TAILWIND__SEGMENT_META__INIT) and copy `m` in. */
void tw__rpc_meta_to_pb(const struct tw_rpc_seg_meta *m, Tailwind__SegmentMeta *pb);
/* NULL pb gives all zeroes. */
void tw__rpc_meta_from_pb(const Tailwind__SegmentMeta *pb, struct tw_rpc_seg_meta *out);
void tw__rpc_rkey_to_pb(const struct tw_rkey *k, Tailwind__Rkey *pb);
void tw__rpc_rkey_from_pb(const Tailwind__Rkey *pb, struct tw_rkey *out);

/*
 * Status <-> error code. OK <-> 0; INVALID_ARGUMENT <-> -EINVAL; RESOURCE_EXHAUSTED <->
 * -TW_EREFUSED; NOT_FOUND <-> -TW_ENOTFOUND; FENCED <-> -TW_EFENCED; STALE_VERSION <-> -TW_ESTALE;
 * CORRUPT <-> -TW_ECORRUPT; UNSUPPORTED <-> -ENOTSUP (also from -TW_EVERSION, -EOPNOTSUPP);
 * ALREADY_EXISTS <-> -EEXIST; UNAUTHENTICATED <-> -EACCES; INTERNAL <-> -TW_EREMOTE. A status we do not know -> -TW_EREMOTE;
 * an error code with no status of its own -> INTERNAL (also -TW_EMALFORMED, -EMSGSIZE, -ERANGE ->
 * INVALID_ARGUMENT; -ENOMEM, -ENOSPC -> RESOURCE_EXHAUSTED; -ENOENT -> NOT_FOUND).
 */
int tw__rpc_status_to_err(int status);
Tailwind__Status tw__rpc_err_to_status(int err);

/* ------------------------------------------------------------------ request builders
 *
 * Storage for one request, filled by a tw_rpc_req_* builder without allocation. The envelope
 * points into the struct itself: do not copy or move it after building; strings/payloads passed
 * to builders are borrowed until the request was sent (tw__rpc_call* returned). Builders set
 * env.epoch as given and leave request_id 0 (the client assigns it).
 */
struct tw_rpc_req {
	Tailwind__Envelope env;
	Tailwind__SegmentMeta meta;
	union {
		Tailwind__Handshake handshake;
		Tailwind__OpenSegment open_segment;
		Tailwind__CloseSegment close_segment;
		Tailwind__ListSegments list_segments;
		Tailwind__SetReplicaVersion set_replica_version;
		Tailwind__Fence fence;
		Tailwind__FreeSegments free_segments;
		Tailwind__SegmentRef segment_ref; /* read_segment, release_segment */
		Tailwind__Stats stats;
		Tailwind__RecoveredOffset recovered_offset;
		Tailwind__Ping ping;
		Tailwind__SetAcked set_acked;
		Tailwind__ReadEntries read_entries;
	} body;
};

void tw__rpc_req_handshake(struct tw_rpc_req *r, uint64_t node_id, Tailwind__Role role,
			  const char *node_name /* NULL ok */);
void tw__rpc_req_open_segment(struct tw_rpc_req *r, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			     uint64_t replica_version, uint64_t length);
void tw__rpc_req_close_segment(struct tw_rpc_req *r, uint64_t epoch,
			      const struct tw_rpc_seg_meta *m, uint64_t replica_version);
void tw__rpc_req_list_segments(struct tw_rpc_req *r, uint64_t log_id, bool all_logs,
			      uint64_t from_segment_id);
void tw__rpc_req_set_replica_version(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
				    uint64_t segment_id, uint64_t version);
/* Envelope epoch = new_epoch. */
void tw__rpc_req_fence(struct tw_rpc_req *r, uint64_t log_id, uint64_t new_epoch);
void tw__rpc_req_free_segments(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			      uint64_t below_segment_id);
void tw__rpc_req_read_segment(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			     uint64_t segment_id);
void tw__rpc_req_release_segment(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
				uint64_t segment_id);
void tw__rpc_req_stats(struct tw_rpc_req *r);
void tw__rpc_req_recovered_offset(struct tw_rpc_req *r, uint64_t epoch,
				 const struct tw_rpc_seg_meta *m, uint64_t replica_version);
void tw__rpc_req_ping(struct tw_rpc_req *r, uint64_t nonce, const void *payload, size_t len);
/* 1.4 (docs/readers.md). */
/* hold_ms: how long the backup may hold the answer while no reader of the log is active there
 * (SetAcked.hold_ms; 0: answer now). */
void tw__rpc_req_set_acked(struct tw_rpc_req *r, uint64_t epoch, uint64_t log_id,
			   uint64_t segment_id, uint64_t acked, uint32_t hold_ms);
void tw__rpc_req_read_entries(struct tw_rpc_req *r, uint64_t log_id, uint64_t segment_id,
			      uint64_t offset, uint32_t max_bytes, uint32_t wait_ms);

/* ------------------------------------------------------------------ client */

struct tw_rpc_client; /* one per channel; opaque */

/*
 * Completion of one call. status: 0 when the reply's status is OK; otherwise
 * tw__rpc_status_to_err(reply status), -ETIMEDOUT, -TW_EPEERLOST (channel lost), -TW_EMALFORMED
 * (reply malformed or of the wrong kind), -TW_ECLOSED (client destroyed). `reply` is the
 * decoded, validated reply envelope whenever one arrived (also with a non-OK status: read its
 * message), else NULL; borrowed until the callback returns. Runs on the fab's thread, inside
 * tw__rpc_client_on_recv/_on_lost/_expire/_destroy — so normally not inside tw__rpc_call; only if
 * tw__chan_send itself had to progress the fab (full queue) can another call's callback, or in
 * theory this one's, run before tw__rpc_call returns 0. The callback may issue new calls on any
 * client, but must not destroy this client; a call on a client being destroyed (from a callback
 * its destroy runs) is refused with -TW_EPEERLOST.
 */
typedef void (*tw_rpc_done_fn)(void *arg, int status, const Tailwind__Envelope *reply);

/*
 * Create a client for `ch` (borrowed: must outlive the client; the client never closes it).
 * cfg NULL: defaults. Allocates its tables once here. Returns 0 and *out, or -ENOMEM/-EINVAL.
 */
int tw__rpc_client_create(struct tw_chan *ch, const struct tw_rpc_config *cfg,
			 struct tw_rpc_client **out);

/* Refuse new calls, complete every pending call with -TW_ECLOSED (callbacks run), free. Does not
 * close the channel. */
void tw__rpc_client_destroy(struct tw_rpc_client *cl);

/*
 * Tear down a connection: destroy *cl, then close *ch (the channel it was created on), in that
 * order so that the pending calls complete before their channel goes. Either may be NULL; both
 * are NULL on return.
 */
void tw__rpc_client_close(struct tw_rpc_client **cl, struct tw_chan **ch);

/* Stamp `incarnation` (the owner id of docs/recovery.md) on every request this client sends
 * whose envelope does not carry one already. 0 (the default): none. */
void tw__rpc_client_set_incarnation(struct tw_rpc_client *cl, uint64_t incarnation);

/*
 * Send request `req` (body set; req->request_id is overwritten with a fresh id; req->epoch as
 * set by the caller). `req` is borrowed for the call (packed at once). Returns 0: `cb` will run
 * exactly once, later. Or a negative code and `cb` never runs: -EBUSY (max_inflight reached),
 * -EMSGSIZE, -TW_EPEERLOST (channel lost), -TW_EMALFORMED (client broken by a malformed reply
 * stream), -EINVAL (body not a request), or tw__chan_send's error.
 */
int tw__rpc_call(struct tw_rpc_client *cl, Tailwind__Envelope *req, tw_rpc_done_fn cb, void *arg);

/* Result of a blocking call: the reply lives in its own arena until tw__rpc_reply_release. */
struct tw_rpc_reply {
	const Tailwind__Envelope *env; /* decoded reply, or NULL when none arrived */
	int status;                    /* same as tw__rpc_call_sync's return value */
	struct tw_rpc_arena arena;     /* private */
	_Alignas(16) unsigned char storage[2048]; /* private: first arena block */
};

/*
 * Blocking form: send `req` and progress the fab (tw__fab_progress, other callbacks run) until
 * its reply arrives or timeout_ms passes. Returns like tw_rpc_done_fn's status. `rep` may be
 * NULL (reply discarded); otherwise it is initialised here and the caller must call
 * tw__rpc_reply_release(rep) whatever the result.
 */
int tw__rpc_call_sync(struct tw_rpc_client *cl, Tailwind__Envelope *req, struct tw_rpc_reply *rep);
void tw__rpc_reply_release(struct tw_rpc_reply *rep);

/*
 * Feed a message received on the client's channel (from the fab's on_recv; msg borrowed for the
 * call). Matches it to its request by id in O(1) and runs the callback. Replies to unknown or
 * timed-out ids are dropped. Returns 0, or -TW_EMALFORMED when the stream is broken (bad magic,
 * major or length): every pending call then completes with -TW_EMALFORMED, new calls fail, and the
 * caller should close the channel (after tw__rpc_client_destroy).
 */
int tw__rpc_client_on_recv(struct tw_rpc_client *cl, const void *msg, size_t len);

/* The channel was lost (fab on_lost): pending calls complete with -TW_EPEERLOST; new ones fail. */
void tw__rpc_client_on_lost(struct tw_rpc_client *cl, int err);

/* Complete calls past their deadline with -ETIMEDOUT. Cheap when none is due (one comparison).
 * Returns the number expired. Call after each tw__fab_progress (the fab has no timers). */
int tw__rpc_client_expire(struct tw_rpc_client *cl);

/* Milliseconds until the earliest deadline (0: overdue), or -1 when nothing is in flight:
 * a good timeout for tw__fab_progress. */
int tw__rpc_client_next_timeout_ms(const struct tw_rpc_client *cl);

unsigned tw__rpc_client_inflight(const struct tw_rpc_client *cl);
/* Minor version of the peer, from the last reply frame (-1 before any reply). */
int tw__rpc_client_peer_minor(const struct tw_rpc_client *cl);
/* Message of the last failed call ("" if none): the peer's reply message or a local reason. */
const char *tw__rpc_client_errmsg(const struct tw_rpc_client *cl);

struct tw_rpc_client_stats {
	uint64_t calls, ok, failed, timeouts;
	uint64_t late_replies; /* replies whose request had timed out, or unknown ids: dropped */
	uint64_t malformed;    /* replies that failed decoding or validation */
	uint64_t msgs_tx, msgs_rx, bytes_tx, bytes_rx; /* frames, headers included */
	uint64_t decodes;      /* replies unpacked (tw__rpc_decode): one per reply */
};
void tw__rpc_client_get_stats(const struct tw_rpc_client *cl, struct tw_rpc_client_stats *out);

/* ---- typed blocking wrappers (tw__rpc_call_sync + the conversions above) */

/* OpenSegment; on success *rkey_out is where to write. -TW_EREFUSED: backup has no room. */
int tw__rpc_open_segment(struct tw_rpc_client *cl, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			uint64_t replica_version, uint64_t length, struct tw_rkey *rkey_out);
/* The same with OpenSegment.chain_seed (1.2). seed 0 is a 1.1 open (the backup zeroes the
 * buffer). With a non-zero seed the reply must echo it: a backup that does not (protocol 1.1,
 * which would scan the replica unseeded and call every close corrupt) gives -TW_EMALFORMED with
 * the client's errmsg saying so. */
int tw__rpc_open_segment_seeded(struct tw_rpc_client *cl, uint64_t epoch,
			       const struct tw_rpc_seg_meta *m, uint64_t replica_version,
			       uint64_t length, uint32_t seed, struct tw_rkey *rkey_out);
/* CloseSegment; scanned_out (may be NULL) gets the backup's scan result (also on -TW_ECORRUPT). */
int tw__rpc_close_segment(struct tw_rpc_client *cl, uint64_t epoch, const struct tw_rpc_seg_meta *m,
			 uint64_t replica_version, struct tw_rpc_seg_meta *scanned_out);
int tw__rpc_set_replica_version(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			       uint64_t segment_id, uint64_t version);
/* epoch_out (may be NULL): the backup's epoch of the log after the call (also on -TW_EFENCED). */
/* epoch_out: the log's epoch on the backup after the call (also when FENCED); owner_out (may be
 * NULL): the incarnation owning it there. */
int tw__rpc_fence(struct tw_rpc_client *cl, uint64_t log_id, uint64_t new_epoch,
		 uint64_t *epoch_out, uint64_t *owner_out);
/* delete_log: drop the whole log (FreeSegments.delete_log); below_segment_id is then ignored. */
int tw__rpc_free_segments(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			 uint64_t below_segment_id, bool delete_log, uint64_t *freed_out);

struct tw_rpc_read_grant {
	struct tw_rkey rkey;
	struct tw_rpc_seg_meta meta; /* offset = valid length to read */
	uint64_t replica_version;
	Tailwind__SegmentState state;
	bool corrupt;
};
int tw__rpc_read_segment(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			uint64_t segment_id, struct tw_rpc_read_grant *out);
int tw__rpc_release_segment(struct tw_rpc_client *cl, uint64_t epoch, uint64_t log_id,
			   uint64_t segment_id);
int tw__rpc_recovered_offset(struct tw_rpc_client *cl, uint64_t epoch,
			    const struct tw_rpc_seg_meta *m, uint64_t replica_version);
/* The same record carrying bytes [from, from + len) of the recovered segment for a shorter copy
 * (protocol 1.3; docs/recovery.md, "Record"). `bytes` is borrowed for the call. */
int tw__rpc_recovered_repair(struct tw_rpc_client *cl, uint64_t epoch,
			     const struct tw_rpc_seg_meta *m, uint64_t replica_version,
			     uint64_t from, const void *bytes, size_t len);
int tw__rpc_ping(struct tw_rpc_client *cl, uint64_t nonce);

/* ------------------------------------------------------------------ server */

struct tw_rpc_server; /* opaque */

/*
 * One request being served, handed to a handler. Everything is borrowed until the handler
 * returns; the server then packs and sends the reply and resets its arena.
 */
struct tw__rpc_call {
	struct tw_rpc_server *srv;
	struct tw_chan *ch;            /* the requesting channel: do not close it in the handler */
	enum tw_rpc_op op;
	const Tailwind__Envelope *req; /* decoded and validated: req->request_id, req->epoch,
					* req->open_segment, ... (the member matching op) */
	uint64_t reply_epoch;          /* envelope epoch of the reply; preset to req->epoch */
	/* The reply body matching op, initialised (status OK, message ""). Fill its fields;
	 * pointers you store (strings, repeated arrays, sub-messages) must stay valid until the
	 * handler returns: use tw__rpc_call_alloc for variable-size parts. For TW_RPC_STATS the
	 * server pre-fills the rpc_* counters and handlers[]; add the backup's counters. */
	union {
		Tailwind__HandshakeReply handshake;
		Tailwind__OpenSegmentReply open_segment;
		Tailwind__CloseSegmentReply close_segment;
		Tailwind__ListSegmentsReply list_segments;
		Tailwind__StatusReply set_replica_version;
		Tailwind__FenceReply fence;
		Tailwind__FreeSegmentsReply free_segments;
		Tailwind__ReadSegmentReply read_segment;
		Tailwind__StatusReply release_segment;
		Tailwind__StatsReply stats;
		Tailwind__StatusReply recovered_offset;
		Tailwind__PingReply ping;
		Tailwind__SetAckedReply set_acked;
		Tailwind__ReadEntriesReply read_entries;
	} reply;
	/* Scratch sub-messages for the common cases (valid until the handler returns). */
	Tailwind__Rkey rkey;        /* e.g. call->reply.open_segment.rkey = &call->rkey */
	Tailwind__SegmentMeta meta; /* e.g. close_segment.scanned, read_segment.meta */
	/* The reply's message (starts empty): what tw__rpc_call_fail formats, or what the
	 * handler's own helpers write before it returns tw__rpc_call_failed(call, err). */
	char msgbuf[TW_RPC_MESSAGE_MAX + 1];
	/* private */
	bool has_msg;
	int fail_err;
	struct tw_rpc_arena *priv_arena;
};

/*
 * A handler. Runs on the fab's thread inside tw__rpc_server_on_recv. Return 0 to send the reply
 * as filled (its status field as set, OK by default), or a negative code: the reply's status
 * becomes tw__rpc_err_to_status(code) unless the handler set a non-OK status itself, with the
 * message from tw__rpc_call_fail (or tw_strerror(code)). Must not block (no disk I/O: hand that
 * to another thread) and must not call tw__rpc_server_destroy.
 */
typedef int (*tw_rpc_handler_fn)(void *arg, struct tw__rpc_call *call);

/* A handler returns this to answer later: the server sends nothing now, and the handler's owner
 * calls tw__rpc_server_answer once (a long-poll read, protocol 1.4). Until then it keeps what it
 * needs of the request (call->req is gone when the handler returns) and forgets the request
 * when its channel goes away. */
#define TW_RPC_DEFERRED 0x7def

/*
 * Answer a request whose handler returned TW_RPC_DEFERRED: `fill(arg, call)` fills call->reply
 * (the body of `op`'s reply) as a handler would and returns 0 or a negative code; call->req is
 * NULL. The reply goes to `ch` with `request_id` and envelope epoch `epoch` (fill may change
 * call->reply_epoch). Returns 0, -EINVAL (op or id), -ENOMEM. Fab thread; may be called from a
 * handler (of another request) too.
 */
int tw__rpc_server_answer(struct tw_rpc_server *srv, struct tw_chan *ch, enum tw_rpc_op op,
			  uint64_t request_id, uint64_t epoch, tw_rpc_handler_fn fill, void *arg);

/* Memory for the reply, valid until the handler returns. NULL when exhausted (return -ENOMEM). */
void *tw__rpc_call_alloc(struct tw__rpc_call *call, size_t n);

/*
 * Set the reply's status from `err` and a formatted message (truncated to TW_RPC_MESSAGE_MAX);
 * returns `err` so a handler can `return tw__rpc_call_fail(call, -TW_EFENCED, "log %llu ...", ..)`.
 */
int tw__rpc_call_fail(struct tw__rpc_call *call, int err, const char *fmt, ...) TW_PRINTF(3, 4);
/* The same with the message already in call->msgbuf (tw_strerror(err) when it is empty). */
int tw__rpc_call_failed(struct tw__rpc_call *call, int err);

/* Largest number of SegmentInfo entries a ListSegmentsReply may carry under max_msg_size
 * (worst-case encoding): fill at most that many and set more/next_* for the rest. */
size_t tw__rpc_list_max_entries(const struct tw_rpc_server *srv);

/* The largest frame the server sends or takes (its max_msg_size), header included. */
size_t tw__rpc_server_max_msg(const struct tw_rpc_server *srv);

/* Server-side hooks besides the dispatch table. */
struct tw_rpc_server_ops {
	/* Dispatch table by request kind; NULL entries: HANDSHAKE, STATS and PING are answered by
	 * the server itself (versions; rpc counters; echo), every other kind with UNSUPPORTED. */
	tw_rpc_handler_fn handlers[TW_RPC_OP_COUNT];
	/* Optional: called just before the server closes `ch` because of a protocol violation
	 * (unframeable message, too many malformed ones). Forget the channel; it is invalid after
	 * the server's tw__chan_close, which follows at once. `reason` is a negative code. */
	void (*on_close)(void *arg, struct tw_chan *ch, int reason);
	/* Handshake built-in values (used when handlers[TW_RPC_HANDSHAKE] is NULL). */
	uint64_t node_id;
	/* Optional gate, for peer authentication: called for every valid request before its
	 * handler. Return 0 to serve it. A negative code refuses it: the server replies an
	 * ErrorReply with tw__rpc_err_to_status(code) (-EACCES: UNAUTHENTICATED) and the message
	 * written into `why`. The channel stays open: closing it at once could drop the reply
	 * on some providers (sockets), so the owner closes it a little later. */
	int (*admit)(void *arg, struct tw_chan *ch, enum tw_rpc_op op, char *why, size_t why_len);
};

/*
 * Create a server. `ops` is copied; `arg` is passed to every handler and hook. cfg NULL:
 * defaults. Allocates its buffers here (arena, reply buffer). Returns 0 and *out, or -ENOMEM.
 */
int tw__rpc_server_create(const struct tw_rpc_config *cfg, const struct tw_rpc_server_ops *ops,
			 void *arg, struct tw_rpc_server **out);
void tw__rpc_server_destroy(struct tw_rpc_server *srv);

/*
 * Serve one message received on `ch` (call it from the fab's on_recv; msg borrowed for the
 * call). Decodes, validates, dispatches, sends the reply. A malformed message that still has a
 * frame gets an error reply (and a strike); an unframeable one, or strike max_strikes + 1,
 * closes `ch` (on_close hook, then tw__chan_close). Returns 0, or -TW_EMALFORMED when `ch` was
 * closed here (it is invalid now). Other channels are not affected.
 */
int tw__rpc_server_on_recv(struct tw_rpc_server *srv, struct tw_chan *ch, const void *msg,
			  size_t len);

/* Forget per-channel state (strikes). Call it from the fab's on_lost, and before closing a
 * channel yourself. */
void tw__rpc_server_on_lost(struct tw_rpc_server *srv, struct tw_chan *ch);

struct tw_rpc_server_stats {
	uint64_t calls[TW_RPC_OP_COUNT];  /* handler (or built-in) invocations per op */
	uint64_t errors[TW_RPC_OP_COUNT]; /* of which replied with status != OK */
	uint64_t msgs_rx, msgs_tx, bytes_rx, bytes_tx; /* frames, headers included */
	uint64_t malformed;   /* answered with an error before reaching a handler */
	uint64_t unsupported; /* unknown body kinds / no handler */
	uint64_t closed;      /* channels closed for protocol violations */
	uint64_t send_errors; /* replies tw__chan_send refused */
	uint64_t refused;     /* requests the admit hook refused */
	uint64_t decodes;     /* requests unpacked (tw__rpc_decode): one per request */
};
void tw__rpc_server_get_stats(const struct tw_rpc_server *srv, struct tw_rpc_server_stats *out);

#endif /* TW_PROTO_RPC_H */
