/*
 * examples/kv/kv_server.h — the twkv server (docs/kv.md): the primary of its partitions' logs,
 * a backup for the other servers' logs, and a hash index per partition, in one process.
 *
 * Threads (docs/kv.md, "Threads"): the serving thread (the caller of kv_server_run) owns the
 * client connections, the indexes and the cleaner; each partition's tw_primary (async mode) has
 * the library's progress thread, whose append callbacks only hand the completion back to the
 * serving thread; one thread runs the embedded backup (tw_backup_run); a thread per partition
 * being taken over (open, takeover, standby) rebuilds its index and hands it over.
 */
#ifndef TWKV_SERVER_H
#define TWKV_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <tailwind/primary.h>

struct kv_server_config {
	const char *provider;      /* libfabric provider for replication; NULL: tcp */
	const char *dir;           /* the embedded backup's segment files (required) */
	const char *listen;        /* host of both listeners; NULL: 127.0.0.1 */
	const char *port;          /* client port; NULL or "0": ephemeral */
	const char *backup_port;   /* the embedded backup's port; NULL or "0": ephemeral */
	const char *cluster_file;  /* start from this map as server `id` (else wait for CONFIGURE) */
	int id;
	bool rpc_baseline;         /* the RPC-replication baseline (TW_DATA_PATH=rpc, set by main
				    * before any thread starts: libtailwind reads it at each open) */
	size_t segment_size;       /* log segment and backup buffer size */
	uint64_t memory;           /* log memory budget of the server's partitions, bytes */
	unsigned session_ms;       /* ZooKeeper session timeout (failure detection) */
	unsigned connect_ms;       /* connect timeout to a backup (the logs, their recovery) */
	unsigned rpc_ms;           /* RPC timeout to a backup; 0: the library's default */
	unsigned backup_buffers;   /* buffers the backup registers at start */
	size_t expect_keys;        /* index size hint per partition */
	const char *metrics;       /* serve /metrics there (kv_metrics.h); NULL: no endpoint */
	bool loop_logs;            /* the serving thread drives the partitions' logs from its
				    * epoll loop (sync mode, tw_primary_wait_fd) instead of a
				    * progress thread per log; not on shm (no descriptor) */
};

/* Fill the defaults (docs/kv.md, "Running it"). */
void kv_server_config_init(struct kv_server_config *cfg);

/*
 * Open the backup and the client listener, print `ready kv=ADDR backup=ADDR` on stdout, serve
 * until SIGTERM or SIGINT, then close everything. Returns the process exit status.
 */
int kv_server_run(const struct kv_server_config *cfg);

#endif
