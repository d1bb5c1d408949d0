#!/bin/sh
# tests/integration/install_check.sh MESON BUILD_ROOT PREFIX [no-help2man] — `meson install --destdir` into a
# fresh directory installs the programs, the man pages, the documents, the systemd units and
# zoo.cfg; `man -l` renders each page (NAME section, the program's options; twctl(8) every
# command's options; TW_KEY_FILE in each ENVIRONMENT; meta.twlog in twd(8)'s FILES; standby.h in
# tailwind(7)); every document path a page names is installed; tailwind(7) names every exported
# function; `systemd-analyze verify` accepts both units (ExecStart pointed at the installed twd,
# man pages looked up in the installed tree) and `systemd-analyze security --offline` rates
# twd@.service at most 2.5 (it was 9.6 before the sandboxing); examples/kv builds with
# `pkg-config tailwind` against the installed headers and runs against the installed library;
# so does the README's example (its first C block).
# TAP on stdout.
set -u
MESON=$1 BUILD=$2 PREFIX=$3 H2M=${4:-help2man}
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

D=$(mktemp -d /tmp/tw-install-XXXXXX) || { echo "1..0 # SKIP mktemp failed"; exit 0; }
trap 'rm -rf "$D"' EXIT
"$MESON" install -C "$BUILD" --no-rebuild --destdir "$D" --quiet >"$D.log" 2>&1
ok $? "meson install --destdir into a fresh directory"
sed 's/^/# /' "$D.log"; rm -f "$D.log"
R=$D$PREFIX
if [ "$H2M" != help2man ]; then
	echo "1..0 # SKIP help2man was not found at setup (.ci/install-deps installs it): no program man pages"
	exit 0
fi
for f in bin/twd bin/twctl bin/twbench bin/twbench-engine lib/systemd/system/twd@.service \
	lib/systemd/system/tailwind-zookeeper.service etc/tailwind/zoo.cfg \
	share/doc/tailwind/LICENSE share/doc/tailwind/README.md share/doc/tailwind/docs/operations.md \
	share/man/man8/twd.8 share/man/man8/twctl.8 share/man/man1/twbench.1 share/man/man1/twbench-engine.1 share/man/man7/tailwind.7; do
	test -s "$R/$f"; ok $? "installed $PREFIX/$f"
done

if command -v man >/dev/null 2>&1; then
	for p in man8/twd.8:--buffer-size man8/twctl.8:--backup man1/twbench.1:--latency-count man1/twbench-engine.1:--progress-every \
		 man7/tailwind.7:tw_primary_open; do
		page=${p%%:*} want=${p#*:}
		out=$(MANWIDTH=100 man -l "$R/share/man/$page" 2>&1)
		echo "$out" | grep -q '^NAME' && echo "$out" | grep -q -- "$want"
		ok $? "man -l renders $page (NAME, '$want')"
	done
	out=$(MANWIDTH=100 man -l "$R/share/man/man8/twd.8" 2>&1)
	echo "$out" | grep -q 'TW_LOG_TIME' && echo "$out" | grep -q 'MemAvailable'
	ok $? "twd(8) documents TW_LOG_TIME and the exit codes"
	echo "$out" | grep -q 'DIR/meta.twlog'
	ok $? "twd(8) FILES names the metadata journal"
	out=$(MANWIDTH=200 man -l "$R/share/man/man8/twctl.8" 2>&1)
	echo "$out" | grep -q -- '--below N' && echo "$out" | grep -q -- '--no-fence' &&
		echo "$out" | grep -q -- '--create' && echo "$out" | grep -q 'Command standby:'
	ok $? "twctl(8) lists every command's options (free --below, recover --no-fence, ...)"
	missing=""
	for page in man8/twd.8 man8/twctl.8 man1/twbench.1 man7/tailwind.7; do
		MANWIDTH=200 man -l "$R/share/man/$page" 2>&1 | grep -q 'TW_KEY_FILE' || missing="$missing $page"
	done
	test -z "$missing"; ok $? "TW_KEY_FILE in every page${missing:+ (missing:$missing)}"
	MANWIDTH=100 man -l "$R/share/man/man7/tailwind.7" 2>&1 | grep -q 'tailwind/standby.h'
	ok $? "tailwind(7) lists tailwind/standby.h"
	# Every installed path a page names exists (the documents it points at).
	missing=""
	for p in $(cat "$R"/share/man/man*/*.[178] | grep -o "$PREFIX/share/doc/tailwind[A-Za-z0-9_./-]*" |
		   sed 's/[.,]$//' | sort -u); do
		test -e "$D$p" || missing="$missing $p"
	done
	test -z "$missing"; ok $? "every document the man pages name is installed${missing:+ (missing:$missing)}"
	missing=""
	for h in "$R"/include/tailwind/*.h; do
		for fn in $(sed -n 's/^TW_API[^(]*[ *]\(tw_[a-z0-9_]*\)(.*/\1/p' "$h"); do
			grep -q "^\.BR $fn ()" "$R/share/man/man7/tailwind.7" || missing="$missing $fn"
		done
	done
	test -z "$missing"; ok $? "tailwind(7) names every exported function${missing:+ (missing:$missing)}"
else
	echo "1..0 # SKIP man is not installed (man-db)"; exit 0
fi

# examples/kv as an embedder builds it: installed headers and library through pkg-config only
# (the tree's include/ is not on the path), then the programs run against the installed library.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PC=$(dirname "$(find "$R" -name tailwind.pc | head -n 1)")
if command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1; then
	mkdir -p "$D/kv"
	LIBDIR=$(PKG_CONFIG_PATH=$PC pkg-config --define-variable=prefix="$R" --variable=libdir tailwind)
	# A library built with a sanitizer (CI's ASan and TSan builds) needs programs built with it.
	SAN=""
	ldd "$LIBDIR/libtailwind.so" 2>/dev/null | grep -q libasan && SAN="-fsanitize=address,undefined"
	ldd "$LIBDIR/libtailwind.so" 2>/dev/null | grep -q libtsan && SAN="-fsanitize=thread"
	out=$(PKG_CONFIG_PATH=$PC PKG_CONFIG="pkg-config --define-variable=prefix=$R" \
		make -s -C "$SRC/examples/kv" O="$D/kv" CFLAGS="-O2 -Wall -Wextra -Werror $SAN" 2>&1)
	ok $? "examples/kv builds against the installed headers with pkg-config tailwind"
	[ -n "$out" ] && echo "$out" | sed 's/^/# /'
	LD_LIBRARY_PATH=$LIBDIR "$D/kv/twkv" --version 2>&1 | grep -q "^twkv (Tailwind "
	ok $? "the installed-built twkv runs against the installed libtailwind"
	LD_LIBRARY_PATH=$LIBDIR "$D/kv/twkv-ycsb" --help 2>&1 | grep -q -- "--rate"
	ok $? "the installed-built twkv-ycsb runs (--help)"
	# The README's example, as a reader copies it: its first C block, built the same way.
	mkdir -p "$D/readme"
	sed -n '/^```c$/,/^```$/p' "$SRC/README.md" | sed '1d;/^```$/,$d' >"$D/readme/example.c"
	out=$(cc -O2 -Wall -Wextra -Werror $SAN -o "$D/readme/example" "$D/readme/example.c" \
		$(PKG_CONFIG_PATH=$PC pkg-config --define-variable=prefix="$R" --cflags --libs tailwind) 2>&1)
	ok $? "the README's example ($(wc -l <"$D/readme/example.c") lines) builds against the installed headers"
	[ -n "$out" ] && echo "$out" | sed 's/^/# /'
	LD_LIBRARY_PATH=$LIBDIR "$D/readme/example" >/dev/null 2>&1
	test $? = 2
	ok $? "... and runs against the installed libtailwind (exit 2 without backups: its usage check)"
else
	skip "make or cc not installed: examples/kv not built against the installation"
fi

if command -v systemd-analyze >/dev/null 2>&1; then
	U=$D/unit; mkdir -p "$U"
	sed "s#^ExecStart=$PREFIX/bin/twd#ExecStart=$R/bin/twd#" "$R/lib/systemd/system/twd@.service" \
		>"$U/twd@b0.service"
	grep -q "^ExecStart=$R/bin/twd --dir /var/lib/tailwind/%i" "$U/twd@b0.service"
	ok $? "the unit runs the installed twd on /var/lib/tailwind/<instance>"
	for k in Type=notify LimitMEMLOCK=infinity KillSignal=SIGTERM Restart=always \
		 DynamicUser=yes; do
		grep -q "^$k\$" "$U/twd@b0.service"; ok $? "unit: $k"
	done
	out=$(cd "$U" && MANPATH=$R/share/man systemd-analyze verify "$U/twd@b0.service" 2>&1)
	ok $? "systemd-analyze verify accepts twd@b0.service"
	[ -n "$out" ] && echo "$out" | sed 's/^/# /'
	out=$(cd "$U" && systemd-analyze security --offline=true --threshold=25 \
		"$U/twd@b0.service" 2>&1)
	ok $? "systemd-analyze security: $(echo "$out" | grep -o 'exposure level.*' | head -1)"
	cp "$R/lib/systemd/system/tailwind-zookeeper.service" "$U/"
	out=$(cd "$U" && systemd-analyze verify "$U/tailwind-zookeeper.service" 2>&1)
	ok $? "systemd-analyze verify accepts tailwind-zookeeper.service"
	[ -n "$out" ] && echo "$out" | sed 's/^/# /'
else
	skip "systemd-analyze not installed (systemd is not installed for this test)"
fi
echo "1..$n"
exit $failed
