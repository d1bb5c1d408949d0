/*
 * tailwind/tailwind.h — umbrella header: the whole public API of libtailwind.
 */
#ifndef TAILWIND_TAILWIND_H
#define TAILWIND_TAILWIND_H

#include <tailwind/common.h>
#include <tailwind/admin.h>
#include <tailwind/backup.h>
#include <tailwind/log_format.h>
#include <tailwind/metrics.h>
#include <tailwind/primary.h>
#include <tailwind/context.h>
#include <tailwind/coordinator.h>
#include <tailwind/reader.h>
#include <tailwind/recovery.h>
#include <tailwind/standby.h>

#endif /* TAILWIND_TAILWIND_H */
