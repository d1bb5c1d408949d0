/*
 * recovery/recover_int.h — internals of tw_recover() (include/tailwind/recovery.h): the backups
 * being talked to, the copies they list, the chosen order of copies per segment, and the
 * pipelined fetch engine (recover_fetch.c). Everything is owned by one struct rctx and touched
 * only by the thread inside tw_recover().
 */
#ifndef TW_RECOVERY_RECOVER_INT_H
#define TW_RECOVERY_RECOVER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/recovery.h>

#include "fabric/fabric.h"
#include "peer/peer.h"
#include "proto/rpc.h"

/* One backup: its connection (peer.up: connected and answering; peer.lost: the channel
 * failed; peer.why: why it is down), and what the recovery learnt of it. */
struct rbk {
	unsigned idx;
	struct tw_peer peer;
	bool fenced;
	bool late;       /* connect_rounds: no answer in the first round */
	unsigned active; /* segments being fetched from it */
	uint64_t max_epoch; /* highest epoch seen in its listing (log_epoch included) */
	uint64_t free_below; /* first live segment it reports (log cleaning) */
};

/* One copy of a segment on one backup, as listed. */
struct rcopy {
	unsigned bk;
	int state; /* TAILWIND__SEGMENT_STATE__* */
	uint64_t valid_len, entries, version, epoch;
	uint32_t checksum;
	uint32_t seed;  /* chain seed of the copy (SegmentInfo.chain_seed; 0: unseeded / 1.1) */
	bool corrupt; /* reported corrupt by the backup */
	bool lost;    /* reported LOST: opened there, bytes gone after a restart */
	bool failed;  /* failed here (load, read, verification) */
};

struct rseg {
	uint64_t id;
	struct rcopy *copies; /* sorted best first by choose() */
	unsigned ncopies;
	unsigned usable;      /* leading copies of `copies` that may be used */
	bool any_open;        /* some copy is open: record the recovered length */
	/* delivered */
	uint64_t len;
	uint32_t checksum;
	uint64_t version;
	bool done;
	/* Bytes [tail_from, len) of the delivered copy, kept when a usable open copy is shorter:
	 * the record step sends them to those copies (NULL: none needed, or no memory). */
	uint8_t *tail;
	uint64_t tail_from;
};

struct rslot;

struct tw_auth_key;
struct tw_peer_skip;

struct rctx {
	const struct tw_recover_config *cfg; /* &cfg_own once check_cfg took the caller's */
	struct tw_recover_config cfg_own;
	struct tw_recover_result *res;
	char *errmsg;
	size_t errlen;
	struct tw_fab *fab;
	struct rbk *bks;
	unsigned nbk;
	uint64_t epoch;
	uint64_t incarnation; /* this recovery's owner id (stamped on every request) */
	uint64_t free_below;  /* highest first live segment any backup reports */
	uint64_t next_segment; /* first segment id no backup has ever held */
	bool taken_over;      /* a backup refused us as fenced after our fence: another owner */
	struct rseg *segs; /* sorted by id, contiguous from segs[0].id up to a gap */
	size_t nsegs;      /* usable prefix */
	size_t nsegs_all;
	tw_recover_entry_fn cb;
	void *cb_arg;
	struct tw_auth_key *key; /* cluster key (NULL: none); connect_all */
	struct tw_peer_skip *skip; /* the takeover's (peer/peer.h; NULL: none); connect_all */
	/* The takeover's replication factor r (0: not known, tw_recover()): with it, connect_all
	 * goes on without a backup that misses the first, short round once n - r + 1 others
	 * answered (docs/recovery.md, "Connects in two rounds"). */
	unsigned replicas;
};

void tw__rc_seterr(struct rctx *c, const char *fmt, ...) TW_PRINTF(2, 3);
/* Run the fetch/verify/deliver pipeline over c->segs[0 .. nsegs). 0 or a negative code. */
int tw__rc_fetch_all(struct rctx *c);
/* Progress the fab once (up to timeout_ms) and expire RPCs. */
void tw__rc_progress(struct rctx *c, int timeout_ms);

/* tw_recover() with this owner id (0: a fresh random one); *next_segment_out (may be NULL)
 * receives the first segment id after everything any backup holds or freed. The takeover
 * (primary/primary_open.c, primary_coord.c) uses it to continue the log as the owner the fence
 * installed. `skip` (may be NULL): the takeover's table of backups it gave up on (peer/peer.h,
 * struct tw_peer_skip): a backup whose connect or Handshake times out here goes in, and the
 * new log's open does not wait on it again. `replicas`: the log's r, when the caller knows
 * every segment of it was written to r of cfg->backups (a takeover; 0: not known): connects
 * then go in two rounds (docs/recovery.md, "Connects in two rounds"). */
int tw__recover_as(const struct tw_recover_config *cfg, uint64_t incarnation,
		   struct tw_peer_skip *skip, unsigned replicas, tw_recover_entry_fn cb, void *arg,
		   struct tw_recover_result *res_out, uint64_t *next_segment_out,
		   char *errmsg_out, size_t errmsg_len);
/* A random non-zero 63-bit owner id (getrandom). */
uint64_t tw__new_incarnation(void);
/* How a recovery reaches the backups, from a primary's or a context's settings: its provider,
 * polling and connect timeout (0 keeps the default of tw_recover_config_init). */
void tw__recover_config_link(struct tw_recover_config *cfg, const char *provider, bool busy_poll,
			     unsigned connect_timeout_ms);

#endif /* TW_RECOVERY_RECOVER_INT_H */
