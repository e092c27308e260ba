#!/usr/bin/env python3
"""Make the committed score fixtures with the reference implementations.

Writes common/score/tests/fixtures/coco_reference.json: 520 images with
references (5 for most) and one candidate each, scored by pycocoevalcap's
Bleu(4), Rouge and Cider (= CIDEr-D) in corpus mode, by ruotianluo/cider's
CiderD with a df precomputed from separate "training" references (the SCST
setting), plus sets of captions with pycocoevalcap-BLEU mBLEU-4.

Raw captions (capitals, punctuation, "'s", "n't") go through pycocoevalcap's
Java PTBTokenizer once here, and the *tokenised* text is what both the
scorers here and the Rust tests consume, so CI needs neither Python nor Java.
The raw captions the tokenizer changes (all that it changes beyond lowercasing and
dropping end punctuation, 25 of the others) and the PROBES below are stored with their
tokens (`ptb_examples`): the Rust tokenizer is tested against them, so raw captions score
exactly like pycocoevalcap's, not only pre-tokenised text.

Usage: pip install pycocoevalcap six; python3 scripts/score/make_fixtures.py
       --ciderd PATH/TO/ruotianluo-cider/pyciderevalcap/ciderD/ciderD_scorer.py
(the file from github.com/ruotianluo/cider, self-critical.pytorch's submodule).

make_cider_eos_fixture.py (CIDEr-D with self-critical.pytorch's <eos>) and
make_meteor_fixture.py (pycocoevalcap's METEOR) read this file's tokenised text: rerun them
after regenerating it.
"""
import argparse
import importlib.util
import json
import math
import os
import pickle
import random
import tempfile

from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import CiderScorer
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "common", "score", "tests", "fixtures")

COMMON = "a an the of on in with and at to is are two three some near next by while its his her their".split()
NOUNS = ("man woman dog cat boy girl horse bus train plate table street beach kite pizza bench "
         "bird car tree field water bike surfboard skateboard giraffe elephant zebra clock sign "
         "laptop phone umbrella bed window kitchen room snow grass sky building boat").split()
VERBS = "sitting standing riding holding eating walking flying looking playing lying running parked".split()
ADJS = "red white black large small young old green blue tall wooden busy empty".split()
UNICODE = ["café", "naïve", "jalapeño", "crème", "brûlée", "日本", "東京", "straße", "ñandú", "smörgåsbord", "😀"]
# Captions written to exercise the tokenizer's rules: brackets (kept as -lrb- etc.:
# pycocoevalcap lowercases before matching its upper-case punctuation list), quotes,
# clitics, numbers, abbreviations, hyphens, ellipses, symbols, typographic punctuation.
PROBES = [
    "(A) cat",
    "A dog [on the left] {and} a cat (sleeping).",
    "Two men (one in red) play frisbee; a dog watches.",
    "A \"vintage\" car -- parked 'outside' the shop...",
    "It's the dog's bone, isn't it? We're sure they've gone; you'll see.",
    "I can't, won't, cannot go. He'd said I'm gonna wanna gotta",
    "The dogs' toys and the kids' bikes",
    "It costs $5.50, or 10% off at 3:30, 1,000 times. #1 pick!",
    "Mr. Smith and Dr. Jones in the U.S. vs. the U.K. at 5 p.m.",
    "A black-and-white photo of a 5-year-old boy.",
    "A man -- wearing a hat -- rides a bike - fast.",
    "A train!? No... a bus!! Really?? Wait.... ok",
    "A man---wearing a hat----smiles",
    "Don\u2019t \u201cquote\u201d me \u2018here\u2019\u2026 ok \u2013 fine \u2014 done",
    "A sign reads: STOP & GO",
    "www.example.com and 3.14 and e.g. a dog",
    "The boy's mom's car",
    "A cafe' or a naive 'tis",
]
RAW_EXTRAS = ["Man's", "doesn't", "it's", "(outside)", "table,", "sky.", "\"big\"", "dogs'", "U.S.", "5-year-old", "&", "don't"]


def sentence(rng, topic, lo, hi):
    n = rng.randint(lo, hi)
    words = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            words.append(rng.choice(COMMON))
        elif r < 0.85:
            words.append(rng.choice(topic))
        else:
            words.append(rng.choice(NOUNS + VERBS + ADJS))
    return words


def raw_variant(rng, words):
    """Make a raw caption the PTB tokenizer changes: capitals, punctuation."""
    words = list(words)
    if rng.random() < 0.3 and words:
        words[0] = words[0].capitalize()
    if rng.random() < 0.25:
        words.insert(rng.randrange(len(words) + 1), rng.choice(RAW_EXTRAS))
    s = " ".join(words)
    if rng.random() < 0.4:
        s += rng.choice([".", " .", "!", "?", " ,"])
    return s


def make_images(rng, count, prefix):
    images = []
    for i in range(count):
        topic = rng.sample(NOUNS, 4) + rng.sample(VERBS, 2) + rng.sample(ADJS, 2)
        if i % 37 == 5:
            topic = topic + rng.sample(UNICODE, 3)
        nrefs = 5 if i % 25 else rng.choice([1, 3, 4, 6, 7])
        refs = [raw_variant(rng, sentence(rng, topic, 6, 14)) for _ in range(nrefs)]
        images.append({"id": f"{prefix}{i}", "topic": topic, "raw_refs": refs})
    return images


def make_candidate(rng, img, i):
    topic = img["topic"]
    kind = i % 12
    ref_words = [r.split() for r in img["raw_refs"]]
    if kind == 0:
        return ""
    if kind == 1:
        return rng.choice(topic)
    if kind == 2:
        return " ".join([rng.choice(topic)] * rng.randint(2, 9))
    if kind == 3:
        longest = max(len(w) for w in ref_words)
        return " ".join(sentence(rng, topic, longest + 1, longest + 12))
    if kind == 4:
        return img["raw_refs"][0]
    if kind == 5:
        return " ".join(rng.sample(UNICODE, 3) + sentence(rng, topic, 2, 6))
    if kind == 6:
        return raw_variant(rng, sentence(rng, topic, 1, 3))
    w = list(rng.choice(ref_words))
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.3 and len(w) > 1:
            del w[rng.randrange(len(w))]
        elif op < 0.6:
            w[rng.randrange(len(w))] = rng.choice(topic + COMMON)
        elif len(w) > 1:
            a, b = rng.randrange(len(w)), rng.randrange(len(w))
            w[a], w[b] = w[b], w[a]
    return raw_variant(rng, w)


def ptb(captions):
    """Tokenise {key: [raw, ...]} with pycocoevalcap's Java PTBTokenizer."""
    data = {k: [{"caption": c} for c in v] for k, v in captions.items()}
    return PTBTokenizer().tokenize(data)


def lower_and_strip(raw):
    """What a tokenizer that only lowercases and drops end punctuation would make."""
    return " ".join(w.rstrip(".?!,") for w in raw.lower().split() if w.rstrip(".?!,"))


def ptb_examples(raw_gts, gts, raw_res, res):
    """(raw, tokens) of the references and candidates: every distinct raw caption whose
    tokens are more than lowercasing and dropping end punctuation, the first 25 that are
    only that, then PROBES."""
    examples, seen, plain = [], set(), 0
    for raw_map, tok_map in ((raw_gts, gts), (raw_res, res)):
        for k in raw_map:
            for raw, tok in zip(raw_map[k], tok_map[k]):
                if raw == tok or raw in seen:
                    continue
                seen.add(raw)
                if lower_and_strip(raw) == tok:
                    plain += 1
                    if plain > 25:
                        continue
                examples.append({"raw": raw, "ptb": tok})
    probes = ptb({"probe": PROBES})["probe"]
    examples += [{"raw": raw, "ptb": tok} for raw, tok in zip(PROBES, probes)]
    return examples


def load_ciderd(path):
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("ciderD_scorer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CiderScorer


def ciderd_precomputed(CiderScorerD, train_tok, gts, res, keys):
    """Scores with a df built from train_tok, the SCST (coco-train-idxs) way."""
    builder = CiderScorer(n=4, sigma=6.0)
    for refs in train_tok:
        builder.cook_append(None, refs)
    builder.compute_doc_freq()
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "data"))
        with open(os.path.join(d, "data", "train-df.p"), "wb") as f:
            pickle.dump({"document_frequency": builder.document_frequency, "ref_len": len(train_tok)}, f)
        cwd = os.getcwd()
        os.chdir(d)
        try:
            scorer = CiderScorerD(df_mode="train-df", n=4, sigma=6.0)
        finally:
            os.chdir(cwd)
    for k in keys:
        scorer.cook_append(res[k][0], gts[k])
    mean, scores = scorer.compute_score()
    return float(mean), [float(s) for s in scores]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ciderd", help="path to ruotianluo/cider ciderD_scorer.py")
    ap.add_argument("--seed", type=int, default=20240521)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    images = make_images(rng, 520, "img")
    train = make_images(rng, 300, "train")
    raw_gts = {im["id"]: im["raw_refs"] for im in images}
    raw_res = {im["id"]: [make_candidate(rng, im, i)] for i, im in enumerate(images)}
    raw_train = {im["id"]: im["raw_refs"] for im in train}

    gts = ptb(raw_gts)
    res = ptb(raw_res)
    train_tok = list(ptb(raw_train).values())
    # Raw -> tokenised pairs, taken before two references are blanked below (pairing them
    # afterwards matched a raw caption with the blank).
    raw_examples = ptb_examples(raw_gts, gts, raw_res, res)
    # Two images get an empty reference (pycocoevalcap's ROUGE treats "" as one empty token).
    for k in ["img3", "img40"]:
        gts[k] = gts[k][:-1] + [""]
    keys = [im["id"] for im in images]
    gts = {k: gts[k] for k in keys}
    res = {k: res[k] for k in keys}

    bleu, bleu_list = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, rouge_list = Rouge().compute_score(gts, res)
    cider, cider_list = Cider().compute_score(gts, res)

    CiderScorerD = load_ciderd(args.ciderd)
    if CiderScorerD is None:
        raise SystemExit("pass --ciderd PATH (ruotianluo/cider pyciderevalcap/ciderD/ciderD_scorer.py)")
    cider_tr, cider_tr_list = ciderd_precomputed(CiderScorerD, train_tok, gts, res, keys)

    out_images = []
    for i, k in enumerate(keys):
        out_images.append({
            "id": k,
            "refs": gts[k],
            "cand": res[k][0],
            "bleu": [float(bleu_list[n][i]) for n in range(4)],
            "rouge_l": float(rouge_list[i]),
            "cider_d": float(cider_list[i]),
            "cider_d_train_df": cider_tr_list[i],
        })

    # Diversity sets: mBLEU-4 with pycocoevalcap sentence BLEU, Div-1/2.
    sets = []
    for s in range(40):
        topic = rng.sample(NOUNS, 3) + rng.sample(VERBS, 2)
        caps = [" ".join(sentence(rng, topic, 3, 10)) for _ in range(5)]
        if s % 10 == 0:
            caps[1] = caps[0]
        b4 = []
        for i, c in enumerate(caps):
            others = [o for j, o in enumerate(caps) if j != i]
            bs = BleuScorer(n=4)
            bs += (c, others)
            _, lst = bs.compute_score(option="closest", verbose=0)
            b4.append(lst[3][0])
        words = [c.split() for c in caps]
        total = sum(len(w) for w in words)
        uni = {(w[i],) for w in words for i in range(len(w))}
        bi = {tuple(w[i:i + 2]) for w in words for i in range(len(w) - 1)}
        sets.append({"captions": caps, "mbleu4": sum(b4) / len(b4),
                     "div1": len(uni) / total, "div2": len(bi) / total})

    fixture = {
        "about": "made by scripts/score/make_fixtures.py with pycocoevalcap 1.2 and ruotianluo/cider ciderD_scorer.py; "
                 "text is already PTB-tokenised (whitespace-split it)",
        "corpus": {"bleu": [float(b) for b in bleu], "rouge_l": float(rouge), "cider_d": float(cider),
                   "cider_d_train_df": cider_tr},
        "images": out_images,
        "train_refs": train_tok,
        "diversity_sets": sets,
        "ptb_examples": raw_examples,
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "coco_reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {path}: {len(out_images)} images, CIDEr-D {cider:.6f}, BLEU-4 {bleu[3]:.6f}, ROUGE-L {rouge:.6f}")


if __name__ == "__main__":
    main()
