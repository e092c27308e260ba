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

# Paper 004's columns: retrieval with the frozen evaluation encoder, writing quality, diversity.
CLIP_METRICS = [
    ("r1_t2i", "R@1 T2I"),
    ("r5_t2i", "R@5 T2I"),
    ("r1_i2t", "R@1 I2T"),
    ("cider_d", "CIDEr-D"),
    ("bleu4", "BLEU-4"),
    ("self_bleu", "Self-BLEU"),
    ("vocab_used", "vocab"),
    ("mean_len", "length"),
]


def load(out, obj, seed):
    return json.loads((out / f"{obj}-{seed}.json").read_text())["metrics"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--objectives", nargs="+", required=True)
    ap.add_argument("--clip", action="store_true", help="paper 004's retrieval columns")
    a = ap.parse_args()
    metrics = CLIP_METRICS if a.clip else METRICS
    runs = {o: [load(a.out, o, s) for s in a.seeds] for o in a.objectives}

    def stat(values):
        return statistics.mean(values), (max(values) - min(values)) / 2

    def rel(obj, base, key):
        """Mean over seeds of the per-seed relative change of `obj` over `base`."""
        return stat([100 * (r[key] - b[key]) / abs(b[key]) for r, b in zip(runs[obj], runs[base])])

    print(f"{len(a.seeds)} seeds ({', '.join(a.seeds)}); mean ± half-range\n")
    extra = " | R@1 T2I / XE" if a.clip else ""
    print("| objective | " + " | ".join(label for _, label in metrics) + f" | CIDEr-D vs XE{extra} |")
    print("|---" * (len(metrics) + 2 + bool(a.clip)) + "|")
    for obj in a.objectives:
        cells = []
        for key, _ in metrics:
            m, s = stat([r[key] for r in runs[obj]])
            if key == "vocab_used":
                cells.append(f"{m:.0f} ± {s:.0f}")
            elif key in ("r1_t2i", "r5_t2i", "r1_i2t", "mean_len"):
                cells.append(f"{m:.1f} ± {s:.1f}")
            else:
                cells.append(f"{m:.3f} ± {s:.3f}")
        change = "" if obj == "xe" else "{:+.1f}% ± {:.1f}".format(*rel(obj, "xe", "cider_d"))
        if a.clip:
            ratio = stat([r["r1_t2i"] / max(b["r1_t2i"], 1e-9) for r, b in zip(runs[obj], runs["xe"])])
            change += "" if obj == "xe" else " | {:.2f}× ± {:.2f}".format(*ratio)
            change += " |" if obj == "xe" else ""
        print(f"| {obj} | " + " | ".join(cells) + f" | {change} |")
    if "sle" in runs and "scst" in runs:
        print("\nSLE relative to SCST (per seed, then mean ± half-range):")
        for key, label in [("cider_d", "CIDEr-D"), ("div2_sample", "Div-2 (rs)"),
                           ("mbleu4_sample", "mBLEU-4 (rs)")]:
            print("  {:<13} {:+.1f}% ± {:.1f}".format(label, *rel("sle", "scst", key)))


if __name__ == "__main__":
    main()
