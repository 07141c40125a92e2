"""Independent reference: awk-style field parsing rather than a regex."""
import gzip, os, sys

def lines():
    for name in sorted(os.listdir("/app/logs")):
        path = os.path.join("/app/logs", name)
        data = gzip.open(path, "rt").read() if name.endswith(".gz") else open(path).read()
        yield from data.splitlines()

counts = {}
for line in lines():
    parts = line.split(" ", 3)
    if len(parts) < 4 or not parts[2].endswith(":") or parts[1] not in ("[ERROR]", "[WARN]", "[INFO]", "[DEBUG]"):
        continue
    svc = parts[2][:-1]
    row = counts.setdefault(svc, {"[ERROR]": 0, "[WARN]": 0, "[INFO]": 0, "[DEBUG]": 0})
    row[parts[1]] += 1
expected = "service,error,warn,info\n" + "".join(
    "%s,%d,%d,%d\n" % (s, c["[ERROR]"], c["[WARN]"], c["[INFO]"]) for s, c in sorted(counts.items()))
try:
    got = open("/app/report.csv").read()
except OSError as e:
    sys.exit("no report: %s" % e)
if got != expected:
    sys.exit("report differs.\nexpected:\n%s\ngot:\n%s" % (expected, got))
print("report matches")
