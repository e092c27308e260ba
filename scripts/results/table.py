#!/usr/bin/env python3
"""Mean ± spread (half the max-min range) of the eval JSONs written by table.sh, as a Markdown
table, plus each objective's change relative to XE (and SLE's relative to SCST)."""
import argparse
import json
import statistics
from pathlib import Path

METRICS = [
    ("cider_d", "CIDEr-D"),
    ("bleu4", "BLEU-4"),
    ("rouge_l", "ROUGE-L"),
    ("div2_sample", "Div-2 (rs)"),
    ("mbleu4_sample", "mBLEU-4 (rs)"),
    ("vocab_used", "vocab"),
]


def load(out, obj, seed):
    return json.loads((out / f"{obj}-{seed}.json").read_text())["metrics"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--objectives", nargs="+", required=True)
    a = ap.parse_args()
    runs = {o: [load(a.out, o, s) for s in a.seeds] for o in a.objectives}

    def stat(values):
        return statistics.mean(values), (max(values) - min(values)) / 2

    def rel(obj, base, key):
        """Mean over seeds of the per-seed relative change of `obj` over `base`."""
        return stat([100 * (r[key] - b[key]) / abs(b[key]) for r, b in zip(runs[obj], runs[base])])

    print(f"{len(a.seeds)} seeds ({', '.join(a.seeds)}); mean ± half-range\n")
    print("| objective | " + " | ".join(label for _, label in METRICS) + " | CIDEr-D vs XE |")
    print("|---" * (len(METRICS) + 2) + "|")
    for obj in a.objectives:
        cells = []
        for key, _ in METRICS:
            m, s = stat([r[key] for r in runs[obj]])
            cells.append(f"{m:.0f} ± {s:.0f}" if key == "vocab_used" else f"{m:.3f} ± {s:.3f}")
        change = "" if obj == "xe" else "{:+.1f}% ± {:.1f}".format(*rel(obj, "xe", "cider_d"))
        print(f"| {obj} | " + " | ".join(cells) + f" | {change} |")
    if "sle" in runs and "scst" in runs:
        print("\nSLE relative to SCST (per seed, then mean ± half-range):")
        for key, label in [("cider_d", "CIDEr-D"), ("div2_sample", "Div-2 (rs)"),
                           ("mbleu4_sample", "mBLEU-4 (rs)")]:
            print("  {:<13} {:+.1f}% ± {:.1f}".format(label, *rel("sle", "scst", key)))


if __name__ == "__main__":
    main()
