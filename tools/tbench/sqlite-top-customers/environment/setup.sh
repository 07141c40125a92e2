set -e
python3 - <<'PY'
import random, sqlite3
rng = random.Random(2025)
db = sqlite3.connect("shop.db")
db.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     placed_at TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_lines (order_id INTEGER REFERENCES orders(id), sku TEXT,
                          quantity INTEGER, unit_cents INTEGER);
""")
for c in range(1, 41):
    db.execute("INSERT INTO customers VALUES (?, ?)", (c, "user%02d@shop.example" % c))
oid = 0
for c in range(1, 41):
    for _ in range(rng.randrange(2, 9)):
        oid += 1
        year = rng.choice([2024, 2025, 2025, 2026])
        day = "%d-%02d-%02dT%02d:%02d:00Z" % (year, rng.randrange(1, 13), rng.randrange(1, 29), rng.randrange(24), rng.randrange(60))
        if rng.random() < 0.05:
            day = "2025-12-31T23:59:59Z" if rng.random() < 0.5 else "2026-01-01T00:00:00Z"
        status = rng.choice(["paid", "paid", "shipped", "cancelled"])
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (oid, c, day, status))
        for _ in range(rng.randrange(1, 5)):
            db.execute("INSERT INTO order_lines VALUES (?, ?, ?, ?)",
                       (oid, "sku%d" % rng.randrange(50), rng.randrange(1, 6), rng.randrange(99, 20000)))
db.commit()
PY
