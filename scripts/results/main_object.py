#!/usr/bin/env python3
"""How often captions of the synthetic set name the main object's colour and shape, and what
the others name instead.

After SCST on the synthetic set every model says "there is a <colour> <shape>", so its CIDEr-D
is mostly the share of images whose main object (slot 0) it reads right. This script splits the
rest into captions that name another object of the scene, mix attributes of two objects, or
name a colour or shape that no object of the scene has (a misread feature).

    caprl eval --checkpoint RUN/best-rl --split test --beam 3 --out caps.json
    python3 scripts/results/main_object.py data/synth-2k caps.json [more.json ...]
"""
import argparse
import json
from pathlib import Path

# Surface forms of the synthetic world's colours and shapes (common/data/src/synth/world.rs);
# scenes.json names each value by its first form.
COLOURS = {"violet": "purple"}
SHAPES = {"block": "cube", "ball": "sphere", "tube": "cylinder", "hoop": "ring"}


def canonical(words):
    return {COLOURS.get(w, SHAPES.get(w, w)) for w in words}


def verdict(words, objects):
    """One caption against its scene's objects (slot 0 first)."""
    def names(o, key):
        return o[key] in words

    main = objects[0]
    if names(main, "colour") and names(main, "shape"):
        return "right"
    if any(names(o, "colour") and names(o, "shape") for o in objects[1:]):
        return "another object"
    if any(names(o, "colour") for o in objects) and any(names(o, "shape") for o in objects):
        return "two objects mixed"
    return "misread"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="the synthetic data set's directory (scenes.json)")
    ap.add_argument("captions", type=Path, nargs="+", help="`caprl eval --out` files")
    args = ap.parse_args()
    scenes_path = args.data / "scenes.json"
    if not scenes_path.exists():
        raise SystemExit(f"{scenes_path} not found: pass a data set made by `caprl data synth`")
    scenes = {s["id"]: s for s in json.loads(scenes_path.read_text())}
    kinds = ["right", "another object", "two objects mixed", "misread"]
    print("| captions | images | " + " | ".join(kinds) + " |")
    print("|---|---:|" + "---:|" * len(kinds))
    for path in args.captions:
        counts = dict.fromkeys(kinds, 0)
        captions = json.loads(path.read_text())
        for c in captions:
            scene = scenes.get(str(c["image_id"]))
            if scene is None:
                raise SystemExit(f"{path}: image {c['image_id']} is not in {scenes_path}")
            counts[verdict(canonical(c["caption"].split()), scene["objects"])] += 1
        n = max(len(captions), 1)
        cells = " | ".join(f"{100 * counts[k] / n:.1f}%" for k in kinds)
        print(f"| {path} | {len(captions)} | {cells} |")


if __name__ == "__main__":
    main()
