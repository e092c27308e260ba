#!/usr/bin/env bash
# The README's RL-algorithm table: advantage estimators and PPO-style sample reuse at the same
# number of actor decodes. For each seed: one XE model, then from it SCST with each estimator
# (greedy, leave-one-out mean, GRPO, Dr. GRPO) and PPO with K = 1, 2, 4 passes (2 minibatches
# each, leave-one-out mean baseline; variant ppoKmM: K passes of M minibatches), all for the
# same RL epochs and the same actor decodes per
# image: 5 samples + the greedy caption for the greedy baseline, 6 samples for the others. The
# variant greedy-noeos is the greedy baseline with CIDEr-D scored without <eos>
# (reward.cider_eos = false). Further variants (not in the default list): grpo-ds (GRPO with
# dynamic sampling), and in async mode (tasks issued 2 steps ahead): async-rloo (truncated IS),
# async-rloo-mis (masked IS), async-decoupled (decoupled PPO, K = 2), async-gspo (GSPO, K = 2,
# the paper's clip range). Each is evaluated on the test split with beam 3. Prints the table
# (scripts/results/rl_algorithms.py).
#
#   cargo build --release && bash scripts/results/rl_algorithms.sh
#
# Environment: SEEDS (default "1 2 3"), VARIANTS (default: all of the above), OUT (default
# runs/rl-algorithms), CAPRL (default target/release/caprl). Arguments are extra
# `--set KEY=VALUE` overrides for every run. Defaults as table.sh: the 2,000-image synthetic
# subset, fc-GRU of 256 units, 5 XE + 5 RL epochs, RL learning rate 3e-4.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEEDS="${SEEDS:-1 2 3}"
VARIANTS="${VARIANTS:-greedy greedy-noeos rloo grpo dr-grpo ppo1 ppo2 ppo4}"
OUT="${OUT:-runs/rl-algorithms}"
CAPRL="${CAPRL:-target/release/caprl}"
DATA=data/synth-2k
SETS=(--set "data.dir=$DATA" --set model.hidden=256 --set model.embed=256
      --set train.xe_epochs=5 --set train.rl_epochs=5 --set optim.rl_lr=3e-4)
for kv in "$@"; do SETS+=(--set "$kv"); done

variant_sets() { # variant -> its [train] keys
  case "$1" in
    greedy) echo "--set train.baseline=greedy" ;;
    greedy-noeos) echo "--set train.baseline=greedy --set reward.cider_eos=false" ;;
    grpo|dr-grpo) echo "--set train.baseline=$1 --set train.samples=6" ;;
    rloo) echo "--set train.baseline=mean --set train.samples=6" ;;
    ppo*m*) # ppoKmM: K passes of M minibatches
      k=${1#ppo}; m=${k#*m}; k=${k%m*}
      echo "--set train.baseline=mean --set train.samples=6 --set train.ppo_epochs=$k --set train.ppo_minibatches=$m" ;;
    ppo*) echo "--set train.baseline=mean --set train.samples=6 --set train.ppo_epochs=${1#ppo} --set train.ppo_minibatches=2" ;;
    grpo-ds) echo "--set train.baseline=grpo --set train.samples=6 --set train.dynamic_sampling=true" ;;
    async-rloo) echo "--set runtime.mode=async --set train.baseline=mean --set train.samples=6" ;;
    async-rloo-mis) echo "--set runtime.mode=async --set train.baseline=mean --set train.samples=6 --set runtime.off_policy_correction=masked-is" ;;
    async-decoupled) echo "--set runtime.mode=async --set train.baseline=mean --set train.samples=6 --set train.ppo_epochs=2 --set train.ppo_minibatches=2 --set train.ppo_proximal=learner" ;;
    async-gspo) echo "--set runtime.mode=async --set train.baseline=mean --set train.samples=6 --set train.ppo_epochs=2 --set train.ppo_minibatches=2 --set train.ppo_ratio=sequence --set train.clip_low=3e-4 --set train.clip_high=4e-4" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
[ -e "$DATA/vocab.json" ] || "$CAPRL" data synth --out "$DATA" --train 2000 --val 300 --test 300
mkdir -p "$OUT"

for seed in $SEEDS; do
  xe="$OUT/xe-$seed"
  if [ ! -e "$OUT/xe-$seed.json" ]; then
    "$CAPRL" train -q --config configs/scst.toml --objective xe --set "seed=$seed" \
      --set "run_dir=$xe" "${SETS[@]}"
    "$CAPRL" eval --checkpoint "$xe/best-xe" --split test --beam 3 --json \
      --out "$OUT/xe-$seed-captions.json" > "$OUT/xe-$seed.json"
  fi
  for variant in $VARIANTS; do
    run="$OUT/$variant-$seed"
    [ -e "$OUT/$variant-$seed.json" ] && continue
    start=$(date +%s)
    # shellcheck disable=SC2046
    "$CAPRL" train -q --config configs/scst.toml --start-from "$xe/best-xe" --set "seed=$seed" \
      --set "run_dir=$run" "${SETS[@]}" $(variant_sets "$variant")
    echo "$variant seed $seed: $(( $(date +%s) - start )) s" >> "$OUT/times.txt"
    "$CAPRL" eval --checkpoint "$run/best-rl" --split test --beam 3 --json \
      --out "$OUT/$variant-$seed-captions.json" > "$OUT/$variant-$seed.json"
  done
done
python3 scripts/results/rl_algorithms.py "$OUT" --seeds $SEEDS --variants $VARIANTS
