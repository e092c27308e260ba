#!/usr/bin/env python3
"""Reads criterion's output of `cargo bench --bench scst` (files given first; rows named
`scst/threads=N/SHAPE/iteration` and `.../sample`, `.../greedy`, `.../reward`, `.../update`)
and scst_torch.py's JSON lines (last argument) and prints the SCST iteration's time on both
sides with the ratio PyTorch / caprl (above 1: caprl is faster), then the same for its parts.
When a row was measured several times (rounds), each side's fastest time is kept. Never run in
CI; see run_scst_peer.sh."""

import json
import re
import sys

UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
PARTS = ("sample", "greedy", "reward", "update")
# Criterion puts a long row name on a line of its own, "time:" on the next.
PAT = re.compile(r"scst/threads=(\d+)/[\w.-]+/(\w+)\s+time:\s+\[[\d.]+ \S+ ([\d.]+) (\S+)")


def keep_min(table, key, t):
    table[key] = min(t, table.get(key, t))


def cell(t):
    return f"{t * 1e3:,.1f} ms" if t else "n/a"


def row(label, a, b):
    ratio = f"{b / a:.2f}x" if a and b else "n/a"
    return f"| {label} | {cell(a)} | {cell(b)} | {ratio} |"


def main():
    ours = {}
    for path in sys.argv[1:-1]:
        text = open(path, encoding="utf-8").read()
        for threads, part, value, unit in PAT.findall(text):
            keep_min(ours, (part, int(threads)), float(value) * UNIT[unit])
    peer = {}
    for line in open(sys.argv[-1], encoding="utf-8"):
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            keep_min(peer, ("iteration", d["threads"]), d["scst_iteration"])
            for part in PARTS:
                keep_min(peer, (part, d["threads"]), d[part])
    threads = sorted({t for _, t in set(ours) | set(peer)})
    get = lambda table, part, n: table.get((part, n))  # noqa: E731
    print("| threads | caprl iteration | PyTorch iteration | ratio |")
    print("|---|---|---|---|")
    for n in threads:
        print(row(n, get(ours, "iteration", n), get(peer, "iteration", n)))
    print()
    print("| part | threads | caprl | PyTorch | ratio |")
    print("|---|---|---|---|---|")
    for part in PARTS:
        for n in threads:
            print(row(f"{part} | {n}", get(ours, part, n), get(peer, part, n)))


if __name__ == "__main__":
    main()
