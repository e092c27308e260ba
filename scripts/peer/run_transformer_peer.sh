#!/usr/bin/env bash
# Runs `caprl bench transformer` and its PyTorch peer (transformer_torch.py) on 1 and 2 threads
# at the synthetic and COCO shapes, ROUNDS times in turn (default 3), and prints both with the
# ratio (compare_transformer.py); each side keeps its fastest round, so a burst of load from
# other tenants of a shared machine does not decide the ratio. Needs `pip install torch` (CPU
# is enough; PYTHON names the interpreter). Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
ROUNDS="${ROUNDS:-3}"
SHAPES="${SHAPES:-synth coco}"
CAPRL="${CAPRL:-target/release/caprl}"
# LEVEL=avx512|avx2|baseline holds caprl and PyTorch to one CPU level (level.sh).
source scripts/peer/level.sh
out="$(mktemp -d)"
[ -x "$CAPRL" ] || cargo build --release
for r in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    for n in 1 2; do
      RAYON_NUM_THREADS=$n "$CAPRL" bench transformer --shape "$shape" --json | tee -a "$out/caprl.jsonl"
      "$PY" scripts/peer/transformer_torch.py --threads "$n" --shape "$shape" | tee -a "$out/peer.jsonl"
    done
  done
done
"$PY" scripts/peer/compare_transformer.py "$out/caprl.jsonl" "$out/peer.jsonl"
echo "raw figures: $out"
