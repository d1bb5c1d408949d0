/*
 * tests/lib/say.h — for child programs the tests drive (crash_primary, failover_primary,
 * owner_primary): write a whole line to stdout with write(2), unbuffered, so the parent sees
 * every line the child got out before it was killed.
 */
#ifndef TW_TESTS_SAY_H
#define TW_TESTS_SAY_H

#include <stddef.h>

/* Write n bytes of s to fd 1, retrying on EINTR and short writes; _exit(3) on an error. */
void say(const char *s, size_t n);

#endif
