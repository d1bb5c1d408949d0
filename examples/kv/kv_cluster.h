/*
 * examples/kv/kv_cluster.h — the cluster map: which servers there are, where they listen, which
 * partitions each serves at the start and which ones it stands by for (docs/kv.md, "The cluster
 * map"). Text, one item per line, '#' starts a comment:
 *
 *   partitions 3
 *   replicas 2
 *   log-base 1000                       log id of partition 0; partition p is log-base + p
 *   coordinator zk://127.0.0.1:2181/kv  optional: owners, epochs and failover through ZooKeeper
 *   server 0 kv=127.0.0.1:7000 backup=127.0.0.1:7001 owns=0
 *   server 1 kv=127.0.0.1:7002 backup=127.0.0.1:7003 owns=1
 *   server 2 kv=127.0.0.1:7004 backup=127.0.0.1:7005 owns=2
 *   server 3 kv=127.0.0.1:7006 backup=127.0.0.1:7007 standby=0,1,2
 *
 * Server ids are 0 .. n-1 in order. A server's partitions are replicated to the backups of the
 * other servers (never its own). The map is what `twkv serve --cluster FILE` reads, what a
 * CONFIGURE request carries and what MAP returns; clients use it to find servers. Who serves a
 * partition *now* can differ after a failover: a server that does not answers NOT_OWNER.
 */
#ifndef TWKV_CLUSTER_H
#define TWKV_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_MAX_SERVERS 32u
#define KV_MAX_PARTITIONS 64u
#define KV_ADDR_MAX 160u

struct kv_server_entry {
	char kv[KV_ADDR_MAX];     /* client address, host:port */
	char backup[KV_ADDR_MAX]; /* its embedded backup's address (as tw_backup_listen_addr) */
	uint64_t owns;            /* bit p: serves partition p at the start */
	uint64_t standby;         /* bit p: takes partition p over when its owner dies */
};

struct kv_cluster {
	unsigned partitions;
	unsigned replicas;
	uint64_t log_base;
	char coordinator[256]; /* "" when none */
	unsigned nservers;
	struct kv_server_entry servers[KV_MAX_SERVERS];
};

/*
 * Parse a map (text of `len` bytes, need not be NUL-terminated). Checks every line, that server
 * ids run 0 .. n-1, that every partition is owned by exactly one server, that 1 <= replicas <
 * servers. Returns 0, or -EINVAL with err naming the line and the problem.
 */
int kv_cluster_parse(const char *text, size_t len, struct kv_cluster *c, char *err, size_t errlen);

/* Write the map as text into buf (cap bytes, NUL-terminated). Returns its length, or -ENOSPC. */
int kv_cluster_format(const struct kv_cluster *c, char *buf, size_t cap);

/* The server that owns partition p in the map (each partition has exactly one). */
unsigned kv_cluster_owner(const struct kv_cluster *c, unsigned p);

#endif
