/*
 * tests/unit/test_fabric_shm_stale.c — a shm endpoint opens although a dead process with this
 * process's PID left its regions behind (fabric/ofi_rdm.c, the -FI_EBUSY retry).
 *
 * shm names its region /dev/shm/PID:UID:IDX; IDX counts the endpoints of the process from 0. A
 * SIGKILLed process cannot remove its regions, and once its PID is reused, libfabric 1.17 finds
 * a region that names a live PID (ours), removes it and refuses the endpoint with -FI_EBUSY
 * (prov/util/src/util_shm.c). The dead process may have had several endpoints (a primary that
 * reset its fabric): the stale regions are staged here as the files of this process's first
 * NSTALE endpoints, with no valid header, which takes the same refusal path. One retry used to
 * be all the fabric tried (CI saw a restarted twd fail with "Device or resource busy").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tap.h"

#define NSTALE 3

int main(void)
{
	char path[NSTALE][128], addr[256];
	struct tw_fab_config cfg;
	struct tw_fab *fab = NULL;
	struct stat st;
	char zeros[4096] = { 0 };
	unsigned staged = 0, gone = 0;
	int fd, rc;

	tap_plan(4);
	if (stat("/dev/shm", &st) != 0)
		tap_plan_skip_all("no /dev/shm");
	for (unsigned i = 0; i < NSTALE; i++) {
		snprintf(path[i], sizeof(path[i]), "/dev/shm/%d:%u:%u", (int)getpid(),
			 (unsigned)getuid(), i);
		fd = open(path[i], O_RDWR | O_CREAT | O_EXCL, 0600);
		TAP_REQUIRE(fd >= 0, "stage a stale region %s", path[i]);
		TAP_REQUIRE(write(fd, zeros, sizeof(zeros)) == (ssize_t)sizeof(zeros), "fill it");
		close(fd);
		staged += stat(path[i], &st) == 0;
	}
	is_int(staged, NSTALE, "stale regions named like this process's first %d endpoints",
	       NSTALE);

	tw__fab_config_init(&cfg);
	cfg.provider = "shm";
	rc = tw__fab_open(&cfg, NULL, &fab);
	if (rc == -TW_ENOPROV) {
		for (unsigned i = 0; i < NSTALE; i++)
			unlink(path[i]);
		tap_skip(3, "shm not available here");
		return tap_exit();
	}
	is_int(rc, 0, "the shm fab opens anyway (%s)", rc ? tw_strerror(rc) : "ok");
	ok(rc == 0 && tw__fab_listen(fab, addr, sizeof(addr)) == 0 && strstr(addr, "fi_shm://"),
	   "and listens: %s", rc == 0 ? addr : "-");
	for (unsigned i = 0; i < NSTALE; i++)
		gone += stat(path[i], &st) != 0 && errno == ENOENT;
	is_int(gone, NSTALE, "the stale regions are gone");
	if (fab)
		tw__fab_close(fab);
	for (unsigned i = 0; i < NSTALE; i++)
		unlink(path[i]);
	return tap_exit();
}
