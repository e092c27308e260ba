"""The Python reward's cost page (docs/results/reward-cost.md) in Markdown, from
scripts/results/reward_cost.sh's files: DIR/rewards.json (`caprl bench reward --json`),
DIR/steps.json (one `caprl bench pipeline --json` run per reward spec), DIR/machine.json and
DIR/run.json. scripts/results/render.py prints it."""
import measured


def render(d):
    bench, steps = measured.load(d / "rewards.json"), measured.load(d / "steps.json")
    rows = bench["rows"]
    out = [
        "# What a reward written in Python costs",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash "
        "scripts/results/reward_cost.sh` (this page is rendered from [reward-cost/](reward-cost/) "
        "by `scripts/results/render.py`). The Python functions are "
        "`scripts/python/bench_rewards.py`.",
        "",
        "## Per rollout, as a reward worker scores it",
        "",
        f"`caprl bench reward`: {bench['rollouts']} rollouts of {bench['images']} images × "
        f"({bench['samples']} samples + the greedy caption) = {bench['captions']} captions, "
        f"{bench['references']} references per image; best of {bench['rounds']} rounds.",
        "",
        f"| reward | ms / rollout | µs / caption | vs `{rows[0]['reward']}` |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        out.append(f"| `{r['reward']}` | {r['ms_per_rollout']:.3f} | {r['us_per_caption']:.1f} | "
                   f"{r['ms_per_rollout'] / rows[0]['ms_per_rollout']:.2f}× |")
    first = steps[0]["run"]
    out += [
        "",
        "## A whole run's RL step",
        "",
        f"`caprl bench pipeline --modes in-process --steps {first['steps']}`, the default config "
        "(fc model, 32 images × 5 samples per step) with each `reward.spec`; the mean step after "
        "the first, and the reward worker's scoring per step.",
        "",
        "| `reward.spec` | s / step | scoring s / step |",
        "|---|---:|---:|",
    ]
    for s in steps:
        score = s["run"]["stages"].get("reward-worker/score", [0.0])[0]
        out.append(f"| `{s['spec']}` | {s['run']['later_step_seconds']:.3f} | {score:.3f} |")
    return "\n".join(out) + "\n"
