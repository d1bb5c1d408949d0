/*
 * tools/twctl_tail.h — `twctl tail LOG`: print a live log's entries as they are acknowledged,
 * read from its backups (tailwind/reader.h, docs/readers.md).
 */
#ifndef TW_TOOLS_TWCTL_TAIL_H
#define TW_TOOLS_TWCTL_TAIL_H

#include <stdbool.h>
#include <stdio.h>

/* The command's usage and options (for `twctl tail --help` and the man page). */
void twctl_tail_usage(FILE *f);

/* Run `tail`; argv[0] is "tail". backups[0..nbk) or coord (the log's backups from it). Returns
 * an exit code (tools/exit.h). */
int twctl_tail(const char *provider, const char *const *backups, unsigned nbk, const char *coord,
	       const char *key_file, unsigned timeout_ms, bool json, int argc, char **argv);

#endif
