/*
 * tools/twd_coord.c — twd's registration with a coordinator (twd_coord.h).
 */
#include "twd_coord.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tailwind/backup.h>

#include <tailwind/coordinator.h>

static struct tw_coordinator *coord;
static struct tw_backup *backup;
static pthread_t updater;
static bool updater_started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool stopping;

int twd_coord_check(const char *url, const char *zone, char *err, size_t len)
{
	int rc = tw_coordinator_check_url(url, err, len);

	if (rc < 0)
		return rc;
	if (zone && (strlen(zone) > TW_COORDINATOR_LABEL_MAX || strpbrk(zone, "\n\r="))) {
		snprintf(err, len, "--zone \"%s\": at most %d bytes, no newline or '='", zone,
			 TW_COORDINATOR_LABEL_MAX);
		return -EINVAL;
	}
	return 0;
}

/* Buffers an open can still get: free ones plus those the pool may grow by (placement by
 * "free" must not pass over a backup whose pool is small now but below its cap). */
static uint32_t available(const struct tw_backup_stats *st)
{
	uint64_t room = st->buffers_max > st->buffers ? st->buffers_max - st->buffers : 0;

	return (uint32_t)(st->buffers_free + room);
}

/* Once a second: the available-buffer count into the registration (a write only when it
 * changed). */
static void *updater_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (!stopping) {
		struct tw_backup_stats st;
		struct timespec ts;

		pthread_mutex_unlock(&mu);
		tw_backup_get_stats(backup, &st);
		tw_coordinator_update_free(coord, available(&st));
		pthread_mutex_lock(&mu);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (!stopping)
			pthread_cond_timedwait(&cv, &mu, &ts);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

int twd_coord_start(const char *url, const char *zone, const char *provider, struct tw_backup *b,
		    char *err, size_t len)
{
	struct tw_backup_stats st;
	int rc;

	rc = tw_coordinator_open(url, 0, &coord, err, len);
	if (rc < 0)
		return rc;
	tw_backup_get_stats(b, &st);
	/* The capacity (the pool's cap) and what of it an open can still get. */
	rc = tw_coordinator_register(coord, tw_backup_listen_addr(b), provider ? provider : "tcp",
				     zone ? zone : "", (uint32_t)(st.buffers_max > st.buffers ?
				     st.buffers_max : st.buffers), available(&st),
				     st.buffer_size);
	if (rc < 0) {
		snprintf(err, len, "%s", tw_coordinator_errmsg(coord));
		tw_coordinator_close(coord);
		coord = NULL;
		return rc;
	}
	backup = b;
	rc = pthread_create(&updater, NULL, updater_main, NULL);
	if (rc) {
		snprintf(err, len, "cannot start the registration updater: %s", strerror(rc));
		tw_coordinator_close(coord);
		coord = NULL;
		return -rc;
	}
	updater_started = true;
	return 0;
}

void twd_coord_stop(void)
{
	if (!coord)
		return;
	pthread_mutex_lock(&mu);
	stopping = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	if (updater_started)
		pthread_join(updater, NULL);
	updater_started = false;
	if (tw_coordinator_deregister(coord) < 0)
		fprintf(stderr, "twd: %s (the node goes with the session anyway)\n",
			tw_coordinator_errmsg(coord));
	tw_coordinator_close(coord);
	coord = NULL;
}
