#!/bin/sh
# tests/abi_check.sh BASELINE LIB HEADERS — the ABI rule (docs/api.md): the built libtailwind
# against the ABI recorded at the release (abi/libtailwind.abi, written by abidw), with
# libabigail's abidiff over the public headers' types. Fails on ANY difference: an
# incompatible one is not allowed within libtailwind.so.1, and a compatible one (a function
# added, a field at a struct's end) is recorded in the same change by writing the baseline
# again (docs/api.md, "The ABI rule"), so that a reviewer sees it.
# Also: the soname is libtailwind.so.1 and every exported symbol is versioned TAILWIND_1.x
# and named tw_ without a second underscore. TAP on stdout.
set -u
BASE=$1 LIB=$2 HDR=$3
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
if ! command -v abidiff >/dev/null 2>&1; then
	echo "1..0 # SKIP abidiff not installed (abigail-tools; .ci/install-deps installs it)"; exit 0
fi
# Both sides written by abidw with the same options (public headers' types only), as the
# baseline was (docs/api.md gives the command).
T=$(mktemp /tmp/tw-abi-XXXXXX) || exit 1
trap 'rm -f "$T"' EXIT
abidw --headers-dir "$HDR" --drop-private-types --no-show-locs --no-corpus-path \
	--no-comp-dir-path "$LIB" >"$T"
ok $? "abidw reads the built library"
out=$(abidiff "$BASE" "$T" 2>&1)
rc=$?
echo "$out" | sed 's/^/# /'
test "$rc" = 0
ok $? "abidiff: the ABI is the recorded one, $(basename "$BASE") (exit $rc)"
test $((rc & 8)) -eq 0 || echo "# incompatible: not allowed within libtailwind.so.1 (docs/api.md)"
test $((rc & 12)) -ne 4 || echo "# a change: if it keeps the ABI rule (a function added, a field at a struct's end), record it: docs/api.md, \"The ABI rule\""
objdump -p "$LIB" | grep -q 'SONAME *libtailwind\.so\.1$'
ok $? "soname libtailwind.so.1"
bad=$(nm -D --defined-only --with-symbol-versions "$LIB" | awk '$2 ~ /^[TDBRV]$/ {print $3}' |
	grep -v '^tw_[a-z0-9][a-z0-9_]*@@*TAILWIND_1\.[0-9]*$' | grep -v '^TAILWIND_1\.[0-9]*@@*TAILWIND_1' || true)
test -z "$bad"
ok $? "every exported symbol is tw_* at TAILWIND_1.x${bad:+ (not: $(echo $bad))}"
echo "1..$n"
exit $failed
