#!/usr/bin/env bash
# Runs benches/model.rs and the PyTorch peer on 1 and 2 threads and prints both with the ratio.
# Needs `pip install torch` (CPU is enough). Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
out="$(mktemp -d)"
for n in 1 2; do
  RAYON_NUM_THREADS=$n cargo bench --bench model 2>&1 | tee "$out/caprl-$n.txt" | grep -E "time:" || true
  "$PY" scripts/peer/model_torch.py --threads "$n" | tee -a "$out/peer.jsonl"
done
"$PY" scripts/peer/compare_model.py "$out/caprl-1.txt" "$out/caprl-2.txt" "$out/peer.jsonl"
