"""Shared fixtures: the committed reference scores (made with pycocoevalcap 1.2 and
ruotianluo/cider, the scorer self-critical.pytorch pins) and the installed `caprl` command."""

import json
import os
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO, "common", "score", "tests", "fixtures")


def load_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def coco():
    return load_fixture("coco_reference.json")


@pytest.fixture(scope="session")
def coco_eos():
    return load_fixture("cider_eos_reference.json")


@pytest.fixture(scope="session")
def caprl_cli():
    """The `caprl` binary the wheel installed (on PATH in its virtual environment)."""
    path = shutil.which("caprl")
    if path is None:
        pytest.fail("the caprl command is not on PATH: install the wheel "
                    "(bash scripts/python/build-wheel.sh, then pip install target/wheels/caprl-*.whl)")
    return path


def run_cli(cli, *args, cwd=None):
    out = subprocess.run([cli, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"caprl {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out
