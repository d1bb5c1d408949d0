/*
 * tools/bench.h — what the files of twbench share (see docs/twbench.md):
 *
 *   twbench.c       main, options, the sweep loop
 *   bench_spawn.c   local twd's: find, start (tools/proc.h), stop, SIGINT/SIGTERM
 *   bench_cpu.c     backup CPU: /proc/<pid>/stat of local twd's, Stats RPC of remote ones;
 *                   the primary's: this process (CLOCK_PROCESS_CPUTIME_ID)
 *   bench_run.c     the onesided and rpc modes (the real primary) and the measuring helpers
 *   bench_raw.c     raw mode: bare one-sided writes, no log format
 *   bench_logs.c    --logs N: many logs in one process (one context, or private ones)
 *   bench_report.c  the text tables and the JSON line
 *
 * Threading: main thread only, except the primary's own progress thread in --async runs (the
 * callbacks run there and touch only struct run) and the signal thread of bench_spawn.c.
 */
#ifndef TW_TOOLS_BENCH_H
#define TW_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tailwind/primary.h>

#include "exit.h"
#include "peer/peer.h"
#include "proto/rpc.h"

#define MAX_BACKUPS 16

#define MAX_LIST 32

#define MAX_RESULTS 1024

enum bmode { M_ONESIDED = 0, M_RPC, M_RAW, M_COUNT };
extern const char *const mode_names[M_COUNT];

struct opts {
	const char *provider;
	char *backups_arg;
	unsigned rs[MAX_LIST], n_r;             /* -r list */
	uint64_t count;
	uint32_t sizes[MAX_LIST];               /* --size/--sizes list */
	unsigned n_sizes;
	bool async;
	bool driven;                            /* --driven: async appends, no progress thread */
	unsigned batches[MAX_LIST], n_batches;  /* --batch list */
	unsigned inflights[MAX_LIST], n_inflights;
	double rates[MAX_LIST];                 /* --rate list; 0: closed loop */
	unsigned n_rates;
	enum bmode modes[M_COUNT];
	unsigned n_modes;
	size_t segment_size;
	size_t twd_buffers;
	bool json;
	bool busy_poll;
	bool preopen;
	bool keep_segments;                     /* --keep-segments: never tw_primary_unload */
	size_t arena_size;                      /* --arena-size (0: the library's default) */
	bool progress;
	const char *twd_path;
	uint64_t lat_count;
	uint64_t max_bytes;                     /* cap count * size per run (0: none) */
	bool settle;                            /* wait for idle backups between runs */
	const char *key_file;                   /* --key-file, else $TW_KEY_FILE (resolved) */
	unsigned logs;                          /* --logs N: N logs in one process (0: off) */
	bool logs_private;                      /* --logs-private: a private context each */
};

/* One point of a sweep. */
struct point {
	uint32_t size;
	unsigned r, batch, inflight;
	double rate; /* offered objects/s; 0: closed loop */
};

/* What one run measured. */
struct result {
	struct point pt;
	enum bmode mode;
	uint64_t count;
	double secs, ops, mbs;
	uint64_t n_lat;            /* synchronous latency samples */
	double p50, p99, p999;     /* synchronous append (raw: single write to r) latency, us */
	bool have_ack;
	double a50, a99, a999;     /* async submit (or scheduled time) -> ack, us */
	unsigned n_cpu;
	double cpu[MAX_BACKUPS];   /* process CPU s of each backup over the replication phase */
	double cpu_main[MAX_BACKUPS]; /* its progress (main) thread only; -1 unknown */
	double cpu_sum, cpu_main_sum;
	bool cpu_ok, cpu_main_ok;
	/* The primary's own CPU over the same phase: this process (the appending thread, the
	 * primary's progress thread in --async runs; raw mode's writer). -1 unknown. */
	double cpu_primary;
	/* Of it, the thread that appends (twbench's main thread: in --async runs the rest is the
	 * primary's progress thread, and the provider's threads if it has any). -1 unknown. */
	double cpu_caller;
	/* The primary's counters of the run (raw mode fills writes, segments and the RPCs). */
	struct tw_primary_stats st;
};

/* The runs done so far, in order (twbench.c fills them, bench_report.c prints them). */
extern struct result results[MAX_RESULTS];
extern unsigned n_results;

/* Asynchronous and raw runs time one object in ACK_SAMPLE (submit -> ack; its latency goes to
 * lat_ns[i / ACK_SAMPLE]): two clock reads per object were 12% of the primary's samples, more
 * than its CRC32C, and charged the benchmark's own bookkeeping to the mode with more
 * completions. Synchronous latencies time every append. A power of two. */
#define ACK_SAMPLE 16u
#define ACK_SAMPLED(i) (((i) & (ACK_SAMPLE - 1)) == 0)
#define ACK_SAMPLES(n) (((n) + ACK_SAMPLE - 1) / ACK_SAMPLE)

/* What a run of the primary (or of raw mode) records per object. */
struct run {
	uint64_t *t_submit;
	uint64_t *lat_ns; /* nanoseconds, 64-bit (32 bits clamped every latency at 4.29 s) */
	uint64_t done;
	uint64_t errors;
	int first_err;
};

/* twbench.c */
uint64_t now_ns(void);
uint64_t next_log_id(void);
/* Connect `p` (tw__peer_init done) on `fab` as twbench (an admin; the cluster key's
 * challenge-response when there is one). A failed Handshake is said on stderr; a failed connect
 * (p->failed: TW_PEER_CONNECT or TW_PEER_RPC) is the caller's to say or not. */
int bench_connect(struct tw_peer *p, struct tw_fab *fab);

/* bench_spawn.c: local twd's. n_twd is 0 with --backups. */
extern unsigned n_twd;
/* Start max_r local twd's in a temporary directory (removed at exit), SIGINT/SIGTERM handled;
 * their addresses go to addrs[*n_addrs...]. Returns 0, or the exit code after a message. */
int local_twds_start(const struct opts *o, unsigned max_r, const char **addrs,
		     unsigned *n_addrs);
/* Stop (SIGTERM, then SIGKILL after 20 s) and reap the local twd's, remove the directory. */
void stop_twds(void);
/* pid of local twd i, or 0. */
int twd_pid(unsigned i);

/* bench_cpu.c: backup and primary CPU accounting around one replication phase. */
struct cpumark {
	double proc[MAX_BACKUPS], main[MAX_BACKUPS];
	double self; /* this process: the primary (or raw mode's writer); -1 unknown */
	double thread; /* the calling thread (the one that appends or writes); -1 unknown */
};
void cpu_mark(struct cpumark *m);
void cpu_delta(const struct cpumark *a, const struct cpumark *b, struct result *res);
void settle_backups(void);
/* Without local twd's: a connection to each backup for its Stats RPC. */
void remote_stats_open(const char *provider, const char *const *addrs, unsigned n);
/* The buffer size backup i announced at the handshake of remote_stats_open, 0 if unknown. */
uint64_t remote_buffer_size(unsigned i);
void remote_stats_close(void);

/* bench_run.c */
int run_primary(const struct opts *o, const char *const *addrs, unsigned n_addrs,
		enum bmode mode, struct result *res, uint8_t *payload, struct run *run);
void pcts(uint64_t *v, uint64_t n, double *p50, double *p99, double *p999);
void progress_bar(uint64_t done, uint64_t total);
uint64_t sched_ns(uint64_t t0, double rate, uint64_t i);
void wait_until(uint64_t t);

/* bench_raw.c */
int run_raw(const struct opts *o, const char *const *addrs, struct result *res,
	    uint8_t *payload, struct run *run);

/* bench_logs.c: prints its own report. 0 or a negative code (after a message). */
int run_logs(const struct opts *o, const char *const *addrs, unsigned n_addrs, uint8_t *payload);

/* bench_report.c */
void print_json(const struct opts *o);
void print_single(const struct opts *o, const struct result *x);
void print_table(const struct opts *o);

#endif
