/*
 * fabric/ofi_rdm.c — FI_EP_RDM (shm, tcp;ofi_rxm, verbs;ofi_rxm): one endpoint + AV per fab,
 * channels are (fi_addr, peer channel id) pairs.
 *
 * Addresses: the listen address is fi_getname of the endpoint — shm's unique
 * "fi_shm://pid:uid:idx" string (fi_getinfo(NULL, NULL, 0)), or "ip:port" for sockaddr formats.
 * Handshake: connect = av_insert(peer) + HELLO{our channel id, our address}; the listener
 * av_inserts us, creates a channel, calls on_accept and answers ACK{its channel id}; connect
 * waits for the ACK up to connect_timeout_ms.
 * Demultiplexing: every message carries a 16-byte header (magic|type, receiver's channel id,
 * sender's channel id, payload length); ids are never reused within a fab, so messages for a
 * closed channel are dropped. (Chosen over FI_SOURCE/fi_cq_readfrom: no extra caps needed, and
 * it also tells two channels to the same peer apart.)
 * Close: BYE to the peer (best effort), av_remove once it completed; in-flight operations of
 * the channel become orphans (their caller ops were completed with an error). shm keeps one AV
 * entry per peer endpoint instead, given back only when that endpoint is gone ("AV entries on
 * shm" below).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "fabric/ofi_int.h"

void tw__rdm_put_hdr(unsigned char *p, enum rdm_type type, uint32_t dst, uint32_t src, uint32_t len)
{
	tw_store_le32(p, RDM_MAGIC | (uint32_t)type);
	tw_store_le32(p + 4, dst);
	tw_store_le32(p + 8, src);
	tw_store_le32(p + 12, len);
}

/* Our endpoint name as a string. */
static int own_name(struct ofi_fab *of)
{
	char raw[TW_ADDR_MAX];
	size_t len = sizeof(raw);
	int rc = fi_getname(&of->ep->fid, raw, &len);

	if (rc) {
		tw__fab_open_errmsg("fi_getname: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	if (of->addr_str) {
		raw[TW_MIN(len, sizeof(raw) - 1)] = '\0';
		snprintf(of->name, sizeof(of->name), "%s", raw);
	} else {
		tw__sockaddr_to_str(raw, of->name, sizeof(of->name));
	}
	return 0;
}

/*
 * shm's CMA fast path (docs/fabric.md "Passive shm backups"). In libfabric 1.17,
 * smr_generic_rma() (prov/shm/src/smr_rma.c) lets the initiator copy a write itself with
 * process_vm_writev and only then write its completion when all of these hold:
 *   - domain->fast_rma: the domain's mr_mode has FI_MR_VIRT_ADDR and its tx msg_order none of
 *     the RMA orderings (smr_fast_rma_enabled, prov/shm/src/smr.h);
 *   - the write has neither FI_REMOTE_CQ_DATA nor FI_DELIVERY_COMPLETE, and one remote iov;
 *   - smr_cma_enabled(): our region's cma_cap_peer (cma_cap_self when writing to ourselves)
 *     is SMR_CMA_CAP_ON (include/ofi_shm.h).
 * The first two are ours to choose. The capability is one byte per region (per endpoint,
 * not per peer): SMR_CMA_CAP_NA at creation, SMR_CMA_CAP_OFF at fi_enable with
 * FI_SHM_DISABLE_CMA=1 or FI_HMEM (smr_ep.c), else set by smr_cma_check()
 * (prov/util/src/util_shm.c) at the first mapping of a peer: a test process_vm_writev into
 * the peer, or the peer's answer copied from its region. It is written only while NA, so once
 * ON it stays ON. We cannot ask libfabric for it, so we read it where libfabric does: the
 * region is a POSIX shm object named after our endpoint ("fi_shm://NAME" → shm_open(NAME)),
 * whose header (struct smr_region, SMR_VERSION 4) starts: uint8 version, uint8 resv,
 * uint16 flags, int pid, uint8 cma_cap_peer, uint8 cma_cap_self. We trust that layout only
 * for libfabric 1.17 at run time, version byte 4 and our own pid in it; anything else keeps
 * FI_DELIVERY_COMPLETE for good.
 */
#define SMR_V117_VERSION 4
#define SMR_V117_OFF_PID 4
#define SMR_V117_OFF_CMA_PEER 8
#define SMR_V117_OFF_CMA_SELF 9
#define SMR_V117_CMA_ON 1
#define SMR_V117_OFF_LOCK TW_SMR_V117_OFF_LOCK /* ofi_int.h */

/* Peers in this process (below). Writers first: the readers of several polling threads could
 * otherwise keep a closing endpoint waiting for good. No thread takes it twice. */
static pthread_rwlock_t local_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static atomic_uint local_closes; /* endpoints closed under the lock */
static atomic_uint local_chans;  /* channels that may lead to this process (ofi_wedge.c) */

unsigned tw__shm_local_chans(void)
{
	return atomic_load(&local_chans);
}

void tw__shm_local_rdlock(void)
{
	pthread_rwlock_rdlock(&local_lock);
}

void tw__shm_local_unlock(void)
{
	pthread_rwlock_unlock(&local_lock);
}
#define RMA_ORDERS (FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS | FI_ORDER_WAR | FI_ORDER_WAW | \
		    FI_ORDER_WAS | FI_ORDER_SAR | FI_ORDER_SAW | FI_ORDER_RMA_RAR | \
		    FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAR | FI_ORDER_RMA_WAW | \
		    FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | \
		    FI_ORDER_ATOMIC_WAW)

/* shm: map our region header if the CMA fast path is possible at all (after the endpoint is
 * enabled); unmap it at close. */
static void shm_fast_init(struct ofi_fab *of)
{
	const char *env = tw__env_get(TW__ENV_FAB_SHM_FAST);
	const char *name = strstr(of->name, "://");
	uint32_t v = fi_version();
	long page = sysconf(_SC_PAGESIZE);
	unsigned char hdr[16];
	void *p;
	int fd, pid;

	if (!of->shm) /* not shm */
		return;
	/* The default where it is certain (docs/fabric.md "Passive shm backups"): the target
	 * checks no key and no range, so a fence moves a fenced writer's buffers away (guard.c);
	 * a writer killed inside a write leaves the region lock held, which the twd frees
	 * (ofi_wedge.c); an idle twd sleeps on its doorbell (ofi_bell.c). TW_FAB_SHM_FAST=off
	 * keeps delivery-complete writes. */
	if (env && !strcmp(env, "off"))
		return;
	if (env && strcmp(env, "on")) {
		tw_log_warn("fabric shm: TW_FAB_SHM_FAST=%s: expected on or off; keeping "
			    "delivery-complete", env);
		return;
	}
	if (FI_MAJOR(v) != 1 || FI_MINOR(v) != 17) {
		tw_log_debug("fabric shm: libfabric %u.%u: CMA fast path not relied on", FI_MAJOR(v),
			     FI_MINOR(v));
		return;
	}
	if (!(of->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ||
	    (of->info->tx_attr->msg_order & RMA_ORDERS)) {
		tw_log_debug("fabric shm: mr_mode/msg_order exclude the CMA fast path");
		return;
	}
	name = name ? name + 3 : of->name;
	fd = shm_open(name, O_RDONLY, 0);
	if (fd < 0) {
		tw_log_debug("fabric shm: shm_open(%s): %s; no CMA fast path", name, strerror(errno));
		return;
	}
	p = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		tw_log_debug("fabric shm: mmap(%s): %s; no CMA fast path", name, strerror(errno));
		return;
	}
	memcpy(hdr, p, sizeof(hdr));
	memcpy(&pid, hdr + SMR_V117_OFF_PID, sizeof(pid));
	if (hdr[0] != SMR_V117_VERSION || pid != (int)getpid()) {
		tw_log_info("fabric shm: region %s has version %u pid %d (want %u, %d): not relying "
			    "on the CMA fast path", name, hdr[0], pid, SMR_V117_VERSION, (int)getpid());
		munmap(p, (size_t)page);
		return;
	}
	of->shm_region = p;
	of->shm_region_len = (size_t)page;
}

void tw__rdm_shm_fast_fini(struct ofi_fab *of)
{
	if (of->shm_region)
		munmap((void *)(uintptr_t)of->shm_region, of->shm_region_len);
	of->shm_region = NULL;
}

bool tw__rdm_shm_fast(struct ofi_fab *of, struct ofi_chan *ch)
{
	bool fast = false;

	if (of->shm_region)
		fast = of->shm_region[ch->self ? SMR_V117_OFF_CMA_SELF : SMR_V117_OFF_CMA_PEER] ==
		       SMR_V117_CMA_ON;
	ch->base.fast_write = fast;
	return fast;
}

/*
 * A dead shm peer (docs/failover.md "shm: a killed backup"). 1.17's shm takes the spinlock of
 * the peer's region (pthread_spin_lock(&peer_smr->lock), prov/shm/src/smr_rma.c, smr_msg.c,
 * smr_atomic.c, smr_ep.c smr_send_name) before every post to it, and the peer takes it in its
 * own progress (smr_progress_cmd, prov/shm/src/smr_progress.c). The lock lives in the shared
 * region: a peer SIGKILLed holding it leaves it held for good, and the next post to it spins
 * inside libfabric forever. shm itself never checks that a peer is alive after mapping it: only
 * smr_create's smr_retry_map (prov/util/src/util_shm.c) looks at /proc/PID, for a stale region
 * under its own name.
 *
 * So we watch each peer ourselves. At connect (before the HELLO) and at accept we map the
 * first page of the peer's region read-only (the same shm object libfabric maps), take its PID
 * from the header (or from the address, fi_shm://PID:..., where it has one) and open a pidfd
 * (pidfd_open(2): readable once the process has exited, zombie included; no PID-reuse problem
 * after the open).
 * Then:
 *   - before every post (tw__rdm_shm_may_post, ofi_int.h): if the lock word is held, we
 *     do not post; the slow path spins on it with a pidfd check every SHM_SPIN pauses (dead:
 *     the channel is lost) and, held too long, lets tw__post_tx progress and retry until its
 *     deadline. Also when the
 *     channel's oldest operation is older than TW_SHM_STALE_MS, the pidfd is checked (at most
 *     once per TW_SHM_STALE_MS per channel) before posting more;
 *   - every TW_SHM_CHECK_MS the progress round polls all watched pidfds at once, so a dead
 *     peer is reported lost even while nothing is posted to it.
 * What remains: the peer may die holding its lock between our load of the lock word and
 * libfabric's pthread_spin_lock a few instructions later (nanoseconds; only a SIGKILL landing
 * inside the peer's own critical section in that instant). A third process (another writer)
 * killed while holding the peer's lock is also not posted behind (we never post while the
 * word is held); the peer itself spins in its own progress until its watchdog frees the lock
 * (ofi_wedge.c), as ours does for our region.
 */
#define TW_SHM_CHECK_MS 5
#define SHM_SPIN 4096u      /* pauses between two pidfd checks while the lock is held */
#define SHM_SPIN_MAX 65536u /* then back to progress and retry */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* What a free pthread spinlock holds: glibc's x86_64 assembly spinlocks count down from 1
 * (free: 1, held: <= 0), its generic ones hold 0 when free. Asked of glibc, not assumed. */
int tw__shm_spin_free_value(void)
{
	pthread_spinlock_t l;
	int v;

	pthread_spin_init(&l, PTHREAD_PROCESS_SHARED);
	memcpy(&v, (const void *)&l, sizeof(v));
	pthread_spin_destroy(&l);
	return v;
}

static void shm_unwatch(struct ofi_chan *ch);

/* shm: start watching the peer process of `ch` (at connect, before the HELLO; at accept). */
static void shm_watch(struct ofi_fab *of, struct ofi_chan *ch)
{
	const char *name = strstr(ch->base.peer, "://");
	long page = sysconf(_SC_PAGESIZE);
	uint32_t v = fi_version();
	int pid = 0, fd;
	void *p;

	ch->pidfd = -1;
	if (!of->shm || ch->self || ch->watched)
		return;
	name = name ? name + 3 : ch->base.peer;
	fd = shm_open(name, O_RDONLY, 0);
	if (fd >= 0) {
		p = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (p != MAP_FAILED) {
			const unsigned char *h = p;

			ch->peer_map = p;
			ch->peer_map_len = (size_t)page;
			if (h[0] == SMR_V117_VERSION && FI_MAJOR(v) == 1 && FI_MINOR(v) == 17) {
				memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
				ch->peer_lock = (const volatile int *)(h + SMR_V117_OFF_LOCK);
				ch->lock_free = tw__shm_spin_free_value();
			}
		}
	}
	/* Else the address: fi_shm://PID:... (smr_resolve_addr, smr_init.c); a named peer
	 * (fi_ns://SERVICE) has none there, only in its header. */
	if (pid <= 0) {
		char *end;
		long l = strtol(name, &end, 10);

		if (end != name && (*end == ':' || *end == '\0') && l > 0 && l < INT32_MAX)
			pid = (int)l;
	}
	ch->peer_pid = pid;
	ch->watched = true;
	if (pid == (int)getpid()) { /* another endpoint of this process (below) */
		ch->local = true;
		ch->local_seen = atomic_load(&local_closes);
		of->local_peers = true;
	}
	if (pid <= 0 || pid == (int)getpid()) {
		if (!ch->wd_counted) { /* a thread of ours may post to our region (ofi_wedge.c) */
			ch->wd_counted = true;
			atomic_fetch_add(&local_chans, 1);
		}
		ch->watched = ch->peer_lock != NULL; /* the lock check still applies */
		if (!ch->watched)
			shm_unwatch(ch);
		return;
	}
#ifdef SYS_pidfd_open
	ch->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (ch->pidfd < 0 && errno == ESRCH) {
		ch->peer_gone = true; /* dead already: the first post fails the channel */
	} else if (ch->pidfd < 0) {
		tw_log_ratelimited(TW_DIAG_WARN, "fabric shm: pidfd_open(%d): %s; the death of %s "
				   "is seen by the op timeout only", pid, strerror(errno),
				   ch->base.peer);
	} else {
		fcntl(ch->pidfd, F_SETFD, FD_CLOEXEC);
	}
#endif
	tw_log_debug("fabric shm: watching %s: pid %d (pidfd %d), region lock %s", ch->base.peer,
		     pid, ch->pidfd, ch->peer_lock ? "known" : "unknown");
}

static void shm_unwatch(struct ofi_chan *ch)
{
	if (ch->pidfd >= 0)
		close(ch->pidfd);
	ch->pidfd = -1;
	if (ch->peer_map)
		munmap(ch->peer_map, ch->peer_map_len);
	ch->peer_map = NULL;
	ch->peer_lock = NULL;
	ch->watched = false;
}

static void peer_died(struct ofi_fab *of, struct ofi_chan *ch)
{
	ch->peer_gone = true;
	if (ch->base.lost || ch->base.is_down || ch->base.closed || ch->going_down)
		return;
	tw__fab_set_errmsg(&of->base, "shm peer %s (pid %d) has exited", ch->base.peer,
			   ch->peer_pid);
	tw_log_warn("fabric shm: %s; failing the channel without posting to it", of->base.errmsg);
	tw__chan_set_lost(&ch->base, -TW_EPEERLOST);
}

/* One poll(2) of the pidfd: true if the peer has exited (and the channel is then lost). */
static bool peer_dead(struct ofi_fab *of, struct ofi_chan *ch)
{
	struct pollfd pfd = {.fd = ch->pidfd, .events = POLLIN};

	if (!ch->peer_gone && ch->pidfd >= 0 && poll(&pfd, 1, 0) == 1)
		ch->peer_gone = true;
	if (ch->peer_gone)
		peer_died(of, ch);
	return ch->peer_gone;
}

bool tw__rdm_shm_may_post_slow(struct ofi_fab *of, struct ofi_chan *ch)
{
	uint64_t now = of->base.now_ns;

	_Static_assert(sizeof(pthread_spinlock_t) == sizeof(int), "spinlock is an int");
	/* Held: wait for it here, as libfabric's pthread_spin_lock would, but with a way out: the
	 * pidfd every SHM_SPIN pauses (a syscall only while contended), and after SHM_SPIN_MAX
	 * pauses back to tw__post_tx, which progresses and retries until the post's deadline (a
	 * live process that keeps the lock that long is stuck, or another writer died in it). */
	for (unsigned i = 1; ch->peer_lock && *ch->peer_lock != ch->lock_free; i++) {
		cpu_relax();
		if (i % SHM_SPIN)
			continue;
		ch->checked_ns = now;
		of->base.stats.shm_peer_checks++;
		if (peer_dead(of, ch))
			return false;
		if (i >= SHM_SPIN_MAX) {
			of->base.stats.shm_lock_waits++;
			return false;
		}
	}
	if (!ch->peer_gone && now < ch->checked_ns + TW_SHM_STALE_MS * 1000000ull)
		return true; /* stale ops only, and checked a moment ago */
	ch->checked_ns = now;
	of->base.stats.shm_peer_checks++;
	return !peer_dead(of, ch);
}

/*
 * Peers in this process (docs/fabric.md "shm: a peer endpoint of this process closed"). A twkv
 * server runs its primary's fab and its embedded backup's fab in one process, and the primary
 * connects to its own backup. libfabric 1.17's shm maps a peer endpoint of the same process by
 * borrowing that endpoint's own mapping: smr_map_to_region (prov/util/src/util_shm.c) finds the
 * name in the process-wide ep_name_list and takes its `region` pointer. The endpoint's fi_close
 * (smr_ep_close → smr_free) unlinks and munmaps its region but never takes the name off that
 * list, and nothing tells the other endpoints' AVs: their entries keep pointing at unmapped
 * memory. The next post to it (smr_generic_sendmsg → pthread_spin_lock(&peer_smr->lock),
 * prov/shm/src/smr_msg.c; smr_rma.c likewise), a command of the closed endpoint still queued
 * whose response goes to its region (smr_progress_cmd, prov/shm/src/smr_progress.c), or a
 * later insert of its name died of SIGSEGV: the crashes of issue 34's long shm run, in the
 * backup's reply to an RPC of its own primary after the primary closed or reset its fab. Our
 * pidfd watch does not see it (the process lives), nor the lock check (our own mapping of the
 * header stays valid).
 *
 * So a fab that had a channel to another endpoint of this process (`local_peers`):
 *   - at its endpoint's close keeps its region mapped where it was: it opens the shm object
 *     first and, right after fi_close, maps it again at the same address (MAP_FIXED_NOREPLACE:
 *     never over a mapping made meanwhile). The other endpoints' pointers stay valid; what they
 *     post lands in a region nobody progresses (a BYE went first; the op timeout ends the rest).
 *     Each such close keeps the pages touched of that region (the command queue and the inject
 *     buffers used: at most its size) until the process exits;
 *   - does that under local_lock held for writing, and bumps local_closes;
 *   - posts to a peer of this process and the progress of a fab that has one hold the lock for
 *     reading around the libfabric call, so none runs between the munmap and the new mapping;
 *   - before such a post, when local_closes moved since the channel last looked, the
 *     channel checks that the peer's region still exists (/dev/shm: smr_free unlinks it at the
 *     close; a region kept for an unread connection request goes later, and ofi_keep.c bumps
 *     local_closes then) and is lost if not, instead of posting into the dead region.
 * The lock is uncontended but while an endpoint of this process closes; channels to other
 * processes never take it. Only libfabric 1.17's region header (SMR_VERSION 4) is trusted for
 * the address and size; with any other, the endpoint closes as before (and logs it).
 */

#define SMR_V117_OFF_BASE 16                      /* void *base_addr */
#define SMR_V117_OFF_TOTAL (SMR_V117_OFF_LOCK + 16) /* lock, signal, map; size_t total_size */

static int region_stat(const char *name, struct stat *st);

bool tw__rdm_local_may_post(struct ofi_fab *of, struct ofi_chan *ch)
{
	unsigned n = atomic_load(&local_closes);
	struct stat st;

	if (n == ch->local_seen)
		return true;
	ch->local_seen = n;
	if (region_stat(ch->base.peer, &st) == 0 || errno != ENOENT)
		return true;
	ch->peer_gone = true;
	if (!ch->base.lost && !ch->base.is_down && !ch->base.closed && !ch->going_down) {
		tw__fab_set_errmsg(&of->base, "shm peer %s (an endpoint of this process) was "
				   "closed", ch->base.peer);
		tw_log_warn("fabric shm: %s; failing the channel without posting to it",
			    of->base.errmsg);
		tw__chan_set_lost(&ch->base, -TW_EPEERLOST);
	}
	return false;
}

/* Our region's address and size in this process, read from its header (libfabric 1.17 only),
 * and a descriptor of its shm object to map it again; false if not known. */
static bool own_region(struct ofi_fab *of, void **base, size_t *len, int *fd_out)
{
	const char *name = strstr(of->name, "://");
	long page = sysconf(_SC_PAGESIZE);
	uint32_t v = fi_version();
	const unsigned char *h;
	bool ok = false;
	void *p;
	int fd, pid;

	if (!name || FI_MAJOR(v) != 1 || FI_MINOR(v) != 17)
		return false;
	fd = shm_open(name + 3, O_RDWR, 0);
	if (fd < 0)
		return false;
	p = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED) {
		h = p;
		memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
		memcpy(base, h + SMR_V117_OFF_BASE, sizeof(*base));
		memcpy(len, h + SMR_V117_OFF_TOTAL, sizeof(*len));
		ok = h[0] == SMR_V117_VERSION && pid == (int)getpid() && *base && *len;
		munmap(p, (size_t)page);
	}
	if (!ok) {
		close(fd);
		return false;
	}
	*fd_out = fd;
	return true;
}

void tw__rdm_local_bump(void)
{
	atomic_fetch_add(&local_closes, 1);
}

static void close_ep(struct ofi_fab *of)
{
	void *base = NULL, *p;
	size_t len = 0;
	int fd = -1;

	if (!of->shm || !of->local_peers) {
		fi_close(&of->ep->fid);
		return;
	}
	pthread_rwlock_wrlock(&local_lock);
	atomic_fetch_add(&local_closes, 1);
	if (!own_region(of, &base, &len, &fd)) {
		fi_close(&of->ep->fid);
		pthread_rwlock_unlock(&local_lock);
		tw_log_warn("fabric shm: %s closed without keeping its region (its layout is not "
			    "known): another endpoint of this process still posting to it may crash",
			    of->name);
		return;
	}
	fi_close(&of->ep->fid); /* smr_free: shm_unlink, munmap */
	p = mmap(base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	pthread_rwlock_unlock(&local_lock);
	close(fd);
	if (p == base) {
		tw_log_debug("fabric shm: %s closed; its region (%zu bytes) stays mapped for the "
			     "endpoints of this process that knew it", of->name, len);
		return;
	}
	if (p != MAP_FAILED)
		munmap(p, len); /* a kernel without MAP_FIXED_NOREPLACE put it elsewhere */
	tw_log_warn("fabric shm: %s closed; its region could not stay mapped (%s): another "
		    "endpoint of this process still posting to it may crash", of->name,
		    p == MAP_FAILED ? strerror(errno) : "mapped elsewhere");
}

void tw__rdm_close_ep(struct ofi_fab *of)
{
	/* shm: a connection request of ours still unread keeps our region (ofi_keep.c) */
	struct tw__keep *k = of->shm ? tw__keep_prepare(of) : NULL;

	close_ep(of);
	if (of->shm)
		tw__keep_add(k);
}

/*
 * AV entries on shm (docs/fabric.md "AV entries on shm"). libfabric 1.17's shm AV holds
 * SMR_MAX_PEERS = 256 peers (include/ofi_shm.h; smr_av_insert inserts nothing beyond, and
 * counts every insert, even of a name it holds already), and a peer's connection request adds
 * it to the same map without any check (smr_progress_connreq → smr_map_add,
 * prov/util/src/util_shm.c). fi_av_remove frees the slot but leaves state behind:
 * smr_av_remove calls smr_map_del, which sets the slot's peer.id to -1, before
 * smr_unmap_from_endpoint, which returns early on that -1, so neither our region's record of
 * the slot (addr.id: the peer's index for us, name_sent, sar_status) nor the peer's record of us
 * is reset. A later occupant of the slot inherits our record, and a live peer that removed us
 * keeps sending with its old index (what "new sends returned -FI_EAGAIN" was, before entries
 * were kept). Keeping every entry made a twd refuse every new peer after 256 endpoints.
 *
 * So: one entry per peer endpoint name, shared by its channels (no second insert), and given
 * back only when every one of these holds:
 *   - the fab listens and has never connected out (give_back): its slots are then filled by
 *     the peers' connection requests, and smr_progress_connreq writes a fresh addr.id into the
 *     slot it picks, so the stale record of a freed slot is overwritten before it is used
 *     (connecting out would insert first and trust the stale record);
 *   - the entry was made for a HELLO (the peer's connection request mapped it first);
 *   - no channel uses it and no context posted to it is still in the provider: a response
 *     it would complete goes through the slot's region (smr_progress_resp);
 *   - the peer's endpoint is gone, so nothing of it refers to us any more: its process exited
 *     (pidfd readable) or its region is no longer the one we mapped (smr_free unlinks it at
 *     fi_close: the name is gone, or names another object);
 *   - a CQ read has run since that was seen: its commands still queued in our region (written
 *     before it went) are processed first, while its region is still mapped.
 * What is not given back: a peer whose connection request was processed but whose HELLO never
 * arrived (no name to find the slot by), and an entry with an operation the provider never
 * completes (a peer gone with a request of ours unanswered). Each costs one of the 256 slots
 * until the twd restarts.
 */
#define AV_SWEEP_MS 100

static struct rdm_peer *peer_find(struct ofi_fab *of, const char *name)
{
	for (struct rdm_peer *p = of->peers; p; p = p->next)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

/* The shm object behind a peer name ("fi_shm://NAME" → /dev/shm/NAME, where smr_create puts it
 * and smr_map_to_region looks: SMR_DIR in include/ofi_shm.h). */
static int region_stat(const char *name, struct stat *st)
{
	const char *n = strstr(name, "://");
	char path[TW_ADDR_MAX + 16];

	snprintf(path, sizeof(path), "/dev/shm/%s", n ? n + 3 : name);
	return stat(path, st);
}

/* Start tracking a new entry made for a HELLO on a give-back fab: the peer's pidfd (a copy of
 * the channel watch's) and the identity of its region. */
static void peer_track(struct ofi_fab *of, struct rdm_peer *p, struct ofi_chan *ch)
{
	struct stat st;

	p->accepted = true;
	if (ch->pidfd >= 0)
		p->pidfd = fcntl(ch->pidfd, F_DUPFD_CLOEXEC, 0);
	if (region_stat(p->name, &st) == 0) {
		p->dev = st.st_dev;
		p->ino = st.st_ino;
	} else {
		p->gone_polls = of->base.stats.cq_polls; /* closed already */
	}
}

/*
 * A peer restarted under the same name (a named endpoint: "Named shm endpoints" above) while
 * we hold an entry for it: 1.17's entry still maps the old process's region, and inserting the
 * name again gives the same entry (smr_map_add finds the name in its map; smr_map_to_region
 * returns at once when the entry has a region). Removing the entry is no way out for a fab
 * that connects: the slot keeps our region's record of the old peer (name_sent, addr.id;
 * "AV entries on shm" above), and the next insert that takes the slot would trust it. So we
 * keep the old entry (one of the 256 slots, until the fab is reset or closed) and insert the
 * name again under another spelling: shm's map is keyed by the whole string, and the region
 * is found by the part after "://" (smr_no_prefix, include/ofi_shm.h), so "twN://NAME" is a
 * new slot mapping the same object. A restarted named peer has a new object (shm_name_claim
 * removes the dead one's), so its identity tells the two apart.
 */
static bool peer_restarted(const struct rdm_peer *p)
{
	struct stat st;

	return p->region_known && region_stat(p->name, &st) == 0 &&
	       (st.st_dev != p->dev || st.st_ino != p->ino);
}

/* An entry for `name` (one more reference): the one we hold, or a new fi_av_insert. */
static int peer_get(struct ofi_fab *of, const char *name, struct rdm_peer **out)
{
	struct rdm_peer *p = peer_find(of, name);
	char spelled[TW_ADDR_MAX + 16];
	const char *ins = name;
	unsigned gen = 0;
	struct stat st;
	int rc;

	if (p && !peer_restarted(p)) {
		p->refs++;
		*out = p;
		return 0;
	}
	if (p) {
		const char *n = strstr(name, "://");

		gen = p->gen + 1;
		snprintf(spelled, sizeof(spelled), "tw%u://%s", gen, n ? n + 3 : name);
		ins = spelled;
		tw_log_info("fabric shm: %s is a new process under the same name; a new AV entry "
			    "for it (%s)", name, spelled);
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->gen = gen;
	if (region_stat(name, &st) == 0) { /* before the insert maps it: never a newer one */
		p->dev = st.st_dev;
		p->ino = st.st_ino;
		p->region_known = true;
	}
	rc = fi_av_insert(of->av, ins, 1, &p->addr, 0, NULL);
	if (rc != 1) {
		/* 1.17's shm answers 0 when its table is full (smr_av_insert: no error code) */
		tw__fab_set_errmsg(&of->base, "fi_av_insert(%s): %s", name, rc < 0 ?
				   fi_strerror(-rc) : "refused (shm knows at most 256 peers)");
		free(p);
		return rc < 0 ? tw__ofi_errno(rc) : -EINVAL;
	}
	p->pidfd = -1;
	p->refs = 1;
	p->next = of->peers;
	of->peers = p;
	of->base.stats.shm_av_peers++;
	*out = p;
	return 0;
}

static void peer_free(struct ofi_fab *of, struct rdm_peer *p)
{
	for (struct rdm_peer **pp = &of->peers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (p->pidfd >= 0)
		close(p->pidfd);
	of->base.stats.shm_av_peers--;
	free(p);
}

void tw__rdm_peers_free(struct ofi_fab *of)
{
	while (of->peers)
		peer_free(of, of->peers);
}

/* Whether an unused entry's endpoint is gone: its process exited, or its region was removed. */
static bool peer_gone(const struct rdm_peer *p)
{
	struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
	struct stat st;

	if (p->pidfd >= 0 && poll(&pfd, 1, 0) == 1)
		return true;
	if (region_stat(p->name, &st) < 0)
		return errno == ENOENT;
	return st.st_dev != p->dev || st.st_ino != p->ino;
}

/* Every AV_SWEEP_MS on a give-back fab: mark the unused entries whose peer is gone, and give
 * back those marked before the last CQ read. */
static void sweep_peers(struct ofi_fab *of)
{
	uint64_t polls = of->base.stats.cq_polls;
	struct rdm_peer *p = of->peers, *next;

	if (of->base.now_ns < of->sweep_ns)
		return;
	of->sweep_ns = of->base.now_ns + AV_SWEEP_MS * 1000000ull;
	for (; p; p = next) {
		next = p->next;
		if (!p->accepted || p->refs || p->posted)
			continue;
		if (!p->gone_polls) {
			if (peer_gone(p))
				p->gone_polls = polls;
			continue;
		}
		if (polls == p->gone_polls)
			continue; /* no CQ read since: its queued commands may not be processed yet */
		if (fi_av_remove(of->av, &p->addr, 1, 0) != 0) {
			tw_log_warn("fabric shm: fi_av_remove(%s) failed; keeping its entry", p->name);
			p->accepted = false; /* never tried again */
			continue;
		}
		tw_log_debug("fabric shm: %s is gone, AV entry given back", p->name);
		of->base.stats.shm_av_given_back++;
		peer_free(of, p);
	}
}

/* A channel is done with its entry. */
static void peer_put(struct ofi_fab *of, struct ofi_chan *ch)
{
	struct rdm_peer *p = ch->peer;

	(void)of;
	ch->peer = NULL;
	if (p && p->refs)
		p->refs--;
}

int tw__rdm_shm_check_peers(struct ofi_fab *of)
{
	struct pollfd pfd[64];
	struct ofi_chan *who[64];
	unsigned n = 0;
	int lost = 0;
	struct tw_chan *c = of->base.chans;

	if (!of->shm || of->base.now_ns < of->shm_check_ns)
		return 0;
	if (of->give_back)
		sweep_peers(of);
	tw__keep_poll(); /* regions kept for unread connection requests (ofi_keep.c) */
	of->shm_check_ns = of->base.now_ns + TW_SHM_CHECK_MS * 1000000ull;
	for (;;) {
		for (; c && n < TW_ARRAY_SIZE(pfd); c = c->next) {
			struct ofi_chan *ch = (struct ofi_chan *)c;

			if (ch->watched && ch->pidfd >= 0 && !c->lost && !c->is_down && !c->closed) {
				pfd[n] = (struct pollfd){.fd = ch->pidfd, .events = POLLIN};
				who[n++] = ch;
			}
		}
		if (!n)
			break;
		if (poll(pfd, n, 0) > 0) {
			/* Mark first, fail after: failing a channel runs callbacks that may close
			 * others (their pidfds too). */
			for (unsigned i = 0; i < n; i++)
				if (pfd[i].revents)
					who[i]->peer_gone = true;
			for (unsigned i = 0; i < n; i++)
				if (pfd[i].revents) {
					peer_died(of, who[i]);
					lost++;
				}
		}
		n = 0;
		if (!c)
			break;
	}
	return lost;
}

/*
 * shm: a counter of the remote writes into our registrations, bound before fi_enable. A
 * one-sided write gives its target no completion, so a backup serving them found nothing in
 * its polls and its backoff grew to its longest sleep while the primary's writes waited for
 * the next poll to be carried out (libfabric 1.17's shm copies on the target's progress). The
 * counter lets tw__ofi_wait see that work (ofi_cq.c). Without it (a provider or version that
 * does not offer FI_RMA_EVENT) the backoff is what it was; nothing else depends on it.
 */
static void rw_cntr_bind(struct ofi_fab *of)
{
	struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
	int rc;

	if (!of->shm || !(of->info->caps & FI_RMA_EVENT))
		return;
	if (!of->rw_cntr) {
		rc = fi_cntr_open(of->domain, &ca, &of->rw_cntr, NULL);
		if (rc) {
			of->rw_cntr = NULL;
			tw_log_info("fabric shm: no remote-write counter (fi_cntr_open: %s); a "
				    "backup's polling backs off as without one", fi_strerror(-rc));
			return;
		}
	}
	rc = fi_ep_bind(of->ep, &of->rw_cntr->fid, FI_REMOTE_WRITE);
	if (rc) {
		tw_log_info("fabric shm: no remote-write counter (fi_ep_bind: %s); a backup's "
			    "polling backs off as without one", fi_strerror(-rc));
		fi_close(&of->rw_cntr->fid);
		of->rw_cntr = NULL;
	}
}

/*
 * Named shm endpoints (docs/fabric.md "Named shm endpoints"). A fab given a service on shm
 * (a backup's configured port or name) asks fi_getinfo for it with FI_SOURCE, and 1.17's shm
 * names the endpoint fi_ns://SERVICE (smr_resolve_addr, prov/shm/src/smr_init.c) and its
 * region /dev/shm/SERVICE (smr_endpoint_name keeps a name without the fi_shm:// prefix as it
 * is; smr_create opens it). The same name in every process: a restarted backup keeps its
 * address. The service becomes a file name, so it is kept to what one may hold.
 */
#define SHM_SERVICE_MAX 64

int tw__rdm_shm_name_ok(const char *service)
{
	size_t n = strlen(service);

	for (size_t i = 0; i < n; i++) {
		char c = service[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || (c == '.' && i > 0))
			continue;
		n = 0;
		break;
	}
	if (n == 0 || n > SHM_SERVICE_MAX) {
		tw__fab_open_errmsg("shm: service '%s' cannot name an endpoint: it becomes the file "
				    "/dev/shm/SERVICE, so 1 to %d letters, digits, '-', '_' or '.' "
				    "(not first), e.g. a port number", service, SHM_SERVICE_MAX);
		return -EINVAL;
	}
	return 0;
}

/*
 * Before a named endpoint is created: the region of that name, if there is one. 1.17's
 * smr_create (prov/util/src/util_shm.c) opens it with O_EXCL and, when it exists, calls
 * smr_retry_map: a region of a dead process (its pid not in /proc) is reused in place
 * ("Overwriting shm from dead process"), any other is unlinked and the endpoint refused with
 * -FI_EBUSY ("shm file in use") — the live owner's name would be gone. So we look first:
 *   - a live owner (its pid exists; or it is this process): refused, nothing touched;
 *   - a dead owner: we unlink the object ourselves, so that the new region is a new object:
 *     a peer that still maps the old one (an AV entry made before the restart) keeps writing
 *     into pages nobody reads, never into the new region under it (peer_get makes a new
 *     entry for the new object);
 *   - not a 1.17 region (another version, another program's file): refused, not removed.
 */
static int shm_name_claim(struct ofi_fab *of)
{
	const char *name = strstr(of->name, "://");
	unsigned char h[8] = {0};
	ssize_t n;
	int fd, pid;

	name = name ? name + 3 : of->name;
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0; /* none (or not ours to read: smr_create says) */
	n = pread(fd, h, sizeof(h), 0);
	close(fd);
	memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
	if (n == (ssize_t)sizeof(h) && h[0] == SMR_V117_VERSION && pid > 0 &&
	    pid != (int)getpid() && kill(pid, 0) < 0 && errno == ESRCH) {
		tw_log_info("fabric shm: %s: the region of exited process %d, removed (a restart "
			    "on the same address)", of->name, pid);
		shm_unlink(name);
		return 0;
	}
	if (n == (ssize_t)sizeof(h) && h[0] == SMR_V117_VERSION && pid == 0)
		return 0; /* created, never set up: 1.17 reuses it (smr_retry_map) */
	if (n == (ssize_t)sizeof(h) && h[0] == SMR_V117_VERSION)
		tw__fab_open_errmsg("shm address %s is in use by %s %d (/dev/shm/%s): give another "
				    "service, or stop that process", of->name,
				    pid == (int)getpid() ? "this process," : "process", pid, name);
	else
		tw__fab_open_errmsg("shm address %s: /dev/shm/%s exists and is not a libfabric 1.17 "
				    "shm region; remove it or give another service", of->name, name);
	return -EADDRINUSE;
}

int tw__rdm_open_ep(struct ofi_fab *of)
{
	/* The type fi_getinfo agreed on: we ask for FI_AV_TABLE in the hints (ofi_fab.c), and a
	 * provider answers only with the AV type asked for (fi_domain(3), av_type). */
	struct fi_av_attr aa = {.type = of->info->domain_attr->av_type, .count = 64};
	int rc;

	of->tx_max = (unsigned)TW_MIN(of->tx_size, (size_t)of->base.cfg.tx_depth * 4);
	of->shm = !strcmp(of->info->fabric_attr->prov_name, "shm");
	rc = fi_av_open(of->domain, &aa, &of->av, NULL);
	if (rc) {
		tw__fab_open_errmsg("fi_av_open: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	rc = tw__cq_open(of, of->tx_size + of->rx_size, &of->cq, &of->cq_fd, of);
	if (rc < 0) {
		tw__fab_open_errmsg("%s", of->base.errmsg);
		return rc;
	}
	if (of->named) {
		snprintf(of->name, sizeof(of->name), "%s", (const char *)of->info->src_addr);
		rc = shm_name_claim(of);
		if (rc < 0)
			return rc;
	}
	for (int attempt = 0;; attempt++) {
		rc = fi_endpoint(of->domain, of->info, &of->ep, NULL);
		if (rc) {
			of->ep = NULL;
			tw__fab_open_errmsg("fi_endpoint: %s", fi_strerror(-rc));
			return tw__ofi_errno(rc);
		}
		rc = fi_ep_bind(of->ep, &of->av->fid, 0);
		if (!rc) /* shm wants both directions bound (fi_shm.7) */
			rc = fi_ep_bind(of->ep, &of->cq->fid, FI_TRANSMIT | FI_RECV);
		if (!rc)
			rw_cntr_bind(of);
		if (!rc)
			rc = fi_enable(of->ep);
		/*
		 * shm names its region fi_shm://PID:UID:IDX. A process killed with SIGKILL leaves
		 * its region in /dev/shm; when a later process gets the same PID, 1.17's
		 * smr_create() (prov/util/src/util_shm.c, smr_retry_map) sees the old region
		 * name its own, live PID, unlinks it and fails with -FI_EBUSY. The next endpoint
		 * gets a new index, hence a new name — which the dead process may have used too
		 * (it had several endpoints: a primary that reset its fabric; CI saw a twd fail
		 * after one retry). Every failure removes one stale region, so retrying ends; 64
		 * bounds it.
		 */
		if (rc != -FI_EBUSY || !of->shm || of->named || attempt >= 63)
			break;
		tw_log_info("fabric shm: a dead process's region had this process's name "
			    "(PID reused); it was removed, opening the endpoint again");
		fi_close(&of->ep->fid);
		of->ep = NULL;
	}
	if (rc == -FI_EBUSY && of->named) {
		/* Another process created it between our look and fi_enable; 1.17 unlinked it. */
		tw__fab_open_errmsg("shm address %s: taken by another process while this one "
				    "opened it (libfabric: \"shm file in use\"); start one process "
				    "per service", of->name);
		return -EADDRINUSE;
	}
	if (rc) {
		tw__fab_open_errmsg("endpoint bind/enable: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	of->rx.n = (unsigned)TW_MIN(of->rx_size, (size_t)TW_MAX(of->base.cfg.rx_depth * 2, 16u));
	rc = tw__msg_alloc_rx(of, &of->rx, NULL);
	if (rc < 0) {
		tw__fab_open_errmsg("receive buffers: %s", tw_strerror(rc));
		return rc;
	}
	rc = own_name(of);
	if (rc == 0) {
		shm_fast_init(of);
		tw__wedge_watch(of); /* our region lock left held by a killed peer (ofi_wedge.c) */
	}
	return rc;
}

int tw__rdm_listen(struct tw_fab *fab, char *addr_out, size_t addr_len)
{
	struct ofi_fab *of = ofab(fab);

	of->listening = true;
	of->give_back = of->shm && !of->connected_out;
	tw__bell_create(of); /* shm: sleep when idle (ofi_bell.c) */
	if ((size_t)snprintf(addr_out, addr_len, "%s", of->name) >= addr_len)
		return -ENAMETOOLONG;
	return 0;
}

/* Put a peer address string into the AV (shm: take a reference on its entry). */
static int av_add(struct ofi_fab *of, struct ofi_chan *ch, const char *addr)
{
	fi_addr_t *out = &ch->addr;
	int rc;

	if (of->shm) {
		rc = peer_get(of, addr, &ch->peer);
		if (rc == 0)
			*out = ch->peer->addr;
		return rc;
	}
	if (of->addr_str) {
		rc = fi_av_insert(of->av, addr, 1, out, 0, NULL);
	} else {
		/* "ip:port" → sockaddr_in (rxm over tcp/verbs with FI_SOCKADDR_IN). */
		char ip[64];
		const char *colon = strrchr(addr, ':');
		struct sockaddr_in sin = {.sin_family = AF_INET};

		if (!colon || (size_t)(colon - addr) >= sizeof(ip))
			return -EINVAL;
		memcpy(ip, addr, (size_t)(colon - addr));
		ip[colon - addr] = '\0';
		if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1)
			return -EINVAL;
		sin.sin_port = htons((uint16_t)atoi(colon + 1));
		rc = fi_av_insert(of->av, &sin, 1, out, 0, NULL);
	}
	if (rc != 1) {
		tw__fab_set_errmsg(&of->base, "fi_av_insert(%s): %s", addr, rc < 0 ? fi_strerror(-rc) : "failed");
		return rc < 0 ? tw__ofi_errno(rc) : -EINVAL;
	}
	return 0;
}

static struct ofi_chan *new_chan(struct ofi_fab *of, const char *peer, enum chan_state st)
{
	struct ofi_chan *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->cq_fd = -1;
	ch->pidfd = -1;
	ch->tx_max = of->base.cfg.tx_depth;
	tw__chan_init(&of->base, &ch->base, peer);
	ch->base.state = st;
	ch->base.hs_deadline_ns = tw__fab_clock(&of->base) +
				  (uint64_t)of->base.cfg.connect_timeout_ms * 1000000u;
	return ch;
}

/* A control message of our own (HELLO/ACK/BYE). */
static int send_ctl(struct ofi_fab *of, struct ofi_chan *ch, enum rdm_type type, const void *payload,
		    size_t plen, bool bye)
{
	uint64_t now = tw__fab_clock(&of->base);
	uint64_t deadline = now + (uint64_t)of->base.cfg.connect_timeout_ms * 1000000u;
	struct ofi_ctx *ctx;
	int rc;

	if (bye) /* never stall a close for long */
		deadline = now + 100000000u;
	ctx = tw__msg_get_slot(of, bye ? NULL : ch, deadline, &rc);
	if (!ctx)
		return rc;
	tw__rdm_put_hdr(ctx->buf, type, ch->peer_id, ch->base.id, (uint32_t)plen);
	if (plen)
		memcpy((char *)ctx->buf + RDM_HDR_LEN, payload, plen);
	ctx->bye = bye;
	ctx->bye_addr = ch->addr;
	rc = tw__msg_post_send(of, ch, ctx, RDM_HDR_LEN + plen, deadline);
	if (rc < 0)
		tw__msg_put_slot(of, ctx);
	return rc;
}

static void discard(struct ofi_chan *ch)
{
	ch->base.closed = true;
	tw__rdm_chan_down(ch, false);
	ch->base.is_down = true;
	ch->base.fab->need_sweep = true;
}

int tw__rdm_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out)
{
	struct ofi_fab *of = ofab(fab);
	struct ofi_chan *ch;
	int rc;

	if (of->shm && !of->connected_out && of->base.stats.shm_av_given_back) {
		/* Our record of a freed slot is stale (above): only a peer's connection request
		 * refreshes it, and our own insert would not wait for one. */
		tw__fab_set_errmsg(fab, "this shm fab accepts only: it gave AV entries back");
		return -ENOTSUP;
	}
	of->connected_out = true;
	of->give_back = false;
	ch = new_chan(of, addr, CHAN_CONNECTING);
	if (!ch)
		return -ENOMEM;
	rc = av_add(of, ch, addr);
	if (rc < 0) {
		discard(ch);
		return rc == -EINVAL ? -EINVAL : -ECONNREFUSED;
	}
	ch->have_addr = true;
	ch->self = !strcmp(addr, of->name);
	shm_watch(of, ch);
	tw__bell_peer_open(of, ch);
	/* The first message to a new shm peer waits (-FI_EAGAIN) until the peer progresses;
	 * tw__post_tx retries until the handshake deadline (ringing its doorbell each time). */
	{
		char hello[TW_ADDR_MAX + 8];

		rc = send_ctl(of, ch, RDM_HELLO, hello, tw__bell_hello(of, ch, hello, sizeof(hello)),
			      false);
	}
	if (!rc)
		rc = tw__ofi_await_connect(of, ch, addr);
	if (!rc && ch->base.state != CHAN_UP)
		rc = ch->base.lost_err ? ch->base.lost_err : -ECONNREFUSED;
	if (rc) {
		if (rc == -ETIMEDOUT && !fab->errmsg[0])
			tw__fab_set_errmsg(fab, "connect to %s timed out", addr);
		/* A slow listener may still answer our HELLO and announce a channel nobody will
		 * use: tell it (BYE to "channel 0" carrying our address; best effort). */
		if (rc == -ETIMEDOUT && ch->have_addr && !ch->base.lost && !ch->base.closed) {
			ch->peer_id = 0;
			if (send_ctl(of, ch, RDM_BYE, of->name, strlen(of->name) + 1, true) == 0) {
				ch->have_addr = false; /* the BYE's completion does the av_remove */
				while (ch->posted) {
					struct ofi_ctx *ctx = ch->posted;
					tw__ofi_ctx_unlink(ch, ctx);
					ctx->ch = NULL;
				}
			}
		}
		if (!ch->base.closed)
			discard(ch);
		return rc;
	}
	*out = &ch->base;
	return 0;
}

void tw__rdm_chan_down(struct ofi_chan *ch, bool closing)
{
	struct ofi_fab *of = ofab(ch->base.fab);
	bool bye_sent = false;

	ch->going_down = true; /* a dead peer found by the BYE's post does not fail it again */

	/* Deferred messages hold fab receive buffers: give them back. */
	while (ch->deferred) {
		struct ofi_ctx *ctx = ch->deferred;

		ch->deferred = ctx->next;
		ctx->next = NULL;
		if (!of->closing)
			tw__msg_post_recv(of, ctx);
	}
	ch->deferred_tail = NULL;
	/* In-flight contexts stay with the provider: orphan them. */
	while (ch->posted) {
		struct ofi_ctx *ctx = ch->posted;

		tw__ofi_ctx_unlink(ch, ctx);
		ctx->ch = NULL;
		ctx->next = ctx->prev = NULL;
	}
	if (closing && ch->have_addr && ch->base.state == CHAN_UP && !ch->base.lost && !of->closing) {
		/* tw__post_tx refuses closed channels: send with a temporary "open" view. */
		bool closed = ch->base.closed;
		ch->base.closed = false;
		bye_sent = send_ctl(of, ch, RDM_BYE, NULL, 0, true) == 0;
		ch->base.closed = closed;
		/* The BYE ctx is linked to ch: orphan it too; its completion av_removes. */
		while (ch->posted) {
			struct ofi_ctx *ctx = ch->posted;
			tw__ofi_ctx_unlink(ch, ctx);
			ctx->ch = NULL;
		}
	}
	if (ch->have_addr && !bye_sent && !of->closing && !of->shm)
		fi_av_remove(of->av, &ch->addr, 1, 0);
	peer_put(of, ch); /* shm: the BYE's context holds the entry until it completes */
	ch->have_addr = false;
	shm_unwatch(ch); /* after the BYE, which the watch guards too */
	if (ch->wd_counted) {
		ch->wd_counted = false;
		atomic_fetch_sub(&local_chans, 1);
	}
	tw__bell_peer_close(ch);
}

bool tw__rdm_on_recv(struct ofi_fab *of, struct ofi_ctx *ctx, size_t len)
{
	const unsigned char *buf = ctx->buf;
	struct tw_fab *fab = &of->base;
	uint32_t mt, dst, src, plen;
	struct tw_chan *c;
	struct ofi_chan *ch;

	if (len < RDM_HDR_LEN)
		return false;
	mt = tw_load_le32(buf);
	dst = tw_load_le32(buf + 4);
	src = tw_load_le32(buf + 8);
	plen = tw_load_le32(buf + 12);
	if ((mt & 0xffffff00u) != RDM_MAGIC || plen != len - RDM_HDR_LEN)
		return false;
	buf += RDM_HDR_LEN;
	switch (mt & 0xff) {
	case RDM_HELLO: {
		char name[TW_ADDR_MAX];

		if (!of->listening || plen == 0 || plen > sizeof(name) || buf[plen - 1] != '\0')
			return false;
		memcpy(name, buf, plen);
		ch = new_chan(of, name, CHAN_ACCEPTING);
		if (!ch)
			return false;
		ch->peer_id = src;
		if (av_add(of, ch, name) < 0) {
			tw_log_ratelimited(TW_DIAG_WARN, "fabric %s: refusing %s: %s", fab->prov, name,
					   fab->errmsg);
			discard(ch);
			return false;
		}
		ch->have_addr = true;
		ch->self = !strcmp(name, of->name);
		shm_watch(of, ch);
		tw__bell_peer_open(of, ch);
		ch->rings_us |= tw__bell_said(buf, plen, true);
		if (of->give_back && ch->peer->refs == 1 && !ch->peer->accepted && !ch->self)
			peer_track(of, ch->peer, ch);
		tw__rdm_shm_fast(of, ch);
		ch->base.state = CHAN_UP; /* send_ctl needs a usable channel */
		if (send_ctl(of, ch, RDM_ACK, "bell", ch->peer_bell ? 5 : 0, false) < 0) {
			discard(ch);
			return false;
		}
		ch->base.state = CHAN_ACCEPTING;
		tw__chan_announce(&ch->base);
		return false;
	}
	case RDM_ACK:
		c = tw__fab_find_chan(fab, dst);
		if (c && c->state == CHAN_CONNECTING) {
			((struct ofi_chan *)c)->peer_id = src;
			((struct ofi_chan *)c)->rings_us |= tw__bell_said(buf, plen, false);
			c->state = CHAN_UP;
			tw__rdm_shm_fast(of, (struct ofi_chan *)c);
		}
		return false;
	case RDM_DATA:
		c = tw__fab_find_chan(fab, dst);
		ch = (struct ofi_chan *)c;
		if (!c || c->state != CHAN_UP || c->lost || ch->peer_id != src)
			return false;
		if (!c->visible || ch->deferred) { /* tw__fab_connect has not returned it yet */
			tw__chan_defer(ch, ctx, plen);
			return true;
		}
		fab->stats.recvs++;
		fab->stats.recv_bytes += plen;
		if (fab->ev.on_recv)
			fab->ev.on_recv(fab->ev.arg, c, buf, plen);
		return false;
	case RDM_BYE:
		if (dst == 0) { /* from a connector that gave up: match its id and address */
			c = NULL;
			if (plen == 0 || buf[plen - 1] != '\0')
				return false;
			for (struct tw_chan *x = fab->chans; x; x = x->next)
				if (!x->closed && ((struct ofi_chan *)x)->peer_id == src &&
				    !strcmp(x->peer, (const char *)buf))
					c = x;
		} else {
			c = tw__fab_find_chan(fab, dst);
		}
		ch = (struct ofi_chan *)c;
		if (!c || ch->peer_id != src)
			return false;
		tw__fab_set_errmsg(fab, "peer %s closed the channel", c->peer);
		tw__chan_set_lost(c, -TW_EPEERLOST);
		return false;
	default:
		return false;
	}
}
