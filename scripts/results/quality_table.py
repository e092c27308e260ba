#!/usr/bin/env python3
"""Benchmark-task results tables in Markdown, rendered from the driver's JSON, never by hand.

Usage: python3 scripts/results/quality_table.py OUT_DIR [--out FILE.md] [--best-model]
(docs/results/benchmark.md is printed by scripts/results/render.py, which calls render() here.)
Reads OUT_DIR/suite.json and OUT_DIR/runs/*.json (one per finished run; a partial grid renders
what exists). Without a machine in suite.json nothing is printed and the exit status is 2."""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

MODEL_ORDER = ["fc-gru", "att-gru", "transformer"]
OBJ_ORDER = ["xe", "scst-greedy", "scst-mean", "grpo", "ppo", "gspo", "sle", "wtf-rl", "scst-async"]
METRICS = [  # (key in eval.metrics, column label, decimals)
    ("cider_d", "CIDEr-D all", 3), ("cider_d_seen", "CIDEr-D seen", 3),
    ("cider_d_unseen", "CIDEr-D unseen", 3), ("cider_d_tail", "CIDEr-D tail", 3),
    ("bleu4", "BLEU-4", 3), ("meteor", "METEOR", 3),
    ("div2_sample", "Div-2 (5 samples)", 3), ("mbleu4_sample", "mBLEU-4 (5 samples)", 3),
    ("r1_t2i", "R@1 t→i (%)", 1), ("mean_len", "mean length", 1)]
# Student t quantiles t_{0.975, df} (two-sided 95%) for df = 1..30; T975[df - 1].
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df):
    """t_{0.975, df}: the table up to 30, then the Cornish-Fisher expansion (error < 1e-4)."""
    z = 1.959964
    return T975[df - 1] if df <= len(T975) else (
        z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2))


def load_suite(out):
    """suite.json as a dict; exits 2, printing nothing but an error, when it names no machine."""
    path, suite, why = out / "suite.json", {}, "names no machine"
    try:
        suite = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        why = f"unreadable ({e})"
    machine = suite.get("machine") if isinstance(suite, dict) else None
    if not isinstance(machine, dict) or not machine.get("cpu"):
        sys.stderr.write(f"quality_table: {path} {why}; nothing printed without a machine\n")
        sys.exit(2)
    return suite


def load_runs(out):
    """{(table, model, objective): {seed: run}} from OUT_DIR/runs/*.json; skips bad files. Each
    run keeps its file's name as "file" (its captions have the same name in OUT_DIR/captions)."""
    groups = {}
    for path in sorted((out / "runs").glob("*.json")):
        try:
            run = json.loads(path.read_text())
            key = (run["table"], run["model"], run["objective"])
            float(run["eval"]["metrics"]["cider_d"])  # present and numeric
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.stderr.write(f"quality_table: skipping {path}: {type(e).__name__} {e}\n")
            continue
        seeds = groups.setdefault(key, {})
        if run.get("seed") in seeds:
            sys.stderr.write(f"quality_table: {path}: seed {run.get('seed')} twice, this file wins\n")
        run["file"] = path.name
        seeds[run.get("seed")] = run
    return groups


def order(items, first):
    """Items in the order of `first`, then the rest sorted."""
    return sorted(items, key=lambda x: (first.index(x) if x in first else len(first), x))


def runs_of(groups, table, model, obj):
    """(runs sorted by seed, borrowed): the objectives table falls back to the models table's
    xe and scst-mean rows (the same XE model and the same baseline)."""
    seeds, borrowed = groups.get((table, model, obj)), False
    if not seeds and table == "objectives" and obj in ("xe", "scst-mean"):
        seeds, borrowed = groups.get(("models", model, obj)), True
    ordered = sorted(seeds or {}, key=lambda s: str(s).zfill(9))  # numeric order of int seeds
    return [seeds[s] for s in ordered], borrowed and bool(seeds)


def stats(runs, key="cider_d"):
    """(mean, sample sd or None for one value, n), or None when no run has the metric."""
    v = [r["eval"]["metrics"][key] for r in runs if r["eval"]["metrics"].get(key) is not None]
    return (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else None, len(v)) if v else None


def cell(runs, key, dec):
    """'mean ± sd' ('± –' for one seed; '–' when missing; '(n=k)' when some seeds lack it)."""
    s = stats(runs, key)
    if s is None:
        return "–"
    sd = "–" if s[1] is None else f"{s[1]:.{dec}f}"
    return f"{s[0]:.{dec}f} ± {sd}" + (f" (n={s[2]})" if s[2] < len(runs) else "")


def delta_cell(runs, xe_runs):
    """Paired per-seed CIDEr-D change over XE: mean [95% t CI], or 'mean [n=1]'."""
    xe = {r.get("seed"): r["eval"]["metrics"]["cider_d"] for r in xe_runs}
    d = [r["eval"]["metrics"]["cider_d"] - xe[r.get("seed")] for r in runs if r.get("seed") in xe]
    if not d:
        return "–"
    m, n = statistics.mean(d), len(d)
    if n == 1:
        return f"{m:+.3f} [n=1]"
    h = t975(n - 1) * statistics.stdev(d) / math.sqrt(n)
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]" + (f" (n={n})" if n < len(runs) else "")


def lr_text(lr):
    """5e-4 rather than 0.0005 ('–' when missing)."""
    mant, exp = f"{float(lr or 0):e}".split("e")
    return "–" if lr is None else f"{float(mant):g}e{int(exp)}"


def table_rows(groups, table):
    """[(model, objective, runs, borrowed)] of one table in display order."""
    rows = []
    for model in order({m for t, m, _ in groups if t == table}, MODEL_ORDER):
        objs = {o for t, m, o in groups if t == table and m == model}
        if table == "objectives":
            objs |= {o for o in ("xe", "scst-mean") if ("models", model, o) in groups}
        for obj in order(objs, OBJ_ORDER):
            rows.append((model, obj, *runs_of(groups, table, model, obj)))
    return rows


def render_table(title, groups, table):
    """One results table as Markdown lines."""
    lines = [f"## {title}", ""]
    rows = table_rows(groups, table)
    if not rows:
        return lines + ["(no finished runs)", ""]
    cols = ["model", "objective", "params (M)", "XE lr", "seeds"] + [c for _, c, _ in METRICS]
    lines += ["| " + " | ".join(cols + ["Δ CIDEr-D vs XE [95% CI]", "train min"]) + " |",
              "|---|---|" + "---:|" * (len(cols) - 2 + 2)]
    for model, obj, runs, borrowed in rows:
        first = runs[0]
        params = f"{first['params'] / 1e6:.2f}" if first.get("params") is not None else "–"
        delta = "—" if obj == "xe" else delta_cell(runs, runs_of(groups, table, model, "xe")[0])
        mins = [r["train_seconds"] / 60 for r in runs if r.get("train_seconds") is not None]
        cells = [model, obj + ("†" if borrowed else ""), params, lr_text(first.get("xe_lr")),
                 str(len(runs))] + [cell(runs, k, d) for k, _, d in METRICS]
        cells += [delta, f"{statistics.mean(mins):.1f}" if mins else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    if any(r[3] for r in rows):
        lines += ["", "† row taken from the Models table (same XE model)."]
    return lines + [""]


def header(suite, groups):
    """Header line, scoring signature and eval settings."""
    mc, g = suite["machine"], suite.get
    lines = ["# Benchmark-task results", "",
             f"Machine: {mc['cpu']}, {mc.get('cores', '?')} cores, SIMD {mc.get('simd', '?')}, "
             f"{mc.get('gpu') or 'no GPU'} · date {g('date', '?')} · commit {g('commit', '?')} · mode "
             f"{g('mode', '?')} · command `{g('command', '?')}` · data {g('data', '?')}", ""]
    lines += machines_line(groups)
    sig = ", ".join(f"{k}={v}" for k, v in (suite.get("signature") or {}).items())
    lines += [f"Scoring signature: {sig or '(none recorded)'}", ""]
    evs = [r["eval"] for seeds in groups.values() for r in seeds.values()]
    split, beam = (", ".join(sorted({str(e.get(k)) for e in evs})) or "–" for k in ("split", "beam"))
    lines += [f"Eval split: {split}; beam: {beam}. Cells: mean ± sample sd over seeds (n−1); "
              "Δ: mean of paired per-seed differences [95% Student t CI].", ""]
    return lines


def machines_line(groups):
    """Where the runs ran, when a grid was finished over sittings on more than one machine (each
    run's file names its own); none when every run names the suite's machine or none."""
    seen = {}
    for seeds in groups.values():
        for run in seeds.values():
            mc = run.get("machine")
            if isinstance(mc, dict) and mc.get("cpu"):
                name = f"{mc['cpu']}, {mc.get('cores', '?')} cores, SIMD {mc.get('simd', '?')}"
                seen[name] = seen.get(name, 0) + 1
    if len(seen) < 2:
        return []
    parts = "; ".join(f"{name}: {k} runs" for name, k in sorted(seen.items()))
    return [f"Runs made on more than one machine ({parts}); each run's training minutes are its "
            "own machine's.", ""]


def ceiling_rows(suite):
    """The data set's ceilings.json as {"human": {...}, "oracle": {...}}: CIDEr-D and BLEU-4 on
    all test images, plus CIDEr-D per subset as cider_d_<subset>."""
    ceil = suite.get("ceilings") or {}
    rows = {}
    for name in ("human", "oracle"):
        row = dict((ceil.get("all") or {}).get(name) or {})
        for subset, part in (ceil.get("subsets") or {}).items():
            if (part or {}).get(name):
                row[f"cider_d_{subset}"] = part[name].get("cider_d")
        if row:
            rows[name] = row
    return rows


def render_ceilings(suite):
    """Human and oracle ceilings (seen/unseen columns only when some ceiling has them)."""
    ceil = ceiling_rows(suite)
    if not ceil:
        return ["## Ceilings", "", "(none recorded)", ""]
    images = ((suite.get("ceilings") or {}).get("all") or {}).get("images")
    keys = [("cider_d", "CIDEr-D"), ("bleu4", "BLEU-4")]
    extra = (("cider_d_seen", "CIDEr-D seen"), ("cider_d_unseen", "CIDEr-D unseen"),
             ("cider_d_tail", "CIDEr-D tail"))
    keys += [(k, lab) for k, lab in extra if any(k in (c or {}) for c in ceil.values())]
    note = (suite.get("ceilings") or {}).get("scoring")
    lines = ["## Ceilings", ""]
    if images or note:
        lines += [f"Test split ({images} images); {note}.", ""]
    lines += ["| ceiling | " + " | ".join(lab for _, lab in keys) + " |",
              "|---|" + "---:|" * len(keys)]
    for name in order(ceil, ["human", "oracle"]):
        c = ceil[name] or {}
        lines.append(f"| {name} | " + " | ".join(
            f"{c[k]:.3f}" if c.get(k) is not None else "–" for k, _ in keys) + " |")
    return lines + [""]


def sd_gap(a, b, label, ok):
    """(text, ok(gap) or None, reason): CIDEr-D of row a over row b in pooled seed sd."""
    sa, sb = stats(a), stats(b)
    if sa is None or sb is None:
        return f"{label} missing", None, "row missing"
    diff = sa[0] - sb[0]
    if sa[1] is None or sb[1] is None:
        return f"{label} {diff:+.3f} (< 2 seeds)", None, "< 2 seeds"
    pooled = math.sqrt((sa[1] ** 2 + sb[1] ** 2) / 2)
    gap = diff / pooled if pooled > 0 else math.copysign(math.inf, diff)
    return f"{label} {diff:+.3f} = {gap:+.2f} sd (pooled sd {pooled:.3f})", ok(gap), None


def check(statement, items, need_all=True):
    """One Checks line from [(text, ok or None, reason)]: yes, no or 'not measured (reasons)'.
    need_all: every measured item must hold; otherwise one holding item suffices."""
    oks = [ok for _, ok, _ in items if ok is not None]
    why = sorted({r for _, ok, r in items if ok is None and r})
    decided = (not need_all) in oks  # one failing item (need_all), or one holding item (not)
    if decided or (oks and not why):
        v = "yes" if decided != need_all else "no"
    else:
        v = "not measured (" + (", ".join(why) or "rows missing") + ")"
    return f"- {statement}: {'; '.join(t for t, _, _ in items) or '–'} → {v}"


def cv_item(key, seeds):
    """Check (c) for one row: seed sd as a percentage of the mean CIDEr-D."""
    mean, sd, _ = stats(list(seeds.values()))
    if sd is None:
        return f"{'/'.join(key)} (< 2 seeds)", None, "< 2 seeds"
    if mean == 0:
        return f"{'/'.join(key)} mean 0", None, "mean CIDEr-D 0"
    return f"{'/'.join(key)} {100 * sd / mean:.1f}%", sd <= 0.02 * mean, None


def oracle_item(suite, groups):
    """Check (d): the best row's mean CIDEr-D against the oracle ceiling."""
    oracle = (ceiling_rows(suite).get("oracle") or {}).get("cider_d")
    best = max(((stats(list(s.values()))[0], k) for k, s in groups.items()), default=None)
    if best is None or not oracle:
        return "–", None, "no runs" if best is None else "no oracle ceiling"
    below = 1 - best[0] / oracle
    return (f"best {'/'.join(best[1])} {best[0]:.3f} vs oracle {oracle:.3f}: "
            f"{100 * below:.1f}% below", below >= 0.10, None)


def seen_item(model, obj, runs):
    """Check (e) for one row: mean unseen minus mean seen CIDEr-D."""
    seen, unseen = stats(runs, "cider_d_seen"), stats(runs, "cider_d_unseen")
    if seen is None or unseen is None:
        return f"{model}/{obj} seen/unseen missing", None, "seen/unseen missing"
    return f"{model}/{obj} unseen − seen {unseen[0] - seen[0]:+.3f}", unseen[0] < seen[0], None


def versus_sync(tag, model, row, base):
    """Checks (f)-(h) for one model: the objective's row against scst-mean's."""
    if not row or not base:
        return f"{model}: scst-mean missing", None, "row missing"
    if tag == "h":
        return sd_gap(row, base, f"{model}: async − sync", lambda g: abs(g) <= 1)
    key = "div2_sample" if tag == "f" else "r1_t2i"
    r, rb = stats(row, key), stats(base, key)
    if r is None or rb is None or rb[0] == 0:
        return f"{model}: {key} missing", None, f"{key} missing"
    ratio = r[0] / rb[0]
    if tag == "g":
        return f"{model}: R@1 {r[0]:.1f} vs {rb[0]:.1f} = {ratio:.2f}×", ratio >= 1.5, None
    c, cb = stats(row)[0], stats(base)[0]
    if cb == 0:
        return f"{model}: scst-mean CIDEr-D is 0", None, "CIDEr-D 0"
    cost = (cb - c) / cb
    return (f"{model}: Div-2 {r[0]:.3f} vs {rb[0]:.3f} = {ratio:.2f}×, CIDEr-D {c:.3f} vs "
            f"{cb:.3f} = {100 * cost:+.1f}% cost", ratio >= 1.2 and cost <= 0.05, None)


def render_checks(suite, groups):
    """The Checks section, every figure computed from the runs and the ceilings."""
    def get(model, obj, table="models"):
        """A row's runs; checks on the objectives table fall back to the models table."""
        return runs_of(groups, table, model, obj)[0] or runs_of(groups, "models", model, obj)[0]
    models = order({m for _, m, _ in groups}, MODEL_ORDER)
    lines = ["## Checks", "",
             check("(a) att-gru and transformer beat fc-gru after XE by ≥ 3 pooled seed sd",
                   [sd_gap(get(m, "xe"), get("fc-gru", "xe"), f"{m} − fc-gru", lambda g: g >= 3)
                    for m in ("att-gru", "transformer")]),
             check("(b) SCST (scst-mean) beats XE by ≥ 3 pooled sd for every model",
                   [sd_gap(get(m, "scst-mean"), get(m, "xe"), f"{m} scst-mean − xe",
                           lambda g: g >= 3) for m in models]),
             check("(c) seed sd ≤ 2% of mean CIDEr-D for every xe and scst-mean row",
                   [cv_item(k, groups[k]) for k in sorted(groups) if k[2] in ("xe", "scst-mean")]),
             check("(d) best trained model's CIDEr-D ≥ 10% below the oracle ceiling",
                   [oracle_item(suite, groups)]),
             check("(e) unseen CIDEr-D below seen for at least one model",
                   [seen_item(*row[:3]) for row in table_rows(groups, "models")], False)]
    for tag, obj, statement in (("f", "sle", "SLE Div-2 ≥ 1.2× scst-mean's and CIDEr-D cost ≤ 5%"),
                                ("g", "wtf-rl", "WTF-RL R@1 ≥ 1.5× scst-mean's"),
                                ("h", "scst-async", "scst-async within 1 sd of scst-mean (sync)")):
        items = [versus_sync(tag, m, get(m, obj, "objectives"), get(m, "scst-mean", "objectives"))
                 for m in models if get(m, obj, "objectives")]
        lines.append(check(f"({tag}) {statement}", items))
    return lines + [""]


def best_model(groups):
    """The model of the models table with the highest mean test CIDEr-D after SCST (after XE
    where no SCST run has finished), or None before any run."""
    for obj in ("scst-mean", "xe"):
        scored = [(stats(list(seeds.values()))[0], model)
                  for (table, model, o), seeds in groups.items() if table == "models" and o == obj]
        if scored:
            return max(scored)[1]
    return None


def render(out_dir):
    """The whole page: header, ceilings, the models and objectives tables, the target checks."""
    suite, groups = load_suite(out_dir), load_runs(out_dir)
    lines = header(suite, groups) + render_ceilings(suite)
    lines += render_table("Models (XE, then SCST with the mean baseline)", groups, "models")
    lines += render_table("Objectives (from the same XE model)", groups, "objectives")
    lines += render_checks(suite, groups)
    return "\n".join(lines).rstrip() + "\n"


def main():
    """Parse arguments, render, print or write."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    ap.add_argument("--best-model", action="store_true",
                    help="print only the best model of the models table (for the objectives)")
    a = ap.parse_args()
    if a.best_model:
        best = best_model(load_runs(a.out_dir))
        if best is None:
            sys.exit("quality_table: no finished run of the models table to choose from")
        print(best)
        return
    (a.out.write_text if a.out else sys.stdout.write)(render(a.out_dir))


if __name__ == "__main__":
    main()
