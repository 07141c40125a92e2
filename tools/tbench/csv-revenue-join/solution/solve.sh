#!/bin/bash
cd /app
python3 - <<'PY'
import csv
from decimal import Decimal, ROUND_HALF_UP
countries = {r["customer_id"]: r["country"] for r in csv.DictReader(open("data/customers.csv"))}
agg = {}
for r in csv.DictReader(open("data/orders.csv")):
    if r["status"].strip().lower() != "paid":
        continue
    country = countries.get(r["customer_id"].strip(), "UNKNOWN")
    value = Decimal(r["quantity"].strip()) * Decimal(r["unit_price"].strip().replace(",", "."))
    n, total = agg.get(country, (0, Decimal(0)))
    agg[country] = (n + 1, total + value)
rows = sorted(agg.items(), key=lambda kv: (-kv[1][1], kv[0]))
with open("revenue.csv", "w") as f:
    f.write("country,orders,revenue\n")
    for c, (n, total) in rows:
        f.write("%s,%d,%s\n" % (c, n, total.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)))
PY
