import json, sys
events = {}
for raw in open("/app/events.jsonl"):
    try:
        e = json.loads(raw)
    except ValueError:
        continue
    if not isinstance(e, dict) or not {"user", "ts", "page"} <= e.keys():
        continue
    events.setdefault(e["user"], []).append(e["ts"])
expected = {}
for user, stamps in events.items():
    stamps.sort()
    groups = [[stamps[0]]]
    for a, b in zip(stamps, stamps[1:]):
        if b - a > 1800:
            groups.append([])
        groups[-1].append(b)
    expected[user] = [{"start": g[0], "end": g[-1], "pages": len(g)} for g in groups]
try:
    got = json.load(open("/app/sessions.json"))
except (OSError, ValueError) as e:
    sys.exit("cannot read sessions.json: %s" % e)
if got != expected:
    sys.exit("sessions differ")
print("ok", sum(len(v) for v in expected.values()), "sessions")
