/*
 * fabric/ofi_bell.c — the doorbell of an idle shm listener (docs/fabric.md "Idle shm backups
 * sleep on a doorbell").
 *
 * libfabric 1.17's shm CQ has no wait object, and its peers' messages and delivery-complete
 * writes are carried out only by the target's own progress, so a twd on shm polled with a
 * backoff of at most OFI_BACKOFF_MAX_US (ofi_cq.c), idle or not. A listening shm fab now makes a
 * doorbell: a POSIX shm object "/tw_bell_NAME" (NAME: its endpoint name without fi_shm://, so a
 * peer finds it from the address it connects to) holding struct ofi_bell. Every peer that
 * connects maps it, says so in its HELLO, and rings it after each post and while it waits for
 * an operation of its own; the owner, once idle, sleeps in futex(2) on the page until rung,
 * woken (tw__fab_wakeup) or at its next deadline. A peer rings only when the owner has said it
 * sleeps, so a busy twd costs its peers one fence and one load per post.
 *
 * No lost wake-up: the owner reads `seq`, sets sleeping = 1, then looks at its queue once more
 * (a CQ read progresses the endpoint, which carries out every command queued in its region)
 * and sleeps only on the `seq` it read. A peer queues its command, then reads `sleeping`.
 * Every access to `sleeping` is a sequentially consistent read-modify-write (the peer's read
 * adds 0), so they are totally ordered and each one that reads another's value synchronizes
 * with it (all later changes being read-modify-writes, the release sequence never breaks).
 * Either the peer's comes first: then the owner's exchange to 1 synchronizes with it, the
 * command happens before the owner's last look, which sees it; or the owner's comes first:
 * then the peer reads 1 (or a later peer cleared it and rings) and rings: it bumps `seq`, which
 * makes a futex wait that has not started yet return at once, and FUTEX_WAKE ends one that has.
 * (No fences: TSan does not model atomic_thread_fence, and gcc refuses it under
 * -fsanitize=thread.)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/env.h"
#include "fabric/ofi_int.h"

/* Longest doorbell sleep: the periodic work of an shm fab (peer liveness, giving AV entries
 * back: ofi_rdm.c) then runs at least this often while it is idle. */
#define OFI_BELL_MAX_MS 100

#define BELL_HELLO "bell"

static void bell_name(const char *addr, char *out, size_t len)
{
	const char *n = strstr(addr, "://");

	snprintf(out, len, "/tw_bell_%s", n ? n + 3 : addr);
}

void tw__bell_create(struct ofi_fab *of)
{
	long page = sysconf(_SC_PAGESIZE);
	const char *env;
	struct ofi_bell *b;
	void *p;
	int fd;

	if (!of->shm || atomic_load_explicit(&of->bell, memory_order_relaxed))
		return;
	env = tw__env_get(TW__ENV_FAB_SHM_BELL);
	if (env && !strcmp(env, "off")) {
		tw_log_info("fabric shm: TW_FAB_SHM_BELL=off: no doorbell, an idle fab keeps polling");
		return;
	}
	if (env && strcmp(env, "on"))
		tw_log_warn("fabric shm: TW_FAB_SHM_BELL=%s: expected on or off; using the doorbell",
			    env);
	bell_name(of->name, of->bell_name, sizeof(of->bell_name));
	if (strchr(of->bell_name + 1, '/')) {
		tw_log_info("fabric shm: endpoint name %s: no doorbell, an idle fab keeps polling",
			    of->name);
		return;
	}
	/* Our endpoint name holds our pid, or is a named one that no live process holds (the
	 * open refused it otherwise, ofi_rdm.c shm_name_claim): an object of that name is a dead
	 * process's. */
	shm_unlink(of->bell_name);
	fd = shm_open(of->bell_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, page) != 0) {
		tw_log_info("fabric shm: doorbell %s: %s; an idle fab keeps polling", of->bell_name,
			    strerror(errno));
		if (fd >= 0) {
			close(fd);
			shm_unlink(of->bell_name);
		}
		return;
	}
	p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		tw_log_info("fabric shm: doorbell %s: mmap: %s; an idle fab keeps polling",
			    of->bell_name, strerror(errno));
		shm_unlink(of->bell_name);
		return;
	}
	b = p;
	b->pid = (int32_t)getpid();
	atomic_store(&b->seq, 0);
	atomic_store(&b->sleeping, 0);
	__atomic_store_n(&b->magic, OFI_BELL_MAGIC, __ATOMIC_RELEASE);
	of->bell_len = (size_t)page;
	atomic_store_explicit(&of->bell, b, memory_order_release);
	tw_log_debug("fabric shm: doorbell %s", of->bell_name);
}

void tw__bell_destroy(struct ofi_fab *of)
{
	struct ofi_bell *b = atomic_load_explicit(&of->bell, memory_order_relaxed);

	if (!b)
		return;
	atomic_store_explicit(&of->bell, NULL, memory_order_relaxed);
	munmap(b, of->bell_len);
	shm_unlink(of->bell_name);
}

void tw__bell_peer_open(struct ofi_fab *of, struct ofi_chan *ch)
{
	long page = sysconf(_SC_PAGESIZE);
	char name[TW_ADDR_MAX + 16];
	struct ofi_bell *b;
	void *p;
	int fd;

	if (!of->shm || ch->peer_bell)
		return;
	if (ch->self) { /* we post to ourselves only while awake */
		ch->rings_us = true;
		return;
	}
	bell_name(ch->base.peer, name, sizeof(name));
	if (strchr(name + 1, '/'))
		return;
	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return; /* the peer does not listen, or predates doorbells: it polls */
	p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return;
	b = p;
	/* A leftover of a dead process of the same name, or not set up yet: leave it. */
	if (__atomic_load_n(&b->magic, __ATOMIC_ACQUIRE) != OFI_BELL_MAGIC ||
	    (ch->peer_pid > 0 && b->pid != ch->peer_pid)) {
		munmap(p, (size_t)page);
		return;
	}
	ch->peer_bell = b;
	ch->peer_bell_len = (size_t)page;
	of->bells_out++;
}

void tw__bell_peer_close(struct ofi_chan *ch)
{
	if (!ch->peer_bell)
		return;
	munmap(ch->peer_bell, ch->peer_bell_len);
	ch->peer_bell = NULL;
	ofab(ch->base.fab)->bells_out--;
}

size_t tw__bell_hello(const struct ofi_fab *of, const struct ofi_chan *ch, char *out, size_t cap)
{
	size_t n = strlen(of->name) + 1;

	memcpy(out, of->name, n); /* of->name is shorter than TW_ADDR_MAX <= cap */
	if (ch->peer_bell && n + sizeof(BELL_HELLO) <= cap) {
		memcpy(out + n, BELL_HELLO, sizeof(BELL_HELLO));
		n += sizeof(BELL_HELLO);
	}
	return n;
}

bool tw__bell_said(const unsigned char *payload, size_t plen, bool hello)
{
	const unsigned char *end = payload + plen;

	if (hello) { /* skip the name */
		const unsigned char *nul = memchr(payload, '\0', plen);

		if (!nul)
			return false;
		payload = nul + 1;
	}
	return (size_t)(end - payload) == sizeof(BELL_HELLO) &&
	       !memcmp(payload, BELL_HELLO, sizeof(BELL_HELLO));
}

bool tw__bell_ring_slow(struct ofi_bell *b)
{
	/* One ring per sleep: the peer that clears the flag wakes the owner. */
	if (!atomic_exchange(&b->sleeping, 0))
		return false;
	atomic_fetch_add(&b->seq, 1);
	syscall(SYS_futex, &b->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	return true;
}

/* Whether every live channel's peer rings us when it posts, and nothing of ours is in flight
 * (our own operations complete through the peer's progress and our polls: keep polling). */
static bool may_sleep(struct ofi_fab *of)
{
	if (of->tx_inflight || of->pend_count)
		return false;
	for (struct tw_chan *c = of->base.chans; c; c = c->next) {
		const struct ofi_chan *ch = (const struct ofi_chan *)c;

		if (c->is_down || c->closed || c->lost)
			continue;
		if (c->state != CHAN_UP || !ch->rings_us || ch->deferred)
			return false;
	}
	return true;
}

int tw__bell_sleep(struct ofi_fab *of, int timeout_ms)
{
	struct ofi_bell *b = atomic_load_explicit(&of->bell, memory_order_relaxed);
	int ms = timeout_ms < 0 || timeout_ms > OFI_BELL_MAX_MS ? OFI_BELL_MAX_MS : timeout_ms;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	struct pollfd pfd = {.fd = of->evfd, .events = POLLIN};
	struct fi_cq_data_entry e;
	bool work = false, lk;
	uint32_t seq;
	ssize_t n;

	if (!b || ms == 0 || !may_sleep(of))
		return -1;
	seq = atomic_load(&b->seq);
	atomic_exchange(&b->sleeping, 1); /* before the last look (read-modify-write: above) */
	/* The last look. A completion read here waits in the FIFO for the next poll. */
	lk = tw__shm_local_enter(of->local_peers); /* ofi_rdm.c: peers in this process */
	tw__wedge_enter(of); /* shm: progress may wait for our region lock (ofi_wedge.c) */
	n = fi_cq_read(of->cq, &e, 1);
	tw__wedge_leave(of);
	tw__shm_local_leave(lk);
	of->base.stats.cq_polls++;
	if (n == 1) {
		of->pend[(of->pend_head + of->pend_count++) % TW_ARRAY_SIZE(of->pend)] = e;
		of->base.stats.cq_entries++;
	}
	if (n != -FI_EAGAIN) /* an entry, an error entry (the next poll reads it), a failure */
		work = true;
	if (of->rw_cntr) {
		uint64_t v;

		lk = tw__shm_local_enter(of->local_peers);
		tw__wedge_enter(of);
		v = fi_cntr_read(of->rw_cntr);
		tw__wedge_leave(of);
		tw__shm_local_leave(lk);
		if (v != of->rw_seen)
			work = true; /* remote writes carried out in that look: the backoff's */
	}
	if (poll(&pfd, 1, 0) > 0)
		work = true; /* tw__fab_wakeup: the caller reads the eventfd */
	if (!work) {
		of->base.stats.bell_sleeps++;
		syscall(SYS_futex, &b->seq, FUTEX_WAIT, seq, &ts, NULL, 0);
		work = atomic_load(&b->seq) != seq; /* rung; else the sleep ran out */
	}
	atomic_exchange(&b->sleeping, 0);
	if (work) { /* poll at once, then back off again before the next sleep */
		of->backoff_us = 1;
		of->idle_rounds = 0;
	}
	return 0;
}
