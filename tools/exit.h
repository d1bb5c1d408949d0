/*
 * tools/exit.h — one table of exit codes for twd, twctl and twbench: the same mistake gives the
 * same code in each (an unknown provider used to exit 4, 2 and 1). Each program's --help prints
 * EXIT_HELP, so the man pages (help2man) and docs/operations.md "Exit status" show one table.
 */
#ifndef TW_TOOLS_EXIT_H
#define TW_TOOLS_EXIT_H

enum {
	EXIT_OK = 0,       /* success; twd: stopped by a signal, every buffer flushed */
	EXIT_FAIL = 1,     /* the operation failed while running (a backup refused or was
			    * unreachable, corruption found, a benchmark run failed; twd: the
			    * fabric failed, or flushing at shutdown failed) */
	EXIT_USAGE = 2,    /* bad command line, option value or key file */
	EXIT_STORAGE = 3,  /* a directory or file the program must write is unusable */
	EXIT_PROVIDER = 4, /* the libfabric provider is not available here, or twd cannot listen */
	EXIT_MEMORY = 5,   /* the memory asked for cannot be had */
	EXIT_NO_LOG = 6,   /* no such log: nothing was changed */
};

#define EXIT_HELP                                                                              \
	"Exit status (one table for twd, twctl and twbench):\n"                                 \
	"  0  success; twd: stopped by a signal, every buffer flushed\n"                         \
	"  1  the operation failed: a backup refused or was unreachable, corruption was\n"       \
	"     found, a benchmark run failed; twd: the fabric failed, or flushing at\n"           \
	"     shutdown failed\n"                                                                 \
	"  2  usage error: command line, option value or key file\n"                            \
	"  3  storage unusable: twd's directory (missing parent, permissions, in use by\n"       \
	"     another twd, its meta.twlog damaged or newer, cannot hold a segment file:\n"      \
	"     a probe file is created, written, fsync'ed and removed at start; a bad file\n"    \
	"     about one log makes that log unavailable, not twd), twctl recover -o FILE,\n"     \
	"     twbench's directory for local twd's\n"                                             \
	"  4  the provider is not available on this machine, or twd cannot listen\n"            \
	"  5  not enough memory: twd's initial buffers (--buffers) above MemAvailable, or\n"     \
	"     RLIMIT_MEMLOCK on verbs, or they cannot be allocated or registered; the\n"        \
	"     same from a local twd of twbench, or twbench's own bookkeeping\n"                 \
	"  6  no such log: no reachable backup has ever held or fenced it and the\n"             \
	"     coordinator (-c) has no record of it; nothing was changed (twctl recover,\n"      \
	"     free, delete; recover --create goes on)\n"

#endif
