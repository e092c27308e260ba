#!/usr/bin/env bash
# The benchmark task's results suite: trains and evaluates a grid of models × objectives × seeds
# on the regions task (`caprl data synth --profile regions`), writes each run's numbers as JSON
# the moment it ends (OUT/runs/*.json; a run whose JSON exists is skipped, so a grid can be
# finished over several sittings), with the run's test captions beside it (OUT/captions/*.json,
# COCO results format, so a metric added later needs no retraining), then renders the tables
# from those files (scripts/results/render.py, into OUT/table.md).
#
#   cargo build --release && bash scripts/results/quality.sh [full|quick|smoke]
#
# full:  fc-GRU, att-GRU, Transformer, each XE then SCST (mean baseline); then, for the best of
#        them (highest mean test CIDEr-D after SCST; BEST names another), the objectives from the
#        same XE models: SCST greedy and mean baselines, GRPO, PPO-clip, GSPO, SLE, WTF-RL
#        (contrastive reward), SCST async; seeds 1 2 3.
# quick: fc-GRU and Transformer, XE and SCST, seed 1.
# smoke: the quick grid plus SLE on a tiny set for one epoch each (what CI runs: it checks that
#        the suite runs end to end, not any number).
#
# Environment: OUT (default runs/quality-MODE), CAPRL (default target/release/caprl), DATA (default
# data/regions; smoke: OUT/data), SEEDS, MODELS, OBJECTIVES, BEST, XE_EPOCHS, RL_EPOCHS override
# the mode's. Arguments are extra `--set KEY=VALUE` for every training run. Each run's file names
# the machine it ran on (`caprl machine --json`), so a grid finished over sittings on several
# machines says which ran where.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODE="${1:-full}"
[ $# -gt 0 ] && shift
CAPRL="${CAPRL:-target/release/caprl}"
OUT="${OUT:-runs/quality-$MODE}"
case $MODE in
  full)  seeds="1 2 3"; models="fc-gru att-gru transformer"
         objectives="scst-greedy grpo ppo gspo sle wtf-rl scst-async"; xe=15; rl=5 ;;
  quick) seeds="1"; models="fc-gru transformer"; objectives=""; xe=15; rl=5 ;;
  smoke) seeds="1"; models="fc-gru transformer"; objectives="sle"; xe=1; rl=1 ;;
  *) echo "usage: quality.sh [full|quick|smoke] [KEY=VALUE ...]" >&2; exit 2 ;;
esac
SEEDS="${SEEDS:-$seeds}"
MODELS="${MODELS:-$models}"
OBJECTIVES="${OBJECTIVES-$objectives}"
XE_EPOCHS="${XE_EPOCHS:-$xe}"
RL_EPOCHS="${RL_EPOCHS:-$rl}"
if [ "$MODE" = smoke ]; then DATA="${DATA:-$OUT/data}"; else DATA="${DATA:-data/regions}"; fi

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
mkdir -p "$OUT/runs" "$OUT/captions" "$OUT/work"
if [ ! -e "$DATA/vocab.json" ]; then
  if [ "$MODE" = smoke ]; then
    "$CAPRL" data synth -q --profile regions --out "$DATA" --train 60 --val 10 --test 20
  else
    "$CAPRL" data synth -q --profile regions --out "$DATA"
  fi
fi

# Every run: the data, its epochs, 5 samples per image, beam 3 at evaluation.
COMMON=(--set "data.dir=\"$DATA\"" --set "train.xe_epochs=$XE_EPOCHS"
        --set "train.rl_epochs=$RL_EPOCHS" --set train.samples=5 --set decode.beam=3)
if [ "$MODE" = smoke ]; then COMMON+=(--set train.eval_images=5); fi
for kv in "$@"; do COMMON+=(--set "$kv"); done

model_sets() { # model -> its shape and XE learning rate (similar parameter counts)
  case "$1" in
    fc-gru) echo "--set model.kind=\"fc\" --set model.hidden=256 --set model.embed=256 --set optim.lr=5e-4" ;;
    att-gru) echo "--set model.kind=\"att\" --set model.hidden=256 --set model.embed=256 --set optim.lr=5e-4" ;;
    transformer) echo "--set model.kind=\"transformer\" --set model.d_model=128 --set model.heads=4 --set model.d_ff=512 --set model.enc_layers=2 --set model.dec_layers=2 --set model.global_region=true --set model.dropout=0.1 --set optim.lr=2e-3" ;;
    *) echo "unknown model $1 (fc-gru, att-gru or transformer)" >&2; exit 2 ;;
  esac
}

objective_sets() { # objective -> its [train]/[runtime]/[reward] keys (RL lr 1e-4 for all)
  case "$1" in
    scst-greedy) echo "--set train.objective=\"scst\" --set train.baseline=\"greedy\"" ;;
    scst-mean) echo "--set train.objective=\"scst\" --set train.baseline=\"mean\"" ;;
    grpo) echo "--set train.objective=\"scst\" --set train.baseline=\"grpo\"" ;;
    ppo) echo "--set train.objective=\"scst\" --set train.baseline=\"mean\" --set train.ppo_epochs=2 --set train.ppo_minibatches=2" ;;
    gspo) echo "--set train.objective=\"scst\" --set train.baseline=\"mean\" --set train.ppo_epochs=2 --set train.ppo_minibatches=2 --set train.ppo_ratio=\"sequence\" --set train.clip_low=3e-4 --set train.clip_high=4e-4" ;;
    sle) echo "--set train.objective=\"sle\" --set train.baseline=\"mean\"" ;;
    # The paper's settings of configs/wtf-rl.toml (the discriminator's among them), then the grid's.
    wtf-rl) echo "--config configs/wtf-rl.toml --set train.objective=\"wtf-rl\" --set reward.spec=\"clip=0.94,disc=0.06\" --set clip.reward=\"$OUT/work/clip-reward.safetensors\"" ;;
    scst-async) echo "--set train.objective=\"scst\" --set train.baseline=\"mean\" --set runtime.mode=\"async\"" ;;
    *) echo "unknown objective $1" >&2; exit 2 ;;
  esac
}

# The frozen encoders: one for WTF-RL's reward, another (another seed) for every run's R@1.
for pair in "1 reward" "2 eval"; do
  read -r s name <<< "$pair"
  if [ ! -e "$OUT/work/clip-$name.safetensors" ]; then
    epochs=()
    [ "$MODE" = smoke ] && epochs=(--epochs 1)
    "$CAPRL" clip train -q --data "$DATA" --seed "$s" "${epochs[@]}" --out "$OUT/work/clip-$name.safetensors"
  fi
done
METEOR=()
python3 -c "import pycocoevalcap" 2>/dev/null && command -v java >/dev/null && METEOR=(--meteor)
EVAL=(--split test --beam 3 --json --clip "$OUT/work/clip-eval.safetensors" "${METEOR[@]}")
{
  echo "{"
  echo "\"machine\": $("$CAPRL" machine --json),"
  echo "\"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\","
  echo "\"date\": \"$(date -u +%F)\", \"mode\": \"$MODE\", \"data\": \"$DATA\","
  echo "\"command\": \"bash scripts/results/quality.sh $MODE${*:+ $*}\","
  echo "\"xe_epochs\": $XE_EPOCHS, \"rl_epochs\": $RL_EPOCHS,"
  echo "\"signature\": {\"tokenizer\": \"caprl (PTB-style: lower case, punctuation dropped)\", \"eos\": \"no <eos> at evaluation (pycocoevalcap); rewards append <eos> (self-critical.pytorch)\", \"df\": \"corpus: the scored split's references\", \"beam\": 3, \"samples\": 5, \"retrieval\": \"text-to-image R@1 among the test images, frozen dual encoder (caprl clip train, seed 2)\"${METEOR:+, \"meteor\": \"METEOR 1.5 jar\"}},"
  echo "\"ceilings\": $(cat "$DATA/ceilings.json")"
  echo "}"
} > "$OUT/suite.json"

# train_and_eval TABLE MODEL OBJECTIVE SEED: one run, skipped when its JSON exists.
train_and_eval() {
  local table=$1 model=$2 objective=$3 seed=$4
  local name="$model-$objective-s$seed" result="$OUT/runs/$table-$model-$objective-s$seed.json"
  [ -s "$result" ] && return 0
  local run="$OUT/work/$name" args best
  # shellcheck disable=SC2207
  args=($(model_sets "$model") "${COMMON[@]}" --set "seed=$seed" --set "run_dir=\"$run\"")
  if [ "$objective" = xe ]; then
    args+=(--objective xe); best="$run/best-xe"
  else
    # shellcheck disable=SC2207
    args+=($(objective_sets "$objective") --start-from "$OUT/work/$model-xe-s$seed/best-xe")
    best="$run/best-rl"
  fi
  echo "== $table: $name" >&2
  local start=$SECONDS
  rm -rf "$run"
  "$CAPRL" train -q "${args[@]}"
  local seconds=$((SECONDS - start))
  local eval; eval=$("$CAPRL" eval -q --checkpoint "$best" "${EVAL[@]}" \
    --out "$OUT/captions/$table-$name.json")
  local params; params=$(python3 scripts/results/params.py "$best")
  local lr; lr=$(model_sets "$model" | sed 's/.*optim.lr=\([^ ]*\).*/\1/')
  printf '{"table": "%s", "model": "%s", "objective": "%s", "seed": %s, "params": %s, "xe_lr": %s, "train_seconds": %s, "machine": %s, "command": "caprl train %s", "eval": %s}\n' \
    "$table" "$model" "$objective" "$seed" "$params" "$lr" "$seconds" "$("$CAPRL" machine --json)" "${args[*]//\"/\\\"}" "$eval" > "$result.tmp"
  mv "$result.tmp" "$result"
}

# The models table over every seed first (what separates architectures), then the objectives.
for seed in $SEEDS; do
  for model in $MODELS; do
    train_and_eval models "$model" xe "$seed"
    train_and_eval models "$model" scst-mean "$seed"
  done
done
# The objectives run on the model the models table found best (or BEST).
[ -n "$OBJECTIVES" ] && BEST="${BEST:-$(python3 scripts/results/quality_table.py "$OUT" --best-model)}"
for seed in $SEEDS; do
  for objective in $OBJECTIVES; do
    # The XE model the objectives start from is the models table's. A sitting without its
    # checkpoint (the grid begun on another machine) trains it again: a run is reproducible
    # from its seed and SIMD level, so its file is rewritten with the same numbers.
    if [ ! -s "$OUT/runs/objectives-$BEST-$objective-s$seed.json" ] \
        && [ ! -d "$OUT/work/$BEST-xe-s$seed/best-xe" ]; then
      rm -f "$OUT/runs/models-$BEST-xe-s$seed.json"
    fi
    train_and_eval models "$BEST" xe "$seed"
    train_and_eval objectives "$BEST" "$objective" "$seed"
  done
done
python3 scripts/results/render.py benchmark.md --from "$OUT" --out "$OUT/table.md"
cat "$OUT/table.md"
