#!/usr/bin/env bash
# Builds `caprl` with Candle's CUDA backend: `cargo build --release --features cuda`.
#
#   scripts/build-cuda.sh                  # kernels for compute capability 90 (H100/H200)
#   CUDA_COMPUTE_CAP=80 scripts/build-cuda.sh   # A100
#
# The build machine needs no GPU. With no system CUDA toolkit (no `nvcc` on PATH and no
# CUDA_HOME), it installs CUDA 13.0's compiler, headers and libraries from PyPI wheels with
# scripts/cuda-toolkit.sh (or $CAPRL_CUDA_TOOLKIT_SH). The build goes to its own target dir
# (CUDA_TARGET_DIR, default target-cuda/) so the CPU build is not invalidated. A clean build
# compiles Candle's kernels with nvcc: 15+ minutes on 2 cores.
#
# The binary links libcuda.so.1 (the NVIDIA driver) and the CUDA runtime libraries at load time:
# it does not start on a machine without a driver. CPU users need the default build.
set -euo pipefail
# The CUDA release of the build (toolkit.sh's wheels; Dockerfile.cuda's CUDA_VERSION agrees).
cuda_version=13.0
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
target=${CUDA_TARGET_DIR:-$repo/target-cuda}

if command -v nvcc >/dev/null 2>&1; then
  echo "build-cuda: using the system toolkit: $(command -v nvcc)" >&2
elif [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
  export PATH=$CUDA_HOME/bin:$PATH
  echo "build-cuda: using the toolkit in CUDA_HOME=$CUDA_HOME" >&2
else
  toolkit=${CAPRL_CUDA_TOOLKIT_SH:-$repo/scripts/cuda-toolkit.sh}
  if [ ! -f "$toolkit" ]; then
    echo "build-cuda: no nvcc on PATH, no CUDA_HOME and no $toolkit (set CAPRL_CUDA_TOOLKIT_SH);" >&2
    echo "            install the CUDA toolkit (12.x or 13.x) or point CUDA_HOME at one" >&2
    exit 1
  fi
  echo "build-cuda: no system CUDA toolkit; installing one from PyPI wheels with $toolkit" >&2
  # toolkit.sh reads cudarc's symbol list from the cargo registry.
  cargo fetch --locked
  eval "$(bash "$toolkit")"
fi

found=$(nvcc --version 2>/dev/null | grep -oE 'release [0-9]+\.[0-9]+' | cut -d' ' -f2 || true)
if [ -n "$found" ] && [ "$found" != "$cuda_version" ]; then
  echo "build-cuda: warning: nvcc is CUDA $found, the project builds with CUDA $cuda_version" >&2
  echo "            (Dockerfile.cuda); the binary will need CUDA $found's libraries" >&2
fi
echo "build-cuda: CUDA $cuda_version, CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP, target dir $target" >&2
start=$(date +%s)
cargo build --release --locked --features cuda --bin caprl --target-dir "$target"
bin=$target/release/caprl
echo "build-cuda: built in $(( $(date +%s) - start )) s: $(du -h "$bin" | cut -f1)" >&2
echo "$bin"
