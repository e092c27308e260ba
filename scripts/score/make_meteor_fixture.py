#!/usr/bin/env python3
"""Make the committed METEOR fixture with pycocoevalcap's own Meteor wrapper.

Writes common/score/tests/fixtures/meteor_reference.json: the first 48 images of
coco_reference.json (made by make_fixtures.py; already PTB-tokenised, with an empty
candidate, one-word and repeated-word candidates, an empty reference in img3 and img40, and
non-ASCII words in img5 and img42) scored by pycocoevalcap 1.2's Meteor().compute_score,
which runs the METEOR 1.5 jar it ships (`java -jar -Xmx2G meteor-1.5.jar - - -stdio -l en
-norm`). The corpus score is the jar's aggregate over all segments, not the mean of the
per-image scores; both are stored.

Usage: pip install pycocoevalcap; apt-get install -y default-jre-headless;
       python3 scripts/score/make_meteor_fixture.py
"""
import json
import os

from pycocoevalcap.meteor.meteor import Meteor

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "common", "score", "tests", "fixtures")
COUNT = 48


def main():
    with open(os.path.join(FIXTURES, "coco_reference.json"), encoding="utf-8") as f:
        images = json.load(f)["images"][:COUNT]
    gts = {im["id"]: im["refs"] for im in images}
    res = {im["id"]: [im["cand"]] for im in images}
    score, scores = Meteor().compute_score(gts, res)
    fixture = {
        "about": "made by scripts/score/make_meteor_fixture.py with pycocoevalcap 1.2's Meteor (METEOR 1.5 jar) "
                 "on the first 48 images of coco_reference.json; text is already PTB-tokenised",
        "corpus": {"meteor": float(score)},
        "images": [{"id": im["id"], "refs": im["refs"], "cand": im["cand"], "meteor": float(s)}
                   for im, s in zip(images, scores)],
    }
    path = os.path.join(FIXTURES, "meteor_reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
    mean = sum(scores) / len(scores)
    print(f"wrote {path}: {len(images)} images, METEOR {score:.6f} (mean of per-image scores {mean:.6f})")


if __name__ == "__main__":
    main()
