import json, sys
expected = {
    "api.json": {"version": 2, "name": "api", "timeout_ms": 2500, "hosts": ["a.internal", "b.internal", "c.internal"],
                 "retries": 3, "tls": {"enabled": True, "timeout": 9}},
    "worker.json": {"version": 2, "name": "worker", "timeout_ms": 30000, "hosts": [], "retries": 0,
                    "queue": {"name": "jobs", "hosts": "keep,as,is"}},
    "edge.json": {"version": 2, "name": "edge", "timeout_ms": 2, "hosts": ["edge-1"], "retries": 0, "labels": ["x", "y"]},
}
bad = 0
for name, want in expected.items():
    path = "/app/configs/" + name
    text = open(path).read()
    if text != json.dumps(want, indent=2, sort_keys=True) + "\n":
        print("%s differs:\n%s" % (name, text))
        bad += 1
legacy = open("/app/configs/legacy.json").read()
if legacy != '{\n"version": 2, "name": "legacy",   "timeout_ms": 5, "hosts": ["x"], "retries": 1\n}\n':
    print("legacy.json was modified")
    bad += 1
sys.exit(1 if bad else 0)
