/*
 * examples/kv/kv_server.c — the twkv server's serving thread (kv_server.h): client connections,
 * requests, the completions of appends, the hand-over of partitions taken over, statistics.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kv_metrics.h"
#include "kv_server_int.h"

#define IN_START (64u << 10)
#define OUT_PAUSE (8u << 20) /* stop reading a client that does not read its replies */

/* epoll tags of the descriptors that are not client connections */
#define TAG_LISTEN UINT64_MAX
#define TAG_EVENT (UINT64_MAX - 1)
#define TAG_SIGNAL (UINT64_MAX - 2)
#define TAG_LOG (UINT64_C(1) << 62) /* | partition: its log, driven by this loop (loop_logs) */
#define LOG_POLL_MS 10 /* a log driven by this loop without a descriptor: polled this often */

/* True on the serving thread: a callback that runs there (a log driven by its loop) queues
 * its completions without waking the thread it runs on. */
static _Thread_local bool on_serving_thread;

static int add_fd(struct kv_server *s, int fd, uint64_t tag);

struct conn {
	int fd; /* -1: free slot */
	uint32_t slot, gen;
	uint8_t *in, *out;
	size_t in_len, in_cap, out_off, out_len, out_cap;
	bool dirty, want_out, paused;
	uint32_t next_dirty;
};

void kv_server_config_init(struct kv_server_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->id = -1;
	cfg->segment_size = TW_PRIMARY_DEFAULT_SEGMENT_SIZE;
	cfg->memory = UINT64_C(1) << 30;
	cfg->session_ms = 4000;
	cfg->connect_ms = 1000;
	cfg->backup_buffers = 16;
	cfg->expect_keys = 1024;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ------------------------------------------------------------------ connections and replies */

static struct conn *conn_by(struct kv_server *s, uint32_t slot, uint32_t gen)
{
	struct conn *c = slot < s->nconns_cap ? s->conns[slot] : NULL;

	return c && c->fd >= 0 && c->gen == gen ? c : NULL;
}

static void conn_close(struct kv_server *s, struct conn *c)
{
	if (c->fd < 0)
		return;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->gen++; /* replies still due to it are dropped */
	c->in_len = c->out_len = c->out_off = 0;
	c->paused = c->want_out = false;
}

static void mark_dirty(struct kv_server *s, struct conn *c)
{
	if (!c->dirty) {
		c->dirty = true;
		c->next_dirty = s->dirty ? s->dirty->slot : UINT32_MAX;
		s->dirty = c;
	}
}

/* Room for a reply of `len` body bytes in c's output, header written; NULL without memory (the
 * connection is then closed: its replies could not all be sent). */
static uint8_t *reply_start(struct kv_server *s, struct conn *c, uint8_t op, uint64_t id,
			    uint8_t status, uint32_t len)
{
	struct kv_hdr h = { .len = len, .op = op | KV_REPLY, .status = status, .id = id };
	uint8_t *p;

	if (kv_buf_reserve(&c->out, &c->out_cap, c->out_len + KV_HDR_SIZE + len) < 0) {
		conn_close(s, c);
		return NULL;
	}
	p = c->out + c->out_len;
	kv_hdr_encode(p, &h);
	c->out_len += KV_HDR_SIZE + len;
	mark_dirty(s, c);
	return p + KV_HDR_SIZE;
}

static void reply_text(struct kv_server *s, struct conn *c, uint8_t op, uint64_t id,
		       uint8_t status, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void reply_text(struct kv_server *s, struct conn *c, uint8_t op, uint64_t id,
		       uint8_t status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int n;
	uint8_t *p;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	p = reply_start(s, c, op, id, status, (uint32_t)n);
	if (p)
		memcpy(p, msg, (size_t)n);
}

static void conn_flush(struct kv_server *s, struct conn *c)
{
	while (c->fd >= 0 && c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			conn_close(s, c);
			return;
		}
		c->out_off += (size_t)n;
	}
	if (c->fd < 0)
		return;
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	bool want_out = c->out_len > 0, paused = c->out_len - c->out_off > OUT_PAUSE;
	if (want_out != c->want_out || paused != c->paused) {
		struct epoll_event ev = { .events = (paused ? 0 : EPOLLIN) | (want_out ? EPOLLOUT : 0) };

		ev.data.u64 = c->slot;
		epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
		c->want_out = want_out;
		c->paused = paused;
	}
}

static void flush_dirty(struct kv_server *s)
{
	while (s->dirty) {
		struct conn *c = s->dirty;

		s->dirty = c->next_dirty == UINT32_MAX ? NULL : s->conns[c->next_dirty];
		c->dirty = false;
		conn_flush(s, c);
	}
}

static void accept_all(struct kv_server *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
		struct epoll_event ev = { .events = EPOLLIN };
		struct conn *c = NULL;
		uint32_t slot;

		if (fd < 0)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		for (slot = 0; slot < s->nconns_cap && s->conns[slot]->fd >= 0; slot++)
			;
		if (slot == s->nconns_cap) {
			uint32_t n = s->nconns_cap ? s->nconns_cap * 2 : 16;
			struct conn **v = realloc(s->conns, n * sizeof(*v));

			if (!v) {
				close(fd);
				continue;
			}
			s->conns = v;
			for (uint32_t i = s->nconns_cap; i < n; i++) {
				v[i] = calloc(1, sizeof(**v));
				if (!v[i]) {
					n = i;
					break;
				}
				v[i]->fd = -1;
				v[i]->slot = i;
			}
			s->nconns_cap = n;
			if (slot == n) {
				close(fd);
				continue;
			}
		}
		c = s->conns[slot];
		if (kv_buf_reserve(&c->in, &c->in_cap, IN_START) < 0) {
			close(fd);
			continue;
		}
		c->fd = fd;
		ev.data.u64 = slot;
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			c->fd = -1;
		}
	}
}

/* ------------------------------------------------------------------ requests */

static struct part *part_of(struct kv_server *s, uint64_t hash)
{
	return &s->parts[kv_partition_of(hash, s->map.partitions)];
}

struct pending *kv_pending_get(struct kv_server *s)
{
	struct pending *pd = s->pd_free;

	if (pd)
		s->pd_free = pd->next;
	else
		pd = malloc(sizeof(*pd)); /* the pool grows to the most appends in flight */
	if (pd)
		memset(pd, 0, sizeof(*pd));
	return pd;
}

void kv_on_append(void *arg, int status, uint64_t lsn)
{
	struct pending *pd = arg;
	struct kv_server *s = pd->pt->srv;
	uint64_t one = 1;
	bool wake;

	(void)lsn;
	pd->status = status;
	pd->next = NULL;
	pthread_mutex_lock(&s->mu);
	wake = !s->done_head && !on_serving_thread;
	if (s->done_tail)
		s->done_tail->next = pd;
	else
		s->done_head = pd;
	s->done_tail = pd;
	pthread_mutex_unlock(&s->mu);
	/* One wake-up per batch: the serving thread takes the whole queue at once. */
	if (on_serving_thread)
		s->done_local = true;
	else if (wake && write(s->efd, &one, sizeof(one)) < 0)
		perror("twkv: eventfd");
}

/* A batch of PUTs is acknowledged (or failed): all its pendings to the serving thread at once.
 * The status is the last entry's, and acknowledgements come in log order, so 0 means every PUT
 * of the batch is on r backups; an error fails them all (each may or may not be in the log, as
 * for a single append). */
void kv_on_batch(void *arg, int status, uint64_t lsn)
{
	struct pending *first = arg, *last = first;
	struct kv_server *s = first->pt->srv;
	uint64_t one = 1;
	bool wake;

	(void)lsn;
	for (struct pending *pd = first; pd; pd = pd->bnext) {
		pd->status = status;
		pd->next = pd->bnext;
		last = pd;
	}
	pthread_mutex_lock(&s->mu);
	wake = !s->done_head && !on_serving_thread;
	if (s->done_tail)
		s->done_tail->next = first;
	else
		s->done_head = first;
	s->done_tail = last;
	pthread_mutex_unlock(&s->mu);
	if (on_serving_thread)
		s->done_local = true;
	else if (wake && write(s->efd, &one, sizeof(one)) < 0)
		perror("twkv: eventfd");
}

static void do_get(struct kv_server *s, struct conn *c, const struct kv_hdr *h, const uint8_t *key)
{
	uint64_t hash;
	struct kv_slot *sl;
	struct part *pt;
	uint16_t klen;
	uint32_t vlen;
	uint8_t *p;

	if (!h->len || h->len > KV_MAX_KEY) {
		s->bad++;
		reply_text(s, c, h->op, h->id, KV_S_BAD, "key of %u bytes (1..%u)", h->len,
			   KV_MAX_KEY);
		return;
	}
	hash = kv_hash(key, h->len);
	pt = part_of(s, hash);
	if (pt->state != PART_SERVING) {
		s->not_owner++;
		reply_start(s, c, h->op, h->id, KV_S_NOT_OWNER, 0);
		return;
	}
	sl = kv_index_find(&pt->idx, hash, key, (uint16_t)h->len);
	/* The lease is checked after the look-up: if it still holds now, no other server could
	 * have served the partition (nor acknowledged a newer PUT) by the time we read the index
	 * (docs/kv.md, "Leased reads"). A check before the look-up would let a pause between the
	 * two serve a value read after the lease ended. */
	if (s->lease && !kv_lease_valid(s->lease, pt->id, now_ns())) {
		int who = kv_lease_holder(s->lease, pt->id);

		s->not_owner++;
		s->lease_refused++;
		if (who >= 0)
			reply_text(s, c, h->op, h->id, KV_S_NOT_OWNER, "owner %d", who);
		else
			reply_start(s, c, h->op, h->id, KV_S_NOT_OWNER, 0);
		return;
	}
	s->gets++;
	pt->gets++;
	if (!sl) {
		reply_start(s, c, h->op, h->id, KV_S_NOT_FOUND, 0);
		return;
	}
	klen = kv_get16(sl->rec + 8);
	vlen = kv_get32(sl->rec + 12);
	p = reply_start(s, c, h->op, h->id, KV_S_OK, 8 + vlen);
	if (p) {
		kv_put64(p, kv_slot_version(sl));
		memcpy(p + 8, sl->rec + KV_REC_HDR_SIZE + klen, vlen);
	}
}

/* Rejoining as a standby (rejoin_step): how often the serving thread looks when idle, and the
 * wait before standing by again after a standby round failed. */
#define REJOIN_TICK_MS 250
#define REJOIN_RETRY_MS 1000

static void part_failed(struct kv_server *s, struct part *pt, int err)
{
	fprintf(stderr, "twkv: partition %u: log failed (%s: %s): no longer served here\n",
		pt->id, tw_strerror(err), pt->p ? tw_primary_errmsg(pt->p) : "");
	pt->state = PART_FAILED;
	/* Closing it also ends our ZooKeeper session's owner node: a standby takes over. */
	kv_part_close(s, pt);
	/* And this server becomes a standby again (rejoin_step). */
	if (s->map.coordinator[0]) {
		s->rejoin = true;
		s->rejoin_at = now_ms();
	}
}

/* Append the n staged PUTs of partition pt (iov[i] the record of pd[i]) with one call. A
 * refused batch fails the partition, as a refused append did: every PUT of it is answered
 * UNKNOWN (the ones the call appended before it stopped may be in the log: the client must
 * not send them again, docs/kv.md "Guarantees"); NOT_OWNER if the partition did not serve (no
 * append tried). */
static void append_puts(struct kv_server *s, struct part *pt, struct iovec *iov,
			struct pending **pd, unsigned n)
{
	uint64_t lsns[KV_BATCH];
	bool tried = pt->state == PART_SERVING && pt->p;
	int rc;

	for (unsigned i = 0; i < n; i++)
		pd[i]->bnext = i + 1 < n ? pd[i + 1] : NULL;
	rc = tried ? tw_primary_append_batch(pt->p, iov, n, kv_on_batch, pd[0], lsns) : -TW_ECLOSED;
	if (rc < 0) {
		for (unsigned i = 0; i < n; i++) {
			struct conn *c = conn_by(s, pd[i]->conn, pd[i]->gen);

			if (!tried)
				s->not_owner++;
			if (c)
				reply_start(s, c, KV_OP_PUT, pd[i]->id,
					    tried ? KV_S_UNKNOWN : KV_S_NOT_OWNER, 0);
			pd[i]->next = s->pd_free;
			s->pd_free = pd[i];
		}
		if (pt->state == PART_SERVING)
			part_failed(s, pt, rc);
		return;
	}
	/* The callback may have run already (async mode), but it touches neither lsn nor the
	 * counters, and the serving thread (this one) completes the pendings later. */
	for (unsigned i = 0; i < n; i++)
		pd[i]->lsn = lsns[i];
	s->puts += n;
	s->put_batches++;
	pt->puts += n;
	if ((uint32_t)(lsns[n - 1] >> 32) > pt->head) {
		uint64_t used;

		pt->head = (uint32_t)(lsns[n - 1] >> 32);
		used = kv_mem_used(s);
		if (used > s->mem_peak)
			s->mem_peak = used;
	}
}

/* Append the staged PUTs: one tw_primary_append_batch per partition, in arrival order within
 * it. Called before the input buffer the records lie in is moved or grown, before any request
 * other than GET or PUT, and when KV_BATCH are staged. */
static void kv_flush_puts(struct kv_server *s)
{
	while (s->staged) {
		struct part *pt = s->stage_pd[0]->pt;
		struct iovec iov[KV_BATCH];
		struct pending *pd[KV_BATCH];
		unsigned n = 0, rest = 0;

		for (unsigned i = 0; i < s->staged; i++) {
			if (s->stage_pd[i]->pt == pt) {
				iov[n] = s->stage_iov[i];
				pd[n++] = s->stage_pd[i];
			} else {
				s->stage_iov[rest] = s->stage_iov[i];
				s->stage_pd[rest++] = s->stage_pd[i];
			}
		}
		s->staged = rest;
		append_puts(s, pt, iov, pd, n);
	}
}

static void do_put(struct kv_server *s, struct conn *c, const struct kv_hdr *h, uint8_t *body)
{
	struct pending *pd;
	struct kv_rec r;
	struct part *pt;
	uint64_t hash;

	if (!kv_rec_decode(body, h->len, &r)) {
		s->bad++;
		reply_text(s, c, h->op, h->id, KV_S_BAD, "malformed record");
		return;
	}
	hash = kv_hash(r.key, r.klen);
	pt = part_of(s, hash);
	if (pt->state != PART_SERVING) {
		s->not_owner++;
		reply_start(s, c, h->op, h->id, KV_S_NOT_OWNER, 0);
		return;
	}
	if ((size_t)h->len + TW_ENTRY_HDR_SIZE + TW_CKSUM_ENTRY_SIZE > s->cfg.segment_size) {
		s->bad++;
		reply_text(s, c, h->op, h->id, KV_S_BAD, "record of %u bytes does not fit a "
			   "segment of %zu", h->len, s->cfg.segment_size);
		return;
	}
	if (kv_mem_full(s)) {
		s->retries++;
		reply_start(s, c, h->op, h->id, KV_S_RETRY, 0);
		return;
	}
	pd = kv_pending_get(s);
	if (!pd) {
		reply_text(s, c, h->op, h->id, KV_S_ERROR, "out of memory");
		return;
	}
	pd->pt = pt;
	pd->hash = hash;
	pd->conn = c->slot;
	pd->gen = c->gen;
	pd->id = h->id;
	pd->version = pt->next_version++;
	pd->len = h->len;
	pd->klen = r.klen;
	kv_put64(body, pd->version);
	/* The one copy, the request's bytes into the log, is made for the whole burst at once
	 * (kv_flush_puts: one tw_primary_append_batch per partition). */
	s->stage_iov[s->staged] = (struct iovec){ .iov_base = body, .iov_len = h->len };
	s->stage_pd[s->staged++] = pd;
	if (s->staged == KV_BATCH)
		kv_flush_puts(s);
}

/*
 * The record pd appended, in the log's memory. A segment is one buffer and an LSN's low half
 * is the byte offset of its entry in it (tailwind/primary.h, docs/log-format.md), so the
 * records of a segment lie at one fixed distance from their offsets: one tw_primary_read per
 * segment (which checks the entry's CRC) gives it, and the records after it need no read, no
 * CRC and no decoding (docs/kv.md, "What a PUT costs the server"). The version the server wrote
 * into the record is checked against what it knows; a mismatch (which would be a bug) reads
 * the record the slow way once more.
 */
const uint8_t *kv_rec_at(struct part *pt, const struct pending *pd)
{
	uint32_t seg = (uint32_t)(pd->lsn >> 32), off = (uint32_t)pd->lsn;
	const uint8_t *rec;

	for (int tries = 0; tries < 2; tries++) {
		if (!pt->base || pt->base_seg != seg || tries) {
			const void *data;
			uint32_t len;

			pt->base = NULL;
			if (tw_primary_read(pt->p, pd->lsn, &data, &len) != 0 || len != pd->len)
				return NULL;
			/* data is the entry's payload, past its header at `off`: data - off
			 * stays inside the segment's buffer. */
			pt->base = (const uint8_t *)data - off;
			pt->base_seg = seg;
		}
		rec = pt->base + off;
		if (kv_get64(rec) == pd->version && kv_get16(rec + 8) == pd->klen)
			return rec;
	}
	return NULL;
}

/* An append is acknowledged (or failed): point the index at the record, answer the client,
 * from what the server knew when it appended (pd), not from a read of the log. */
static void complete(struct kv_server *s, struct pending *pd)
{
	struct part *pt = pd->pt;
	struct conn *c = pd->relocate ? NULL : conn_by(s, pd->conn, pd->gen);

	if (pd->relocate && pt->moving)
		pt->moving--;
	if (pd->status == 0 && pt->p) {
		const uint8_t *rec = kv_rec_at(pt, pd);
		struct kv_slot *sl = NULL;

		if (rec)
			sl = kv_index_slot(&pt->idx, pd->hash, rec + KV_REC_HDR_SIZE, pd->klen);
		if (!sl) {
			pd->status = rec ? -ENOMEM : -EIO;
		} else if (!sl->rec || kv_slot_version(sl) < pd->version ||
			   (pd->relocate && kv_slot_version(sl) == pd->version)) {
			/* Highest version wins; a relocated record replaces its own original. */
			sl->rec = rec;
			sl->len = pd->len;
			sl->lsn = pd->lsn;
		}
	} else if (pd->status == 0) {
		pd->status = -TW_ECLOSED;
	}
	if (c && pd->status == 0) {
		uint8_t *p = reply_start(s, c, KV_OP_PUT, pd->id, KV_S_OK, 8);

		if (p)
			kv_put64(p, pd->version);
	} else if (c) {
		/* Not acknowledged, and it may or may not be in the log: the client must not
		 * send it again (docs/kv.md "Guarantees"). */
		reply_start(s, c, KV_OP_PUT, pd->id, KV_S_UNKNOWN, 0);
	}
	if (pd->status < 0 && pt->state == PART_SERVING)
		part_failed(s, pt, pd->status);
	pd->next = s->pd_free;
	s->pd_free = pd;
}

static void do_stats(struct kv_server *s, struct conn *c, const struct kv_hdr *h)
{
	char buf[8192];
	size_t n = kv_stats_text(s, buf, sizeof(buf));
	uint8_t *p = reply_start(s, c, h->op, h->id, KV_S_OK, (uint32_t)n);

	if (p)
		memcpy(p, buf, n);
}

static void do_map(struct kv_server *s, struct conn *c, const struct kv_hdr *h)
{
	char buf[8192];
	int n;
	uint8_t *p;

	if (s->me < 0) {
		reply_text(s, c, h->op, h->id, KV_S_RETRY, "not configured yet");
		return;
	}
	n = kv_cluster_format(&s->map, buf, sizeof(buf));
	if (n < 0) {
		reply_text(s, c, h->op, h->id, KV_S_ERROR, "map too long");
		return;
	}
	p = reply_start(s, c, h->op, h->id, KV_S_OK, (uint32_t)n);
	if (p)
		memcpy(p, buf, (size_t)n);
}

/* Take the map as server `me`: start opening the partitions it owns and standing by for the
 * others it is named for. Returns how many are being opened, or -EINVAL. */
static int configure(struct kv_server *s, const char *text, size_t len, int me, char *err,
		     size_t errlen)
{
	struct kv_cluster map;
	int rc = kv_cluster_parse(text, len, &map, err, errlen), opening = 0;

	if (rc < 0)
		return rc;
	if (me < 0 || (unsigned)me >= map.nservers) {
		snprintf(err, errlen, "server id %d is not in the map (0..%u)", me, map.nservers - 1);
		return -EINVAL;
	}
	if (strcmp(map.servers[me].backup, tw_backup_listen_addr(s->backup))) {
		snprintf(err, errlen, "the map gives server %d the backup %s, but this server's "
			 "backup listens at %s", me, map.servers[me].backup,
			 tw_backup_listen_addr(s->backup));
		return -EINVAL;
	}
	/* The read leases' session, before any partition is opened or stood by for. */
	if (map.coordinator[0] && !s->lease) {
		rc = kv_lease_open(map.coordinator, me, s->cfg.session_ms, &s->lease, err, errlen);
		if (rc < 0)
			return rc;
		/* Its threads (the ZooKeeper client's two, the renewal) count as role other. */
		kv_role_new_threads(s, KV_ROLE_OTHER);
		fprintf(stderr, "twkv: read leases on ZooKeeper: session timeout %u ms, a lease "
			"lasts %.0f ms past each renewal's send (renewed every %u ms)\n",
			kv_lease_session_ms(s->lease),
			kv_lease_session_ms(s->lease) * (1.0 - KV_LEASE_DRIFT) - KV_LEASE_MARGIN_MS,
			kv_lease_session_ms(s->lease) / 3);
	}
	s->map = map;
	s->me = me;
	for (unsigned i = 0; i < map.nservers; i++)
		if ((int)i != me)
			s->peers[s->npeers++] = s->map.servers[i].backup;
	for (unsigned p = 0; p < map.partitions; p++) {
		s->parts[p].srv = s;
		s->parts[p].id = p;
	}
	/* Owned partitions first: a standby must find their owners in place. */
	for (unsigned p = 0; p < map.partitions; p++) {
		if (!(map.servers[me].owns >> p & 1))
			continue;
		rc = kv_part_start(s, p, ACQ_OPEN, err, errlen);
		if (rc < 0)
			return rc;
		opening++;
	}
	for (unsigned p = 0; p < map.partitions; p++) {
		if (!(map.servers[me].standby >> p & 1) || (map.servers[me].owns >> p & 1))
			continue;
		if (!map.coordinator[0]) {
			fprintf(stderr, "twkv: standby for partition %u needs a coordinator in the "
				"map; without one, take it over with `twkv takeover`\n", p);
			continue;
		}
		rc = kv_part_start(s, p, ACQ_STANDBY, err, errlen);
		if (rc < 0)
			return rc;
	}
	return opening;
}

static void do_configure(struct kv_server *s, struct conn *c, const struct kv_hdr *h,
			 const uint8_t *body)
{
	char err[512], *text;
	int me = -1, skip = 0, rc;

	if (s->me >= 0) {
		reply_text(s, c, h->op, h->id, KV_S_BAD, "already configured as server %d", s->me);
		return;
	}
	text = malloc((size_t)h->len + 1);
	if (!text) {
		reply_text(s, c, h->op, h->id, KV_S_ERROR, "out of memory");
		return;
	}
	memcpy(text, body, h->len);
	text[h->len] = 0;
	if (sscanf(text, "you %d\n%n", &me, &skip) < 1 || !skip ||
	    memchr(body, 0, h->len)) {
		free(text);
		reply_text(s, c, h->op, h->id, KV_S_BAD, "expected \"you ID\" and a cluster map");
		return;
	}
	rc = configure(s, text + skip, h->len - (size_t)skip, me, err, sizeof(err));
	free(text);
	if (rc < 0) {
		reply_text(s, c, h->op, h->id, KV_S_BAD, "%s", err);
		return;
	}
	if (rc == 0) {
		reply_start(s, c, h->op, h->id, KV_S_OK, 0);
		return;
	}
	s->cfg_waiter = true;
	s->cfg_conn = c->slot;
	s->cfg_gen = c->gen;
	s->cfg_id = h->id;
	s->cfg_left = (unsigned)rc;
}

static void do_takeover(struct kv_server *s, struct conn *c, const struct kv_hdr *h,
			const uint8_t *body)
{
	char err[256];
	struct part *pt;
	uint32_t p;

	if (s->me < 0 || h->len != 4 || (p = kv_get32(body)) >= s->map.partitions) {
		reply_text(s, c, h->op, h->id, KV_S_BAD, s->me < 0 ? "not configured" :
			   "expected a partition number below %u", s->map.partitions);
		return;
	}
	pt = &s->parts[p];
	if (pt->state == PART_SERVING) {
		reply_text(s, c, h->op, h->id, KV_S_OK, "already serving partition %u", p);
		return;
	}
	if (pt->state == PART_ACQUIRING || pt->waiter) {
		reply_text(s, c, h->op, h->id, KV_S_RETRY, "partition %u is being taken over", p);
		return;
	}
	if (pt->state == PART_FAILED)
		pt->state = PART_IDLE;
	if (kv_part_start(s, p, ACQ_TAKEOVER, err, sizeof(err)) < 0) {
		reply_text(s, c, h->op, h->id, KV_S_ERROR, "%s", err);
		return;
	}
	pt->waiter = true;
	pt->w_conn = c->slot;
	pt->w_gen = c->gen;
	pt->w_id = h->id;
}

static void handle(struct kv_server *s, struct conn *c, const struct kv_hdr *h, uint8_t *body)
{
	bool configured = s->me >= 0;

	if (h->op != KV_OP_GET && h->op != KV_OP_PUT)
		kv_flush_puts(s); /* a request that may change the partitions sees the PUTs first */
	switch (h->op) {
	case KV_OP_GET:
	case KV_OP_PUT:
		if (!configured) {
			reply_text(s, c, h->op, h->id, KV_S_NOT_OWNER, "not configured yet");
			break;
		}
		if (h->op == KV_OP_GET)
			do_get(s, c, h, body);
		else
			do_put(s, c, h, body);
		break;
	case KV_OP_MAP:
		do_map(s, c, h);
		break;
	case KV_OP_STATS:
		do_stats(s, c, h);
		break;
	case KV_OP_CONFIGURE:
		do_configure(s, c, h, body);
		break;
	case KV_OP_TAKEOVER:
		do_takeover(s, c, h, body);
		break;
	default:
		s->bad++;
		reply_text(s, c, h->op, h->id, KV_S_BAD, "unknown operation %u", h->op);
	}
}

/* Read what the client sent and handle every whole message. A header that is not ours (or a
 * reply, or a body beyond KV_MAX_BODY) closes the connection: framing is lost. */
static void conn_read(struct kv_server *s, struct conn *c)
{
	size_t off = 0;
	ssize_t n;

	if (c->in_cap - c->in_len < 4096 &&
	    kv_buf_reserve(&c->in, &c->in_cap, c->in_len + 4096) < 0) {
		conn_close(s, c);
		return;
	}
	n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(s, c);
		return;
	}
	c->in_len += (size_t)n;
	while (c->fd >= 0 && c->in_len - off >= KV_HDR_SIZE) {
		struct kv_hdr h;

		if (!kv_hdr_decode(c->in + off, &h) || (h.op & KV_REPLY)) {
			s->bad++;
			kv_flush_puts(s);
			conn_close(s, c);
			return;
		}
		if (c->in_len - off < KV_HDR_SIZE + h.len) {
			kv_flush_puts(s); /* before the buffer may move */
			if (kv_buf_reserve(&c->in, &c->in_cap, KV_HDR_SIZE + h.len) < 0)
				conn_close(s, c);
			break;
		}
		handle(s, c, &h, c->in + off + KV_HDR_SIZE);
		off += KV_HDR_SIZE + h.len;
	}
	kv_flush_puts(s); /* the burst's PUTs, before their records move */
	if (c->fd >= 0 && off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
}

/* ------------------------------------------------------------------ hand-overs */

static void install(struct kv_server *s, struct acquired *a)
{
	static const char *const how[] = { "opened", "taken over", "taken over as standby" };
	const char *what = a->mode == ACQ_OPEN && a->took_over ? how[1] : how[a->mode];
	struct part *pt = &s->parts[a->part];
	struct conn *c;

	pt->standby = false;
	if (a->rc == 0) {
		pt->p = a->p;
		pt->loop_fd = -1;
		if (s->loop_logs) {
			/* Sync mode: this loop waits on the log's descriptor and drives it. */
			int fd = tw_primary_wait_fd(pt->p);

			if (fd >= 0 && add_fd(s, fd, TAG_LOG | a->part) == 0)
				pt->loop_fd = fd;
			else
				fprintf(stderr, "twkv: partition %u: no descriptor to wait on (%s); "
					"its log is polled every %d ms\n", a->part,
					tw_strerror(fd < 0 ? fd : -errno), LOG_POLL_MS);
		}
		pt->base = NULL;
		pt->idx = a->idx;
		pt->next_version = a->next_version;
		pt->free_below = a->free_below;
		pt->head = a->head;
		pt->state = PART_SERVING;
		if (kv_mem_used(s) > s->mem_peak)
			s->mem_peak = kv_mem_used(s);
		if (a->took_over) {
			s->takeovers++;
			s->last_takeover_ms = a->takeover_ns / 1000000u;
			s->last_recovered = a->entries;
			s->last_live = a->live;
			s->last_reappend_ms = a->reappend_ns / 1000000u;
		}
		printf("serving partition %u epoch %" PRIu64 " %s recovered %" PRIu64 " live %"
		       PRIu64 " takeover_ms %.1f reappend_ms %.1f wait_ms %.1f\n", a->part, a->epoch,
		       what, a->entries, a->live, a->takeover_ns / 1e6, a->reappend_ns / 1e6,
		       a->wait_ns / 1e6);
		fflush(stdout);
	} else {
		pt->state = PART_IDLE;
		fprintf(stderr, "twkv: partition %u: %s: %s\n", a->part, tw_strerror(a->rc), a->err);
		if (a->mode == ACQ_STANDBY && s->map.coordinator[0]) {
			s->rejoin = true; /* stand by again, in a second */
			s->rejoin_at = now_ms() + REJOIN_RETRY_MS;
		}
	}
	if (a->mode == ACQ_OPEN && s->cfg_waiter) {
		c = conn_by(s, s->cfg_conn, s->cfg_gen);
		if (a->rc < 0 || --s->cfg_left == 0) {
			s->cfg_waiter = false;
			if (c && a->rc < 0)
				reply_text(s, c, KV_OP_CONFIGURE, s->cfg_id, KV_S_ERROR,
					   "partition %u: %s: %s", a->part, tw_strerror(a->rc), a->err);
			else if (c)
				reply_start(s, c, KV_OP_CONFIGURE, s->cfg_id, KV_S_OK, 0);
		}
	}
	if (pt->waiter) {
		pt->waiter = false;
		c = conn_by(s, pt->w_conn, pt->w_gen);
		if (c && a->rc < 0)
			reply_text(s, c, KV_OP_TAKEOVER, pt->w_id, KV_S_ERROR, "%s: %s",
				   tw_strerror(a->rc), a->err);
		else if (c)
			reply_text(s, c, KV_OP_TAKEOVER, pt->w_id, KV_S_OK, "recovered %" PRIu64
				   " entries, %" PRIu64 " live keys", a->entries, a->live);
	}
	free(a);
}

/* ------------------------------------------------------------------ rejoining */

/*
 * A server that no longer serves a partition stands by for it again by itself (docs/kv.md,
 * "Rejoining"): after its log failed (fenced by a new owner, or no backup left), after a standby
 * round failed, and after its lease session expired (a pause past the session timeout: a new
 * session first, then every partition this server served is let go, since another server has
 * taken it or will). It stands by for every partition of the map it does not serve, so that the
 * cluster's standby pool refills without an operator. Runs on the serving thread, on every pass
 * while rejoin is set and once every REJOIN_TICK_MS otherwise.
 */

/* The lease session expired: open another one and let go of what the old one covered. False
 * while that cannot be done yet (try again at the next tick). */
static bool renew_lease_session(struct kv_server *s)
{
	struct kv_lease *fresh = NULL;
	char err[256];
	unsigned busy;

	pthread_mutex_lock(&s->mu);
	busy = s->acquirers; /* their standby rounds end within a second (an expired lease) */
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return false;
	if (kv_lease_open(s->map.coordinator, s->me, s->cfg.session_ms, &fresh, err,
			  sizeof(err)) < 0) {
		fprintf(stderr, "twkv: a new lease session: %s; trying again\n", err);
		return false;
	}
	kv_role_new_threads(s, KV_ROLE_OTHER);
	kv_flush_puts(s);
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->p) {
			fprintf(stderr, "twkv: partition %u: let go (its read lease ended with the "
				"expired session; another server takes it over)\n", pt->id);
			kv_part_close(s, pt);
			pt->state = PART_IDLE;
		}
	}
	kv_lease_close(s->lease); /* no other thread uses it: no acquirer runs */
	s->lease = fresh;
	fprintf(stderr, "twkv: new lease session (timeout %u ms)\n", kv_lease_session_ms(fresh));
	return true;
}

static void rejoin_step(struct kv_server *s)
{
	char err[256], list[256];
	int n = 0;

	if (s->me < 0 || !s->map.coordinator[0] || s->stopping)
		return;
	if (s->lease && kv_lease_expired(s->lease)) {
		if (!renew_lease_session(s))
			return;
		s->rejoin = true;
		s->rejoin_at = now_ms();
	}
	if (!s->rejoin || now_ms() < s->rejoin_at)
		return;
	s->rejoin = false;
	list[0] = 0;
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->state != PART_IDLE && pt->state != PART_FAILED)
			continue;
		pt->state = PART_IDLE;
		if (kv_part_start(s, i, ACQ_STANDBY, err, sizeof(err)) < 0) {
			fprintf(stderr, "twkv: partition %u: cannot stand by: %s\n", i, err);
			s->rejoin = true;
			s->rejoin_at = now_ms() + REJOIN_RETRY_MS;
			continue;
		}
		if (n >= 0 && (size_t)n < sizeof(list))
			n += snprintf(list + n, sizeof(list) - (size_t)n, "%s%u", n ? "," : "", i);
	}
	if (list[0]) {
		s->rejoins++;
		fprintf(stderr, "twkv: standing by again for partition(s) %s\n", list);
	}
}

/* Completions queued by callbacks, the serving thread's own (loop_logs) or other threads'. */
static void take_done(struct kv_server *s)
{
	struct pending *done;

	s->done_local = false;
	pthread_mutex_lock(&s->mu);
	done = s->done_head;
	s->done_head = s->done_tail = NULL;
	pthread_mutex_unlock(&s->mu);
	while (done) {
		struct pending *chunk[KV_DONE_CHUNK];
		unsigned n = 0;

		for (; done && n < KV_DONE_CHUNK; done = done->next)
			chunk[n++] = done;
		/* Each completion looks its key up in the partition's index: two cache misses
		 * (slot, then the old record), overlapped across the chunk by the hints. A
		 * record's hint needs its slot loaded, so it goes KV_DONE_AHEAD completions
		 * before its lookup. */
		for (unsigned i = 0; i < n; i++)
			kv_index_prefetch(&chunk[i]->pt->idx, chunk[i]->hash);
		for (unsigned i = 0; i < n && i < KV_DONE_AHEAD; i++)
			kv_index_prefetch_rec(&chunk[i]->pt->idx, chunk[i]->hash);
		for (unsigned i = 0; i < n; i++) {
			if (i + KV_DONE_AHEAD < n)
				kv_index_prefetch_rec(&chunk[i + KV_DONE_AHEAD]->pt->idx,
						      chunk[i + KV_DONE_AHEAD]->hash);
			complete(s, chunk[i]);
		}
	}
}

/* Completions and partitions handed over by other threads. */
static void take_handoffs(struct kv_server *s)
{
	struct acquired *acq;
	uint64_t v;

	if (read(s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		perror("twkv: eventfd");
	take_done(s);
	pthread_mutex_lock(&s->mu);
	acq = s->acq_head;
	s->acq_head = NULL;
	pthread_mutex_unlock(&s->mu);
	for (struct acquired *next; acq; acq = next) {
		next = acq->next;
		install(s, acq);
	}
}

/* ------------------------------------------------------------------ start, loop, stop */

static void *backup_main(void *arg)
{
	struct kv_server *s = arg;
	int rc;

	kv_role_self(s, KV_ROLE_BACKUP);
	rc = tw_backup_run(s->backup);
	if (rc < 0)
		fprintf(stderr, "twkv: the backup stopped: %s: %s\n", tw_strerror(rc),
			tw_backup_errmsg(s->backup));
	return NULL;
}

static int listen_on(struct kv_server *s)
{
	const char *host = s->cfg.listen ? s->cfg.listen : "127.0.0.1";
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[NI_MAXHOST], port[NI_MAXSERV];
	int rc = getaddrinfo(host, s->cfg.port ? s->cfg.port : "0", &hints, &ai), one = 1;

	if (rc) {
		fprintf(stderr, "twkv: %s: %s\n", host, gai_strerror(rc));
		return -EINVAL;
	}
	s->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(s->lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(s->lfd, 128) < 0 ||
	    getsockname(s->lfd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		fprintf(stderr, "twkv: listen on %s: %s\n", host, strerror(errno));
		freeaddrinfo(ai);
		return -errno;
	}
	freeaddrinfo(ai);
	snprintf(s->kv_addr, sizeof(s->kv_addr), strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, port);
	return 0;
}

static int add_fd(struct kv_server *s, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN };

	ev.data.u64 = tag;
	return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int start(struct kv_server *s, sigset_t *sigs)
{
	struct tw_backup_config bc;
	char err[512];
	int rc;

	tw_backup_config_init(&bc);
	bc.provider = s->provider;
	bc.node = s->cfg.listen ? s->cfg.listen : "127.0.0.1";
	bc.service = s->cfg.backup_port;
	bc.dir = s->cfg.dir;
	bc.buffer_size = s->cfg.segment_size;
	bc.buffers = s->cfg.backup_buffers;
	rc = tw_backup_open(&bc, &s->backup, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twkv: backup: %s: %s\n", tw_strerror(rc), err);
		return rc;
	}
	kv_role_self(s, KV_ROLE_SERVE);
	kv_role_new_threads(s, KV_ROLE_BACKUP); /* what tw_backup_open started (its flusher) */
	rc = pthread_create(&s->backup_thread, NULL, backup_main, s);
	if (rc) {
		fprintf(stderr, "twkv: backup thread: %s\n", strerror(rc));
		(void)tw_backup_close(s->backup);
		s->backup = NULL;
		return -rc;
	}
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	s->sfd = signalfd(-1, sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->epfd < 0 || s->efd < 0 || s->sfd < 0)
		return -errno;
	rc = listen_on(s);
	if (rc < 0)
		return rc;
	if (add_fd(s, s->lfd, TAG_LISTEN) < 0 || add_fd(s, s->efd, TAG_EVENT) < 0 ||
	    add_fd(s, s->sfd, TAG_SIGNAL) < 0)
		return -errno;
	return 0;
}

static int configure_from_file(struct kv_server *s)
{
	char err[512], *text = NULL;
	size_t len = 0;
	FILE *f = fopen(s->cfg.cluster_file, "r");
	int rc;

	if (!f) {
		fprintf(stderr, "twkv: %s: %s\n", s->cfg.cluster_file, strerror(errno));
		return -errno;
	}
	text = malloc(65536);
	if (text)
		len = fread(text, 1, 65536, f);
	fclose(f);
	if (!text)
		return -ENOMEM;
	rc = configure(s, text, len, s->cfg.id, err, sizeof(err));
	free(text);
	if (rc < 0)
		fprintf(stderr, "twkv: %s: %s\n", s->cfg.cluster_file, err);
	return rc < 0 ? rc : 0;
}

/*
 * The first SIGTERM: stop taking partitions over, close the ones served here (their final close
 * RPCs reach backups that are still up), and keep the backup running while other servers' logs
 * have segments open on it or are still connected to it, up to DRAIN_MS: when a whole cluster stops at once, every log is
 * closed before any backup goes, and nobody fails over to nowhere.
 */
#define DRAIN_MS 2000

static void drain_start(struct kv_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->acq_cv); /* an open waiting for backups gives up */
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->p) {
			kv_part_close(s, pt);
			pt->state = PART_IDLE;
		}
	}
}

/*
 * Drained: no segment open here and no primary connected any more. Open segments alone are not
 * enough: a primary's close closes its segments on the backups before it lets go of its
 * connections, and a backup that left in between was reported lost by that closing primary
 * ("backup ... lost", "appends suspended": a stop that was asked for, seen as a loss).
 */
static bool drained(struct kv_server *s)
{
	struct tw_backup_stats bs;

	tw_backup_get_stats(s->backup, &bs);
	return bs.buffers_open == 0 &&
	       bs.connections <= bs.connections_lost + bs.connections_dropped;
}

static void stop(struct kv_server *s)
{
	struct pending *pd;

	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->acq_cv);
	/* Standbys notice within their wait (1 s); a takeover under way finishes and closes
	 * what it took. */
	while (s->acquirers)
		pthread_cond_wait(&s->acq_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	take_handoffs(s);
	for (unsigned i = 0; i < s->map.partitions; i++)
		if (s->parts[i].p)
			kv_part_close(s, &s->parts[i]);
	take_handoffs(s); /* the closes' last callbacks */
	kv_lease_close(s->lease);
	s->lease = NULL;
	for (uint32_t i = 0; i < s->nconns_cap; i++) {
		conn_close(s, s->conns[i]);
		free(s->conns[i]->in);
		free(s->conns[i]->out);
		free(s->conns[i]);
	}
	free(s->conns);
	while ((pd = s->pd_free)) {
		s->pd_free = pd->next;
		free(pd);
	}
	if (s->backup) {
		tw_backup_stop(s->backup);
		pthread_join(s->backup_thread, NULL);
		/* As twd on SIGTERM: what the other servers' logs wrote here goes to disk. */
		tw_backup_flush_all(s->backup);
		if (tw_backup_close(s->backup) < 0)
			fprintf(stderr, "twkv: backup: closed segments were not written (logged above)\n");
	}
}

/*
 * The logs this loop drives (loop_logs; docs/kv.md, "Threads"): before the loop sleeps, each
 * log may shorten the sleep (tw_primary_wait_prepare: 0 when it has work now, never more than
 * 100 ms); after it, each is progressed once, which runs its callbacks here.
 */
static int logs_prepare(struct kv_server *s, int timeout)
{
	if (!s->loop_logs)
		return timeout;
	if (s->done_local)
		return 0;
	for (unsigned i = 0; i < s->map.partitions && timeout != 0; i++) {
		struct part *pt = &s->parts[i];
		int ms;

		if (!pt->p)
			continue;
		ms = pt->loop_fd >= 0 ? tw_primary_wait_prepare(pt->p, timeout) : LOG_POLL_MS;
		if (ms < 0)
			ms = 0; /* the progress that follows reports the error */
		if (ms == 0)
			pt->loop_due = true;
		else
			pt->loop_at = now_ns() + (uint64_t)ms * 1000000u;
		if (timeout < 0 || ms < timeout)
			timeout = ms;
	}
	return timeout;
}

/* A log is progressed when it has work (its descriptor, prepare's 0) or its sleep is over
 * (deadlines); not on every wake-up of the loop: a poll finding nothing costs system calls. */
static void logs_progress(struct kv_server *s)
{
	uint64_t now;

	if (!s->loop_logs)
		return;
	now = now_ns();
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->p && (pt->loop_due || now >= pt->loop_at)) {
			pt->loop_due = false;
			tw_primary_progress(pt->p, 0);
		}
	}
	if (s->done_local)
		take_done(s);
}

int kv_server_run(const struct kv_server_config *cfg)
{
	struct kv_server *s = calloc(1, sizeof(*s));
	const char *prov = cfg->provider ? cfg->provider : getenv("FI_PROVIDER");
	struct epoll_event evs[64];
	sigset_t sigs;
	bool quit = false, more = false;
	uint64_t drain_end = 0;
	int rc;

	if (!s)
		return 1;
	s->cfg = *cfg;
	s->me = -1;
	s->epfd = s->lfd = s->efd = s->sfd = -1;
	snprintf(s->provider, sizeof(s->provider), "%s", prov && prov[0] ? prov : "tcp");
	/* shm has no descriptor to wait on (tailwind/primary.h): its logs keep their threads. */
	s->loop_logs = cfg->loop_logs && strcmp(s->provider, "shm") != 0;
	if (cfg->loop_logs && !s->loop_logs)
		fprintf(stderr, "twkv: --drive loop: shm logs have no descriptor to wait on; "
			"each keeps a progress thread\n");
	for (unsigned i = 0; i < KV_MAX_PARTITIONS; i++)
		s->parts[i].loop_fd = -1;
	on_serving_thread = true;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->cpu_mu, NULL);
	pthread_cond_init(&s->acq_cv, NULL);
	/* Every thread started from here on inherits the mask: SIGTERM and SIGINT arrive only
	 * through the signalfd of the serving thread. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = start(s, &sigs);
	if (rc == 0 && cfg->metrics) {
		char addr[300], why[512];

		/* After start(): its thread inherits the signal mask and wakes us on s->efd. */
		if (kv_metrics_start(s, cfg->metrics, addr, sizeof(addr), why, sizeof(why)) == 0) {
			printf("metrics %s\n", addr);
			kv_role_new_threads(s, KV_ROLE_OTHER); /* the HTTP thread */
		} else {
			fprintf(stderr, "twkv: --metrics %s: %s\n", cfg->metrics, why);
			rc = -EADDRINUSE;
		}
	}
	if (rc == 0) {
		printf("ready kv=%s backup=%s\n", s->kv_addr, tw_backup_listen_addr(s->backup));
		fflush(stdout);
		if (s->cfg.cluster_file)
			rc = configure_from_file(s);
	}
	while (rc == 0 && !quit) {
		/* Draining: look at the backup every 10 ms (its state has no descriptor). */
		int n = epoll_wait(s->epfd, evs, 64,
				   logs_prepare(s, more ? 0 : drain_end ? 10 : REJOIN_TICK_MS));

		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag == TAG_LISTEN) {
				accept_all(s);
			} else if (tag == TAG_EVENT) {
				take_handoffs(s);
				kv_metrics_serve(s); /* a scrape asked for the text */
			} else if (tag >= TAG_LOG && tag < TAG_LOG + KV_MAX_PARTITIONS) {
				s->parts[(unsigned)(tag & ~TAG_LOG)].loop_due = true; /* logs_progress */
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;

				if (read(s->sfd, &si, sizeof(si)) < 0)
					si.ssi_signo = 0;
				if (drain_end) { /* a second signal: stop now */
					quit = true;
				} else {
					drain_start(s);
					drain_end = now_ms() + DRAIN_MS;
				}
			} else if (tag < s->nconns_cap && s->conns[tag]->fd >= 0) {
				struct conn *c = s->conns[tag];

				if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					conn_read(s, c);
				if (c->fd >= 0 && (evs[i].events & EPOLLOUT))
					mark_dirty(s, c);
			}
		}
		logs_progress(s);
		/* The cleaner works in steps of a few thousand index slots between requests; a
		 * step that has to wait for its relocations' acknowledgements returns at once. */
		more = kv_part_clean(s);
		if (!drain_end)
			rejoin_step(s);
		flush_dirty(s);
		if (drain_end && (drained(s) || now_ms() >= drain_end))
			quit = true;
	}
	kv_metrics_stop(); /* before stop(): a scrape waiting for us gets its 503 now */
	stop(s);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->efd >= 0)
		close(s->efd);
	if (s->sfd >= 0)
		close(s->sfd);
	if (s->epfd >= 0)
		close(s->epfd);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->cpu_mu);
	pthread_cond_destroy(&s->acq_cv);
	free(s);
	return rc < 0 ? 1 : 0;
}
