#!/usr/bin/env python3
"""tests/pkg/spack_check.py [REPO] - check Tailwind's Spack recipe without Spack.

Spack is not packaged for Debian 12 and this machine cannot fetch it, so this stands in for
`spack info` / `spack spec`: a small stub of the `spack.package` API that Spack's recipes import
(MesonPackage, Package, the directives version/variant/depends_on/license, join_path, ...)
records what the recipe declares; then the recipe is imported from REPO (default: dist/spack of
this tree) and checked:
  - the variants zookeeper (default on) and kv (default off) exist;
  - it depends on libfabric@1.17:, protobuf-c@1.4:, libsodium@1.0.18:, and on zookeeper-c only
    when +zookeeper; meson, ninja and pkgconfig are build dependencies;
  - meson_args maps each variant combination to options that meson_options.txt declares, with
    values the option's type accepts (coordinator/kv features, tests boolean, ...);
  - the zookeeper-c recipe imports, is external-only, and says so when asked to install.
TAP on stdout. What this cannot check: Spack's concretizer, the recipe against a real Spack's
API version, a real build (docs/packaging.md, "Spack").
"""
import importlib.util
import os
import re
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
REPO = sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, 'dist', 'spack')

n = 0
failed = False


def ok(cond, what):
    global n, failed
    n += 1
    print(('ok %d - %s' if cond else 'not ok %d - %s') % (n, what))
    if not cond:
        failed = True


class Recorder:
    def __init__(self):
        self.versions, self.variants, self.deps, self.licenses = {}, {}, [], []


REC = Recorder()


class InstallError(Exception):
    pass


class Spec:
    """Enough of spack.spec.Spec for satisfies('+v') / satisfies('~v')."""

    def __init__(self, variants):
        self.variants = variants

    def satisfies(self, s):
        m = re.fullmatch(r'([+~])([a-z_-]+)', s)
        if not m:
            raise ValueError('stub Spec.satisfies understands +v and ~v only, not ' + s)
        return self.variants[m.group(2)] == (m.group(1) == '+')

    def __contains__(self, s):
        return self.satisfies(s)


class PackageBase:
    run_tests = False

    def __init__(self, variants, prefix='/opt/tw'):
        self.spec = Spec(variants)
        self.prefix = prefix


class MesonPackage(PackageBase):
    build_system = 'meson'


class Package(PackageBase):
    build_system = 'generic'


def version(v, *args, **kwargs):
    REC.versions[v] = kwargs


def variant(name, default=None, description='', **kwargs):
    REC.variants[name] = {'default': default, 'description': description, **kwargs}


def depends_on(spec, when=None, type=('build', 'link')):
    REC.deps.append({'spec': spec, 'when': when,
                     'type': (type,) if isinstance(type, str) else tuple(type)})


def license(expr, **kwargs):
    REC.licenses.append(expr)


def join_path(*parts):
    return os.path.join(*parts)


def find_libraries(*args, **kwargs):
    return []


def load(path):
    global REC
    REC = Recorder()
    mod = types.ModuleType('spack.package')
    for k, v in dict(MesonPackage=MesonPackage, Package=Package, version=version,
                     variant=variant, depends_on=depends_on, license=license,
                     join_path=join_path, find_libraries=find_libraries,
                     InstallError=InstallError).items():
        setattr(mod, k, v)
    mod.__all__ = [k for k in vars(mod) if not k.startswith('_')]
    spack = types.ModuleType('spack')
    spack.package = mod
    sys.modules['spack'] = spack
    sys.modules['spack.package'] = mod
    spec = importlib.util.spec_from_file_location('recipe_' + os.path.basename(
        os.path.dirname(path)).replace('-', '_'), path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m, REC


def meson_options():
    """meson_options.txt: name -> (type, choices)."""
    opts = {}
    text = open(os.path.join(SRC, 'meson_options.txt')).read()
    for line in text.splitlines():
        m = re.match(r"option\('([a-z_]+)',\s*type:\s*'([a-z]+)'", line)
        if m:
            opts[m.group(1)] = m.group(2)
    return opts


def check_value(typ, value):
    if typ == 'feature':
        return value in ('enabled', 'disabled', 'auto')
    if typ == 'boolean':
        return value in ('true', 'false')
    return typ in ('string', 'combo', 'array', 'integer')


def dep(rec, name):
    return [d for d in rec.deps if re.match(re.escape(name) + r'($|[@+~ ])', d['spec'])]


def main():
    path = os.path.join(REPO, 'packages', 'tailwind', 'package.py')
    try:
        m, rec = load(path)
        cls = m.Tailwind
        ok(issubclass(cls, MesonPackage), 'the recipe imports; class Tailwind is a MesonPackage')
    except Exception as e:  # noqa: BLE001 - any import failure is the finding
        ok(False, 'the recipe imports (%s: %s)' % (type(e).__name__, e))
        print('1..%d' % n)
        return 1
    ok('1.0.0' in rec.versions, 'version 1.0.0 declared (%s)' % ', '.join(rec.versions))
    ok(rec.licenses == ['MIT'], 'license MIT (%s)' % rec.licenses)
    v = rec.variants
    ok(v.get('zookeeper', {}).get('default') is True, 'variant zookeeper, default on')
    ok(v.get('kv', {}).get('default') is False, 'variant kv, default off')
    ok(v.get('metrics', {}).get('default') is True, 'variant metrics, default on')
    for name, ver in (('libfabric', '@1.17:'), ('protobuf-c', '@1.4:'), ('libsodium', '@1.0.18:')):
        d = dep(rec, name)
        ok(len(d) == 1 and d[0]['spec'] == name + ver and d[0]['when'] is None
           and 'link' in d[0]['type'], 'depends on %s%s, always, linked' % (name, ver))
    d = dep(rec, 'zookeeper-c')
    ok(len(d) == 1 and d[0]['when'] == '+zookeeper', 'depends on zookeeper-c when +zookeeper only')
    d = dep(rec, 'libmicrohttpd')
    ok(len(d) == 1 and d[0]['when'] == '+metrics', 'depends on libmicrohttpd when +metrics only')
    for name in ('meson', 'ninja', 'pkgconfig', 'help2man'):
        d = dep(rec, name)
        ok(len(d) == 1 and d[0]['type'] == ('build',), '%s is a build dependency' % name)
    opts = meson_options()
    for zk in (True, False):
        for kv in (True, False):
            pkg = cls({'zookeeper': zk, 'kv': kv, 'metrics': zk})
            args = pkg.meson_args()
            bad = []
            got = {}
            for a in args:
                mm = re.fullmatch(r'-D([a-z_]+)=(.*)', a)
                if not mm or mm.group(1) not in opts or not check_value(opts[mm.group(1)], mm.group(2)):
                    bad.append(a)
                else:
                    got[mm.group(1)] = mm.group(2)
            want_c = 'enabled' if zk else 'disabled'
            want_k = 'enabled' if kv else 'disabled'
            ok(not bad and got.get('coordinator') == want_c and got.get('kv') == want_k
               and got.get('metrics') == ('enabled' if zk else 'disabled')
               and got.get('tests') == 'false',
               '%szookeeper %skv: meson_args %s%s' % ('+' if zk else '~', '+' if kv else '~',
                                                      ' '.join(args),
                                                      ' (not in meson_options.txt or bad value: '
                                                      + ' '.join(bad) + ')' if bad else ''))
    pkg = cls({'zookeeper': True, 'kv': False, 'metrics': True})
    pkg.run_tests = True
    ok('-Dtests=true' in pkg.meson_args(), 'spack install --test=root builds the tests')

    zpath = os.path.join(REPO, 'packages', 'zookeeper-c', 'package.py')
    try:
        zm, zrec = load(zpath)
        zc = zm.ZookeeperC
        ok(zrec.versions and not any(zrec.versions.values()),
           'zookeeper-c imports; versions %s without a checksum (external only)'
           % ', '.join(zrec.versions))
        try:
            zc({}).install(None, '/opt/zk')
            ok(False, 'zookeeper-c refuses to build')
        except InstallError as e:
            ok('libzookeeper-mt-dev' in str(e) and 'packages.yaml' in str(e),
               'zookeeper-c refuses to build, saying what to do: %s' % e)
    except Exception as e:  # noqa: BLE001
        ok(False, 'zookeeper-c imports (%s: %s)' % (type(e).__name__, e))
    print('1..%d' % n)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
