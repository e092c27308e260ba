#!/usr/bin/env python3
"""Make the committed CIDEr-D-with-<eos> fixture with self-critical.pytorch's own code path.

Writes common/score/tests/fixtures/cider_eos_reference.json from the tokenised text of
coco_reference.json (made by make_fixtures.py; rerun this after regenerating that file):

- the document frequencies are built as self-critical.pytorch's scripts/prepro_ngrams.py
  builds coco-train-idxs.p: every training reference gets " <eos>" appended, ruotianluo/cider's
  CiderScorer(df_mode="corpus") counts them with compute_doc_freq, and ref_len is the number
  of training images;
- the 520 fixture images are scored by ruotianluo/cider's CiderD(df=...).compute_score, as
  get_self_critical_reward calls it, on the strings array_to_str makes: every reference ends
  with " <eos>" (the label rows are zero-padded), and a candidate ends with " <eos>" only
  when it finished (`finished` below; array_to_str writes the terminating 0 only when the
  sampled row has one, so a caption cut at max_len gets none).

Every fourth image's candidate (i % 4 == 3) is the unfinished kind.

Usage: pip install pycocoevalcap six numpy; python3 scripts/score/make_cider_eos_fixture.py
       --ciderd PATH/TO/ruotianluo-cider/pyciderevalcap/ciderD/ciderD_scorer.py
(ruotianluo/cider at e9b736d, the commit self-critical.pytorch's `cider` submodule pins).
"""
import argparse
import json
import os
import pickle
import sys
import tempfile

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "common", "score", "tests", "fixtures")
EOS = "<eos>"


def array_to_str(words, finished):
    """self-critical.pytorch's array_to_str on a row of ids, written with words: the
    terminating 0 (here EOS) is kept when present."""
    return " ".join(words.split() + ([EOS] if finished else []))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ciderd", required=True, help="path to ruotianluo/cider ciderD_scorer.py")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.ciderd))))
    sys.path.insert(0, root)
    from pyciderevalcap.ciderD.ciderD import CiderD
    from pyciderevalcap.ciderD.ciderD_scorer import CiderScorer

    with open(os.path.join(FIXTURES, "coco_reference.json"), encoding="utf-8") as f:
        base = json.load(f)

    # prepro_ngrams.py: get_doc_freq over the references with <eos> appended.
    tmp = CiderScorer(df_mode="corpus")
    for refs in base["train_refs"]:
        tmp.cook_append(None, [array_to_str(r, True) for r in refs])
    tmp.compute_doc_freq()
    table = {"document_frequency": tmp.document_frequency, "ref_len": len(tmp.crefs)}

    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "data"))
        with open(os.path.join(d, "data", "train-eos.p"), "wb") as f:
            pickle.dump(table, f)
        cwd = os.getcwd()
        os.chdir(d)
        try:
            scorer = CiderD(df="train-eos")
        finally:
            os.chdir(cwd)

    images = base["images"]
    finished = [i % 4 != 3 for i in range(len(images))]
    gts = {i: [array_to_str(r, True) for r in im["refs"]] for i, im in enumerate(images)}
    res = [{"image_id": i, "caption": [array_to_str(im["cand"], finished[i])]} for i, im in enumerate(images)]
    mean, scores = scorer.compute_score(gts, res)

    fixture = {
        "about": "made by scripts/score/make_cider_eos_fixture.py with ruotianluo/cider e9b736d CiderD on the text of "
                 "coco_reference.json: df from its train_refs with <eos> appended (prepro_ngrams.py), every ref "
                 "and the finished candidates with <eos> appended (array_to_str)",
        "corpus": {"cider_d_eos": float(mean)},
        "images": [{"id": im["id"], "finished": finished[i], "cider_d_eos": float(scores[i])}
                   for i, im in enumerate(images)],
    }
    path = os.path.join(FIXTURES, "cider_eos_reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
    plain = sum(im["cider_d_train_df"] for im in images) / len(images)
    print(f"wrote {path}: {len(images)} images, CIDEr-D with <eos> {mean:.6f} (without: {plain:.6f})")


if __name__ == "__main__":
    main()
