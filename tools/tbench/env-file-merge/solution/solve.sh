#!/bin/bash
cd /app
python3 - <<'PY'
import re
raw = {}
for name in ("base.env", "prod.env", "local.env"):
    for line in open("config/" + name):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            raw[key.strip()] = ("literal", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            raw[key.strip()] = ("expand", value[1:-1])
        else:
            raw[key.strip()] = ("expand", value)
final = {}
def resolve(key, stack=()):
    if key in final:
        return final[key]
    if key not in raw or key in stack:
        return ""
    kind, value = raw[key]
    if kind == "expand":
        value = re.sub(r"\$\{(\w+)\}", lambda m: resolve(m.group(1), stack + (key,)), value)
    final[key] = value
    return value
for k in raw:
    resolve(k)
with open("final.env", "w") as f:
    for k in sorted(final):
        f.write("%s=%s\n" % (k, final[k]))
PY
