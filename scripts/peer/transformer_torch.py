#!/usr/bin/env python3
"""PyTorch CPU peer of caprl's Transformer captioner benchmark: self-critical.pytorch's
TransformerModel structure (pre-norm encoder over the regions, pre-norm decoder with causal
self-attention and cross-attention, the Annotated Transformer's LayerNorm with the unbiased std),
timed on five tasks:

- xe_step: teacher forcing over [BOS, w_1..w_T] -> [w_1..w_T, EOS], mean -log p, backward,
  clip_grad_norm 2.0, AdamW step (training mode, dropout 0.1);
- greedy: cached incremental decoding (per-layer self-attention K/V caches; encoder output and
  each decoder layer's cross-attention K/V computed once per image), T+1 steps;
- sample_5: 5 samples per image (torch.multinomial), cached, encoder and cross K/V once per image;
- beam_5: beam search width 5, cached, caches reordered by parent (index_select) every step;
- greedy_uncached: greedy re-running the whole decoder over the prefix every step, cross K/V
  projected from the encoder output again every step (self-critical.pytorch's reference decode).

Decoding runs in eval mode under torch.inference_mode(). EOS gets a -1e4 logit bias (PAD, BOS:
-1e9), so every sequence runs to full length. Prints one JSON line with the median seconds per
task. `--check` instead verifies the decoders on small shapes and prints "ok". Never run in CI.
"""

import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_common import BOS, EOS, PAD, clipped_step, median_time, torch_build
TASKS = ("xe_step", "greedy", "sample_5", "beam_5", "greedy_uncached")

# V, regions (0: the fc feature is the one region), att_dim, d_model, heads, d_ff, enc, dec,
# B (xe_step rows), B_dec (decoded images), T, captions per image in xe_step.
SHAPES = {
    "synth": dict(V=66, R=4, att=128, d=128, h=4, ff=512, enc=2, dec=2, B=32, B_dec=32, T=16, spi=1),
    "coco": dict(V=10000, R=36, att=2048, d=512, h=8, ff=2048, enc=3, dec=3, B=50, B_dec=10, T=16, spi=5),
    # The reference 6 + 6 layers (configs/transformer-coco.toml).
    "coco-ref": dict(V=10000, R=36, att=2048, d=512, h=8, ff=2048, enc=6, dec=6, B=50, B_dec=10, T=16, spi=5),
}
# Small shapes for --check only.
CHECK_SHAPES = {
    "synth": dict(SHAPES["synth"], B=8, B_dec=8),
    "coco-small": dict(V=500, R=36, att=64, d=64, h=8, ff=128, enc=3, dec=3, B=10, B_dec=4, T=16, spi=5),
    "no-regions": dict(V=66, R=0, att=32, d=32, h=4, ff=64, enc=1, dec=2, B=6, B_dec=6, T=10, spi=1),
}


class LayerNorm(nn.Module):
    """The Annotated Transformer's: a * (x - mean) / (std + eps) + b, std unbiased."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.a = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a * (x - mean) / (std + self.eps) + self.b


def split_heads(x, h):
    """[N, L, d] -> [N, h, L, d/h]."""
    n, l, d = x.shape
    return x.view(n, l, h, d // h).transpose(1, 2)


def attend(q, k, v, mask, drop):
    """softmax(q k^T / sqrt(d_k)) v with dropout on the weights; q [N,h,Lq,dk], k/v [N,h,Lk,dk];
    mask (bool, True = keep) broadcasts to [N,h,Lq,Lk]. Returns [N, Lq, h*dk]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    p = drop(F.softmax(scores, -1))
    o = p @ v
    n, h, l, dk = o.shape
    return o.transpose(1, 2).reshape(n, l, h * dk)


class SelfAttention(nn.Module):
    """Multi-head self-attention with the q, k, v projections fused into one Linear(d, 3d)."""

    def __init__(self, d, h, p):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.drop = nn.Dropout(p)

    def _qkv(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        return split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)

    def forward(self, x, mask=None):
        q, k, v = self._qkv(x)
        return self.out(attend(q, k, v, mask, self.drop))

    def step(self, x, cache):
        """x [N, 1, d], the newest position; cache (k, v) of the earlier positions or None.
        No mask needed: the new position sees every cached one."""
        q, k, v = self._qkv(x)
        if cache is not None:
            k = torch.cat([cache[0], k], 2)
            v = torch.cat([cache[1], v], 2)
        return self.out(attend(q, k, v, None, self.drop)), (k, v)


class CrossAttention(nn.Module):
    """Multi-head attention over the encoder output; k, v fused into one Linear(d, 2d)."""

    def __init__(self, d, h, p):
        super().__init__()
        self.h = h
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)
        self.drop = nn.Dropout(p)

    def memory_kv(self, mem):
        k, v = self.kv(mem).chunk(2, -1)
        return split_heads(k, self.h), split_heads(v, self.h)

    def forward(self, x, kv):
        return self.out(attend(split_heads(self.q(x), self.h), kv[0], kv[1], None, self.drop))


class FeedForward(nn.Module):
    def __init__(self, d, ff, p):
        super().__init__()
        self.w1 = nn.Linear(d, ff)
        self.w2 = nn.Linear(ff, d)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.w2(self.drop(F.relu(self.w1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d, h, ff, p):
        super().__init__()
        self.ln1, self.attn = LayerNorm(d), SelfAttention(d, h, p)
        self.ln2, self.ff = LayerNorm(d), FeedForward(d, ff, p)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.ff(self.ln2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d, h, ff, p):
        super().__init__()
        self.ln1, self.self_attn = LayerNorm(d), SelfAttention(d, h, p)
        self.ln2, self.src_attn = LayerNorm(d), CrossAttention(d, h, p)
        self.ln3, self.ff = LayerNorm(d), FeedForward(d, ff, p)
        self.drop = nn.Dropout(p)

    def forward(self, x, kv, mask):
        x = x + self.drop(self.self_attn(self.ln1(x), mask))
        x = x + self.drop(self.src_attn(self.ln2(x), kv))
        return x + self.drop(self.ff(self.ln3(x)))

    def step(self, x, kv, cache):
        a, cache = self.self_attn.step(self.ln1(x), cache)
        x = x + self.drop(a)
        x = x + self.drop(self.src_attn(self.ln2(x), kv))
        return x + self.drop(self.ff(self.ln3(x))), cache


def positions(n, d):
    """The Annotated Transformer's sinusoids: PE[pos, 2i] = sin(pos / 10000^(2i/d)), 2i+1: cos."""
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class TransformerCaptioner(nn.Module):
    def __init__(self, s, p=0.1):
        super().__init__()
        d = s["d"]
        self.s, self.d, self.V, self.T = s, d, s["V"], s["T"]
        self.att_embed = nn.Sequential(nn.Linear(s["att"], d), nn.ReLU(), nn.Dropout(p))
        self.enc = nn.ModuleList(EncoderLayer(d, s["h"], s["ff"], p) for _ in range(s["enc"]))
        self.enc_norm = LayerNorm(d)
        self.embed = nn.Embedding(self.V, d)
        self.register_buffer("pe", positions(s["T"] + 2, d), persistent=False)
        self.embed_drop = nn.Dropout(p)
        self.dec = nn.ModuleList(DecoderLayer(d, s["h"], s["ff"], p) for _ in range(s["dec"]))
        self.dec_norm = LayerNorm(d)
        self.logit = nn.Linear(d, self.V)
        for w in self.parameters():  # self-critical.pytorch: xavier_uniform_ on every matrix
            if w.dim() > 1:
                nn.init.xavier_uniform_(w)
        with torch.no_grad():
            self.logit.bias[EOS] = -1e4
            self.logit.bias[PAD] = -1e9
            self.logit.bias[BOS] = -1e9

    # --- encoder -------------------------------------------------------------------------
    def encode(self, att):
        """att [N, R, att_dim] (or [N, att_dim]: the fc feature is the one region) -> per decoder
        layer the cross-attention (k, v), each [N, h, R, d_k]."""
        if att.dim() == 2:
            att = att.unsqueeze(1)
        x = self.att_embed(att)
        for layer in self.enc:
            x = layer(x)
        mem = self.enc_norm(x)
        return [layer.src_attn.memory_kv(mem) for layer in self.dec]

    def encode_memory(self, att):
        """The encoder output alone (greedy_uncached projects it again every step)."""
        if att.dim() == 2:
            att = att.unsqueeze(1)
        x = self.att_embed(att)
        for layer in self.enc:
            x = layer(x)
        return self.enc_norm(x)

    # --- decoder -------------------------------------------------------------------------
    def words(self, w, start):
        """w [N, L] -> embedding * sqrt(d) + PE[start : start + L], dropout."""
        e = self.embed(w) * math.sqrt(self.d) + self.pe[start:start + w.size(1)]
        return self.embed_drop(e)

    def decode_full(self, kvs, ys):
        """All positions of ys [N, L] at once (causal mask) -> log-probs [N, L, V]."""
        L = ys.size(1)
        mask = torch.ones(L, L, dtype=torch.bool, device=ys.device).tril()
        x = self.words(ys, 0)
        for layer, kv in zip(self.dec, kvs):
            x = layer(x, kv, mask)
        return F.log_softmax(self.logit(self.dec_norm(x)), -1)

    def step(self, w, t, kvs, caches):
        """One new token w [N] at position t -> log-probs [N, V] and the grown caches."""
        x = self.words(w.unsqueeze(1), t)
        new = []
        for layer, kv, c in zip(self.dec, kvs, caches):
            x, c = layer.step(x, kv, c)
            new.append(c)
        return F.log_softmax(self.logit(self.dec_norm(x)).squeeze(1), -1), new

    # --- tasks ---------------------------------------------------------------------------
    def token_logprobs(self, att, seqs, spi=1):
        """seqs [N, T+1] = [w_1..w_T, EOS]; att has N / spi images unless spi == 1. With spi > 1
        the features are repeated per caption before the encoder (self-critical.pytorch's
        _prepare_feature_forward, and caprl's one-feature-row-per-caption batches)."""
        if spi > 1:
            att = att.repeat_interleave(spi, 0)
        kvs = self.encode(att)
        inp = torch.cat([torch.full((seqs.size(0), 1), BOS, device=seqs.device), seqs[:, :-1]], 1)
        logp = self.decode_full(kvs, inp)
        return logp.gather(2, seqs.unsqueeze(2)).squeeze(2)

    def rollout(self, att, n=1, sample=False):
        """Cached greedy / sampling: n rows per image, encoder and cross K/V once per image.
        Returns tokens [N*n, T] and their log-probs."""
        kvs = self.encode(att)
        if n > 1:
            kvs = [(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in kvs]
        rows = kvs[0][0].size(0)
        caches = [None] * len(self.dec)
        w = torch.full((rows,), BOS, dtype=torch.long)
        out, lps = [], []
        for t in range(self.T + 1):
            logp, caches = self.step(w, t, kvs, caches)
            w = torch.multinomial(logp.exp(), 1).squeeze(1) if sample else logp.argmax(1)
            if t < self.T:
                out.append(w)
                lps.append(logp.gather(1, w.unsqueeze(1)).squeeze(1))
        return torch.stack(out, 1), torch.stack(lps, 1)

    def greedy_uncached(self, att):
        """Re-runs the whole decoder (cross K/V projections included) over the prefix each step."""
        mem = self.encode_memory(att)
        ys = torch.full((mem.size(0), 1), BOS, dtype=torch.long)
        lps = []
        for t in range(self.T + 1):
            kvs = [layer.src_attn.memory_kv(mem) for layer in self.dec]
            logp = self.decode_full(kvs, ys)[:, -1]
            w = logp.argmax(1)
            if t < self.T:
                ys = torch.cat([ys, w.unsqueeze(1)], 1)
                lps.append(logp.gather(1, w.unsqueeze(1)).squeeze(1))
        return ys[:, 1:], torch.stack(lps, 1)

    def beam(self, att, k):
        """Beam search of width k per image, cached; caches reordered by parent every step.
        Returns the k beams' tokens [N*k, T] (best first per image) and scores [N, k]."""
        kvs = self.encode(att)
        n = kvs[0][0].size(0)
        kvs = [(a.repeat_interleave(k, 0), b.repeat_interleave(k, 0)) for a, b in kvs]
        caches = [None] * len(self.dec)
        score = torch.zeros(n, k)
        score[:, 1:] = float("-inf")
        w = torch.full((n * k,), BOS, dtype=torch.long)
        seqs = torch.zeros(n * k, 0, dtype=torch.long)
        base = torch.arange(n).unsqueeze(1) * k
        for t in range(self.T + 1):
            logp, caches = self.step(w, t, kvs, caches)
            if t == self.T:
                break
            cand = (score.view(n * k, 1) + logp).view(n, k * self.V)
            score, idx = cand.topk(k, 1)
            parent = (idx // self.V + base).view(-1)
            w = (idx % self.V).view(-1)
            caches = [(a.index_select(0, parent), b.index_select(0, parent)) for a, b in caches]
            seqs = torch.cat([seqs.index_select(0, parent), w.unsqueeze(1)], 1)
        return seqs, score


def features(s, images):
    if s["R"] == 0:
        return torch.rand(images, s["att"])
    return torch.rand(images, s["R"], s["att"])


def check():
    """Cached greedy == uncached greedy (tokens; log-probs close), beam width 1 == greedy, and
    the decoders' log-probs == teacher forcing's on the decoded tokens, in float64 and float32."""
    for dtype in (torch.float64, torch.float32):
        torch.set_default_dtype(dtype)
        tol = 1e-9 if dtype == torch.float64 else 1e-4
        for name, s in CHECK_SHAPES.items():
            torch.manual_seed(0)
            m = TransformerCaptioner(s).eval()
            att = features(s, s["B_dec"])
            with torch.inference_mode():
                g, glp = m.rollout(att)
                u, ulp = m.greedy_uncached(att)
                assert torch.equal(g, u), f"{name} {dtype}: cached greedy != uncached greedy"
                assert torch.allclose(glp, ulp, atol=tol, rtol=0), f"{name}: greedy log-probs"
                b, _ = m.beam(att, 1)
                assert torch.equal(b, g), f"{name} {dtype}: beam width 1 != greedy"
                full = torch.cat([g, torch.full((g.size(0), 1), EOS)], 1)
                tf = m.token_logprobs(att, full)[:, :-1]
                assert torch.allclose(tf, glp, atol=tol, rtol=0), f"{name}: greedy vs teacher forcing"
                # sampling: 5 rows per image sharing the encoder; check against teacher forcing on
                # the repeated features.
                smp, slp = m.rollout(att, n=5, sample=True)
                full = torch.cat([smp, torch.full((smp.size(0), 1), EOS)], 1)
                tf = m.token_logprobs(att, full, spi=5)[:, :-1]
                assert torch.allclose(tf, slp, atol=tol, rtol=0), f"{name}: sample vs teacher forcing"
                # beam 5: every beam's score is the sum of its tokens' teacher-forced log-probs
                bs, sc = m.beam(att, 5)
                full = torch.cat([bs, torch.full((bs.size(0), 1), EOS)], 1)
                tf = m.token_logprobs(att, full, spi=5)[:, :-1].sum(1).view(-1, 5)
                assert torch.allclose(tf, sc, atol=tol * s["T"], rtol=0), f"{name}: beam scores"
            distinct = len(set(g.flatten().tolist()))
            print(f"{name} {str(dtype).replace('torch.', '')}: greedy uses {distinct} distinct tokens; checks pass")
    torch.set_default_dtype(torch.float32)
    print("ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="synth")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="verify the decoders, print ok, exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.check:
        check()
        return
    s = SHAPES[args.shape]
    B, Bd, T, spi, V = s["B"], s["B_dec"], s["T"], s["spi"], s["V"]
    torch.manual_seed(0)
    m = TransformerCaptioner(s)
    att_xe = features(s, B // spi)
    seqs = torch.cat([torch.randint(4, V, (B, T)), torch.full((B, 1), EOS)], 1)
    att = features(s, Bd)
    opt = torch.optim.AdamW(m.parameters(), lr=5e-4, weight_decay=0.0)

    def xe_step():
        m.train()
        logp = m.token_logprobs(att_xe, seqs, spi)
        clipped_step(m, opt, -logp.sum() / logp.numel())

    def timed(fn):
        return median_time(fn, args.warmup, args.reps)

    res = {"model": "transformer", "shape": args.shape, "threads": args.threads, "B": B, "B_dec": Bd, "T": T}
    res["xe_step"] = timed(xe_step)
    m.eval()
    with torch.inference_mode():
        res["greedy"] = timed(lambda: m.rollout(att))
        res["sample_5"] = timed(lambda: m.rollout(att, n=5, sample=True))
        res["beam_5"] = timed(lambda: m.beam(att, 5))
        res["greedy_uncached"] = timed(lambda: m.greedy_uncached(att))
    res.update(torch_build())
    res["tokens"] = {
        "xe_step": B * (T + 1),
        "greedy": Bd * T,
        "sample_5": 5 * Bd * T,
        "beam_5": 5 * Bd * T,
        "greedy_uncached": Bd * T,
    }
    print(json.dumps(res))


if __name__ == "__main__":
    main()
