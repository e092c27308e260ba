#!/usr/bin/env bash
# The Python scorers' speed page: scripts/python/bench_score.py (caprl.score against
# pycocoevalcap, and against self-critical.pytorch's CiderD at the shape its SCST calls it) on
# this machine, written with the machine, commit, date and command to docs/results/python-score/
# and rendered into docs/results/python-score.md by scripts/results/render.py.
#
#   CIDER=PATH/TO/ruotianluo/cider bash scripts/results/python_score.sh [bench_score.py options]
#
# CIDER is a checkout of github.com/ruotianluo/cider (self-critical.pytorch's CiderD; CIDER_COMMIT
# names its commit where CIDER is not a git checkout). The Python
# is scripts/results/python_env.sh's (the release wheel, pycocoevalcap). The training df over
# Karpathy's 113,287 images is built under target/python-bench/ once (a few minutes) and kept;
# `--no-train-df` skips that table.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/results/record.sh
CIDER=${CIDER:?"set CIDER to a checkout of github.com/ruotianluo/cider"}
scorer="$CIDER/pyciderevalcap/ciderD/ciderD_scorer.py"
[ -f "$scorer" ] || { echo "no $scorer: is CIDER a checkout of ruotianluo/cider?" >&2; exit 2; }
source scripts/results/python_env.sh
OUT=docs/results/python-score
mkdir -p "$OUT"
"$VENV/bin/python" scripts/python/bench_score.py --ciderd "$scorer" --json "$OUT/rows.json.tmp" "$@"
mv "$OUT/rows.json.tmp" "$OUT/rows.json"
reference=${CIDER_COMMIT:-$(git -C "$CIDER" rev-parse --short=7 HEAD 2>/dev/null || echo "commit unknown")}
record_run "$OUT" "$VENV/bin/caprl" "python scripts/python/bench_score.py --ciderd \$CIDER/pyciderevalcap/ciderD/ciderD_scorer.py${*:+ $*}" \
  "reference_commit=ruotianluo/cider $reference"
python3 scripts/results/render.py python-score.md
cat docs/results/python-score.md
