/*
 * log/check.h — the check of a sealed write as a unit (pure, any thread): what a backup that
 * places the log's bytes with its own CPU verifies before it acknowledges them (the
 * RPC-replication baseline, fabric/wmsg.c via tw__fab_set_write_check). One-sided writes are
 * never checked at write time; the scan (log_format.h) verifies them when it matters.
 */
#ifndef TW_LOG_CHECK_H
#define TW_LOG_CHECK_H

#include <stddef.h>

/* 0 when `buf` holds whole, well-formed entries (every data entry's type, flags, length and
 * payload CRC32C right) closed by exactly one checksum entry at its very end, after at least one
 * data entry; else -TW_ECORRUPT. */
int tw__log_check_write(const void *buf, size_t len);

#endif /* TW_LOG_CHECK_H */
