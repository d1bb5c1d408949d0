/* tests/lib/say.c — see say.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tailwind/primary.h>

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

void sayf(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	say(line, (size_t)n);
}

struct tw_primary *say_opened(const struct tw_ctx_config *tc, const struct tw_primary_config *cfg,
			      const char *prog)
{
	struct tw_primary *p;
	char err[1024];
	int rc = tw_primary_open(tc, cfg, &p, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "%s: open: %s: %s\n", prog, tw_strerror(rc), err);
		exit(1);
	}
	say("ready\n", 6);
	return p;
}
