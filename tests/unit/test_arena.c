/*
 * tests/unit/test_arena.c — the log arena of a context (docs/primary.md, "Memory: the log
 * arena"), over the in-memory fabric with in-process backups, on a budget of three segments:
 *
 *   - exhaustion: the append that needs a fourth segment fails with -ENOSPC, nothing is lost,
 *     the log stays healthy, the refusal is counted;
 *   - reuse after release: once segments are released the same append succeeds in memory that
 *     held an earlier segment, without a new extent (no map, no registration);
 *   - no stale bytes: a reused segment gets a seed of its own, and when the memory past what the
 *     segment wrote holds a well-formed continuation of the log (the worst stale bytes there can
 *     be: they would pass the scan), neither a failover's copy to a spare nor the recovery of the
 *     open segment by a takeover ever sees them: the takeover delivers exactly the entries
 *     appended. This fails if any path sends bytes of the segment past the writer's position;
 *   - reuse after takeover: the fenced log's segments go back to the arena when it is closed,
 *     and the log taken over on the same context continues in that memory; a last recovery
 *     returns every entry of both incarnations;
 *   - pages backed ahead: after a segment is handed out, the populator backs the next
 *     segment's pages before anything writes them (mincore), and the bytes already written in
 *     the segment it went over are unchanged; arenas closed while the populator has them
 *     queued or works on them (under ASan and TSan: nothing used after its close), after
 *     which it still serves a new arena;
 *   - populating refused, each in a child process made before this one starts the populator:
 *     madvise refuses the advice (a seccomp filter answers EINVAL, as a kernel before 5.14
 *     does) or no thread can be made (clone fails with EAGAIN). The arena says so once, backs
 *     nothing ahead, and its segments still take writes (skipped under TSan, which does not
 *     let a child of a threaded process make threads).
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tailwind/backup.h>
#include <tailwind/context.h>
#include <tailwind/primary.h>
#include <tailwind/recovery.h>

#include "core/util.h"
#include "recover_util.h"
#include "primary/primary_int.h"
#include "tap.h"
#include "tbackup.h"
#include "tmpdir.h"

#define SEG (64u * 1024u)
#define OBJ RT_OBJ
#define NB 5
#define LOG 900u

static char root[256];

static void log_cfg(struct tw_primary_config *cfg)
{
	tw_primary_config_init(cfg);
	cfg->log_id = LOG;
	cfg->replicas = 3;
	cfg->segment_size = SEG;
	cfg->rerep_rate = 0;
	cfg->mode = TW_PRIMARY_ASYNC; /* a shared context serves async logs */
}

static uint64_t arena_used(struct tw_ctx *ctx)
{
	struct tw_ctx_stats cs;

	tw_ctx_get_stats(ctx, &cs);
	return cs.arena.used;
}

/* The progress thread gives released segments back on its next pass (released ones wait on the
 * log's free list): wait for the arena's count, bounded. */
static bool wait_used(struct tw_ctx *ctx, uint64_t want)
{
	for (uint64_t end = tw_now_ns() + 5000000000ull; tw_now_ns() < end;) {
		if (arena_used(ctx) == want)
			return true;
		tw__fab_wakeup(ctx->fab);
		sched_yield();
	}
	return false;
}

/* Pages of [p, p + len) resident now (mincore), or -1. */
static long resident(const uint8_t *p, size_t len)
{
	static unsigned char vec[(4u << 20) / 4096];
	long n = 0;

	if (len > sizeof(vec) * 4096 || mincore((void *)p, len, vec) != 0)
		return -1;
	for (size_t i = 0; i < (len + 4095) / 4096; i++)
		n += vec[i] & 1;
	return n;
}

/* A segment handed out makes the populator back the next one's pages (2 MiB segments,
 * each its own huge page if transparent huge pages back the arena). */
static void test_populate_ahead(struct tw_fab *fab)
{
	const size_t big = 2u << 20;
	struct tw_arena_stats as = { 0 };
	struct tw_arena *a = NULL;
	struct tw_mr *mr;
	uint8_t *s1 = NULL;
	char why[256];
	long before, after;
	size_t bad = 0;

	TAP_REQUIRE(tw__arena_create(fab, 4 * big, &a) == 0, "an arena of four 2 MiB segments");
	TAP_REQUIRE(tw__arena_get(a, big, &s1, &mr, why, sizeof(why)) == 0, "a segment: %s",
		    why);
	/* What an append writes first: the populator goes over these pages too. */
	for (size_t i = 0; i < big; i += 4096)
		s1[i] = (uint8_t)(i >> 12 | 1);
	before = resident(s1 + big, big);
	for (uint64_t end = tw_now_ns() + 10000000000ull; tw_now_ns() < end;) {
		tw__arena_get_stats(a, &as);
		if (as.populated >= 2 * big)
			break;
		sched_yield();
	}
	after = resident(s1 + big, big);
	ok(as.populated >= 2 * big && after == (long)(big / 4096), "the next segment's pages "
	   "backed before anything wrote them (%ld of %zu resident, %ld before; %" PRIu64
	   " bytes populated)", after, big / 4096, before, as.populated);
	for (size_t i = 0; i < big; i += 4096)
		bad += s1[i] != (uint8_t)(i >> 12 | 1);
	is_int(bad, 0, "the pages written before the populator came are unchanged");
	tw__arena_put(a, s1, big);
	tw__arena_destroy(a); /* waits for the populator to leave it */
}

/* Arenas closed at once after asking: the close must take each out of the populator's hands. */
static void test_populate_closes(struct tw_fab *fab)
{
	const size_t big = 2u << 20;
	struct tw_arena *a[3];
	struct tw_mr *mr;
	uint8_t *s;
	char why[256];
	unsigned got = 0;

	for (unsigned round = 0; round < 10; round++) {
		for (unsigned i = 0; i < 3; i++) {
			a[i] = NULL;
			if (tw__arena_create(fab, 4 * big, &a[i]) == 0 &&
			    tw__arena_get(a[i], big, &s, &mr, why, sizeof(why)) == 0)
				got++;
		}
		for (unsigned i = 3; i-- > 0;)
			tw__arena_destroy(a[i]); /* closing order: the newest first */
	}
	is_int(got, 30, "30 arenas asked for pages ahead and closed at once");
}

#if defined(__x86_64__)
#define SECCOMP_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SECCOMP_ARCH AUDIT_ARCH_AARCH64
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum refuse { REFUSE_ADVICE, REFUSE_THREAD };

#ifdef SECCOMP_ARCH
/* This process's system calls from now on: madvise(..., MADV_POPULATE_WRITE) fails with EINVAL,
 * or clone3 with ENOSYS and clone with EAGAIN (pthread_create falls back from the first to the
 * second, then fails). */
static int refuse(enum refuse what)
{
	struct sock_filter advice[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_ARCH, 0, 5),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_POPULATE_WRITE, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_filter thread[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_ARCH, 0, 5),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {
		.len = 8,
		.filter = what == REFUSE_ADVICE ? advice : thread,
	};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -errno;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0 ? -errno : 0;
}
#endif

static unsigned refusals_logged;

static void count_refusals(void *arg, enum tw_diag_level level, const char *msg)
{
	(void)arg;
	(void)level;
	if (strstr(msg, "populating ahead turned off") || strstr(msg, "no thread to populate"))
		__atomic_add_fetch(&refusals_logged, 1, __ATOMIC_RELAXED);
}

/*
 * The child's part: an arena whose populating is refused. Exit status 0, or the number of the
 * check that failed (the parent names it): 1 the filter, 2 the fabric, 3 the arena, 4 a
 * segment, 5 no refusal logged, 6 logged more than once, 7 pages counted as populated, 8 the
 * written bytes wrong.
 */
static int refused_child(enum refuse what)
{
	const size_t big = 2u << 20;
	struct tw_fab_config fc;
	struct tw_fab *fab = NULL;
	struct tw_arena_stats as = { 0 };
	struct tw_arena *a = NULL;
	struct tw_mr *mr;
	uint8_t *s[3];
	char why[256];
	size_t bad = 0;

#ifdef SECCOMP_ARCH
	if (refuse(what) != 0)
		return 1;
#else
	return 1;
#endif
	tw_diag_set_level(TW_DIAG_INFO);
	tw_diag_set_sink(count_refusals, NULL);
	tw__fab_config_init(&fc);
	fc.provider = "mem";
	if (tw__fab_open(&fc, NULL, &fab) != 0)
		return 2;
	if (tw__arena_create(fab, 4 * big, &a) != 0)
		return 3;
	if (tw__arena_get(a, big, &s[0], &mr, why, sizeof(why)) != 0)
		return 4;
	/* The populator says so when madvise fails on its thread; pthread_create's failure is
	 * said at once. A deadline, not a sleep: the message is what is waited for. */
	for (uint64_t end = tw_now_ns() + 10000000000ull;
	     !__atomic_load_n(&refusals_logged, __ATOMIC_RELAXED) && tw_now_ns() < end;)
		sched_yield();
	if (!__atomic_load_n(&refusals_logged, __ATOMIC_RELAXED))
		return 5;
	for (unsigned i = 1; i < 3; i++)
		if (tw__arena_get(a, big, &s[i], &mr, why, sizeof(why)) != 0)
			return 4;
	for (unsigned i = 0; i < 3; i++)
		for (size_t off = 0; off < big; off += 4096)
			s[i][off] = (uint8_t)(i + off / 4096);
	for (unsigned i = 0; i < 3; i++)
		for (size_t off = 0; off < big; off += 4096)
			bad += s[i][off] != (uint8_t)(i + off / 4096);
	tw__arena_get_stats(a, &as);
	if (__atomic_load_n(&refusals_logged, __ATOMIC_RELAXED) != 1)
		return 6;
	if (as.populated)
		return 7;
	if (bad)
		return 8;
	for (unsigned i = 0; i < 3; i++)
		tw__arena_put(a, s[i], big);
	tw__arena_destroy(a);
	tw__fab_close(fab);
	return 0;
}

/* Run refused_child in a child process; its exit status, or -1. */
static int run_refused(enum refuse what)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(refused_child(what)); /* _exit: no sanitizer's exit-time checks, which clone */
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_populate_refused(void)
{
	static const char *const check[] = {
		"ok", "the seccomp filter could not be installed", "the mem fabric did not open",
		"no arena", "no segment", "no refusal logged", "the refusal logged more than once",
		"pages counted as populated", "the bytes written read back wrong",
	};
#if defined(__SANITIZE_THREAD__)
	tap_skip(2, "TSan: a child of a threaded process may not make threads");
	return;
#elif !defined(SECCOMP_ARCH)
	tap_skip(2, "no seccomp filter written for this architecture");
	return;
#endif
	for (int what = REFUSE_ADVICE; what <= REFUSE_THREAD; what++) {
		int rc = run_refused((enum refuse)what);

		is_int(rc, 0, "%s: the arena logs it once, populates nothing, and its segments take "
		       "writes (%s)", what == REFUSE_ADVICE ? "madvise refuses MADV_POPULATE_WRITE" :
		       "no thread can be made", rc >= 0 && rc < 9 ? check[rc] : "the child died");
	}
}

int main(void)
{
	struct tbackup b[NB];
	const char *addrs[NB];
	struct tw_ctx_config cc;
	struct tw_ctx_stats cs;
	struct tw_primary_config cfg;
	struct tw_primary_stats st;
	struct tw_primary *p = NULL, *q = NULL;
	struct tw_ctx *ctx = NULL;
	struct rt_check k;
	uint8_t obj[OBJ];
	uint64_t n = 0, mapped;
	uint32_t seed0;
	char err[1024];
	int rc;

	/* First: a child of this process before it has a populator (or any thread) of its own. */
	test_populate_refused();
	tmpdir_make(root, sizeof(root), NULL, "test_arena");
	for (unsigned i = 0; i < NB; i++) {
		tbackup_start(&b[i], root, i, "mem", 32, SEG, 0);
		addrs[i] = b[i].addr;
	}
	tw_ctx_config_init(&cc);
	cc.provider = "mem";
	cc.backups = addrs;
	cc.n_backups = NB;
	cc.op_timeout_ms = 2000;
	cc.arena_size = 3 * SEG;
	rc = tw_ctx_open(&cc, &ctx, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "context: %s", err);
	log_cfg(&cfg);
	rc = tw_primary_open_on(ctx, &cfg, &p, err, sizeof(err));
	TAP_REQUIRE(rc == 0, "open: %s", err);
	seed0 = p->cur->seed;

	/* Exhaustion: three segments fit, the fourth does not. */
	for (;;) {
		rt_fill(obj, n);
		rc = tw_primary_append(p, obj, OBJ, NULL);
		if (rc)
			break;
		n++;
	}
	is_int(rc, -ENOSPC, "the append that needs a fourth segment: -ENOSPC (%s)",
	       tw_primary_errmsg(p));
	ok(p->cur->id == 2 && n > 3 * (SEG / (OBJ + 12 + 8)) - 3, "three segments filled first "
	   "(%" PRIu64 " entries, open segment %u)", n, p->cur->id);
	is_int(tw_primary_flush(p), 0, "the log is healthy: every earlier append acknowledged");
	tw_primary_get_stats(p, &st);
	ok(st.acked == n && !st.failed, "%" PRIu64 " acknowledged, none failed", st.acked);
	ok(st.arena.refused >= 1 && st.arena.used == 3 * SEG && st.arena.mapped == 3 * SEG &&
	   st.arena.extents == 1, "the arena counts it: refused %" PRIu64 ", %" PRIu64 " of %"
	   PRIu64 " bytes used, %" PRIu64 " extent(s)", st.arena.refused, st.arena.used,
	   st.arena.mapped, st.arena.extents);

	/* Reuse after release. */
	mapped = st.arena.mapped;
	is_int(tw_primary_unload(p, 2), 2, "segments 0 and 1 released");
	ok(wait_used(ctx, SEG), "their memory is back in the arena (%" PRIu64 " bytes used)",
	   arena_used(ctx));
	rt_fill(obj, n);
	rc = tw_primary_append(p, obj, OBJ, NULL);
	is_int(rc, 0, "the same append succeeds after the release (%s)",
	       rc ? tw_primary_errmsg(p) : "ok");
	n += rc == 0;
	tw_ctx_get_stats(ctx, &cs);
	ok(p->cur->id == 3 && cs.arena.reused >= 1 && cs.arena.mapped == mapped &&
	   cs.arena.extents == 1, "segment 3 is in reused memory (%" PRIu64 " reused), nothing "
	   "mapped or registered (%" PRIu64 " bytes, %" PRIu64 " extent)", cs.arena.reused,
	   cs.arena.mapped, cs.arena.extents);
	ok(p->cur->seed != seed0 && p->cur->seed != 0, "the reused memory's segment has a seed "
	   "of its own (%08x, segment 0's %08x)", p->cur->seed, seed0);
	for (int i = 0; i < 40; i++, n++) {
		rt_fill(obj, n);
		TAP_REQUIRE(tw_primary_append(p, obj, OBJ, NULL) == 0, "append");
	}
	TAP_REQUIRE(tw_primary_flush(p) == 0, "flush");

	/* The worst stale bytes: past the writer's position, a well-formed continuation of this
	 * very segment (same seed, same chain), as stale memory could hold by accident. Nothing
	 * may ever send them. */
	{
		struct tw_log_writer w;
		uint8_t fake[OBJ];
		size_t off, len;
		unsigned added = 0;

		tw__primary_lock(p);
		w = p->cur->w;
		tw__primary_unlock(p);
		memset(fake, 0xee, sizeof(fake));
		while (tw_log_writer_append(&w, fake, OBJ, &off) == 0 && ++added < 100)
			;
		ok(tw_log_writer_seal(&w, &off, &len) == 0 && len > 0, "%u well-formed entries "
		   "planted past the segment's end (%zu bytes at %zu)", added, len, off);
	}
	/* A backup holding a replica stops: the failover copies the segment to a spare. */
	{
		uint64_t end = tw_now_ns() + 5000000000ull;
		unsigned vi = NB;

		for (unsigned i = 0; i < NB; i++)
			if (!strcmp(b[i].addr, p->bk[p->cur->rep[0]].addr))
				vi = i;
		TAP_REQUIRE(vi < NB, "the replica's backup");
		tbackup_stop(&b[vi]);
		do {
			tw__fab_wakeup(ctx->fab);
			sched_yield();
			tw_primary_get_stats(p, &st);
		} while (!st.failovers && tw_now_ns() < end);
		ok(st.failovers == 1 && st.rereplications >= 1, "backup %u stopped; its replica was "
		   "copied to a spare (%" PRIu64 " failover, %" PRIu64 " re-replications)", vi,
		   st.failovers, st.rereplications);
	}

	/* A takeover on the same context recovers the open segment from its replicas. */
	{
		struct tw_recover_result res;

		memset(&k, 0, sizeof(k));
		log_cfg(&cfg);
		rc = tw_primary_takeover_on(ctx, &cfg, rt_check_cb, &k, &res, &q, err, sizeof(err));
		is_int(rc, 0, "the log taken over on the context (%s)", rc ? err : "ok");
		ok(k.next == n && k.bad == 0, "the takeover delivered exactly the %" PRIu64
		   " entries appended (%" PRIu64 " delivered, %" PRIu64 " not ours)", n, k.next,
		   k.bad);
	}
	rc = tw_primary_close(p);
	ok(rc == -TW_EFENCED || rc == -TW_ENOBACKUP, "the old incarnation is fenced (%s)",
	   tw_strerror(rc));
	p = NULL;
	ok(wait_used(ctx, SEG), "its segments are back in the arena (%" PRIu64 " bytes used: the "
	   "new incarnation's one)", arena_used(ctx));

	/* Reuse after takeover: the new incarnation rolls over into the old one's memory. */
	if (q) {
		uint64_t first = n;

		tw_ctx_get_stats(ctx, &cs);
		mapped = cs.arena.reused;
		for (uint64_t i = 0; i < 2 * SEG / (OBJ + 12); i++, n++) {
			rt_fill(obj, n);
			rc = tw_primary_append(q, obj, OBJ, NULL);
			if (rc)
				break;
		}
		is_int(rc, 0, "the new incarnation appends across two rollovers (%s)",
		       rc ? tw_primary_errmsg(q) : "ok");
		tw_ctx_get_stats(ctx, &cs);
		ok(cs.arena.reused >= mapped + 2 && cs.arena.extents == 1 &&
		   cs.arena.mapped == 3 * SEG, "in memory of the fenced incarnation (%" PRIu64
		   " reused segments, %" PRIu64 " extent)", cs.arena.reused, cs.arena.extents);
		is_int(tw_primary_close(q), 0, "closed");
		q = NULL;
		memset(&k, 0, sizeof(k));
		rc = tbackup_recover(addrs, NB, LOG, rt_check_cb, &k, NULL);
		ok(rc == 0 && k.next == n && k.bad == 0, "recovery: all %" PRIu64 " entries of "
		   "both incarnations, the %" PRIu64 " after the takeover included (%" PRIu64
		   " delivered, %" PRIu64 " bad)", n, n - first, k.next, k.bad);
	}
	test_populate_closes(ctx->fab);
	test_populate_ahead(ctx->fab); /* the populator still serves after those closes */
	is_int(tw_ctx_close(ctx), 0, "context closed");
	for (unsigned i = 0; i < NB; i++)
		tbackup_stop(&b[i]);
	tmpdir_remove(root);
	return tap_exit();
}
