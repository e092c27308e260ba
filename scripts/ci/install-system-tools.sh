#!/usr/bin/env bash
# Installs the system tools the tests call, when missing: nats-server (every NATS
# test), openssl (the mutual-TLS test makes its certificates) and mount from
# util-linux (the full-disk test's tmpfs half), chromium (the report opened in a
# real browser), Python's tensorboard package (its reader checks the learner's
# event files), and a headless Java with Python's pycocoevalcap package (the METEOR tests run
# the meteor-1.5.jar it ships), and Python's venv module (the Python package's tests install the
# wheel into fresh virtual environments). Exits non-zero, naming the tool, when one is still missing
# afterwards.
set -euo pipefail

packages=()
command -v nats-server >/dev/null 2>&1 || packages+=(nats-server)
command -v openssl >/dev/null 2>&1 || packages+=(openssl)
command -v mount >/dev/null 2>&1 || packages+=(mount)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v java >/dev/null 2>&1 || packages+=(default-jre-headless)
# Debian's python3 ships venv without ensurepip unless python3-venv is installed.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || packages+=(python3-venv)
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

# The jar's path, as caprl finds it (pycocoevalcap is a namespace package: no __file__).
meteor_jar='import os, pycocoevalcap.meteor.meteor as m; print(os.path.join(os.path.dirname(m.__file__), "meteor-1.5.jar"))'
if ! python3 -c "$meteor_jar" >/dev/null 2>&1; then
  # Debian's system Python refuses plain pip installs (PEP 668).
  python3 -m pip install --quiet 'pycocoevalcap==1.2' ||
    python3 -m pip install --quiet --break-system-packages 'pycocoevalcap==1.2'
fi
jar=$(python3 -c "$meteor_jar") && [[ -f "$jar" ]] || {
  echo "install-system-tools.sh: pycocoevalcap's meteor-1.5.jar is missing after installing it" >&2
  exit 1
}

for tool in nats-server openssl mount chromium java; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-system-tools.sh: $tool is still not on PATH after installing it" >&2
    exit 1
  fi
done
