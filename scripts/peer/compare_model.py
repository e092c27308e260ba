#!/usr/bin/env python3
"""Reads criterion's output of `cargo bench --bench model` (files given first) and the peer's JSON
lines (last argument) and prints a tokens/s table with the ratio caprl / PyTorch. When a task was
measured several times (rounds), each side's fastest time is kept."""

import json
import re
import sys

UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
B, T = 32, 16
TOKENS = {"xe_step": B * (T + 1), "greedy": B * T, "sample_5": 5 * B * T, "beam_5": 5 * B * T}
PAT = re.compile(r"model/threads=(\d+)/(\w+)\s+time:\s+\[[\d.]+ \S+ ([\d.]+) (\S+)")


def main():
    ours = {}
    for path in sys.argv[1:-1]:
        text = open(path, encoding="utf-8").read()
        for threads, name, value, unit in PAT.findall(text):
            if name in TOKENS:  # the bench's extra rows (xe_forward, ...) have no peer figure
                key, t = (int(threads), name), float(value) * UNIT[unit]
                ours[key] = min(t, ours.get(key, t))
    peer = {}
    for line in open(sys.argv[-1], encoding="utf-8"):
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            for name in TOKENS:
                key = (d["threads"], name)
                peer[key] = min(d[name], peer.get(key, d[name]))
    print(f"| task | threads | caprl tokens/s | PyTorch tokens/s | ratio |")
    print("|---|---|---|---|---|")
    for (threads, name) in sorted(ours):
        ours_tps = TOKENS[name] / ours[(threads, name)]
        p = peer.get((threads, name))
        peer_tps = f"{TOKENS[name] / p:,.0f}" if p else "n/a"
        ratio = f"{ours_tps / (TOKENS[name] / p):.2f}x" if p else "n/a"
        print(f"| {name} | {threads} | {ours_tps:,.0f} | {peer_tps} | {ratio} |")


if __name__ == "__main__":
    main()
