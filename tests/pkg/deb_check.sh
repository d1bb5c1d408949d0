#!/bin/bash
# tests/pkg/deb_check.sh [DEBDIR] — the Debian packages on a fresh Debian 12, by hand (not in
# CI: it downloads a Debian system with debootstrap and packages with apt, minutes and ~300 MB).
# Needs root, debootstrap and systemd-nspawn (Debian's systemd-container), and
# dpkg-buildpackage, debhelper and lintian when DEBDIR is not given. docs/packaging.md, "The
# install check", has its output.
#
#  1. Without DEBDIR: clone this checkout's HEAD into a fresh directory and build the packages
#     there with `dpkg-buildpackage -us -uc -b` (a clean checkout); then lintian on them.
#  2. debootstrap a minimal Debian 12 with systemd into a fresh directory.
#  3. In it (systemd-nspawn, no boot): apt installs the three .debs (their dependencies from the
#     mirror); `twd --version`; the README's library example (the first C block of the
#     installed /usr/share/doc/tailwind/README.md) builds with `pkg-config tailwind` against
#     libtailwind-dev and runs; tests/integration/cmake_consumer builds with
#     find_package(Tailwind 1.0) against /usr and runs.
#  4. Boot that tree with systemd as its PID 1 (systemd-nspawn -b): a oneshot unit runs
#     `systemctl start twd@0`, checks that the daemon is active and serves (twctl ls on the
#     address from its ready line, through the journal), stops it, records the results, and
#     powers the container off.
# Prints TAP; every step's output goes to the log directory it names at the end
# (TW_DEB_KEEP=1 also keeps the Debian tree). Env: TW_DEB_MIRROR (default deb.debian.org);
# TW_DEB_BASE=DIR copies a tree debootstrapped before (the same command as step 2) instead.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
MIRROR=${TW_DEB_MIRROR:-http://deb.debian.org/debian}
W=$(mktemp -d /var/tmp/tw-deb-check-XXXXXX) || exit 1
LOG=$W/log; mkdir -p "$LOG"
ROOT=$W/root
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
show() { sed 's/^/#   /' "$@"; }
finish() {
	echo "1..$n"
	echo "# logs: $LOG"
	[ "${TW_DEB_KEEP:-0}" = 1 ] && echo "# Debian tree kept: $ROOT" || rm -rf "$ROOT"
	exit $failed
}
bail() { echo "not ok $((n + 1)) - $1"; n=$((n + 1)); failed=1; finish; }

[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root (debootstrap, systemd-nspawn)"; exit 0; }
for p in debootstrap systemd-nspawn; do
	command -v $p >/dev/null || { echo "1..0 # SKIP $p is not installed (apt-get install debootstrap systemd-container)"; exit 0; }
done
# --register=no --keep-unit: no machined and no transient scope, so no system bus is needed on
# the host (here PID 1 is not systemd).
# Its notice "Attempted to remove disk file system under /run/systemd/nspawn/propagate/..." (on
# exit, harmless) is left out of the logs.
nspawn() {
	systemd-nspawn -q -D "$ROOT" --register=no --keep-unit --pipe "$@" 2>&1 |
		grep -v '^Attempted to remove disk file system under'
	return "${PIPESTATUS[0]}"
}

# 1. The packages.
if [ $# -ge 1 ]; then
	DEBS=$(cd "$1" && pwd)
else
	DEBS=$W/build
	git clone -q "$SRC" "$DEBS/tailwind" && git -C "$DEBS/tailwind" checkout -q "$(git -C "$SRC" rev-parse HEAD)"
	ok $? "clean checkout of $(git -C "$SRC" rev-parse --short HEAD)"
	(cd "$DEBS/tailwind" && dpkg-buildpackage -us -uc -b) >"$LOG/build.log" 2>&1
	ok $? "dpkg-buildpackage -us -uc -b from the clean checkout ($LOG/build.log)"
	grep -E '^(Ok|Fail|Skipped|Timeout): ' "$LOG/build.log" | show
	lintian --pedantic -I --show-overrides "$DEBS"/tailwind_*.changes >"$LOG/lintian.log" 2>&1
	echo "# lintian --pedantic -I:"; grep -v 'running with root' "$LOG/lintian.log" | show
	! grep -q '^E: ' "$LOG/lintian.log"
	ok $? "lintian: no errors ($(grep -c '^W: ' "$LOG/lintian.log") warnings, explained in docs/packaging.md)"
fi
ls "$DEBS"/libtailwind1_*.deb "$DEBS"/libtailwind-dev_*.deb "$DEBS"/tailwind-tools_*.deb \
	>/dev/null 2>&1 || bail "the three .debs in $DEBS"

# 2. A fresh Debian 12.
if [ -n "${TW_DEB_BASE:-}" ]; then
	cp -a "$TW_DEB_BASE" "$ROOT"
	ok $? "a copy of the debootstrapped tree $TW_DEB_BASE (TW_DEB_BASE) in $ROOT"
else
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$ROOT" "$MIRROR" \
		>"$LOG/debootstrap.log" 2>&1
	ok $? "debootstrap bookworm (minbase, systemd) into $ROOT"
fi
[ -x "$ROOT/bin/systemctl" ] || bail "no systemd in the Debian tree"

# 3. Install and use.
# /srv/tw-check: the container's /tmp is a fresh tmpfs in each systemd-nspawn run.
C=/srv/tw-check
mkdir -p "$ROOT$C/debs" "$ROOT$C/cmake_consumer"
cp "$DEBS"/libtailwind1_*.deb "$DEBS"/libtailwind-dev_*.deb "$DEBS"/tailwind-tools_*.deb "$ROOT$C/debs/"
cp "$SRC"/tests/integration/cmake_consumer/* "$ROOT$C/cmake_consumer/"
nspawn sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	--no-install-recommends '$C'/debs/*.deb gcc libc6-dev pkg-config cmake make' \
	>"$LOG/install.log" 2>&1
ok $? "apt-get install the three packages (and gcc, pkg-config, cmake) ($LOG/install.log)"
nspawn dpkg-query -W -f '${Package} ${Version} ${Status}\n' libtailwind1 libtailwind-dev tailwind-tools \
	>"$LOG/dpkg.log" 2>&1
test "$(grep -c ' install ok installed$' "$LOG/dpkg.log")" = 3
ok $? "dpkg: the three packages installed"; show "$LOG/dpkg.log"
nspawn twd --version >"$LOG/version.log" 2>&1
ok $? "twd --version"; show "$LOG/version.log"
nspawn sh -ec 'cd '$C'
	sed -n "/^\`\`\`c\$/,/^\`\`\`\$/p" /usr/share/doc/tailwind/README.md | sed "1d;/^\`\`\`\$/,\$d" >example.c
	echo "$(wc -l <example.c) lines from /usr/share/doc/tailwind/README.md"
	echo "cc example.c -o example $(pkg-config --cflags --libs tailwind)"
	cc -Wall -Wextra -Werror example.c -o example $(pkg-config --cflags --libs tailwind)
	ldd ./example | grep libtailwind
	set +e; ./example; echo "exit $? (2: its usage check, no backups given)"' >"$LOG/readme.log" 2>&1
grep -q '^exit 2 ' "$LOG/readme.log"
ok $? "the README's example builds with pkg-config tailwind against libtailwind-dev and runs"
show "$LOG/readme.log"
nspawn sh -ec 'cd '$C' && cmake -S cmake_consumer -B cmake_build >/dev/null &&
	cmake --build cmake_build >/dev/null && grep Tailwind_DIR: cmake_build/CMakeCache.txt &&
	cmake_build/consumer 1.0.0' >"$LOG/cmake.log" 2>&1
ok $? "tests/integration/cmake_consumer: find_package(Tailwind 1.0) against /usr, builds, runs"
show "$LOG/cmake.log"

# 4. systemd as PID 1 in the container; the check runs as a unit at boot.
cat >"$ROOT/usr/local/sbin/tw-unit-check" <<'EOS'
#!/bin/sh
# Run at boot by tw-unit-check.service (tests/pkg/deb_check.sh): start twd@0 and report.
exec >/var/log/tw-unit-check.log 2>&1
r=0
echo "== systemctl start twd@0"
systemctl start twd@0; echo "rc $?"
systemctl is-active twd@0 || r=1
systemctl --no-pager status twd@0 | head -n 12
addr=$(journalctl -u twd@0 -o cat --no-pager | sed -n 's/^ready \([^ ]*\).*/\1/p' | tail -n 1)
echo "== ready line: $addr"
[ -n "$addr" ] || r=1
echo "== twctl -b $addr ls"
twctl -b "$addr" ls || r=1
echo "== systemctl stop twd@0"
systemctl stop twd@0; echo "rc $?"
systemctl is-active twd@0
journalctl -u twd@0 -o short-monotonic --no-pager | tail -n 20
echo "result $r"
sync
systemctl poweroff
EOS
chmod 755 "$ROOT/usr/local/sbin/tw-unit-check"
cat >"$ROOT/etc/systemd/system/tw-unit-check.service" <<'EOS'
[Unit]
Description=Tailwind package check: systemctl start twd@0
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/tw-unit-check
[Install]
WantedBy=multi-user.target
EOS
ln -sf /etc/systemd/system/tw-unit-check.service \
	"$ROOT/etc/systemd/system/multi-user.target.wants/tw-unit-check.service"
rm -f "$ROOT/var/log/tw-unit-check.log"
timeout 180 systemd-nspawn -q -D "$ROOT" --register=no --keep-unit -b --console=pipe >"$LOG/boot.log" 2>&1 </dev/null
echo "# systemd-nspawn -b: exit $?"
if [ -s "$ROOT/var/log/tw-unit-check.log" ]; then
	cp "$ROOT/var/log/tw-unit-check.log" "$LOG/unit.log"
	grep -q '^result 0$' "$LOG/unit.log"
	ok $? "systemctl start twd@0 under systemd in the container: active, serves twctl ls, stops"
	show "$LOG/unit.log"
else
	ok 1 "systemctl start twd@0 under systemd in the container (the check did not run: boot log below)"
	tail -n 30 "$LOG/boot.log" | show
fi
finish
