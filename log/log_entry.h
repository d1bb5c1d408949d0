/*
 * log/log_entry.h — the log writer cut in two, for the primary's append engine
 * (docs/primary.md, "The append engine"): an application thread writes a whole data entry
 * (payload, payload CRC, header and its check) into space it reserved, without the writer;
 * whoever seals later advances the writer's header chain over the entries written (the chain
 * lives only in the checksum entry, so each entry can be finished on its own). Same bytes as
 * tw_log_writer_append (log/log_format.c). Internal to the library.
 */
#ifndef TW_LOG_ENTRY_H
#define TW_LOG_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

/* Write one data entry of `len` payload bytes at `hdr` (TW_ENTRY_HDR_SIZE + len bytes): the
 * payload copied, its CRC32C computed over the copy, the header and its check stored. */
void tw__log_entry_put(uint8_t *hdr, const void *payload, uint32_t len);

/* Advance the writer `w` over the data entries written at [w->pos, end) (each one by
 * tw__log_entry_put, in the current write): the chain over their headers, pos, pending and
 * entries, as tw_log_writer_append would have. `end` must be the end of an entry. */
void tw__log_writer_adopt(struct tw_log_writer *w, size_t end);

#endif /* TW_LOG_ENTRY_H */
