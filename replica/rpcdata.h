/*
 * replica/rpcdata.h — the RPC-replication baseline (cfg.data_path = TW_DATA_RPC): the log bytes
 * of a sealed write travel as two-sided "data" messages; the backup's CPU checks them, copies
 * them into the segment's buffer and replies. This is the RAMCloud-style baseline Tailwind is
 * compared with (docs/benchmarks.md); the one-sided path (TW_DATA_ONESIDED) is the product.
 *
 * Wire format (little-endian, not protobuf: a lean fixed header, as RAMCloud's replicate RPC),
 * on the same channel as the control RPCs, told apart by the magic (RPC frames use 0x5754):
 *
 *   request  [magic u16 = 0x4454 "TD"][version u8 = 1][kind u8 = 1][flags u8][pad 3]
 *            [data_len u32][log_id u64][segment_id u64][epoch u64][offset u64]
 *            [write_off u64][write_len u32][tag u32]  = 64 bytes, then data_len bytes
 *   reply    same 64-byte header, kind 2, data_len 0; `flags` unused; the first pad byte
 *            carries nothing; status (i32, 0 or a negative tw code) in place of write_len.
 *
 * A sealed write [write_off, write_off + write_len) longer than one message is split into
 * chunks (flags RPCDATA_LAST on the last one). The backup copies every chunk at `offset` into
 * the segment's buffer; on the last chunk it checks the whole write (every entry well formed,
 * every payload CRC, ends with exactly one checksum entry) and replies once per write.
 * Chunks of one write travel on one channel in order (FI_EP_MSG; shm RDM keeps send order).
 */
#ifndef TW_REPLICA_RPCDATA_H
#define TW_REPLICA_RPCDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RPCDATA_MAGIC 0x4454u
#define RPCDATA_VERSION 1u
#define RPCDATA_KIND_DATA 1u
#define RPCDATA_KIND_ACK 2u
#define RPCDATA_LAST 0x01u
#define RPCDATA_HDR_SIZE 64u

struct rpcdata_hdr {
	uint8_t kind;
	uint8_t flags;
	uint32_t data_len;
	uint64_t log_id, segment_id, epoch, offset, write_off;
	uint32_t write_len; /* reply: the status, as uint32 */
	uint32_t tag;
};

/* Whether `msg` starts with the data magic (then it is never an RPC frame). */
static inline bool rpcdata_is(const void *msg, size_t len)
{
	const uint8_t *m = msg;

	return len >= 2 && (m[0] | (unsigned)m[1] << 8) == RPCDATA_MAGIC;
}

/* Encode `h` into the first RPCDATA_HDR_SIZE bytes of `buf`. */
void rpcdata_encode(const struct rpcdata_hdr *h, void *buf);
/* Decode and check the header of a message of `len` bytes: 0, or -TW_EPROTO (short, bad
 * version or kind, data_len != len - header). */
int rpcdata_decode(const void *msg, size_t len, struct rpcdata_hdr *out);
/* Check a write's bytes: entries well formed, payload CRCs right, exactly one checksum entry at
 * the end. 0 or -TW_ECORRUPT. Pure. */
int rpcdata_check_write(const uint8_t *buf, size_t len);

/* Primary side (replica/primary_rpcmode.c); driver thread. */
struct tw_primary;
struct pbackup;
struct pop;
int prpc_init(struct tw_primary *p);
void prpc_fini(struct tw_primary *p);
/* Send the slot's write to replica po->rep as data messages; po->op.cb runs with the reply. */
int prpc_post(struct tw_primary *p, struct pop *po);
/* A data reply arrived from `b` (from on_recv). */
void prpc_on_reply(struct pbackup *b, const void *msg, size_t len);
/* `b` was lost: its writes waiting for a reply fail. */
void prpc_on_lost(struct pbackup *b, int err);
/* Fail the writes whose reply is overdue (op_timeout_ms) with -ETIMEDOUT, as the fabric does
 * for one-sided writes. Cheap: looks at the deadlines at most once per millisecond. */
void prpc_expire(struct tw_primary *p);

/* Backup side (replica/backup_rpcdata.c); progress thread. Returns true when `msg` was a data
 * message (handled: copied and replied, or refused with an error reply). */
struct tw_backup;
struct conn;
bool bk_data_recv(struct tw_backup *b, struct conn *c, const void *msg, size_t len);

#endif /* TW_REPLICA_RPCDATA_H */
