#!/usr/bin/env python3
"""tests/function_lengths.py - no function of the library or the tools longer than --max lines,
and no file of a directory named by --max-file DIR:N longer than N lines.

A function's length is counted from the line its name is on to its closing brace (the house
style: the return type and name start a line at column 0, the body's braces stand alone at
column 0). Lists the --top longest (docs/testing.md, "Function length", shows them) and fails
on any over --max that is not allowed by name (--allow FILE:FUNCTION, each with the reason in
tests/meson.build).

Usage: function_lengths.py --srcdir DIR [--max 120] [--top 10] [--allow FILE:FUNC ...]
                           [--max-file DIR:LINES ...]
"""
import argparse
import glob
import os
import re
import sys

DIRS = ['core', 'fabric', 'proto', 'peer', 'log', 'coord', 'recovery', 'reader', 'backup',
        'primary', 'tools', 'metrics']
NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*\(')


def lengths(srcdir):
    out = []
    for d in DIRS:
        for path in sorted(glob.glob(os.path.join(srcdir, d, '*.c'))):
            rel = os.path.relpath(path, srcdir)
            lines = open(path, encoding='utf-8').read().split('\n')
            i = 0
            while i < len(lines):
                if lines[i] == '{' and i > 0:
                    j = i - 1
                    while j > 0 and not re.match(r'^[A-Za-z_]', lines[j]):
                        j -= 1
                    m = NAME.search(lines[j])
                    k = i + 1
                    while k < len(lines) and lines[k] != '}':
                        k += 1
                    if m:
                        out.append((k - j + 1, rel, m.group(1)))
                    i = k
                i += 1
    return sorted(out, reverse=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--srcdir', required=True)
    ap.add_argument('--max', type=int, default=120)
    ap.add_argument('--top', type=int, default=10)
    ap.add_argument('--allow', action='append', default=[])
    ap.add_argument('--max-file', action='append', default=[])
    a = ap.parse_args()
    res = lengths(a.srcdir)
    print('| lines | function | file |')
    print('|---:|---|---|')
    for n, f, name in res[:a.top]:
        print('| %d | `%s` | %s |' % (n, name, f))
    bad = [(n, f, name) for n, f, name in res
           if n > a.max and '%s:%s' % (f, name) not in a.allow]
    for n, f, name in bad:
        print('too long: %s:%s, %d lines (at most %d: cut it where a reader would)'
              % (f, name, n, a.max))
    for spec in a.max_file:
        d, n = spec.rsplit(':', 1)
        for path in sorted(glob.glob(os.path.join(a.srcdir, d, '*.[ch]'))):
            lines = open(path, encoding='utf-8').read().count('\n')
            if lines > int(n):
                bad.append((lines, os.path.relpath(path, a.srcdir), None))
                print('too long: %s, %d lines (at most %s in %s/: cut it by concern)'
                      % (os.path.relpath(path, a.srcdir), lines, n, d))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
