/*
 * tests/lib/tlog.h — a test's log: the configuration of its primary (transport and log) and of
 * its recovery, and a record of the acknowledgements of its asynchronous appends. Header-only
 * (the benches use it).
 *
 *   struct tw_ctx_config tc;
 *   struct tw_primary_config cfg;
 *   struct tlog_acks a = { 0 };
 *   tlog_primary_config(&tc, &cfg, "mem", addrs, 4, 0x42);  // then the test's own fields
 *   p = tlog_open(&tc, &cfg, "what");
 *   tw_primary_append_async(p, buf, len, tlog_ack_cb, &a, NULL);
 *   ... is_int(a.errors, 0, ...); is_int(a.out_of_order, 0, ...);
 */
#ifndef TW_TESTS_TLOG_H
#define TW_TESTS_TLOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <time.h>

#include <tailwind/context.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "tap.h"

/* The log's fields, which a recovery's and a reader's configuration name alike: log_id on
 * backups[0..n) over provider. */
#define TLOG_CONFIG_LOG(cfg, provider_, backups_, n_, log_id_) \
	do {                                                   \
		(cfg)->provider = (provider_);                 \
		(cfg)->backups = (backups_);                   \
		(cfg)->n_backups = (n_);                       \
		(cfg)->log_id = (log_id_);                     \
	} while (0)

/* A primary's transport: tw_ctx_config_init (default timeouts), then backups[0..n) over
 * provider. */
static inline void tlog_transport(struct tw_ctx_config *tc, const char *provider,
				  const char *const *backups, size_t n)
{
	tw_ctx_config_init(tc);
	tc->provider = provider;
	tc->backups = backups;
	tc->n_backups = n;
}

/* tlog_transport(tc, ...), then tw_primary_config_init (3 replicas, default segment size) and
 * log_id at epoch 1. */
static inline void tlog_primary_config(struct tw_ctx_config *tc, struct tw_primary_config *cfg,
				       const char *provider, const char *const *backups, size_t n,
				       uint64_t log_id)
{
	tlog_transport(tc, provider, backups, n);
	tw_primary_config_init(cfg);
	cfg->log_id = log_id;
	cfg->epoch = 1;
}

/* tlog_primary_config over "mem" with 3 backups, then the segment size and mode a unit test of
 * the engine wants (and a 5 s open retry: the in-memory backups' pools refill meanwhile). */
static inline void tlog_mem_config(struct tw_ctx_config *tc, struct tw_primary_config *cfg,
				   const char *const *addrs, uint64_t log_id, uint32_t segment_size,
				   enum tw_primary_mode mode)
{
	tlog_primary_config(tc, cfg, "mem", addrs, 3, log_id);
	cfg->segment_size = segment_size;
	cfg->open_retry_ms = 5000;
	cfg->mode = mode;
}

/* tw_primary_open(tc, cfg), a TAP test of its own ("<what>: open", what from the printf format):
 * the log, or NULL when it did not open. */
static inline struct tw_primary *tlog_open(const struct tw_ctx_config *tc,
					   const struct tw_primary_config *cfg, const char *fmt,
					   ...) TAP_PRINTF(3, 4);
static inline struct tw_primary *tlog_open(const struct tw_ctx_config *tc,
					   const struct tw_primary_config *cfg, const char *fmt,
					   ...)
{
	struct tw_primary *p = NULL;
	char what[256], err[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	rc = tw_primary_open(tc, cfg, &p, err, sizeof(err));
	is_int(rc, 0, "%s: open (%s)", what, rc ? err : "ok");
	return rc ? NULL : p;
}

/* tw_recover_config_init (default timeouts), then log_id from backups[0..n) over provider. */
static inline void tlog_recover_config(struct tw_recover_config *cfg, const char *provider,
				       const char *const *backups, size_t n, uint64_t log_id)
{
	tw_recover_config_init(cfg);
	TLOG_CONFIG_LOG(cfg, provider, backups, n, log_id);
}

/* The acknowledgements of one log's appends (tw_primary_append_async callbacks). */
struct tlog_acks {
	uint64_t n;            /* callbacks */
	uint64_t ok;           /* of them with status 0 */
	uint64_t errors;       /* with an error; the first one's code: */
	int first_err;
	uint64_t out_of_order; /* callbacks whose lsn is not above the one before */
	uint64_t last_lsn;     /* the last callback's */
};

/* A tw_append_cb: arg is a struct tlog_acks. One thread (or the caller's lock). */
static inline void tlog_ack_cb(void *arg, int status, uint64_t lsn)
{
	struct tlog_acks *a = arg;

	if (a->n && lsn <= a->last_lsn)
		a->out_of_order++;
	a->last_lsn = lsn;
	a->n++;
	if (!status)
		a->ok++;
	else if (!a->errors++)
		a->first_err = status;
}

/* An embedder's epoll loop over one sync-mode log (docs/primary.md, "Driving a log from an
 * event loop"), counting how its sleeps ended; ep is an epoll set that holds
 * tw_primary_wait_fd(p). */
struct tlog_loop {
	int ep;
	uint64_t sleeps, fd_wakes, timeouts, passes;
};

/* One pass: prepare, sleep on the set if allowed, progress. Its code. */
static inline int tlog_loop_pass(struct tlog_loop *l, struct tw_primary *p)
{
	struct epoll_event ev;
	int ms = tw_primary_wait_prepare(p, -1);

	if (ms < 0)
		return ms;
	if (ms > 0) {
		l->sleeps++;
		if (epoll_wait(l->ep, &ev, 1, ms) > 0)
			l->fd_wakes++;
		else
			l->timeouts++;
	}
	l->passes++;
	return tw_primary_progress(p, 0);
}

/* Passes until `a` has `want` callbacks or `limit_ms` passed: 0, or the failed pass's code. */
static inline int tlog_loop_until(struct tlog_loop *l, struct tw_primary *p,
				  const struct tlog_acks *a, uint64_t want, unsigned limit_ms)
{
	struct timespec ts;
	uint64_t now, end;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	end = now + (uint64_t)limit_ms * 1000000u;
	while (a->n < want && now < end) {
		int rc = tlog_loop_pass(l, p);

		if (rc < 0)
			return rc;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	return 0;
}

/* tlog_acks with a count that another thread reads while the callbacks run (they run on the
 * progress thread in async mode, on the caller's in sync mode; one at a time). */
struct tlog_acks_mt {
	struct tlog_acks a;
	atomic_uint_fast64_t n;
};

/* A tw_append_cb: arg is a struct tlog_acks_mt. */
static inline void tlog_ack_mt_cb(void *arg, int status, uint64_t lsn)
{
	struct tlog_acks_mt *x = arg;

	tlog_ack_cb(&x->a, status, lsn);
	atomic_fetch_add(&x->n, 1);
}

#endif
