#!/bin/bash
set -e
cd /app/src/unitconv
cat > units.py <<'PY'
FACTORS = {
    "m": 1.0,
    "km": 1000.0,
    "mi": 1609.344,
    "ft": 0.3048,
    "in": 0.0254,
}
PY
sed -i 's/^from units import FACTORS/from .units import FACTORS/' core.py
printf 'from .core import UnknownUnit, convert\n\n__all__ = ["convert", "UnknownUnit"]\n' > __init__.py
cat > __main__.py <<'PY'
import sys

from .core import UnknownUnit, convert


def main(argv):
    if len(argv) != 3:
        print("usage: python3 -m unitconv VALUE FROM TO", file=sys.stderr)
        return 2
    try:
        print(round(convert(float(argv[0]), argv[1], argv[2]), 3))
    except (UnknownUnit, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


sys.exit(main(sys.argv[1:]))
PY
