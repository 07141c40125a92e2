def report(path):
    total = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3:
                raise ValueError("line %d: expected sku,quantity,price" % n)
            sku, qty, price = parts
            euros, _, cents = price.partition(".")
            total += int(qty) * (int(euros) * 100 + int((cents + "00")[:2]))
    return "%d.%02d" % (total // 100, total % 100)
