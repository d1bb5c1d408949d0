/*
 * tests/lib/tmpdir.h — a test's scratch directory: made fresh, removed with everything below it
 * at the end, and at exit too when the test stops early (a failed TAP_REQUIRE), after the
 * children that write into it are stopped (tools/proc.h, proc_cleanup_all). TW_KEEP=1 keeps it.
 *
 *   char root[256];
 *   tmpdir_make(root, sizeof(root), NULL, "test_ctx");   // $TMPDIR (or /tmp)/test_ctx.XXXXXX
 *   ...
 *   tmpdir_remove(root);
 */
#ifndef TW_TESTS_TMPDIR_H
#define TW_TESTS_TMPDIR_H

#include <stddef.h>

/* mkdtemp of <parent>/<name>.XXXXXX into dir (len bytes); parent NULL: $TMPDIR if set, else
 * /tmp. Fails the test (TAP_REQUIRE) when the name does not fit or mkdtemp fails. */
void tmpdir_make(char *dir, size_t len, const char *parent, const char *name);

/* Remove dir and everything below it (rm_tree, rmtree.h) unless TW_KEEP is set; it is no
 * longer removed at exit. */
void tmpdir_remove(const char *dir);

#endif
