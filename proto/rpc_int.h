/*
 * proto/rpc_int.h — internals shared by the proto/ files (not for other modules).
 */
#ifndef TW_PROTO_RPC_INT_H
#define TW_PROTO_RPC_INT_H

#include "proto/rpc.h"

/* Worst-case packed size of one SegmentInfo inside ListSegmentsReply (tag + length + fields),
 * and of everything else in a ListSegmentsReply frame (header, envelope, status, message, paging). */
#define TW_RPC__SEGINFO_MAX 100u
#define TW_RPC__LIST_OVERHEAD (TW_RPC_HDR_SIZE + 64u + TW_RPC_MESSAGE_MAX + 64u)

/*
 * Fix the config `in` into `*cfg` first (-EINVAL, nothing allocated, when it is out of range),
 * then allocate a client's or server's memory as one zeroed block into `*out` (-ENOMEM): `head`
 * bytes (the object), `per_call` bytes for each of cfg->max_inflight calls, the `arena_first`
 * bytes of the arena's first chunk, and last the transmit buffer of cfg->max_msg_size bytes.
 * The caller carves the block in that order; one free() releases it.
 */
int tw__rpc__alloc(const struct tw_rpc_config *in, size_t head, size_t per_call,
		   size_t arena_first, struct tw_rpc_config *cfg, void **out);
const ProtobufCMessageDescriptor *tw__rpc__reply_desc(int op);
/* tw__rpc_encode with an explicit minor (tests send minor + 1). */
int tw__rpc__encode_minor(const Tailwind__Envelope *env, unsigned minor, void *buf, size_t cap,
			 size_t max_msg, size_t *len_out);

/* Set the client's errmsg (tw__rpc_client_errmsg), for the typed wrappers' own checks. */
void tw__rpc__client_seterr(struct tw_rpc_client *cl, const char *fmt, ...) TW_PRINTF(2, 3);

/* Channel operations the server uses; replaceable for the fuzzer (no fabric). */
struct tw_rpc__chan_ops {
	int (*send)(struct tw_chan *ch, const void *msg, size_t len);
	void (*close)(struct tw_chan *ch);
	const char *(*peer)(const struct tw_chan *ch);
};
void tw__rpc__server_set_chan_ops(struct tw_rpc_server *srv, const struct tw_rpc__chan_ops *ops);

#endif
