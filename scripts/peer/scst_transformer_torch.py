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

import json
import time

import torch

from peer_common import median, torch_build
from scst_torch import (
    cider_d,
    decode_rows,
    load_data,
    pg_update,
    scst_args,
    time_iterations,
    to_text,
    train_doc_freq,
)
from transformer_torch import EOS, SHAPES, TransformerCaptioner

IMAGES, SAMPLES = 10, 5


def sample_uncached(m, att, n, steps):
    """n captions per image of att [N, R, D], decoding as TransformerModel._sample does: the
    encoder once per image, the decoder over the whole prefix every step. Returns tokens
    [N*n, steps+1] (PAD after EOS), the drawn tokens' log-probs (with gradients) and the mask."""
    mem = m.encode_memory(att).repeat_interleave(n, 0)
    ys = None  # the prefix: BOS, then the drawn tokens

    def step_logp(w):
        nonlocal ys
        ys = w.unsqueeze(1) if ys is None else torch.cat([ys, w.unsqueeze(1)], 1)
        kvs = [layer.src_attn.memory_kv(mem) for layer in m.dec]
        return m.decode_full(kvs, ys)[:, -1]

    return decode_rows(step_logp, mem.size(0), steps, sample=True)


def main():
    args = scst_args(iters=5)
    words, train = load_data(args.data)
    s = dict(SHAPES["coco-ref"], V=len(words))
    steps = s["T"]
    df, ref_len = train_doc_freq(words, train)

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
        scores = cider_d(df, ref_len, words, seqs.tolist(), row_refs)
        r = scores.reshape(IMAGES, SAMPLES)
        baseline = (r.sum(1, keepdims=True) - r) / (SAMPLES - 1)
        adv = torch.from_numpy((r - baseline).reshape(-1)).float().unsqueeze(1)
        t2 = time.perf_counter()
        pg_update(m, opt, adv, logp, mask)
        t3 = time.perf_counter()
        for name, t in zip(("sample", "reward", "update"), (t1 - t0, t2 - t1, t3 - t2)):
            parts[name].append(t)
        return t3 - t0

    total, parts = time_iterations(iteration, args.iters)
    res = {"threads": args.threads, "shape": "coco-ref-10x5", "vocab": len(words)}
    res["scst_iteration"] = total
    res.update(parts)
    res["tokens_sampled"] = median(tokens)
    res.update(torch_build())
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
