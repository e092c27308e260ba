#!/usr/bin/env python3
"""Reads criterion's output of `cargo bench --bench model` (files given first; rows named
`model/threads=N/SHAPE/TASK`) and the peer's JSON lines (last argument, model_torch.py's) and
prints a tokens/s table with the ratio caprl / PyTorch, per shape of benches/model_shapes.json
(grid order), task and thread count. Tokens per task come from the shape: xe_step
images*captions_per_image*(len+1), greedy images*len, sample_5 and beam_5 5*images*len. When a
task was measured several times (rounds), each side's fastest time is kept. Never run in CI; see
run_model_peer.sh."""

import json
import re
import sys
from pathlib import Path

UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
SHAPES_FILE = Path(__file__).resolve().parents[2] / "benches" / "model_shapes.json"
TASKS = ("xe_step", "greedy", "sample_5", "beam_5")
# Criterion puts a long row name on a line of its own, "time:" on the next.
PAT = re.compile(r"model/threads=(\d+)/([\w.-]+)/(\w+)\s+time:\s+\[[\d.]+ \S+ ([\d.]+) (\S+)")


def tokens(s, task):
    n, t = s["images"], s["len"]
    return {
        "xe_step": n * s["captions_per_image"] * (t + 1),
        "greedy": n * t,
        "sample_5": 5 * n * t,
        "beam_5": 5 * n * t,
    }[task]


def keep_min(table, key, t):
    table[key] = min(t, table.get(key, t))


def main():
    shapes = json.loads(SHAPES_FILE.read_text(encoding="utf-8"))["shapes"]
    order = {s["name"]: i for i, s in enumerate(shapes)}
    by_name = {s["name"]: s for s in shapes}
    ours = {}
    for path in sys.argv[1:-1]:
        text = open(path, encoding="utf-8").read()
        for threads, shape, task, value, unit in PAT.findall(text):
            # The bench's extra rows (xe_forward, ...) have no peer figure.
            if shape in by_name and task in TASKS:
                keep_min(ours, (shape, task, int(threads)), float(value) * UNIT[unit])
    peer = {}
    for line in open(sys.argv[-1], encoding="utf-8"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "model" in d:  # another peer's line (transformer_torch.py)
            continue
        shape = d.get("shape", "toy")  # lines from before the grid had the toy shape only
        for task in TASKS:
            keep_min(peer, (shape, task, d["threads"]), d[task])
    keys = sorted(
        (k for k in set(ours) | set(peer) if k[0] in by_name),
        key=lambda k: (order[k[0]], TASKS.index(k[1]), k[2]),
    )
    print("| shape | task | threads | caprl tokens/s | PyTorch tokens/s | ratio |")
    print("|---|---|---|---|---|---|")
    for shape, task, threads in keys:
        n = tokens(by_name[shape], task)
        a, b = ours.get((shape, task, threads)), peer.get((shape, task, threads))
        ours_tps = f"{n / a:,.0f}" if a else "n/a"
        peer_tps = f"{n / b:,.0f}" if b else "n/a"
        ratio = f"{b / a:.2f}x" if a and b else "n/a"
        print(f"| {shape} | {task} | {threads} | {ours_tps} | {peer_tps} | {ratio} |")


if __name__ == "__main__":
    main()
