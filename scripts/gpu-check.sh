#!/usr/bin/env bash
# Is the CUDA build right on this GPU? One command, a few minutes, for short lent GPU time.
#
#   scripts/gpu-check.sh pack [BIN]   # here (no GPU): build the CUDA binary (scripts/build-cuda.sh)
#                                     # or take BIN, and print what to carry to the GPU machine
#   scripts/gpu-check.sh run [BIN]    # there: selftest, bench model, repeatability of training
#
# `run` does, with the CUDA libraries put on the loader path (LD_LIBRARY_PATH) when the binary
# does not find them:
#   1. caprl selftest --device cuda:0 (log-probs, gradients, AdamW, greedy, snapshot, repeat);
#   2. caprl bench model --device cuda:0 at batch 32/128/512 in f32 and bf16, for the GRU (fc)
#      captioner and for the Transformer (d_model 512);
#   3. a short caprl train on the synthetic set, twice with one seed (the weights must be
#      byte-identical) and once more with CUDA_LAUNCH_BLOCKING=1 (same weights again), then the
#      same twice with model.kind = transformer.
# Output goes to $OUT (the device tool's folder that comes back) or /tmp/gpu-check-out; the script
# exits non-zero when a step fails. GPU=cuda:1 picks another device.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}
bin=${2:-}

# The CUDA 13 libraries' folder on a machine whose Python carries NVIDIA's wheels (the lent GPU
# machines), else wherever libcublas.so.13 is.
cuda_lib_dir() {
  local d
  d=$(python3 -c "import glob,site; print(next(iter(glob.glob(site.getsitepackages()[0]+'/nvidia/cu13/lib')), ''))" 2>/dev/null || true)
  if [ -z "$d" ]; then
    d=$(dirname "$(find / -name 'libcublas.so.13' -not -path '*/proc/*' 2>/dev/null | head -n 1)" 2>/dev/null || true)
    [ "$d" = "." ] && d=
  fi
  echo "$d"
}

case "$mode" in
pack)
  if [ -z "$bin" ]; then
    bin=$(bash "$repo/scripts/build-cuda.sh" | tail -n 1)
  fi
  [ -x "$bin" ] || { echo "gpu-check: $bin is not an executable; build it with scripts/build-cuda.sh" >&2; exit 1; }
  if ! objdump -p "$bin" 2>/dev/null | grep -q 'NEEDED.*libcublas'; then
    echo "gpu-check: warning: $bin does not link libcublas: is it a --features cuda build?" >&2
  fi
  size=$(stat -c %s "$bin")
  rel=${bin#"$repo"/}
  echo "binary: $bin ($(( size / 1024 / 1024 )) MiB; the device tool carries at most 64 MiB)"
  if [ "$size" -gt $(( 64 * 1024 * 1024 )) ]; then
    echo "gpu-check: the binary is over 64 MiB: strip it (strip $bin) before carrying it" >&2
    exit 1
  fi
  echo "carry:   [\"$rel\"]  (the scripts travel with the working tree)"
  echo "command: bash scripts/gpu-check.sh run $rel"
  echo "the CUDA libraries it needs there: libcuda.so.1 (driver), libcublas.so.13, libcublasLt.so.13,"
  echo "  libcudart.so.13, libcurand.so.10; run finds them under python's nvidia/cu13/lib and sets"
  echo "  LD_LIBRARY_PATH itself"
  ;;
run)
  bin=${bin:-$repo/target-cuda/release/caprl}
  [ -x "$bin" ] || { echo "gpu-check: no binary at $bin: carry the one 'pack' printed" >&2; exit 1; }
  gpu=${GPU:-cuda:0}
  out=${OUT:-/tmp/gpu-check-out}
  mkdir -p "$out"
  if ldd "$bin" 2>/dev/null | grep -q 'not found'; then
    lib=$(cuda_lib_dir)
    [ -n "$lib" ] || { echo "gpu-check: libcublas.so.13 is nowhere on this machine; install CUDA 13's libraries" >&2; exit 1; }
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "gpu-check: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  fi
  if ldd "$bin" | grep 'not found'; then
    echo "gpu-check: libraries still missing (above)" >&2
    exit 1
  fi
  nvidia-smi -L 2>/dev/null || true
  status=0
  step() { # name, command...: runs it with its output in $out/<name>.txt, records pass/fail
    local name=$1; shift
    local t0; t0=$(date +%s)
    if "$@" >"$out/$name.txt" 2>&1; then
      echo "pass  $name ($(( $(date +%s) - t0 )) s)"
    else
      echo "FAIL  $name ($(( $(date +%s) - t0 )) s): tail of $out/$name.txt:"
      tail -n 20 "$out/$name.txt"
      status=1
    fi
  }
  step selftest "$bin" selftest --device "$gpu"
  grep -E '^(pass|FAIL)|selftest:' "$out/selftest.txt" || true
  step bench-model "$bin" bench model --device "$gpu" --dtype f32,bf16 --batch 32,128,512 --hidden 512
  cat "$out/bench-model.txt"
  step bench-transformer "$bin" bench model --device "$gpu" --kind transformer --dtype f32,bf16 --batch 32,128,512 --hidden 512
  cat "$out/bench-transformer.txt"
  work=$(mktemp -d)
  step synth "$bin" data synth --train 256 --val 32 --test 32 -q --out "$work/data"
  train() { # run dir, VAR=value for the environment..., then -- and more caprl flags
    local dir=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    env "${envs[@]}" "$bin" train --device "$gpu" --set seed=5 -q \
      --set "data.dir=\"$work/data\"" --set "run_dir=\"$dir\"" \
      --set model.hidden=128 --set model.embed=64 --set train.batch_size=32 \
      --set train.xe_epochs=1 --set train.rl_epochs=1 --set train.eval_images=16 \
      --set checkpoint.every_steps=1000 "$@"
  }
  step train-a train "$work/a"
  step train-b train "$work/b"
  step train-blocking train "$work/c" CUDA_LAUNCH_BLOCKING=1
  step train-transformer-a train "$work/ta" -- --set 'model.kind="transformer"'
  step train-transformer-b train "$work/tb" -- --set 'model.kind="transformer"'
  weights() { ls -d "$1"/checkpoints/ckpt-* 2>/dev/null | sort | tail -n 1 | sed 's|$|/model.safetensors|'; }
  for run in b c tb; do
    base=a; [ "$run" = tb ] && base=ta
    a=$(weights "$work/$base"); other=$(weights "$work/$run")
    if [ -f "$a" ] && [ -f "$other" ] && cmp -s "$a" "$other"; then
      echo "pass  weights of run $base and run $run identical ($(sha256sum "$a" | cut -c1-16))"
    else
      echo "FAIL  weights of run $base and run $run differ (or a run wrote none): $a $other"
      status=1
    fi
  done
  rm -rf "$work"
  [ "$status" -eq 0 ] && echo "gpu-check: pass" || echo "gpu-check: FAIL (outputs in $out)"
  exit "$status"
  ;;
*)
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
