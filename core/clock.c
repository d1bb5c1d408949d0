/*
 * core/clock.c — the system clock behind the clock seam (core/clock.h).
 */
#include <time.h>

#include "core/clock.h"
#include "core/util.h"

static uint64_t sys_mono(const struct tw__clock *c)
{
	(void)c;
	return tw_now_ns();
}

static uint64_t sys_real(const struct tw__clock *c)
{
	struct timespec ts;

	(void)c;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const struct tw__clock tw__clock_system = {
	.mono_ns = sys_mono,
	.real_ns = sys_real,
};
