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

#include "coord/coord.h"

static struct tw_coord *coord;
static struct tw_backup *backup;
static pthread_t updater;
static bool updater_started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool stopping;

int twd_coord_check(const char *url, const char *zone, char *err, size_t len)
{
	struct tw_coord_url u;
	int rc = tw__coord_url_parse(url, &u, err, len);

	if (rc < 0)
		return rc;
	if (zone && (strlen(zone) >= TW_COORD_NAME_MAX || strpbrk(zone, "\n\r="))) {
		snprintf(err, len, "--zone \"%s\": at most %d bytes, no newline or '='", zone,
			 TW_COORD_NAME_MAX - 1);
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
		tw__coord_update_free(coord, available(&st));
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
	struct tw_coord_backup me;
	struct tw_backup_stats st;
	int rc;

	memset(&me, 0, sizeof(me));
	rc = tw__coord_open(url, 0, &coord, err, len);
	if (rc < 0)
		return rc;
	tw_backup_get_stats(b, &st);
	snprintf(me.addr, sizeof(me.addr), "%s", tw_backup_listen_addr(b));
	snprintf(me.provider, sizeof(me.provider), "%s", provider ? provider : "tcp");
	snprintf(me.zone, sizeof(me.zone), "%s", zone ? zone : "");
	/* The capacity (the pool's cap) and what of it an open can still get. */
	me.buffers = (uint32_t)(st.buffers_max > st.buffers ? st.buffers_max : st.buffers);
	me.free_buffers = available(&st);
	me.buffer_size = st.buffer_size;
	rc = tw__coord_register(coord, &me);
	if (rc < 0) {
		snprintf(err, len, "%s", tw__coord_errmsg(coord));
		tw__coord_close(coord);
		coord = NULL;
		return rc;
	}
	backup = b;
	rc = pthread_create(&updater, NULL, updater_main, NULL);
	if (rc) {
		snprintf(err, len, "cannot start the registration updater: %s", strerror(rc));
		tw__coord_close(coord);
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
	if (tw__coord_deregister(coord) < 0)
		fprintf(stderr, "twd: %s (the node goes with the session anyway)\n",
			tw__coord_errmsg(coord));
	tw__coord_close(coord);
	coord = NULL;
}
