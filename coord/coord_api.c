/*
 * coord/coord_api.c — tailwind/coordinator.h over coord.h: the coordinator for programs (twd's
 * registration, twctl's queries). A thin layer: one internal handle per session, listings
 * copied into one allocation the caller frees.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tailwind/coordinator.h>

#include "coord/coord.h"

_Static_assert(TW_COORDINATOR_LABEL_MAX == TW_COORD_NAME_MAX - 1,
	       "the public label limit is the registration's field size");

struct tw_coordinator {
	struct tw_coord *c;
};

struct tw_registrations {
	size_t n;
	struct tw_coord_backup *v;
	struct tw_registration r[]; /* pointing into v */
};

int tw_coordinator_check_url(const char *url, char *why, size_t len)
{
	struct tw_coord_url u;
	char dummy[8];

	if (!why || !len) {
		why = dummy;
		len = sizeof(dummy);
	}
	return tw__coord_url_parse(url, &u, why, len);
}

int tw_coordinator_open(const char *url, unsigned timeout_ms, struct tw_coordinator **out,
			char *err, size_t len)
{
	struct tw_coordinator *c;
	char dummy[8];
	int rc;

	if (!err || !len) {
		err = dummy;
		len = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	rc = tw__coord_open(url, timeout_ms, &c->c, err, len);
	if (rc < 0) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int tw_coordinator_close(struct tw_coordinator *c)
{
	if (!c)
		return 0;
	tw__coord_close(c->c);
	free(c);
	return 0;
}

const char *tw_coordinator_errmsg(const struct tw_coordinator *c)
{
	return c ? tw__coord_errmsg(c->c) : "";
}

int tw_coordinator_register(struct tw_coordinator *c, const char *addr, const char *provider,
			    const char *zone, uint32_t buffers, uint32_t free_buffers,
			    uint64_t buffer_size)
{
	struct tw_coord_backup me;

	if (!c || !addr || strlen(addr) >= sizeof(me.addr) ||
	    (provider && strlen(provider) >= sizeof(me.provider)) ||
	    (zone && strlen(zone) >= sizeof(me.zone)))
		return -EINVAL;
	memset(&me, 0, sizeof(me));
	snprintf(me.addr, sizeof(me.addr), "%s", addr);
	snprintf(me.provider, sizeof(me.provider), "%s", provider ? provider : "tcp");
	snprintf(me.zone, sizeof(me.zone), "%s", zone ? zone : "");
	me.buffers = buffers;
	me.free_buffers = free_buffers;
	me.buffer_size = buffer_size;
	return tw__coord_register(c->c, &me);
}

int tw_coordinator_update_free(struct tw_coordinator *c, uint32_t free_buffers)
{
	return c ? tw__coord_update_free(c->c, free_buffers) : -EINVAL;
}

int tw_coordinator_deregister(struct tw_coordinator *c)
{
	return c ? tw__coord_deregister(c->c) : -EINVAL;
}

int tw_coordinator_list(struct tw_coordinator *c, const uint64_t *log_id,
			struct tw_registrations **out)
{
	struct tw_coord_backup *v = NULL;
	struct tw_registrations *l;
	size_t n = 0;
	int rc;

	if (!c || !out)
		return -EINVAL;
	*out = NULL;
	rc = log_id ? tw__coord_log_backups(c->c, *log_id, &v, &n) :
		      tw__coord_list_backups(c->c, &v, &n);
	if (rc < 0)
		return rc;
	l = malloc(sizeof(*l) + n * sizeof(l->r[0]));
	if (!l) {
		free(v);
		return -ENOMEM;
	}
	l->n = n;
	l->v = v;
	for (size_t i = 0; i < n; i++)
		l->r[i] = (struct tw_registration){
			.node = v[i].name, .addr = v[i].addr, .provider = v[i].provider,
			.zone = v[i].zone, .buffers = v[i].buffers,
			.free_buffers = v[i].free_buffers, .buffer_size = v[i].buffer_size,
		};
	*out = l;
	return 0;
}

size_t tw_registrations_count(const struct tw_registrations *l)
{
	return l ? l->n : 0;
}

const struct tw_registration *tw_registrations_at(const struct tw_registrations *l, size_t i)
{
	return l && i < l->n ? &l->r[i] : NULL;
}

int tw_registrations_free(struct tw_registrations *l)
{
	if (l) {
		free(l->v);
		free(l);
	}
	return 0;
}

int tw_coordinator_logs(struct tw_coordinator *c, uint64_t **ids_out, size_t *n_out)
{
	return c && ids_out && n_out ? tw__coord_list_logs(c->c, ids_out, n_out) : -EINVAL;
}

int tw_coordinator_log_info(struct tw_coordinator *c, uint64_t log_id, uint64_t *epoch_out,
			    char *owner_out, size_t owner_len)
{
	return c ? tw__coord_log_info(c->c, log_id, epoch_out, owner_out, owner_len) : -EINVAL;
}

int tw_coordinator_take_log(struct tw_coordinator *c, uint64_t log_id, uint64_t floor,
			    const char *owner, int replace_owner, uint64_t *epoch_out)
{
	return c ? tw__coord_take_log(c->c, log_id, floor, owner, replace_owner != 0, epoch_out) :
		   -EINVAL;
}
