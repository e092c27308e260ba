#!/usr/bin/env bash
# Installs the system tools the tests call, when missing: nats-server (every NATS
# test), openssl (the mutual-TLS test makes its certificates) and mount from
# util-linux (the full-disk test's tmpfs half), chromium (the report opened in a
# real browser) and Python's tensorboard package (its reader checks the learner's
# event files). Exits non-zero, naming the tool, when one is still missing afterwards.
set -euo pipefail

packages=()
command -v nats-server >/dev/null 2>&1 || packages+=(nats-server)
command -v openssl >/dev/null 2>&1 || packages+=(openssl)
command -v mount >/dev/null 2>&1 || packages+=(mount)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
if ((${#packages[@]})); then
  apt-get update -qq && apt-get install -y -qq "${packages[@]}" >/dev/null
fi

if ! python3 -c 'import tensorboard' >/dev/null 2>&1; then
  python3 -m pip install --quiet 'tensorboard==2.18.0'
fi
python3 -c 'import tensorboard' || {
  echo "install-system-tools.sh: python3 cannot import tensorboard after installing it" >&2
  exit 1
}

for tool in nats-server openssl mount chromium; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-system-tools.sh: $tool is still not on PATH after installing it" >&2
    exit 1
  fi
done
