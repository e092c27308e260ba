#!/usr/bin/env python3
"""PyTorch CPU peer of benches/scst.rs: one self-critical (SCST) iteration as
self-critical.pytorch runs it (get_self_critical_reward + RewardCriterion), at the `coco-10x5`
shape of benches/model_shapes.json (fc model, GRU, embed 512, hidden 512, 2048-d fc, 10 images,
at most 16 words) with the data set's vocabulary:

- sample: training mode, 5 captions per image drawn with torch.multinomial (temperature 1), the
  log-probs of the drawn tokens kept with their gradients;
- greedy: one caption per image, eval mode, no_grad;
- reward: CIDEr-D (pycocoevalcap's CiderScorer: n = 4, sigma = 6, clipping, x10) of all 60
  captions against their image's references, with the document frequency of the training
  split's references computed once at start-up (self-critical's CiderD(df='coco-train-idxs'):
  ref_len = log(number of training images)); advantage = reward(sample) - reward(greedy of its
  image);
- update: loss = -sum(advantage * log p(token) * mask) / sum(mask) (the mask covers the tokens
  up to and including EOS), backward, clip_grad_norm 2.0, AdamW step (lr 5e-5).

A caption ends at EOS (not suppressed) or after 16 words; one more step lets it emit EOS, as
caprl's decoders do. The same 10 images (the first 10 of the train split, random seeded 2048-d
fc features) every iteration. Reads a caprl data set directory (--data: captions.json in
Karpathy format, vocab.json). Prints one JSON line: {"threads": n, "shape": "coco-10x5",
"vocab": V, "scst_iteration": seconds, "sample": ..., "greedy": ..., "reward": ...,
"update": ..., "torch": version}: medians of --iters iterations after 2 warm-up ones (each part
the median of its own timings). Never run in CI; see run_scst_peer.sh."""

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs

from model_torch import BOS, EOS, PAD, Captioner, load_shapes
from peer_common import clipped_step, median, torch_build

UNK = 3
SHAPE = "coco-10x5"
TRAIN = ("train", "restval")


class CorpusCiderD(CiderScorer):
    """pycocoevalcap's CIDEr-D with a fixed document frequency and ref_len (the training
    split's), as ruotianluo/cider's CiderD(df='coco-train-idxs') scores SCST rewards."""

    def __init__(self, df, ref_len):
        self.corpus_ref_len = ref_len
        super().__init__(n=4, sigma=6.0)
        self.document_frequency = df

    # compute_cider sets ref_len = log(number of captions scored); the corpus's is kept.
    ref_len = property(lambda self: self.corpus_ref_len, lambda self, value: None)

    def compute_doc_freq(self):
        pass  # the corpus's document frequency, computed once

    def compute_score(self, option=None, verbose=0):
        scores = np.array(self.compute_cider())
        return scores.mean(), scores


def scst_args(iters):
    """--data, --threads (PyTorch's thread count set) and --iters (default `iters`)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, type=Path, help="caprl data set directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=iters, help="timed iterations (median)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args


def load_data(root):
    """(words, training images' references as id lists)."""
    words = json.loads((root / "vocab.json").read_text(encoding="utf-8"))["words"]
    assert words[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"], "vocab.json: unexpected specials"
    ids = {w: i for i, w in enumerate(words)}
    images = json.loads((root / "captions.json").read_text(encoding="utf-8"))["images"]
    refs = [
        [[ids.get(w, UNK) for w in s["tokens"]] for s in im["sentences"]]
        for im in images
        if im["split"] in TRAIN
    ]
    return words, refs


def to_text(words, seq):
    """Space-joined words up to (without) EOS."""
    out = []
    for i in seq:
        if i == EOS:
            break
        if i != PAD:
            out.append(words[i])
    return " ".join(out)


def train_doc_freq(words, train):
    """CIDEr-D's document frequency over the training references (each image counts once per
    n-gram) and its ref_len, log(number of training images)."""
    df = defaultdict(float)
    for refs in train:
        crefs = cook_refs([to_text(words, r) for r in refs])
        for ngram in {g for ref in crefs for g in ref}:
            df[ngram] += 1
    return df, np.log(float(len(train)))


def cider_d(df, ref_len, words, rows, row_refs):
    """CIDEr-D (CorpusCiderD) of each row of tokens against its references in row_refs."""
    scorer = CorpusCiderD(df, ref_len)
    for cand, rs in zip([to_text(words, r) for r in rows], row_refs):
        scorer += (cand, rs)
    _, scores = scorer.compute_score()
    return scores


def decode_rows(step_logp, rows, steps, sample):
    """Captions of `rows` rows, step_logp(previous tokens) giving each step's log-probs (BOS
    first): EOS ends one, the step after `steps` words keeps only EOS. Returns the tokens
    [rows, <= steps+1] (PAD after EOS), the log-probs of the tokens (with gradients when
    enabled) and the mask of those tokens."""
    w = torch.full((rows,), BOS, dtype=torch.long)
    done = torch.zeros(rows, dtype=torch.bool)
    toks, lps = [], []
    for t in range(steps + 1):
        logp = step_logp(w)
        w = torch.multinomial(logp.detach().exp(), 1).squeeze(1) if sample else logp.argmax(1)
        if t == steps:
            w = w.masked_fill(w != EOS, PAD)
        w = w.masked_fill(done, PAD)
        toks.append(w)
        lps.append(logp.gather(1, w.unsqueeze(1)).squeeze(1))
        done = done | (w == EOS) | (w == PAD)
        if bool(done.all()):
            break
    seqs = torch.stack(toks, 1)
    mask = (seqs != PAD).float()
    return seqs, torch.stack(lps, 1) * mask, mask


def decode(m, img, h, steps, sample):
    """decode_rows with the recurrent captioner m from its encoder's outputs (img, h)."""

    def step_logp(w):
        nonlocal h
        h = m.step(m.drop(m.embed(w)), img, h, None)
        return F.log_softmax(m.logit(m.drop(h)), -1)

    return decode_rows(step_logp, img.size(0), steps, sample)


def pg_update(m, opt, adv, logp, mask):
    """loss = -sum(advantage * log p(token) * mask) / sum(mask), then the clipped AdamW step."""
    clipped_step(m, opt, -(adv * logp * mask).sum() / mask.sum())


def time_iterations(iteration, iters, warmup=2):
    """iteration(parts) run `warmup` times, then `iters` times timed: the median of what it
    returns (the iteration's seconds) and the median of each part it appends to parts."""
    for _ in range(warmup):
        iteration(defaultdict(list))
    parts = defaultdict(list)
    total = [iteration(parts) for _ in range(iters)]
    return median(total), {name: median(ts) for name, ts in parts.items()}


def main():
    args = scst_args(iters=10)
    s = load_shapes(SHAPE)[0]
    words, train = load_data(args.data)
    n, per, steps = s["images"], s["captions_per_image"], s["len"]
    df, ref_len = train_doc_freq(words, train)

    torch.manual_seed(0)
    m = Captioner(dict(s, vocab=len(words)), suppress_eos=False)
    opt = torch.optim.AdamW(m.parameters(), lr=5e-5, weight_decay=0.0)
    fc = torch.rand(n, s["fc"])
    refs = [[to_text(words, r) for r in image] for image in train[:n]]
    row_refs = [refs[i // per] for i in range(n * per)] + refs

    def iteration(parts):
        t0 = time.perf_counter()
        m.train()
        img, h, _ = m.encode_rows(fc, None, per)
        seqs, logp, mask = decode(m, img, h, steps, sample=True)
        t1 = time.perf_counter()
        m.eval()
        with torch.no_grad():
            img, h, _ = m.encode(fc)
            greedy, _, _ = decode(m, img, h, steps, sample=False)
        m.train()
        t2 = time.perf_counter()
        scores = cider_d(df, ref_len, words, seqs.tolist() + greedy.tolist(), row_refs)
        adv = scores[: n * per] - np.repeat(scores[n * per :], per)
        adv = torch.from_numpy(adv).float().unsqueeze(1)
        t3 = time.perf_counter()
        pg_update(m, opt, adv, logp, mask)
        t4 = time.perf_counter()
        for name, t in zip(("sample", "greedy", "reward", "update"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            parts[name].append(t)
        return t4 - t0

    total, parts = time_iterations(iteration, args.iters)
    res = {"threads": args.threads, "shape": SHAPE, "vocab": len(words), "scst_iteration": total}
    res.update(parts)
    res.update(torch_build())
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
