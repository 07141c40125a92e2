set -e
mkdir -p logs
python3 - <<'PY'
import gzip, random
rng = random.Random(20260403)
services = ["auth", "billing", "search"]
levels = ["INFO"] * 6 + ["WARN"] * 3 + ["ERROR"] * 2 + ["DEBUG"]
msgs = ["request ok", "slow response", "retrying after ERROR from upstream", "cache miss",
        "user not found", "ERROR budget at 80%", "timeout talking to db"]
for part in range(3):
    lines = []
    for i in range(400):
        svc = rng.choice(services)
        lvl = rng.choice(levels)
        ts = "2026-04-%02dT%02d:%02d:%02dZ" % (part + 1, rng.randrange(24), rng.randrange(60), rng.randrange(60))
        lines.append("%s [%s] %s: %s" % (ts, lvl, svc, rng.choice(msgs)))
        if rng.random() < 0.03:
            lines.append("   stack frame %d (continuation)" % i)
    text = "\n".join(lines) + "\n"
    if part == 2:
        open("logs/app.log", "w").write(text)
    else:
        with gzip.open("logs/app.log.%d.gz" % (2 - part), "wt") as f:
            f.write(text)
PY
