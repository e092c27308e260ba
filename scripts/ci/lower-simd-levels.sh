#!/usr/bin/env bash
# Prints the SIMD levels (CAPRL_SIMD values) this CPU runs below its widest one, one per line:
# the levels CI runs the kernel, gradient-check and decoding tests at once more (the widest is
# what the plain test run uses). The same rule as caprl_kernels::fastmath::Simd::supported.
set -euo pipefail
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
if has avx512f && has avx512vl && has avx2 && has fma; then
  echo avx2
  echo baseline
elif has avx2 && has fma; then
  echo baseline
fi
