/*
 * backup/backup_conn.c — the backup's connections: accepted, their messages handed to the RPC
 * layer (backup_rpc.c), lost or dropped, and closed outside the fabric's callbacks.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "core/util.h"
#include "proto/rpc.h"
#include "backup/backup_int.h"

/* ------------------------------------------------------------------ connections */

struct conn *tw__bk_conn_find(struct tw_backup *b, uint64_t id)
{
	for (struct conn *c = b->conns; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

void tw__bk_conn_free(struct tw_backup *b, struct conn *c, bool close_chan)
{
	struct conn **pp;

	tw__bk_readers_conn_gone(b, c);
	tw__bk_conn_release_grants(b, c);
	tw__bk_auth_conn_gone(b, c);
	for (pp = &b->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	if (c->ch) {
		tw__chan_set_user(c->ch, NULL);
		if (close_chan) {
			tw__rpc_server_on_lost(b->srv, c->ch);
			tw__chan_close(c->ch);
		}
	}
	free(c->grants);
	free(c->auth_t);
	free(c);
}

void tw__bk_on_accept(void *arg, struct tw_chan *ch)
{
	struct tw_backup *b = arg;
	struct conn *c = calloc(1, sizeof(*c));

	if (!c) {
		tw_log_error("backup: out of memory accepting %s; closing it", tw__chan_peer(ch));
		tw__chan_close(ch);
		return;
	}
	c->id = ++b->next_conn_id;
	c->ch = ch;
	c->next = b->conns;
	b->conns = c;
	tw__chan_set_user(ch, c);
	tw_log_info("backup: connection %" PRIu64 " from %s", c->id, tw__chan_peer(ch));
	pthread_mutex_lock(&b->st_lock);
	b->st.connections++;
	pthread_mutex_unlock(&b->st_lock);
}

void tw__bk_on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	struct tw_backup *b = arg;
	struct conn *c = tw__chan_user(ch);

	if (!c || c->lost || c->drop)
		return;
	tw__bk_rpc_recv(b, c, msg, len);
}

void tw__bk_on_lost(void *arg, struct tw_chan *ch, int err)
{
	struct conn *c = tw__chan_user(ch);

	if (!c)
		return;
	tw_log_info("backup: connection %" PRIu64 " (%s) lost: %s", c->id, tw__chan_peer(ch),
		    tw_strerror(err));
	c->lost = true;
	((struct tw_backup *)arg)->reap = true;
}

/* Close what was lost or dropped, outside fabric callbacks. */
void tw__bk_reap_conns(struct tw_backup *b)
{
	struct conn *c = b->conns, *next;

	if (!b->reap)
		return;
	b->reap = false;
	for (; c; c = next) {
		next = c->next;
		if (!c->lost && !c->drop)
			continue;
		pthread_mutex_lock(&b->st_lock);
		if (c->lost)
			b->st.connections_lost++;
		else
			b->st.connections_dropped++;
		pthread_mutex_unlock(&b->st_lock);
		tw__bk_conn_free(b, c, true);
	}
}
