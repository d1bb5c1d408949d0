/*
 * examples/kv/kv_server_int.h — what kv_server.c (the serving thread) and kv_part.c (taking
 * partitions over, cleaning) share.
 */
#ifndef TWKV_SERVER_INT_H
#define TWKV_SERVER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>
#include <tailwind/standby.h>

#include "kv_cluster.h"
#include "kv_index.h"
#include "kv_lease.h"
#include "kv_server.h"

enum part_state {
	PART_IDLE,      /* not served here */
	PART_ACQUIRING, /* a thread is opening or taking it over */
	PART_SERVING,
	PART_FAILED,    /* its log failed (fenced by a new owner, backups lost): not served */
};

/* How a partition comes to be served here. */
enum acq_mode {
	ACQ_OPEN,     /* owned in the map: open the log (take it over if it exists) */
	ACQ_TAKEOVER, /* TAKEOVER request: take the log over now */
	ACQ_STANDBY,  /* standby in the map: wait until its owner is gone (ZooKeeper) */
};

/* A partition as the serving thread sees it. */
struct part {
	struct kv_server *srv;
	unsigned id;
	enum part_state state;
	bool standby;        /* PART_ACQUIRING as a standby (waiting for its owner to go) */
	struct tw_primary *p;
	int loop_fd;         /* p's descriptor in the serving thread's epoll set (-1: p has a
			      * progress thread of its own) */
	bool loop_due;       /* progress p on this pass (its descriptor, or prepare said so) */
	uint64_t loop_at;    /* ... or once this time (ns) is reached */
	struct kv_index idx;
	uint64_t next_version;
	uint32_t free_below; /* segments below it are freed (cleaned or an earlier owner's) */
	uint32_t head;       /* segment of the last append */
	/* Where the records of segment base_seg lie in this process: the record at lsn is at
	 * base + (uint32_t)lsn (kv_rec_at; NULL: not known yet). Set from one tw_primary_read
	 * per segment, so that a completed append is indexed without reading the log back. */
	const uint8_t *base;
	uint32_t base_seg;
	/* Cleaner (kv_part.c): relocate what the index points to below clean_below, then free. */
	bool cleaning;
	uint32_t clean_below;
	size_t cursor;       /* next index slot to look at */
	uint64_t walk_grows; /* the index's growth count when the walk started */
	bool walk_found;     /* this walk relocated something (walk again) */
	unsigned moving;     /* relocations in flight */
	/* A TAKEOVER request waiting for this partition (conn slot, generation, request id). */
	bool waiter;
	uint32_t w_conn, w_gen;
	uint64_t w_id;
	/* Counters. */
	uint64_t puts, gets, relocated, relocated_bytes, passes, segments_freed;
};

/* Most PUTs appended with one tw_primary_append_batch. */
#define KV_BATCH 256u
/* Completions taken together, their index lookups' cache misses overlapped (take_done). */
#define KV_DONE_CHUNK 32u
#define KV_DONE_AHEAD 4u

/* One append in flight (a PUT or a relocation): the callback's argument. What the server
 * knows of the record at the append (its version, key length and length) is kept here, so that
 * its completion indexes it and answers without reading it back from the log. */
struct pending {
	struct pending *next; /* free list, or the completion queue */
	struct pending *bnext; /* the next PUT of its batch (kv_on_batch), NULL: the last */
	struct part *pt;
	uint64_t lsn, id, hash;
	uint64_t version;     /* the record's version */
	uint32_t len;         /* the record's length (KV_REC_HDR_SIZE + key + value) */
	uint16_t klen;        /* its key's length */
	uint32_t conn, gen;   /* who gets the PUT's reply */
	bool relocate;
	int status;           /* set by the callback */
};

/* What a partition-taking thread hands the serving thread. */
struct acquired {
	struct acquired *next;
	unsigned part;
	enum acq_mode mode;
	bool took_over;     /* the log existed: taken over (also for ACQ_OPEN, a restart) */
	int rc;
	char err[512];
	struct tw_primary *p;
	struct kv_index idx;
	uint64_t next_version;
	uint32_t free_below, head;
	uint64_t entries, live, epoch;     /* recovered entries, live keys after replay */
	uint64_t takeover_ns, reappend_ns; /* library's takeover; re-appending the live set */
	uint64_t wait_ns;                  /* standby: owner gone seen after so long */
};

enum kv_role { KV_ROLE_SERVE, KV_ROLE_REPLICATE, KV_ROLE_BACKUP, KV_ROLE_OTHER, KV_ROLES };

struct tid_cpu {
	pid_t tid;
	enum kv_role role;
	uint64_t ns; /* last CPU time read (kept once the thread is gone) */
};

#define KV_MAX_THREADS 256u

struct kv_server {
	struct kv_server_config cfg;
	char provider[64];
	struct kv_cluster map;
	int me;              /* own id in the map; -1 until configured */
	const char *peers[KV_MAX_SERVERS]; /* backups of the other servers */
	size_t npeers;
	struct tw_backup *backup;
	pthread_t backup_thread;
	struct kv_lease *lease; /* with a coordinator: the read leases (NULL: static, always valid) */
	int epfd, lfd, efd, sfd; /* epoll, listener, eventfd (handoffs), signalfd */
	bool loop_logs;      /* cfg.loop_logs and a provider with descriptors (not shm) */
	bool done_local;     /* completions queued by the serving thread itself (loop_logs) */
	char kv_addr[KV_ADDR_MAX];
	struct part parts[KV_MAX_PARTITIONS];
	/* Completions and acquired partitions, handed over by other threads (mu, efd). */
	pthread_mutex_t mu;
	struct pending *done_head, *done_tail;
	struct acquired *acq_head;
	bool stopping;
	unsigned acquirers;  /* threads taking partitions over, still running */
	pthread_cond_t acq_cv;
	/* Serving-thread state. */
	struct pending *pd_free;
	/* The PUTs of the burst being read, not appended yet (kv_flush_puts): their records are
	 * in the connection's input buffer, which is appended from before it is moved. */
	struct iovec stage_iov[KV_BATCH];
	struct pending *stage_pd[KV_BATCH];
	unsigned staged;
	struct conn **conns;
	uint32_t nconns_cap;
	struct conn *dirty;
	bool cfg_waiter;     /* a CONFIGURE waits for the owned partitions */
	uint32_t cfg_conn, cfg_gen;
	uint64_t cfg_id;
	unsigned cfg_left;
	/* Counters. */
	uint64_t gets, puts, not_owner, retries, bad, takeovers;
	uint64_t put_batches; /* tw_primary_append_batch calls (puts / put_batches: PUTs per call) */
	uint64_t lease_refused; /* GETs answered NOT_OWNER because the lease had lapsed */
	/* Rejoining as a standby (kv_server.c): after a partition's log failed, a standby round
	 * failed, or the lease session expired; not before rejoin_at (monotonic ms). */
	bool rejoin;
	uint64_t rejoin_at;
	uint64_t rejoins;       /* times this server stood by again by itself */
	uint64_t mem_peak;   /* most log bytes held at once */
	uint64_t last_takeover_ms, last_recovered, last_live, last_reappend_ms;
	/* CPU per role (per-thread clocks). */
	pthread_mutex_t cpu_mu;
	struct tid_cpu tids[KV_MAX_THREADS];
	unsigned ntids;
};

/* kv_stats.c: thread roles, and the STATS text (at most cap bytes; returns its length). */
void kv_role_self(struct kv_server *s, enum kv_role role);
void kv_role_new_threads(struct kv_server *s, enum kv_role role);
size_t kv_stats_text(struct kv_server *s, char *buf, size_t cap);
/* CPU nanoseconds per role since the start (also for /metrics, kv_metrics.c). */
void kv_cpu_by_role(struct kv_server *s, uint64_t ns[KV_ROLES]);

/* kv_part.c */
int kv_part_start(struct kv_server *s, unsigned part, enum acq_mode mode, char *err, size_t len);
bool kv_part_clean(struct kv_server *s);
uint64_t kv_mem_used(const struct kv_server *s);
bool kv_mem_full(const struct kv_server *s);
void kv_part_close(struct kv_server *s, struct part *pt);
/* The append callback (runs on the library's progress thread). */
void kv_on_append(void *arg, int status, uint64_t lsn);
struct pending *kv_pending_get(struct kv_server *s);
/* tw_primary_append_batch's callback: arg is the batch's first pending, chained by bnext. */
void kv_on_batch(void *arg, int status, uint64_t lsn);
/* The record pd appended, in the log's memory (borrowed as tw_primary_read's data), or NULL when
 * the log no longer holds it. */
const uint8_t *kv_rec_at(struct part *pt, const struct pending *pd);

#endif
