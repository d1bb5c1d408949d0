/*
 * fabric/ofi_wedge.c — shm: our own region's lock held by a process that is gone
 * (docs/fabric.md "A writer killed holding a region lock").
 *
 * In libfabric 1.17 every process that posts to us takes the spinlock in *our* shm region
 * (pthread_spin_lock(&peer_smr->lock) in smr_generic_rma, prov/shm/src/smr_rma.c, and in
 * smr_generic_sendmsg, smr_generic_inject, smr_send_name; pthread_spin_trylock in
 * smr_progress_resp_entry). On the CMA fast path the writer holds it across the whole
 * process_vm_writev copy (smr_rma_fast → smr_cma_loop), so a writer SIGKILLed in the middle
 * of a burst usually dies holding it. Our own progress then spins forever:
 * fi_cq_read/fi_cntr_read → smr_ep_progress → smr_progress_resp (or smr_progress_cmd,
 * smr_progress_sar_list) → pthread_spin_lock(&ep->region->lock), prov/shm/src/smr_progress.c,
 * entered whenever the region's `signal` word is set. And every other peer that peeks at the
 * lock before posting (ofi_rdm.c) can no longer reach us.
 *
 * A watchdog thread (one per process, started with the first watched endpoint) looks at the
 * lock word every WD_TICK_MS. It frees the lock when all of these hold:
 *   - our progress thread has been inside one and the same progress call (fi_cq_read or
 *     fi_cntr_read: the only shared-memory lock they block on is our own region's) for
 *     TW_SHM_WEDGE_MS, and the lock word is held;
 *   - the lock word was held at every tick since the call was first seen;
 *   - that thread is in user space (/proc/self/task/TID/syscall: "running" or "-1 ..."), and
 *     has used CPU meanwhile (/proc/self/task/TID/stat: 2 clock ticks at least): spinning, not
 *     copying in a syscall under the lock itself, nor merely descheduled;
 *   - no other shm endpoint of this process can be the holder: there is none, or none of
 *     them has a channel open to an endpoint of this process (a thread of ours takes our
 *     lock only to post to us, through such a channel; progress takes only its own region's
 *     lock, and a peer's with a trylock). A twkv server, say, has two: its backup's and its
 *     logs' (which replicate to the other servers only);
 *   - no live process that maps our region writable is stopped (state T, t) or in an
 *     uninterruptible sleep (D): such a process may be the holder and come back.
 * A live, running holder leaves its critical section within one write's copy, and while it
 * does our spinning thread takes the lock at its first release, which ends the call: being
 * stuck in one call for TW_SHM_WEDGE_MS is the holder being gone (or stopped, checked above).
 * When our progress does not enter the lock at all (no `signal` set: the writer died before
 * raising it), the watchdog sets `signal` itself after two ticks of a held lock and no call in
 * flight, so the next poll goes for the lock and the rule above applies.
 *
 * What a dead holder may leave half done: a command formatted but not committed (invisible),
 * an inject buffer taken and not used (lost to the pool), or, between ofi_cirque_commit and
 * cmd_cnt-- (two adjacent statements), one command credit too many. Our registered buffers are
 * not touched by any of this: every byte a writer placed and had acknowledged stays where it
 * is, and a torn last write was never acknowledged (its entry's checksum tells recovery).
 *
 * Cost on the data path: one increment and two relaxed stores around each progress call.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "fabric/ofi_int.h"

#define WD_TICK_MS 50
#define SMR_V117_VERSION 4
#define SMR_V117_OFF_PID 4
#define SMR_V117_OFF_LOCK TW_SMR_V117_OFF_LOCK /* ofi_int.h */
#define SMR_V117_OFF_SIGNAL (SMR_V117_OFF_LOCK + sizeof(int))

struct shm_wedge {
	struct shm_wedge *next;
	struct ofi_fab *of;      /* only of->wmark is read from the watchdog */
	char path[TW_ADDR_MAX + 16]; /* "/dev/shm/NAME" as /proc/PID/maps shows it */
	int *lock;               /* our rw mapping of the region's first page */
	int *signal;
	void *map;
	size_t map_len;
	int lock_free;
	/* watchdog state (under wd_mu) */
	uint64_t seen_call, seen_ns;
	long seen_cpu;           /* the thread's CPU time (clock ticks) when the call was seen */
	unsigned idle_held;
	int told_pid;            /* the stopped process last reported, not to repeat it */
	bool told_many;
};

/* wd_life: held across watch and unwatch (thread start and join); wd_mu: the list and the
 * watchdog's state, held by the watchdog while it checks. */
static pthread_mutex_t wd_life = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv;
static struct shm_wedge *wd_list;
static unsigned wd_n;
static pthread_t wd_thr;
static bool wd_running, wd_stop;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int tw__wedge_tid(void)
{
	static __thread int tid;

	if (!tid)
		tid = (int)syscall(SYS_gettid);
	return tid;
}

/* Whether thread `tid` of this process is in user space (not inside a system call). */
static bool in_user_space(int tid)
{
	char path[64], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true; /* not to be told: the other conditions decide */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	return !strncmp(buf, "running", 7) || !strncmp(buf, "-1 ", 3);
}

/* CPU time (user + system, clock ticks) of thread `tid` of this process, -1 if unknown. */
static long thread_cpu(int tid)
{
	char path[64], buf[512], *p;
	unsigned long ut, st;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* after ") ": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
	 * utime stime */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* State letter of process `pid` (/proc/PID/stat, after the command's closing parenthesis). */
static char proc_state(const char *pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 'X';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 'X';
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 'X';
}

/* Whether process `pid` maps our region writable (a line of /proc/PID/maps ending in
 * w->path with "w" in its permissions). */
static bool maps_region(const char *pid, const struct shm_wedge *w)
{
	char path[64], line[512];
	size_t plen = strlen(w->path);
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false; /* gone, or another user's: it cannot open our 0600 object */
	while (!found && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		char *sp = strchr(line, ' ');

		while (n && (line[n - 1] == '\n' || line[n - 1] == ' '))
			line[--n] = '\0';
		found = sp && sp[1] && sp[2] == 'w' && n > plen &&
			!strcmp(line + n - plen, w->path) && line[n - plen - 1] == ' ';
	}
	fclose(f);
	return found;
}

/* A live process other than us that maps our region writable and may hold the lock for a
 * while yet (stopped, traced or in uninterruptible sleep): its pid, else 0. */
static int paused_mapper(const struct shm_wedge *w)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int self = (int)getpid(), found = 0;

	if (!d)
		return -1; /* cannot tell: leave the lock alone */
	while (!found && (de = readdir(d)) != NULL) {
		char st;

		if (!isdigit((unsigned char)de->d_name[0]) || atoi(de->d_name) == self)
			continue;
		if (!maps_region(de->d_name, w))
			continue;
		st = proc_state(de->d_name);
		if (st == 'T' || st == 't' || st == 'D')
			found = atoi(de->d_name);
	}
	closedir(d);
	return found;
}

static void check(struct shm_wedge *w, uint64_t now)
{
	struct ofi_fab *of = w->of;
	int held = __atomic_load_n(w->lock, __ATOMIC_ACQUIRE);
	uint64_t call;
	long cpu;
	int pid, tid;

	if (held == w->lock_free) {
		w->seen_call = 0;
		w->idle_held = 0;
		return;
	}
	call = __atomic_load_n(&of->wmark.call, __ATOMIC_ACQUIRE);
	if (call == 0) {
		/* Held, and our progress is not waiting for it: make the next poll go for it. */
		w->seen_call = 0;
		if (++w->idle_held >= 2) {
			__atomic_store_n(w->signal, 1, __ATOMIC_RELEASE);
			w->idle_held = 0;
		}
		return;
	}
	w->idle_held = 0;
	if (call != w->seen_call) {
		/* A new call with the lock held (seen held at every tick since, or we start over) */
		w->seen_call = call;
		w->seen_ns = now;
		w->seen_cpu = thread_cpu(__atomic_load_n(&of->wmark.tid, __ATOMIC_RELAXED));
		return;
	}
	if (now - w->seen_ns < TW_SHM_WEDGE_MS * 1000000ull)
		return;
	tid = __atomic_load_n(&of->wmark.tid, __ATOMIC_RELAXED);
	if (!in_user_space(tid))
		return;
	/* Spinning burns CPU; a thread that was merely descheduled inside the call did not. */
	cpu = thread_cpu(tid);
	if (w->seen_cpu >= 0 && cpu >= 0 && cpu - w->seen_cpu < 2)
		return;
	if (wd_n > 1 && tw__shm_local_chans() > 0) {
		if (!w->told_many)
			tw_log_warn("fabric shm: our region lock (%s) has been held for %llu ms while "
				    "our progress waits for it, but this process has %u shm endpoints "
				    "with channels between them (one of them may hold it): leaving it",
				    w->path, (unsigned long long)((now - w->seen_ns) / 1000000u), wd_n);
		w->told_many = true;
		return;
	}
	pid = paused_mapper(w);
	if (pid < 0) {
		if (pid != w->told_pid)
			tw_log_warn("fabric shm: our region lock (%s) has been held for %llu ms, but "
				    "/proc cannot be read to tell whether its holder may come back: "
				    "leaving it", w->path,
				    (unsigned long long)((now - w->seen_ns) / 1000000u));
		w->told_pid = pid;
		return;
	}
	if (pid) {
		if (pid != w->told_pid)
			tw_log_warn("fabric shm: our region lock (%s) has been held for %llu ms; "
				    "process %d, which maps the region, is stopped or in "
				    "uninterruptible sleep and may hold it: waiting for it", w->path,
				    (unsigned long long)((now - w->seen_ns) / 1000000u), pid);
		w->told_pid = pid;
		return;
	}
	/* The call we saw is still the one in flight: our thread has not had the lock since. */
	if (__atomic_load_n(&of->wmark.call, __ATOMIC_ACQUIRE) != call)
		return;
	if (__atomic_compare_exchange_n(w->lock, &held, w->lock_free, false, __ATOMIC_RELEASE,
					__ATOMIC_RELAXED)) {
		__atomic_fetch_add(&of->wmark.resets, 1, __ATOMIC_RELAXED);
		tw_log_warn("fabric shm: our region lock (%s) was held for %llu ms by a process "
			    "that is gone (a peer killed while posting to us); freed it, progress "
			    "goes on", w->path, (unsigned long long)((now - w->seen_ns) / 1000000u));
		w->seen_call = 0;
		w->told_pid = 0;
	}
}

static void *watchdog(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd_mu);
	while (!wd_stop) {
		struct timespec ts;
		uint64_t now = mono_ns(), t = now + WD_TICK_MS * 1000000ull;

		for (struct shm_wedge *w = wd_list; w; w = w->next)
			check(w, now);
		ts.tv_sec = (time_t)(t / 1000000000ull);
		ts.tv_nsec = (long)(t % 1000000000ull);
		while (!wd_stop && pthread_cond_timedwait(&wd_cv, &wd_mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&wd_mu);
	return NULL;
}

void tw__wedge_watch(struct ofi_fab *of)
{
	const char *name = strstr(of->name, "://");
	uint32_t v = fi_version();
	long page = sysconf(_SC_PAGESIZE);
	struct shm_wedge *w;
	unsigned char *h;
	void *p;
	int fd, pid;

	if (!of->shm || of->wedge || FI_MAJOR(v) != 1 || FI_MINOR(v) != 17)
		return;
	name = name ? name + 3 : of->name;
	fd = shm_open(name, O_RDWR, 0);
	if (fd < 0) {
		tw_log_info("fabric shm: shm_open(%s): %s; a region lock left held by a killed peer "
			    "would not be noticed", name, strerror(errno));
		return;
	}
	p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		tw_log_info("fabric shm: mmap(%s): %s; a region lock left held by a killed peer "
			    "would not be noticed", name, strerror(errno));
		return;
	}
	h = p;
	memcpy(&pid, h + SMR_V117_OFF_PID, sizeof(pid));
	w = calloc(1, sizeof(*w));
	if (!w || h[0] != SMR_V117_VERSION || pid != (int)getpid()) {
		if (w)
			tw_log_info("fabric shm: region %s has version %u pid %d (want %u, %d): its "
				    "lock is not watched", name, h[0], pid, SMR_V117_VERSION,
				    (int)getpid());
		free(w);
		munmap(p, (size_t)page);
		return;
	}
	w->of = of;
	w->map = p;
	w->map_len = (size_t)page;
	w->lock = (int *)(void *)(h + SMR_V117_OFF_LOCK);
	w->signal = (int *)(void *)(h + SMR_V117_OFF_SIGNAL);
	w->lock_free = tw__shm_spin_free_value();
	snprintf(w->path, sizeof(w->path), "/dev/shm/%s", name);

	pthread_mutex_lock(&wd_life);
	pthread_mutex_lock(&wd_mu);
	if (!wd_running) {
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&wd_cv, &ca);
		pthread_condattr_destroy(&ca);
		wd_stop = false;
		if (pthread_create(&wd_thr, NULL, watchdog, NULL) != 0) {
			pthread_cond_destroy(&wd_cv);
			pthread_mutex_unlock(&wd_mu);
			pthread_mutex_unlock(&wd_life);
			tw_log_warn("fabric shm: no watchdog thread (%s); a region lock left held "
				    "by a killed peer would not be noticed", strerror(errno));
			munmap(p, (size_t)page);
			free(w);
			return;
		}
		wd_running = true;
	}
	w->next = wd_list;
	wd_list = w;
	wd_n++;
	of->wedge = w;
	pthread_mutex_unlock(&wd_mu);
	pthread_mutex_unlock(&wd_life);
}

void tw__wedge_unwatch(struct ofi_fab *of)
{
	struct shm_wedge *w = of->wedge, **pp;
	bool join = false;

	if (!w)
		return;
	pthread_mutex_lock(&wd_life);
	pthread_mutex_lock(&wd_mu);
	for (pp = &wd_list; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	if (--wd_n == 0 && wd_running) {
		wd_stop = true;
		wd_running = false;
		pthread_cond_signal(&wd_cv);
		join = true;
	}
	pthread_mutex_unlock(&wd_mu);
	if (join) {
		pthread_join(wd_thr, NULL);
		pthread_cond_destroy(&wd_cv);
	}
	pthread_mutex_unlock(&wd_life);
	munmap(w->map, w->map_len);
	free(w);
	of->wedge = NULL;
}
