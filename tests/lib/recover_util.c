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

#include "child.h"
#include "proc.h"
#include "tap.h"
#include "tmpdir.h"

#define RT_MAX_EXTRA 16

static struct proc *spawn_twd(struct rt_cluster *c, unsigned i, const char *bufsize,
			      const char *buffers, const char *listen)
{
	char *argv[10 + RT_MAX_EXTRA] = { c->twd, (char *)"-p", (char *)c->prov, (char *)"-d",
					  c->dir[i] };
	char at[sizeof(c->addr[i])];
	unsigned n = 5;
	struct proc *p;

	if (listen) {
		snprintf(at, sizeof(at), "%s", listen);
		argv[n++] = (char *)"--listen";
		argv[n++] = at;
	}
	if (buffers) {
		argv[n++] = (char *)"--buffers";
		argv[n++] = (char *)buffers;
	}
	if (bufsize) {
		argv[n++] = (char *)"--buffer-size";
		argv[n++] = (char *)bufsize;
	}
	for (unsigned k = 0; c->extra && c->extra[k]; k++) {
		TAP_REQUIRE(k < RT_MAX_EXTRA, "more than %u twd arguments", RT_MAX_EXTRA);
		argv[n++] = c->extra[k];
	}
	argv[n] = NULL;
	p = child_ready(argv, NULL, 30000, c->addr[i], sizeof(c->addr[i]), NULL);
	TAP_REQUIRE(p, "twd %u ready (%s)", i, c->prov);
	c->addrs[i] = c->addr[i];
	return p;
}

void rt_start(struct rt_cluster *c, const char *prov, unsigned n, const char *bufsize,
	      const char *buffers)
{
	rt_start_with(c, NULL, prov, n, bufsize, buffers, NULL);
}

void rt_start_in(struct rt_cluster *c, const char *parent, const char *prov, unsigned n,
		 const char *bufsize, const char *buffers)
{
	rt_start_with(c, parent, prov, n, bufsize, buffers, NULL);
}

void rt_start_with(struct rt_cluster *c, const char *parent, const char *prov, unsigned n,
		   const char *bufsize, const char *buffers, char *const extra[])
{
	memset(c, 0, sizeof(*c));
	c->prov = prov;
	c->n = n;
	c->extra = extra;
	TAP_REQUIRE(n <= RT_MAX_BK, "too many backups");
	child_tool("tools/twd", c->twd, sizeof(c->twd));
	tmpdir_make(c->root, sizeof(c->root), parent, "tw-rec");
	for (unsigned i = 0; i < n; i++) {
		snprintf(c->dir[i], sizeof(c->dir[i]), "%s/b%u", c->root, i);
		c->p[i] = spawn_twd(c, i, bufsize, buffers, NULL);
	}
}

void rt_restart(struct rt_cluster *c, unsigned i, const char *bufsize, const char *buffers)
{
	proc_free(c->p[i]);
	c->p[i] = spawn_twd(c, i, bufsize, buffers, NULL);
}

void rt_restart_at(struct rt_cluster *c, unsigned i, const char *bufsize, const char *buffers)
{
	proc_free(c->p[i]);
	c->p[i] = spawn_twd(c, i, bufsize, buffers, c->addr[i]);
}

int rt_stop_one(struct rt_cluster *c, unsigned i)
{
	int st;

	if (!c->p[i])
		return -1;
	st = child_stop(c->p[i], SIGTERM, 20000);
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

int rt_read_entry(FILE *f, void *buf, uint32_t len)
{
	uint8_t h[4];

	if (fread(h, 1, 4, f) != 4)
		return 0;
	if (((uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24) !=
	    len || fread(buf, 1, len, f) != len)
		return -1;
	return 1;
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

/* "acked N": N + 1 (objects acknowledged); 0 for another line. */
static uint64_t acked_of(const char *line)
{
	if (strncmp(line, "acked ", 6) != 0)
		return 0;
	return strtoull(line + 6, NULL, 10) + 1;
}

void rt_crasher_start(struct rt_crasher *k, const char *prim, const struct rt_cluster *c,
		      uint64_t log_id, const char *seg)
{
	char logid[32], line[256];
	char *argv[] = { (char *)prim, (char *)c->prov, logid, (char *)seg, (char *)"100000000",
			 (char *)c->addr[0], (char *)c->addr[1], (char *)c->addr[2], NULL };
	int rc;

	snprintf(logid, sizeof(logid), "0x%" PRIx64, log_id);
	k->acked = 0;
	k->p = proc_spawn(argv, NULL);
	TAP_REQUIRE(k->p, "spawn crash_primary");
	k->pid = (int)proc_pid(k->p);
	rc = proc_wait_line(k->p, "ready", line, sizeof(line), 20000);
	TAP_REQUIRE(rc >= 0, "crash_primary ready: %s", strerror(-rc));
}

void rt_crasher_ack(struct rt_crasher *k, unsigned round)
{
	char line[256];
	uint64_t a;
	int rc = proc_wait_line(k->p, "acked ", line, sizeof(line), 20000);

	TAP_REQUIRE(rc >= 0, "round %u: ack line after %" PRIu64 " acks: %s", round, k->acked,
		    strerror(-rc));
	a = acked_of(line);
	if (a > k->acked)
		k->acked = a;
}

void rt_crasher_kill(struct rt_crasher *k, const struct rt_cluster *c)
{
	bool shm = strcmp(c->prov, "shm") == 0;
	char line[256];

	proc_kill(k->p, SIGKILL);
	/* Ack lines written before the kill are in the pipe: take them all. */
	while (proc_wait_line(k->p, NULL, line, sizeof(line), 20000) >= 0) {
		uint64_t a = acked_of(line);

		if (a > k->acked)
			k->acked = a;
	}
	proc_wait(k->p, 20000);
	proc_free(k->p);
	k->p = NULL;
	if (shm)
		rt_shm_cleanup(k->pid);
}
