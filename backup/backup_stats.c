/*
 * backup/backup_stats.c — the backup's statistics: the counters published under the stats lock
 * (tw__bk_stats_sync, from the progress thread), read by tw_backup_get_stats from any thread,
 * and the names of the RPC kinds they count.
 */
#include <string.h>
#include <sys/resource.h>

#include <tailwind/backup.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"

const char *tw_backup_rpc_name(enum tw_backup_rpc kind)
{
	/* In the order of enum tw_backup_rpc (tailwind/backup.h). */
	static const char *const names[] = {
		"handshake", "open", "close", "free", "list", "stats", "set-version", "fence",
		"read", "release", "ping", "recovered-offset", "other",
	};
	_Static_assert(TW_ARRAY_SIZE(names) == TW_BACKUP_RPC_KINDS, "a name for every kind");

	if ((unsigned)kind >= TW_BACKUP_RPC_KINDS)
		return "unknown";
	return names[kind];
}

/* ------------------------------------------------------------------ statistics */

static enum tw_backup_rpc rpc_kind_of_op(int op)
{
	switch (op) {
	case TW_RPC_HANDSHAKE: return TW_BACKUP_RPC_HANDSHAKE;
	case TW_RPC_OPEN_SEGMENT: return TW_BACKUP_RPC_OPEN;
	case TW_RPC_CLOSE_SEGMENT: return TW_BACKUP_RPC_CLOSE;
	case TW_RPC_LIST_SEGMENTS: return TW_BACKUP_RPC_LIST;
	case TW_RPC_SET_REPLICA_VERSION: return TW_BACKUP_RPC_SET_VERSION;
	case TW_RPC_FENCE: return TW_BACKUP_RPC_FENCE;
	case TW_RPC_FREE_SEGMENTS: return TW_BACKUP_RPC_FREE;
	case TW_RPC_READ_SEGMENT: return TW_BACKUP_RPC_READ;
	case TW_RPC_RELEASE_SEGMENT: return TW_BACKUP_RPC_RELEASE;
	case TW_RPC_STATS: return TW_BACKUP_RPC_STATS;
	case TW_RPC_PING: return TW_BACKUP_RPC_PING;
	case TW_RPC_RECOVERED_OFFSET: return TW_BACKUP_RPC_RECOVERED;
	default: return TW_BACKUP_RPC_OTHER;
	}
}

void tw__bk_stats_sync(struct tw_backup *b)
{
	struct tw_fab_stats fs;
	struct tw_rpc_server_stats rs;
	struct tw_backup_stats *st = &b->st;
	uint64_t on_disk = 0, corrupt = 0;
	bool recount = b->index_dirty;

	tw__fab_get_stats(b->fab, &fs);
	if (b->srv)
		tw__rpc_server_get_stats(b->srv, &rs);
	else
		memset(&rs, 0, sizeof(rs));
	if (recount) {
		for (size_t i = 0; i < b->nsegs; i++) {
			on_disk += b->segs[i]->on_disk;
			corrupt += b->segs[i]->corrupt;
		}
		b->index_dirty = false;
	}

	pthread_mutex_lock(&b->st_lock);
	memset(b->rpc_calls, 0, sizeof(b->rpc_calls));
	st->handler_calls = 0;
	st->rpc_errors = 0;
	for (int op = 0; op < TW_RPC_OP_COUNT; op++) {
		b->rpc_calls[rpc_kind_of_op(op)] += rs.calls[op];
		st->handler_calls += rs.calls[op];
		st->rpc_errors += rs.errors[op];
	}
	b->rpc_calls[TW_BACKUP_RPC_OTHER] += rs.malformed + rs.unsupported;
	st->handler_calls += rs.malformed + rs.unsupported;
	st->rpc_errors += rs.malformed + rs.unsupported;
	st->ctrl_msgs_in = rs.msgs_rx;
	st->ctrl_bytes_in = rs.bytes_rx;
	st->ctrl_msgs_out = rs.msgs_tx;
	st->ctrl_bytes_out = rs.bytes_tx;
	st->cq_polls = fs.cq_polls;
	st->cq_entries = fs.cq_entries;
	st->buffers = b->pool.n;
	st->buffers_max = b->pool.max;
	st->buffers_grown = b->pool.grown;
	st->buffer_size = b->pool.size;
	st->unflushed_limit = b->cfg.unflushed_limit;
	st->buffers_free = b->pool.count[POOL_FREE];
	st->buffers_open = b->pool.count[POOL_OPEN];
	st->buffers_closed = b->pool.count[POOL_CLOSED];
	st->buffers_loaded = b->pool.count[POOL_LOADED];
	st->set_acked = b->set_acked_served;
	st->set_acked_held = b->set_acked_held;
	st->set_acked_holding = b->naholds;
	st->spares_kept = __atomic_load_n(&b->fio.spared_files, __ATOMIC_RELAXED);
	st->spares_reused = __atomic_load_n(&b->fio.recycled_files, __ATOMIC_RELAXED);
	if (recount) {
		st->segments_on_disk = on_disk;
		st->segments_corrupt = corrupt;
	}
	pthread_mutex_unlock(&b->st_lock);
}

static void backup_stats(const struct tw_backup *b, struct tw_backup_stats *out)
{
	struct tw_backup *mb = (struct tw_backup *)b; /* the lock is the only thing we change */
	struct rusage ru;

	pthread_mutex_lock(&mb->st_lock);
	*out = b->st;
	pthread_mutex_unlock(&mb->st_lock);
	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		out->cpu_user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000u +
				   (uint64_t)ru.ru_utime.tv_usec;
		out->cpu_sys_us = (uint64_t)ru.ru_stime.tv_sec * 1000000u +
				  (uint64_t)ru.ru_stime.tv_usec;
	}
}

size_t tw_backup_get_rpc_calls(const struct tw_backup *b, uint64_t *calls_out, size_t n)
{
	struct tw_backup *mb = (struct tw_backup *)b; /* the lock is the only thing we change */

	for (size_t k = 0; calls_out && k < n; k++)
		calls_out[k] = 0;
	if (!b || !calls_out)
		return TW_BACKUP_RPC_KINDS;
	pthread_mutex_lock(&mb->st_lock);
	for (size_t k = 0; k < n && k < TW_BACKUP_RPC_KINDS; k++)
		calls_out[k] = b->rpc_calls[k];
	pthread_mutex_unlock(&mb->st_lock);
	return TW_BACKUP_RPC_KINDS;
}

void tw_backup_get_stats_sized(const struct tw_backup *b, struct tw_backup_stats *out, size_t size)
{
	struct tw_backup_stats full;

	if (b)
		backup_stats(b, &full);
	else
		memset(&full, 0, sizeof(full)); /* NULL: zeros, as tw_ctx_get_stats */
	tw__out_copy(out, size, &full, sizeof(full));
}
