#!/usr/bin/env bash
# Prints the path of a promtool binary for the alert-rule tests, unpacking it
# from Debian's `prometheus` package (without installing the service) when
# none is on PATH. Exits non-zero, saying why, when it cannot be had: CI must
# not go on to a test run whose alert-rule check could not run.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi
dest=/opt/caprl-promtool
if [ ! -x "$dest/usr/bin/promtool" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work" &&
      { apt-get download prometheus >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } &&
      mkdir -p "$dest" && dpkg -x prometheus_*.deb "$dest"
  ) || true
fi
if [ ! -x "$dest/usr/bin/promtool" ]; then
  echo "install-promtool.sh: could not unpack promtool from Debian's prometheus package" \
    "(apt-get download prometheus failed); install promtool and put it on PATH" >&2
  exit 1
fi
echo "$dest/usr/bin/promtool"
