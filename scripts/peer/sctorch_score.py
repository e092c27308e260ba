#!/usr/bin/env python3
"""Scores self-critical.pytorch's test-split captions on the benchmark task the way `caprl eval`
scores caprl's: CIDEr-D (corpus df, no <eos>) and BLEU-4 over all test images and over each subset
of subsets.json (seen, unseen, tail), each subset scored as a corpus of its own; plus the mean
caption length; with --meteor, METEOR 1.5 over all test images too. Prints the JSON that
scripts/peer/sctorch_regions.sh keeps in docs/results/sctorch/MODEL/result.json.

Usage: sctorch_score.py --caprl CAPRL --data DATA --model NAME --xe CANDS.json --rl CANDS.json
       --xe-seconds S --rl-seconds S --xe-epochs N --rl-epochs N [--meteor]
CANDS.json: {"<image id>": "caption"} as the script converts the repository's predictions.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def score(caprl, refs, cands, meteor=False):
    """`caprl score --json` of `cands` against `refs`: {cider_d, bleu4} (and meteor with
    `meteor`)."""
    with tempfile.TemporaryDirectory() as d:
        r, c = Path(d) / "refs.json", Path(d) / "cands.json"
        r.write_text(json.dumps(refs))
        c.write_text(json.dumps(cands))
        command = [caprl, "score", "-q", "--refs", str(r), "--cands", str(c), "--json"]
        out = subprocess.run(command + (["--meteor"] if meteor else []),
                             check=True, capture_output=True, text=True).stdout
    corpus = json.loads(out)["corpus"]
    scores = {"cider_d": corpus["cider_d"], "bleu4": corpus["bleu"][3]}
    if meteor:
        scores["meteor"] = corpus["meteor"]
    return scores


def metrics(caprl, refs, subsets, cands, meteor):
    missing = sorted(set(refs) - set(cands))
    if missing:
        sys.exit(f"sctorch_score: no caption for {len(missing)} test images (e.g. {missing[0]})")
    cands = {k: cands[k] for k in refs}
    out = score(caprl, refs, cands, meteor)
    for name, ids in subsets.items():
        picked = [k for k in refs if k in ids]
        if picked:
            subset = score(caprl, {k: refs[k] for k in picked}, {k: cands[k] for k in picked})
            out.update({f"{metric}_{name}": value for metric, value in subset.items()})
            out[f"images_{name}"] = len(picked)
    out["mean_len"] = sum(len(c.split()) for c in cands.values()) / len(cands)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caprl", required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--xe", type=Path, required=True)
    ap.add_argument("--rl", type=Path, required=True)
    for name in ("xe-seconds", "rl-seconds", "xe-epochs", "rl-epochs"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--meteor", action="store_true", help="also METEOR 1.5 over all test images")
    a = ap.parse_args()
    karpathy = json.loads((a.data / "captions.json").read_text())
    refs = {str(img["imgid"]): [s["raw"] for s in img["sentences"]]
            for img in karpathy["images"] if img["split"] == "test"}
    subsets = {k: set(v) for k, v in json.loads((a.data / "subsets.json").read_text()).items()}
    result = {
        "model": a.model,
        "xe_epochs": a.xe_epochs,
        "rl_epochs": a.rl_epochs,
        "xe_seconds": a.xe_seconds,
        "rl_seconds": a.rl_seconds,
        "test_images": len(refs),
        "xe": metrics(a.caprl, refs, subsets, json.loads(a.xe.read_text()), a.meteor),
        "scst": metrics(a.caprl, refs, subsets, json.loads(a.rl.read_text()), a.meteor),
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
