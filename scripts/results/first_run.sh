#!/usr/bin/env bash
# The README's first table: `caprl run` with the defaults on the generated data set, its printed
# table and the machine that printed it, written to docs/results/first-run/ (table.txt,
# machine.json). tests/docs_results.rs checks that the README shows exactly that table and names
# that machine.
#
#   cargo build --release && bash scripts/results/first_run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CAPRL="${CAPRL:-target/release/caprl}"
OUT="${OUT:-docs/results/first-run}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
mkdir -p "$OUT"
run_dir=$(mktemp -d)
trap 'rm -rf "$run_dir"' EXIT
# The table without its run directory (a temporary one) and the blank lines around it.
"$CAPRL" run -q --set "run_dir=\"$run_dir/run\"" | sed '/^run dir: /d' | sed -e '/./,$!d' \
  | sed -e ':a' -e '/^\n*$/{$d;N;ba' -e '}' > "$OUT/table.txt.tmp"
"$CAPRL" machine --json > "$OUT/machine.json.tmp"
mv "$OUT/table.txt.tmp" "$OUT/table.txt"
mv "$OUT/machine.json.tmp" "$OUT/machine.json"
cat "$OUT/table.txt"
