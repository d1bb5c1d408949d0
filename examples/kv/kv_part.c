/*
 * examples/kv/kv_part.c — a partition's log: opening it or taking it over with the index
 * rebuilt from the recovered entries (docs/kv.md, "Failover"), and the cleaner that keeps the
 * server's log memory within its budget (docs/kv.md, "Cleaning").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "kv_server_int.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The log of partition `part` (cfg), replicated to the backups of the other servers (tc). */
static void primary_config(const struct kv_server *s, unsigned part, struct tw_ctx_config *tc,
			   struct tw_primary_config *cfg)
{
	tw_ctx_config_init(tc);
	tc->backups = s->peers;
	tc->n_backups = s->npeers;
	tc->provider = s->provider;
	/* Two knobs: how long a connect to a backup may take (a takeover's recovery waits that
	 * long on a paused server's backup, and goes on with the copies that answered), and the
	 * ZooKeeper session timeout (how soon a standby sees us gone). */
	tc->connect_timeout_ms = s->cfg.connect_ms;
	if (s->cfg.rpc_ms)
		tc->rpc_timeout_ms = s->cfg.rpc_ms;
	if (s->map.coordinator[0]) {
		tc->coordinator = s->map.coordinator;
		tc->session_timeout_ms = s->cfg.session_ms;
	}
	tw_primary_config_init(cfg);
	cfg->log_id = s->map.log_base + part;
	cfg->replicas = s->map.replicas;
	cfg->segment_size = s->cfg.segment_size;
	/* Driven from the serving thread's loop (docs/kv.md, "Threads"), or a thread of its own. */
	cfg->mode = s->loop_logs ? TW_PRIMARY_SYNC : TW_PRIMARY_ASYNC;
}

/*
 * The rebuild: recovered entries in log order, the highest version of each key kept (a heap copy
 * of its record in an index of its own). Versions, not log order, decide: a record the cleaner
 * moved can sit after a newer PUT of the same key in the log (docs/kv.md, "Versions").
 */
struct rebuild {
	struct kv_index idx;
	bool in_log;   /* the slots point into the new log, no longer at heap copies */
	uint64_t entries, max_version;
	char err[256];
};

static void rebuild_drop(struct rebuild *rb)
{
	for (size_t i = 0; !rb->in_log && rb->idx.slots && i <= rb->idx.mask; i++)
		free((void *)rb->idx.slots[i].rec);
	kv_index_free(&rb->idx);
	rb->in_log = false;
}

static int rebuild_reset(struct rebuild *rb, size_t expect)
{
	rebuild_drop(rb);
	rb->entries = rb->max_version = 0;
	rb->err[0] = 0;
	return kv_index_init(&rb->idx, expect);
}

static int on_entry(void *arg, const struct tw_recovered_entry *e)
{
	struct rebuild *rb = arg;
	struct kv_slot *slot;
	struct kv_rec r;
	void *copy;

	if (!kv_rec_decode(e->data, e->len, &r) || !r.version) {
		snprintf(rb->err, sizeof(rb->err), "entry %" PRIu64 " (lsn 0x%" PRIx64 ", %" PRIu32
			 " bytes) is not a twkv record", e->index, e->lsn, e->len);
		return -1;
	}
	rb->entries++;
	if (r.version > rb->max_version)
		rb->max_version = r.version;
	slot = kv_index_slot(&rb->idx, kv_hash(r.key, r.klen), r.key, r.klen);
	if (!slot || (slot->rec && kv_slot_version(slot) >= r.version))
		return slot ? 0 : -1;
	copy = malloc(e->len);
	if (!copy)
		return -1;
	memcpy(copy, e->data, e->len);
	free((void *)slot->rec);
	slot->rec = copy;
	slot->len = e->len;
	return 0;
}

/*
 * Append the live records to the new log (as RAMCloud's recovery masters re-log what they
 * recover), wait until the backups hold them, and point the index at them in the log. The heap
 * copies are freed; the earlier owner's segments can then be freed everywhere.
 */
static int reappend(struct tw_primary *p, struct rebuild *rb, uint32_t *head)
{
	struct kv_index *ix = &rb->idx;
	int rc = 0;

	for (size_t i = 0; i <= ix->mask && rc == 0; i++)
		if (ix->slots[i].rec)
			rc = tw_primary_append_async(p, ix->slots[i].rec, ix->slots[i].len, NULL, NULL,
						     &ix->slots[i].lsn);
	if (rc == 0)
		rc = tw_primary_flush(p);
	rb->in_log = true; /* from here on each slot holds a log address or NULL */
	for (size_t i = 0; i <= ix->mask; i++) {
		struct kv_slot *sl = &ix->slots[i];
		const void *data = NULL;
		uint32_t len;

		if (!sl->rec)
			continue;
		free((void *)sl->rec);
		sl->rec = NULL;
		if (rc == 0)
			rc = tw_primary_read(p, sl->lsn, &data, &len);
		sl->rec = data;
		if (rc == 0 && (uint32_t)(sl->lsn >> 32) > *head)
			*head = (uint32_t)(sl->lsn >> 32);
	}
	return rc;
}

struct acq_job {
	struct kv_server *s;
	unsigned part;
	enum acq_mode mode;
};

static bool stopping(struct kv_server *s)
{
	bool st;

	pthread_mutex_lock(&s->mu);
	st = s->stopping;
	pthread_mutex_unlock(&s->mu);
	return st;
}

static bool stop_cb(void *arg)
{
	return stopping(arg);
}

/* Wait `*ms` (doubling it, up to 2 s) unless the server stops meanwhile; false if it does. */
static bool backoff(struct kv_server *s, unsigned *ms)
{
	struct timespec ts;
	bool st;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += *ms / 1000;
	ts.tv_nsec += (long)(*ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	*ms = *ms < 1000 ? *ms * 2 : 2000;
	pthread_mutex_lock(&s->mu);
	if (!s->stopping)
		pthread_cond_timedwait(&s->acq_cv, &s->mu, &ts);
	st = s->stopping;
	pthread_mutex_unlock(&s->mu);
	return !st;
}

/* Open, take over or stand by for one partition; hand the result to the serving thread. */
static void *acquire_main(void *arg)
{
	struct acq_job job = *(struct acq_job *)arg;
	struct kv_server *s = job.s;
	struct acquired *a = calloc(1, sizeof(*a));
	struct tw_standby_config sc;
	struct tw_standby_result st;
	struct tw_recover_result res;
	struct tw_ctx_config tc;
	struct tw_primary_config cfg;
	struct rebuild rb;
	struct tw_primary *p = NULL;
	uint64_t t0 = 0;
	unsigned delay = 100;
	int rc;

	free(arg);
	kv_role_self(s, KV_ROLE_OTHER);
	memset(&rb, 0, sizeof(rb));
	memset(&st, 0, sizeof(st));
	memset(&res, 0, sizeof(res));
	primary_config(s, job.part, &tc, &cfg);
	tw_standby_config_init(&sc);
	sc.wait_ms = 1000; /* to notice a shutdown */
	sc.on_entry = on_entry;
	sc.entry_arg = &rb;
	if (!a) {
		rc = -ENOMEM;
		goto out;
	}
	a->part = job.part;
	a->mode = job.mode;
	/* The read lease first: a standby waits here until the owner's lease node is gone (its
	 * session expired, or it released the partition), so the old owner's reads have ended
	 * before this server can serve any (docs/kv.md, "Leased reads"). */
	if (s->lease) {
		rc = kv_lease_acquire(s->lease, job.part, job.mode == ACQ_TAKEOVER, stop_cb, s,
				      a->err, sizeof(a->err));
		if (rc < 0)
			goto out;
	}
	do {
		rc = rebuild_reset(&rb, s->cfg.expect_keys);
		if (rc < 0)
			break;
		t0 = now_ns();
		if (job.mode == ACQ_STANDBY) {
			rc = tw_primary_standby(&tc, &cfg, &sc, &st, &p, a->err, sizeof(a->err));
			res = st.recovery;
		} else {
			rc = -TW_ELOGEXISTS;
			if (job.mode == ACQ_OPEN)
				rc = tw_primary_open(&tc, &cfg, &p, a->err, sizeof(a->err));
			/* The log exists: a restart, or a static failover. Take it over. */
			if (rc == -TW_ELOGEXISTS) {
				a->took_over = true;
				rc = tw_primary_takeover(&tc, &cfg, on_entry, &rb, &res, &p,
							 a->err, sizeof(a->err));
			}
		}
		/* A server started from a map file may come up before the backups of its peers:
		 * the open waits for them. */
		if (job.mode == ACQ_OPEN && rc == -TW_ENOBACKUP)
			fprintf(stderr, "twkv: partition %u: %s; trying again\n", job.part, a->err);
	} while ((job.mode == ACQ_STANDBY && rc == -ETIMEDOUT && !stopping(s) &&
		  !(s->lease && kv_lease_expired(s->lease))) ||
		 (job.mode == ACQ_OPEN && rc == -TW_ENOBACKUP && backoff(s, &delay)));
	a->takeover_ns = now_ns() - t0;
	if (rc == 0) {
		uint64_t t1 = now_ns();

		a->free_below = a->head = tw_primary_first_segment(p);
		a->epoch = tw_primary_epoch(p);
		a->entries = rb.entries;
		a->live = rb.idx.count;
		a->next_version = rb.max_version + 1;
		a->wait_ns = st.wait_ns;
		if (job.mode == ACQ_STANDBY) {
			a->takeover_ns = st.takeover_ns;
			a->took_over = true;
		}
		rc = reappend(p, &rb, &a->head);
		a->reappend_ns = now_ns() - t1;
		if (rc < 0)
			snprintf(a->err, sizeof(a->err), "re-appending the live set: %s",
				 tw_primary_errmsg(p));
		/* Every live record is in the new log now: the earlier owner's segments go (the
		 * backups' part runs on the progress thread; a failure there is only logged, and
		 * the next free, the cleaner's, covers them again). */
		else if (tw_primary_first_segment(p) > 0)
			tw_primary_trim(p, tw_primary_first_segment(p));
	} else if (rb.err[0]) {
		snprintf(a->err, sizeof(a->err), "%s", rb.err);
	}
out:
	if (a) {
		a->rc = rc;
		a->p = rc == 0 ? p : NULL;
		if (rc == 0) {
			a->idx = rb.idx; /* now pointing into the log */
			memset(&rb.idx, 0, sizeof(rb.idx));
			rb.in_log = false;
		}
	}
	if (rc < 0 && p)
		tw_primary_close(p);
	if (rc < 0)
		kv_lease_release(s->lease, job.part);
	rebuild_drop(&rb);
	pthread_mutex_lock(&s->mu);
	if (a && !s->stopping) {
		uint64_t one = 1;

		a->next = s->acq_head;
		s->acq_head = a;
		if (write(s->efd, &one, sizeof(one)) < 0)
			perror("twkv: eventfd");
		a = NULL;
	}
	s->acquirers--;
	pthread_cond_broadcast(&s->acq_cv);
	pthread_mutex_unlock(&s->mu);
	if (a) { /* shutting down: nobody takes it */
		tw_primary_close(a->p);
		kv_index_free(&a->idx);
		free(a);
	}
	return NULL;
}

int kv_part_start(struct kv_server *s, unsigned part, enum acq_mode mode, char *err, size_t len)
{
	struct acq_job *job = malloc(sizeof(*job));
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (!job)
		return -ENOMEM;
	job->s = s;
	job->part = part;
	job->mode = mode;
	pthread_mutex_lock(&s->mu);
	s->acquirers++;
	pthread_mutex_unlock(&s->mu);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, acquire_main, job);
	pthread_attr_destroy(&attr);
	if (rc) {
		free(job);
		pthread_mutex_lock(&s->mu);
		s->acquirers--;
		pthread_mutex_unlock(&s->mu);
		snprintf(err, len, "cannot start a thread: %s", strerror(rc));
		return -rc;
	}
	s->parts[part].state = PART_ACQUIRING;
	s->parts[part].standby = mode == ACQ_STANDBY;
	return 0;
}

void kv_part_close(struct kv_server *s, struct part *pt)
{
	/* No GET is answered from here on (the serving thread closes): the lease can go. */
	kv_lease_release(s->lease, pt->id);
	/* The callbacks of appends still in flight run inside the close (and fail): their
	 * pendings reach the serving thread with pt->p already NULL. */
	if (pt->loop_fd >= 0)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, pt->loop_fd, NULL);
	pt->loop_fd = -1;
	tw_primary_close(pt->p);
	pt->p = NULL;
	pt->base = NULL;
	kv_index_free(&pt->idx);
	pt->cleaning = false;
	pt->moving = 0;
}

uint64_t kv_mem_used(const struct kv_server *s)
{
	uint64_t segs = 0;

	for (unsigned i = 0; i < s->map.partitions; i++) {
		const struct part *pt = &s->parts[i];

		if (pt->state == PART_SERVING)
			segs += (uint64_t)(pt->head - pt->free_below) + 1;
	}
	return segs * s->cfg.segment_size;
}

/* New PUTs wait (RETRY) while the log memory is so full that relocations need what is left:
 * two segments of head room. */
bool kv_mem_full(const struct kv_server *s)
{
	return s->cfg.memory && kv_mem_used(s) + 2 * s->cfg.segment_size > s->cfg.memory;
}

/* Start a pass over the partition with the most segments once 3/4 of the budget is used:
 * free enough of its oldest segments to come back to half the budget, as far as acknowledged
 * entries go (a segment with unacknowledged entries is not cleaned). */
static void clean_start(struct kv_server *s)
{
	uint64_t used = kv_mem_used(s), seg = s->cfg.segment_size, want;
	struct part *best = NULL;
	uint32_t below, acked;

	if (!s->cfg.memory || used * 4 <= s->cfg.memory * 3)
		return;
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->state == PART_SERVING &&
		    (!best || pt->head - pt->free_below > best->head - best->free_below))
			best = pt;
	}
	if (!best)
		return;
	want = (used - s->cfg.memory / 2 + seg - 1) / seg;
	acked = (uint32_t)(tw_primary_acked_lsn(best->p) >> 32);
	below = best->free_below + (uint32_t)(want < best->head - best->free_below ? want :
					      best->head - best->free_below);
	if (below > acked)
		below = acked;
	if (below <= best->free_below)
		return;
	best->cleaning = true;
	best->clean_below = below;
	best->cursor = 0;
	best->walk_grows = best->idx.grows;
	best->walk_found = false;
	best->passes++;
}

/*
 * One step of a pass: look at up to 4096 index slots and relocate the records below
 * clean_below to the head of the log (appends of the record's bytes, same version). When a
 * whole walk of the index found nothing more to move and every relocation is acknowledged,
 * no live record lies below clean_below: free those segments on the backups and here.
 */
static void clean_step(struct kv_server *s, struct part *pt)
{
	struct kv_index *ix = &pt->idx;

	if (ix->grows != pt->walk_grows) { /* slots moved: walk again from the start */
		pt->cursor = 0;
		pt->walk_grows = ix->grows;
		pt->walk_found = true;
	}
	for (unsigned n = 0; n < 4096 && pt->cursor <= ix->mask; n++) {
		struct kv_slot *sl = &ix->slots[pt->cursor++];
		struct pending *pd;
		int rc;

		if (!sl->rec || (uint32_t)(sl->lsn >> 32) >= pt->clean_below)
			continue;
		pd = kv_pending_get(s);
		if (!pd)
			return;
		pd->pt = pt;
		pd->hash = sl->hash;
		pd->relocate = true;
		pd->version = kv_slot_version(sl);
		pd->len = sl->len;
		pd->klen = kv_get16(sl->rec + 8);
		rc = tw_primary_append_async(pt->p, sl->rec, sl->len, kv_on_append, pd, &pd->lsn);
		if (rc < 0) { /* the log failed: the PUT path notices too */
			pd->next = s->pd_free;
			s->pd_free = pd;
			pt->cleaning = false;
			return;
		}
		if ((uint32_t)(pd->lsn >> 32) > pt->head)
			pt->head = (uint32_t)(pd->lsn >> 32);
		pt->moving++;
		pt->walk_found = true;
		pt->relocated++;
		pt->relocated_bytes += sl->len;
	}
	if (pt->cursor <= ix->mask || pt->moving)
		return;
	if (pt->walk_found) {
		pt->cursor = 0;
		pt->walk_found = false;
		return;
	}
	if (tw_primary_trim(pt->p, pt->clean_below) >= 0) {
		pt->segments_freed += pt->clean_below - pt->free_below;
		pt->free_below = pt->clean_below;
	}
	if (pt->base && pt->base_seg < pt->clean_below)
		pt->base = NULL; /* released (kv_rec_at) */
	pt->cleaning = false;
}

bool kv_part_clean(struct kv_server *s)
{
	bool busy = false, more = false;

	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->state == PART_SERVING && pt->cleaning) {
			clean_step(s, pt);
			busy = true;
			/* More slots to walk now; otherwise waiting for acknowledgements, which
			 * wake the serving thread. */
			more |= pt->cleaning && pt->cursor <= pt->idx.mask;
		}
	}
	if (!busy)
		clean_start(s);
	return more;
}
