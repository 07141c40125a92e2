#!/bin/bash
# Checks main holds the lost packing list and budget, plus its own later history.
cd /app/trip || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
[ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || { echo "main is not checked out"; ok=0; }
[ -z "$(git status --porcelain)" ] || { echo "working tree not clean"; ok=0; }
printf '# Packing list\n- passport\n- charger\n- rain jacket\n- walking boots\n' > /tmp/expect_packing
printf 'Budget: 640 EUR\n' > /tmp/expect_budget
git show main:packing.md | cmp -s - /tmp/expect_packing || { echo "packing.md differs"; ok=0; }
git show main:budget.txt | cmp -s - /tmp/expect_budget || { echo "budget.txt differs"; ok=0; }
git show main:itinerary.txt | grep -q "Day 3: coast walk" || { echo "day 3 lost"; ok=0; }
echo $ok > /logs/verifier/reward.txt
