#!/usr/bin/env bash
# Runs benches/model.rs and the PyTorch peer (model_torch.py) on 1 and 2 threads at the shapes of
# benches/model_shapes.json, ROUNDS times in turn (default 3), and prints both with the ratio
# (compare_model.py); each side keeps its fastest round, so a burst of load from other tenants of
# a shared machine does not decide the ratio. SHAPES picks shapes by name, comma-separated
# (default: all; the bench reads it as CAPRL_BENCH_SHAPES). Needs `pip install torch` (CPU is
# enough; PYTHON names the interpreter). Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
ROUNDS="${ROUNDS:-3}"
SHAPES="${SHAPES:-}"
[ -z "$SHAPES" ] || export CAPRL_BENCH_SHAPES="$SHAPES"
# LEVEL=avx512|avx2|baseline holds caprl and PyTorch to one CPU level (level.sh).
source scripts/peer/level.sh
out="$(mktemp -d)"
cargo bench --bench model --no-run
for r in $(seq "$ROUNDS"); do
  for n in 1 2; do
    RAYON_NUM_THREADS=$n cargo bench --bench model 2>&1 | tee "$out/caprl-$n-$r.txt" | grep -E "^model/|time:" || true
    "$PY" scripts/peer/model_torch.py --threads "$n" --shape "$SHAPES" | tee -a "$out/peer.jsonl"
  done
done
"$PY" scripts/peer/compare_model.py "$out"/caprl-*.txt "$out/peer.jsonl"
echo "raw figures: $out"
