/*
 * core/env.h — the one place the library reads its environment (docs/api.md, "Environment").
 *
 * Every variable is a row of one table (core/env.c: name, type, default, help, the test that
 * covers it), published through tw_env_describe() (tailwind/common.h) for twd --help, the man
 * pages and docs. tw__env_get() is the only getenv() of the library: tests/env_readers.py fails
 * on any other object that calls it, or on any setenv/putenv/unsetenv in the library.
 */
#ifndef TW_CORE_ENV_H
#define TW_CORE_ENV_H

#include <tailwind/common.h>

/* One per row of the table, in its order. */
enum tw__env {
	TW__ENV_LOG_LEVEL,
	TW__ENV_LOG_TIME,
	TW__ENV_KEY_FILE,
	TW__ENV_FI_PROVIDER,
	TW__ENV_DATA_PATH,
	TW__ENV_FAB_SHM_FAST,
	TW__ENV_FAB_SHM_BELL,
	TW__ENV_FAB_BUSY_POLL,
	TW__ENV_FAB_STRICT,
	TW__ENV_PRIMARY_MEMBARRIER,
	TW__ENV_PRIMARY_APPENDER_SEAL,
	TW__ENV_FI_SOCKETS_PE_WAITTIME, /* a default for programs to set (TW_ENV_PROGRAM) */
	TW__ENV_COUNT
};

/* The variable's value, read now; NULL when it is unset or empty (the two mean the same
 * everywhere). Thread-safe as getenv() is: no thread may change the environment meanwhile. */
const char *tw__env_get(enum tw__env id);

/* Its name ("TW_LOG_LEVEL"), for messages. */
const char *tw__env_name(enum tw__env id);

/* The test that covers the row (the table's fifth column), for tests/unit/test_env.c. */
const char *tw__env_test(size_t i);

#endif /* TW_CORE_ENV_H */
