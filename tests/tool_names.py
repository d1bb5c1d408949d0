#!/usr/bin/env python3
"""tests/tool_names.py - the operators' tools live on the public API.

twd and twctl are built on the functions of include/tailwind/*.h (tw_*) alone, as an operator's
own tool would be: this check runs `nm -u` on each of their object files and fails on any
reference to an internal function (tw__*) or to the generated protobuf-c code (tailwind__*).

Not checked, on purpose: twbench. Its raw mode (`--mode raw`) measures the fabric layer without
the primary above it (docs/twbench.md), which only the internal tw__fab_* calls reach; the
other modes use the public API.

Any reference fails the test, named by object file. (Static inline helpers of internal
headers, core/util.h's byte-order functions for one, leave no symbol and are not seen.)

Usage (meson passes these; see tests/meson.build):
  tool_names.py --nm NM OBJDIR...   (each tool's object directory, e.g. build/tools/twctl.p)
"""
import argparse
import glob
import os
import sys

INTERNAL = ('tw__', 'tailwind__')


def main():
    import subprocess
    ap = argparse.ArgumentParser()
    ap.add_argument('--nm', default='nm')
    ap.add_argument('objdirs', nargs='+')
    a = ap.parse_args()
    bad, objs = [], 0
    for d in a.objdirs:
        for o in sorted(glob.glob(os.path.join(d, '*.o'))):
            objs += 1
            out = subprocess.run([a.nm, '-u', o], check=True, capture_output=True,
                                 text=True).stdout
            for line in out.split('\n'):
                sym = line.split()[-1] if line.split() else ''
                if not sym.startswith(INTERNAL):
                    continue
                name = os.path.join(os.path.basename(d), os.path.basename(o))
                bad.append('%s: %s' % (name, sym))
    if objs == 0:
        print('no object files under %s: is the check reading the right directories?'
              % ' '.join(a.objdirs))
        return 1
    for b in bad:
        print('internal reference: %s (use or add a tw_* function in include/tailwind)' % b)
    print('%d object files, %d internal references' % (objs, len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
