#!/bin/bash
set -e
cd /app/pricing
first=$(git rev-list --max-parents=0 HEAD)
git bisect start HEAD "$first" >/dev/null
git bisect run python3 check.py > /tmp/bisect.log 2>&1 || true
bad=$(git rev-parse refs/bisect/bad)
git bisect reset -q main >/dev/null 2>&1 || git bisect reset >/dev/null
echo "$bad" > /app/first_bad.txt
