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

# A linear reference run in the same environment calibrates for a busy machine.
REF = (
    "import sys\nseen=set()\nout=open(sys.argv[2],'w')\n"
    "for l in open(sys.argv[1]):\n k=l.strip().lower()\n"
    " if k and k not in seen:\n  seen.add(k); out.write(l.strip()+'\\n')\n"
)
start = time.monotonic()
subprocess.run([sys.executable, "-c", REF, "/tmp/big.txt", "/tmp/ref.txt"], check=True)
reference = time.monotonic() - start
limit = max(2.0, 4 * reference)

start = time.monotonic()
try:
    subprocess.run([sys.executable, "/app/dedupe.py", "/tmp/big.txt", "/tmp/out.txt"], check=True,
                   timeout=max(5.0, 5 * reference))
except Exception as e:
    sys.exit("dedupe.py failed or was far too slow: %s" % e)
elapsed = time.monotonic() - start
got = open("/tmp/out.txt").read()
if got != "".join(l + "\n" for l in expected):
    sys.exit("output differs from the original behaviour")
if elapsed > limit:
    sys.exit("too slow: %.2f s (limit %.2f s, reference %.2f s)" % (elapsed, limit, reference))
print("ok in %.2f s (limit %.2f s, reference %.2f s)" % (elapsed, limit, reference))
