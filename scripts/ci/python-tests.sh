#!/usr/bin/env bash
# The Python package in CI: builds the wheel (dev profile, around the `caprl` binary the Rust
# tests built), installs it into a fresh virtual environment with pytest, pycocoevalcap and
# pandas, and runs python/tests against the installed copy (not the source tree).
set -euo pipefail
cd "$(dirname "$0")/../.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/build"
"$work/build/bin/pip" install --quiet 'maturin>=1.16,<2'
wheel=$(PATH="$work/build/bin:$PATH" bash scripts/python/build-wheel.sh --profile dev \
  --binary target/debug/caprl)

python3 -m venv "$work/test"
"$work/test/bin/pip" install --quiet "$wheel" 'pytest>=7' 'pandas>=1.5' 'pycocoevalcap>=1.2'
PATH="$work/test/bin:$PATH" "$work/test/bin/python" -m pytest -q python/tests
