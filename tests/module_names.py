#!/usr/bin/env python3
"""tests/module_names.py - the internal-name convention of the library's global symbols.

Every global (non-static) symbol the library defines is either public API, declared in
include/tailwind/*.h (tw_*), or internal and then named tw__* (two underscores, libuv's uv__
convention): a reader, a debugger, a symbol map and `nm` tell internal from public at a glance,
and internal names cannot collide with an application's. This check reads the static library
(build/libtw_internal.a, every folder's objects) with `nm -g --defined-only` and lists the
global symbols that are neither declared in a public header nor named tw__*; generated code
(protobuf-c's *.pb-c.c, named by the .proto package) is left out.

Exit 0 ("ok") when there is no offender; otherwise the offenders are printed (grouped by object
file) and the exit code is 1 with --strict (as meson runs it), 77 (meson's SKIP) without.

Usage (meson passes these; see tests/meson.build):
  module_names.py --nm NM --include DIR LIB [--strict]
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys

DEFINED = set('TDBRCVWGSiu')  # nm types for a definition (upper: global, 'i'/'u': GNU ifunc/unique)
GENERATED = re.compile(r'\.pb-c\.c\.o$|pb-c\.c\.o')
IDENT = re.compile(r'\b[A-Za-z_][A-Za-z0-9_]*\b')


def public_names(include_dir):
    """Every identifier in the public headers (a symbol named there is public API)."""
    names = set()
    for h in sorted(glob.glob(os.path.join(include_dir, 'tailwind', '*.h'))):
        with open(h, encoding='utf-8') as f:
            text = f.read()
        text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
        text = re.sub(r'//[^\n]*', ' ', text)
        names.update(IDENT.findall(text))
    return names


def defined_globals(nm, lib):
    """[(object member, symbol)] of the global definitions in a static library."""
    out = subprocess.run([nm, '-g', '--defined-only', '-A', lib], check=True,
                         capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        # "lib.a:member.o: 0000000000000000 T name" (thin archives name members by path)
        head, _, rest = line.rpartition(': ')
        if not head:
            head, _, rest = line.rpartition(':')
        parts = rest.split()
        if len(parts) == 3 and parts[1] in DEFINED:
            member = head.split(':', 1)[1] if ':' in head else head
            syms.append((member, parts[2]))
    return syms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--nm', default='nm')
    ap.add_argument('--include', required=True)
    ap.add_argument('--strict', action='store_true')
    ap.add_argument('lib')
    a = ap.parse_args()

    public = public_names(a.include)
    offenders = collections.defaultdict(list)
    checked = 0
    for member, sym in defined_globals(a.nm, a.lib):
        # Generated code, and the compiler's own symbols (ASan's __odr_asan.NAME markers of
        # global variables; a name with two leading underscores is the implementation's).
        if GENERATED.search(member) or sym.startswith('__'):
            continue
        checked += 1
        if sym in public or sym.startswith('tw__'):
            continue
        offenders[os.path.basename(member).replace('.c.o', '.c')].append(sym)

    n = sum(len(v) for v in offenders.values())
    if not n:
        print('ok 1 - all %d global symbols of %s are public API or tw__*' %
              (checked, os.path.basename(a.lib)))
        return 0
    print('# %d of %d global symbols are neither declared in include/tailwind/*.h nor named tw__*:'
          % (n, checked))
    for obj in sorted(offenders):
        print('#   %-18s %s' % (obj, ' '.join(sorted(offenders[obj]))))
    print('# name them tw__* (docs/testing.md "Internal names"), or declare them in a public header')
    return 1 if a.strict else 77


if __name__ == '__main__':
    sys.exit(main())
