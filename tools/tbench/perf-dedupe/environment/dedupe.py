import sys


def dedupe(lines):
    kept = []
    for line in lines:
        key = line.strip().lower()
        if not key:
            continue
        duplicate = False
        for other in kept:
            if other.strip().lower() == key:
                duplicate = True
                break
        if not duplicate:
            kept.append(line.strip())
    return kept


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        lines = f.readlines()
    with open(dst, "w") as out:
        for line in dedupe(lines):
            out.write(line + "\n")


if __name__ == "__main__":
    main()
