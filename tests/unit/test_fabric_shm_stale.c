/*
 * tests/unit/test_fabric_shm_stale.c — a shm endpoint opens although a dead process with this
 * process's PID left its region behind (fabric/ofi_rdm.c, the -FI_EBUSY retry).
 *
 * shm names its region /dev/shm/PID:UID:IDX; IDX counts the endpoints of the process from 0. A
 * SIGKILLed process cannot remove its region, and once its PID is reused, libfabric 1.17 finds
 * a region that names a live PID (ours), removes it and refuses the endpoint with -FI_EBUSY
 * (prov/util/src/util_shm.c). The stale region is staged here as the file the first endpoint of
 * this process would use (IDX 0), with no valid header, which takes the same refusal path.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tap.h"

int main(void)
{
	char path[128], name[64], addr[256];
	struct tw_fab_config cfg;
	struct tw_fab *fab = NULL;
	struct stat st;
	char zeros[4096] = { 0 };
	int fd, rc;

	tap_plan(4);
	if (stat("/dev/shm", &st) != 0)
		tap_plan_skip_all("no /dev/shm");
	snprintf(name, sizeof(name), "%d:%u:0", (int)getpid(), (unsigned)getuid());
	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	TAP_REQUIRE(fd >= 0, "stage a stale region %s", path);
	TAP_REQUIRE(write(fd, zeros, sizeof(zeros)) == (ssize_t)sizeof(zeros), "fill it");
	close(fd);
	ok(stat(path, &st) == 0, "a stale region named like this process's first endpoint: %s", name);

	tw_fab_config_init(&cfg);
	cfg.provider = "shm";
	rc = tw_fab_open(&cfg, NULL, &fab);
	if (rc == -TW_ENOPROV) {
		unlink(path);
		tap_skip(3, "shm not available here");
		return tap_exit();
	}
	is_int(rc, 0, "the shm fab opens anyway (%s)", rc ? tw_strerror(rc) : "ok");
	ok(rc == 0 && tw_fab_listen(fab, addr, sizeof(addr)) == 0 && strstr(addr, "fi_shm://"),
	   "and listens: %s", rc == 0 ? addr : "-");
	ok(stat(path, &st) != 0 && errno == ENOENT, "the stale region is gone");
	if (fab)
		tw_fab_close(fab);
	unlink(path);
	return tap_exit();
}
