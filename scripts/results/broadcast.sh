#!/usr/bin/env bash
# The policy-broadcast page: `caprl bench broadcast` on the reference COCO-scale Transformer at
# the reference SCST learning rate (5e-6), bf16 snapshots in version chains of deltas, to 1, 4
# and 16 readers through a real nats-server, each reader fetching its own copy and then 4
# readers per host sharing a cache, at AVX-512 (where the CPU has it) and AVX2; written with the machine, commit, date and command to
# docs/results/broadcast/ and rendered into docs/results/broadcast.md by
# scripts/results/render.py.
#
#   cargo build --release && bash scripts/results/broadcast.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
VERSIONS="${VERSIONS:-4}"
READERS="${READERS:-1,4,16}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
OUT=docs/results/broadcast
mkdir -p "$OUT"
rm -f "$OUT/rows.jsonl.tmp"
# Every SIMD level this CPU runs from AVX2 up (the delta's byte planes are compiled per level).
widest=$("$CAPRL" machine --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["simd_detected"])')
levels=avx2
[ "$widest" = avx512 ] && levels="avx512 avx2"
for level in $levels; do
  for per_host in 0 4; do
    CAPRL_SIMD=$level "$CAPRL" bench broadcast --shape coco-ref --versions "$VERSIONS" \
      --readers "$READERS" --readers-per-host "$per_host" --json -q \
      | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >> "$OUT/rows.jsonl.tmp"
  done
done
mv "$OUT/rows.jsonl.tmp" "$OUT/rows.jsonl"
record_run "$OUT" "$CAPRL" "CAPRL_SIMD=LEVEL caprl bench broadcast --shape coco-ref --versions $VERSIONS --readers $READERS --readers-per-host K --json, for LEVEL in $levels, K in 0 4"
python3 scripts/results/render.py broadcast.md
cat docs/results/broadcast.md
