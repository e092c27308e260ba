#!/usr/bin/env bash
# The in-process SCST step of the reference Transformer (configs/transformer-coco.toml, 6 + 6
# layers, 10 images x 5 samples, mean baseline) three ways, on the synthetic COCO-profile set
# (vocabulary 10,451, 36 x 2,048 regions; made once in target/bench-data/coco-synth):
#   1. `caprl bench pipeline --modes in-process`: the whole step (learner, actor and reward
#      worker in one process, snapshot broadcast included), STEPS steps from a fresh policy;
#   2. `caprl bench transformer --shape coco-ref`: its parts alone (xe_step = the 50-caption
#      forward/backward/AdamW, sample_5 = the actor's decode);
#   3. scst_transformer_torch.py: self-critical.pytorch's new-self-critical iteration in
#      PyTorch on THREADS threads (default 2: caprl's one process uses both cores too).
# Prints each and the ratios. LEVEL=avx512|avx2|baseline holds both sides to one CPU level
# (level.sh). Needs `pip install torch pycocoevalcap` (PYTHON names the interpreter).
# Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
STEPS="${STEPS:-6}"
THREADS="${THREADS:-2}"
CAPRL="${CAPRL:-target/release/caprl}"
DATA=target/bench-data/coco-synth
source scripts/peer/level.sh
out="$(mktemp -d)"
[ -x "$CAPRL" ] || cargo build --release
[ -f "$DATA/captions.json" ] ||
  "$CAPRL" data synth --profile coco --train 5000 --val 10 --test 10 --out "$DATA" -q
"$CAPRL" --config configs/transformer-coco.toml --set "data.dir=\"$DATA\"" \
  --set 'train.objective="scst"' --set 'train.baseline="mean"' -q \
  bench pipeline --steps "$STEPS" --modes in-process --json "$out/pipeline.json" | tee "$out/pipeline.md"
"$CAPRL" bench transformer --shape coco-ref --tasks xe_step,sample_5 --reps 5 --json -q |
  tee "$out/parts.json"
(cd scripts/peer && "$PY" scst_transformer_torch.py --data "../../$DATA" --threads "$THREADS") |
  tee "$out/peer.json"
"$PY" - "$out" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
run = json.loads((out / "pipeline.json").read_text())[0]
parts = json.loads((out / "parts.json").read_text().splitlines()[0])
peer = json.loads((out / "peer.json").read_text().splitlines()[-1])
step, later = run["step_seconds"], run["later_step_seconds"]
score = run["stages"].get("reward-worker/score", [0.0])[0]
summed = parts["xe_step"] + parts["sample_5"] + score
print(f"caprl in-process step: {step:.2f} s (steps after the first: {later:.2f} s)")
print(f"its parts (bench transformer xe_step {parts['xe_step']:.2f} + sample_5 "
      f"{parts['sample_5']:.2f} + score {score:.3f}): {summed:.2f} s; "
      f"step / parts = {later / summed:.2f}x (steps after the first), {step / summed:.2f}x (all)")
print(f"self-critical.pytorch-style iteration ({peer['threads']} threads, torch {peer['torch']}, "
      f"{peer['cpu_capability']}): {peer['scst_iteration']:.2f} s (sample {peer['sample']:.2f}, "
      f"reward {peer['reward']:.3f}, update {peer['update']:.2f}); caprl is "
      f"{peer['scst_iteration'] / later:.2f}x faster (steps after the first), "
      f"{peer['scst_iteration'] / step:.2f}x (all)")
PY
echo "raw figures: $out"
