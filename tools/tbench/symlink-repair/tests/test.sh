#!/bin/bash
cd /app/docs || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
check() { # link expected-target-inside-docs
  [ -L "$1" ] || { echo "$1 is not a link"; ok=0; return; }
  t=$(readlink "$1")
  case "$t" in /*) echo "$1 is absolute: $t"; ok=0; return;; esac
  [ "$(realpath "$1")" = "$(realpath "$2")" ] || { echo "$1 -> $t is wrong"; ok=0; }
}
check guide/style.css shared/style.css
check api/v2/style.css shared/style.css
check api/latest.md api/v2/reference.md
check README.md guide/intro.md
check api/stable api/v1
[ "$(find . -type l | wc -l)" = 5 ] || { echo "link count changed"; ok=0; }
[ "$(cat api/stable/reference.md)" = "v1 ref" ] || { echo "stable broken"; ok=0; }
[ "$(find . -type f | wc -l)" = 4 ] || { echo "files added"; ok=0; }
echo $ok > /logs/verifier/reward.txt
