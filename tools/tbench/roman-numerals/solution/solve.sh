#!/bin/bash
cat > /app/roman.py <<'PY'
_TABLE = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 3999:
        raise ValueError("out of range: %r" % (n,))
    out = []
    for value, sym in _TABLE:
        while n >= value:
            out.append(sym)
            n -= value
    return "".join(out)


_FROM = {to_roman(i): i for i in range(1, 4000)}


def from_roman(s):
    try:
        return _FROM[s]
    except (KeyError, TypeError):
        raise ValueError("not a canonical roman numeral: %r" % (s,))
PY
