/*
 * coord/coord_zk_none.c — the zk backend of a build without ZooKeeper's C client
 * (meson -Dcoordinator=disabled; docs/packaging.md). A zk:// URL parses as before, and opening
 * it fails with -ENOTSUP and a message that says how to get the coordinator; the static
 * coordinator (address lists) is unchanged.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "coord/coord.h"

static int none_open(struct tw_coord *c, const struct tw_coord_url *u, unsigned timeout_ms)
{
	(void)u;
	(void)timeout_ms;
	tw__coord_err(c, "this Tailwind was built without the ZooKeeper coordinator "
		      "(meson -Dcoordinator=disabled): zk:// URLs are not supported; rebuild with "
		      "-Dcoordinator=enabled and ZooKeeper's C client (Debian: libzookeeper-mt-dev), "
		      "or give the backups' addresses instead");
	return -ENOTSUP;
}

static int none_list(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	(void)c;
	*out = NULL;
	*n_out = 0;
	return -ENOTSUP; /* never reached: open fails first */
}

const struct tw_coord_ops tw__coord_zk_ops = {
	.scheme = "zk",
	.open = none_open,
	.list_backups = none_list,
};
