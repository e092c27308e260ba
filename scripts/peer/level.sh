# Sourced by the peer scripts: LEVEL (avx512, avx2 or baseline; default: the CPU's widest) holds
# both sides to one CPU level. caprl reads CAPRL_SIMD; PyTorch reads ATEN_CPU_CAPABILITY for its
# own kernels and MKL_ENABLE_INSTRUCTIONS for MKL's. Neither reaches the `gemm` crate under
# Candle's matrix products, which always takes the CPU's widest level (see BENCHMARKS.md).
if [ -n "${LEVEL:-}" ]; then
  case "$LEVEL" in
    avx512) aten=avx512; mkl=AVX512 ;;
    avx2) aten=avx2; mkl=AVX2 ;;
    baseline) aten=default; mkl=SSE4_2 ;;
    *) echo "LEVEL=$LEVEL: use avx512, avx2 or baseline" >&2; exit 2 ;;
  esac
  export CAPRL_SIMD="$LEVEL" ATEN_CPU_CAPABILITY="$aten" MKL_ENABLE_INSTRUCTIONS="$mkl"
  echo "level: caprl CAPRL_SIMD=$CAPRL_SIMD, PyTorch ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl" >&2
fi
