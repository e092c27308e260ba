#!/usr/bin/env python3
"""Speed of caprl's scorer against pycocoevalcap on one 5,000 x 5 set.

Writes a deterministic set (REFS {"<id>": [5 refs]}, CANDS {"<id>": caption})
to a directory, times pycocoevalcap's Cider (CIDEr-D) alone and Bleu + Rouge
+ Cider on it (pre-tokenised text, no Java tokenizer, like the fixtures),
then runs `cargo bench --bench score` with CAPRL_SCORE_SET pointing at the
set and prints captions/s for both and the ratio, 1 core and all cores.

Usage: python3 scripts/score/bench.py [--dir DIR] [--images 5000]
"""
import argparse
import json
import os
import random
import re
import subprocess
import time

from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge


def make_set(n_images, seed=11):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(2000)]

    def sent():
        return " ".join(vocab[min(rng.randrange(2000), rng.randrange(2000))] for _ in range(rng.randint(7, 13)))

    refs = {str(i): [sent() for _ in range(5)] for i in range(n_images)}
    cands = {str(i): sent() for i in range(n_images)}
    return refs, cands


def timed(fn, reps=3):
    """Best of `reps` runs after one warm-up (the machine may be shared; the
    Rust side reports its best run too)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="target/score-bench-set")
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--reference-only", action="store_true",
                    help="time pycocoevalcap's CIDEr-D only (what `caprl bench all` reads)")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    refs, cands = make_set(args.images)
    with open(os.path.join(args.dir, "refs.json"), "w") as f:
        json.dump(refs, f)
    with open(os.path.join(args.dir, "cands.json"), "w") as f:
        json.dump(cands, f)

    gts = refs
    res = {k: [v] for k, v in cands.items()}
    n = len(res)
    t_cider = timed(lambda: Cider().compute_score(gts, res))
    if args.reference_only:
        print(f"pycocoevalcap: cider_d {n / t_cider:.0f} captions/s (1 core)")
        return
    t_all = timed(lambda: (Bleu(4).compute_score(gts, res, verbose=0), Rouge().compute_score(gts, res),
                           Cider().compute_score(gts, res)), reps=3)
    py_cider, py_all = n / t_cider, n / t_all
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"pycocoevalcap: cider_d {py_cider:.0f} captions/s, all metrics {py_all:.0f} captions/s (1 core)")

    env = dict(os.environ, CAPRL_SCORE_SET=os.path.abspath(args.dir))
    out = subprocess.run(["cargo", "bench", "--bench", "score", "--", "--warm-up-time", "1",
                          "--measurement-time", "3"], env=env, capture_output=True, text=True)
    line = next((l for l in out.stdout.splitlines() if l.startswith("CAPRL ")), None)
    if line is None:
        raise SystemExit(f"cargo bench printed no CAPRL line:\n{out.stdout}\n{out.stderr}")
    r = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
    print(f"caprl (threads={int(r['threads'])}):")
    for key, py in [("cider_d", py_cider), ("all_metrics", py_all)]:
        one, many = r[f"{key}_1core"], r[f"{key}_allcores"]
        print(f"  {key:<12} 1 core {one:>12.0f} captions/s ({one / py:6.1f}x)   "
              f"all cores {many:>12.0f} captions/s ({many / py:6.1f}x)")


if __name__ == "__main__":
    main()
