#!/usr/bin/env bash
# The broadcast-scaling page: `caprl bench scale` through the object store (simulated decode, a
# real AdamW step at the run's RL learning rate each step) at 1 to 32 actors, bf16 snapshots,
# with the version chains of deltas (runtime.snapshot_full_every = 10, the default), with
# every version whole (= 1), and with deltas and 8 actors per host sharing one fetch of each
# version (runtime.snapshot_cache_dir), written with the machine, commit, date and command to
# docs/results/scale/ and rendered into docs/results/scale.md by scripts/results/render.py.
#
#   cargo build --release && bash scripts/results/scale.sh
#
# Needs nats-server on PATH (scripts/ci/install-nats-server.sh prints where it is).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
ACTORS="${ACTORS:-1,2,4,8,16,32}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
OUT=docs/results/scale
mkdir -p "$OUT"
# N:K = runtime.snapshot_full_every N, K actors per host sharing a cache (0: none).
for run in 10:0 1:0 10:8; do
  every=${run%:*} per_host=${run#*:}
  name="full-every-$every"
  [ "$per_host" = 0 ] || name="$name-hosts-of-$per_host"
  "$CAPRL" bench scale -q --actors "$ACTORS" --set 'runtime.snapshot_dtype="bf16"' \
    --set "runtime.snapshot_full_every=$every" --actors-per-host "$per_host" > "$OUT/$name.md.tmp"
  mv "$OUT/$name.md.tmp" "$OUT/$name.md"
done
record_run "$OUT" "$CAPRL" "caprl bench scale --actors $ACTORS --set runtime.snapshot_dtype=\"bf16\" --set runtime.snapshot_full_every=N --actors-per-host K, for N:K in 10:0 1:0 10:8"
python3 scripts/results/render.py scale.md
cat docs/results/scale.md
