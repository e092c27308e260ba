"""The performance results page (docs/results/performance.md) in Markdown, from `caprl bench
all`'s files as scripts/results/bench_all.sh writes them: DIR/rows.json (`caprl bench all
--json`), DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import measured


def number(v, decimals=1):
    return "—" if v is None else f"{v:,.{decimals}f}"


def render(d):
    rows = measured.load(d / "rows.json")
    out = [
        "# Performance results: `caprl bench all`",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash scripts/results/bench_all.sh`"
        " (this page is rendered from [bench-all/](bench-all/) by `scripts/results/render.py`).",
        "",
        "The sizes are small, so that the set runs in minutes; ratio above 1 means caprl is faster",
        "than the reference.",
        "",
        "| benchmark | caprl | unit | reference | reference value | ratio |",
        "|---|---:|---|---|---:|---:|",
    ]
    for r in rows:
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.2f}×"
        out.append(f"| {r['name']} | {number(r['ours'])} | {r['unit']} | "
                   f"{r.get('reference_name') or '—'} | {number(r.get('reference'))} | {ratio} |")
    return "\n".join(out) + "\n"
