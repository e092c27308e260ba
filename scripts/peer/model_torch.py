#!/usr/bin/env python3
"""PyTorch CPU peer of benches/model.rs: the same captioners (GRU, dropout 0.2, EOS disabled) at
the shapes of benches/model_shapes.json, timed on the same four tasks:

- xe_step: teacher forcing over images x captions_per_image sequences (the features repeated
  per caption, as self-critical.pytorch does) of `len` words + EOS, mean -log p, backward,
  clip_grad_norm 2.0, AdamW step (training mode);
- greedy: one row per image, `len` words plus the final step;
- sample_5: 5 samples per image (torch.multinomial);
- beam_5: beam search width 5 per image.

Decoding runs in eval mode under no_grad; the encoder (and the att model's region projection)
runs once per image and its outputs are repeated for the rows (beams) of that image. Prints one
JSON line per shape: {"threads": n, "shape": name, "xe_step": seconds, "greedy": ...,
"sample_5": ..., "beam_5": ..., "torch": version} (medians of --reps after 2 warm-up runs).
`--shape a,b` picks shapes by name (default: every shape, in file order). Never run in CI; see
run_model_peer.sh."""

import argparse
import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_common import BOS, EOS, PAD, clipped_step, median_time, torch_build
SHAPES_FILE = Path(__file__).resolve().parents[2] / "benches" / "model_shapes.json"


def load_shapes(names=""):
    """The grid's shapes, in file order; `names` (comma-separated) picks some of them."""
    shapes = json.loads(SHAPES_FILE.read_text(encoding="utf-8"))["shapes"]
    if not names:
        return shapes
    by_name = {s["name"]: s for s in shapes}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; {SHAPES_FILE} has {list(by_name)}")
    return [by_name[n] for n in wanted]


class Captioner(nn.Module):
    """caprl's recurrent captioner (one GRU layer).

    fc: img = relu(W_img f + b); h0 = tanh(W_init img + b); GRU input = [e(w_t), img] (so the
    gates get W_ih e(w_t) + W_fc img + b_ih); logits = W_out dropout(h_t) + b_out, dropout also
    on e(w_t).
    att: as fc, and the GRU input also holds ctx_t, additive attention over the regions a_r with
    the previous hidden state h_{t-1} as the query (h0 at the first step):
    e_r = w_a^T tanh(W_f a_r + b_f + W_h h_{t-1}), alpha = softmax(e), ctx_t = sum_r alpha_r a_r
    (W_h and w_a without bias; W_f a_r + b_f computed once per batch).
    """

    def __init__(self, s, p=0.2, suppress_eos=True):
        super().__init__()
        v, e, h = s["vocab"], s["embed"], s["hidden"]
        self.att = s["kind"] == "att"
        self.embed = nn.Embedding(v, e)
        self.img = nn.Linear(s["fc"], e)
        self.init = nn.Linear(e, h)
        if self.att:
            self.cell = nn.GRUCell(2 * e + s["att_dim"], h)
            self.feat = nn.Linear(s["att_dim"], s["att_hidden"])
            self.hid = nn.Linear(h, s["att_hidden"], bias=False)
            self.score = nn.Linear(s["att_hidden"], 1, bias=False)
        else:
            self.rnn = nn.GRU(2 * e, h, batch_first=True)
            # Decoding uses the GRU's weights through a GRUCell (one step at a time).
            self.cell = nn.GRUCell(2 * e, h)
            self.cell.weight_ih = self.rnn.weight_ih_l0
            self.cell.weight_hh = self.rnn.weight_hh_l0
            self.cell.bias_ih = self.rnn.bias_ih_l0
            self.cell.bias_hh = self.rnn.bias_hh_l0
        self.logit = nn.Linear(h, v)
        self.drop = nn.Dropout(p)
        with torch.no_grad():
            if suppress_eos:
                self.logit.bias[EOS] = -1e4
            self.logit.bias[PAD] = -1e9
            self.logit.bias[BOS] = -1e9

    def encode(self, fc, att=None):
        """(img, h0, keys): keys = (regions [B, R, Da], their projection [B, R, A]) or None."""
        img = F.relu(self.img(fc))
        keys = (att, self.feat(att)) if self.att else None
        return img, torch.tanh(self.init(img)), keys

    def attend(self, keys, h):
        feats, proj = keys
        e = self.score(torch.tanh(proj + self.hid(h).unsqueeze(1))).squeeze(2)  # [B, R]
        alpha = F.softmax(e, 1)
        return torch.bmm(alpha.unsqueeze(1), feats).squeeze(1)  # [B, Da]

    def step(self, e, img, h, keys):
        """One GRU step from the word embeddings e [B, E] and the previous state h."""
        x = [e, img, self.attend(keys, h)] if keys is not None else [e, img]
        return self.cell(torch.cat(x, 1), h)

    def token_logprobs(self, fc, att, seqs):
        img, h, keys = self.encode(fc, att)
        inp = torch.cat([torch.full((seqs.size(0), 1), BOS), seqs[:, :-1]], 1)
        e = self.drop(self.embed(inp))
        if keys is None:
            x = torch.cat([e, img.unsqueeze(1).expand(-1, e.size(1), -1)], 2)
            hs, _ = self.rnn(x, h.unsqueeze(0))
        else:
            # The query of each step is the previous state: step by step.
            out = []
            for t in range(e.size(1)):
                h = self.step(e[:, t], img, h, keys)
                out.append(h)
            hs = torch.stack(out, 1)
        logp = F.log_softmax(self.logit(self.drop(hs)), -1)
        return logp.gather(2, seqs.unsqueeze(2)).squeeze(2)

    def encode_rows(self, fc, att, n):
        """The encoder once per image, its outputs repeated for n rows per image."""
        img, h, keys = self.encode(fc, att)
        rep = lambda x: x.repeat_interleave(n, 0)  # noqa: E731
        return rep(img), rep(h), None if keys is None else tuple(map(rep, keys))

    @torch.no_grad()
    def rollout(self, fc, att, n, sample, steps):
        """n rows per image, `steps` words plus the final step."""
        img, h, keys = self.encode_rows(fc, att, n)
        w = torch.full((img.size(0),), BOS, dtype=torch.long)
        out, lps = [], []
        for t in range(steps + 1):
            h = self.step(self.embed(w), img, h, keys)
            logp = F.log_softmax(self.logit(h), -1)
            w = torch.multinomial(logp.exp(), 1).squeeze(1) if sample else logp.argmax(1)
            lp = logp.gather(1, w.unsqueeze(1)).squeeze(1)
            if t < steps:
                out.append(w)
                lps.append(lp)
        return torch.stack(out, 1), torch.stack(lps, 1)

    @torch.no_grad()
    def beam(self, fc, att, k, steps):
        img, h, keys = self.encode_rows(fc, att, k)  # attention keys expanded per beam
        n, v = fc.size(0), self.logit.out_features
        score = torch.zeros(n, k)
        score[:, 1:] = float("-inf")
        w = torch.full((n * k,), BOS, dtype=torch.long)
        seqs = torch.zeros(n * k, 0, dtype=torch.long)
        for t in range(steps + 1):
            h = self.step(self.embed(w), img, h, keys)
            logp = F.log_softmax(self.logit(h), -1)
            if t == steps:
                break
            cand = (score.view(n * k, 1) + logp).view(n, k * v)
            score, idx = cand.topk(k, 1)
            parent = (idx // v + torch.arange(n).unsqueeze(1) * k).view(-1)
            w = (idx % v).view(-1)
            h = h[parent]  # a beam's parent is a beam of the same image: the keys stay
            seqs = torch.cat([seqs[parent], w.unsqueeze(1)], 1)
        return seqs, score


def run_shape(s, threads, reps):
    torch.manual_seed(0)
    m = Captioner(s)
    n, cpi, T, V = s["images"], s["captions_per_image"], s["len"], s["vocab"]
    fc = torch.rand(n, s["fc"])
    att = torch.rand(n, s["regions"], s["att_dim"]) if s["kind"] == "att" else None
    rows = n * cpi
    fc_x = fc.repeat_interleave(cpi, 0)
    att_x = None if att is None else att.repeat_interleave(cpi, 0)
    seqs = torch.cat([torch.randint(4, V, (rows, T)), torch.full((rows, 1), EOS)], 1)
    opt = torch.optim.AdamW(m.parameters(), lr=5e-4, weight_decay=0.0)

    def xe_step():
        m.train()
        logp = m.token_logprobs(fc_x, att_x, seqs)
        clipped_step(m, opt, -logp.sum() / logp.numel())

    res = {"threads": threads, "shape": s["name"], "xe_step": median_time(xe_step, reps=reps)}
    m.eval()
    res["greedy"] = median_time(lambda: m.rollout(fc, att, 1, False, T), reps=reps)
    res["sample_5"] = median_time(lambda: m.rollout(fc, att, 5, True, T), reps=reps)
    res["beam_5"] = median_time(lambda: m.beam(fc, att, 5, T), reps=reps)
    res.update(torch_build())
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per task (median)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for s in load_shapes(args.shape):
        print(json.dumps(run_shape(s, args.threads, args.reps)), flush=True)


if __name__ == "__main__":
    main()
