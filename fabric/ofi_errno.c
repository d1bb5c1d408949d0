/* fabric/ofi_errno.c — names of libfabric's own error codes for tw_strerror(). */
#include <rdma/fi_errno.h>

#include "fabric/util.h"

const char *tw__fabric_strerror(int err)
{
	return fi_strerror(err);
}
