#!/bin/bash
cd /app/configs
python3 - <<'PY'
import glob, json
for path in sorted(glob.glob("*.json")):
    doc = json.load(open(path))
    if doc.get("version") != 1:
        continue
    doc["version"] = 2
    if "timeout" in doc:
        doc["timeout_ms"] = int(round(doc.pop("timeout") * 1000))
    if "hosts" in doc:
        doc["hosts"] = [h.strip() for h in doc["hosts"].split(",") if h.strip()]
    doc["retries"] = doc.pop("retry", {}).get("count", 0)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
PY
