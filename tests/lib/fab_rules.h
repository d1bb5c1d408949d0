/*
 * tests/lib/fab_rules.h — memory-registration rules broken on purpose (struct tw_fab_mr_rules,
 * fabric/fabric.h), for the strict-mode tests: a fab opened with cfg.mr_rules = one of these
 * commits one mistake that only the verbs provider would catch, and strict mode must catch it.
 * The library has no fault flag of its own: the mistake is the test's table.
 *   "noback": FI_MR_ALLOCATED ignored: pages are not backed before fi_mr_reg;
 *   "reqkey": FI_MR_PROV_KEY ignored: a key of our own is requested and published instead of
 *             fi_mr_key() (the classic mistake: right on tcp, wrong on verbs).
 * Header-only (fab_peer and fabric_strict use it).
 */
#ifndef TW_TESTS_FAB_RULES_H
#define TW_TESTS_FAB_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "fabric/fabric.h"

static inline void fab_rules_noback(void *buf, size_t len, bool asked)
{
	(void)buf;
	(void)len;
	(void)asked;
}

static inline uint64_t fab_rules_own_key(uint64_t own, bool prov_key)
{
	(void)prov_key;
	return own;
}

static inline uint64_t fab_rules_requested_key(uint64_t provider, uint64_t requested)
{
	(void)provider;
	return requested;
}

/* The rules with the mistake `fault` ("noback" or "reqkey") in *r; false for another name. */
static inline bool fab_rules_fault(struct tw_fab_mr_rules *r, const char *fault)
{
	*r = tw__fab_mr_rules;
	if (!strcmp(fault, "noback")) {
		r->back = fab_rules_noback;
	} else if (!strcmp(fault, "reqkey")) {
		r->request_key = fab_rules_own_key;
		r->publish_key = fab_rules_requested_key;
	} else {
		return false;
	}
	return true;
}

#endif /* TW_TESTS_FAB_RULES_H */
