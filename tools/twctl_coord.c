/*
 * tools/twctl_coord.c — twctl's coordinator side (twctl_coord.h).
 */
#include "twctl_coord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tailwind/common.h>
#include <tailwind/recovery.h>

#include "coord/coord.h"

static struct tw_coord *coord; /* held until exit: the owner node of fence/recover/delete */
static struct tw_coord_backup *regs;

static void close_at_exit(void)
{
	tw_coord_close(coord);
	coord = NULL;
	free(regs);
	regs = NULL;
}

static int open_once(const char *url, unsigned timeout_ms)
{
	char err[768];
	int rc;

	if (coord)
		return 0;
	rc = tw_coord_open(url, timeout_ms, &coord, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "twctl: coordinator: %s\n", err);
		return -1;
	}
	atexit(close_at_exit);
	return 0;
}

int twctl_coord_check(const char *url)
{
	struct tw_coord_url u;
	char err[768];

	if (tw_coord_url_parse(url, &u, err, sizeof(err)) < 0) {
		fprintf(stderr, "twctl: --coordinator: %s\n", err);
		return -1;
	}
	return 0;
}

int twctl_coord_backups(const char *url, unsigned timeout_ms, const char *provider,
			const char **backups, unsigned *n, unsigned max)
{
	size_t nr = 0, other = 0;

	if (open_once(url, timeout_ms) < 0)
		return -1;
	if (!provider)
		provider = "tcp";
	free(regs);
	regs = NULL;
	if (tw_coord_list_backups(coord, &regs, &nr) < 0) {
		fprintf(stderr, "twctl: %s\n", tw_coord_errmsg(coord));
		return -1;
	}
	*n = 0;
	for (size_t i = 0; i < nr && *n < max; i++) {
		if (regs[i].provider[0] && strcmp(regs[i].provider, provider)) {
			other++;
			continue;
		}
		backups[(*n)++] = regs[i].addr;
	}
	if (*n == 0) {
		fprintf(stderr, "twctl: no backup registered at %s for provider %s (%zu for other "
			"providers): start twd --coordinator URL, or give -b ADDR\n", url, provider,
			other);
		return -1;
	}
	return 0;
}

int twctl_coord_epoch(const char *url, unsigned timeout_ms, const char *cmd,
		      struct tw_recover_config *cfg)
{
	char owner[256], host[128] = "?";
	uint64_t epoch = 0;

	if (open_once(url, timeout_ms) < 0)
		return -1;
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "twctl %s host=%s pid=%ld", cmd, host, (long)getpid());
	if (tw_coord_take_log(coord, cfg->log_id, cfg->epoch, owner, true, &epoch) < 0) {
		fprintf(stderr, "twctl %s: %s\n", cmd, tw_coord_errmsg(coord));
		return -1;
	}
	cfg->epoch = epoch;
	return 0;
}

int twctl_coord_ls_backups(const char *url, unsigned timeout_ms, bool json)
{
	struct tw_coord_backup *v = NULL;
	size_t n = 0;

	if (open_once(url, timeout_ms) < 0)
		return 1;
	if (tw_coord_list_backups(coord, &v, &n) < 0) {
		fprintf(stderr, "twctl ls-backups: %s\n", tw_coord_errmsg(coord));
		return 1;
	}
	if (json)
		printf("{\"backups\":[");
	else
		printf("%-18s %-28s %-8s %-12s %9s %12s\n", "NODE", "ADDRESS", "PROVIDER", "ZONE",
		       "FREE/BUFS", "BUFFER_SIZE");
	for (size_t i = 0; i < n; i++) {
		const struct tw_coord_backup *b = &v[i];

		/* The fields hold no '"', '\\' or control characters except what twd was given:
		 * escape those two to stay valid JSON. */
		if (json) {
			const char *f[3] = { b->addr, b->provider, b->zone };
			const char *k[3] = { "address", "provider", "zone" };

			printf("%s{\"node\":\"%s\"", i ? "," : "", b->name);
			for (int j = 0; j < 3; j++) {
				printf(",\"%s\":\"", k[j]);
				for (const char *s = f[j]; *s; s++)
					if (*s == '"' || *s == '\\')
						printf("\\%c", *s);
					else if ((unsigned char)*s < 0x20)
						printf("\\u%04x", (unsigned char)*s);
					else
						putchar(*s);
				putchar('"');
			}
			printf(",\"buffers\":%" PRIu32 ",\"free\":%" PRIu32 ",\"buffer_size\":%" PRIu64
			       "}", b->buffers, b->free_buffers, b->buffer_size);
		} else {
			char fb[32];

			snprintf(fb, sizeof(fb), "%" PRIu32 "/%" PRIu32, b->free_buffers, b->buffers);
			printf("%-18s %-28s %-8s %-12s %9s %12" PRIu64 "\n", b->name, b->addr,
			       b->provider, b->zone[0] ? b->zone : "-", fb, b->buffer_size);
		}
	}
	if (json)
		printf("]}\n");
	free(v);
	return 0;
}

int twctl_coord_owner(const char *url, unsigned timeout_ms, bool json, uint64_t log_id)
{
	char owner[512] = "";
	uint64_t epoch = 0;
	int rc;

	if (open_once(url, timeout_ms) < 0)
		return 1;
	rc = tw_coord_log_info(coord, log_id, &epoch, owner, sizeof(owner));
	if (rc < 0) {
		fprintf(stderr, "twctl owner: %s\n", tw_coord_errmsg(coord));
		return 1;
	}
	if (json)
		printf("{\"log_id\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"owner\":\"%s\"}\n", log_id,
		       epoch, owner); /* owner: "epoch=N owner=host=H pid=P": no quotes */
	else
		printf("log %#" PRIx64 " epoch %" PRIu64 " owner %s\n", log_id, epoch,
		       owner[0] ? owner : "(none)");
	return 0;
}
