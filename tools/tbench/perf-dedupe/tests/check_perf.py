import random, subprocess, sys, time

rng = random.Random(4242)
names = ["%s%d" % (rng.choice("abcdefghij"), rng.randrange(60000)) for _ in range(200000)]
lines = []
for n in names:
    addr = "%s@%s.example" % (n, rng.choice(["mail", "post", "web"]))
    if rng.random() < 0.3:
        addr = addr.upper()
    if rng.random() < 0.2:
        addr = "  " + addr + " "
    lines.append(addr)
    if rng.random() < 0.01:
        lines.append("")
open("/tmp/big.txt", "w").write("\n".join(lines) + "\n")

seen, expected = set(), []
for line in lines:
    key = line.strip().lower()
    if key and key not in seen:
        seen.add(key)
        expected.append(line.strip())

start = time.monotonic()
try:
    subprocess.run([sys.executable, "/app/dedupe.py", "/tmp/big.txt", "/tmp/out.txt"], check=True, timeout=5)
except Exception as e:
    sys.exit("dedupe.py failed or took over 5 s: %s" % e)
elapsed = time.monotonic() - start
got = open("/tmp/out.txt").read()
if got != "".join(l + "\n" for l in expected):
    sys.exit("output differs from the original behaviour")
if elapsed > 2.0:
    sys.exit("too slow: %.2f s" % elapsed)
print("ok in %.2f s" % elapsed)
