#!/usr/bin/env bash
# Prints the path of a promtool binary for the alert-rule tests, unpacking it
# from Debian's `prometheus` package (without installing the service) when
# none is on PATH. Prints nothing when it cannot be had; the test then skips.
set -uo pipefail

if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi
dest=/opt/caprl-promtool
if [ ! -x "$dest/usr/bin/promtool" ]; then
  work=$(mktemp -d)
  (
    cd "$work" &&
      { apt-get download prometheus >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } &&
      mkdir -p "$dest" && dpkg -x prometheus_*.deb "$dest"
  )
  rm -rf "$work"
fi
[ -x "$dest/usr/bin/promtool" ] && echo "$dest/usr/bin/promtool"
exit 0
