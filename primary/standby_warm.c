/*
 * primary/standby_warm.c — a warm standby (tailwind/standby.h, sc->warm; docs/readers.md): while
 * a standby waits for the owner to go, a reader of the live log (tailwind/reader.h) hands every
 * entry to the service's on_entry as the owner's appends are acknowledged, so that at the
 * takeover the recovery replays only what the reader had not returned yet (from its position,
 * tw_recover_config.from_lsn). The reader runs on a thread of its own; it is stopped and joined
 * before the takeover's recovery calls on_entry on the standby's thread, so the two never run
 * at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/reader.h>

#include "primary/primary_int.h"

#define WARM_POLL_MS 50    /* the reader checks for the stop this often */
#define WARM_RETRY_US 200000 /* a reader that cannot open (yet) tries again after this long */

static void *warm_main(void *arg)
{
	struct tw__warm *w = arg;
	struct tw_reader *r = NULL;
	char err[512];

	while (!atomic_load(&w->stop)) {
		struct tw_reader_entry e;
		struct tw_recovered_entry re;
		int rc;

		if (!r) {
			w->rc.from = w->pos ? TW_READ_LSN : TW_READ_OLDEST;
			w->rc.lsn = w->pos;
			rc = tw_reader_open(&w->rc, &r, err, sizeof(err));
			if (rc) {
				r = NULL;
				tw_log_info("standby: log %" PRIu64 ": reader: %s; trying again",
					    w->rc.log_id, err);
				usleep(WARM_RETRY_US);
				continue;
			}
		}
		rc = tw_reader_next(r, &e, WARM_POLL_MS);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc) {
			tw_log_warn("standby: log %" PRIu64 ": reader: %s; opening it again at LSN "
				    "%016" PRIx64, w->rc.log_id, tw_reader_errmsg(r), w->pos);
			tw_reader_close(r);
			r = NULL;
			usleep(WARM_RETRY_US);
			continue;
		}
		memset(&re, 0, sizeof(re));
		re.index = w->entries;
		re.segment_id = e.lsn >> 32;
		re.offset = (uint32_t)e.lsn;
		re.lsn = e.lsn;
		re.data = e.data;
		re.len = e.len;
		if (w->on_entry && w->on_entry(w->arg, &re) != 0) {
			w->refused = true; /* the service stopped taking entries: no more, no skip */
			break;
		}
		w->entries++;
		w->pos = tw_reader_position(r);
	}
	tw_reader_close(r);
	return NULL;
}

int tw__warm_start(struct tw__warm *w, const struct tw__pcfg *cfg,
		   tw_recover_entry_fn on_entry, void *arg)
{
	memset(w, 0, sizeof(*w));
	tw_reader_config_init(&w->rc);
	w->rc.log_id = cfg->log_id;
	w->rc.provider = cfg->provider;
	w->rc.key_file = cfg->key_file;
	w->rc.backups = cfg->n_backups ? cfg->backups : NULL;
	w->rc.n_backups = cfg->n_backups;
	w->rc.coordinator = cfg->n_backups ? NULL : cfg->coordinator;
	w->rc.poll_ms = WARM_POLL_MS;
	if (cfg->connect_timeout_ms)
		w->rc.connect_timeout_ms = cfg->connect_timeout_ms;
	w->on_entry = on_entry;
	w->arg = arg;
	atomic_init(&w->stop, false);
	if (pthread_create(&w->th, NULL, warm_main, w) != 0)
		return -EAGAIN;
	w->started = true;
	return 0;
}

uint64_t tw__warm_stop(struct tw__warm *w)
{
	if (!w->started)
		return 0;
	atomic_store(&w->stop, true);
	pthread_join(w->th, NULL);
	w->started = false;
	return w->pos;
}
