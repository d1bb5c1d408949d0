/* tests/fuzz/replay.c — see replay.h. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "tap.h"

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *slurp(const char *path, size_t *len_out)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc(n ? (size_t)n : 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*len_out = (size_t)n;
	}
	fclose(f);
	return buf;
}

int fuzz_replay_main(int argc, char **argv, fuzz_check_fn check, size_t min_inputs)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	TAP_REQUIRE(argc == 2, "usage: %s CORPUS_DIR", argv[0]);
	d = opendir(argv[1]);
	TAP_REQUIRE(d, "cannot open %s", argv[1]);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof(*names));
			TAP_REQUIRE(names, "realloc");
		}
		names[n] = strdup(de->d_name);
		TAP_REQUIRE(names[n], "strdup");
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);

	tap_plan((int)n + 1);
	ok(n >= min_inputs, "corpus has %zu inputs (at least %zu)", n, min_inputs);
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		size_t len = 0;
		uint8_t *buf;
		const char *err;

		snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]);
		buf = slurp(path, &len);
		if (!buf) {
			ok(0, "%s: cannot read", names[i]);
		} else {
			err = check(buf, len);
			ok(err == NULL, "%s (%zu bytes)", names[i], len);
			if (err)
				tap_diag("%s", err);
		}
		free(buf);
		free(names[i]);
	}
	free(names);
	return tap_exit();
}
