#!/bin/bash
cd /app
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("shop.db")
rows = db.execute("""
SELECT c.email, SUM(l.quantity * l.unit_cents) AS cents
FROM customers c JOIN orders o ON o.customer_id = c.id JOIN order_lines l ON l.order_id = o.id
WHERE o.placed_at >= '2025-01-01' AND o.placed_at < '2026-01-01' AND o.status != 'cancelled'
GROUP BY c.id ORDER BY cents DESC LIMIT 3""").fetchall()
with open("top3.txt", "w") as f:
    for email, cents in rows:
        f.write("%s,%d.%02d\n" % (email, cents // 100, cents % 100))
PY
