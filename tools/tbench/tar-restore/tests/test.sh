#!/bin/bash
ok=1
expected=$(printf 'version: 2\nroutes:\n  - /\n  - /shop   # day 04\n')
[ "$(cat /app/site/config/routes.yaml 2>/dev/null)" = "$expected" ] || { echo "routes.yaml wrong"; ok=0; }
[ "$(cat /app/site/pages/news.html)" = "day 06" ] || { echo "news.html changed"; ok=0; }
[ "$(ls /app/backups | wc -l)" = 6 ] || { echo "backups changed"; ok=0; }
tar -xzOf /app/backups/site-2026-05-06.tar.gz site/config/routes.yaml | grep -q '^version 3' || { echo "archive changed"; ok=0; }
echo $ok > /logs/verifier/reward.txt
