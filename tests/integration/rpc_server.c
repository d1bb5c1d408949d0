/*
 * tests/integration/rpc_server.c — a small RPC server process for the wire tests and the latency
 * bench: the fabric (provider from argv[1]) plus the RPC server with simple handlers returning
 * fixed data (handshake, open/close, list of log 5, fence, stats; ping is built in).
 *
 *   rpc_server PROVIDER     prints "ready <address>" on stdout once listening (ephemeral port),
 *                           serves until SIGTERM/SIGINT, exits 0 after freeing everything.
 *
 * Channels are closed on on_lost; the RPC server closes misbehaving ones itself.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proto/rpc.h"

static volatile sig_atomic_t stop;
static struct tw_rpc_server *srv;
static uint64_t fence_epoch;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int h_handshake(void *arg, struct tw__rpc_call *c)
{
	c->reply.handshake.node_name = (char *)"rpc_server";
	c->reply.handshake.buffer_size = 8u << 20;
	c->reply.handshake.buffers_total = 4;
	c->reply.handshake.buffers_free = 4;
	return 0;
}

static int h_open(void *arg, struct tw__rpc_call *c)
{
	const Tailwind__OpenSegment *o = c->req->open_segment;

	if (o->length > (8u << 20))
		return tw__rpc_call_fail(c, -TW_EREFUSED, "length %llu exceeds the 8 MiB buffers",
					(unsigned long long)o->length);
	c->rkey.addr = 0x100000;
	c->rkey.key = 0x1000 + o->meta->segment_id;
	c->rkey.len = o->length;
	c->reply.open_segment.rkey = &c->rkey;
	return 0;
}

static int h_close(void *arg, struct tw__rpc_call *c)
{
	c->meta.log_id = c->req->close_segment->meta->log_id;
	c->meta.segment_id = c->req->close_segment->meta->segment_id;
	c->meta.offset = c->req->close_segment->meta->offset;
	c->meta.checksum = c->req->close_segment->meta->checksum;
	c->reply.close_segment.scanned = &c->meta;
	return 0;
}

static int h_list(void *arg, struct tw__rpc_call *c)
{
	static Tailwind__SegmentInfo si[3];
	static Tailwind__SegmentInfo *sp[3];
	unsigned i;

	if (c->req->list_segments->log_id != 5)
		return tw__rpc_call_fail(c, -TW_ENOTFOUND, "no log %llu",
					(unsigned long long)c->req->list_segments->log_id);
	for (i = 0; i < 3; i++) {
		tailwind__segment_info__init(&si[i]);
		si[i].log_id = 5;
		si[i].segment_id = i;
		si[i].state = (Tailwind__SegmentState)(TAILWIND__SEGMENT_STATE__SEGMENT_STATE_OPEN + i);
		si[i].valid_len = 1000 * (i + 1);
		si[i].checksum = 0x1000 + i;
		si[i].replica_version = 1;
		sp[i] = &si[i];
	}
	c->reply.list_segments.segments = sp;
	c->reply.list_segments.n_segments = 3;
	return 0;
}

static int h_fence(void *arg, struct tw__rpc_call *c)
{
	if (c->req->fence->new_epoch < fence_epoch) {
		c->reply.fence.epoch = fence_epoch;
		return tw__rpc_call_fail(c, -TW_EFENCED, "epoch %llu < %llu",
					(unsigned long long)c->req->fence->new_epoch,
					(unsigned long long)fence_epoch);
	}
	fence_epoch = c->req->fence->new_epoch;
	c->reply.fence.epoch = fence_epoch;
	return 0;
}

static int h_stats(void *arg, struct tw__rpc_call *c)
{
	c->reply.stats.buffers_total = 4;
	c->reply.stats.buffers_free = 4;
	return 0;
}

static void on_accept(void *arg, struct tw_chan *ch)
{
	(void)arg;
	(void)ch;
}

static void on_recv(void *arg, struct tw_chan *ch, const void *msg, size_t len)
{
	(void)arg;
	tw__rpc_server_on_recv(srv, ch, msg, len); /* closes ch itself on a protocol violation */
}

static void on_lost(void *arg, struct tw_chan *ch, int err)
{
	(void)arg;
	(void)err;
	tw__rpc_server_on_lost(srv, ch);
	tw__chan_close(ch);
}

int main(int argc, char **argv)
{
	struct tw_fab_config fc;
	struct tw_fab_events ev = { .on_accept = on_accept, .on_recv = on_recv, .on_lost = on_lost };
	struct tw_rpc_server_ops ops = {
		.handlers = {
			[TW_RPC_HANDSHAKE] = h_handshake,
			[TW_RPC_OPEN_SEGMENT] = h_open,
			[TW_RPC_CLOSE_SEGMENT] = h_close,
			[TW_RPC_LIST_SEGMENTS] = h_list,
			[TW_RPC_FENCE] = h_fence,
			[TW_RPC_STATS] = h_stats,
		},
		.node_id = 77,
	};
	struct sigaction sa;
	struct tw_fab *fab;
	char addr[TW_ADDR_MAX];
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s PROVIDER\n", argv[0]);
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	tw__fab_config_init(&fc);
	fc.provider = argv[1];
	fc.busy_poll = argc > 2 && strcmp(argv[2], "busy") == 0;
	rc = tw__rpc_server_create(NULL, &ops, NULL, &srv);
	if (rc) {
		fprintf(stderr, "rpc_server: %s\n", tw_strerror(rc));
		return 1;
	}
	rc = tw__fab_open(&fc, &ev, &fab);
	if (rc) {
		fprintf(stderr, "rpc_server: fab: %s\n", tw_strerror(rc));
		tw__rpc_server_destroy(srv);
		return 1;
	}
	rc = tw__fab_listen(fab, addr, sizeof(addr));
	if (rc) {
		fprintf(stderr, "rpc_server: listen: %s (%s)\n", tw_strerror(rc), tw__fab_errmsg(fab));
		tw__fab_close(fab);
		tw__rpc_server_destroy(srv);
		return 1;
	}
	printf("ready %s\n", addr);
	fflush(stdout);

	while (!stop) {
		rc = tw__fab_progress(fab, 200);
		if (rc < 0)
			tw_log_ratelimited(TW_DIAG_WARN, "rpc_server: progress: %s", tw_strerror(rc));
	}
	tw__fab_close(fab);
	tw__rpc_server_destroy(srv);
	return 0;
}
