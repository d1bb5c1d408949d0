/*
 * coord/coord.c — coordinator front end: URL parsing, the registration node's encoding, replica
 * order, the backend table and the `static` backend (docs/coordination.md).
 */
#include "coord/coord.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void tw__coord_err(struct tw_coord *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
}

static int url_err(char *err, size_t len, const char *url, const char *what)
{
	if (err && len)
		snprintf(err, len,
			 "bad coordinator URL \"%s\": %s (expected zk://HOST:PORT[,HOST:PORT...][/chroot] "
			 "or static:ADDR[,ADDR...])",
			 url, what);
	return -EINVAL;
}

/* One "host:port" of a zk URL: host [A-Za-z0-9.-]+ or [IPv6], port 1..65535. */
static bool host_port_ok(const char *s, size_t n)
{
	size_t i = 0, colon;
	unsigned long port = 0;

	if (n && s[0] == '[') {
		while (i < n && s[i] != ']') {
			if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '[' && s[i] != '.')
				return false;
			i++;
		}
		if (i >= n || i == 1)
			return false;
		i++;
	} else {
		while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-'))
			i++;
		if (i == 0)
			return false;
	}
	if (i >= n || s[i] != ':')
		return false;
	colon = i++;
	if (i >= n || n - colon - 1 > 5)
		return false;
	for (; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return false;
		port = port * 10 + (unsigned long)(s[i] - '0');
	}
	return port >= 1 && port <= 65535;
}

int tw__coord_url_parse(const char *url, struct tw_coord_url *out, char *err, size_t errlen)
{
	const char *h, *slash;
	size_t hlen;

	memset(out, 0, sizeof(*out));
	if (!url || !url[0]) {
		out->kind = TW_COORD_STATIC;
		return 0;
	}
	if (strlen(url) >= TW_COORD_URL_MAX)
		return url_err(err, errlen, url, "too long");
	if (!strncmp(url, "static:", 7)) {
		out->kind = TW_COORD_STATIC;
		snprintf(out->hosts, sizeof(out->hosts), "%s", url + 7);
		return 0;
	}
	if (strncmp(url, "zk://", 5))
		return url_err(err, errlen, url, "unknown scheme");
	out->kind = TW_COORD_ZK;
	h = url + 5;
	slash = strchr(h, '/');
	hlen = slash ? (size_t)(slash - h) : strlen(h);
	if (!hlen)
		return url_err(err, errlen, url, "no host:port");
	for (size_t i = 0; i < hlen;) {
		size_t j = i;

		while (j < hlen && h[j] != ',')
			j++;
		if (!host_port_ok(h + i, j - i))
			return url_err(err, errlen, url, "each server must be HOST:PORT with a port 1..65535");
		i = j + 1;
		if (j + 1 == hlen)
			return url_err(err, errlen, url, "empty server after ','");
	}
	memcpy(out->hosts, h, hlen);
	out->hosts[hlen] = '\0';
	if (!slash || !slash[1]) {
		snprintf(out->chroot, sizeof(out->chroot), "/tailwind");
		return 0;
	}
	/* /a/b/c: components of [A-Za-z0-9._-], no empty one, no "." or "..". */
	for (const char *p = slash; *p;) {
		const char *q = p + 1;

		while (*q && *q != '/') {
			if (!isalnum((unsigned char)*q) && *q != '.' && *q != '_' && *q != '-')
				return url_err(err, errlen, url,
					       "chroot components may hold only A-Z a-z 0-9 . _ -");
			q++;
		}
		if (q == p + 1) {
			if (!*q && p != slash)
				break; /* one trailing '/' */
			return url_err(err, errlen, url, "empty chroot component");
		}
		if ((q - p == 2 && p[1] == '.') || (q - p == 3 && p[1] == '.' && p[2] == '.'))
			return url_err(err, errlen, url, "chroot components may not be . or ..");
		p = q;
	}
	snprintf(out->chroot, sizeof(out->chroot), "%s", slash);
	{
		size_t n = strlen(out->chroot);

		if (n > 1 && out->chroot[n - 1] == '/')
			out->chroot[n - 1] = '\0';
	}
	return 0;
}

/* ------------------------------------------------------------------ node encoding */

#define NODE_MAGIC "tailwind-backup 1"

static bool field_ok(const char *s)
{
	return !strpbrk(s, "\n\r=");
}

int tw__coord_backup_encode(const struct tw_coord_backup *b, char *buf, size_t len)
{
	int n;

	if (!b->addr[0] || !b->provider[0] || !field_ok(b->addr) || !field_ok(b->provider) ||
	    !field_ok(b->zone))
		return -EINVAL;
	n = snprintf(buf, len,
		     NODE_MAGIC "\naddr=%s\nprovider=%s\nzone=%s\nbuffers=%" PRIu32
				"\nfree=%" PRIu32 "\nbuffer_size=%" PRIu64 "\n",
		     b->addr, b->provider, b->zone, b->buffers, b->free_buffers, b->buffer_size);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

static int dec_err(char *err, size_t len, unsigned line, const char *what)
{
	if (err && len)
		snprintf(err, len, "malformed backup registration, line %u: %s", line, what);
	return -EINVAL;
}

static int dec_u64(const char *v, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t x = 0;

	if (!n || n > 20)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		if (x > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (x > max)
		return -1;
	*out = x;
	return 0;
}

int tw__coord_backup_decode(const char *buf, size_t len, struct tw_coord_backup *out, char *err,
			   size_t errlen)
{
	size_t mlen = strlen(NODE_MAGIC), i;
	unsigned line = 1, seen = 0;

	memset(out, 0, sizeof(*out));
	if (!buf || len < mlen || memcmp(buf, NODE_MAGIC, mlen) ||
	    (len > mlen && buf[mlen] != '\n'))
		return dec_err(err, errlen, 1, "does not start with \"" NODE_MAGIC "\" (not a "
				"registration, or written by an incompatible twd)");
	for (i = mlen + 1; i < len;) {
		const char *l = buf + i, *eq, *nl = memchr(l, '\n', len - i);
		size_t ll = nl ? (size_t)(nl - l) : len - i, kl, vl;
		const char *v;
		uint64_t x;

		line++;
		i += ll + 1;
		if (!ll)
			continue;
		eq = memchr(l, '=', ll);
		if (!eq)
			return dec_err(err, errlen, line, "not key=value");
		if (memchr(l, '\0', ll))
			return dec_err(err, errlen, line, "holds a NUL byte");
		kl = (size_t)(eq - l);
		v = eq + 1;
		vl = ll - kl - 1;
#define KEY(k) (kl == strlen(k) && !memcmp(l, k, kl))
#define STR(field, bit)                                                                  \
	do {                                                                             \
		if (vl >= sizeof(out->field))                                            \
			return dec_err(err, errlen, line, #field " too long");           \
		memcpy(out->field, v, vl);                                               \
		out->field[vl] = '\0';                                                   \
		seen |= (bit);                                                           \
	} while (0)
		if (KEY("addr"))
			STR(addr, 1u);
		else if (KEY("provider"))
			STR(provider, 2u);
		else if (KEY("zone"))
			STR(zone, 4u);
		else if (KEY("buffers") || KEY("free") || KEY("buffer_size")) {
			if (dec_u64(v, vl, KEY("buffer_size") ? UINT64_MAX : UINT32_MAX, &x))
				return dec_err(err, errlen, line, "value is not a number in range");
			if (KEY("buffers"))
				out->buffers = (uint32_t)x;
			else if (KEY("free"))
				out->free_buffers = (uint32_t)x;
			else
				out->buffer_size = x;
			seen |= KEY("buffers") ? 8u : KEY("free") ? 16u : 32u;
		}
#undef STR
#undef KEY
	}
	if (!(seen & 1u) || !out->addr[0])
		return dec_err(err, errlen, line, "no addr");
	if (!(seen & 2u) || !out->provider[0])
		return dec_err(err, errlen, line, "no provider");
	if (!(seen & 16u))
		return dec_err(err, errlen, line, "no free");
	return 0;
}

void tw__coord_backup_node_name(const struct tw_coord_backup *b, char *out, size_t len)
{
	uint64_t h = 14695981039346656037ull; /* FNV-1a 64 */

	for (const char *s = b->provider; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (const char *s = b->addr; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	snprintf(out, len, "b-%016" PRIx64, h);
}

/* Inside a zone: most free first, then address. */
static int by_zone_free(const void *x, const void *y)
{
	const struct tw_coord_backup *a = x, *b = y;
	int z = strcmp(a->zone, b->zone);

	if (z)
		return z;
	if (a->free_buffers != b->free_buffers)
		return a->free_buffers > b->free_buffers ? -1 : 1;
	return strcmp(a->addr, b->addr);
}

void tw__coord_backup_sort(struct tw_coord_backup *v, size_t n)
{
	struct tw_coord_backup *tmp;
	size_t nz = 0, *start, *cnt, *next, *order, k = 0;
	uint64_t *zfree;

	if (n < 2)
		return;
	qsort(v, n, sizeof(*v), by_zone_free);
	tmp = malloc(n * sizeof(*tmp));
	start = calloc(n, sizeof(*start));
	cnt = calloc(n, sizeof(*cnt));
	next = calloc(n, sizeof(*next));
	order = calloc(n, sizeof(*order));
	zfree = calloc(n, sizeof(*zfree));
	if (!tmp || !start || !cnt || !next || !order || !zfree)
		goto out; /* zone-grouped order: still correct, only less interleaved */
	for (size_t i = 0; i < n; i++) {
		if (!i || strcmp(v[i].zone, v[i - 1].zone))
			start[nz++] = i;
		cnt[nz - 1]++;
		zfree[nz - 1] += v[i].free_buffers;
	}
	for (size_t z = 0; z < nz; z++)
		order[z] = z;
	/* Zones by total free buffers, most first (insertion sort: few zones). */
	for (size_t a = 1; a < nz; a++)
		for (size_t b = a; b > 0 && zfree[order[b]] > zfree[order[b - 1]]; b--) {
			size_t t = order[b];

			order[b] = order[b - 1];
			order[b - 1] = t;
		}
	while (k < n)
		for (size_t zi = 0; zi < nz; zi++) {
			size_t z = order[zi];

			if (next[z] < cnt[z])
				tmp[k++] = v[start[z] + next[z]++];
		}
	memcpy(v, tmp, n * sizeof(*v));
out:
	free(tmp);
	free(start);
	free(cnt);
	free(next);
	free(order);
	free(zfree);
}

/* ------------------------------------------------------------------ front end */

/* The `static` backend (no registry: the URL's address list), defined at the end. */
static const struct tw_coord_ops static_ops;

int tw__coord_open(const char *url, unsigned timeout_ms, struct tw_coord **out, char *err,
		  size_t errlen)
{
	struct tw_coord *c = calloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	rc = tw__coord_url_parse(url, &c->url, err, errlen);
	if (rc < 0) {
		free(c);
		return rc;
	}
	c->ops = c->url.kind == TW_COORD_ZK ? &tw__coord_zk_ops : &static_ops;
	rc = c->ops->open ? c->ops->open(c, &c->url, timeout_ms ? timeout_ms : TW_DEFAULT_SESSION_TIMEOUT_MS) : 0;
	if (rc < 0) {
		if (err && errlen)
			snprintf(err, errlen, "%s", c->errmsg);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void tw__coord_close(struct tw_coord *c)
{
	if (!c)
		return;
	if (c->ops->close)
		c->ops->close(c);
	free(c);
}

enum tw__coord_kind tw__coord_kind(const struct tw_coord *c)
{
	return c->url.kind;
}

const char *tw__coord_errmsg(const struct tw_coord *c)
{
	return c->errmsg;
}

int tw__coord_register(struct tw_coord *c, const struct tw_coord_backup *b)
{
	c->errmsg[0] = '\0';
	return c->ops->register_backup ? c->ops->register_backup(c, b) : 0;
}

int tw__coord_update_free(struct tw_coord *c, uint32_t free_buffers)
{
	return c->ops->update_free ? c->ops->update_free(c, free_buffers) : 0;
}

int tw__coord_deregister(struct tw_coord *c)
{
	return c->ops->deregister ? c->ops->deregister(c) : 0;
}

int tw__coord_list_backups(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	int rc;

	c->errmsg[0] = '\0';
	*out = NULL;
	*n_out = 0;
	rc = c->ops->list_backups(c, out, n_out);
	if (rc == 0)
		tw__coord_backup_sort(*out, *n_out);
	return rc;
}

int tw__coord_take_log(struct tw_coord *c, uint64_t log_id, uint64_t floor, const char *owner,
		      bool replace_owner, uint64_t *epoch_out)
{
	c->errmsg[0] = '\0';
	if (!c->ops->take_log) {
		*epoch_out = floor; /* 0: automatic, the backups decide (tailwind/recovery.h) */
		return 0;
	}
	*epoch_out = 0;
	return c->ops->take_log(c, log_id, floor, owner, replace_owner, epoch_out);
}

int tw__coord_log_info(struct tw_coord *c, uint64_t log_id, uint64_t *epoch_out, char *owner_out,
		      size_t owner_len)
{
	c->errmsg[0] = '\0';
	if (!c->ops->log_info) {
		tw__coord_err(c, "the static coordinator stores no epochs or owners (use zk://...)");
		return -ENOTSUP;
	}
	return c->ops->log_info(c, log_id, epoch_out, owner_out, owner_len);
}

bool tw__coord_owns(struct tw_coord *c, uint64_t log_id)
{
	return c->ops->owns ? c->ops->owns(c, log_id) : true;
}

int tw__coord_wait_owner_gone(struct tw_coord *c, uint64_t log_id, unsigned timeout_ms,
			     void (*on_wait)(void *arg, const char *owner), void *arg,
			     bool *waited_out, uint64_t *gone_ns_out)
{
	bool w = false;
	uint64_t g = 0;
	int rc = 0;

	c->errmsg[0] = '\0';
	if (c->ops->wait_owner_gone)
		rc = c->ops->wait_owner_gone(c, log_id, timeout_ms, on_wait, arg, &w, &g);
	if (waited_out)
		*waited_out = w;
	if (gone_ns_out)
		*gone_ns_out = g;
	return rc;
}

int tw__coord_log_add_backup(struct tw_coord *c, uint64_t log_id, const struct tw_coord_backup *b)
{
	if (!c->ops->log_add_backup)
		return 0;
	c->errmsg[0] = '\0';
	return c->ops->log_add_backup(c, log_id, b);
}

int tw__coord_log_backups(struct tw_coord *c, uint64_t log_id, struct tw_coord_backup **out,
			 size_t *n_out)
{
	c->errmsg[0] = '\0';
	*out = NULL;
	*n_out = 0;
	if (!c->ops->log_backups) {
		tw__coord_err(c, "the static coordinator records no backups per log (use zk://...)");
		return -ENOTSUP;
	}
	return c->ops->log_backups(c, log_id, out, n_out);
}

int tw__coord_watch_backups(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	int rc;

	if (!c->ops->watch_backups)
		return tw__coord_list_backups(c, out, n_out);
	c->errmsg[0] = '\0';
	*out = NULL;
	*n_out = 0;
	rc = c->ops->watch_backups(c, out, n_out);
	if (rc == 0)
		tw__coord_backup_sort(*out, *n_out);
	return rc;
}

bool tw__coord_backups_changed(struct tw_coord *c)
{
	return c->ops->backups_changed ? c->ops->backups_changed(c) : false;
}

bool tw__coord_wait_backups_changed(struct tw_coord *c, unsigned timeout_ms)
{
	if (c->ops->wait_backups_changed)
		return c->ops->wait_backups_changed(c, timeout_ms);
	return tw__coord_backups_changed(c);
}

int tw__coord_list_logs(struct tw_coord *c, uint64_t **out, size_t *n_out)
{
	c->errmsg[0] = '\0';
	*out = NULL;
	*n_out = 0;
	if (!c->ops->list_logs) {
		tw__coord_err(c, "the static coordinator knows no logs (use zk://...)");
		return -ENOTSUP;
	}
	return c->ops->list_logs(c, out, n_out);
}

/*
 * ------------------------------------------------------------------ static backend
 *
 * It implements only the list of backups (the URL's addresses); every other op is NULL and the
 * front end above gives its default: open, close, register and deregister do nothing, take_log
 * returns the floor, owns is true, log_info and the per-log ops are -ENOTSUP.
 */

static int st_list(struct tw_coord *c, struct tw_coord_backup **out, size_t *n_out)
{
	const char *s = c->url.hosts;
	size_t n = 0, k = 0;

	if (!*s)
		return 0;
	for (const char *p = s; *p; p++)
		n += *p == ',';
	*out = calloc(n + 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	while (*s) {
		size_t l = strcspn(s, ",");

		if (l && l < TW_COORD_ADDR_MAX) {
			memcpy((*out)[k].addr, s, l);
			(*out)[k].addr[l] = '\0';
			k++;
		}
		s += l + (s[l] == ',');
	}
	*n_out = k;
	return 0;
}

static const struct tw_coord_ops static_ops = {
	.scheme = "static",
	.list_backups = st_list,
};
