#!/usr/bin/env python3
"""Side-by-side cost of `baton sandbox -- true` for several baton binaries (e.g. main's and a
branch's release builds) against plain `true`, of a sandboxed shell round trip
(`baton sandbox -- bash -c 'echo hi'`), and of `baton sandbox -- true` on a terminal (stdio on
a PTY: baton relays a new PTY to it), median of N interleaved runs in a throwaway git
workspace.

    tools/bench/sandbox_cli.py [-n 200] [--files N] NAME=PATH [NAME=PATH ...]

--files N fills the workspace with N small files, ten to a folder, a hundred folders to a
parent (what a checkout with a build tree looks like to the audit's walk), and waits until
every folder is older than the audit's settling time (3 s) before measuring.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time


def timed(argv, cwd, on_tty=False):
    if not on_tty:
        t = time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - t
    master, slave = os.openpty()
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    proc.wait()
    elapsed = time.perf_counter() - t
    os.close(master)
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--files", type=int, default=0, help="files in the workspace")
    ap.add_argument("binaries", nargs="+", help="NAME=PATH of a baton binary")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.binaries]
    with tempfile.TemporaryDirectory() as ws:
        subprocess.run(["git", "init", "-q", ws], check=True)
        for i in range(args.files):
            folder = os.path.join(ws, f"d{i // 1000}", f"s{i // 10 % 100}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"f{i % 10}.txt"), "w") as f:
                f.write("x")
        if args.files:
            time.sleep(3.5)
        cases = [("plain `true`", ["true"], False),
                 ("plain `bash -c 'echo hi'`", ["bash", "-c", "echo hi"], False)]
        for name, path in bins:
            cases.append((f"{name}: `baton sandbox -- true`", [path, "sandbox", "--", "true"],
                          False))
            cases.append((f"{name}: `baton sandbox -- bash -c 'echo hi'`",
                          [path, "sandbox", "--", "bash", "-c", "echo hi"], False))
            cases.append((f"{name}: `baton sandbox -- true` on a terminal",
                          [path, "sandbox", "--", "true"], True))
        for _, argv, on_tty in cases:  # warm the page cache
            timed(argv, ws, on_tty)
        samples = {label: [] for label, _, _ in cases}
        for _ in range(args.n):
            for label, argv, on_tty in cases:
                samples[label].append(timed(argv, ws, on_tty))
        base = statistics.median(samples[cases[0][0]])
        base_sh = statistics.median(samples[cases[1][0]])
        print(f"median of {args.n} interleaved runs"
              + (f", workspace of {args.files} files" if args.files else ""))
        for label, _, _ in cases:
            m = statistics.median(samples[label])
            ref = base_sh if "bash" in label else base
            print(f"  {label:<55} {m * 1e3:7.2f} ms  (+{(m - ref) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
