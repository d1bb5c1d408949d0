/*
 * primary/arena.c — the log arena of a context (docs/primary.md, "Memory: the log arena"): the
 * memory of every segment of every log on the context, mapped and registered in a few large
 * extents, carved into segments and handed out again when a segment is released. In steady state
 * (the application releases what it no longer reads) a rollover maps, zeroes and registers
 * nothing: the next segment is a range the arena already holds, registered with its extent.
 *
 * Extents are mapped by tw__fab_map_large (huge pages when the system has them reserved, else
 * 4 KiB pages advised for transparent huge pages, with one log line saying which), never touched
 * here (pages are backed as the writer first fills them), registered once with TW_MR_WRITE_SRC
 * only: no peer can read or write the arena, so no byte of a released segment can reach a backup
 * except through a write the primary sends (docs/log-format.md §7, "Reused segments on the
 * primary"). They stay until the context closes.
 *
 * The free ranges are kept sorted by address, one extent never merged with another; a request
 * takes the first range that fits (first fit, split) and a released range is merged with its
 * neighbours in the same extent, so logs with different segment sizes share one arena without
 * losing room to fragments of a fixed size. A few hundred ranges at most, touched once per
 * segment: a list walk is fine. No Debian library manages ranges of one registered region under
 * a byte budget (malloc arenas and jemalloc cannot be told to keep every byte inside registered
 * memory), hence this small allocator.
 *
 * Populating ahead: a page is backed (and zeroed by the kernel) when it is first written, in the
 * middle of an append. Each time a segment is handed out, the arena asks the populator to back
 * the pages of the next segment's worth of the extent with MADV_POPULATE_WRITE (Linux 5.14),
 * which faults pages in without changing any byte, so a writer that gets there first loses
 * nothing and the populator loses nothing either. The zeroing is the same work, done off the
 * appending thread: a huge page zeroed in the middle of an append stalls every append behind
 * it (docs/primary.md, "Memory: the log arena"). The populator is one thread for the process,
 * started with the first request, serving every arena in turn; a kernel without the advice
 * turns it off after one try.
 *
 * Threading: called by the context's driver (the progress thread, or the thread holding the
 * drive); the lock makes the counters readable from any thread and keeps a wrong caller safe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "primary/primary_int.h"

/* Extents grow by this much at least (or one segment, if larger), within the budget. */
#define ARENA_STEP ((size_t)64 << 20)
/* The populator backs this much per call, so that the close waits for at most one. */
#define POP_CHUNK ((size_t)2 << 20)
#define POP_PAGE ((size_t)4096)

struct arena_ext {
	struct arena_ext *next;
	uint8_t *base;
	size_t len;
	struct tw_mr *mr;
	size_t hwm; /* bytes from base ever handed out: below it a range is reused */
	size_t pop_want; /* bytes from base the populator is asked to have backed */
	size_t pop_done; /* bytes from base it has backed */
	bool huge;
};

struct arena_range {
	struct arena_range *next;
	uint8_t *buf;
	size_t len;
	struct arena_ext *ext;
};

struct tw_arena {
	struct tw_fab *fab;
	pthread_mutex_t lock;
	struct arena_ext *exts;
	struct arena_range *free; /* sorted by address */
	bool said_pages;          /* the page size was logged */
	struct tw_arena_stats st;
	/* The populator's queue (pop_mu). */
	struct tw_arena *pop_link;
	bool pop_queued;
};

static size_t arena_default_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	size_t b = pages > 0 && pg > 0 ? (size_t)pages * (size_t)pg / 4 : (size_t)1 << 30;

	return b < ARENA_STEP ? ARENA_STEP : b;
}

int tw__arena_create(struct tw_fab *fab, size_t budget, struct tw_arena **out)
{
	struct tw_arena *a = calloc(1, sizeof(*a));

	*out = NULL;
	if (!a)
		return -ENOMEM;
	a->fab = fab;
	a->st.budget = budget ? budget : arena_default_budget();
	pthread_mutex_init(&a->lock, NULL);
	*out = a;
	return 0;
}

/*
 * The populator: one thread for the process, started with the first request, serving every
 * arena in turn, a chunk at a time (file comment). Lock order: an arena's lock, then pop_mu.
 * It works on one arena outside pop_mu (pop_busy), and tw__arena_destroy waits for it to
 * leave that arena. Like libfabric, this is not for a child of fork() that goes on without
 * exec: the child has no populator, and one that was backing pages at the fork leaves
 * pop_mu taken there.
 */
static pthread_mutex_t pop_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pop_cv = PTHREAD_COND_INITIALIZER;      /* an arena was queued */
static pthread_cond_t pop_left_cv = PTHREAD_COND_INITIALIZER; /* pop_busy changed */
static struct tw_arena *pop_head, *pop_tail; /* arenas with pages to back, FIFO */
static struct tw_arena *pop_busy;            /* the arena it works on now */
static bool pop_started;
static bool pop_off; /* no thread, or no advice: appends back their own pages (atomic) */

/* The extent with pages to back, or NULL (the arena's lock held). */
static struct arena_ext *pop_next(struct tw_arena *a)
{
	for (struct arena_ext *e = a->exts; e; e = e->next)
		if (e->pop_done < e->pop_want)
			return e;
	return NULL;
}

/* Queue `a` at the tail unless it is queued (pop_mu held). */
static void pop_queue(struct tw_arena *a)
{
	if (a->pop_queued)
		return;
	a->pop_queued = true;
	a->pop_link = NULL;
	if (pop_tail)
		pop_tail->pop_link = a;
	else
		pop_head = a;
	pop_tail = a;
}

/* Take `a` out of the queue if it is there (pop_mu held). */
static void pop_unqueue(struct tw_arena *a)
{
	struct tw_arena **pp = &pop_head, *prev = NULL;

	if (!a->pop_queued)
		return;
	while (*pp && *pp != a) {
		prev = *pp;
		pp = &(*pp)->pop_link;
	}
	if (*pp)
		*pp = a->pop_link;
	if (pop_tail == a)
		pop_tail = prev;
	a->pop_queued = false;
}

/* Back one chunk of what `a` asked for, outside its lock (its extents stay mapped until
 * tw__arena_destroy, which waits for the populator to leave the arena). 1: more to do. */
static int pop_chunk(struct tw_arena *a)
{
	struct arena_ext *e;
	size_t from, to, page;
	int rc = -1, err = ENOSYS, more;

	pthread_mutex_lock(&a->lock);
	e = pop_next(a);
	if (!e) {
		pthread_mutex_unlock(&a->lock);
		return 0;
	}
	/* Whole pages: an explicit huge page extent (MAP_HUGETLB) is advised in 2 MiB units,
	 * and its length is a multiple of them. */
	page = e->huge ? TW_FAB_HUGE_PAGE : POP_PAGE;
	from = e->pop_done & ~(page - 1);
	to = TW_MIN(e->pop_want, from + POP_CHUNK);
	to = TW_MIN(e->len, (to + page - 1) & ~(page - 1));
	pthread_mutex_unlock(&a->lock);
#ifdef MADV_POPULATE_WRITE
	rc = madvise(e->base + from, to - from, MADV_POPULATE_WRITE);
	err = errno;
#endif
	if (rc != 0 && err != EINTR) { /* EINTR: a signal, the same chunk again */
		/* EINVAL: a kernel before 5.14. Appends back their pages as before. */
		tw_log_info("primary: log arena: populating ahead turned off: madvise: %s",
			    strerror(err));
		__atomic_store_n(&pop_off, true, __ATOMIC_RELAXED);
		return 0;
	}
	pthread_mutex_lock(&a->lock);
	if (rc == 0) {
		a->st.populated += to - TW_MIN(to, e->pop_done);
		e->pop_done = TW_MAX(e->pop_done, to);
	}
	more = pop_next(a) != NULL;
	pthread_mutex_unlock(&a->lock);
	return more;
}

static void *pop_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pop_mu);
	for (;;) {
		struct tw_arena *a = pop_head;
		int more;

		if (!a || __atomic_load_n(&pop_off, __ATOMIC_RELAXED)) {
			pthread_cond_wait(&pop_cv, &pop_mu);
			continue;
		}
		pop_unqueue(a);
		pop_busy = a;
		pthread_mutex_unlock(&pop_mu);
		more = pop_chunk(a);
		pthread_mutex_lock(&pop_mu);
		if (more)
			pop_queue(a); /* behind the others: arenas take turns */
		pop_busy = NULL;
		pthread_cond_broadcast(&pop_left_cv);
	}
	return NULL;
}

/* Ask the populator for the next `len` bytes after `end` of extent e (the arena's lock held). */
static void pop_ahead(struct tw_arena *a, struct arena_ext *e, size_t end, size_t len)
{
	size_t want = TW_MIN(e->len, end + len);

	if (__atomic_load_n(&pop_off, __ATOMIC_RELAXED) || want <= e->pop_want)
		return;
	e->pop_want = want;
	pthread_mutex_lock(&pop_mu);
	if (!pop_started) {
		pthread_attr_t at;
		pthread_t t;
		int rc = pthread_attr_init(&at);

		if (rc == 0) {
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			rc = pthread_create(&t, &at, pop_main, NULL);
			pthread_attr_destroy(&at);
		}
		if (rc) {
			tw_log_info("primary: log arena: no thread to populate ahead (%s); appends "
				    "back their pages", strerror(rc));
			__atomic_store_n(&pop_off, true, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&pop_mu);
			return;
		}
		pop_started = true;
	}
	pop_queue(a);
	pthread_cond_signal(&pop_cv);
	pthread_mutex_unlock(&pop_mu);
}

void tw__arena_destroy(struct tw_arena *a)
{
	if (!a)
		return;
	/* Out of the queue, and the populator out of it (it may queue it again while it works
	 * on it: taken out again after). Nothing else queues it: no segment is asked for now. */
	pthread_mutex_lock(&pop_mu);
	for (;;) {
		pop_unqueue(a);
		if (pop_busy != a)
			break;
		pthread_cond_wait(&pop_left_cv, &pop_mu);
	}
	pthread_mutex_unlock(&pop_mu);
	while (a->free) {
		struct arena_range *r = a->free;

		a->free = r->next;
		free(r);
	}
	while (a->exts) {
		struct arena_ext *e = a->exts;

		a->exts = e->next;
		if (e->mr)
			tw__mr_close(e->mr);
		tw__fab_free(e->base, e->len);
		free(e);
	}
	pthread_mutex_destroy(&a->lock);
	free(a);
}

/* Insert a free range, sorted, merging with neighbours of the same extent (lock held). */
static void range_put(struct tw_arena *a, struct arena_range *n)
{
	struct arena_range **pp = &a->free, *prev = NULL;

	while (*pp && (*pp)->buf < n->buf) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	n->next = *pp;
	*pp = n;
	if (n->next && n->next->ext == n->ext && n->buf + n->len == n->next->buf) {
		struct arena_range *x = n->next;

		n->len += x->len;
		n->next = x->next;
		free(x);
	}
	if (prev && prev->ext == n->ext && prev->buf + prev->len == n->buf) {
		prev->len += n->len;
		prev->next = n->next;
		free(n);
	}
}

/* Map and register a new extent of at least `len` bytes (lock held). */
static int grow(struct tw_arena *a, size_t len, char *why, size_t whylen)
{
	size_t room = a->st.budget - a->st.mapped, ext_len = len;
	struct arena_ext *e;
	struct arena_range *r;
	int rc;

	if (ext_len < ARENA_STEP)
		ext_len = TW_MIN(ARENA_STEP, room);
	if (ext_len >= TW_FAB_HUGE_PAGE && ext_len % TW_FAB_HUGE_PAGE &&
	    ext_len + TW_FAB_HUGE_PAGE - ext_len % TW_FAB_HUGE_PAGE <= room)
		ext_len += TW_FAB_HUGE_PAGE - ext_len % TW_FAB_HUGE_PAGE;
	if (len > room || ext_len < len) {
		a->st.refused++;
		snprintf(why, whylen, "log arena exhausted: %zu bytes needed, %zu of its budget "
			 "of %zu in use (release segments with tw_primary_unload or "
			 "tw_primary_trim, or raise arena_size)", len, a->st.used, a->st.budget);
		return -ENOSPC;
	}
	e = calloc(1, sizeof(*e));
	r = calloc(1, sizeof(*r));
	if (!e || !r) {
		free(e);
		free(r);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	e->base = tw__fab_map_large(ext_len, &e->huge);
	if (!e->base) {
		free(e);
		free(r);
		snprintf(why, whylen, "cannot map %zu bytes for the log arena", ext_len);
		return -ENOMEM;
	}
	e->len = ext_len;
	rc = tw__mr_reg(a->fab, e->base, ext_len, TW_MR_WRITE_SRC, &e->mr);
	if (rc < 0) {
		snprintf(why, whylen, "cannot register %zu bytes of log arena: %s (%s)", ext_len,
			 tw_strerror(rc), tw__fab_errmsg(a->fab));
		tw__fab_free(e->base, ext_len);
		free(e);
		free(r);
		return rc;
	}
	if (!a->said_pages) {
		a->said_pages = true;
		if (e->huge)
			tw_log_info("primary: log arena on 2 MiB huge pages (budget %zu bytes)",
				    a->st.budget);
		else
			tw_log_info("primary: log arena on 4 KiB pages, transparent huge pages "
				    "advised (no huge pages reserved: vm.nr_hugepages; budget %zu "
				    "bytes)", a->st.budget);
	}
	e->next = a->exts;
	a->exts = e;
	a->st.mapped += ext_len;
	a->st.extents++;
	if (e->huge)
		a->st.huge_extents++;
	r->buf = e->base;
	r->len = ext_len;
	r->ext = e;
	range_put(a, r);
	return 0;
}

int tw__arena_get(struct tw_arena *a, size_t len, uint8_t **buf_out, struct tw_mr **mr_out,
		  char *why, size_t whylen)
{
	struct arena_range **pp, *r;
	int rc = 0;

	pthread_mutex_lock(&a->lock);
	for (int pass = 0; pass < 2; pass++) {
		for (pp = &a->free; *pp && (*pp)->len < len; pp = &(*pp)->next)
			;
		if (*pp)
			break;
		if (pass == 0 && (rc = grow(a, len, why, whylen)) < 0)
			break;
	}
	if (rc == 0 && !*pp)
		rc = -ENOSPC; /* cannot happen: grow made a range of at least len */
	if (rc < 0) {
		pthread_mutex_unlock(&a->lock);
		return rc;
	}
	r = *pp;
	*buf_out = r->buf;
	*mr_out = r->ext->mr;
	/* Reused: the range held a segment before (below the extent's high-water mark). */
	if (r->buf < r->ext->base + r->ext->hwm)
		a->st.reused++;
	if (r->buf + len > r->ext->base + r->ext->hwm)
		r->ext->hwm = (size_t)(r->buf + len - r->ext->base);
	pop_ahead(a, r->ext, (size_t)(r->buf + len - r->ext->base), len);
	r->buf += len;
	r->len -= len;
	if (!r->len) {
		*pp = r->next;
		free(r);
	}
	a->st.used += len;
	a->st.segments++;
	if (a->st.used > a->st.peak)
		a->st.peak = a->st.used;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

void tw__arena_put(struct tw_arena *a, uint8_t *buf, size_t len)
{
	struct arena_ext *e;
	struct arena_range *r;

	if (!a || !buf)
		return;
	pthread_mutex_lock(&a->lock);
	for (e = a->exts; e && !(buf >= e->base && buf + len <= e->base + e->len); e = e->next)
		;
	r = e ? calloc(1, sizeof(*r)) : NULL;
	if (r) {
		r->buf = buf;
		r->len = len;
		r->ext = e;
		range_put(a, r);
	}
	/* (Without memory for its node the range is lost to the arena until it closes.) */
	a->st.used -= len;
	pthread_mutex_unlock(&a->lock);
}

void tw__arena_get_stats(struct tw_arena *a, struct tw_arena_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	*out = a->st;
	pthread_mutex_unlock(&a->lock);
}
