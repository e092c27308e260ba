#!/usr/bin/env bash
# The snapshot-delta page: `caprl bench delta` on the reference COCO-scale Transformer at the
# reference SCST learning rate (5e-6, configs/transformer-nsc.toml) and at the benchmark grid's
# RL rate (1e-4), written with the machine, commit, date and command to docs/results/delta/ and
# rendered into docs/results/delta.md by scripts/results/render.py.
#
#   cargo build --release && bash scripts/results/delta.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
STEPS="${STEPS:-6}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
OUT=docs/results/delta
mkdir -p "$OUT"
rm -f "$OUT/rows.jsonl.tmp"
for lr in 5e-6 1e-4; do
  "$CAPRL" bench delta --shape coco-ref --steps "$STEPS" --lr "$lr" --json -q \
    | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >> "$OUT/rows.jsonl.tmp"
done
mv "$OUT/rows.jsonl.tmp" "$OUT/rows.jsonl"
record_run "$OUT" "$CAPRL" "caprl bench delta --shape coco-ref --steps $STEPS --lr LR --json, for LR in 5e-6 1e-4"
python3 scripts/results/render.py delta.md
cat docs/results/delta.md
