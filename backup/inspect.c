/*
 * backup/inspect.c — tailwind/admin.h's offline check of a segment file (twctl inspect), over
 * tw__segfile_inspect (segfile.c).
 */
#include <errno.h>
#include <stdlib.h>

#include <tailwind/admin.h>

#include "backup/segfile.h"

_Static_assert(TW_SEGFILE_F_CORRUPT == SEGFILE_F_CORRUPT, "one flag, two names");

struct report {
	struct tw_segfile_report pub; /* first: the pointer handed out */
	struct segfile_report r;
};

int tw_admin_inspect_file(int fd, struct tw_segfile_report **out)
{
	struct report *rep;
	const struct segfile_hdr *h;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return -ENOMEM;
	rc = tw__segfile_inspect(fd, &rep->r);
	if (rc) {
		free(rep->r.data);
		free(rep);
		return rc;
	}
	h = &rep->r.h;
	rep->pub = (struct tw_segfile_report){
		.file_size = rep->r.file_size, .short_file = rep->r.short_file,
		.header_rc = rep->r.hdr_rc, .format_version = rep->r.version_field,
		.log_id = h->log_id, .segment_id = h->segment_id,
		.replica_version = h->replica_version, .epoch = h->epoch,
		.open = h->state == SEGFILE_OPEN, .flags = h->flags, .checksum = h->checksum,
		.valid_len = h->valid_len, .entries = h->entries, .buffer_size = h->buffer_size,
		.flush_time_ns = h->flush_time_ns, .chain_seed = h->seed,
		.data_offset = rep->r.data_off, .data_len = rep->r.data_len, .data = rep->r.data,
		.scan_valid_len = rep->r.scan.valid_len, .scan_entries = rep->r.scan.entries,
		.scan_checksum = rep->r.scan.last_checksum, .scan_stop = rep->r.scan.stop,
		.scan_stop_offset = rep->r.scan.stop_offset, .corrupt = rep->r.corrupt,
		.why = rep->r.why,
	};
	*out = &rep->pub;
	return 0;
}

int tw_segfile_report_free(struct tw_segfile_report *r)
{
	struct report *rep = (struct report *)r;

	if (rep) {
		free(rep->r.data);
		free(rep);
	}
	return 0;
}
