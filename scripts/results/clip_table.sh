#!/usr/bin/env bash
# Reproduces the README's seed-004 table: two dual encoders (one rewarded against, one frozen
# for evaluation), then per seed one XE model and, from it, WTF (also at two larger learning
# rates), WTF-RL and WTF-RL with α = 1 (no discriminator), each evaluated on the test split with
# beam 3 and R@k from the evaluation encoder; prints mean ± spread over the seeds
# (scripts/results/table.py --clip).
#
#   cargo build --release && bash scripts/results/clip_table.sh
#
# Environment: SEEDS (default "1 2 3"), OUT (default runs/clip-table), CAPRL (default
# target/release/caprl), VARIANTS (default "wtf wtf-lr1e-5 wtf-lr2e-5 wtf-rl wtf-rl-a1"; the
# encoders and XE models already in OUT are reused, so a subset reruns only those rows). Arguments are extra `--set KEY=VALUE` overrides for every RL run.
# The full synthetic set (10,000 training and 1,000 test images) with `caprl run`'s schedule:
# the configs' 512-unit decoder, 2 XE epochs, then 1 RL epoch; about 25 minutes for three seeds
# on 2 cores. DATA=data/synth-2k EPOCHS="5 5" HIDDEN=256 gives the smaller setting of
# scripts/results/table.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEEDS="${SEEDS:-1 2 3}"
OUT="${OUT:-runs/clip-table}"
CAPRL="${CAPRL:-target/release/caprl}"
DATA="${DATA:-data/synth}"
read -r XE_EPOCHS RL_EPOCHS <<< "${EPOCHS:-2 1}"
SETS=(--set "data.dir=$DATA" --set "model.hidden=${HIDDEN:-512}" --set "train.xe_epochs=$XE_EPOCHS"
      --set "train.rl_epochs=$RL_EPOCHS")
RL=(--set "clip.reward=$OUT/clip-reward.safetensors" --set "clip.eval=$OUT/clip-eval.safetensors")
for kv in "$@"; do RL+=(--set "$kv"); done

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
if [ ! -e "$DATA/vocab.json" ]; then
  case $DATA in
    *synth-2k) "$CAPRL" data synth --out "$DATA" --train 2000 --val 300 --test 300 ;;
    *) "$CAPRL" data synth --out "$DATA" ;;
  esac
fi
VARIANTS="${VARIANTS:-wtf wtf-lr1e-5 wtf-lr2e-5 wtf-rl wtf-rl-a1}"
mkdir -p "$OUT"
for pair in "1 reward" "2 eval"; do
  read -r s name <<< "$pair"
  [ -e "$OUT/clip-$name.safetensors" ] ||
    "$CAPRL" clip train --data "$DATA" --seed "$s" --out "$OUT/clip-$name.safetensors" -q
done
EVAL=(--split test --beam 3 --json --clip "$OUT/clip-eval.safetensors")

for seed in $SEEDS; do
  xe="$OUT/xe-$seed"
  if [ ! -s "$OUT/xe-$seed.json" ]; then
    "$CAPRL" train --config configs/scst.toml --objective xe --set "seed=$seed" \
      --set "run_dir=$xe" "${SETS[@]}"
    "$CAPRL" eval --checkpoint "$xe/best-xe" "${EVAL[@]}" > "$OUT/xe-$seed.json"
  fi
  for variant in $VARIANTS; do
    run="$OUT/$variant-$seed"
    case $variant in
      wtf-rl-a1) cfg=configs/wtf-rl.toml; extra=(--set 'reward.spec="clip=1"') ;;
      wtf-lr*) cfg=configs/wtf.toml; extra=(--set "optim.rl_lr=${variant#wtf-lr}") ;;
      *) cfg="configs/$variant.toml"; extra=() ;;
    esac
    "$CAPRL" train --config "$cfg" --start-from "$xe/best-xe" --set "seed=$seed" \
      --set "run_dir=$run" "${SETS[@]}" "${RL[@]}" "${extra[@]}"
    "$CAPRL" eval --checkpoint "$run/best-rl" "${EVAL[@]}" > "$OUT/$variant-$seed.json"
  done
done
python3 scripts/results/table.py "$OUT" --clip --seeds $SEEDS \
  --objectives xe wtf wtf-lr1e-5 wtf-lr2e-5 wtf-rl wtf-rl-a1
