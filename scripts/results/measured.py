"""What every results page says first: the machine, the commit, the date and the command of its
measurement, read from the machine.json and run.json that scripts/results/record.sh writes.
A directory without a machine prints nothing (exit status 2)."""
import json
import sys

SIMD = {"avx512": "AVX-512", "avx2": "AVX2", "baseline": "baseline (SSE2)"}


def load(path):
    """The JSON file at `path`; exit 2 when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        sys.stderr.write(f"render: {path} is unreadable ({e}); nothing printed\n")
        sys.exit(2)


def load_lines(path):
    """The JSON value of each non-blank line of `path`; exit 2 when it is missing or unreadable."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        sys.stderr.write(f"render: {path} is unreadable ({e}); nothing printed\n")
        sys.exit(2)


def machine_of(directory):
    """machine.json of `directory`; exit 2 when it names no CPU, cores and SIMD level."""
    machine = load(directory / "machine.json")
    if not isinstance(machine, dict) or not all(machine.get(k) for k in ("cpu", "cores", "simd")):
        sys.stderr.write(f"render: {directory / 'machine.json'} names no machine; nothing printed\n")
        sys.exit(2)
    return machine


def words(machine):
    """`AMD EPYC, 2 cores, SIMD level AVX2` (and the GPU build, when there is one)."""
    gpu = f", {machine['gpu_build']} build" if machine.get("gpu_build") else ""
    simd = SIMD.get(machine["simd"], machine["simd"])
    return f"{machine['cpu']}, {machine['cores']} cores, SIMD level {simd}{gpu}"


def line(directory):
    """The sentence that opens a page: where, when, at which commit and with which command."""
    machine, run = machine_of(directory), load(directory / "run.json")
    for key in ("command", "commit", "date"):
        if not run.get(key):
            sys.stderr.write(f"render: {directory / 'run.json'} names no {key}; nothing printed\n")
            sys.exit(2)
    changes = " plus uncommitted changes" if run.get("uncommitted_changes") else ""
    return (f"Measured on {words(machine)}, on {run['date']}, commit `{run['commit']}`{changes}: "
            f"`{run['command']}`.")
