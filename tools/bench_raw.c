/*
 * tools/bench_raw.c — twbench --mode raw. See bench.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "fabric/fabric.h"
#include "proto/rpc.h"

/* Bare one-sided writes of the same object bytes to the same backups, with the same batch and
 * in-flight limits, and no protocol: no entry headers, no checksum entries, no segments (one
 * buffer per backup, written round and round), no acknowledgement order beyond the slot ring.
 * The objects are copied into a registered source buffer (the primary copies them once too).
 * One thread posts and polls (the ceiling of the transport, as the primary's driver sees it). */

struct rawslot;

struct rawop {
	struct tw_op op; /* first */
	struct rawslot *s;
};

struct rawslot {
	struct rawop ops[MAX_BACKUPS];
	uint64_t first, n; /* objects */
	unsigned remaining;
	int status;
};

struct raw {
	struct tw_fab *fab;
	unsigned r;
	struct tw_peer peer[MAX_BACKUPS]; /* channel and RPC client per backup */
	struct tw_rkey rk[MAX_BACKUPS];
	bool opened[MAX_BACKUPS];
	uint8_t *src;
	size_t src_len, region; /* nslots + 1 regions of `region` bytes, then a zero page */
	struct tw_mr *mr;
	struct rawslot *slots;
	unsigned nslots;
	uint64_t head, tail;
	uint64_t roff;          /* next remote offset */
	uint64_t pend_first, pend_n;
	unsigned batch;
	uint32_t size;
	uint64_t writes;
	int err;
	uint64_t *t_submit;
	uint64_t *lat_ns;
};

static void raw_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct raw *w = arg;

	tw__peer_fab_on_lost(arg, ch, err);
	if (!w->err)
		w->err = err < 0 ? err : -TW_EPEERLOST;
}

static void raw_op_done(struct tw_op *op, int status)
{
	struct rawop *ro = (struct rawop *)op;

	if (status < 0 && !ro->s->status)
		ro->s->status = status;
	ro->s->remaining--;
}

static bool raw_slot_free(const struct raw *w)
{
	return w->head - w->tail < w->nslots;
}

/* Post the pending objects as one write to every backup. */
static int raw_post(struct raw *w)
{
	struct rawslot *s = &w->slots[w->head % w->nslots];
	uint8_t *src = w->src + (w->head % (w->nslots + 1)) * w->region;
	size_t len = w->pend_n * w->size;

	if (w->roff + len > w->rk[0].len)
		w->roff = 0;
	s->first = w->pend_first;
	s->n = w->pend_n;
	s->status = 0;
	s->remaining = w->r;
	w->head++;
	w->writes++;
	w->pend_first += w->pend_n;
	w->pend_n = 0;
	for (unsigned i = 0; i < w->r; i++) {
		struct rawop *ro = &s->ops[i];
		int rc;

		memset(&ro->op, 0, sizeof(ro->op));
		ro->op.cb = raw_op_done;
		ro->s = s;
		rc = tw__chan_write(w->peer[i].ch, &ro->op, src, len, w->mr, &w->rk[i], w->roff);
		if (rc < 0) {
			s->remaining--;
			if (!s->status)
				s->status = rc;
		}
	}
	w->roff += len;
	return 0;
}

/* Retire finished writes in order; record their objects' latency. */
static void raw_reap(struct raw *w)
{
	uint64_t now = 0;

	while (w->tail < w->head) {
		struct rawslot *s = &w->slots[w->tail % w->nslots];

		if (s->remaining)
			break;
		if (s->status && !w->err)
			w->err = s->status;
		/* The write's sampled objects (as bench_run.c's callbacks). */
		for (uint64_t i = (s->first + ACK_SAMPLE - 1) & ~(uint64_t)(ACK_SAMPLE - 1);
		     w->lat_ns && i < s->first + s->n; i += ACK_SAMPLE) {
			uint64_t d;

			if (!now)
				now = now_ns();
			d = now > w->t_submit[i] ? now - w->t_submit[i] : 0;
			w->lat_ns[i / ACK_SAMPLE] = d;
		}
		w->tail++;
	}
}

static void raw_drive(struct raw *w, int timeout_ms)
{
	tw__fab_progress(w->fab, timeout_ms);
	raw_reap(w);
}

static void raw_close(struct raw *w, uint64_t log_id)
{
	/* Make the buffers scan empty (type 0 at offset 0), then close them with offset 0, so
	 * the backups take them back without calling them corrupt. */
	for (unsigned i = 0; i < w->r && w->mr && !w->err; i++) {
		if (!w->opened[i])
			continue;
		struct rawop zop;
		struct rawslot zs;

		memset(&zs, 0, sizeof(zs));
		zs.remaining = 1;
		memset(&zop, 0, sizeof(zop));
		zop.op.cb = raw_op_done;
		zop.s = &zs;
		if (tw__chan_write(w->peer[i].ch, &zop.op, w->src + (w->nslots + 1) * w->region, 64,
				   w->mr, &w->rk[i], 0) < 0)
			continue;
		while (zs.remaining)
			tw__fab_progress(w->fab, 100);
	}
	for (unsigned i = 0; i < w->r; i++) {
		if (w->opened[i] && w->peer[i].rpc) {
			struct tw_rpc_seg_meta m = { log_id, 0, 0, 0 };

			tw__rpc_close_segment(w->peer[i].rpc, 1, &m, 0, NULL);
		}
		tw__peer_close(&w->peer[i]);
	}
	if (w->mr)
		tw__mr_close(w->mr);
	if (w->src)
		tw__fab_free(w->src, w->src_len);
	free(w->slots);
	if (w->fab)
		tw__fab_close(w->fab);
}

/* The raw run's fabric, source buffer and one buffer on each of the r backups (raw_close
 * undoes it, also after a failure here). */
static int raw_open(const struct opts *o, const char *const *addrs, const struct point *pt,
		    struct run *run, uint64_t log_id, struct raw *w)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { 0 };
	long pg = sysconf(_SC_PAGESIZE);
	int rc;

	memset(w, 0, sizeof(*w));
	w->r = pt->r;
	w->size = pt->size;
	w->nslots = pt->inflight;
	/* A write never exceeds the buffer (as a primary's write never exceeds a segment). */
	w->batch = pt->batch;
	if ((uint64_t)w->batch * pt->size > o->segment_size)
		w->batch = (unsigned)(o->segment_size / pt->size);
	w->region = ((size_t)w->batch * pt->size + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
	w->src_len = w->region * (w->nslots + 1) + (size_t)pg;
	w->t_submit = run->t_submit;
	w->lat_ns = run->lat_ns;
	tw__fab_config_init(&fc);
	fc.provider = o->provider;
	fc.busy_poll = o->busy_poll;
	if (fc.tx_depth < pt->inflight + 32)
		fc.tx_depth = pt->inflight + 32;
	ev.arg = w;
	ev.on_recv = tw__peer_fab_on_recv;
	ev.on_lost = raw_on_lost;
	rc = tw__fab_open(&fc, &ev, &w->fab);
	if (rc < 0) {
		fprintf(stderr, "twbench: raw: cannot open the fabric: %s\n", tw_strerror(rc));
		return rc;
	}
	w->slots = calloc(w->nslots, sizeof(*w->slots));
	w->src = tw__fab_alloc(w->src_len);
	if (!w->slots || !w->src)
		return -ENOMEM;
	rc = tw__mr_reg(w->fab, w->src, w->src_len, TW_MR_WRITE_SRC, &w->mr);
	if (rc < 0) {
		w->mr = NULL;
		return rc;
	}
	for (unsigned i = 0; i < w->r; i++) {
		struct tw_rpc_seg_meta m = { log_id, 0, 0, 0 };

		tw__peer_init(&w->peer[i], addrs[i], NULL);
		rc = bench_connect(&w->peer[i], w->fab);
		if (rc < 0) {
			if (w->peer[i].failed == TW_PEER_CONNECT)
				fprintf(stderr, "twbench: raw: cannot connect to %s: %s\n",
					addrs[i], tw_strerror(rc));
			return rc;
		}
		rc = tw__rpc_open_segment(w->peer[i].rpc, 1, &m, 0, o->segment_size, &w->rk[i]);
		if (rc < 0) {
			fprintf(stderr, "twbench: raw: %s refused a buffer: %s\n", addrs[i],
				tw_strerror(rc));
			return rc;
		}
		w->opened[i] = true;
		if (w->rk[i].len < w->rk[0].len)
			w->rk[0].len = w->rk[i].len; /* wrap at the smallest buffer */
	}
	return 0;
}

/* The stream: res->count objects, batched into writes of up to pt->batch, pt->inflight in
 * flight, paced at pt->rate when given; returns when all are acknowledged or one failed. */
static void raw_stream(const struct opts *o, const struct point *pt, struct result *res,
		       uint8_t *payload, uint64_t t0, struct raw *w)
{
	for (uint64_t i = 0; i < res->count && !w->err; i++) {
		if (pt->rate > 0) {
			uint64_t due = sched_ns(t0, pt->rate, i);

			while (now_ns() + 5000 < due) {
				uint64_t n;

				if (w->pend_n && raw_slot_free(w))
					raw_post(w);
				if (w->tail < w->head)
					raw_drive(w, 0);
				n = now_ns();
				/* Poll again within 50 us while writes are in flight; sleep, not spin. */
				wait_until(w->tail < w->head && due > n + 50000 ? n + 50000 : due);
			}
			w->t_submit[i] = due;
		} else if (ACK_SAMPLED(i)) {
			w->t_submit[i] = now_ns();
		}
		/* Back-pressure: at most `batch` objects wait while every slot is busy. */
		while (w->pend_n == w->batch && !w->err) {
			if (raw_slot_free(w))
				raw_post(w);
			else
				raw_drive(w, o->busy_poll ? 0 : 100);
		}
		memcpy(payload, &i, pt->size < 8 ? pt->size : 8);
		memcpy(w->src + (w->head % (w->nslots + 1)) * w->region + w->pend_n * pt->size, payload,
		       pt->size);
		if (!w->pend_n)
			w->pend_first = i;
		w->pend_n++;
		/* The ceiling: every write carries a full batch (the primary's writes carry at most
		 * that many); completions are polled every 256 objects and under back-pressure. In
		 * open-loop runs a free slot takes what waits while the next object is not due. */
		if ((i & 255) == 255)
			raw_drive(w, 0);
		if (w->pend_n == w->batch && raw_slot_free(w))
			raw_post(w);
		if (o->progress && (i & 0x3fff) == 0)
			progress_bar(i, res->count);
	}
	while (!w->err && (w->pend_n || w->tail < w->head)) {
		if (w->pend_n && raw_slot_free(w))
			raw_post(w);
		else
			raw_drive(w, o->busy_poll ? 0 : 100);
	}
}

/* Latency: one object per write, to r backups, waited for, o->lat_count times. */
static int raw_latency(const struct opts *o, const struct point *pt, struct result *res,
		       uint8_t *payload, struct run *run, struct raw *w)
{
	uint64_t n = o->lat_count;

	w->lat_ns = NULL;
	for (uint64_t i = 0; i < n && !w->err; i++) {
		uint64_t a = now_ns(), d;

		memcpy(payload, &i, pt->size < 8 ? pt->size : 8);
		memcpy(w->src + (w->head % (w->nslots + 1)) * w->region, payload, pt->size);
		w->pend_first = i;
		w->pend_n = 1;
		raw_post(w);
		while (w->tail < w->head && !w->err)
			raw_drive(w, o->busy_poll ? 0 : 100);
		d = now_ns() - a;
		run->lat_ns[i] = d;
	}
	if (w->err)
		return w->err;
	res->n_lat = n;
	pcts(run->lat_ns, n, &res->p50, &res->p99, &res->p999);
	return 0;
}

int run_raw(const struct opts *o, const char *const *addrs, struct result *res,
		   uint8_t *payload, struct run *run)
{
	const struct point *pt = &res->pt;
	struct raw w;
	struct cpumark c0, c1;
	uint64_t t0, t1, log_id = next_log_id();
	int rc;

	rc = raw_open(o, addrs, pt, run, log_id, &w);
	if (rc < 0 && !w.fab)
		return rc; /* nothing to close */
	if (rc < 0)
		goto out;
	cpu_mark(&c0);
	t0 = now_ns();
	raw_stream(o, pt, res, payload, t0, &w);
	t1 = now_ns();
	if (w.err) {
		rc = w.err;
		fprintf(stderr, "twbench: raw: a write failed: %s\n", tw_strerror(rc));
		goto out;
	}
	if (o->progress)
		progress_bar(res->count, res->count);
	cpu_mark(&c1);
	cpu_delta(&c0, &c1, res);
	res->secs = (double)(t1 - t0) / 1e9;
	res->st = (struct tw_primary_stats){.writes = w.writes, .segments = 1, .rpc_open = w.r,
					    .rpc_close = w.r, .rpcs = 2 * w.r};
	res->have_ack = true;
	pcts(run->lat_ns, ACK_SAMPLES(res->count), &res->a50, &res->a99, &res->a999);

	if (o->lat_count && pt->rate <= 0) {
		rc = raw_latency(o, pt, res, payload, run, &w);
		if (rc < 0)
			goto out;
	}
	rc = 0;
out:
	raw_close(&w, log_id);
	return rc;
}
