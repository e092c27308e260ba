#!/usr/bin/env bash
# Runs benches/scst.rs (one SCST iteration of caprl's learner at the coco-10x5 shape) and its
# PyTorch peer (scst_torch.py) on 1 and 2 threads, ROUNDS times in turn (default 3), and prints
# both with the ratio (compare_scst.py); each side keeps its fastest round, so a burst of load
# from other tenants of a shared machine does not decide the ratio. Both read the synthetic
# COCO-profile data set in target/bench-data/coco-synth, made once if missing. Needs
# `pip install torch pycocoevalcap` (CPU is enough; PYTHON names the interpreter). Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
ROUNDS="${ROUNDS:-3}"
DATA=target/bench-data/coco-synth
out="$(mktemp -d)"
[ -f "$DATA/captions.json" ] ||
  cargo run --release -- data synth --profile coco --train 5000 --val 10 --test 10 --out "$DATA" -q
cargo bench --bench scst --no-run
for r in $(seq "$ROUNDS"); do
  for n in 1 2; do
    CAPRL_BENCH_DATA="$DATA" RAYON_NUM_THREADS=$n cargo bench --bench scst 2>&1 |
      tee "$out/caprl-$n-$r.txt" | grep -E "^scst/|time:" || true
    "$PY" scripts/peer/scst_torch.py --data "$DATA" --threads "$n" | tee -a "$out/peer.jsonl"
  done
done
"$PY" scripts/peer/compare_scst.py "$out"/caprl-*.txt "$out/peer.jsonl"
echo "raw figures: $out"
