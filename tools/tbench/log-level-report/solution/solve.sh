#!/bin/bash
cd /app
python3 - <<'PY'
import gzip, glob, re, collections
pat = re.compile(r'^\S+ \[(ERROR|WARN|INFO|DEBUG)\] ([a-z]+): ')
counts = collections.defaultdict(collections.Counter)
for path in sorted(glob.glob("logs/*")):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            m = pat.match(line)
            if m:
                counts[m.group(2)][m.group(1)] += 1
with open("report.csv", "w") as out:
    out.write("service,error,warn,info\n")
    for svc in sorted(counts):
        c = counts[svc]
        out.write("%s,%d,%d,%d\n" % (svc, c["ERROR"], c["WARN"], c["INFO"]))
PY
