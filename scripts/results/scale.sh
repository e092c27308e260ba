#!/usr/bin/env bash
# The broadcast-scaling page: `caprl bench scale` through the object store (simulated decode, a
# real AdamW step at the run's RL learning rate each step) at 1 to 32 actors, bf16 snapshots,
# with the version chains of deltas (runtime.snapshot_full_every = 10, the default) and with
# every version whole (= 1), written with the machine, commit, date and command to
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
for every in 10 1; do
  "$CAPRL" bench scale -q --actors "$ACTORS" --set 'runtime.snapshot_dtype="bf16"' \
    --set "runtime.snapshot_full_every=$every" > "$OUT/full-every-$every.md.tmp"
  mv "$OUT/full-every-$every.md.tmp" "$OUT/full-every-$every.md"
done
record_run "$OUT" "$CAPRL" "caprl bench scale --actors $ACTORS --set runtime.snapshot_dtype=\"bf16\" --set runtime.snapshot_full_every=N, for N in 10 1"
python3 scripts/results/render.py scale.md
cat docs/results/scale.md
