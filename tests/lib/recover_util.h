/*
 * tests/lib/recover_util.h — the integration tests' cluster: a set of local twd processes
 * (child.h: addresses from their `ready` lines) in a scratch directory; the numbered-object
 * payload the test primaries write, and an entry callback that checks a recovered log is
 * exactly objects 0, 1, 2 ... with intact payloads. One thread.
 */
#ifndef TW_TESTS_RECOVER_UTIL_H
#define TW_TESTS_RECOVER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <tailwind/recovery.h>

#include "proc.h"

#define RT_MAX_BK 8
#define RT_OBJ 100 /* bytes per object: seq (u64 LE) + pattern */

struct rt_cluster {
	const char *prov;
	unsigned n;
	char root[256];
	char dir[RT_MAX_BK][320];
	char addr[RT_MAX_BK][256];
	const char *addrs[RT_MAX_BK];
	struct proc *p[RT_MAX_BK];
	char twd[1024];
	char *const *extra; /* rt_start_with's */
};

/* Start n twd processes (buffer size and count as twd flags, e.g. "64K", "64"), their
 * directories under a fresh scratch directory (tmpdir.h, removed at exit too). Fatal on error. */
void rt_start(struct rt_cluster *c, const char *prov, unsigned n, const char *bufsize,
	      const char *buffers);
/* rt_start with the directories under `parent` (rt_start: $TMPDIR or /tmp). */
void rt_start_in(struct rt_cluster *c, const char *parent, const char *prov, unsigned n,
		 const char *bufsize, const char *buffers);
/* rt_start_in with more arguments for every twd (NULL-terminated, e.g. "--coordinator", URL;
 * borrowed until rt_stop: rt_restart passes them again); bufsize and buffers NULL: twd's
 * defaults. */
void rt_start_with(struct rt_cluster *c, const char *parent, const char *prov, unsigned n,
		   const char *bufsize, const char *buffers, char *const extra[]);
/* Start twd i again on its directory (after it was stopped or killed). */
void rt_restart(struct rt_cluster *c, unsigned i, const char *bufsize, const char *buffers);
/* rt_restart on its old address (tcp, sockets: --listen HOST:PORT), so that a peer that knew it
 * finds it there again. */
void rt_restart_at(struct rt_cluster *c, unsigned i, const char *bufsize, const char *buffers);
/* SIGTERM twd i and wait for it. Returns its exit status. */
int rt_stop_one(struct rt_cluster *c, unsigned i);
/* Stop every twd and remove the directories. */
void rt_stop(struct rt_cluster *c);

/* Object `seq`: RT_OBJ bytes. */
void rt_fill(uint8_t *p, uint64_t seq);

struct rt_check {
	uint64_t next;     /* next expected seq = objects accepted so far */
	uint64_t bad;      /* entries that were not the next object */
	char first_bad[200];
};
/* tw_recover callback: arg is a struct rt_check. Never stops the recovery. */
int rt_check_cb(void *arg, const struct tw_recovered_entry *e);

/* The next entry of a `twctl recover -o FILE` file (its length, u32 LE, then its bytes;
 * docs/operations.md): 1 when it is exactly len bytes long (read into buf), 0 at the end of the
 * file, -1 for an entry of another length or one cut short. */
int rt_read_entry(FILE *f, void *buf, uint32_t len);

/* Remove /dev/shm files a SIGKILLed shm process left behind (names containing ":<pid>:"). */
void rt_shm_cleanup(int pid);

/*
 * A primary killed while it writes (the crash tests): tests/integration/crash_primary appending
 * numbered objects to a log on the cluster's first three backups, segments of `seg` bytes, and
 * writing "acked N" for every acknowledgement. `acked`: the objects acknowledged so far (the
 * highest N + 1 of the lines read).
 */
struct rt_crasher {
	struct proc *p;
	int pid;
	uint64_t acked;
};
/* Spawn it (prim: its path, child_tool) and wait for its `ready` line. Fatal on error. */
void rt_crasher_start(struct rt_crasher *k, const char *prim, const struct rt_cluster *c,
		      uint64_t log_id, const char *seg);
/* Read its next "acked" line (20 s at most). Fatal when none comes (round: for the message). */
void rt_crasher_ack(struct rt_crasher *k, unsigned round);
/* Kill it with SIGKILL, wherever it is (on shm a twd frees a region lock it left held:
 * docs/fabric.md, "A writer killed holding a region lock"), take the ack lines it wrote before
 * dying, reap it and remove what it left in /dev/shm. */
void rt_crasher_kill(struct rt_crasher *k, const struct rt_cluster *c);

#endif
