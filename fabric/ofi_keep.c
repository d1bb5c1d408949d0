/*
 * fabric/ofi_keep.c — shm: the region of an endpoint that closes with a connection request
 * still unread by its peer stays under its name until the peer has read it (docs/fabric.md
 * "shm: a connection request from a closed endpoint").
 *
 * libfabric 1.17's shm sends a connection request with the first send to a peer
 * (smr_verify_peer → smr_send_name, prov/shm/src/smr_ep.c): a command in the peer's region
 * whose inject buffer holds our name, and name_sent = 1 in our region's record of that peer
 * (smr_peer_data(our region)[id], include/ofi_shm.h). The peer maps us when its progress reads
 * the command (smr_progress_connreq, prov/shm/src/smr_progress.c → smr_map_add →
 * smr_map_to_region, prov/util/src/util_shm.c), and writes its index for us into that record
 * (addr.id, -1 until then). If our endpoint closed first, smr_free had unlinked our shm object:
 * the peer's shm_open fails, its map entry keeps a NULL region and smr_progress_connreq reads
 * peer_smr->pid through it — the peer dies of SIGSEGV.
 *
 * So, at the close of an shm endpoint (tw__rdm_close_ep), on libfabric 1.17 only:
 *   - its region's records are read (our own mapping of its shm object): a record with
 *     name_sent set and addr.id still -1 is a request the peer has not read;
 *   - if there is one, the name smr_free will unlink, which it reads from the region itself
 *     (shm_unlink(smr_name(smr)), the only use of that field besides smr_create), is blanked
 *     first: fi_close then unlinks nothing (glibc refuses an empty name) and still unmaps the
 *     region. The object stays under its name with our pid in it, a well-formed region of a
 *     closed endpoint: the peer maps it when it reads the request, finds the pid the request
 *     carries, and writes its addr.id into it. There is no moment at which the name is missing;
 *   - the object is recorded in a process-wide list, with a descriptor of it and, per unread
 *     request, the peer's name, pid and region identity (from the record's addr.name);
 *   - a sweep, from the progress of any shm fab of the process (at most every KEEP_SWEEP_MS,
 *     only while the list is not empty) and at every shm endpoint close, unlinks an object once
 *     each of its requests was read (addr.id written, or name_sent cleared) or its peer is gone
 *     (the process exited, or its region was removed or replaced: nothing will read the
 *     command then);
 *   - at most KEEP_MAX objects are kept; one more removes the oldest, with a warning (its peer
 *     would crash if it ever read that request).
 * What it costs: a close with an unread request keeps the object, a sparse tmpfs file of the
 * region's size (16 MiB on 1.17 with our queue sizes) of which only the pages touched use
 * memory, until its requests are read. A process that exits (or execs) first leaves it behind
 * (as a SIGKILLed endpoint leaves its region): nothing in a dead process can sweep it, and
 * removing it would bring the crash back for a peer that reads the request later.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "core/util.h"
#include "fabric/ofi_int.h"

#define KEEP_MAX 16
#define KEEP_SWEEP_MS 100

/* libfabric 1.17's struct smr_region (include/ofi_shm.h), after the lock (ofi_int.h):
 * ofi_atomic32_t signal, struct smr_map *map, size_t total_size, cmd_cnt, sar_cnt, then the
 * offsets of cmd_queue, resp_queue, inject_pool, sar_pool, peer_data, name, sock_name. */
#define SMR_V117_VERSION 4
#define SMR_V117_OFF_PID 4
#define SMR_V117_OFF_TOTAL (TW_SMR_V117_OFF_LOCK + 16)
#define SMR_V117_OFF_PEER_DATA (SMR_V117_OFF_TOTAL + 7 * sizeof(size_t))
#define SMR_V117_OFF_NAME (SMR_V117_OFF_PEER_DATA + sizeof(size_t))
#define SMR_V117_OFF_SOCK_NAME (SMR_V117_OFF_NAME + sizeof(size_t))
#define SMR_V117_MAX_PEERS 256
#define SMR_V117_NAME_MAX 256
/* struct smr_peer_data: struct smr_addr {char name[256]; int64_t id;}, uint32_t sar_status,
 * uint32_t name_sent. */
#define PD_SIZE 272
#define PD_OFF_ID 256
#define PD_OFF_NAME_SENT 268

struct keep_req {
	int slot;              /* our record of the peer */
	int pid;               /* the peer's process (0: not known) */
	dev_t dev;             /* the peer's region when we closed */
	ino_t ino;
	bool known;            /* its name was in our record, and its region existed */
	bool done;
	char peer[TW_ADDR_MAX];
};

struct tw__keep {
	struct tw__keep *next;
	char name[TW_ADDR_MAX]; /* our shm object's name (without "fi_shm://") */
	int fd;                 /* of that object: our records are read through it */
	size_t peer_data;       /* offset of our records in it */
	unsigned n;
	struct keep_req req[];
};

static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tw__keep *keep_head; /* oldest first */
static atomic_uint keep_n;
static atomic_uint_fast64_t keep_next_ns;

static int shm_stat(const char *name, struct stat *st)
{
	const char *n = strstr(name, "://");
	char path[TW_ADDR_MAX + 16];

	snprintf(path, sizeof(path), "/dev/shm/%s", n ? n + 3 : name);
	return stat(path, st);
}

/* The pid in the header of the region behind `name` (1.17's layout), 0 if not known. A named
 * peer (fi_ns://SERVICE, docs/fabric.md "Named shm endpoints") has no pid in its name. */
static int region_pid(const char *name)
{
	unsigned char h[SMR_V117_OFF_PID + sizeof(int)];
	int fd, pid = 0;

	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) && h[0] == SMR_V117_VERSION)
		memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
	close(fd);
	return pid > 0 ? pid : 0;
}

/* The peer of an unread request: its name from our record, its pid from the name
 * ("PID:UID:IDX", smr_endpoint_name in prov/shm/src/smr_ep.c) or else from its region's
 * header, its region's identity. */
static void req_peer(struct keep_req *r, const unsigned char *rec)
{
	char name[SMR_V117_NAME_MAX];
	const char *n;
	struct stat st;
	char *end;
	long l;

	memcpy(name, rec, sizeof(name));
	name[sizeof(name) - 1] = '\0';
	if (!name[0] || strlen(name) >= sizeof(r->peer))
		return;
	snprintf(r->peer, sizeof(r->peer), "%s", name);
	n = strstr(name, "://");
	n = n ? n + 3 : name;
	l = strtol(n, &end, 10);
	if (end == n || *end != ':' || l <= 0 || l >= INT32_MAX)
		l = region_pid(n);
	if (l <= 0 || shm_stat(name, &st) < 0)
		return;
	r->pid = (int)l;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->known = true;
}

struct tw__keep *tw__keep_prepare(struct ofi_fab *of)
{
	const char *name = strstr(of->name, "://");
	long page = sysconf(_SC_PAGESIZE);
	uint32_t v = fi_version();
	size_t total, pd, nm, sock, lo, len;
	unsigned char *h, *m, *rec;
	struct tw__keep *k = NULL;
	unsigned n = 0;
	struct stat st;
	int fd, pid;

	if (!of->shm || !name || FI_MAJOR(v) != 1 || FI_MINOR(v) != 17 || page <= 0)
		return NULL;
	name += 3;
	if (strlen(name) >= sizeof(k->name))
		return NULL;
	fd = shm_open(name, O_RDWR, 0);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < (size_t)page)
		goto out;
	h = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto out;
	memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
	memcpy(&total, h + SMR_V117_OFF_TOTAL, sizeof(total));
	memcpy(&pd, h + SMR_V117_OFF_PEER_DATA, sizeof(pd));
	memcpy(&nm, h + SMR_V117_OFF_NAME, sizeof(nm));
	memcpy(&sock, h + SMR_V117_OFF_SOCK_NAME, sizeof(sock));
	pid = h[0] == SMR_V117_VERSION ? pid : -1;
	munmap(h, (size_t)page);
	/* the layout smr_calculate_size_offsets makes: the records, then the name, then the
	 * socket name, all inside the object */
	if (pid != (int)getpid() || nm != pd + (size_t)SMR_V117_MAX_PEERS * PD_SIZE ||
	    sock != nm + SMR_V117_NAME_MAX || total > (size_t)st.st_size || sock > total) {
		tw_log_debug("fabric shm: %s: region layout not known; its close keeps nothing",
			     name);
		goto out;
	}
	lo = pd & ~((size_t)page - 1);
	len = nm + 1 - lo;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)lo);
	if (m == MAP_FAILED)
		goto out;
	rec = m + (pd - lo);
	for (unsigned i = 0; i < SMR_V117_MAX_PEERS; i++) {
		int64_t id;
		uint32_t sent;

		memcpy(&id, rec + (size_t)i * PD_SIZE + PD_OFF_ID, sizeof(id));
		memcpy(&sent, rec + (size_t)i * PD_SIZE + PD_OFF_NAME_SENT, sizeof(sent));
		n += sent && id < 0;
	}
	if (n)
		k = calloc(1, sizeof(*k) + n * sizeof(k->req[0]));
	if (k) {
		n = 0;
		for (unsigned i = 0; i < SMR_V117_MAX_PEERS; i++) {
			const unsigned char *r = rec + (size_t)i * PD_SIZE;
			int64_t id;
			uint32_t sent;

			memcpy(&id, r + PD_OFF_ID, sizeof(id));
			memcpy(&sent, r + PD_OFF_NAME_SENT, sizeof(sent));
			if (!sent || id >= 0)
				continue;
			k->req[n].slot = (int)i;
			req_peer(&k->req[n], r);
			n++;
		}
		k->n = n;
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->fd = fd;
		k->peer_data = pd;
		fd = -1;
		/* smr_free's shm_unlink(smr_name(smr)) now unlinks nothing */
		__atomic_store_n(m + (nm - lo), (unsigned char)0, __ATOMIC_RELEASE);
	} else if (n) {
		tw_log_warn("fabric shm: %s closes with %u connection request(s) unread and no "
			    "memory to keep its region: those peers crash if they read them",
			    name, n);
	}
	munmap(m, len);
out:
	if (fd >= 0)
		close(fd);
	return k;
}

/* Whether the peer of `r` will never read the request: its process exited, or its region
 * (where the command waits) was removed or replaced. */
static bool req_peer_gone(const struct keep_req *r)
{
	struct stat st;

	if (!r->known)
		return false;
	if (kill(r->pid, 0) < 0 && errno == ESRCH)
		return true;
	if (shm_stat(r->peer, &st) < 0)
		return errno == ENOENT;
	return st.st_dev != r->dev || st.st_ino != r->ino;
}

/* Whether every request of `k` was read or will never be. */
static bool keep_done(struct tw__keep *k)
{
	bool all = true;

	for (unsigned i = 0; i < k->n; i++) {
		struct keep_req *r = &k->req[i];
		unsigned char b[PD_SIZE - PD_OFF_ID];
		off_t at = (off_t)(k->peer_data + (size_t)r->slot * PD_SIZE + PD_OFF_ID);
		int64_t id;
		uint32_t sent;

		if (r->done)
			continue;
		if (pread(k->fd, b, sizeof(b), at) != (ssize_t)sizeof(b)) {
			r->done = true; /* cannot be read: nothing to wait for */
			continue;
		}
		memcpy(&id, b, sizeof(id));
		memcpy(&sent, b + (PD_OFF_NAME_SENT - PD_OFF_ID), sizeof(sent));
		if (id >= 0 || !sent) {
			tw_log_debug("fabric shm: %s read the connection request of closed %s",
				     r->known ? r->peer : "a peer", k->name);
			r->done = true;
		} else if (req_peer_gone(r)) {
			tw_log_debug("fabric shm: %s is gone with the connection request of closed "
				     "%s unread", r->peer, k->name);
			r->done = true;
		} else {
			all = false;
		}
	}
	return all;
}

static void keep_free(struct tw__keep *k)
{
	shm_unlink(k->name);
	close(k->fd);
	free(k);
	tw__rdm_local_bump(); /* channels to it in this process look at its name again */
}

/* Under keep_lock. */
static void sweep_locked(void)
{
	struct tw__keep **pp = &keep_head, *k;

	while ((k = *pp) != NULL) {
		if (!keep_done(k)) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		tw_log_debug("fabric shm: kept region %s removed: no connection request of it is "
			     "left unread", k->name);
		keep_free(k);
		atomic_fetch_sub(&keep_n, 1);
	}
	atomic_store(&keep_next_ns, tw_now_ns() + KEEP_SWEEP_MS * 1000000ull);
}

void tw__keep_add(struct tw__keep *k)
{
	struct tw__keep **pp;

	pthread_mutex_lock(&keep_lock);
	sweep_locked();
	if (k) {
		if (atomic_load(&keep_n) >= KEEP_MAX) {
			struct tw__keep *old = keep_head;

			keep_head = old->next;
			tw_log_warn("fabric shm: %u regions of closed endpoints kept for unread "
				    "connection requests; removing the oldest, %s (a peer that reads "
				    "its request now crashes: libfabric 1.17, docs/fabric.md)",
				    KEEP_MAX, old->name);
			keep_free(old);
			atomic_fetch_sub(&keep_n, 1);
		}
		for (pp = &keep_head; *pp; pp = &(*pp)->next)
			;
		*pp = k;
		atomic_fetch_add(&keep_n, 1);
		tw_log_info("fabric shm: %s closed with %u connection request(s) unread (first to "
			    "%s); its region stays until they are read", k->name, k->n,
			    k->req[0].peer[0] ? k->req[0].peer : "a peer");
	}
	pthread_mutex_unlock(&keep_lock);
}

void tw__keep_poll(void)
{
	if (!atomic_load_explicit(&keep_n, memory_order_relaxed) ||
	    tw_now_ns() < atomic_load(&keep_next_ns))
		return;
	if (pthread_mutex_trylock(&keep_lock))
		return; /* another thread sweeps */
	sweep_locked();
	pthread_mutex_unlock(&keep_lock);
}

unsigned tw__fab_shm_kept(void)
{
	unsigned n;

	pthread_mutex_lock(&keep_lock);
	sweep_locked();
	n = atomic_load(&keep_n);
	pthread_mutex_unlock(&keep_lock);
	return n;
}
