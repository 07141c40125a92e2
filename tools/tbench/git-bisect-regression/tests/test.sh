#!/bin/bash
cd /app/pricing || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
# Independent scan: the earliest commit where check.py fails.
expected=""
tmp=$(mktemp -d)
for c in $(git rev-list --reverse main); do
  rm -rf "$tmp"/* && git archive "$c" | tar -x -C "$tmp"
  if ! (cd "$tmp" && python3 check.py >/dev/null 2>&1); then expected=$c; break; fi
done
got=$(tr -d ' \n' < /app/first_bad.txt 2>/dev/null)
[ -n "$expected" ] && [ "$got" = "$expected" ] || { echo "want $expected got $got"; ok=0; }
[ "$(git rev-parse --abbrev-ref HEAD)" = main ] || { echo "not on main"; ok=0; }
[ -z "$(git status --porcelain)" ] || { echo "dirty"; ok=0; }
[ "$(git rev-list --count main)" = 24 ] || { echo "history rewritten"; ok=0; }
echo $ok > /logs/verifier/reward.txt
