/*
 * log/log_entry.h — the log writer cut in two, for the primary's append engine
 * (docs/primary.md, "The append engine"): an application thread writes a whole data entry
 * (payload, payload CRC, header and its check) into space it reserved, without the writer,
 * and advances the header chain over it when its turn to publish comes (tw__log_chain_step,
 * on the header it has just written); whoever seals hands the writer the chain and the count
 * of the entries published (tw__log_writer_take). The chain lives only in the checksum entry,
 * so each entry can be finished on its own. Same bytes as tw_log_writer_append
 * (log/log_format.c). Internal to the library.
 */
#ifndef TW_LOG_ENTRY_H
#define TW_LOG_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

/* A data entry's header as two words: bytes 0..3 (type, flags, check) and 4..11 (length, payload
 * CRC), little-endian, as stored. */
struct tw__hdr_words {
	uint32_t lo;
	uint64_t hi;
};

/* Write one data entry of `len` payload bytes at `hdr` (TW_ENTRY_HDR_SIZE + len bytes): the
 * payload copied, its CRC32C computed over the copy, the header and its check stored. Returns
 * the header's words (for tw__log_chain_step, without reading the header back). */
struct tw__hdr_words tw__log_entry_put(uint8_t *hdr, const void *payload, uint32_t len);

/* The header chain advanced over a data entry header, given as its words (tw__log_entry_put's
 * result): the step tw_log_writer_append takes for each entry. */
uint32_t tw__log_chain_step(uint32_t chain, struct tw__hdr_words h);

/* The same step as a function chosen once for this CPU (SSE4.2's crc32 instruction or the
 * table): for a hot path that calls it per entry, one call and no test. */
typedef uint32_t (*tw__chain_step_fn)(uint32_t chain, struct tw__hdr_words h);
tw__chain_step_fn tw__log_chain_step_fn(void);

/* Advance the writer `w` to `end` over `n` data entries written at [w->pos, end), whose chain
 * over their headers, from w->chain on and in order, is `chain` (tw__log_chain_step): pos,
 * pending and entries as tw_log_writer_append would have left them, without reading the
 * headers again. */
void tw__log_writer_take(struct tw_log_writer *w, size_t end, uint32_t chain, uint32_t n);

#endif /* TW_LOG_ENTRY_H */
