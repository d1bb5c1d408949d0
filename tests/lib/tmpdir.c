/* tests/lib/tmpdir.c — see tmpdir.h. */
#include "tmpdir.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "rmtree.h"
#include "tap.h"

#define MAX_DIRS 16

/* Directories to remove at exit, by the process that made them (a forked child that exits
 * runs our atexit handlers too). */
static char dirs[MAX_DIRS][256];
static pid_t owner;

static void remove_at_exit(void)
{
	bool any = false;

	if (getpid() != owner)
		return;
	for (unsigned i = 0; i < MAX_DIRS; i++)
		any |= dirs[i][0] != '\0';
	if (!any)
		return;
	proc_cleanup_all(); /* the children first: they may write into them */
	for (unsigned i = 0; i < MAX_DIRS; i++)
		if (dirs[i][0]) {
			tmpdir_remove(dirs[i]);
			dirs[i][0] = '\0';
		}
}

void tmpdir_make(char *dir, size_t len, const char *parent, const char *name)
{
	static bool hooked;
	int n;

	if (!parent) {
		parent = getenv("TMPDIR");
		if (!parent || !parent[0])
			parent = "/tmp";
	}
	n = snprintf(dir, len, "%s/%s.XXXXXX", parent, name);
	TAP_REQUIRE(n > 0 && (size_t)n < len, "directory name too long: %s/%s", parent, name);
	TAP_REQUIRE(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
	if (!hooked && atexit(remove_at_exit) == 0) {
		hooked = true;
		owner = getpid();
	}
	for (unsigned i = 0; i < MAX_DIRS; i++)
		if (!dirs[i][0] && strlen(dir) < sizeof(dirs[i])) {
			snprintf(dirs[i], sizeof(dirs[i]), "%s", dir);
			break;
		}
}

void tmpdir_remove(const char *dir)
{
	for (unsigned i = 0; i < MAX_DIRS; i++)
		if (dirs[i][0] && dir != dirs[i] && !strcmp(dirs[i], dir))
			dirs[i][0] = '\0';
	if (getenv("TW_KEEP")) {
		tap_diag("kept %s (TW_KEEP)", dir);
		return;
	}
	rm_tree(dir);
}
