#!/usr/bin/env bash
# The performance results page: `caprl bench all --json` on this machine, with the machine, the
# commit, the date and the command, written to docs/results/bench-all/ (rows.json, machine.json,
# run.json) and rendered into docs/results/performance.md by scripts/results/bench_table.py.
# tests/docs_results.rs checks that the page is the rendering of those files.
#
#   cargo build --release && bash scripts/results/bench_all.sh
#
# Needs nats-server on PATH (the NATS rows); pycocoevalcap importable by python3 gives the
# scoring row its reference.
set -euo pipefail
cd "$(dirname "$0")/../.."
CAPRL="${CAPRL:-target/release/caprl}"
OUT="${OUT:-docs/results/bench-all}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
mkdir -p "$OUT"
"$CAPRL" bench all --json > "$OUT/rows.json.tmp"
"$CAPRL" machine --json > "$OUT/machine.json.tmp"
commit=$(git rev-parse --short=12 HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo true || echo false)
printf '{\n  "command": "caprl bench all --json",\n  "commit": "%s",\n  "uncommitted_changes": %s,\n  "date": "%s"\n}\n' \
  "$commit" "$dirty" "$(date -u +%F)" > "$OUT/run.json.tmp"
for f in rows machine run; do mv "$OUT/$f.json.tmp" "$OUT/$f.json"; done
python3 scripts/results/bench_table.py "$OUT" --out docs/results/performance.md
cat docs/results/performance.md
