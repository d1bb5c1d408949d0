#!/usr/bin/env python3
"""tests/module_graph.py - check that the library's folders form the declared acyclic graph.

Each folder of the library (core/, fabric/, proto/, peer/, log/, coord/, recovery/, reader/, backup/, primary/, metrics/) is a static library
that declares in its meson.build the folders it uses (`<folder>_below`). This check, run as the
meson test `module_graph`, reads those libraries with nm and fails when

  - the declared graph has a cycle or names a folder that does not exist;
  - a folder's library leaves a symbol undefined that another folder's library defines, and that
    folder is not below it (declared, directly or through the folders it declares);
  - a folder leaves a tw* symbol undefined that no folder defines;
  - two folders define the same symbol;
  - a folder's sources #include "other/..." from a folder that is not below it (inline functions
    and macros leave no trace in nm).

Usage (meson passes these; see tests/meson.build):
  module_graph.py --nm NM --srcdir DIR --module NAME LIB USES [--module ...]
where USES is a comma-separated list of folder names (may be empty).
Prints TAP; the graph and the edges actually used are diagnostics (# lines).
"""
import argparse
import os
import re
import subprocess
import sys

DEFINED = set('TDBRCVWGSiu')  # nm types for a definition (upper: global, 'i'/'u': GNU ifunc/unique)


def read_symbols(nm, lib):
    """(defined, undefined) global symbols of a static library, members resolved inside it."""
    out = subprocess.run([nm, '-g', lib], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in DEFINED:
            defined.add(parts[2])
    return defined, undefined - defined


def closure(uses, name):
    """Every folder below `name`: what it declares, and what those declare."""
    seen, todo = set(), list(uses.get(name, []))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(uses.get(m, []))
    return seen


def find_cycle(uses):
    """A list of folders forming a cycle in the declared graph, or None."""
    state = {}

    def visit(m, path):
        state[m] = 'open'
        for d in uses.get(m, []):
            if state.get(d) == 'open':
                return path[path.index(d):] + [d] if d in path else [m, d]
            if d not in state:
                c = visit(d, path + [d])
                if c:
                    return c
        state[m] = 'done'
        return None

    for m in uses:
        if m not in state:
            c = visit(m, [m])
            if c:
                return c
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--nm', default=os.environ.get('NM', 'nm'))
    ap.add_argument('--srcdir', required=True)
    ap.add_argument('--module', nargs=3, action='append', required=True,
                    metavar=('NAME', 'LIB', 'USES'))
    args = ap.parse_args()

    libs, uses = {}, {}
    for name, lib, used in args.module:
        libs[name] = lib
        uses[name] = [u for u in used.split(',') if u]

    results = []  # (ok, description, [diagnostic lines])

    unknown = sorted({u for m in uses for u in uses[m] if u not in uses})
    cycle = find_cycle({m: [u for u in uses[m] if u in uses] for m in uses})
    diag = []
    if unknown:
        diag.append('declared but no such folder library: ' + ', '.join(unknown))
    if cycle:
        diag.append('cycle: ' + ' -> '.join(cycle))
    results.append((not unknown and not cycle, 'declared module graph is acyclic', diag))

    syms = {m: read_symbols(args.nm, libs[m]) for m in libs}
    owner = {}
    dup = []
    for m in sorted(syms):
        for s in syms[m][0]:
            if s in owner:
                dup.append('%s defined by both %s and %s' % (s, owner[s], m))
            else:
                owner[s] = m
    results.append((not dup, 'no symbol is defined by two folders', sorted(dup)))

    used_edges = {}
    for m in sorted(libs):
        below = closure(uses, m)
        bad = []
        for s in sorted(syms[m][1]):
            o = owner.get(s)
            if o is None:
                if s.lower().startswith('tw'):
                    bad.append('%s: %s is not defined by any folder library' % (m, s))
                continue
            used_edges.setdefault((m, o), []).append(s)
            if o not in below:
                bad.append('%s calls %s, defined in %s/, which is not below %s/ (%s uses: %s)' %
                           (m, s, o, m, m, ', '.join(sorted(below)) or 'nothing'))
        results.append((not bad, '%s/: every symbol it uses from another folder is defined below it'
                        % m, bad))

    inc_re = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/[^"]+"', re.M)
    for m in sorted(libs):
        below = closure(uses, m)
        bad = []
        folder = os.path.join(args.srcdir, m)
        if not os.path.isdir(folder):
            results.append((False, '%s/: includes only headers of folders below it' % m,
                            ['no source folder %s (--srcdir %s)' % (folder, args.srcdir)]))
            continue
        for fn in sorted(os.listdir(folder)):
            if not fn.endswith(('.c', '.h')):
                continue
            with open(os.path.join(folder, fn), encoding='utf-8', errors='replace') as f:
                text = f.read()
            for inc in inc_re.findall(text):
                if inc in libs and inc != m and inc not in below:
                    bad.append('%s/%s includes "%s/...", and %s/ is not below %s/' %
                               (m, fn, inc, inc, m))
        results.append((not bad, '%s/: includes only headers of folders below it' % m, bad))

    print('1..%d' % len(results))
    print('# declared module graph (folder -> folders it uses):')
    for m in libs:
        print('#   %-9s -> %s' % (m, ', '.join(uses[m]) or '(nothing)'))
    print('# used (from nm: folder -> folder, number of symbols):')
    for (a, b), ss in sorted(used_edges.items()):
        print('#   %-9s -> %-9s %3d  e.g. %s' % (a, b, len(ss), ', '.join(ss[:3])))
    failed = 0
    for i, (ok, desc, diags) in enumerate(results, 1):
        print('%s %d - %s' % ('ok' if ok else 'not ok', i, desc))
        for d in diags:
            print('#   ' + d)
        failed += not ok
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
