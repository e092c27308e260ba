#!/usr/bin/env bash
# The Python reward's cost page: `caprl bench reward` (a Python reward's cost per rollout beside
# the built-in ones) and `caprl bench pipeline` (a whole run's RL step with and without a Python
# term in reward.spec), written with the machine, commit, date and command to
# docs/results/reward-cost/ and rendered into docs/results/reward-cost.md by
# scripts/results/render.py.
#
#   cargo build --release && bash scripts/results/reward_cost.sh
#
# The Python is scripts/results/python_env.sh's (the release wheel, pycocoevalcap); the
# functions are scripts/python/bench_rewards.py's.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CAPRL="${CAPRL:-target/release/caprl}"
[ -x "$CAPRL" ] || { echo "no $CAPRL: run cargo build --release first" >&2; exit 2; }
source scripts/results/python_env.sh
export CAPRL_PYTHON="$VENV/bin/python"
OUT=docs/results/reward-cost
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
rewards=bleu4,py:zero,py:bleu4_caprl,py:bleu4,cider
"$CAPRL" bench reward --rewards "$rewards" --rollouts 100 --json > "$work/rewards.json"
specs=("cider=1" "cider=1,py:zero=1" "cider=1,py:bleu4=1")
for i in "${!specs[@]}"; do
  "$CAPRL" --set "reward.spec=\"${specs[$i]}\"" --set 'reward.python="scripts/python/bench_rewards.py"' \
    bench pipeline --modes in-process --steps 8 --json "$work/steps-$i.json"
done
python3 - "$work" "${specs[@]}" > "$work/steps.json" <<'PY'
import json, sys
work, specs = sys.argv[1], sys.argv[2:]
runs = [json.load(open(f"{work}/steps-{i}.json"))[0] for i in range(len(specs))]
json.dump([{"spec": s, "run": r} for s, r in zip(specs, runs)], sys.stdout, indent=2)
PY
mv "$work/rewards.json" "$work/steps.json" "$OUT/"
record_run "$OUT" "$CAPRL" "caprl bench reward --rewards $rewards --rollouts 100 --json; caprl --set reward.spec=SPEC bench pipeline --modes in-process --steps 8 --json, for each spec"
python3 scripts/results/render.py reward-cost.md
cat docs/results/reward-cost.md
