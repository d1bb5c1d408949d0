/*
 * tools/twctl_tail.c — `twctl tail LOG` (twctl_tail.h): a reader of the live log
 * (tailwind/reader.h) that prints each entry on one line, as soon as the backups may show it.
 */
#include "twctl_tail.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include <tailwind/primary.h>
#include <tailwind/reader.h>

#include "exit.h"

void twctl_tail_usage(FILE *f)
{
	fprintf(f,
		"Usage: twctl [options] tail LOG [--from oldest|tail|LSN] [-n COUNT] [--idle MS]\n"
		"Print LOG's entries as they are acknowledged, read from its backups (-b, or -c);\n"
		"a takeover is followed, a lost backup replaced by another (docs/readers.md).\n"
		"One line per entry: LSN, segment:offset, length, epoch, and the payload (printable\n"
		"bytes as they are, others as \\xNN, the first 64 bytes); with -j one JSON object\n"
		"per line with the whole payload in base64 (\"data\").\n"
		"  --from WHERE   oldest: the first entry kept; tail (default): entries appended\n"
		"                 from now on; an LSN (decimal or 0x hex) as printed here\n"
		"  -n, --count N  exit after N entries\n"
		"  --idle MS      exit when no entry came for MS milliseconds\n"
		"Exit status 0 (COUNT reached, idle, or interrupted), 1 (the log cannot be read:\n"
		"freed position, no backup reachable, refused), 2 (usage).\n");
}

static void print_text(const struct tw_reader_entry *e)
{
	struct tw_pos pos = tw_lsn_to_pos(e->lsn);
	const unsigned char *d = e->data;
	uint32_t n = e->len < 64 ? e->len : 64;

	printf("0x%016" PRIx64 " %" PRIu32 ":%" PRIu32 " %" PRIu32 " e%" PRIu64 " ", e->lsn,
	       pos.segment, pos.offset, e->len, e->epoch);
	for (uint32_t i = 0; i < n; i++) {
		if (d[i] >= 0x20 && d[i] < 0x7f && d[i] != '\\')
			putchar(d[i]);
		else
			printf("\\x%02x", d[i]);
	}
	printf("%s\n", e->len > n ? "..." : "");
}

static int print_json(const struct tw_reader_entry *e, char **b64, size_t *cap)
{
	struct tw_pos pos = tw_lsn_to_pos(e->lsn);
	size_t need = sodium_base64_ENCODED_LEN(e->len, sodium_base64_VARIANT_ORIGINAL);

	if (need > *cap) {
		char *nb = realloc(*b64, need);

		if (!nb)
			return -ENOMEM;
		*b64 = nb;
		*cap = need;
	}
	sodium_bin2base64(*b64, *cap, e->data, e->len, sodium_base64_VARIANT_ORIGINAL);
	printf("{\"lsn\":\"0x%016" PRIx64 "\",\"segment\":%" PRIu32 ",\"offset\":%" PRIu32
	       ",\"len\":%" PRIu32 ",\"epoch\":%" PRIu64 ",\"data\":\"%s\"}\n", e->lsn, pos.segment,
	       pos.offset, e->len, e->epoch, *b64);
	return 0;
}

static int parse_num(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	return s[0] && !*end && !errno && s[0] != '-' ? 0 : -1;
}

int twctl_tail(const char *provider, const char *const *backups, unsigned nbk, const char *coord,
	       const char *key_file, unsigned timeout_ms, bool json, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "count", required_argument, NULL, 'n' },
		{ "idle", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	struct tw_reader_config cfg;
	struct tw_reader *r = NULL;
	uint64_t log_id, count = 0, idle = 0, got = 0, v;
	char err[768], *b64 = NULL;
	size_t b64cap = 0;
	int opt, rc;

	tw_reader_config_init(&cfg);
	cfg.from = TW_READ_TAIL;
	optind = 0; /* GNU: a full reset, options may follow LOG */
	while ((opt = getopt_long(argc, argv, "n:", lo, NULL)) != -1) {
		switch (opt) {
		case 'f':
			if (strcmp(optarg, "oldest") == 0) {
				cfg.from = TW_READ_OLDEST;
			} else if (strcmp(optarg, "tail") == 0) {
				cfg.from = TW_READ_TAIL;
			} else if (parse_num(optarg, &v) == 0) {
				cfg.from = TW_READ_LSN;
				cfg.lsn = v;
			} else {
				fprintf(stderr, "twctl tail: --from %s: expected oldest, tail or an "
					"LSN\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'n':
			if (parse_num(optarg, &count) || count == 0) {
				fprintf(stderr, "twctl tail: --count %s: expected a number > 0\n",
					optarg);
				return EXIT_USAGE;
			}
			break;
		case 'i':
			if (parse_num(optarg, &idle) || idle == 0 || idle > 86400000) {
				fprintf(stderr, "twctl tail: --idle %s: expected milliseconds, 1 .. "
					"86400000\n", optarg);
				return EXIT_USAGE;
			}
			break;
		default:
			twctl_tail_usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (argc - optind != 1 || parse_num(argv[optind], &log_id)) {
		fprintf(stderr, "twctl tail: expected exactly one LOG id (decimal or 0x hex)\n");
		return EXIT_USAGE;
	}
	if (nbk == 0 && !coord) {
		fprintf(stderr, "twctl tail: no backups given (-b ADDR, TW_BACKUPS, or -c URL)\n");
		return EXIT_USAGE;
	}
	cfg.log_id = log_id;
	cfg.backups = nbk ? backups : NULL;
	cfg.n_backups = nbk;
	cfg.coordinator = nbk ? NULL : coord;
	cfg.provider = provider;
	cfg.key_file = key_file;
	cfg.connect_timeout_ms = timeout_ms;
	cfg.rpc_timeout_ms = timeout_ms;
	rc = tw_reader_open(&cfg, &r, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "twctl tail: log 0x%" PRIx64 ": %s\n", log_id, err);
		return rc == -TW_ENOPROV ? EXIT_PROVIDER : EXIT_FAIL;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* one line per entry, as it comes */
	for (;;) {
		struct tw_reader_entry e;

		if (count && got >= count)
			break;
		rc = tw_reader_next(r, &e, idle ? (int)idle : -1);
		if (rc == -ETIMEDOUT && idle) {
			rc = 0;
			break;
		}
		if (rc)
			break;
		got++;
		if (json)
			rc = print_json(&e, &b64, &b64cap);
		else
			print_text(&e);
		if (rc)
			break;
	}
	if (rc)
		fprintf(stderr, "twctl tail: log 0x%" PRIx64 " at LSN 0x%016" PRIx64 ": %s\n", log_id,
			tw_reader_position(r), tw_reader_errmsg(r)[0] ? tw_reader_errmsg(r) :
			tw_strerror(rc));
	tw_reader_close(r);
	free(b64);
	return rc ? EXIT_FAIL : EXIT_OK;
}
