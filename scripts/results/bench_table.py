#!/usr/bin/env python3
"""The performance results page in Markdown, rendered from `caprl bench all`'s files, never by hand.

Usage: python3 scripts/results/bench_table.py DIR [--out FILE.md]
Reads DIR/rows.json (`caprl bench all --json`), DIR/machine.json (`caprl machine --json`) and
DIR/run.json (command, commit, date), as scripts/results/bench_all.sh writes them. Without a
machine nothing is printed and the exit status is 2."""
import argparse
import json
import sys
from pathlib import Path


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        sys.stderr.write(f"bench_table: {path} is unreadable ({e}); nothing printed\n")
        sys.exit(2)


def number(v, decimals=1):
    return "—" if v is None else f"{v:,.{decimals}f}"


def render(d):
    machine, run, rows = load(d / "machine.json"), load(d / "run.json"), load(d / "rows.json")
    if not isinstance(machine, dict) or not machine.get("cpu"):
        sys.stderr.write(f"bench_table: {d / 'machine.json'} names no machine; nothing printed\n")
        sys.exit(2)
    simd = {"avx512": "AVX-512", "avx2": "AVX2"}.get(machine["simd"], machine["simd"])
    changes = " plus uncommitted changes" if run.get("uncommitted_changes") else ""
    out = [
        "# Performance results: `caprl bench all`",
        "",
        f"Measured on {machine['cpu']}, {machine['cores']} cores, SIMD level {simd}, "
        f"on {run['date']}, commit `{run['commit']}`{changes}, release build: `{run['command']}`.",
        "Regenerate on your machine with `cargo build --release && bash scripts/results/bench_all.sh`"
        " (this page is rendered from [bench-all/](bench-all/) by `scripts/results/bench_table.py`).",
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    page = render(args.dir)
    if args.out:
        args.out.write_text(page)
    else:
        sys.stdout.write(page)


if __name__ == "__main__":
    main()
