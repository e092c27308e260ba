"""The broadcast-scaling page (docs/results/scale.md) in Markdown, from scripts/results/scale.sh's
files: DIR/full-every-10.md, DIR/full-every-1.md and DIR/full-every-10-hosts-of-8.md (what
`caprl bench scale` printed),
DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import sys

import measured


def printed(path):
    """What the benchmark printed; exit 2 naming the file when it is missing."""
    try:
        return path.read_text().strip()
    except OSError as e:
        sys.stderr.write(f"render: {path} is unreadable ({e}); nothing printed\n")
        sys.exit(2)


def render(d):
    out = [
        "# The policy broadcast against the number of actors",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash scripts/results/scale.sh` "
        "(this page is rendered from [scale/](scale/) by `scripts/results/render.py`).",
        "",
        "`caprl bench scale` runs a real nats-server, the learner's driver, the actors' and "
        "reward workers' loops and CIDEr-D scoring in one process, with the decode simulated "
        "(the actors sleep) and the learner's update a real AdamW step at the run's RL learning "
        "rate plus a stated sleep, so the broker and the broadcast are what is measured. Policy "
        "snapshots in bf16 go through the object store, one copy per actor, as across hosts. "
        "`NATS MB per version` counts every byte through the broker (tasks, rollouts and scores "
        "too) per published version; `per reader, of a snapshot` divides it by the learner and "
        "every actor and by the snapshot's size.",
        "",
        "## Version chains of deltas (`runtime.snapshot_full_every = 10`, the default)",
        "",
        printed(d / "full-every-10.md"),
        "",
        "## Every version whole (`runtime.snapshot_full_every = 1`)",
        "",
        printed(d / "full-every-1.md"),
        "",
        "## Deltas, and 8 actors per host sharing one fetch (`runtime.snapshot_cache_dir`)",
        "",
        "Each group of 8 actors (a simulated host) shares a cache directory: the first to need "
        "a version fetches it, the others read it there.",
        "",
        printed(d / "full-every-10-hosts-of-8.md"),
    ]
    return "\n".join(out) + "\n"
