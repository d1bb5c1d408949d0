/*
 * examples/kv/kv_stats.c — what `twkv stats` (STATS) reports: counters of the service, the
 * library's primaries and backup, and the CPU time of each role, per thread.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kv_server_int.h"

/* ------------------------------------------------------------------ CPU per role */

static uint64_t tid_cpu_ns(pid_t tid)
{
	char path[64], buf[128];
	unsigned long long ns = 0;
	int fd;
	ssize_t n;

	/* Documentation/scheduler/sched-stats.rst: the first field is the time spent on the CPU,
	 * in nanoseconds. */
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return UINT64_MAX; /* gone */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return UINT64_MAX;
	buf[n] = 0;
	return sscanf(buf, "%llu", &ns) == 1 ? ns : UINT64_MAX;
}

static struct tid_cpu *tid_find(struct kv_server *s, pid_t tid)
{
	for (unsigned i = 0; i < s->ntids; i++)
		if (s->tids[i].tid == tid)
			return &s->tids[i];
	return NULL;
}

static void tid_add(struct kv_server *s, pid_t tid, enum kv_role role)
{
	struct tid_cpu *t = tid_find(s, tid);

	if (!t && s->ntids < KV_MAX_THREADS) {
		t = &s->tids[s->ntids++];
		t->tid = tid;
		t->ns = 0;
	}
	if (t)
		t->role = role;
}

void kv_role_self(struct kv_server *s, enum kv_role role)
{
	pthread_mutex_lock(&s->cpu_mu);
	tid_add(s, gettid(), role);
	pthread_mutex_unlock(&s->cpu_mu);
}

/* Every thread of the process not known yet gets `role` (or, for role KV_ROLES, only the CPU
 * times are refreshed and unknown threads count as the library's primary threads). */
static void scan_threads(struct kv_server *s, enum kv_role role)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		pid_t tid = (pid_t)atoi(e->d_name);
		struct tid_cpu *t;
		uint64_t ns;

		if (tid <= 0)
			continue;
		t = tid_find(s, tid);
		if (!t && role != KV_ROLES) {
			tid_add(s, tid, role);
			continue;
		}
		if (!t) {
			/* Started by the library after the backup: a primary's progress thread (or its
			 * coordinator session, a recovery's fetch thread). */
			tid_add(s, tid, KV_ROLE_REPLICATE);
			t = tid_find(s, tid);
		}
		ns = tid_cpu_ns(tid);
		if (t && ns != UINT64_MAX)
			t->ns = ns;
	}
	closedir(d);
}

void kv_role_new_threads(struct kv_server *s, enum kv_role role)
{
	pthread_mutex_lock(&s->cpu_mu);
	scan_threads(s, role);
	pthread_mutex_unlock(&s->cpu_mu);
}

/* CPU seconds per role since the start; a thread that ended keeps its last reading. */
static void cpu_by_role(struct kv_server *s, uint64_t ns[KV_ROLES])
{
	memset(ns, 0, sizeof(uint64_t) * KV_ROLES);
	pthread_mutex_lock(&s->cpu_mu);
	scan_threads(s, KV_ROLES);
	for (unsigned i = 0; i < s->ntids; i++)
		ns[s->tids[i].role] += s->tids[i].ns;
	pthread_mutex_unlock(&s->cpu_mu);
}

void kv_cpu_by_role(struct kv_server *s, uint64_t ns[KV_ROLES])
{
	cpu_by_role(s, ns);
}

/* ------------------------------------------------------------------ the report */

static void put_line(char *buf, size_t cap, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void put_line(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*at >= cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *at, cap - *at, fmt, ap);
	va_end(ap);
	if (n > 0)
		*at += (size_t)n < cap - *at ? (size_t)n : cap - *at - 1;
}

size_t kv_stats_text(struct kv_server *s, char *buf, size_t cap)
{
	static const char *const role[KV_ROLES] = { "serve", "replicate", "backup", "other" };
	size_t at = 0;
	uint64_t cpu[KV_ROLES], keys = 0;
	struct tw_primary_stats ps, sum;
	struct tw_backup_stats bs;
	struct rusage ru;

	memset(&sum, 0, sizeof(sum));
	cpu_by_role(s, cpu);
	getrusage(RUSAGE_SELF, &ru);
	tw_backup_get_stats(s->backup, &bs);
	put_line(buf, cap, &at, "id %d\nreplication %s\nprovider %s\n", s->me,
		 s->cfg.rpc_baseline ? "rpc" : "onesided", s->provider);
	put_line(buf, cap, &at, "gets %" PRIu64 "\nputs %" PRIu64 "\nput_batches %" PRIu64
		 "\nnot_owner %" PRIu64 "\nretries %" PRIu64 "\nbad %" PRIu64 "\n", s->gets,
		 s->puts, s->put_batches, s->not_owner, s->retries, s->bad);
	for (unsigned i = 0; i < KV_ROLES; i++)
		put_line(buf, cap, &at, "cpu_%s_ns %" PRIu64 "\n", role[i], cpu[i]);
	put_line(buf, cap, &at, "cpu_process_ns %" PRIu64 "\n",
		 (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
		 (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u);
	put_line(buf, cap, &at, "mem_budget %" PRIu64 "\nmem_used %" PRIu64 "\nmem_peak %"
		 PRIu64 "\nsegment_size %zu\n", s->cfg.memory, kv_mem_used(s), s->mem_peak,
		 s->cfg.segment_size);
	for (unsigned i = 0; i < s->map.partitions; i++) {
		struct part *pt = &s->parts[i];

		if (pt->state != PART_SERVING)
			continue;
		tw_primary_get_stats(pt->p, &ps);
		sum.appends += ps.appends;
		sum.bytes += ps.bytes;
		sum.writes += ps.writes;
		sum.rpcs += ps.rpcs;
		sum.segments += ps.segments;
		sum.failovers += ps.failovers;
		sum.backups_lost += ps.backups_lost;
		keys += pt->idx.count;
		put_line(buf, cap, &at, "part %u keys %zu head %" PRIu32 " free_below %"
			 PRIu32 " epoch %" PRIu64 " puts %" PRIu64 " gets %" PRIu64 " passes %"
			 PRIu64 " relocated %" PRIu64 " relocated_bytes %" PRIu64
			 " segments_freed %" PRIu64 "\n", i, pt->idx.count, pt->head,
			 pt->free_below, tw_primary_epoch(pt->p), pt->puts, pt->gets, pt->passes,
			 pt->relocated, pt->relocated_bytes, pt->segments_freed);
	}
	put_line(buf, cap, &at, "keys %" PRIu64 "\nappends %" PRIu64 "\nappend_bytes %"
		 PRIu64 "\nwrites %" PRIu64 "\nrpcs %" PRIu64 "\nsegments %" PRIu64
		 "\nfailovers %" PRIu64 "\nbackups_lost %" PRIu64 "\n", keys, sum.appends,
		 sum.bytes, sum.writes, sum.rpcs, sum.segments, sum.failovers, sum.backups_lost);
	put_line(buf, cap, &at, "takeovers %" PRIu64 "\nlast_takeover_ms %" PRIu64
		 "\nlast_recovered %" PRIu64 "\nlast_live %" PRIu64 "\nlast_reappend_ms %" PRIu64
		 "\n", s->takeovers, s->last_takeover_ms, s->last_recovered, s->last_live,
		 s->last_reappend_ms);
	put_line(buf, cap, &at, "lease_refused %" PRIu64 "\n", s->lease_refused);
	{
		unsigned standing = 0;

		for (unsigned i = 0; i < s->map.partitions; i++)
			standing += s->parts[i].standby;
		put_line(buf, cap, &at, "standby_for %u\nrejoins %" PRIu64 "\n", standing,
			 s->rejoins);
	}
	put_line(buf, cap, &at, "backup_rpcs %" PRIu64 "\nbackup_flushes %" PRIu64
		 "\nbackup_segments_on_disk %" PRIu64 "\nbackup_buffers_open %" PRIu64 "\n",
		 bs.handler_calls, bs.flushes, bs.segments_on_disk, bs.buffers_open);
	return at;
}
