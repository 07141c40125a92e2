#!/bin/bash
cd /app/stats || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
make clean >/dev/null 2>&1
[ ! -e bin/stats ] || { echo "make clean left bin/stats"; ok=0; }
make >/dev/null 2>&1 || { echo "make failed"; ok=0; }
out=$(printf '2\n4\n4\n4\n5\n5\n7\n9\n' | ./bin/stats 2>&1)
[ "$out" = "count=8 mean=5.000 stddev=2.000" ] || { echo "unexpected output: $out"; ok=0; }
grep -q 'sqrt(sq / (double)n)' src/stats.c || { echo "sources changed"; ok=0; }
echo $ok > /logs/verifier/reward.txt
