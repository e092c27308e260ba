#!/usr/bin/env bash
# The step-against-its-floor page: `caprl bench transformer` at the reference COCO shape
# (6 + 6 layers, 36 regions of 2,048, 10,000 words) at every SIMD level this CPU runs, each
# with the multiply-add peak of its threads at that level, written with the machine, commit,
# date and command to docs/results/roofline/ and rendered into docs/results/roofline.md by
# scripts/results/render.py.
#
#   cargo build --release && bash scripts/results/roofline.sh
#
# REPS (default 3) timed runs per task after one warm-up, the median kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
REPS="${REPS:-3}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
OUT=docs/results/roofline
mkdir -p "$OUT"
levels=$(grep -qw avx512f /proc/cpuinfo && echo "avx512 avx2" || echo "avx2")
rm -f "$OUT/rows.jsonl.tmp"
for level in $levels; do
  CAPRL_SIMD=$level "$CAPRL" bench transformer --shape coco-ref \
    --tasks xe_step,greedy,sample_5,beam_5 --reps "$REPS" --warmup 1 --json -q >> "$OUT/rows.jsonl.tmp"
done
mv "$OUT/rows.jsonl.tmp" "$OUT/rows.jsonl"
record_run "$OUT" "$CAPRL" "CAPRL_SIMD=LEVEL caprl bench transformer --shape coco-ref --tasks xe_step,greedy,sample_5,beam_5 --reps $REPS --warmup 1 --json, for LEVEL in $levels"
python3 scripts/results/render.py roofline.md
cat docs/results/roofline.md
