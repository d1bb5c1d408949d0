/*
 * tests/lib/tap.h — a small TAP producer for meson's `protocol: 'tap'`.
 *
 *   tap_plan(n) or tap_plan_skip_all("reason") first (or tap_done_testing() at the end with no plan);
 *   ok(cond, "name %d", i); is_int(got, want, "name"); tap_diag("..."); return tap_exit();
 *
 * Results go to stdout; diagnostics ("# ...") to stdout as well so meson keeps them in order.
 */
#ifndef TW_TESTS_TAP_H
#define TW_TESTS_TAP_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TAP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TAP_PRINTF(a, b)
#endif

void tap_plan(int n);
/* Prints "1..0 # SKIP reason" and exits 0: the whole binary is a skip. */
_Noreturn void tap_plan_skip_all(const char *fmt, ...) TAP_PRINTF(1, 2);
bool tap__ok(bool pass, const char *file, int line, const char *fmt, ...) TAP_PRINTF(4, 5);
bool tap__is_int(long long got, long long want, const char *file, int line, const char *fmt, ...)
	TAP_PRINTF(5, 6);
void tap_skip(int n, const char *fmt, ...) TAP_PRINTF(2, 3);
void tap_diag(const char *fmt, ...) TAP_PRINTF(1, 2);
/* Print the plan now if none was given (plan at the end). */
void tap_done_testing(void);
/* Exit status: 0 when every test passed and the count matches the plan. */
int tap_exit(void);
/* Stop at once: prints the failure and exits non-zero (no "Bail out!", which meson shows as SKIP). */
_Noreturn void tap_fatal(const char *file, int line, const char *fmt, ...) TAP_PRINTF(3, 4);
int tap_failed(void);

#define ok(cond, ...) tap__ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) tap__is_int((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define TAP_FATAL(...) tap_fatal(__FILE__, __LINE__, __VA_ARGS__)
/* Abort the binary when a setup step fails. */
#define TAP_REQUIRE(cond, ...)                   \
	do {                                     \
		if (!(cond))                     \
			TAP_FATAL(__VA_ARGS__);  \
	} while (0)

/* Whether the long/full variant of a test was asked for (environment TW_LONG=1). */
bool tap_long_mode(void);
/*
 * Whether this binary was built with a sanitizer (ASan or TSan), or $TW_SANITIZER is set.
 * Integration tests that repeat a scenario many times to catch rare interleavings run fewer
 * rounds there: the sanitizer stage looks for memory and thread errors on every path, which a
 * few rounds cover, and the plain build keeps the full count.
 */
bool tap_sanitizer(void);
/* Seed for randomised tests: $TW_SEED if set, else time-based; printed as a diagnostic. */
uint64_t tap_seed(void);

#endif
