#!/usr/bin/env bash
# A CUDA 13.0 build toolchain from PyPI wheels, for machines with no GPU and no system toolkit.
# It lets `cargo build --features cuda` (Candle's CUDA backend) compile here; the binary then runs
# on a machine that has an NVIDIA driver (libcuda.so.1) and the CUDA 13 libraries.
#
#   eval "$(bash scripts/cuda-toolkit.sh)"   # installs once (~1 min), then prints the exports
#   CUDA_COMPUTE_CAP=90 cargo build --release --features cuda   # 90 = H100/H200, 80 = A100
#
# Candle links libcuda dynamically (cudarc `dynamic-linking`), and the wheels ship no libcuda stub,
# so this script makes one from the exact symbol list cudarc declares. A stub only satisfies the
# linker: at run time the real driver's libcuda.so.1 is used.
set -euo pipefail
root=${CAPRL_CUDA_ROOT:-/opt/caprl-cuda}
cuda=$root/cuda
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/lib64/stubs/libcuda.so" ]; then
  python3 -m venv "$root/venv" >&2
  "$root/venv/bin/pip" install -q 'cuda-toolkit[cccl,crt,cublas,cudart,curand,nvcc,nvrtc,nvvm]==13.0.2' >&2
  cu13=$(ls -d "$root"/venv/lib/python3*/site-packages/nvidia/cu13)
  mkdir -p "$cuda/lib64/stubs"
  for d in bin include nvvm; do ln -sfn "$cu13/$d" "$cuda/$d"; done
  for f in "$cu13"/lib/*.so*; do ln -sfn "$f" "$cuda/lib64/$(basename "$f")"; done
  for lib in cublas cublasLt cudart curand nvrtc; do
    real=$(ls "$cuda/lib64/lib$lib.so."* 2>/dev/null | grep -v builtins | grep -v '\.alt\.' | head -n 1)
    [ -n "$real" ] && ln -sfn "$(basename "$real")" "$cuda/lib64/lib$lib.so"
  done
  # Symbols for the libcuda stub: every driver function cudarc can call.
  cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19* 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$cudarc" ]; then
    echo "cuda-toolkit.sh: cudarc's source is not in the cargo registry yet; run 'cargo fetch' in the project first" >&2
    exit 1
  fi
  grep -oE 'pub unsafe fn cu[A-Za-z0-9_]+' "$cudarc/src/driver/sys/mod.rs" | awk '{print $4}' | sort -u |
    sed 's/.*/int &(void){return 999;}/' > "$cuda/lib64/stubs/libcuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda/lib64/stubs/libcuda.so" "$cuda/lib64/stubs/libcuda_stub.c"
fi
cat <<ENV
export CUDA_HOME=$cuda CUDA_PATH=$cuda CUDA_ROOT=$cuda CUDA_TOOLKIT_ROOT_DIR=$cuda
export PATH=$cuda/bin:\$PATH
export LIBRARY_PATH=$cuda/lib64:$cuda/lib64/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}
ENV
