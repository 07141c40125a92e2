#!/bin/bash
cat > /app/inventory/stock.py <<'PY'
from dataclasses import dataclass


@dataclass
class Item:
    sku: str
    quantity: int
    unit_cents: int


def _cents(price):
    euros, _, cents = price.partition(".")
    return int(euros) * 100 + int((cents + "00")[:2])


def parse_items(path):
    items = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3:
                raise ValueError("line %d: expected sku,quantity,price" % n)
            try:
                items.append(Item(parts[0], int(parts[1]), _cents(parts[2])))
            except ValueError as e:
                raise ValueError("line %d: %s" % (n, e)) from e
    return items


def total_cents(items):
    return sum(i.quantity * i.unit_cents for i in items)


def low_stock(items, threshold):
    return [i.sku for i in items if i.quantity < threshold]


def report(path):
    total = total_cents(parse_items(path))
    return "%d.%02d" % (total // 100, total % 100)
PY
