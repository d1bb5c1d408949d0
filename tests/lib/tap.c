/* tests/lib/tap.c — see tap.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

static int planned = -1;
static int run;
static int failed;
/* Failures repeated on stderr at exit: meson shows a failing test's stderr, cut to its last
 * lines, so the stdout TAP lines of an early failure may never reach a CI log. */
static char fails[4096];
static size_t fails_len;

void tap_plan(int n)
{
	planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

void tap_plan_skip_all(const char *fmt, ...)
{
	va_list ap;

	printf("1..0 # SKIP ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(0);
}

TAP_PRINTF(4, 0) static bool report(bool pass, const char *file, int line, const char *fmt, va_list ap)
{
	run++;
	if (!pass)
		failed++;
	char desc[1024];

	vsnprintf(desc, sizeof(desc), fmt, ap);
	/* One line per result: a description that quotes a program's output (with its newlines)
	 * would otherwise put lines meson cannot parse into the TAP stream. */
	for (char *c = desc; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	for (size_t n = strlen(desc); n > 0 && desc[n - 1] == ' '; n--)
		desc[n - 1] = '\0';
	printf("%sok %d - %s\n", pass ? "" : "not ", run, desc);
	if (!pass) {
		int n;

		printf("#   Failed at %s:%d\n", file, line);
		fprintf(stderr, "not ok %d - %s (%s:%d)\n", run, desc, file, line);
		fflush(stderr);
		n = snprintf(fails + fails_len, sizeof(fails) - fails_len, "  not ok %d - %.300s (%s:%d)\n",
			     run, desc, file, line);
		if (n > 0)
			fails_len = fails_len + (size_t)n < sizeof(fails) ? fails_len + (size_t)n
									   : sizeof(fails) - 1;
	}
	fflush(stdout);
	return pass;
}

bool tap__ok(bool pass, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	report(pass, file, line, fmt, ap);
	va_end(ap);
	return pass;
}

bool tap__is_int(long long got, long long want, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	bool pass = got == want;

	va_start(ap, fmt);
	report(pass, file, line, fmt, ap);
	va_end(ap);
	if (!pass)
		printf("#   got:  %lld\n#   want: %lld\n", got, want);
	return pass;
}

void tap_skip(int n, const char *fmt, ...)
{
	va_list ap;

	for (int i = 0; i < n; i++) {
		run++;
		printf("ok %d # SKIP ", run);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

/* Every line of a diagnostic gets its "# " (a multi-line message, e.g. captured stderr, would
 * otherwise break the TAP stream). */
void tap_diag(const char *fmt, ...)
{
	char buf[8192];
	const char *p = buf, *nl;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	do {
		nl = strchr(p, '\n');
		if (!nl && !*p && p != buf)
			break; /* a trailing newline ends the message */
		printf("# %.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
		p = nl ? nl + 1 : NULL;
	} while (p);
	fflush(stdout);
}

void tap_done_testing(void)
{
	if (planned < 0) {
		planned = run;
		printf("1..%d\n", run);
		fflush(stdout);
	}
}

int tap_failed(void)
{
	return failed;
}

int tap_exit(void)
{
	if (planned < 0)
		tap_done_testing();
	if (run != planned) {
		printf("# planned %d tests but ran %d\n", planned, run);
		fprintf(stderr, "# planned %d tests but ran %d\n%s", planned, run, fails);
		fflush(stdout);
		return 1;
	}
	if (failed) {
		printf("# failed %d of %d tests\n", failed, run);
		fprintf(stderr, "# failed %d of %d tests:\n%s", failed, run, fails);
	}
	fflush(stdout);
	fflush(stderr);
	return failed ? 1 : 0;
}

void tap_fatal(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	run++;
	failed++;
	printf("not ok %d - fatal: ", run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n#   at %s:%d\n", file, line);
	if (planned < 0)
		printf("1..%d\n", run);
	fflush(stdout);
	exit(1);
}

bool tap_long_mode(void)
{
	const char *s = getenv("TW_LONG");
	return s && *s && *s != '0';
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TAP_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TAP_SANITIZER 1
#endif
#endif
#ifndef TAP_SANITIZER
#define TAP_SANITIZER 0
#endif

bool tap_sanitizer(void)
{
	const char *s = getenv("TW_SANITIZER");

	return TAP_SANITIZER || (s && *s && *s != '0');
}

uint64_t tap_seed(void)
{
	const char *s = getenv("TW_SEED");
	uint64_t seed;

	if (s && *s)
		seed = strtoull(s, NULL, 0);
	else
		seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	printf("# seed %llu (set TW_SEED to repeat)\n", (unsigned long long)seed);
	fflush(stdout);
	return seed;
}
