#!/usr/bin/env bash
# Builds the `caprl` Python wheel from this checkout into target/wheels/ and prints its path:
#   bash scripts/python/build-wheel.sh                     # release build: what users install
#   bash scripts/python/build-wheel.sh --profile dev --binary target/debug/caprl
#                                                          # CI: the binary the tests already built
# The wheel holds the `caprl` command (pip puts it on PATH) and the `caprl` Python module.
# Needs maturin on PATH (pip install 'maturin>=1.16,<2').
set -euo pipefail
cd "$(dirname "$0")/../.."

profile=release
binary=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile) profile=${2:?"--profile needs a cargo profile (release, dev)"}; shift 2 ;;
    --binary) binary=${2:?"--binary needs the path of a built caprl"}; shift 2 ;;
    *) echo "unknown argument $1; see the comment at the top of $0" >&2; exit 2 ;;
  esac
done
if ! command -v maturin >/dev/null 2>&1; then
  echo "maturin is not on PATH: pip install 'maturin>=1.16,<2' (in a virtual environment)" >&2
  exit 1
fi
if [[ -z "$binary" ]]; then
  cargo build --locked --profile "$profile" --bin caprl >&2
  case "$profile" in dev) binary=target/debug/caprl ;; *) binary=target/$profile/caprl ;; esac
fi

mkdir -p python/wheel-data/scripts
install -m 0755 "$binary" python/wheel-data/scripts/caprl
rm -f target/wheels/caprl-*.whl
maturin build --locked --profile "$profile" --manifest-path python/Cargo.toml --out target/wheels >&2
ls target/wheels/caprl-*.whl
