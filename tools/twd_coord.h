/*
 * tools/twd_coord.h — twd's registration with a coordinator (--coordinator URL, --zone Z;
 * docs/coordination.md): an ephemeral node with its address, provider, zone and free buffers,
 * kept up to date once a second, registered again after a session expiry, removed at a clean
 * shutdown.
 */
#ifndef TW_TOOLS_TWD_COORD_H
#define TW_TOOLS_TWD_COORD_H

#include <stddef.h>

struct tw_backup;

/* Check the URL and zone (before anything starts). Returns 0 or -EINVAL with err set. */
int twd_coord_check(const char *url, const char *zone, char *err, size_t len);

/* Connect, register `b` (listening on `provider`) and start the updater thread. Returns 0 or a
 * negative code with err set. */
int twd_coord_start(const char *url, const char *zone, const char *provider, struct tw_backup *b,
		    char *err, size_t len);

/* Deregister (clean shutdown), stop the updater, close. Nothing when not started. */
void twd_coord_stop(void);

#endif
