import re, sys
try:
    pattern = open("/app/version.re").read().rstrip("\n")
    rx = re.compile(pattern)
except (OSError, re.error) as e:
    sys.exit("no usable pattern: %s" % e)
cases = [
    ("release v1.2.3 is out", ["v1.2.3"]),
    ("v0.0.0 and v10.20.30", ["v0.0.0", "v10.20.30"]),
    ("candidate v2.10.0-rc.3, final v2.10.0!", ["v2.10.0-rc.3", "v2.10.0"]),
    ("(v3.1.4)", ["v3.1.4"]),
    ("v01.2.3 v1.02.3 v1.2.03 v1.2.3-rc.01", []),
    ("xv1.2.3 v1.2.3x 1v1.2.3 v1.2.3.4 v1.2.3- -v1.2.3", []),
    ("v1.2 v1.2.3-rc v1.2.3-beta.1 V1.2.3", []),
    ("tags:v4.5.6;v7.8.9-rc.0", ["v4.5.6", "v7.8.9-rc.0"]),
    ("v9.9.9-rc.12\nv1.0.0", ["v9.9.9-rc.12", "v1.0.0"]),
]
bad = 0
for text, want in cases:
    got = rx.findall(text)
    if got != want:
        print("%r: want %r, got %r" % (text, want, got))
        bad += 1
sys.exit(1 if bad else 0)
