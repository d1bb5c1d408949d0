/*
 * replica/rpcdata.c — encoding and checks of the RPC-replication baseline's data messages
 * (replica/rpcdata.h). Pure functions over byte buffers; any thread.
 */
#include <errno.h>
#include <string.h>

#include <tailwind/common.h>
#include <tailwind/log_format.h>

#include "core/util.h"
#include "replica/rpcdata.h"

void rpcdata_encode(const struct rpcdata_hdr *h, void *buf)
{
	uint8_t *m = buf;

	memset(m, 0, RPCDATA_HDR_SIZE);
	tw_store_le16(m, RPCDATA_MAGIC);
	m[2] = RPCDATA_VERSION;
	m[3] = h->kind;
	m[4] = h->flags;
	tw_store_le32(m + 8, h->data_len);
	tw_store_le64(m + 12, h->log_id);
	tw_store_le64(m + 20, h->segment_id);
	tw_store_le64(m + 28, h->epoch);
	tw_store_le64(m + 36, h->offset);
	tw_store_le64(m + 44, h->write_off);
	tw_store_le32(m + 52, h->write_len);
	tw_store_le32(m + 56, h->tag);
}

int rpcdata_decode(const void *msg, size_t len, struct rpcdata_hdr *out)
{
	const uint8_t *m = msg;

	if (len < RPCDATA_HDR_SIZE || !rpcdata_is(msg, len) || m[2] != RPCDATA_VERSION)
		return -TW_EPROTO;
	out->kind = m[3];
	out->flags = m[4];
	out->data_len = tw_load_le32(m + 8);
	out->log_id = tw_load_le64(m + 12);
	out->segment_id = tw_load_le64(m + 20);
	out->epoch = tw_load_le64(m + 28);
	out->offset = tw_load_le64(m + 36);
	out->write_off = tw_load_le64(m + 44);
	out->write_len = tw_load_le32(m + 52);
	out->tag = tw_load_le32(m + 56);
	if ((out->kind != RPCDATA_KIND_DATA && out->kind != RPCDATA_KIND_ACK) ||
	    out->data_len != len - RPCDATA_HDR_SIZE)
		return -TW_EPROTO;
	return 0;
}

int rpcdata_check_write(const uint8_t *buf, size_t len)
{
	size_t pos = 0;
	bool data = false;

	while (pos + TW_CKSUM_ENTRY_SIZE <= len) {
		const uint8_t *h = buf + pos;

		if (h[0] == TW_ENTRY_DATA) {
			uint32_t n;

			if (len - pos < TW_ENTRY_HDR_SIZE || h[1])
				return -TW_ECORRUPT;
			n = tw_load_le32(h + 4);
			if (n > len - pos - TW_ENTRY_HDR_SIZE ||
			    tw_crc32c(0, h + TW_ENTRY_HDR_SIZE, n) != tw_load_le32(h + 8))
				return -TW_ECORRUPT;
			pos += TW_ENTRY_HDR_SIZE + n;
			data = true;
		} else if (h[0] == TW_ENTRY_CHECKSUM) {
			/* Exactly one, at the very end, closing at least one data entry. */
			if (pos + TW_CKSUM_ENTRY_SIZE != len || !data || h[1] || !tw_load_le32(h + 4))
				return -TW_ECORRUPT;
			return 0;
		} else {
			return -TW_ECORRUPT;
		}
	}
	return -TW_ECORRUPT;
}
