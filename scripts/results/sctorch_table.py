"""The self-critical.pytorch page (docs/results/sctorch.md) in Markdown: its models trained on
the benchmark task by scripts/peer/sctorch_regions.sh, one directory per model
(DIR/MODEL/result.json with that run's machine.json and run.json), beside caprl's models of the
same kind from the benchmark grid (docs/results/benchmark/runs). scripts/results/render.py
prints it."""
import json
import statistics
from pathlib import Path

import measured
import quality_table

# self-critical.pytorch's model -> (its name there, caprl's model of the same kind)
MODELS = {
    "fc": ("newfc (fc.yml, fc_nsc.yml)", "fc-gru"),
    "a2i2": ("att2in2 (a2i2.yml, a2i2_nsc.yml)", "att-gru"),
    "transformer": ("Transformer (transformer.yml, transformer_nsc.yml)", "transformer"),
}
COLUMNS = [("cider_d", "CIDEr-D all", 3), ("cider_d_seen", "seen", 3),
           ("cider_d_unseen", "unseen", 3), ("cider_d_tail", "tail", 3),
           ("bleu4", "BLEU-4", 3), ("meteor", "METEOR", 3), ("mean_len", "mean length", 1)]


def spread(values, dec):
    """caprl's values over its seeds: mean ± sd, the value for one seed, '–' for none."""
    if len(values) < 2:
        return f"{values[0]:.{dec}f}" if values else "–"
    return f"{statistics.mean(values):.{dec}f} ± {statistics.stdev(values):.{dec}f}"


def minutes(runs):
    """caprl's training minutes over its seeds."""
    return spread([r["train_seconds"] / 60 for r in runs if r.get("train_seconds")], 1)


def distinct_peer(directory, phase):
    """The peer's distinct test captions of one phase (xe, scst), '–' where none were kept."""
    path = directory / f"captions-{phase}.json"
    return str(len(set(json.loads(path.read_text()).values()))) if path.exists() else "–"


def distinct_ours(benchmark, runs):
    """caprl's distinct test captions over its seeds, from the captions kept beside each run."""
    paths = [benchmark / "captions" / r["file"] for r in runs]
    return spread([len({c["caption"] for c in json.loads(p.read_text())})
                   for p in paths if p.exists()], 0)


def measured_models(d):
    """[(name, its label, caprl's model, its directory)] of the models measured in `d`."""
    return [(name, label, ours, Path(d) / name) for name, (label, ours) in MODELS.items()
            if (Path(d) / name / "result.json").exists()]


def render(d):
    benchmark = Path(d).parent / "benchmark"
    suite, groups = quality_table.load_suite(benchmark), quality_table.load_runs(benchmark)
    out = ["# self-critical.pytorch on the benchmark task", ""]
    for name, label, _, directory in measured_models(d):
        run = measured.load(directory / "run.json")
        out.append(f"- {label}: {measured.line(directory)} "
                   f"{run.get('reference_commit', 'ruotianluo/self-critical.pytorch')}, torch "
                   f"{run.get('torch', '?')} on the CPU (`scripts/peer/sctorch_cpu.py`)."
                   + "".join(f" {key.capitalize()}: `{run[key]}`." for key in ("shape", "schedule")
                             if key in run))
    out += [
        "",
        "Regenerate on your machine with `SCTORCH=PATH/TO/self-critical.pytorch PYTHON=... "
        "MODEL=fc|a2i2|transformer bash scripts/peer/sctorch_regions.sh` (this page is rendered "
        "from [sctorch/](sctorch/) and [benchmark/](benchmark/) by `scripts/results/render.py`; "
        "each model's test captions are kept beside its scores).",
        "",
        "Each implementation trains with its own recipe (learning rate, batch, schedule) on the "
        "same data (`caprl data synth --profile regions`, exported by "
        "`scripts/peer/export_sctorch.py`) for the same budget: XE, then SCST with the mean "
        "baseline of 5 samples (self-critical.pytorch's `new_self_critical`). The test split "
        "is decoded with beam 3; self-critical.pytorch's captions are scored by `caprl score` "
        "from their words, each subset as a corpus of its own, as `caprl eval` scores caprl's "
        "(from vocabulary ids). self-critical.pytorch sets no seed: one run per model. caprl's "
        "rows are the mean ± sd of the 3 seeds of [benchmark.md](benchmark.md), measured on the "
        "machines named there. Distinct captions: how many different captions the model "
        "wrote for the test split's images.",
        "",
        "| implementation, model | phase | epochs | " + " | ".join(c[1] for c in COLUMNS)
        + " | distinct captions | training min |",
        "|---|---|---:|" + "---:|" * len(COLUMNS) + "---:|---:|",
    ]
    for name, label, ours, directory in measured_models(d):
        peer = measured.load(directory / "result.json")
        for phase, epochs, seconds, objective in (
                ("XE", peer["xe_epochs"], peer["xe_seconds"], "xe"),
                ("SCST", peer["rl_epochs"], peer["rl_seconds"], "scst-mean")):
            key = "xe" if objective == "xe" else "scst"  # result.json's and the captions' name
            metrics = peer[key]
            out.append(f"| self-critical.pytorch {label} | {phase} | {epochs} | "
                       + " | ".join(f"{metrics[k]:.{dec}f}" if k in metrics else "–"
                                    for k, _, dec in COLUMNS)
                       + f" | {distinct_peer(directory, key)}"
                       + f" | {seconds / 60:.1f} |")
            runs, _ = quality_table.runs_of(groups, "models", ours, objective)
            ours_epochs = suite["xe_epochs"] if objective == "xe" else suite["rl_epochs"]
            out.append(f"| caprl {ours} ({len(runs)} seeds) | {phase} | {ours_epochs} | "
                       + " | ".join(quality_table.cell(runs, k, dec) for k, _, dec in COLUMNS)
                       + f" | {distinct_ours(benchmark, runs)} | {minutes(runs)} |")
    return "\n".join(out) + "\n"
