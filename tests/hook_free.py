#!/usr/bin/env python3
"""tests/hook_free.py - no test hook in the library (issue 35, docs/testing.md "Seams, not hooks").

Tests inject faults and move time through seams the code takes at its open (the storage table,
backup/storage.h; the clock, core/clock.h; a fabric's ops table and registration rules,
tests/lib/tfab.h and fab_rules.h; a TCP proxy in front of ZooKeeper), never through a global or
a branch of the library that only a test sets. This check fails on:
  - a global symbol of the library whose name says it is a hook (_test_, fail_next, set_op_cb,
    expire_session, client_quiet, rpc_decodes) (nm on build/libtw_internal.a);
  - a writable global of the library (an object in .data or .bss with global binding: what a
    test would set), other than the ones ALLOWED below with the reason;
  - in the library's sources: TW_FAB_FAULT, a "force" value of TW_FAB_SHM_FAST, or getenv
    outside core/env.c (tests/env_readers.py checks the calls; this the text).

Usage (meson passes these; see tests/meson.build):
  hook_free.py --nm NM --objdump OBJDUMP --srcdir SRC LIB
"""
import argparse
import os
import re
import subprocess
import sys

HOOK_NAMES = re.compile(r'_test_|fail_next|set_op_cb|expire_session|client_quiet|rpc_decodes')
# Writable globals that are no hook, each with the reason.
ALLOWED = {
    'tw__crc_impl_cached': 'the CRC-32C implementation picked at first use (log/log_int.h)',
}
# What a sanitizer's instrumentation adds, not the library: ASan's ODR indicators
# (__odr_asan.NAME, a writable byte per global) and the runtimes' own symbols.
SANITIZER_PREFIXES = ('__odr_asan', '__asan', '___asan', '__tsan', '__ubsan', '__sancov')
LIB_DIRS = ['core', 'fabric', 'log', 'proto', 'peer', 'coord', 'backup', 'reader', 'recovery',
            'primary', 'metrics']
SOURCE_RULES = [
    (re.compile(r'TW_FAB_FAULT'), None, 'the registration faults are the tests\' tables now '
     '(tests/lib/fab_rules.h)'),
    (re.compile(r'SHM_FAST.*force|"force"'), None, 'TW_FAB_SHM_FAST has no "force"'),
    (re.compile(r'\bgetenv\s*\('), 'core/env.c', 'read it through core/env.c\'s table'),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--nm', default='nm')
    ap.add_argument('--objdump', default='objdump')
    ap.add_argument('--srcdir', required=True)
    ap.add_argument('lib')
    a = ap.parse_args()
    bad = []
    out = subprocess.run([a.nm, '-A', '--defined-only', a.lib], check=True,
                         capture_output=True, text=True).stdout
    nsyms = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[-2].isupper():
            continue
        nsyms += 1
        if HOOK_NAMES.search(parts[-1]):
            bad.append('%s defines %s: a test hook\'s name' % (parts[0], parts[-1]))
    if nsyms == 0:
        bad.append('nm found no global symbol in %s: is the check reading the right '
                   'library?' % a.lib)
    out = subprocess.run([a.objdump, '-t', a.lib], check=True, capture_output=True,
                         text=True).stdout
    member = ''
    for line in out.splitlines():
        if line.endswith(':') and '.o' in line:
            member = line.split()[0].rstrip(':')
            continue
        f = line.split()
        # VALUE FLAGS... SECTION SIZE [.hidden] NAME; global objects have flag "g" and "O".
        if len(f) < 5 or f[1] != 'g' or 'O' not in f[2:4]:
            continue
        section = next((x for x in f if x.startswith('.')), '')
        name = f[-1]
        if not (section.startswith('.data') or section.startswith('.bss')) or \
                section.startswith('.data.rel.ro') or name.startswith('tailwind__') or \
                name.startswith(SANITIZER_PREFIXES):
            continue
        if name not in ALLOWED:
            bad.append('%s: %s is a writable global (%s): a test could set it; give the '
                       'component a seam at its open instead' % (member, name, section))
    for d in LIB_DIRS:
        for root, _, files in os.walk(os.path.join(a.srcdir, d)):
            for fn in sorted(files):
                if not fn.endswith(('.c', '.h')):
                    continue
                path = os.path.join(root, fn)
                rel = os.path.relpath(path, a.srcdir)
                with open(path, encoding='utf-8') as fh:
                    for no, text in enumerate(fh, 1):
                        if text.lstrip().startswith(('*', '/*', '//')):
                            continue  # a comment may name what the code must not do
                        for rx, only_in, why in SOURCE_RULES:
                            if rx.search(text) and rel != only_in:
                                bad.append('%s:%d: %s' % (rel, no, why))
    for b in bad:
        print(b)
    print('ok' if not bad else '%d offender(s)' % len(bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
