#!/usr/bin/env bash
# ruotianluo/self-critical.pytorch on the benchmark task (data/regions), at caprl's grid budget
# and scored the way caprl scores its own models, so its rows stand beside caprl's:
#
#   SCTORCH=PATH/TO/self-critical.pytorch PYTHON=PATH/TO/python MODEL=fc bash scripts/peer/sctorch_regions.sh
#
# MODEL is fc (caption_model newfc: configs/fc.yml, then fc_nsc.yml), a2i2 (att2in2:
# configs/a2i2.yml, a2i2_nsc.yml) or transformer (configs/transformer/transformer.yml,
# transformer_nsc.yml): the repository's own recipe (learning rates, batch, schedule), run for
# XE_EPOCHS of XE (default 15) and then RL_EPOCHS of SCST with the mean baseline of 5 samples
# ("new self-critical", as caprl's models table), caprl's grid budget; SCST starts from the last
# XE epoch and each phase is evaluated at its last epoch (the repository picks a best checkpoint
# by its language_eval, which needs Java and the SPICE models, or else by validation loss,
# which SCST does not lower). The test split is decoded with beam 3 and its captions are
# scored by `caprl score` on all test images and on each subset of subsets.json, each scored as
# a corpus of its own, as `caprl eval` does (plus METEOR over all test images where Java and
# pycocoevalcap are installed). The figures go to docs/results/sctorch/MODEL/result.json, the
# test captions beside them (captions-xe.json, captions-scst.json), with the machine, commit,
# date and command of that model's run (machine.json, run.json); docs/results/sctorch.md is
# rendered from them by scripts/results/render.py. REUSE=1 keeps the phases a previous run of
# MODEL finished. The Transformer trains at caprl's grid shape (2 + 2 layers of width 128) with
# transformer.yml's optimizer and Noam schedule; SHAPE=recipe keeps transformer.yml's 6 + 6 layers
# of width 512, several times slower on a CPU. The Noam warmup is counted in iterations: the
# recipe's 20000 are 12% of its 15 COCO epochs (113287 images, batch 10) but would outlast the
# whole grid budget, so the schedule is the recipe's curve in the budget's iterations: the warmup
# is the same fraction of them and noamopt_factor keeps the recipe's peak rate (3.1e-4 at width
# 512 after 20000 steps), so the rate also ends where the recipe's ends.
#
# Needs: a checkout of self-critical.pytorch (4c48a33) with its cider submodule (coco-caption is
# not used: caprl scores); a Python with torch, torchvision, numpy, h5py, six, lmdbdict, yacs,
# pyyaml, scikit-image, tensorboard and pycocoevalcap (the SCST reward imports its BLEU scorer);
# target/release/caprl (cargo build --release). The exported data set is kept in
# SCTORCH/data/f30k_regions.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
SCTORCH=$(cd "${SCTORCH:?set SCTORCH to a self-critical.pytorch checkout}" && pwd)
PY=${PYTHON:-python3}
MODEL=${MODEL:-fc}
XE_EPOCHS=${XE_EPOCHS:-15}
RL_EPOCHS=${RL_EPOCHS:-5}
CAPRL=$PWD/${CAPRL:-target/release/caprl}
DATA=$PWD/data/regions
OUT=$PWD/docs/results/sctorch/$MODEL
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
case $MODEL in
  fc) xe_cfg=configs/fc.yml; rl_cfg=configs/fc_nsc.yml ;;
  a2i2) xe_cfg=configs/a2i2.yml; rl_cfg=configs/a2i2_nsc.yml ;;
  transformer) xe_cfg=configs/transformer/transformer.yml; rl_cfg=configs/transformer/transformer_nsc.yml ;;
  *) echo "MODEL is fc, a2i2 or transformer" >&2; exit 2 ;;
esac
# The Transformer's shape: SHAPE=grid (the default) is caprl's grid Transformer (2 + 2 layers,
# width 128, d_ff 512, 4 heads); SHAPE=recipe keeps transformer.yml's 6 + 6 layers of width 512.
SHAPE=${SHAPE:-grid}
shape=()
if [ "$MODEL" = transformer ]; then
  case $SHAPE in
    grid) shape=(--set_cfgs N_enc 2 N_dec 2 d_model 128 d_ff 512 num_att_heads 4) ;;
    recipe) ;;
    *) echo "SHAPE is grid or recipe" >&2; exit 2 ;;
  esac
fi
[ -e "$DATA/vocab.json" ] || "$CAPRL" data synth -q --profile regions --out "$DATA"
export_dir=$SCTORCH/data/f30k_regions
if [ ! -e "$export_dir/regions.json" ]; then
  "$PY" scripts/peer/export_sctorch.py --data "$DATA" --out "$export_dir" --name regions
fi
sizes=$("$PY" - "$export_dir" <<'PY'
import glob, sys
import numpy as np
d = sys.argv[1]
fc = np.load(sorted(glob.glob(f"{d}/regions_fc/*.npy"))[0])
att = np.load(sorted(glob.glob(f"{d}/regions_att/*.npz"))[0])["feat"]
print(fc.shape[-1], att.shape[-1])
PY
)
read -r fc_size att_size <<< "$sizes"
schedule=()
if [ "$MODEL" = transformer ]; then
  # transformer.yml: batch_size 10, noamopt_warmup 20000, noamopt_factor 1, d_model 512.
  noam=$("$PY" - "$export_dir/regions.json" "$XE_EPOCHS" "${shape[*]:-}" <<'PY'
import json, math, sys
images, epochs, shape = json.load(open(sys.argv[1]))["images"], int(sys.argv[2]), sys.argv[3].split()
train = sum(image["split"] in ("train", "restval") for image in images)
d_model = int(shape[shape.index("d_model") + 1]) if "d_model" in shape else 512
recipe_steps, steps = math.ceil(113287 / 10) * 15, math.ceil(train / 10) * epochs
warmup = max(1, round(20000 * steps / recipe_steps))
print(warmup, f"{math.sqrt(d_model * warmup / (512 * 20000)):.6f}")
PY
)
  read -r warmup factor <<< "$noam"
  schedule=(--noamopt_warmup "$warmup" --noamopt_factor "$factor")
fi
C=(--input_json data/f30k_regions/regions.json --input_label_h5 data/f30k_regions/regions_label.h5
   --input_fc_dir data/f30k_regions/regions_fc --input_att_dir data/f30k_regions/regions_att
   --fc_feat_size "$fc_size" --att_feat_size "$att_size" --cached_tokens f30k_regions/regions-train-idxs
   --language_eval 0 --val_images_use 500 --save_every_epoch)
xe=regions_${MODEL}
rl=regions_${MODEL}_rl
cpu=$PWD/scripts/peer/sctorch_cpu.py
cd "$SCTORCH"
# REUSE=1 keeps each phase that finished (its wall time in log_<id>/seconds) and runs the rest.
if [ "${REUSE:-0}" != 1 ] || [ ! -e "log_$xe/seconds" ]; then
  rm -rf "log_$xe" "log_$rl"
  started=$(date +%s)
  "$PY" "$cpu" tools/train.py --cfg "$xe_cfg" --id "$xe" --checkpoint_path "log_$xe" \
    --max_epochs "$XE_EPOCHS" "${C[@]}" "${schedule[@]}" "${shape[@]}"
  echo "$(($(date +%s) - started))" > "log_$xe/seconds"
fi
if [ "${REUSE:-0}" != 1 ] || [ ! -e "log_$rl/seconds" ]; then
  rm -rf "log_$rl"
  bash scripts/copy_model.sh "$xe" "$rl"
  rm -f "log_$rl/seconds"  # copied with the XE phase's files; it marks a finished SCST phase
  started=$(date +%s)
  "$PY" "$cpu" tools/train.py --cfg "$rl_cfg" --id "$rl" --checkpoint_path "log_$rl" \
    --start_from "log_$rl" --self_critical_after -1 --structure_after "$XE_EPOCHS" \
    --max_epochs "$((XE_EPOCHS + RL_EPOCHS))" "${C[@]}" "${shape[@]}"
  echo "$(($(date +%s) - started))" > "log_$rl/seconds"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for phase in xe rl; do
  id=${!phase}
  "$PY" "$cpu" tools/eval.py --model "log_$id/model.pth" \
    --infos_path "log_$id/infos_$id.pkl" --split test --beam_size 3 --num_images -1 \
    --language_eval 0 --dump_json 0 --dump_images 0 --force 1 --device cpu --id "$id" --input_json data/f30k_regions/regions.json \
    --input_label_h5 data/f30k_regions/regions_label.h5 --input_fc_dir data/f30k_regions/regions_fc \
    --input_att_dir data/f30k_regions/regions_att > "$work/eval-$phase.log"
  "$PY" - "eval_results/.saved_pred_${id}_test.pth" "$work/cands-$phase.json" <<'PY'
import json, sys, torch
predictions, _ = torch.load(sys.argv[1], weights_only=False)
json.dump({str(p["image_id"]): p["caption"] for p in predictions}, open(sys.argv[2], "w"))
PY
done
cd - > /dev/null
mkdir -p "$OUT"
# The captions are kept beside their scores, so a metric added later needs no retraining.
cp "$work/cands-xe.json" "$OUT/captions-xe.json"
cp "$work/cands-rl.json" "$OUT/captions-scst.json"
METEOR=()  # `caprl score --meteor` finds the jar through python3's pycocoevalcap, as quality.sh checks
python3 -c "import pycocoevalcap" 2>/dev/null && command -v java >/dev/null && METEOR=(--meteor)
python3 scripts/peer/sctorch_score.py --caprl "$CAPRL" --data "$DATA" --model "$MODEL" \
  --xe "$OUT/captions-xe.json" --rl "$OUT/captions-scst.json" "${METEOR[@]}" \
  --xe-seconds "$(cat "$SCTORCH/log_$xe/seconds")" --rl-seconds "$(cat "$SCTORCH/log_$rl/seconds")" \
  --xe-epochs "$XE_EPOCHS" --rl-epochs "$RL_EPOCHS" > "$OUT/result.json.tmp"
mv "$OUT/result.json.tmp" "$OUT/result.json"
record_run "$OUT" "$CAPRL" "SCTORCH=... MODEL=$MODEL${shape[*]:+ SHAPE=$SHAPE} bash scripts/peer/sctorch_regions.sh" \
  "reference_commit=ruotianluo/self-critical.pytorch $(git -C "$SCTORCH" rev-parse --short=7 HEAD 2>/dev/null || echo "${SCTORCH_COMMIT:-commit unknown}")" \
  "torch=$("$PY" -c 'import torch; print(torch.__version__)')" \
  ${shape[*]:+"shape=$SHAPE: ${shape[*]:1}"} ${schedule[*]:+"schedule=${schedule[*]}"}
python3 scripts/results/render.py sctorch.md
cat docs/results/sctorch.md
