#!/usr/bin/env bash
# The performance results page: `caprl bench all --json` on this machine, with the machine, the
# commit, the date and the command, written to docs/results/bench-all/ (rows.json, machine.json,
# run.json) and rendered into docs/results/performance.md by scripts/results/render.py.
# tests/docs_results.rs checks that the page is the rendering of those files.
#
#   cargo build --release && bash scripts/results/bench_all.sh
#
# Needs nats-server on PATH (the NATS rows); pycocoevalcap importable by python3 gives the
# scoring row its reference.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
OUT=docs/results/bench-all
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
mkdir -p "$OUT"
"$CAPRL" bench all --json > "$OUT/rows.json.tmp"
mv "$OUT/rows.json.tmp" "$OUT/rows.json"
record_run "$OUT" "$CAPRL" "caprl bench all --json"
python3 scripts/results/render.py performance.md
cat docs/results/performance.md
