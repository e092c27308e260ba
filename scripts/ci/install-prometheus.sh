#!/usr/bin/env bash
# Prints two lines: the path of promtool (the alert-rule tests) and of the prometheus
# server (the live monitoring test). Either one found on PATH is used as it is; a missing
# one is unpacked from Debian's `prometheus` package into /opt/caprl-prometheus (dpkg -x:
# the binaries only, no service is installed or started). Exits non-zero, saying why, when
# either cannot be had: CI must not go on to a test run whose monitoring checks cannot run.
set -euo pipefail

dest=/opt/caprl-prometheus
# The tool on PATH, else where the unpacked package puts it.
where() { command -v "$1" 2>/dev/null || echo "$dest/usr/bin/$1"; }
promtool=$(where promtool)
prometheus=$(where prometheus)

if [ ! -x "$promtool" ] || [ ! -x "$prometheus" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work" &&
      { apt-get download prometheus >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } &&
      mkdir -p "$dest" && dpkg -x prometheus_*.deb "$dest"
  ) || true
fi
for tool in "$promtool" "$prometheus"; do
  if ! "$tool" --version >/dev/null 2>&1; then
    echo "install-prometheus.sh: $tool does not run: could not unpack it from Debian's" \
      "prometheus package (apt-get download prometheus failed); install promtool and" \
      "prometheus and put them on PATH" >&2
    exit 1
  fi
done
echo "$promtool"
echo "$prometheus"
