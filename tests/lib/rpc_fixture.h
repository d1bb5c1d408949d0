/*
 * tests/lib/rpc_fixture.h — for the handlers of the tests' RPC servers (test_rpc, fuzz_proto):
 * a ListSegments reply of n entries in the call's arena. Header-only (the fuzz targets build
 * without tests/lib's library).
 */
#ifndef TW_TESTS_RPC_FIXTURE_H
#define TW_TESTS_RPC_FIXTURE_H

#include <stddef.h>

#include "proto/rpc.h"

/* n initialised SegmentInfo, each allocated in the call's arena, as the call's ListSegments
 * reply (segments, n_segments = n): the handler fills their fields. NULL when the arena is out
 * of memory (the handler returns -ENOMEM). */
static inline Tailwind__SegmentInfo **rpc_list_reply(struct tw__rpc_call *c, size_t n)
{
	Tailwind__ListSegmentsReply *r = &c->reply.list_segments;

	r->segments = tw__rpc_call_alloc(c, (n + 1) * sizeof(*r->segments));
	if (!r->segments)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		r->segments[i] = tw__rpc_call_alloc(c, sizeof(*r->segments[i]));
		if (!r->segments[i])
			return NULL;
		tailwind__segment_info__init(r->segments[i]);
	}
	r->n_segments = n;
	return r->segments;
}

#endif
