/*
 * examples/kv/kv_cluster.c — the cluster map (kv_cluster.h).
 */
#include "kv_cluster.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t len, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t len, unsigned line, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line)
		snprintf(err, len, "cluster map line %u: %s", line, msg);
	else
		snprintf(err, len, "cluster map: %s", msg);
	return -EINVAL;
}

/* "0,2,5" -> bits; false on anything else (an empty list is fine). */
static bool parse_set(const char *s, unsigned limit, uint64_t *out)
{
	*out = 0;
	while (*s) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v >= limit || v >= 64 || (*end && *end != ','))
			return false;
		*out |= UINT64_C(1) << v;
		s = *end ? end + 1 : end;
	}
	return true;
}

static bool parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return false;
	*out = v;
	return true;
}

static int parse_server(char **tok, int ntok, struct kv_cluster *c, unsigned line, char *err,
			size_t len)
{
	struct kv_server_entry *s;
	uint64_t id;

	if (ntok < 2 || !parse_uint(tok[1], KV_MAX_SERVERS - 1, &id))
		return fail(err, len, line, "expected \"server ID kv=ADDR backup=ADDR ...\" with "
			    "ID below %u", KV_MAX_SERVERS);
	if (id != c->nservers)
		return fail(err, len, line, "server %" PRIu64 " out of order (expected %u)", id,
			    c->nservers);
	s = &c->servers[c->nservers++];
	for (int i = 2; i < ntok; i++) {
		char *eq = strchr(tok[i], '=');
		const char *v = eq ? eq + 1 : "";

		if (!eq)
			return fail(err, len, line, "\"%s\": expected NAME=VALUE", tok[i]);
		*eq = 0;
		if (!strcmp(tok[i], "kv") || !strcmp(tok[i], "backup")) {
			char *dst = tok[i][0] == 'k' ? s->kv : s->backup;

			if (!*v || strlen(v) >= KV_ADDR_MAX)
				return fail(err, len, line, "%s= needs an address (at most %u bytes)",
					    tok[i], KV_ADDR_MAX - 1);
			snprintf(dst, KV_ADDR_MAX, "%s", v);
		} else if (!strcmp(tok[i], "owns") || !strcmp(tok[i], "standby")) {
			uint64_t *dst = tok[i][0] == 'o' ? &s->owns : &s->standby;

			if (!parse_set(v, KV_MAX_PARTITIONS, dst))
				return fail(err, len, line, "%s=%s: expected partition numbers "
					    "separated by commas", tok[i], v);
		} else {
			return fail(err, len, line, "unknown server field \"%s\"", tok[i]);
		}
	}
	if (!s->kv[0] || !s->backup[0])
		return fail(err, len, line, "server %" PRIu64 " needs kv= and backup=", id);
	return 0;
}

static int check(const struct kv_cluster *c, char *err, size_t len)
{
	if (!c->partitions || c->partitions > KV_MAX_PARTITIONS)
		return fail(err, len, 0, "partitions must be 1..%u", KV_MAX_PARTITIONS);
	if (c->nservers < 2 || c->replicas < 1 || c->replicas >= c->nservers)
		return fail(err, len, 0, "need 1 <= replicas < servers (replicas %u, servers %u): "
			    "a server never backs up its own partitions", c->replicas, c->nservers);
	for (unsigned p = 0; p < c->partitions; p++) {
		unsigned owners = 0;

		for (unsigned i = 0; i < c->nservers; i++)
			owners += (unsigned)(c->servers[i].owns >> p & 1);
		if (owners != 1)
			return fail(err, len, 0, "partition %u has %u owners (exactly one needed)", p,
				    owners);
	}
	for (unsigned i = 0; i < c->nservers; i++)
		if ((c->servers[i].owns | c->servers[i].standby) >> c->partitions)
			return fail(err, len, 0, "server %u names a partition beyond %u", i,
				    c->partitions - 1);
	return 0;
}

int kv_cluster_parse(const char *text, size_t len, struct kv_cluster *c, char *err, size_t errlen)
{
	char *copy = malloc(len + 1), *save = NULL, *ln;
	unsigned line = 0;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = 0;
	memset(c, 0, sizeof(*c));
	c->replicas = 2;
	for (ln = strtok_r(copy, "\n", &save); ln && !rc; ln = strtok_r(NULL, "\n", &save)) {
		char *tok[8], *ts = NULL, *t, *hash = strchr(ln, '#');
		uint64_t v;
		int n = 0;

		line++;
		if (hash)
			*hash = 0;
		for (t = strtok_r(ln, " \t\r", &ts); t; t = strtok_r(NULL, " \t\r", &ts)) {
			if (n == 8) {
				rc = fail(err, errlen, line, "too many fields");
				break;
			}
			tok[n++] = t;
		}
		if (rc || !n)
			continue;
		if (!strcmp(tok[0], "server")) {
			rc = parse_server(tok, n, c, line, err, errlen);
		} else if (n != 2) {
			rc = fail(err, errlen, line, "expected \"NAME VALUE\"");
		} else if (!strcmp(tok[0], "partitions") || !strcmp(tok[0], "replicas")) {
			if (!parse_uint(tok[1], KV_MAX_PARTITIONS, &v))
				rc = fail(err, errlen, line, "%s: expected a number up to %u", tok[0],
					  KV_MAX_PARTITIONS);
			else if (tok[0][0] == 'p')
				c->partitions = (unsigned)v;
			else
				c->replicas = (unsigned)v;
		} else if (!strcmp(tok[0], "log-base")) {
			if (!parse_uint(tok[1], UINT64_MAX - KV_MAX_PARTITIONS, &v))
				rc = fail(err, errlen, line, "log-base: expected a number");
			else
				c->log_base = v;
		} else if (!strcmp(tok[0], "coordinator")) {
			if (strlen(tok[1]) >= sizeof(c->coordinator))
				rc = fail(err, errlen, line, "coordinator URL too long");
			else
				snprintf(c->coordinator, sizeof(c->coordinator), "%s", tok[1]);
		} else {
			rc = fail(err, errlen, line, "unknown item \"%s\"", tok[0]);
		}
	}
	free(copy);
	return rc ? rc : check(c, err, errlen);
}

/* " name=0,2,5" for a non-empty set, appended at buf + *at. */
static int set_str(char *buf, size_t cap, int *at, const char *name, uint64_t set)
{
	bool first = true;

	for (unsigned p = 0; p < 64; p++) {
		int n;

		if (!(set >> p & 1))
			continue;
		n = snprintf(buf + *at, cap - (size_t)*at, "%s%u", first ? name : ",", p);
		if (n < 0 || (size_t)n >= cap - (size_t)*at)
			return -ENOSPC;
		*at += n;
		first = false;
	}
	return 0;
}

int kv_cluster_format(const struct kv_cluster *c, char *buf, size_t cap)
{
	int at = snprintf(buf, cap, "partitions %u\nreplicas %u\nlog-base %" PRIu64 "\n%s%s%s",
			  c->partitions, c->replicas, c->log_base,
			  c->coordinator[0] ? "coordinator " : "", c->coordinator,
			  c->coordinator[0] ? "\n" : "");

	if (at < 0 || (size_t)at >= cap)
		return -ENOSPC;
	for (unsigned i = 0; i < c->nservers; i++) {
		const struct kv_server_entry *s = &c->servers[i];
		int n = snprintf(buf + at, cap - (size_t)at, "server %u kv=%s backup=%s", i, s->kv,
				 s->backup);

		if (n < 0 || (size_t)n >= cap - (size_t)at)
			return -ENOSPC;
		at += n;
		if (set_str(buf, cap, &at, " owns=", s->owns) < 0 ||
		    set_str(buf, cap, &at, " standby=", s->standby) < 0)
			return -ENOSPC;
		if ((size_t)at + 1 >= cap)
			return -ENOSPC;
		buf[at++] = '\n';
		buf[at] = 0;
	}
	return at;
}

unsigned kv_cluster_owner(const struct kv_cluster *c, unsigned p)
{
	for (unsigned i = 0; i < c->nservers; i++)
		if (c->servers[i].owns >> p & 1)
			return i;
	return 0;
}
