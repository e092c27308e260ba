#!/usr/bin/env python3
"""The architecture table of models.sh: per model, test CIDEr-D of XE, SCST with the greedy
baseline and SCST with the mean baseline (mean ± half-range over seeds), each RL row's change
over its own XE model, and the parameter count (from the XE checkpoint's weights file)."""
import argparse
import json
import statistics
from pathlib import Path

STAGES = [("xe", "XE"), ("scst-greedy", "SCST greedy baseline"), ("scst-mean", "SCST mean baseline")]


def cider(out, model, stage, seed):
    return json.loads((out / f"{model}-{stage}-{seed}.json").read_text())["metrics"]["cider_d"]


def params(out, model, seed):
    """Parameters of the XE model: the safetensors file's f32 payload (header excluded)."""
    best = out / f"{model}-xe-{seed}" / "best-xe"
    path = next(best.glob("*/model.safetensors"))  # best-xe/ckpt-<step>/
    raw = path.read_bytes()
    header = int.from_bytes(raw[:8], "little")
    return (len(raw) - 8 - header) // 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    a = ap.parse_args()

    def stat(values):
        return statistics.mean(values), (max(values) - min(values)) / 2

    print(f"{len(a.seeds)} seeds ({', '.join(a.seeds)}); test split, beam 3; mean ± half-range\n")
    print("| model | parameters | " + " | ".join(label for _, label in STAGES) + " |")
    print("|---|---:|" + "---:|" * len(STAGES))
    for model in a.models:
        cells = []
        xe = [cider(a.out, model, "xe", s) for s in a.seeds]
        for stage, _ in STAGES:
            values = [cider(a.out, model, stage, s) for s in a.seeds]
            m, h = stat(values)
            cell = f"{m:.3f} ± {h:.3f}"
            if stage != "xe":
                cm, ch = stat([100 * (v - b) / abs(b) for v, b in zip(values, xe)])
                cell += f" ({cm:+.1f}% ± {ch:.1f})"
            cells.append(cell)
        n = params(a.out, model, a.seeds[0])
        print(f"| {model} | {n / 1e6:.2f}M | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
