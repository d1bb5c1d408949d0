/*
 * core/env.c — every environment variable the library reads, in one table, and the one
 * getenv() of the library (compare libfabric's fi_param_define / fi_param_get, and `fi_info -e`).
 *
 * A new variable is a row here and a value of enum tw__env (core/env.h), then a row of the table
 * in docs/api.md, "Environment" (tests/unit/test_env.c compares the two). The library never
 * writes the environment: setenv() races every thread of the embedding program that reads it
 * (tests/env_readers.py checks both with nm).
 */
#include <stdlib.h>

#include "core/env.h"
#include "core/util.h"

struct row {
	struct tw_env_var v;
	const char *test; /* the test that covers it; "-" for none */
};

static const struct row table[TW__ENV_COUNT] = {
	[TW__ENV_LOG_LEVEL] = {
		{ "TW_LOG_LEVEL", "enum: error, warn, info, debug", "warn",
		  "the level of the default log sink (stderr); another value is warned about and "
		  "taken as warn. tw_diag_set_level() overrides it", 0 },
		"twd_checks" },
	[TW__ENV_LOG_TIME] = {
		{ "TW_LOG_TIME", "bool: 1 or 0", "0",
		  "1 puts the date and time on every line of the default log sink", 0 },
		"twd_checks" },
	[TW__ENV_KEY_FILE] = {
		{ "TW_KEY_FILE", "path", "(none: no authentication)",
		  "the shared key file of peer authentication, where a config's key_file is NULL "
		  "(\"\" there: none, whatever this says)", 0 },
		"auth_tcp" },
	[TW__ENV_FI_PROVIDER] = {
		{ "FI_PROVIDER", "libfabric provider name", "tcp",
		  "libfabric's own filter; Tailwind also takes it as the provider where a config's "
		  "provider is NULL", 0 },
		"twd_checks" },
	[TW__ENV_DATA_PATH] = {
		{ "TW_DATA_PATH", "enum: onesided, rpc", "onesided",
		  "rpc makes a context's writes go as messages the backup copies (the benchmarks' "
		  "RPC-replication baseline), read when a context opens; another value is refused",
		  TW_ENV_TESTING },
		"rpcdata" },
	[TW__ENV_FAB_SHM_FAST] = {
		{ "TW_FAB_SHM_FAST", "enum: off, on", "on",
		  "on: shm writes go without delivery-complete where libfabric 1.17's CMA path "
		  "allows it (the writer places the bytes, the backup runs nothing: docs/fabric.md, "
		  "\"Passive shm backups\"); off keeps delivery-complete; another value is warned "
		  "about and taken as off", 0 },
		"fabric_shm_fast_cma" },
	[TW__ENV_FAB_SHM_BELL] = {
		{ "TW_FAB_SHM_BELL", "enum: on, off", "on",
		  "off keeps an idle shm listener (a twd) polling with its backoff instead of "
		  "sleeping on its doorbell (docs/fabric.md, \"Idle shm backups sleep on a "
		  "doorbell\"): for comparisons; read when it starts listening",
		  TW_ENV_TESTING },
		"-" },
	[TW__ENV_FAB_BUSY_POLL] = {
		{ "TW_FAB_BUSY_POLL", "bool: 1", "(unset)",
		  "1 makes every fabric of the process poll instead of blocking (experiments)",
		  TW_ENV_TESTING },
		"-" },
	[TW__ENV_FAB_STRICT] = {
		{ "TW_FAB_STRICT", "enum: verbs", "(unset)",
		  "verbs checks every fabric of the process against the verbs provider's rules and "
		  "aborts at the first violation (tests); another value fails the open",
		  TW_ENV_TESTING },
		"fabric_strict_tcp" },
	[TW__ENV_PRIMARY_MEMBARRIER] = {
		{ "TW_PRIMARY_MEMBARRIER", "enum: on, off", "on",
		  "off makes async appenders publish each entry with a fenced store instead of "
		  "leaving the fence to the progress thread's membarrier(2) before it sleeps "
		  "(docs/primary.md, \"The append engine\"): the path taken where the kernel refuses "
		  "membarrier, for tests and comparisons; read when a log opens; another value is "
		  "warned about and taken as on",
		  TW_ENV_TESTING },
		"primary_batch_fenced" },
	[TW__ENV_PRIMARY_APPENDER_SEAL] = {
		{ "TW_PRIMARY_APPENDER_SEAL", "enum: on, off", "on",
		  "off leaves every seal of an async log to its progress thread: an appender that "
		  "meets a whole batch waiting rings it and sleeps instead of sealing the batch "
		  "itself (docs/primary.md, \"Who seals\"), for tests and comparisons; read when a "
		  "log opens; another value is warned about and taken as on",
		  TW_ENV_TESTING },
		"primary_batch_ptseal" },
	[TW__ENV_FI_SOCKETS_PE_WAITTIME] = {
		{ "FI_SOCKETS_PE_WAITTIME", "milliseconds", "0",
		  "libfabric's: its sockets provider spins this long after every "
		  "wake-up (libfabric's default 10). The library only reads it (to say, at info "
		  "level, that it is unset); programs set 0 at the start of main unless the "
		  "environment sets it (docs/fabric.md, \"Provider environment defaults\")",
		  TW_ENV_PROGRAM },
		"env" },
};

const struct tw_env_var *tw_env_describe(size_t i)
{
	return i < TW__ENV_COUNT ? &table[i].v : NULL;
}

const char *tw__env_test(size_t i)
{
	return i < TW__ENV_COUNT ? table[i].test : NULL;
}

const char *tw__env_name(enum tw__env id)
{
	return (unsigned)id < TW__ENV_COUNT ? table[id].v.name : "?";
}

const char *tw__env_get(enum tw__env id)
{
	const char *s;

	if ((unsigned)id >= TW__ENV_COUNT)
		return NULL;
	s = getenv(table[id].v.name);
	return s && s[0] ? s : NULL;
}
