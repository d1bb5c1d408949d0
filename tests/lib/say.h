/*
 * tests/lib/say.h — for child programs the tests drive (crash_primary, failover_primary,
 * owner_primary): write a whole line to stdout with write(2), unbuffered, so the parent sees
 * every line the child got out before it was killed; and open their log, saying so.
 */
#ifndef TW_TESTS_SAY_H
#define TW_TESTS_SAY_H

#include <stddef.h>

#include "tap.h"

struct tw_ctx_config;
struct tw_primary;
struct tw_primary_config;

/* Write n bytes of s to fd 1, retrying on EINTR and short writes; _exit(3) on an error. */
void say(const char *s, size_t n);

/* say() of a printf-formatted line (the format ends with its newline; a line cut to 1024 bytes
 * keeps its newline). Safe from any thread. */
void sayf(const char *fmt, ...) TAP_PRINTF(1, 2);

/* tw_primary_open(tc, cfg), then the line "ready"; when it fails, "<prog>: open: <error>" on
 * stderr and exit(1). */
struct tw_primary *say_opened(const struct tw_ctx_config *tc, const struct tw_primary_config *cfg,
			      const char *prog);

#endif
