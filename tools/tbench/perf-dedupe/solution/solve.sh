#!/bin/bash
cat > /app/dedupe.py <<'PY'
import sys


def dedupe(lines):
    seen = set()
    kept = []
    for line in lines:
        key = line.strip().lower()
        if not key or key in seen:
            continue
        seen.add(key)
        kept.append(line.strip())
    return kept


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        lines = f.readlines()
    with open(dst, "w") as out:
        for line in dedupe(lines):
            out.write(line + "\n")


if __name__ == "__main__":
    main()
PY
