/*
 * backup/backup_scan.c — the scanner thread: the scan that proves a closed segment (a walk of
 * its whole buffer, 2–5 ms for 8 MiB) runs here instead of on the progress thread, and the
 * close is answered when its result is applied.
 *
 * Why a thread of its own: on tcp and sockets the progress thread also receives the one-sided
 * writes (libfabric 1.17 moves their bytes on the target's progress), so a scan there held
 * every write to this backup for its length, those of the next segment included, which its
 * primary posts while the full one closes (docs/primary.md, "Segment rollover"). Not the
 * flusher: a close would then wait behind segment files being written.
 *
 * What keeps it simple: the progress thread settles (waits for every scan handed out and
 * applies it) before it serves any request and before anything else touches segments, so
 * nothing but the scanner sees a segment between its close's revocation and its result; and
 * the scanner reads only the buffer, whose registration the close revoked (no write lands),
 * and writes only its job.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"

static void *scanner_main(void *arg)
{
	struct tw_backup *b = arg;

	pthread_mutex_lock(&b->sc_lock);
	for (;;) {
		struct bk_scan *sc;

		while (!b->sc_quit && (!b->sc_todo || b->sc_hold))
			pthread_cond_wait(&b->sc_cond, &b->sc_lock);
		sc = b->sc_todo;
		if (!sc)
			break; /* quit, nothing left */
		b->sc_todo = sc->next;
		if (!b->sc_todo)
			b->sc_todo_tail = NULL;
		pthread_mutex_unlock(&b->sc_lock);

		tw_scan_seeded(sc->mem, sc->len, sc->seed, &sc->sr);

		pthread_mutex_lock(&b->sc_lock);
		sc->next = NULL;
		if (b->sc_done_tail)
			b->sc_done_tail->next = sc;
		else
			b->sc_done = sc;
		b->sc_done_tail = sc;
		b->sc_running--;
		pthread_cond_broadcast(&b->sc_done_cond);
		pthread_mutex_unlock(&b->sc_lock);
		tw__fab_wakeup(b->fab); /* the progress thread applies it */
		pthread_mutex_lock(&b->sc_lock);
	}
	pthread_mutex_unlock(&b->sc_lock);
	return NULL;
}

int tw__bk_scanner_start(struct tw_backup *b)
{
	int rc = pthread_create(&b->scanner, NULL, scanner_main, b);

	if (rc != 0)
		return -rc;
	b->scanner_started = true;
	return 0;
}

void tw__bk_scanner_stop(struct tw_backup *b)
{
	if (!b->scanner_started)
		return;
	tw__bk_scans_settle(b);
	pthread_mutex_lock(&b->sc_lock);
	b->sc_quit = true;
	pthread_cond_signal(&b->sc_cond);
	pthread_mutex_unlock(&b->sc_lock);
	pthread_join(b->scanner, NULL);
	b->scanner_started = false;
}

void tw__bk_scan_submit(struct tw_backup *b, struct bk_scan *sc)
{
	sc->next = NULL;
	b->sc_pending++;
	pthread_mutex_lock(&b->sc_lock);
	if (b->sc_todo_tail)
		b->sc_todo_tail->next = sc;
	else
		b->sc_todo = sc;
	b->sc_todo_tail = sc;
	b->sc_running++;
	pthread_cond_signal(&b->sc_cond);
	pthread_mutex_unlock(&b->sc_lock);
}

struct close_answer {
	int rc;
	const struct bk_scan *sc;
	const char *msg;
};

/* The CloseSegment reply, as h_close fills it. */
static int fill_close(void *arg, struct tw__rpc_call *call)
{
	const struct close_answer *a = arg;

	if (a->rc == 0 || a->rc == -TW_ECORRUPT) {
		const struct tw_rpc_seg_meta m = {
			.log_id = a->sc->s->log_id, .segment_id = a->sc->s->segment_id,
			.checksum = a->sc->sr.last_checksum, .offset = a->sc->sr.valid_len,
		};

		tw__rpc_meta_to_pb(&m, &call->meta);
		call->reply.close_segment.scanned = &call->meta;
	}
	if (!a->rc)
		return 0;
	snprintf(call->msgbuf, sizeof(call->msgbuf), "%s", a->msg);
	return tw__rpc_call_failed(call, a->rc);
}

static void apply(struct tw_backup *b, struct bk_scan *sc)
{
	char msg[TW_RPC_MESSAGE_MAX] = "";
	struct close_answer a = { 0, sc, msg };
	struct conn *c;

	a.rc = tw__bk_close_apply(b, sc->s, sc->offset, sc->checksum, &sc->sr, msg, sizeof(msg));
	tw__bk_stats_sync(b); /* published before the answer, as h_close does */
	/* The asker may be gone (its connection lost or dropped): the segment is closed all the
	 * same, as if the answer had been lost on the way; a retried close finds it so. */
	c = tw__bk_conn_find(b, sc->conn_id);
	if (c && !c->lost && !c->drop && c->ch == sc->ch)
		(void)tw__rpc_server_answer(b->srv, sc->ch, TW_RPC_CLOSE_SEGMENT, sc->request_id,
					    sc->reply_epoch, fill_close, &a);
	free(sc);
}

unsigned tw__bk_scans_drain(struct tw_backup *b)
{
	struct bk_scan *sc;
	unsigned n = 0;

	if (!b->sc_pending)
		return 0;
	pthread_mutex_lock(&b->sc_lock);
	sc = b->sc_done;
	b->sc_done = b->sc_done_tail = NULL;
	pthread_mutex_unlock(&b->sc_lock);
	while (sc) {
		struct bk_scan *next = sc->next;

		b->sc_pending--;
		apply(b, sc);
		sc = next;
		n++;
	}
	return n;
}

void tw__bk_scans_settle(struct tw_backup *b)
{
	if (!b->sc_pending)
		return;
	pthread_mutex_lock(&b->sc_lock);
	b->sc_hold = false;
	pthread_cond_signal(&b->sc_cond);
	while (b->sc_running)
		pthread_cond_wait(&b->sc_done_cond, &b->sc_lock);
	pthread_mutex_unlock(&b->sc_lock);
	tw__bk_scans_drain(b);
}

void tw__bk_scan_hold(struct tw_backup *b, bool hold)
{
	pthread_mutex_lock(&b->sc_lock);
	b->sc_hold = hold;
	pthread_cond_signal(&b->sc_cond);
	pthread_mutex_unlock(&b->sc_lock);
}
