#!/bin/bash
ok=1
s=/app/top_words.sh
[ -x "$s" ] || { echo "not executable"; ok=0; }
head -1 "$s" | grep -q '^#!/bin/bash$' || { echo "bad shebang"; ok=0; }
mkdir -p /tmp/w && cd /tmp/w
printf "Zeta alpha beta, alpha; BETA beta\ngamma's gamma delta-Alpha 42 x\n" > "in put.txt"
out=$("$s" "in put.txt" 4 2>&1)
expect=$'3 alpha\n3 beta\n2 gamma\n1 delta'
[ "$out" = "$expect" ] || { echo "got: $out"; ok=0; }
[ "$(ls /tmp/w)" = "in put.txt" ] || { echo "script wrote files"; ok=0; }
echo $ok > /logs/verifier/reward.txt
