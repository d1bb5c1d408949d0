/*
 * tests/lib/recover_util.c — see recover_util.h.
 */
#include "recover_util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "tmpdir.h"

static struct proc *spawn_twd(struct rt_cluster *c, unsigned i, const char *bufsize,
			      const char *buffers)
{
	char *argv[] = { c->twd, (char *)"-p", (char *)c->prov, (char *)"-d", c->dir[i],
			 (char *)"--buffers", (char *)buffers, (char *)"--buffer-size",
			 (char *)bufsize, NULL };
	char line[512];
	struct proc *p = proc_spawn(argv, NULL);
	int rc;

	TAP_REQUIRE(p, "spawn %s", c->twd);
	rc = proc_wait_line(p, "ready ", line, sizeof(line), 20000);
	TAP_REQUIRE(rc > 0, "twd %u ready line: %s", i, strerror(-rc));
	snprintf(c->addr[i], sizeof(c->addr[i]), "%.*s", (int)sizeof(c->addr[i]) - 1, line + 6);
	c->addrs[i] = c->addr[i];
	return p;
}

void rt_start(struct rt_cluster *c, const char *prov, unsigned n, const char *bufsize,
	      const char *buffers)
{
	rt_start_in(c, NULL, prov, n, bufsize, buffers);
}

void rt_start_in(struct rt_cluster *c, const char *parent, const char *prov, unsigned n,
		 const char *bufsize, const char *buffers)
{
	memset(c, 0, sizeof(*c));
	c->prov = prov;
	c->n = n;
	TAP_REQUIRE(n <= RT_MAX_BK, "too many backups");
	if (proc_find_tool("tools/twd", c->twd, sizeof(c->twd)) != 0)
		tap_plan_skip_all("twd not built");
	tmpdir_make(c->root, sizeof(c->root), parent, "tw-rec");
	for (unsigned i = 0; i < n; i++) {
		snprintf(c->dir[i], sizeof(c->dir[i]), "%s/b%u", c->root, i);
		c->p[i] = spawn_twd(c, i, bufsize, buffers);
	}
}

void rt_restart(struct rt_cluster *c, unsigned i, const char *bufsize, const char *buffers)
{
	proc_free(c->p[i]);
	c->p[i] = spawn_twd(c, i, bufsize, buffers);
}

int rt_stop_one(struct rt_cluster *c, unsigned i)
{
	int st;

	if (!c->p[i])
		return -1;
	proc_kill(c->p[i], SIGTERM);
	st = proc_wait(c->p[i], 20000);
	proc_free(c->p[i]);
	c->p[i] = NULL;
	return st;
}

void rt_stop(struct rt_cluster *c)
{
	for (unsigned i = 0; i < c->n; i++)
		rt_stop_one(c, i);
	if (c->root[0])
		tmpdir_remove(c->root);
}

void rt_fill(uint8_t *p, uint64_t seq)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(seq >> (8 * i));
	for (unsigned i = 8; i < RT_OBJ; i++)
		p[i] = (uint8_t)(seq * 131u + i * 7u + 1u);
}

int rt_check_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct rt_check *k = arg;
	uint8_t want[RT_OBJ];

	rt_fill(want, k->next);
	if (e->len != RT_OBJ || memcmp(e->data, want, RT_OBJ) != 0) {
		uint64_t seq = 0;

		if (e->len >= 8)
			for (unsigned i = 0; i < 8; i++)
				seq |= (uint64_t)((const uint8_t *)e->data)[i] << (8 * i);
		if (k->bad++ == 0)
			snprintf(k->first_bad, sizeof(k->first_bad), "entry %" PRIu64 " (segment %"
				 PRIu64 " offset %" PRIu64 ", %u bytes, seq %" PRIu64 "): expected "
				 "object %" PRIu64, e->index, e->segment_id, e->offset, e->len, seq,
				 k->next);
		return 0;
	}
	if (k->bad == 0)
		k->next++;
	return 0;
}

void rt_shm_cleanup(int pid)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	char pat[32], path[512];

	if (!d)
		return;
	snprintf(pat, sizeof(pat), "%d:", pid);
	while ((de = readdir(d)) != NULL) {
		const char *s = strstr(de->d_name, pat);

		if (s && (s == de->d_name || s[-1] == ':' || s[-1] == '_' || s[-1] == '/')) {
			snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
			unlink(path);
		}
	}
	closedir(d);
}
