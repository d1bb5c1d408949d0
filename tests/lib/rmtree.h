/* tests/lib/rmtree.h — remove a test's temporary directory tree. */
#ifndef TW_TESTS_RMTREE_H
#define TW_TESTS_RMTREE_H

/* Remove `path` and everything below it (symbolic links are removed, not followed). Errors are
 * ignored: a test's scratch directory that cannot be removed is not the test's failure. */
void rm_tree(const char *path);

#endif
