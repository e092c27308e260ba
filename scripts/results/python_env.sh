# Sourced by the results scripts that time Python: a virtual environment at
# target/python-bench/venv with this checkout's release wheel (scripts/python/build-wheel.sh),
# pycocoevalcap and six. Sets VENV to it.
VENV=target/python-bench/venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet 'maturin>=1.16,<2' 'pycocoevalcap>=1.2' six
wheel=$(PATH="$PWD/$VENV/bin:$PATH" bash scripts/python/build-wheel.sh)
"$VENV/bin/pip" install --quiet --force-reinstall --no-deps "$wheel"
