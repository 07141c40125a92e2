#!/bin/bash
cd /app/service || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
[ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || { echo "main not checked out"; ok=0; }
[ -z "$(git status --porcelain)" ] || { echo "dirty tree"; ok=0; }
parents=$(git rev-list --parents -n1 HEAD | wc -w)
[ "$parents" -eq 3 ] || { echo "HEAD is not a merge commit"; ok=0; }
git merge-base --is-ancestor retry-tuning HEAD || { echo "retry-tuning not merged"; ok=0; }
printf '[server]\nhost = 0.0.0.0\nport = 9090\nretries = 5\nbackoff_ms = 350\nlog_level = info\n' > /tmp/expect.ini
git show HEAD:service.ini | cmp -s - /tmp/expect.ini || { echo "service.ini resolved wrongly"; git show HEAD:service.ini; ok=0; }
git show HEAD:retry.py >/dev/null 2>&1 || { echo "retry.py missing"; ok=0; }
echo $ok > /logs/verifier/reward.txt
