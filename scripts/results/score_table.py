"""The Python scorers' speed page (docs/results/python-score.md) in Markdown, from
scripts/results/python_score.sh's files: DIR/rows.json (`scripts/python/bench_score.py --json`),
DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import measured


def render(d):
    results, run = measured.load(d / "rows.json"), measured.load(d / "run.json")
    out = [
        "# Python scorers: `caprl.score` against the scorers it replaces",
        "",
        measured.line(d),
        f"caprl {results['caprl']} (release wheel), Python {results['python']}, "
        f"{run.get('reference_commit', 'ruotianluo/cider')}; each figure is the best of "
        f"{results['reps']} runs after a warm-up, in one Python process.",
        "Regenerate on your machine with `CIDER=PATH/TO/ruotianluo/cider bash "
        "scripts/results/python_score.sh` (this page is rendered from [python-score/](python-score/) "
        "by `scripts/results/render.py`).",
    ]
    for table in results["tables"]:
        ref = table["reference"]
        out += ["", f"## {table['title']}", ""]
        if table.get("note"):
            out += [table["note"], ""]
        out += [f"| scoring | {ref} | `caprl.score` (all cores) | speed-up | one thread | speed-up |",
                "|---|---:|---:|---:|---:|---:|"]
        for r in table["rows"]:
            ref_ms, ms, one = r["reference_ms"], r["caprl_ms"], r["caprl_one_thread_ms"]
            out.append(f"| {r['scoring']} | {ref_ms:,.2f} ms | {ms:,.2f} ms | **{ref_ms / ms:.0f}×** "
                       f"| {one:,.2f} ms | {ref_ms / one:.0f}× |")
    return "\n".join(out) + "\n"
