/* tests/lib/say.c — see say.h. */
#include <errno.h>
#include <unistd.h>

#include "say.h"

void say(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(1, s, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			_exit(3);
		}
		s += w;
		n -= (size_t)w;
	}
}
