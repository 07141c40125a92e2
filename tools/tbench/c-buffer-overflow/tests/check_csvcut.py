import random, subprocess, sys
subprocess.run(["make", "-s", "-C", "/app/csvcut", "clean"], capture_output=True)
if subprocess.run(["make", "-s", "-C", "/app/csvcut"], capture_output=True).returncode != 0:
    sys.exit("make failed")
rng = random.Random(9)
lines = ["a,b,c", "x", "", "1,22,333,4444", ",,", "short,%s,end" % ("L" * 70000)]
for _ in range(50):
    lines.append(",".join("".join(rng.choice("abcxyz0123 ") for _ in range(rng.randrange(0, 300)))
                          for _ in range(rng.randrange(1, 8))))
lines.append(",".join(["f"] * 5000) + ",last")
text = "\n".join(lines) + "\n"
for col in (1, 2, 3, 5001):
    want = "".join((l.split(",")[col - 1] if len(l.split(",")) >= col else "") + "\n" for l in lines)
    r = subprocess.run(["/app/csvcut/csvcut", str(col)], input=text.encode(), capture_output=True, timeout=20)
    if r.returncode != 0 or r.stdout.decode(errors="replace") != want:
        sys.exit("column %d wrong (exit %d)" % (col, r.returncode))
print("ok")
