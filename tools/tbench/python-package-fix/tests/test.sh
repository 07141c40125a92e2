#!/bin/bash
ok=1
cd /tmp
export PYTHONPATH=/app/src
[ "$(python3 -m unitconv 12 km mi 2>&1)" = "7.456" ] || { echo "km->mi wrong"; ok=0; }
[ "$(python3 -m unitconv 3 ft in 2>&1)" = "36.0" ] || { echo "ft->in wrong"; ok=0; }
python3 -m unitconv 1 km parsec >/tmp/o 2>/tmp/e; rc=$?
[ $rc -eq 2 ] && [ -s /tmp/e ] && [ ! -s /tmp/o ] || { echo "unknown unit: rc=$rc"; ok=0; }
python3 -c 'from unitconv import convert; assert abs(convert(1, "mi", "m") - 1609.344) < 1e-9' || { echo "library import"; ok=0; }
python3 -c 'import unitconv.units as u; assert u.FACTORS["in"] == 0.0254' || { echo "units changed"; ok=0; }
echo $ok > /logs/verifier/reward.txt
