#!/usr/bin/env python3
"""tests/ctx_calls.py - the context reaches its logs only through the ops table.

primary/ holds two layers: the context (ctx.c, ctx_revive.c, arena.c: channels, the progress
thread, reconnection, the log arena) and the logs (every other file: open and lifecycle, the
append engine, sealing, acknowledgements, control). A log calls its context; the context calls
its logs only through the `struct tw__log_ops` each log registers (tw__ctx_attach), as raft
calls its `raft_io`. This check reads libtw_primary.a with nm and fails when a context file
leaves undefined a symbol that a log file defines (docs/primary.md, "One direction of calls").

Usage (meson passes these; see tests/meson.build): ctx_calls.py --nm NM LIB
Prints TAP.
"""
import argparse
import re
import subprocess
import sys

CONTEXT = {'ctx.c', 'ctx_revive.c', 'arena.c'}
DEFINED = set('TDBRCVWGSiu')


def members(nm, lib):
    """{member: (defined, undefined)} from `nm LIB`."""
    out = subprocess.run([nm, lib], check=True, capture_output=True, text=True).stdout
    res, cur = {}, None
    for line in out.split('\n'):
        m = re.match(r'^(\S+\.o):$', line)
        if m:
            cur = re.sub(r'^primary_', '', m.group(1).split('/')[-1])[:-2]
            res[cur] = (set(), set())
            continue
        f = line.split()
        if cur is None or len(f) < 2:
            continue
        if len(f) == 2 and f[0] == 'U':
            res[cur][1].add(f[1])
        elif len(f) == 3 and f[1] in DEFINED:
            res[cur][0].add(f[2])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--nm', default='nm')
    ap.add_argument('lib')
    a = ap.parse_args()
    ms = members(a.nm, a.lib)
    ctx = sorted(m for m in ms if m in CONTEXT)
    logs = {m: d for m, (d, _) in ms.items() if m not in CONTEXT}
    print('1..%d' % (len(ctx) + 1))
    ok = True
    print('%s 1 - the context files are in the library (%s)'
          % ('ok' if len(ctx) == len(CONTEXT) else 'not ok', ', '.join(ctx)))
    ok = ok and len(ctx) == len(CONTEXT)
    for i, m in enumerate(ctx, 2):
        bad = sorted('%s (%s)' % (s, f) for s in ms[m][1] for f, d in logs.items() if s in d)
        print('%s %d - %s calls no log file%s' % ('not ok' if bad else 'ok', i, m,
                                                 ': ' + ', '.join(bad) if bad else ''))
        ok = ok and not bad
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
