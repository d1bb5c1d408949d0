/*
 * tailwind/standby.h — a standby primary: wait until a log's owner goes away, then take the log
 * over by itself (docs/coordination.md, "Standby"; needs a ZooKeeper coordinator).
 *
 *   tw_ctx_config_init(&tc); tc.coordinator = "zk://zk1:2181";
 *   tw_primary_config_init(&cfg); cfg.log_id = 42;
 *   tw_standby_config_init(&sc); sc.on_entry = rebuild; sc.entry_arg = svc;
 *   rc = tw_primary_standby(&tc, &cfg, &sc, &st, &p, err, sizeof(err));
 *   ... p owns the log: tw_primary_append(p, ...) ...
 *
 * The owner of a log holds an ephemeral owner node in ZooKeeper (logs/<id>/owner) for as long as
 * its session lives. A standby sets a watch on that node (no polling) and, when it is deleted —
 * the owner closed the log, or its process or host died and ZooKeeper expired its session —
 * creates its own owner node with the log's next epoch (one multi-op, only if no other standby
 * created one first: exactly one standby wins, the others go back to watching the winner's
 * node), fences the log on the backups recorded for it, recovers it (every entry to on_entry, as
 * tw_primary_takeover) and returns a primary that appends after the recovered tail.
 */
#ifndef TAILWIND_STANDBY_H
#define TAILWIND_STANDBY_H

#include <stdint.h>

#include <tailwind/common.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How to stand by (tw_standby_config_init; NULL is the default). */
struct tw_standby_config {
	uint32_t size;  /* set by tw_standby_config_init (tailwind/common.h, the ABI rule) */
	unsigned wait_ms; /* give up with -ETIMEDOUT after so long; 0: wait for ever */
	/* Called (may be NULL), on the calling thread, each time the standby starts waiting for
	 * an owner node (its watch is set): at the start if the log has an owner, and after each
	 * race lost to another standby. owner: the node's text, "epoch=N owner=host=H pid=P". */
	void (*on_wait)(void *arg, const char *owner);
	void *wait_arg;
	/* Warm standby (docs/readers.md): while waiting, read the live log (tailwind/reader.h)
	 * and hand each entry to on_entry as soon as its owner's append is acknowledged, on a
	 * thread of the standby's; at the takeover the recovery then hands over only the entries
	 * after the last one read (entry.index counts from 0 again there). on_entry never runs
	 * on two threads at once: the reader is stopped before the recovery starts. */
	bool warm;
	/* Every entry of the log (may be NULL: none), as tw_primary_takeover hands them:
	 * on_entry(entry_arg, e), on the calling thread (with `warm`, on the reader's first). */
	tw_recover_entry_fn on_entry;
	void *entry_arg;
};

/* Fill `sc` with the defaults: wait for ever, no callbacks, cold. */
TW_API void tw_standby_config_init_sized(struct tw_standby_config *sc, size_t size);
#define tw_standby_config_init(sc) tw_standby_config_init_sized((sc), sizeof(*(sc)))

/* Where a standby's failover time went (nanoseconds). Its size is fixed for 1.x, as
 * tw_recover_result's: new fields come from `reserved` (zeroed by the library). */
struct tw_standby_result {
	uint64_t epoch;            /* the epoch the log was taken over at */
	int watched;               /* 1: an owner node was there and its deletion was awaited (a
				    * failover); 0: the log had no owner when the standby looked */
	unsigned lost_races;       /* takeovers another standby won first (then watched again) */
	uint64_t wait_ns;          /* from the call until the owner node's deletion was seen */
	uint64_t gone_realtime_ns; /* CLOCK_REALTIME when the deletion was seen (the watch fired):
				    * compare with the time the owner died, known to whoever
				    * killed it; the difference is ZooKeeper's detection (the
				    * owner's session timeout) plus the notification */
	uint64_t claim_ns;         /* next epoch + owner node in ZooKeeper (one multi-op) */
	uint64_t connect_ns;       /* connect and handshake with the recorded backups */
	uint64_t fence_ns;         /* fence them with the new epoch */
	uint64_t recover_ns;       /* list, fetch, verify, deliver, record the recovered offsets */
	uint64_t open_ns;          /* connect to the new primary's backups, open its first segment */
	uint64_t takeover_ns;      /* claim + connect + fence + recover + open: from the
				    * deletion seen to the primary ready */
	uint64_t warm_entries;     /* sc->warm: entries the reader handed over before the takeover
				    * (the recovery's count is in res_out->entries) */
	uint64_t warm_lsn;         /* sc->warm: where the recovery started delivering */
	uint64_t warm_stop_ns;     /* sc->warm: stopping the reader (part of takeover_ns) */
	struct tw_recover_result recovery; /* the recovery's counts (as tw_primary_takeover);
					    * fixed-size, so embedding it is safe */
	uint64_t reserved[8];              /* 0 */
};

/*
 * Wait (up to sc->wait_ms) until log cfg->log_id has no owner, then take it over, as
 * above. transport->coordinator must be a zk:// URL (-EINVAL otherwise); the rest of
 * transport and cfg as tw_primary_takeover (with n_backups 0 the new primary's backups come
 * from the live registrations). The recovery asks the backups recorded for the log (logs/<id>/backups), or
 * every registered one for a log that has no record. A log with no owner at the call is taken
 * over at once (st_out->watched 0). A claim that ZooKeeper does not answer (connection loss,
 * operation timeout, session expiry) is not returned: the standby watches and claims again,
 * and knows a claim of its own whose answer was lost (docs/coordination.md). st_out (may be
 * NULL) receives the timings and, in
 * st_out->recovery, the recovery's counts. Returns 0 and *out (the caller owns it: tw_primary_close), -ETIMEDOUT
 * (sc->wait_ms passed with the owner still there; an expected outcome, so it is not logged: a
 * service may stand by in rounds of wait_ms to notice its own shutdown between them, as
 * examples/kv does), or the errors of tw_primary_takeover: after a
 * failed takeover the claim is released (the owner node deleted), so another standby can try.
 * Blocking; cfg borrowed for the call.
 */
TW_API int tw_primary_standby(const struct tw_ctx_config *transport,
			      const struct tw_primary_config *cfg,
			      const struct tw_standby_config *sc, struct tw_standby_result *st_out,
			      struct tw_primary **out, char *errmsg_out, size_t errmsg_len);

#ifdef __cplusplus
}
#endif

#endif /* TAILWIND_STANDBY_H */
