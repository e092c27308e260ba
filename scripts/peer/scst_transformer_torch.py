#!/usr/bin/env python3
"""PyTorch CPU peer of caprl's in-process SCST step with the Transformer: one new-self-critical
iteration as self-critical.pytorch runs it (LossWrapper with structure_loss_type
"new_self_critical", TransformerModel's _sample), at COCO's shape with the reference 6 + 6
layers (transformer_torch.py's "coco-ref": vocabulary from the data set, 36 regions x 2,048-d,
d_model 512, 8 heads, d_ff 2048, dropout 0.1):

- sample: training mode, 10 images x 5 captions, the encoder once per image and its output
  repeated per sample (utils.repeat_tensors); at every step the whole decoder runs again over
  the prefix, cross-attention projections included (TransformerModel.core: no key/value
  cache), torch.multinomial at temperature 1, the drawn tokens' log-probs kept with their
  gradients; at most 16 words, then one step that keeps only EOS;
- reward: CIDEr-D (pycocoevalcap's CiderScorer with the training split's document frequency,
  as scst_torch.py) of the 50 captions against their image's references; advantage = reward
  - the mean of the image's other 4 samples (new_self_critical's baseline);
- update: loss = -sum(advantage * log p(token) * mask) / sum(mask), backward, clip_grad_norm
  2.0, AdamW step.

The same 10 images (the first 10 of the train split, random 36 x 2,048 region features) every
iteration. Reads a caprl data set directory (--data). Prints one JSON line: {"threads": n,
"shape": "coco-ref-10x5", "vocab": V, "scst_iteration": s, "sample": s, "reward": s,
"update": s, "tokens_sampled": n, ...}: medians of --iters iterations after 2 warm-up ones.
Never run in CI; see run_scst_transformer_peer.sh."""

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from pycocoevalcap.cider.cider_scorer import cook_refs

from scst_torch import CorpusCiderD, load_data, to_text
from transformer_torch import BOS, EOS, PAD, SHAPES, TransformerCaptioner

IMAGES, SAMPLES = 10, 5


def sample_uncached(m, att, n, steps):
    """n captions per image of att [N, R, D], decoding as TransformerModel._sample does: the
    encoder once per image, the decoder over the whole prefix every step. Returns tokens
    [N*n, steps+1] (PAD after EOS), the drawn tokens' log-probs (with gradients) and the mask."""
    mem = m.encode_memory(att).repeat_interleave(n, 0)
    rows = mem.size(0)
    ys = torch.full((rows, 1), BOS, dtype=torch.long)
    done = torch.zeros(rows, dtype=torch.bool)
    toks, lps = [], []
    for t in range(steps + 1):
        kvs = [layer.src_attn.memory_kv(mem) for layer in m.dec]
        logp = m.decode_full(kvs, ys)[:, -1]
        w = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
        if t == steps:
            w = w.masked_fill(w != EOS, PAD)
        w = w.masked_fill(done, PAD)
        toks.append(w)
        lps.append(logp.gather(1, w.unsqueeze(1)).squeeze(1))
        done = done | (w == EOS) | (w == PAD)
        ys = torch.cat([ys, w.unsqueeze(1)], 1)
        if bool(done.all()):
            break
    seqs = torch.stack(toks, 1)
    mask = (seqs != PAD).float()
    return seqs, torch.stack(lps, 1) * mask, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, type=Path, help="caprl data set directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5, help="timed iterations (median)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    words, train = load_data(args.data)
    s = dict(SHAPES["coco-ref"], V=len(words))
    steps = s["T"]

    df = defaultdict(float)
    for refs in train:
        crefs = cook_refs([to_text(words, r) for r in refs])
        for ngram in {g for ref in crefs for g in ref}:
            df[ngram] += 1
    ref_len = np.log(float(len(train)))

    torch.manual_seed(0)
    m = TransformerCaptioner(s)
    with torch.no_grad():  # EOS may end a caption, as in training (transformer_torch suppresses it)
        m.logit.bias[EOS] = 0.0
    opt = torch.optim.AdamW(m.parameters(), lr=5e-5, weight_decay=0.0)
    att = torch.rand(IMAGES, s["R"], s["att"])
    refs = [[to_text(words, r) for r in image] for image in train[:IMAGES]]
    row_refs = [refs[i // SAMPLES] for i in range(IMAGES * SAMPLES)]
    tokens = []

    def iteration(parts):
        t0 = time.perf_counter()
        m.train()
        seqs, logp, mask = sample_uncached(m, att, SAMPLES, steps)
        tokens.append(int(mask.sum()))
        t1 = time.perf_counter()
        scorer = CorpusCiderD(df, ref_len)
        for cand, rs in zip((to_text(words, r) for r in seqs.tolist()), row_refs):
            scorer += (cand, rs)
        _, scores = scorer.compute_score()
        r = scores.reshape(IMAGES, SAMPLES)
        baseline = (r.sum(1, keepdims=True) - r) / (SAMPLES - 1)
        adv = torch.from_numpy((r - baseline).reshape(-1)).float().unsqueeze(1)
        t2 = time.perf_counter()
        loss = -(adv * logp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 2.0)
        opt.step()
        t3 = time.perf_counter()
        for name, t in zip(("sample", "reward", "update"), (t1 - t0, t2 - t1, t3 - t2)):
            parts[name].append(t)
        return t3 - t0

    for _ in range(2):
        iteration(defaultdict(list))
    parts = defaultdict(list)
    total = [iteration(parts) for _ in range(args.iters)]
    med = lambda ts: sorted(ts)[len(ts) // 2]  # noqa: E731
    res = {"threads": args.threads, "shape": "coco-ref-10x5", "vocab": len(words)}
    res["scst_iteration"] = med(total)
    res.update({name: med(ts) for name, ts in parts.items()})
    res["tokens_sampled"] = med(tokens)
    res["torch"] = torch.__version__
    res["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
