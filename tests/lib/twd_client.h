/*
 * tests/lib/twd_client.h — a small primary-like client for backup tests: connects to a
 * backup (in-process over "mem", or a twd process over a real provider), opens segments, fills
 * them with one-sided writes built by tw_log_writer, closes, lists, reads stats. Blocking calls;
 * one thread per client.
 */
#ifndef TW_TESTS_TWD_CLIENT_H
#define TW_TESTS_TWD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/log_format.h>

#include "fabric/fabric.h"
#include "proto/rpc.h"

struct twc {
	struct tw_fab *fab;
	struct tw_chan *ch;
	struct tw_rpc_client *rpc;
	bool lost;
	/* The segment being written (twc_seg_*). */
	uint8_t *seg;
	size_t cap;
	struct tw_mr *mr;
	struct tw_log_writer w;
	struct tw_rkey rk;
	uint64_t log_id, segment_id, epoch, version;
	/* Chain seed of the next segment (set after twc_connect, before twc_seg_init/twc_open):
	 * the writer starts at it and the open sends it (OpenSegment.chain_seed). 0: unseeded, as
	 * a 1.1 primary (the backup zeroes the buffer). */
	uint32_t chain_seed;
};

/* Open a fab of `provider` and connect to `addr`. Returns 0 or a negative code. */
int twc_connect(struct twc *c, const char *provider, const char *addr);
void twc_close(struct twc *c);

/* Allocate and register a local segment of `cap` bytes and start a writer on it (seeded with
 * c->chain_seed). */
int twc_seg_init(struct twc *c, size_t cap);

/* OpenSegment for (log, seg) with `length` bytes and c->chain_seed; fills c->rk. */
int twc_open(struct twc *c, uint64_t log_id, uint64_t segment_id, uint64_t epoch,
	     uint64_t version, uint64_t length);

/* Append `n` entries of `len` bytes (payload pattern from `seed`) as one write, seal, and write
 * the range to the backup, waiting for the placed-at-target completion. */
int twc_write(struct twc *c, unsigned n, uint32_t len, uint32_t seed);

/* CloseSegment with the writer's current offset and checksum (or the given overrides when
 * off_override != UINT64_MAX). scanned_out may be NULL. */
int twc_close_seg(struct twc *c, uint64_t off_override, uint32_t ck_override,
		  struct tw_rpc_seg_meta *scanned_out);

/* ListSegments of one log (all pages). Fills up to max entries; returns the count or < 0. */
struct twc_info {
	uint64_t log_id, segment_id, valid_len, entries, version, epoch;
	uint32_t checksum;
	int state; /* TAILWIND__SEGMENT_STATE__* */
	bool corrupt;
};
int twc_list(struct twc *c, uint64_t log_id, bool all, struct twc_info *out, size_t max);

/* StatsReply: handler calls excluding Stats itself, and the key=value message. */
struct twc_stats {
	uint64_t handler_calls_non_stats;
	uint64_t calls_open, calls_close;
	uint64_t rpc_bytes_rx;
	uint64_t cq_entries, cq_polls;
	uint64_t connections; /* channels the backup accepted since start */
	uint64_t shm_peers, shm_peers_given_back; /* shm: AV entries held, given back */
	uint64_t logs_unavailable; /* logs refused since start (a bad file about them) */
	uint64_t set_acked, set_acked_held, set_acked_holding; /* SetAcked served (handler count),
							 * of which held, held now */
	uint64_t spares_kept, spares_reused; /* spare files kept, written over */
	uint32_t buffers_total, buffers_free, buffers_open, buffers_max;
};
int twc_stats(struct twc *c, struct twc_stats *out);

/* One-sided read of [off, off+len) of the peer region into dst (inside dst_mr), waiting. */
int twc_read(struct twc *c, const struct tw_rkey *rk, uint64_t off, size_t len, void *dst,
	     struct tw_mr *dst_mr);

/* Send len bytes (at most 256) of `byte` as one message, which no backup can take for a
 * request, and progress up to 5 s: whether the backup closed the connection. */
bool twc_send_garbage(struct twc *c, size_t len, int byte);

/* Pattern used by twc_write for entry `i` of write `seed` (tests may check read-back data). */
void twc_fill(uint8_t *p, uint32_t len, uint32_t seed, unsigned i);

#endif
