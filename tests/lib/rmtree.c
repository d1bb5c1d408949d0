/* tests/lib/rmtree.c — see rmtree.h. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>

#include "rmtree.h"

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

void rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
