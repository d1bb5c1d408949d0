/*
 * examples/kv/kv_spawn.h — start local twkv servers for twkv-ycsb and wait for their `ready`
 * lines (no sleeping: a blocking read of the child's stdout, bounded by poll).
 */
#ifndef TWKV_SPAWN_H
#define TWKV_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

struct kv_child {
	pid_t pid;
	int out; /* read end of its stdout */
};

/* Start argv[0] with argv, stdout a pipe to us. 0 or -errno. */
int kv_spawn(char *const argv[], struct kv_child *c);
/* Read the child's stdout until a line starting with `prefix`; copy it (no newline) into buf.
 * Returns its length, -ETIMEDOUT, or -EPIPE when the child closed stdout (exited). */
int kv_child_line(struct kv_child *c, const char *prefix, char *buf, size_t len, int timeout_ms);
/* Send `sig` (0: none, it was signalled already), wait up to timeout_ms for it to exit, then
 * SIGKILL; reap; close the pipe. */
void kv_child_stop(struct kv_child *c, int sig, int timeout_ms);

#endif
