#!/usr/bin/env bash
# Async mode: does dropping rollouts older than max_policy_lag change what is learned? For each
# seed, the same run under `caprl local` (2 actors, 2 reward workers, NATS) in async mode, once
# with runtime.stale_rollouts = "drop" and once with "reweight"; prints per run the rollouts
# dropped or reweighted, the largest policy lag trained on, and the test CIDEr-D and mean caption
# length (beam 3).
#
#   cargo build --release && bash scripts/results/async_stale.sh
#
# Environment: SEEDS (default "1 2"), OUT (default runs/async-stale), CAPRL (default
# target/release/caprl). Arguments are extra `--set KEY=VALUE` overrides. Defaults as table.sh:
# the 2,000-image synthetic subset, fc-GRU of 256 units, 5 XE + 5 RL epochs, RL lr 3e-4.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEEDS="${SEEDS:-1 2}"
OUT="${OUT:-runs/async-stale}"
CAPRL="${CAPRL:-target/release/caprl}"
DATA=data/synth-2k
SETS=(--set "data.dir=$DATA" --set model.hidden=256 --set model.embed=256
      --set train.xe_epochs=5 --set train.rl_epochs=5 --set optim.rl_lr=3e-4
      --set 'runtime.mode="async"')
for kv in "$@"; do SETS+=(--set "$kv"); done

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
[ -e "$DATA/vocab.json" ] || "$CAPRL" data synth --out "$DATA" --train 2000 --val 300 --test 300
mkdir -p "$OUT"

for seed in $SEEDS; do
  for stale in drop reweight; do
    run="$OUT/$stale-$seed"
    [ -e "$OUT/$stale-$seed.json" ] && continue
    "$CAPRL" local -q --config configs/scst.toml --set "seed=$seed" --set "run_dir=$run" \
      --set "runtime.stale_rollouts=\"$stale\"" "${SETS[@]}"
    "$CAPRL" eval --checkpoint "$run/best-rl" --split test --beam 3 --json > "$OUT/$stale-$seed.json"
  done
done

python3 - "$OUT" $SEEDS <<'PY'
import json, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2:]
print("| run | rollouts dropped | rollouts reweighted | largest lag trained on | test CIDEr-D | mean length |")
print("|---|---:|---:|---:|---:|---:|")
for seed in seeds:
    for stale in ("drop", "reweight"):
        steps = [json.loads(l) for l in (out / f"{stale}-{seed}" / "run.jsonl").read_text().splitlines()]
        rl = [s for s in steps if s.get("type") == "step" and s.get("phase") == "rl"]
        m = json.loads((out / f"{stale}-{seed}.json").read_text())["metrics"]
        print(f"| {stale}, seed {seed} | {sum(s.get('dropped_stale', 0) for s in rl)} | "
              f"{sum(s.get('stale_reweighted', 0) for s in rl)} | {max(s.get('max_lag', 0) for s in rl)} | "
              f"{m['cider_d']:.3f} | {m['mean_len']:.2f} |")
PY
