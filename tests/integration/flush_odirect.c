/*
 * tests/integration/flush_odirect.c — segment files written with O_DIRECT, end to end (argv[1]:
 * provider, default tcp). Three twd's with their directories under $TW_BUILD_ROOT (the build
 * tree: a disk file system that takes O_DIRECT, unlike a tmpfs /tmp on older kernels); a
 * crash_primary writes COUNT objects over 64 KiB segments; the twd's are stopped with SIGTERM
 * (they flush their open buffers too). Then:
 *   - every segment file is in format 4 (a size that is a multiple of 4096) and none of its pages
 *     is in the page cache (mincore): it was written with O_DIRECT, not through the cache;
 *   - twctl inspect says ok for each file of one backup;
 *   - segment 0 is rewritten in the old format (version 2) and segment 1 in version 3 on every
 *     backup, as a twd before chain seeds wrote them (checksum entries re-chained from seed 0;
 *     those formats have no seed field), and twctl inspect reads both (ok, "version 2");
 *   - the twd's restart on their directories (they verify every file, both formats) and
 *     tw_recover() returns objects 0 .. COUNT-1 with intact payloads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/recovery.h>

#include "child.h"
#include "cli_run.h"
#include "core/util.h"
#include "proc.h"
#include "recover_util.h"
#include "backup/segfile.h"
#include "pagecache.h"
#include "tap.h"
#include "tlog.h"

#define COUNT 3000
#define LOG "0x0d1c"

static char twctl[1024];

/* Run twctl with args; its stdout into out (cut to len). Returns the exit status. */
static int run(char *out, size_t len, const char *const *args)
{
	struct cli_out o;
	int rc = cli_run_prog(twctl, args, NULL, NULL, 0, 30000, &o);

	snprintf(out, len, "%s", o.out);
	cli_out_free(&o);
	return rc;
}

static void join(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	TAP_REQUIRE(n > 0 && (size_t)n < len, "path too long: %s/%s", dir, name);
}


/* The segment files of dir, sorted by name; returns how many (at most max). */
static unsigned seg_files(const char *dir, char names[][64], unsigned max)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	TAP_REQUIRE(d, "opendir %s", dir);
	while ((de = readdir(d)) != NULL && n < max) {
		uint64_t l, s;

		if (strlen(de->d_name) < 64 && tw__segfile_parse_name(de->d_name, &l, &s))
			memcpy(names[n++], de->d_name, strlen(de->d_name) + 1);
	}
	closedir(d);
	qsort(names, n, 64, (int (*)(const void *, const void *))strcmp);
	return n;
}

/* Re-chain the checksum entries of a valid prefix written under `seed` as if written under seed
 * 0 (how a twd before chain seeds wrote it). Returns the new last checksum value. */
static uint32_t rechain_unseeded(uint8_t *d, uint64_t len)
{
	uint64_t pos = 0;
	uint32_t chain = 0, last = 0;

	while (pos < len) {
		if (d[pos] == TW_ENTRY_DATA) {
			chain = tw_crc32c(chain, d + pos, TW_ENTRY_HDR_SIZE);
			pos += TW_ENTRY_HDR_SIZE + tw_load_le32(d + pos + 4);
		} else {
			last = chain ? chain : 1;
			tw_store_le32(d + pos + 4, last);
			pos += TW_CKSUM_ENTRY_SIZE;
		}
	}
	return last;
}

/* Rewrite dir/name in format `version` 2 (128-byte header, data right after, no padding, as a
 * twd before O_DIRECT flushes wrote it) or 3 (block-aligned, no seed), data re-chained from
 * seed 0. */
static void to_old(const char *dir, const char *name, unsigned version)
{
	char path[1024];
	uint8_t hdr[SEGFILE_HDR_SIZE], *data;
	struct segfile_hdr h;
	unsigned off = version == SEGFILE_VERSION_V2 ? SEGFILE_HDR_SIZE : SEGFILE_DATA_OFF;
	size_t flen;
	int fd;

	join(path, sizeof(path), dir, name);
	fd = open(path, O_RDWR);
	TAP_REQUIRE(fd >= 0 && pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr), "read %s",
		    path);
	TAP_REQUIRE(tw__segfile_hdr_decode(hdr, &h) == 0 && h.version == SEGFILE_VERSION &&
		    h.seed != 0, "v4 header with a seed");
	flen = version == SEGFILE_VERSION_V2 ? (size_t)h.valid_len
					     : (size_t)(h.valid_len + 4095) / 4096 * 4096;
	data = calloc(1, flen ? flen : 1);
	TAP_REQUIRE(data && pread(fd, data, (size_t)h.valid_len, SEGFILE_DATA_OFF) ==
		    (ssize_t)h.valid_len, "read data");
	tw_store_le32(hdr + 52, rechain_unseeded(data, h.valid_len));
	memset(hdr + 88, 0, 4); /* reserved before version 4 */
	tw_store_le16(hdr + 8, (uint16_t)version);
	tw_store_le16(hdr + 10, (uint16_t)off);
	tw_store_le32(hdr + 124, tw_crc32c(0, hdr, 124));
	TAP_REQUIRE(ftruncate(fd, 0) == 0 && pwrite(fd, hdr, sizeof(hdr), 0) == sizeof(hdr) &&
		    pwrite(fd, data, flen, off) == (ssize_t)flen, "write v%u %s", version, path);
	close(fd);
	free(data);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	const char *root = getenv("TW_BUILD_ROOT");
	char prim[1024], line[16384], count[16], names[64][64], path[1024], err[512];
	struct rt_cluster cl;
	struct rt_check chk;
	struct tw_recover_config cfg;
	struct tw_recover_result res;
	struct proc *p;
	unsigned nfiles[3], files = 0, misaligned = 0, bad = 0;
	long cached = 0;
	int rc;

	child_tool("tools/twctl", twctl, sizeof(twctl));
	child_tool("tests/integration/crash_primary", prim, sizeof(prim));
	tap_plan(9);
	rt_start_in(&cl, root && root[0] ? root : ".", prov, 3, "64K", "16");
	snprintf(count, sizeof(count), "%d", COUNT);
	{
		char *pargv[] = { prim, (char *)prov, (char *)LOG, (char *)"65536", count, cl.addr[0],
				  cl.addr[1], cl.addr[2], NULL };

		struct proc_opts po = { .drop_prefix = "acked " };

		p = proc_spawn_opts(pargv, NULL, &po);
		TAP_REQUIRE(p, "spawn");
		rc = proc_wait_line(p, "done", line, sizeof(line), 30000);
		TAP_REQUIRE(rc >= 0, "crash_primary done: %s", strerror(-rc));
		TAP_REQUIRE(proc_wait(p, 20000) == 0, "crash_primary exit");
		proc_free(p);
	}
	for (unsigned i = 0; i < 3; i++)
		TAP_REQUIRE(rt_stop_one(&cl, i) == 0, "twd %u: SIGTERM, exit 0", i);

	for (unsigned i = 0; i < 3; i++) {
		nfiles[i] = seg_files(cl.dir[i], names, 64);
		for (unsigned k = 0; k < nfiles[i]; k++) {
			off_t size;

			join(path, sizeof(path), cl.dir[i], names[k]);
			cached += tl_cached_pages(AT_FDCWD, path, &size);
			misaligned += size % 4096 != 0;
			files++;
		}
	}
	ok(nfiles[0] >= 4 && nfiles[0] == nfiles[1] && nfiles[1] == nfiles[2],
	   "every backup flushed the log's %u segments (%u, %u)", nfiles[0], nfiles[1], nfiles[2]);
	ok(misaligned == 0, "all %u files are in format 4 (sizes multiples of 4096)", files);
	is_int(cached, 0, "no page of the %u files is in the page cache: written with O_DIRECT",
	       files);

	for (unsigned k = 0; k < nfiles[0]; k++) {
		const char *a[] = { "inspect", path, NULL };

		join(path, sizeof(path), cl.dir[0], names[k]);
		rc = run(line, sizeof(line), a);
		if (rc != 0 || !strstr(line, "verdict         ok\n") ||
		    !strstr(line, "format          version 4, data at byte 4096\n") ||
		    strstr(line, "chain seed      0x00000000")) {
			if (!bad++)
				tap_diag("twctl inspect %s: exit %d: %s", path, rc, line);
		}
	}
	is_int(bad, 0, "twctl inspect: ok, format 4 with a chain seed, for each of the %u files of "
	       "backup 0",
	       nfiles[0]);

	for (unsigned i = 0; i < 3; i++) {
		to_old(cl.dir[i], names[0], SEGFILE_VERSION_V2);
		to_old(cl.dir[i], names[1], SEGFILE_VERSION_V3);
	}
	{
		const char *a[] = { "inspect", "-e", "1", path, NULL };

		join(path, sizeof(path), cl.dir[1], names[0]);
		rc = run(line, sizeof(line), a);
		ok(rc == 0 && strstr(line, "verdict         ok\n") &&
		   strstr(line, "format          version 2, data at byte 128\n"),
		   "twctl inspect of a version-2 file: ok (exit %d)", rc);
	}

	for (unsigned i = 0; i < 3; i++)
		rt_restart(&cl, i, "64K", "16");
	tlog_recover_config(&cfg, prov, cl.addrs, cl.n, strtoull(LOG, NULL, 16));
	memset(&chk, 0, sizeof(chk));
	rc = tw_recover(&cfg, rt_check_cb, &chk, &res, err, sizeof(err));
	is_int(rc, 0, "recovery from the restarted twd's (%s)", rc ? err : "ok");
	ok(chk.next == COUNT && chk.bad == 0, "recovered objects 0..%" PRIu64 " (%" PRIu64
	   " bad%s%s)", chk.next ? chk.next - 1 : 0, chk.bad, chk.bad ? ": " : "", chk.first_bad);
	is_int((long long)res.copies_corrupt, 0, "no copy corrupt (the version-2 and -3 files "
	       "included)");
	ok(res.segments == nfiles[0], "%" PRIu64 " segments recovered", (uint64_t)res.segments);
	rt_stop(&cl);
	return tap_exit();
}
