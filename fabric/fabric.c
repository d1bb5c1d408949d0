/*
 * fabric/fabric.c — the generic layer of fabric.h: configuration, backend dispatch, channel
 * lists, in-flight operation tracking, deadlines, loss handling, memory allocation.
 *
 * "Exactly once": an operation's callback runs either from its provider completion (backend
 * calls tw__op_finish) or from chan_fail_ops (loss, close, timeout), which first asks the backend to
 * abandon it (op_abandon), so a late provider completion finds no operation to complete.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "fabric/fab_int.h"

/* Message of the last failed tw__fab_open on this thread (tw__fab_errmsg(NULL)). */
static _Thread_local char open_errmsg[512];

static void chan_fail_ops(struct tw_chan *ch, int status);

void tw__fab_config_init(struct tw_fab_config *cfg)
{
	*cfg = (struct tw_fab_config){
		.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS,
		.op_timeout_ms = TW_DEFAULT_OP_TIMEOUT_MS,
		.max_msg_size = 65536,
		.rx_depth = 32,
		.tx_depth = 128,
	};
}

void tw__fab_set_errmsg(struct tw_fab *fab, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(fab->errmsg, sizeof(fab->errmsg), fmt, ap);
	va_end(ap);
	tw_log_debug("fabric %s: %s", fab->prov, fab->errmsg);
}

void tw__fab_open_errmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(open_errmsg, sizeof(open_errmsg), fmt, ap);
	va_end(ap);
}

static uint64_t random64(void)
{
	uint64_t v = 0;
	ssize_t n = getrandom(&v, sizeof(v), GRND_NONBLOCK);

	if (n != (ssize_t)sizeof(v)) /* early boot: fall back to something unpredictable enough */
		v ^= tw_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uintptr_t)&v;
	return v;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t tw__fab_gen_key(struct tw_fab *fab, size_t key_bytes)
{
	/* splitmix64 is a bijection: distinct counters give distinct 64-bit keys. With a shorter
	 * key the caller retries on a collision (-FI_ENOKEY). Never 0, which reads like "no key". */
	uint64_t k;

	do {
		k = splitmix64(fab->key_seed + fab->key_ctr++);
		if (key_bytes < 8)
			k &= (1ull << (8 * key_bytes)) - 1;
	} while (k == 0);
	return k;
}

void tw__fab_init_common(struct tw_fab *fab, const struct fab_ops *ops, const struct tw_fab_config *cfg,
		     const struct tw_fab_events *ev)
{
	fab->ops = ops;
	fab->cfg = *cfg;
	if (ev)
		fab->ev = *ev;
	fab->key_seed = random64();
	fab->next_chan_id = 1 + (uint32_t)(random64() & 0xffff);
	tw__fab_clock(fab);
}

uint64_t tw__fab_clock(struct tw_fab *fab)
{
	uint64_t raw = fab->cfg.clock_ns ? fab->cfg.clock_ns(fab->cfg.clock_arg) : tw_now_ns();

	/* Deadlines count only time the fab was looking (docs/fabric.md, "Deadlines and the
	 * clock"): a gap between two readings longer than TW_FAB_GAP_NS (or a quarter of the op
	 * timeout, if less) that was not spent in the fab's own wait (the thread was preempted on a
	 * busy machine, stopped, or its caller did other work) is left out beyond that much. Real
	 * clock only: a test's virtual clock jumps on purpose. */
	uint64_t gap = TW_MIN(TW_FAB_GAP_NS, (uint64_t)fab->cfg.op_timeout_ms * 250000u);

	if (!fab->cfg.clock_ns && fab->clock_raw && !fab->waited && raw > fab->clock_raw + gap) {
		fab->unobserved_ns += raw - fab->clock_raw - gap;
		fab->stats.unobserved_ns = fab->unobserved_ns;
	}
	fab->waited = false;
	fab->clock_raw = raw;
	fab->now_ns = raw - fab->unobserved_ns;
	return fab->now_ns;
}

uint64_t tw__fab_op_deadline(const struct tw_fab *fab)
{
	return fab->now_ns + (uint64_t)fab->cfg.op_timeout_ms * 1000000u;
}

/* Every message passes here: write messages are the fabric's own (wmsg.c). */
static void recv_hook(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_fab *fab = ch->fab;

	if (tw__wmsg_is(msg, len))
		tw__wmsg_recv(ch, msg, len);
	else if (fab->user_on_recv)
		fab->user_on_recv(arg, ch, msg, len);
}

/* Wrap the backend that just opened: the receive callback always (any fab serves write
 * messages), the write operation in TW_FAB_WRITE_MSG mode. On failure the fab is closed. */
static int hook(struct tw_fab *fab)
{
	int rc = tw__wmsg_init(fab);

	if (rc < 0) {
		tw__fab_open_errmsg("write messages: %s", tw_strerror(rc));
		fab->ops->close(fab);
		return rc;
	}
	fab->user_on_recv = fab->ev.on_recv;
	fab->ev.on_recv = recv_hook;
	if (fab->cfg.write_mode == TW_FAB_WRITE_MSG) {
		fab->hook_ops = *fab->ops;
		fab->hook_ops.write = tw__wmsg_write;
		fab->ops = &fab->hook_ops;
	}
	return 0;
}

/* "mem", or "mem-null": the in-memory fabric whose initiator copies nothing (benchmarks only:
 * fabric/mem.c, docs/twbench.md); said once per process, at warn level, since data sent on it
 * is placed by the target's thread later, not by the write. */
static int parse_provider(const char *want, bool *mem, bool *null_writes)
{
	static bool warned;

	*null_writes = !strcmp(want, "mem-null");
	*mem = *null_writes || !strcmp(want, "mem");
	if (*null_writes && !__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		tw_log_warn("fabric: provider mem-null is a benchmark transport (twbench-engine "
			    "--fabric null): in-process only, its writes complete before their bytes "
			    "are placed; do not use it for data you keep");
	return 0;
}

/* $TW_FAB_STRICT (tests, process-wide): "verbs" sets strict mode and aborts at the first
 * violation, so that a check failing in any process of an integration test (a twd that would
 * treat the failed call as a lost peer) fails the test; empty or unset: cfg.strict as given. */
static int strict_from_env(struct tw_fab_config *cfg)
{
	const char *s = tw__env_get(TW__ENV_FAB_STRICT);

	if (!s)
		return 0;
	if (strcmp(s, "verbs")) {
		tw__fab_open_errmsg("TW_FAB_STRICT=%s: the only strict mode is 'verbs'", s);
		return -EINVAL;
	}
	cfg->strict = TW_FAB_STRICT_VERBS_ABORT;
	return 0;
}

int tw__fab_open(const struct tw_fab_config *cfg_in, const struct tw_fab_events *ev,
		struct tw_fab **out)
{
	struct tw_fab_config cfg;
	const char *prov;
	bool mem, null_writes;
	int rc;

	*out = NULL;
	open_errmsg[0] = '\0';
	if (cfg_in)
		cfg = *cfg_in;
	else
		tw__fab_config_init(&cfg);
	if (!cfg.connect_timeout_ms)
		cfg.connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS;
	if (!cfg.op_timeout_ms)
		cfg.op_timeout_ms = TW_DEFAULT_OP_TIMEOUT_MS;
	if (!cfg.max_msg_size)
		cfg.max_msg_size = 65536;
	if (!cfg.rx_depth)
		cfg.rx_depth = 32;
	if (!cfg.tx_depth)
		cfg.tx_depth = 128;
	if (tw__env_get(TW__ENV_FAB_BUSY_POLL) && !strcmp(tw__env_get(TW__ENV_FAB_BUSY_POLL), "1"))
		cfg.busy_poll = true; /* for experiments: poll instead of blocking, process-wide */
	prov = cfg.provider;
	if (!prov || !*prov)
		prov = tw__env_get(TW__ENV_FI_PROVIDER);
	if (!prov || !*prov)
		prov = "tcp";
	if ((rc = strict_from_env(&cfg)) < 0) {
		tw_log_error("fabric: cannot open provider '%s': %s", prov, open_errmsg);
		return rc;
	}
	if ((unsigned)cfg.strict > TW_FAB_STRICT_VERBS_ABORT) {
		tw__fab_open_errmsg("unknown strict mode %d", (int)cfg.strict);
		tw_log_error("fabric: cannot open provider '%s': %s", prov, open_errmsg);
		return -EINVAL;
	}
	if (cfg.write_mode != TW_FAB_WRITE_ONESIDED && cfg.write_mode != TW_FAB_WRITE_MSG) {
		tw__fab_open_errmsg("unknown write mode %d", (int)cfg.write_mode);
		tw_log_error("fabric: cannot open provider '%s': %s", prov, open_errmsg);
		return -EINVAL;
	}
	parse_provider(prov, &mem, &null_writes);
	if (mem && cfg.strict != TW_FAB_STRICT_OFF) {
		tw__fab_open_errmsg("strict mode (verbs semantics) needs a libfabric FI_EP_MSG provider "
				"(tcp, sockets), not the in-memory fabric");
		rc = -ENOTSUP;
	} else if (mem) {
		rc = tw__mem_fab_open(&cfg, ev, null_writes, out);
	} else {
		rc = tw__ofi_fab_open(&cfg, ev, prov, out);
	}
	if (rc == 0 && (rc = hook(*out)) < 0)
		*out = NULL;
	if (rc < 0) {
		if (!open_errmsg[0])
			tw__fab_open_errmsg("%s", tw_strerror(rc));
		tw_log_error("fabric: cannot open provider '%s': %s", prov, open_errmsg);
		return rc;
	}
	snprintf((*out)->prov, sizeof((*out)->prov), "%s", prov);
	return 0;
}

void tw__fab_close(struct tw_fab *fab)
{
	if (!fab)
		return;
	/* Channels first, silently (no on_lost); their pending ops complete with -TW_ECLOSED. */
	fab->ev.on_lost = NULL;
	fab->ev.on_accept = NULL;
	fab->ev.on_recv = NULL;
	tw__fab_enter(fab);
	for (struct tw_chan *ch = fab->chans; ch; ch = ch->next)
		if (!ch->closed)
			tw__chan_close(ch);
	tw__fab_leave(fab);
	while (fab->mrs)
		tw__mr_close(fab->mrs);
	tw__wmsg_fini(fab);
	fab->ops->close(fab); /* frees fab */
}

void tw__fab_set_write_check(struct tw_fab *fab, tw_write_check_fn check)
{
	fab->write_check = check;
}

bool tw__fab_loss_blocks_others(const struct tw_fab *fab)
{
	return fab->loss_blocks;
}

int tw__fab_reset(struct tw_fab *fab)
{
	int rc;

	if (fab->depth)
		return -EBUSY; /* from inside a callback */
	tw__fab_enter(fab);
	fab->need_sweep = true; /* free the closed channels now */
	tw__fab_leave(fab);
	if (fab->chans)
		return -EBUSY;
	if (!fab->ops->reset)
		return -ENOTSUP;
	fab->wmsg_last = NULL;
	rc = fab->ops->reset(fab);
	if (rc < 0)
		tw_log_error("fabric %s: reset failed: %s (%s)", fab->prov, tw_strerror(rc),
			     fab->errmsg);
	return rc;
}

const char *tw__fab_provider(const struct tw_fab *fab)
{
	return fab->prov;
}

bool tw__fab_is_rdm(const struct tw_fab *fab)
{
	return fab->rdm;
}

const char *tw__fab_errmsg(const struct tw_fab *fab)
{
	if (!fab)
		return open_errmsg;
	return fab->errmsg;
}

int tw__fab_listen(struct tw_fab *fab, char *addr_out, size_t addr_len)
{
	return fab->ops->listen(fab, addr_out, addr_len);
}

int tw__fab_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out)
{
	int rc;

	*out = NULL;
	if (!addr || !*addr)
		return -EINVAL;
	tw__fab_enter(fab);
	rc = fab->ops->connect(fab, addr, out);
	if (rc == 0)
		(*out)->visible = true;
	tw__fab_leave(fab);
	return rc;
}

void tw__fab_set_connect_timeout(struct tw_fab *fab, unsigned ms)
{
	fab->cfg.connect_timeout_ms = ms ? ms : TW_DEFAULT_CONNECT_TIMEOUT_MS;
}

/* ---- channels ---------------------------------------------------------------------------- */

void tw__chan_init(struct tw_fab *fab, struct tw_chan *ch, const char *peer)
{
	ch->fab = fab;
	ch->id = fab->next_chan_id++;
	if (!ch->id)
		ch->id = fab->next_chan_id++;
	snprintf(ch->peer, sizeof(ch->peer), "%s", peer ? peer : "?");
	TW_DLIST_PUSH(fab->chans, ch);
}

static void chan_unlink(struct tw_chan *ch)
{
	TW_DLIST_REMOVE_NT(ch->fab->chans, ch);
}

struct tw_chan *tw__fab_find_chan(struct tw_fab *fab, uint32_t id)
{
	for (struct tw_chan *ch = fab->chans; ch; ch = ch->next)
		if (ch->id == id && !ch->closed)
			return ch;
	return NULL;
}

void tw__fab_enter(struct tw_fab *fab)
{
	fab->depth++;
}

void tw__fab_leave(struct tw_fab *fab)
{
	if (--fab->depth || !fab->need_sweep)
		return;
	fab->need_sweep = false;
	for (struct tw_chan *ch = fab->chans, *next; ch; ch = next) {
		next = ch->next;
		if (ch->closed) {
			chan_unlink(ch);
			fab->ops->chan_free(ch);
		}
	}
}

void tw__chan_close(struct tw_chan *ch)
{
	struct tw_fab *fab;

	if (!ch || ch->closed)
		return;
	fab = ch->fab;
	tw__fab_enter(fab);
	ch->closed = true;
	fab->ops->chan_down(ch, true);
	ch->is_down = true;
	chan_fail_ops(ch, -TW_ECLOSED);
	fab->need_sweep = true;
	tw__fab_leave(fab);
}

void tw__chan_shut(struct tw_chan *ch)
{
	struct tw_fab *fab;

	if (!ch || ch->closed || ch->is_down)
		return;
	fab = ch->fab;
	tw__fab_enter(fab);
	fab->ops->chan_down(ch, true);
	ch->is_down = true;
	chan_fail_ops(ch, -TW_ECLOSED);
	tw__fab_leave(fab);
}

void tw__chan_set_user(struct tw_chan *ch, void *user)
{
	ch->user = user;
}

void *tw__chan_user(const struct tw_chan *ch)
{
	return ch->user;
}

const char *tw__chan_peer(const struct tw_chan *ch)
{
	return ch->peer;
}

bool tw__chan_fast_writes(const struct tw_chan *ch)
{
	return ch->fast_write;
}

bool tw__chan_is_lost(const struct tw_chan *ch)
{
	return ch->lost || ch->closed;
}

struct tw_fab *tw__chan_fab(const struct tw_chan *ch)
{
	return ch->fab;
}

void tw__chan_announce(struct tw_chan *ch)
{
	struct tw_fab *fab = ch->fab;

	ch->state = CHAN_UP;
	ch->visible = true;
	tw_log_debug("fabric %s: accepted a channel from %s", fab->prov, ch->peer);
	if (fab->ev.on_accept)
		fab->ev.on_accept(fab->ev.arg, ch);
}

/* ---- operations -------------------------------------------------------------------------- */

void tw__op_track(struct tw_chan *ch, struct tw_op *op)
{
	op->chan = ch;
	/* From the post, not from the call: a write that first waited for queue space (behind a
	 * dead shm peer) gets its whole op_timeout_ms, as the failover relies on. No clock read:
	 * now_ns is fresh from the API entry or from the last stall round. */
	op->deadline_ns = tw__fab_op_deadline(ch->fab);
	TW_DLIST_APPEND(ch->ops_head, ch->ops_tail, op);
	ch->nops++;
}

void tw__op_finish(struct tw_op *op, int status)
{
	struct tw_chan *ch = op->chan;

	TW_DLIST_REMOVE(ch->ops_head, ch->ops_tail, op);
	ch->nops--;
	if (status < 0)
		ch->fab->stats.errors++;
	op->cb(op, status);
}

static void chan_fail_ops(struct tw_chan *ch, int status)
{
	while (ch->ops_head) {
		struct tw_op *op = ch->ops_head;

		ch->fab->ops->op_abandon(op);
		tw__op_finish(op, status);
	}
}

void tw__chan_set_lost(struct tw_chan *ch, int err)
{
	struct tw_fab *fab = ch->fab;

	if (ch->lost || ch->closed)
		return;
	tw__fab_enter(fab);
	ch->lost = true;
	ch->lost_err = err;
	if (ch->state != CHAN_UP)
		ch->state = CHAN_FAILED;
	fab->ops->chan_down(ch, false);
	ch->is_down = true;
	chan_fail_ops(ch, err);
	if (ch->visible && !ch->closed && fab->ev.on_lost) {
		tw_log_debug("fabric %s: channel to %s lost: %s", fab->prov, ch->peer, tw_strerror(err));
		fab->ev.on_lost(fab->ev.arg, ch, err);
	}
	tw__fab_leave(fab);
}

/* Earliest deadline of anything in flight on a live channel: the user's writes and reads
 * (oldest first, so the head's) and the backend's own (sends). */
static uint64_t chan_deadline(const struct tw_chan *ch)
{
	uint64_t d = UINT64_MAX, b;

	if (ch->closed || ch->lost || ch->is_down)
		return d;
	if (ch->ops_head)
		d = ch->ops_head->deadline_ns;
	if (ch->fab->ops->chan_deadline && (b = ch->fab->ops->chan_deadline(ch)) < d)
		d = b;
	return d;
}

/*
 * The one deadline tracker of every backend, against fab->now_ns (no clock read here).
 * Channels whose earliest deadline has passed are failed oldest first (not in list order):
 * when one dead peer holds up the endpoint's other operations behind it (shm), the first loss
 * reported is the dead peer's, and the user can tell it from its victims.
 */
int tw__fab_check_deadlines(struct tw_fab *fab)
{
	uint64_t now = fab->now_ns;
	int n = 0;

	for (;;) {
		struct tw_chan *first = NULL;
		uint64_t first_d = UINT64_MAX;

		for (struct tw_chan *ch = fab->chans; ch; ch = ch->next) {
			uint64_t d = chan_deadline(ch);

			if (d <= now && d < first_d) {
				first = ch;
				first_d = d;
			}
		}
		if (!first)
			break;
		tw__fab_set_errmsg(fab, "operation to %s not completed within %u ms", first->peer,
			   fab->cfg.op_timeout_ms);
		tw_log_warn("fabric %s: %s; failing the channel", fab->prov, fab->errmsg);
		tw__chan_set_lost(first, -ETIMEDOUT);
		n++; /* callbacks may have changed the list: look again */
	}
	return n;
}

static uint64_t next_deadline(const struct tw_fab *fab)
{
	uint64_t d = UINT64_MAX;

	for (const struct tw_chan *ch = fab->chans; ch; ch = ch->next) {
		if (ch->closed || ch->lost)
			continue;
		d = TW_MIN(d, chan_deadline(ch));
		if ((ch->state == CHAN_CONNECTING || ch->state == CHAN_ACCEPTING) &&
		    ch->hs_deadline_ns && ch->hs_deadline_ns < d)
			d = ch->hs_deadline_ns;
	}
	return d;
}

static int chan_usable(struct tw_chan *ch)
{
	if (ch->closed)
		return -TW_ECLOSED;
	if (ch->lost)
		return ch->lost_err ? ch->lost_err : -TW_EPEERLOST;
	if (ch->state != CHAN_UP)
		return -ENOTCONN;
	return 0;
}

static int check_local(const struct tw_mr *mr, const void *p, size_t len)
{
	uintptr_t b, e, a = (uintptr_t)p;

	if (!mr)
		return -EINVAL;
	b = (uintptr_t)mr->buf;
	e = b + mr->len;
	if (a < b || a > e || len > e - a)
		return -ERANGE;
	return 0;
}

static int check_remote(const struct tw_rkey *rk, uint64_t off, size_t len)
{
	if (!rk || off > rk->len || len > rk->len - off)
		return -ERANGE;
	return 0;
}

/* The checks and bookkeeping of tw__chan_write and tw__chan_read, then the backend's operation. */
static int chan_rma(struct tw_chan *ch, struct tw_op *op, void *local, size_t len,
		    struct tw_mr *mr, const struct tw_rkey *rk, uint64_t remote_off, bool read)
{
	struct tw_fab *fab = ch->fab;
	uint64_t raddr;
	int rc;

	if ((rc = chan_usable(ch)) < 0)
		return rc;
	if (!op || !op->cb || len == 0)
		return -EINVAL;
	if ((rc = check_local(mr, local, len)) < 0 || (rc = check_remote(rk, remote_off, len)) < 0)
		return rc;
	op->fab_tag = 0;
	tw__fab_clock(fab); /* the one clock read of a write or read */
	raddr = rk->addr + remote_off;
	tw__fab_enter(fab);
	if (read)
		rc = fab->ops->read(ch, op, local, len, mr, raddr, rk->key);
	else
		rc = fab->ops->write(ch, op, local, len, mr, raddr, rk->key);
	tw__fab_leave(fab);
	return rc;
}

int tw__chan_write(struct tw_chan *ch, struct tw_op *op, const void *src, size_t len,
		  struct tw_mr *src_mr, const struct tw_rkey *rk, uint64_t remote_off)
{
	return chan_rma(ch, op, (void *)(uintptr_t)src, len, src_mr, rk, remote_off, false);
}

int tw__chan_read(struct tw_chan *ch, struct tw_op *op, void *dst, size_t len, struct tw_mr *dst_mr,
		 const struct tw_rkey *rk, uint64_t remote_off)
{
	return chan_rma(ch, op, dst, len, dst_mr, rk, remote_off, true);
}

struct rma_wait {
	bool done;
	int status;
};

static void rma_wait_done(struct tw_op *op, int status)
{
	struct rma_wait *w = op->arg;

	w->done = true;
	w->status = status;
}

int tw__chan_rma_sync(struct tw_chan *ch, bool read, void *local, size_t len, struct tw_mr *mr,
		      const struct tw_rkey *rk, uint64_t remote_off)
{
	struct rma_wait w = { false, 0 };
	struct tw_op op;
	int rc;

	memset(&op, 0, sizeof(op));
	op.cb = rma_wait_done;
	op.arg = &w;
	rc = chan_rma(ch, &op, local, len, mr, rk, remote_off, read);
	if (rc)
		return rc;
	/* The operation holds &op and &w until its callback: progress until then, whatever a
	 * round returns (a failing channel fails it, at the latest at its deadline). */
	while (!w.done)
		(void)tw__fab_progress(ch->fab, 100);
	return w.status;
}

int tw__chan_send(struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_fab *fab = ch->fab;
	int rc;

	if ((rc = chan_usable(ch)) < 0)
		return rc;
	if (len > fab->cfg.max_msg_size)
		return -EMSGSIZE;
	if ((len && !msg) || tw__wmsg_is(msg, len))
		return -EINVAL;
	tw__fab_clock(fab);
	tw__fab_enter(fab);
	rc = fab->ops->send(ch, msg, len);
	tw__fab_leave(fab);
	return rc;
}

/*
 * One clock read per round, before the poll: what the round's callbacks post gets a deadline
 * from a fresh time, and the check after the poll comes late by the poll at most. The timeout
 * is how long the caller's thread may block, so it is real time even when the fab runs on a
 * virtual clock (cfg.clock_ns), which then costs a second read in the rounds that wait.
 */
/* wait_ms (-1: no limit) shortened to the fab's next deadline, read at `now`. */
static int until_deadline(const struct tw_fab *fab, uint64_t now, int wait_ms)
{
	uint64_t next = next_deadline(fab);

	if (next != UINT64_MAX) {
		uint64_t ms = next <= now ? 0 : (next - now + 999999) / 1000000u;

		if (wait_ms < 0 || ms < (uint64_t)wait_ms)
			wait_ms = (int)TW_MIN(ms, (uint64_t)1 << 30);
	}
	return wait_ms;
}

int tw__fab_progress(struct tw_fab *fab, int timeout_ms)
{
	uint64_t end = UINT64_MAX;
	int n = 0, rc;

	tw__fab_enter(fab);
	for (;;) {
		uint64_t now = tw__fab_clock(fab), real;
		int wait_ms = -1;

		rc = fab->ops->poll(fab);
		if (rc < 0) {
			n = rc;
			break;
		}
		n += rc;
		n += tw__fab_check_deadlines(fab);
		if (n > 0 || timeout_ms == 0)
			break;
		real = fab->cfg.clock_ns ? tw_now_ns() : now;
		if (timeout_ms > 0) {
			if (end == UINT64_MAX)
				end = real + (uint64_t)timeout_ms * 1000000u;
			if (real >= end)
				break;
			wait_ms = (int)((end - real + 999999) / 1000000u);
		}
		wait_ms = until_deadline(fab, now, wait_ms);
		if (fab->cfg.busy_poll)
			wait_ms = 0;
		rc = fab->ops->wait(fab, wait_ms);
		fab->waited = true; /* the time in the wait was spent looking: it counts */
		if (rc == 1) /* woken by tw__fab_wakeup */
			break;
		if (rc < 0) {
			n = rc;
			break;
		}
	}
	tw__fab_leave(fab);
	return n;
}

void tw__fab_wakeup(struct tw_fab *fab)
{
	fab->ops->wakeup(fab);
}

int tw__fab_wait_fd(struct tw_fab *fab)
{
	return fab->ops->wait_fd ? fab->ops->wait_fd(fab, false) : -ENOTSUP;
}

int tw__fab_wait_prepare(struct tw_fab *fab, int max_ms)
{
	int rc, wait_ms;

	if (!fab->ops->wait_fd)
		return -ENOTSUP;
	if (fab->cfg.busy_poll)
		return 0;
	rc = fab->ops->wait_fd(fab, true);
	if (rc == -EAGAIN)
		return 0;
	if (rc == -EINPROGRESS)
		return 1;
	if (rc < 0)
		return rc;
	wait_ms = until_deadline(fab, tw__fab_clock(fab), max_ms);
	if (wait_ms == 0)
		return 0; /* a deadline is due: the progress checks it */
	fab->waited = true; /* the caller sleeps on the descriptor: the fab is looking */
	return wait_ms;
}

void tw__fab_get_stats(const struct tw_fab *fab, struct tw_fab_stats *out)
{
	*out = fab->stats;
}

void tw__fab_write_counts(const struct tw_fab *fab, uint64_t *writes, uint64_t *fast_writes)
{
	*writes = fab ? __atomic_load_n(&fab->stats.writes, __ATOMIC_RELAXED) : 0;
	*fast_writes = fab ? __atomic_load_n(&fab->stats.fast_writes, __ATOMIC_RELAXED) : 0;
}

int tw__mem_inject(struct tw_chan *ch, const struct tw_mem_fault *fault)
{
	if (!ch->fab->ops->inject)
		return -ENOTSUP;
	return ch->fab->ops->inject(ch, fault);
}

/* ---- memory ------------------------------------------------------------------------------ */

void *tw__fab_alloc(size_t len)
{
	void *p;

	if (!len)
		return NULL;
	/* Anonymous mmap: page aligned and zero-filled by the kernel, each page on its first
	 * touch. Nothing is touched here: a buffer costs memory only as it is used (a twd's pool
	 * growing by 256 x 8 MiB, a context opening 256 logs, docs/fabric.md "Memory"). A
	 * provider that needs the pages backed at registration (FI_MR_ALLOCATED, verbs) gets
	 * them touched there (tw__mr_reg). */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	return p;
}

void *tw__fab_map_large(size_t len, bool *huge_out)
{
	const size_t huge = TW_FAB_HUGE_PAGE;
	uint8_t *p, *a;

	*huge_out = false;
	if (!len)
		return NULL;
	/* Explicit huge pages (hugetlbfs pool, vm.nr_hugepages): none are reserved by default,
	 * then the map fails at once and costs nothing. */
	if (len % huge == 0) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			*huge_out = true;
			return p;
		}
	}
	/* 4 KiB pages, aligned to the huge page size so that transparent huge pages
	 * (MADV_HUGEPAGE; /sys/kernel/mm/transparent_hugepage) can back whole 2 MiB runs. */
	p = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (p + len + huge > a + len)
		munmap(a + len, (size_t)(p + len + huge - (a + len)));
#ifdef MADV_HUGEPAGE
	(void)madvise(a, len, MADV_HUGEPAGE);
#endif
	return a;
}

void tw__fab_free(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

void tw__mr_link(struct tw_fab *fab, struct tw_mr *mr)
{
	mr->fab = fab;
	TW_DLIST_PUSH(fab->mrs, mr);
}

void tw__mr_unlink(struct tw_mr *mr)
{
	if (mr->fab->wmsg_last == mr)
		mr->fab->wmsg_last = NULL;
	TW_DLIST_REMOVE_NT(mr->fab->mrs, mr);
}

int tw__mr_reg(struct tw_fab *fab, void *buf, size_t len, unsigned access, struct tw_mr **out)
{
	*out = NULL;
	if (!buf || !len || !access)
		return -EINVAL;
	return fab->ops->mr_reg(fab, buf, len, access, out);
}

void tw__mr_close(struct tw_mr *mr)
{
	if (!mr)
		return;
	mr->fab->ops->mr_close(mr); /* the backend unlinks it (under its own lock if it has one) */
}

void tw__mr_rkey(const struct tw_mr *mr, struct tw_rkey *out)
{
	*out = mr->rk;
}

void *tw__mr_base(const struct tw_mr *mr)
{
	return mr->buf;
}

size_t tw__mr_len(const struct tw_mr *mr)
{
	return mr->len;
}
