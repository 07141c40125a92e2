set -e
python3 - <<'PY'
import json, random
rng = random.Random(77)
users = ["ivy", "jon", "kai", "lea"]
out = []
for u in users:
    t = 1_770_000_000 + rng.randrange(1000)
    for _ in range(rng.randrange(15, 30)):
        t += rng.choice([30, 200, 900, 1799, 1800, 1801, 4000])
        out.append(json.dumps({"user": u, "ts": t, "page": "/p%d" % rng.randrange(9)}))
out.append('{"user": "ivy", "ts": ')
out.append('{"user": "jon", "page": "/x"}')
out.append('not json at all')
rng.shuffle(out)
open("events.jsonl", "w").write("\n".join(out) + "\n")
PY
