/*
 * tools/twctl_coord.h — twctl's coordinator side (-c URL; docs/coordination.md): backups from
 * the registrations, epochs (and the owner node while the command runs) for fence, recover and
 * delete, and the commands ls-backups and owner.
 */
#ifndef TW_TOOLS_TWCTL_COORD_H
#define TW_TOOLS_TWCTL_COORD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct tw_recover_config;

/* Check the URL (usage error: message on stderr, returns -1). */
int twctl_coord_check(const char *url);

/* Fill backups[0..*n) with the backups recorded for *log (log not NULL and recorded), else
 * the registrations, of `provider` (strings live until exit). 0, or -1 with a message on
 * stderr. */
int twctl_coord_backups(const char *url, unsigned timeout_ms, const char *provider,
			const uint64_t *log, const char **backups, unsigned *n, unsigned max);

/* Allocate cfg->log_id's next epoch (at least cfg->epoch) and hold its owner node until exit,
 * as "twctl CMD" (a takeover: a live owner's node is replaced); cfg->epoch receives it. 0, or -1
 * with a message on stderr. */
int twctl_coord_epoch(const char *url, unsigned timeout_ms, const char *cmd,
		      struct tw_recover_config *cfg);

/* Whether the coordinator has a record of log_id: 1, 0, or -1 with a message on stderr. */
int twctl_coord_log_known(const char *url, unsigned timeout_ms, const char *cmd,
			  uint64_t log_id);

/* twctl -c URL ls-backups: one line per registration (or JSON). Exit status. */
int twctl_coord_ls_backups(const char *url, unsigned timeout_ms, bool json);

/* twctl -c URL owner LOG: the log's epoch and owner at the coordinator. Exit status. */
int twctl_coord_owner(const char *url, unsigned timeout_ms, bool json, uint64_t log_id);

/* twctl -c URL ls-logs: every log with its epoch, owner and recorded backups. Exit status. */
int twctl_coord_ls_logs(const char *url, unsigned timeout_ms, bool json);

/* twctl -c URL standby LOG [...]: argv[0] is "standby". Exit status. */
int twctl_coord_standby(const char *url, unsigned timeout_ms, const char *provider,
			const char *key_file, int argc, char **argv);
void twctl_coord_standby_usage(FILE *f);

#endif
