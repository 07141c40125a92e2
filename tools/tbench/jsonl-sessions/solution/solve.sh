#!/bin/bash
cd /app
python3 - <<'PY'
import json
by_user = {}
for line in open("events.jsonl"):
    try:
        e = json.loads(line)
        u, ts = e["user"], e["ts"]
        e["page"]
    except (ValueError, KeyError, TypeError):
        continue
    by_user.setdefault(u, []).append(ts)
result = {}
for u, tss in by_user.items():
    tss.sort()
    sessions = []
    for ts in tss:
        if sessions and ts - sessions[-1]["end"] <= 1800:
            sessions[-1]["end"] = ts
            sessions[-1]["pages"] += 1
        else:
            sessions.append({"start": ts, "end": ts, "pages": 1})
    result[u] = sessions
json.dump(result, open("sessions.json", "w"), indent=1)
PY
