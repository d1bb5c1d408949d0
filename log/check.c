/*
 * log/check.c — tw__log_check_write (log/check.h): a sealed write checked as a unit.
 */
#include <stdbool.h>
#include <stdint.h>

#include <tailwind/common.h>
#include <tailwind/log_format.h>

#include "core/util.h"
#include "log/check.h"

int tw__log_check_write(const void *buf_, size_t len)
{
	const uint8_t *buf = buf_;
	size_t pos = 0;
	bool data = false;

	while (pos + TW_CKSUM_ENTRY_SIZE <= len) {
		const uint8_t *h = buf + pos;

		if (h[0] == TW_ENTRY_DATA) {
			uint32_t n;

			if (len - pos < TW_ENTRY_HDR_SIZE || h[1])
				return -TW_ECORRUPT;
			n = tw_load_le32(h + 4);
			if (n > len - pos - TW_ENTRY_HDR_SIZE ||
			    tw_crc32c(0, h + TW_ENTRY_HDR_SIZE, n) != tw_load_le32(h + 8))
				return -TW_ECORRUPT;
			pos += TW_ENTRY_HDR_SIZE + n;
			data = true;
		} else if (h[0] == TW_ENTRY_CHECKSUM) {
			/* Exactly one, at the very end, closing at least one data entry. */
			if (pos + TW_CKSUM_ENTRY_SIZE != len || !data || h[1] || !tw_load_le32(h + 4))
				return -TW_ECORRUPT;
			return 0;
		} else {
			return -TW_ECORRUPT;
		}
	}
	return -TW_ECORRUPT;
}
