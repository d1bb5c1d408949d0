#!/bin/sh
# tests/integration/cmake_check.sh MESON BUILD_ROOT PREFIX VERSION — the CMake package config
# as a CMake project uses it: `meson install --destdir` into a fresh directory, then cmake
# configures tests/integration/cmake_consumer with CMAKE_PREFIX_PATH at that tree only
# (find_package(Tailwind 1.0 REQUIRED), target Tailwind::tailwind), builds it, and runs it
# against the installed library; find_package(Tailwind 2.0) must fail (SameMajorVersion).
# TAP on stdout.
set -u
MESON=$1 BUILD=$2 PREFIX=$3 VERSION=$4
SRC=$(cd "$(dirname "$0")" && pwd)/cmake_consumer
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
say() { [ -n "$1" ] && echo "$1" | sed 's/^/# /'; }

command -v cmake >/dev/null 2>&1 || { echo "1..0 # SKIP cmake is not installed (.ci/install-deps installs it)"; exit 0; }
D=$(mktemp -d /tmp/tw-cmake-XXXXXX) || { echo "1..0 # SKIP mktemp failed"; exit 0; }
trap 'rm -rf "$D"' EXIT
out=$("$MESON" install -C "$BUILD" --no-rebuild --destdir "$D/root" --quiet 2>&1)
ok $? "meson install --destdir into a fresh directory"
say "$out"
R=$D/root$PREFIX
CFG=$(find "$R" -name TailwindConfig.cmake | head -n 1)
test -n "$CFG" && test -s "$(dirname "$CFG")/TailwindConfigVersion.cmake"
ok $? "installed ${CFG#"$R"/} and TailwindConfigVersion.cmake"
LIBDIR=$(dirname "$(find "$R" -name 'libtailwind.so.1' | head -n 1)")
echo "$CFG" | grep -q "^$LIBDIR/cmake/Tailwind/"
ok $? "... in <libdir>/cmake/Tailwind"

# A library built with a sanitizer (CI's ASan and TSan builds) needs programs built with it.
SAN=""
ldd "$LIBDIR/libtailwind.so.1" 2>/dev/null | grep -q libasan && SAN="-fsanitize=address,undefined"
ldd "$LIBDIR/libtailwind.so.1" 2>/dev/null | grep -q libtsan && SAN="-fsanitize=thread"
# CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY etc. off and no system prefix: only this tree is seen.
out=$(cmake -S "$SRC" -B "$D/b" -DCMAKE_PREFIX_PATH="$R" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
	-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF \
	-DCMAKE_C_FLAGS="-Wall -Wextra -Werror $SAN" 2>&1)
ok $? "cmake configures the consumer: find_package(Tailwind 1.0 REQUIRED)"
say "$out"
grep -q "^Tailwind_DIR:PATH=$(dirname "$CFG")\$" "$D/b/CMakeCache.txt"
ok $? "... found the installed config ($(sed -n 's/^Tailwind_DIR:PATH=//p' "$D/b/CMakeCache.txt"))"
out=$(cmake --build "$D/b" -- VERBOSE=1 2>&1)
ok $? "cmake --build links the consumer with Tailwind::tailwind"
echo "$out" | grep -q -- "-I$R/include\|-isystem $R/include" && echo "$out" | grep -q "$LIBDIR/libtailwind.so"
ok $? "... with the installed include directory and library"
say "$(echo "$out" | grep -- 'libtailwind' | tail -n 1)"
# meson test puts the build directory on LD_LIBRARY_PATH: without it the program finds the
# installed library through the run path CMake gave it.
env -u LD_LIBRARY_PATH ldd "$D/b/consumer" 2>&1 | grep -q "libtailwind.so.1 => $LIBDIR/libtailwind.so.1"
ok $? "the consumer's libtailwind.so.1 resolves to the installed one (CMake's run path)"
out=$(env -u LD_LIBRARY_PATH "$D/b/consumer" "$VERSION" 2>&1)
ok $? "the consumer runs against the installed libtailwind (tw_version $VERSION)"
say "$out"
readelf -d "$D/b/consumer" 2>/dev/null | grep -q 'NEEDED.*\[libtailwind.so.1\]'
ok $? "the consumer needs libtailwind.so.1 (the soname)"

# The version file: 1.x satisfies 1.0 (above), 2.0 is refused.
mkdir -p "$D/v2"
sed 's/find_package(Tailwind 1.0 REQUIRED)/find_package(Tailwind 2.0 REQUIRED)/' \
	"$SRC/CMakeLists.txt" >"$D/v2/CMakeLists.txt"
cp "$SRC/main.c" "$D/v2/"
out=$(cmake -S "$D/v2" -B "$D/v2/b" -DCMAKE_PREFIX_PATH="$R" \
	-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF 2>&1)
rc=$?
test $rc != 0 && echo "$out" | grep -q "$VERSION"
ok $? "find_package(Tailwind 2.0) is refused (the version file: same major version only)"
echo "1..$n"
exit $failed
