/*
 * replica/primary_coord.c — a primary given a coordinator (cfg.coordinator;
 * docs/coordination.md): backups and their zones from the live registrations, the epoch from the
 * coordinator (one place, atomically), the log's owner node held until tw_primary_close; and the
 * zone rule of replica placement (no two replicas of a segment in one zone), used by the segment
 * opens (primary_ctl.c) and the spare choice (primary_rerep.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/coord.h"
#include "core/util.h"
#include "replica/primary_int.h"

static bool same_zone(const struct pbackup *a, const struct pbackup *b)
{
	return a->zone[0] && !strcmp(a->zone, b->zone);
}

bool pzone_ok(const struct tw_primary *p, const struct pseg *seg, unsigned bi,
	      const struct pcall *pending, unsigned n)
{
	const struct pbackup *b = &p->bk[bi];

	if (!b->zone[0])
		return true;
	for (unsigned i = 0; i < seg->nrep; i++) {
		const struct pbackup *o = &p->bk[seg->rep[i]];

		if (seg->rep[i] != bi && !o->lost && same_zone(o, b))
			return false;
	}
	for (unsigned i = 0; i < n; i++)
		if (pending[i].b && pending[i].b != b && same_zone(pending[i].b, b))
			return false;
	return true;
}

static void errf(char *buf, size_t len, const char *fmt, ...) TW_PRINTF(3, 4);
static void errf(char *buf, size_t len, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tw_log_error("primary: %s", msg);
	if (buf && len)
		snprintf(buf, len, "%s", msg);
}

/* Distinct non-empty zones among v[0..n). */
static unsigned count_zones(const struct tw_coord_backup *v, size_t n, bool *any_empty)
{
	unsigned z = 0;

	*any_empty = false;
	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		if (!v[i].zone[0]) {
			*any_empty = true;
			continue;
		}
		for (size_t j = 0; j < i && !seen; j++)
			seen = !strcmp(v[j].zone, v[i].zone);
		z += !seen;
	}
	return z;
}

int pcoord_open(const struct tw_primary_config *cfg, bool takeover, tw_recover_entry_fn on_entry,
		void *arg, struct tw_recover_result *res_out, struct tw_primary **out,
		char *errmsg_out, size_t errmsg_len)
{
	struct tw_primary_config pc = *cfg;
	struct tw_coord *c = NULL;
	struct tw_coord_backup *v = NULL;
	const char **addrs = NULL, **zones = NULL;
	const char *prov = cfg->provider ? cfg->provider : getenv("FI_PROVIDER");
	char msg[1024], owner[256], host[128] = "?";
	size_t n = 0, k = 0, other_prov = 0;
	uint64_t epoch = 0;
	int rc;

	*out = NULL;
	if (!prov || !prov[0])
		prov = "tcp";
	rc = tw_coord_open(cfg->coordinator, cfg->connect_timeout_ms, &c, msg, sizeof(msg));
	if (rc < 0) {
		errf(errmsg_out, errmsg_len, "log %llu: coordinator: %s",
		     (unsigned long long)cfg->log_id, msg);
		return rc;
	}
	if (cfg->n_backups) {
		/* The caller chose the backups; the coordinator gives the epoch and ownership. */
		pc.backups = cfg->backups;
		pc.zones = cfg->zones;
	} else {
		rc = tw_coord_list_backups(c, &v, &n);
		if (rc < 0) {
			errf(errmsg_out, errmsg_len, "log %llu: %s", (unsigned long long)cfg->log_id,
			     tw_coord_errmsg(c));
			goto out;
		}
		addrs = calloc(n ? n : 1, sizeof(*addrs));
		zones = calloc(n ? n : 1, sizeof(*zones));
		if (!addrs || !zones) {
			rc = -ENOMEM;
			goto out;
		}
		/* v is in tw_coord_backup_sort order: zones interleaved, most free first. */
		for (size_t i = 0; i < n; i++) {
			if (v[i].provider[0] && strcmp(v[i].provider, prov)) { /* static: none */
				other_prov++;
				continue;
			}
			if (cfg->segment_size && v[i].buffer_size && v[i].buffer_size < cfg->segment_size)
				tw_log_warn("primary: registered backup %s has %llu-byte buffers, below "
					    "the segment size: it will not be used", v[i].addr,
					    (unsigned long long)v[i].buffer_size);
			addrs[k] = v[i].addr;
			zones[k++] = v[i].zone;
		}
		{
			unsigned r = cfg->replicas ? cfg->replicas : 3;
			bool any_empty;
			unsigned nz = count_zones(v, n, &any_empty);

			if (k < r) {
				errf(errmsg_out, errmsg_len,
				     "log %llu: %zu backups registered at %s for provider %s (%zu "
				     "more for other providers), need %u: start more twd's with "
				     "--coordinator", (unsigned long long)cfg->log_id, k,
				     cfg->coordinator, prov, other_prov, r);
				rc = -TW_ENOBACKUP;
				goto out;
			}
			if (nz && !any_empty && nz < r) {
				errf(errmsg_out, errmsg_len,
				     "log %llu: the registered backups are in %u zones, but %u replicas "
				     "must be in %u different zones: register backups in more zones "
				     "(twd --zone)", (unsigned long long)cfg->log_id, nz, r, r);
				rc = -TW_ENOBACKUP;
				goto out;
			}
		}
		pc.backups = addrs;
		pc.zones = zones;
		pc.n_backups = k;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "host=%s pid=%ld", host, (long)getpid());
	rc = tw_coord_take_log(c, cfg->log_id, cfg->epoch, owner, takeover, &epoch);
	if (rc < 0) {
		if (rc == -TW_EFENCED && !takeover)
			rc = -TW_EEXIST; /* a live owner: the log exists; take it over */
		errf(errmsg_out, errmsg_len, "log %llu: %s", (unsigned long long)cfg->log_id,
		     tw_coord_errmsg(c));
		goto out;
	}
	tw_log_info("primary: log %llu: epoch %llu from %s, %zu backups", (unsigned long long)
		    cfg->log_id, (unsigned long long)epoch, cfg->coordinator, pc.n_backups);
	pc.coordinator = NULL;
	pc.epoch = epoch;
	rc = takeover ? tw_primary_takeover(&pc, on_entry, arg, res_out, out, errmsg_out, errmsg_len)
		      : tw_primary_open(&pc, out, errmsg_out, errmsg_len);
	if (rc == 0) {
		(*out)->coord = c; /* released by tw_primary_close, after the last write */
		c = NULL;
	}
out:
	free(addrs);
	free(zones);
	free(v);
	tw_coord_close(c);
	return rc;
}
