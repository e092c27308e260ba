#!/usr/bin/env bash
# Reproduces the README's results table: for each seed, one XE model, then every RL objective
# from that XE checkpoint with its config under configs/, each evaluated on the test split with
# beam 3; prints mean ± spread over the seeds (scripts/results/table.py).
#
#   cargo build --release && bash scripts/results/table.sh
#
# Environment: SEEDS (default "1 2 3"), OBJECTIVES (default "scst sle mc-pg actor-critic"),
# OUT (default runs/table), CAPRL (default target/release/caprl). Arguments are extra
# `--set KEY=VALUE` overrides for every run. Defaults: the 2,000-image synthetic subset with a
# 256-unit decoder, 5 XE + 5 RL epochs at rl_lr 3e-4, so three seeds of five models take
# about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEEDS="${SEEDS:-1 2 3}"
OBJECTIVES="${OBJECTIVES:-scst sle mc-pg actor-critic}"
OUT="${OUT:-runs/table}"
CAPRL="${CAPRL:-target/release/caprl}"
DATA=data/synth-2k
SETS=(--set "data.dir=$DATA" --set model.hidden=256 --set train.xe_epochs=5
      --set train.rl_epochs=5 --set optim.rl_lr=3e-4)
for kv in "$@"; do SETS+=(--set "$kv"); done

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
[ -e "$DATA/vocab.json" ] || "$CAPRL" data synth --out "$DATA" --train 2000 --val 300 --test 300
mkdir -p "$OUT"

for seed in $SEEDS; do
  xe="$OUT/xe-$seed"
  "$CAPRL" train --config configs/scst.toml --objective xe --set "seed=$seed" \
    --set "run_dir=$xe" "${SETS[@]}"
  "$CAPRL" eval --checkpoint "$xe/best-xe" --split test --beam 3 --json > "$OUT/xe-$seed.json"
  for obj in $OBJECTIVES; do
    run="$OUT/$obj-$seed"
    "$CAPRL" train --config "configs/$obj.toml" --start-from "$xe/best-xe" --set "seed=$seed" \
      --set "run_dir=$run" "${SETS[@]}"
    "$CAPRL" eval --checkpoint "$run/best-rl" --split test --beam 3 --json > "$OUT/$obj-$seed.json"
  done
done
python3 scripts/results/table.py "$OUT" --seeds $SEEDS --objectives xe $OBJECTIVES
