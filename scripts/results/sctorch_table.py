"""The self-critical.pytorch page (docs/results/sctorch.md) in Markdown: its models trained on
the benchmark task by scripts/peer/sctorch_regions.sh (DIR/MODEL.json, DIR/machine.json,
DIR/run.json), beside caprl's models of the same kind from the benchmark grid
(docs/results/benchmark/runs). scripts/results/render.py prints it."""
import statistics
from pathlib import Path

import measured

# self-critical.pytorch's model -> (its name there, caprl's model of the same kind)
MODELS = {
    "fc": ("newfc (fc.yml, fc_nsc.yml)", "fc-gru"),
    "a2i2": ("att2in2 (a2i2.yml, a2i2_nsc.yml)", "att-gru"),
    "transformer": ("Transformer (transformer.yml, transformer_nsc.yml)", "transformer"),
}
COLUMNS = [("cider_d", "CIDEr-D all", 3), ("cider_d_seen", "seen", 3),
           ("cider_d_unseen", "unseen", 3), ("cider_d_tail", "tail", 3),
           ("bleu4", "BLEU-4", 3), ("mean_len", "mean length", 1)]


def cell(values, decimals):
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{decimals}f}"
    return f"{statistics.mean(values):.{decimals}f} ± {statistics.stdev(values):.{decimals}f}"


def caprl_runs(benchmark, model, objective):
    """caprl's runs of the models table for `model` and `objective`, one per seed."""
    return [measured.load(p) for p in sorted((benchmark / "runs").glob(
        f"models-{model}-{objective}-s*.json"))]


def render(d):
    run = measured.load(d / "run.json")
    benchmark = Path(d).parent / "benchmark"
    suite = measured.load(benchmark / "suite.json")
    out = [
        "# self-critical.pytorch on the benchmark task",
        "",
        measured.line(d),
        f"{run.get('reference_commit', 'ruotianluo/self-critical.pytorch')}, torch "
        f"{run.get('torch', '?')} on the CPU (`scripts/peer/sctorch_cpu.py`).",
        "Regenerate on your machine with `SCTORCH=PATH/TO/self-critical.pytorch PYTHON=... "
        "MODEL=fc bash scripts/peer/sctorch_regions.sh` (this page is rendered from "
        "[sctorch/](sctorch/) and [benchmark/](benchmark/) by `scripts/results/render.py`).",
        "",
        "Each implementation trains with its own recipe (learning rate, batch, schedule) on the "
        "same data (`caprl data synth --profile regions`, exported by "
        "`scripts/peer/export_sctorch.py`) for the same budget: XE, then SCST with the mean "
        "baseline of 5 samples (self-critical.pytorch's `new_self_critical`). The test split "
        "is decoded with beam 3; self-critical.pytorch's captions are scored by `caprl score` "
        "from their words, each subset as a corpus of its own, as `caprl eval` scores caprl's "
        "(from vocabulary ids). self-critical.pytorch sets no seed: one run per model. caprl's "
        "rows are the mean ± sd of the 3 seeds of [benchmark.md](benchmark.md), measured on the "
        "machines named there.",
        "",
        "| implementation, model | phase | epochs | " + " | ".join(c[1] for c in COLUMNS)
        + " | training min |",
        "|---|---|---:|" + "---:|" * len(COLUMNS) + "---:|",
    ]
    for name, (label, ours) in MODELS.items():
        path = Path(d) / f"{name}.json"
        if not path.exists():
            continue
        peer = measured.load(path)
        for phase, epochs, seconds, objective in (
                ("XE", peer["xe_epochs"], peer["xe_seconds"], "xe"),
                ("SCST", peer["rl_epochs"], peer["rl_seconds"], "scst-mean")):
            metrics = peer["xe" if objective == "xe" else "scst"]
            out.append(f"| self-critical.pytorch {label} | {phase} | {epochs} | "
                       + " | ".join(cell([metrics[k]], dec) if k in metrics else "–"
                                    for k, _, dec in COLUMNS)
                       + f" | {seconds / 60:.1f} |")
            runs = caprl_runs(benchmark, ours, objective)
            minutes = [r["train_seconds"] / 60 for r in runs if r.get("train_seconds")]
            ours_epochs = suite["xe_epochs"] if objective == "xe" else suite["rl_epochs"]
            out.append(f"| caprl {ours} ({len(runs)} seeds) | {phase} | {ours_epochs} | "
                       + " | ".join(cell([r["eval"]["metrics"][k] for r in runs
                                          if k in r["eval"]["metrics"]], dec)
                                    for k, _, dec in COLUMNS)
                       + f" | {cell(minutes, 1)} |")
    return "\n".join(out) + "\n"
