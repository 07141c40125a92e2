#!/bin/bash
ok=1
src="/tmp/src dir"; dest="/tmp/dest dir"
mkdir -p "$src/a b/c*d" "$src/-x"
printf 1 > "$src/top.txt"
printf 2 > "$src/a b/two words.txt"
printf 3 > "$src/a b/c*d/it's.txt"
printf 4 > "$src/-x/-dash.txt"
printf 5 > "$src/a b/[glob].txt"
printf 6 > "$src/skip.md"
printf 7 > "$src/a b/notes.txt.bak"
cd /tmp
out=$(bash /app/backup.sh "$src" "$dest" 2>&1)
[ "$out" = "5" ] || { echo "printed: $out"; ok=0; }
for f in "top.txt" "a b/two words.txt" "a b/c*d/it's.txt" "-x/-dash.txt" "a b/[glob].txt"; do
  cmp -s -- "$src/$f" "$dest/$f" || { echo "missing or wrong: $f"; ok=0; }
done
[ "$(find "$dest" -type f | wc -l)" = 5 ] || { echo "extra files copied"; ok=0; }
echo $ok > /logs/verifier/reward.txt
