#!/usr/bin/env python3
"""The table of rl_algorithms.sh: per variant, test metrics of its best RL model (mean ±
half-range over seeds), the actor decodes its RL phase cost, its CIDEr-D gain over its XE model
per 1,000 decodes, and the decodes it took to reach the greedy-baseline SCST run's final
validation CIDEr-D (from the run log's validation after every RL epoch)."""
import argparse
import json
import statistics
import tomllib
from pathlib import Path

COLUMNS = [
    ("cider_d", "CIDEr-D", 3),
    ("bleu4", "BLEU-4", 3),
    ("div2_sample", "Div-2 (rs)", 3),
    ("mbleu4_sample", "mBLEU-4 (rs)", 3),
    ("mean_len", "length", 2),
]
LABELS = {
    "greedy": "greedy baseline (SCST)",
    "greedy-noeos": "greedy baseline, CIDEr-D without <eos>",
    "rloo": "leave-one-out mean (RLOO)",
    "grpo": "GRPO",
    "dr-grpo": "Dr. GRPO",
    "ppo1": "PPO K=1, leave-one-out",
    "ppo2": "PPO K=2, leave-one-out",
    "ppo4": "PPO K=4, leave-one-out",
    "grpo-ds": "GRPO + dynamic sampling",
    "async-rloo": "async, leave-one-out, truncated IS",
    "async-rloo-mis": "async, leave-one-out, masked IS",
    "async-decoupled": "async, decoupled PPO K=2",
    "async-gspo": "async, GSPO K=2",
}


def label(variant):
    """The table's name of a variant (`ppoKmM`: K passes of M minibatches)."""
    if variant in LABELS:
        return LABELS[variant]
    if variant.startswith("ppo") and "m" in variant:
        k, m = variant[3:].split("m")
        return f"PPO K={k}, {m} minibatches, leave-one-out"
    return variant


# self-critical.pytorch's `bad_endings` (captioning/utils/misc.py).
BAD_ENDINGS = {"a", "an", "the", "in", "for", "at", "of", "with", "before", "after", "on", "upon",
               "near", "to", "is", "are", "am"}


def dangling(out, name, seed):
    """Test captions (COCO results file of `caprl eval --out`) whose last word is a bad ending."""
    captions = json.loads((out / f"{name}-{seed}-captions.json").read_text())
    return sum(1 for c in captions if c["caption"].split()[-1:] and c["caption"].split()[-1] in BAD_ENDINGS)


def metrics(out, name, seed):
    return json.loads((out / f"{name}-{seed}.json").read_text())["metrics"]


def val_curve(run):
    """Validation CIDEr-D after each epoch of the run (RL only: these runs start from XE)."""
    curve = []
    for line in (run / "run.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "eval" and rec.get("split") == "val":
            curve.append(rec["metrics"]["cider_d"])
    return curve


def decodes_per_epoch(run, images):
    """Captions the actors decode per RL epoch: the samples, plus the greedy baseline's."""
    train = tomllib.loads((run / "config.toml").read_text()).get("train", {})
    greedy = train.get("baseline", "greedy") == "greedy"
    return images * (train.get("samples", 5) + (1 if greedy else 0))


def stat(values):
    return statistics.mean(values), (max(values) - min(values)) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--variants", nargs="+", required=True)
    ap.add_argument("--train-images", type=int, default=2000)
    a = ap.parse_args()

    print(f"{len(a.seeds)} seeds ({', '.join(a.seeds)}); test split, beam 3; mean ± half-range\n")
    head = [label for _, label, _ in COLUMNS]
    head += ["dangling endings", "decodes", "CIDEr-D gain per 1k decodes",
             "decodes to reach greedy SCST's final val CIDEr-D"]
    print("| variant | " + " | ".join(head) + " |")
    print("|---|" + "---:|" * len(head))

    def row(label, name, per_seed, extra):
        cells = []
        for key, _, p in COLUMNS:
            m, h = stat([per_seed[s][key] for s in a.seeds])
            cells.append(f"{m:.{p}f} ± {h:.{p}f}")
        cells.append(" / ".join(str(dangling(a.out, name, s)) for s in a.seeds))
        print(f"| {label} | " + " | ".join(cells + extra) + " |")

    xe = {s: metrics(a.out, "xe", s) for s in a.seeds}
    row("XE (the start of every row)", "xe", xe, ["", "", ""])
    greedy_runs = {s: a.out / f"greedy-{s}" for s in a.seeds}
    have_bar = all((r / "run.jsonl").exists() for r in greedy_runs.values())
    bar = {s: val_curve(r)[-1] for s, r in greedy_runs.items()} if have_bar else {}
    bar_decodes = {
        s: decodes_per_epoch(r, a.train_images) * len(val_curve(r)) for s, r in greedy_runs.items()
    } if have_bar else {}
    for v in a.variants:
        runs = {s: a.out / f"{v}-{s}" for s in a.seeds}
        per_epoch = {s: decodes_per_epoch(runs[s], a.train_images) for s in a.seeds}
        curves = {s: val_curve(runs[s]) for s in a.seeds}
        total = {s: per_epoch[s] * len(curves[s]) for s in a.seeds}
        final = {s: metrics(a.out, v, s) for s in a.seeds}
        m, h = stat([(final[s]["cider_d"] - xe[s]["cider_d"]) / (total[s] / 1000) for s in a.seeds])
        extra = [f"{statistics.mean(total.values()):,.0f}", f"{m * 1000:.3f}e-3 ± {h * 1000:.3f}e-3"]
        if have_bar:
            reached = {}
            for s in a.seeds:
                epoch = next((i + 1 for i, c in enumerate(curves[s]) if c >= bar[s]), None)
                reached[s] = None if epoch is None else epoch * per_epoch[s]
            missed = [s for s in a.seeds if reached[s] is None]
            if missed:
                extra.append(f"not reached (seeds {', '.join(missed)})")
            else:
                share = statistics.mean(reached[s] / bar_decodes[s] for s in a.seeds)
                extra.append(f"{statistics.mean(reached.values()):,.0f} ({100 * share:.0f}%)")
        else:
            extra.append("")
        row(label(v), v, final, extra)


if __name__ == "__main__":
    main()
