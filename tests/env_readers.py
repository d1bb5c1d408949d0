#!/usr/bin/env python3
"""tests/env_readers.py - the library reads its environment in one place and never writes it.

Every environment variable the library reads is a row of core/env.c's table (docs/api.md,
"Environment"), read through tw__env_get(), the library's only getenv() call. This check reads
the static library (build/libtw_internal.a) with `nm -u -A` and fails on:
  - an object other than core/env.c's that calls getenv or secure_getenv (a variable read
    outside the table);
  - any object that calls setenv, putenv, unsetenv or clearenv (writing the environment races
    the embedding program's threads: the library never does).

Usage (meson passes these; see tests/meson.build):
  env_readers.py --nm NM LIB
"""
import argparse
import subprocess
import sys

READERS = {'getenv', 'secure_getenv'}
WRITERS = {'setenv', 'putenv', 'unsetenv', 'clearenv'}
ONE_PLACE = 'core_env.c.o'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--nm', default='nm')
    ap.add_argument('lib')
    a = ap.parse_args()
    out = subprocess.run([a.nm, '-u', '-A', a.lib], check=True, capture_output=True,
                         text=True).stdout
    bad, readers = [], 0
    for line in out.splitlines():
        head, _, sym = line.rpartition(' ')
        sym = sym.split('@')[0]
        member = head.rstrip(': U').rsplit(':', 1)[-1].strip()
        if sym in READERS:
            if member.endswith(ONE_PLACE):
                readers += 1
            else:
                bad.append('%s reads the environment (%s): add a row to core/env.c and call '
                           'tw__env_get()' % (member, sym))
        elif sym in WRITERS:
            bad.append('%s writes the environment (%s): the library never does '
                       '(docs/api.md, "Environment")' % (member, sym))
    if readers == 0:
        bad.append('no object named %s calls getenv: is the check reading the right '
                   'library?' % ONE_PLACE)
    for b in bad:
        print(b)
    print('ok' if not bad else '%d offender(s)' % len(bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
