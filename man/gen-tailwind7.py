#!/usr/bin/env python3
# man/gen-tailwind7.py TEMPLATE VERSION OUTPUT DOCDIR HEADER... — fill tailwind(7)'s FUNCTIONS
# section with every TW_API function of the public headers, so the page never misses one, and
# @DOCDIR@ with where the documents are installed.
import os, re, sys

tmpl, version, out, docdir, headers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
parts = []
for h in sorted(headers):
    names = re.findall(r'^TW_API\b[^(;]*?\b(tw_\w+)\s*\(', open(h).read(), re.M)
    if not names:
        continue
    parts.append('.TP\n.I tailwind/%s\n%s' % (os.path.basename(h),
                 ',\n'.join('.BR %s ()' % n for n in names)))
text = open(tmpl).read().replace('@VERSION@', version).replace('@DOCDIR@', docdir)
text = text.replace('@FUNCTIONS@', '\n'.join(parts))
open(out, 'w').write(text)
