/*
 * tests/unit/test_env.c — the environment table (core/env.c, tw_env_describe()): every row
 * complete and named once; tw__env_get() reads the variable now and takes empty for unset; the
 * table in docs/api.md, "Environment", is the library's, row for row (argv[1]: that file); and
 * the programs' defaults (tools/env_defaults.h) set FI_SOCKETS_PE_WAITTIME=0 only where the
 * environment does not set it. tests/env_readers.py checks that nothing else reads or writes
 * the environment.
 *
 *   test_env --markdown    prints the table as docs/api.md has it (to paste after a change)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "env_defaults.h"
#include "tap.h"

/* Row i as a Markdown table row, with its newline. */
static void md_row(size_t i, char *out, size_t len)
{
	const struct tw_env_var *v = tw_env_describe(i);
	const char *kind = v->flags & TW_ENV_PROGRAM ? " (for programs to set)" :
			   v->flags & TW_ENV_TESTING ? " (tests, experiments)" : "";
	const char *test = tw__env_test(i);

	snprintf(out, len, "| `%s`%s | %s | %s | %s | %s%s%s |\n", v->name, kind, v->type,
		 v->default_value, v->help, strcmp(test, "-") ? "`" : "", test,
		 strcmp(test, "-") ? "`" : "");
}

/* The rows of the table under "## Environment" in docs/api.md, header and rule left out. */
static size_t doc_rows(const char *path, char rows[][1024], size_t max)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	bool in = false;
	size_t n = 0, seen = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "## ", 3)) {
			in = !strcmp(line, "## Environment\n");
			continue;
		}
		if (!in || line[0] != '|')
			continue;
		if (seen++ < 2) /* the header and its rule */
			continue;
		if (n < max)
			snprintf(rows[n], sizeof(rows[n]), "%s", line);
		n++;
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	static char rows[64][1024];
	char want[1024];
	size_t n = 0, complete = 0, unique = 0, nd, same = 0;
	const struct tw_env_var *v;

	if (argc > 1 && !strcmp(argv[1], "--markdown")) {
		for (size_t i = 0; tw_env_describe(i); i++) {
			md_row(i, want, sizeof(want));
			fputs(want, stdout);
		}
		return 0;
	}
	tap_plan(9);
	for (; (v = tw_env_describe(n)) != NULL; n++) {
		bool dup = false;

		complete += v->name && v->type && v->default_value && v->help && tw__env_test(n) &&
			    !strcmp(tw__env_name((enum tw__env)n), v->name) && !strchr(v->help, '\n') &&
			    !strchr(v->help, '|');
		for (size_t j = 0; j < n; j++)
			dup |= !strcmp(tw_env_describe(j)->name, v->name);
		unique += !dup;
	}
	is_int(n, TW__ENV_COUNT, "the table has one row per enum tw__env value (%zu)", n);
	is_int(complete, n, "every row has a name, type, default, help (one line) and a test");
	is_int(unique, n, "no variable is named twice");

	unsetenv("TW_LOG_TIME");
	ok(tw__env_get(TW__ENV_LOG_TIME) == NULL, "unset: NULL");
	setenv("TW_LOG_TIME", "", 1);
	ok(tw__env_get(TW__ENV_LOG_TIME) == NULL, "empty: NULL, as unset");
	setenv("TW_LOG_TIME", "1", 1);
	ok(tw__env_get(TW__ENV_LOG_TIME) && !strcmp(tw__env_get(TW__ENV_LOG_TIME), "1"),
	   "set: read now, not cached");
	unsetenv("TW_LOG_TIME");

	nd = argc > 1 ? doc_rows(argv[1], rows, 64) : 0;
	for (size_t i = 0; i < n && i < nd; i++) {
		md_row(i, want, sizeof(want));
		if (!strcmp(want, rows[i]))
			same++;
		else
			tap_diag("row %zu differs:\n#  docs: %s#  want: %s", i, rows[i], want);
	}
	ok(nd == n && same == n, "docs/api.md \"Environment\" is the table, row for row (%zu of "
	   "%zu rows; `test_env --markdown` prints it)", same, nd);

	unsetenv("FI_SOCKETS_PE_WAITTIME");
	tw_tools_env_defaults();
	ok(getenv("FI_SOCKETS_PE_WAITTIME") && !strcmp(getenv("FI_SOCKETS_PE_WAITTIME"), "0"),
	   "the programs' defaults: FI_SOCKETS_PE_WAITTIME=0 where unset");
	setenv("FI_SOCKETS_PE_WAITTIME", "7", 1);
	tw_tools_env_defaults();
	ok(!strcmp(getenv("FI_SOCKETS_PE_WAITTIME"), "7"), "and the environment's value stays");
	return tap_exit();
}
