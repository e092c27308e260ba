#!/usr/bin/env python3
"""PyTorch CPU peer of benches/model.rs: the same fc captioner (GRU, embed 256, hidden 512,
vocab 200, fc dim 256, batch 32, max length 16, dropout 0.2, EOS disabled) timed on the same four
tasks. Prints one JSON object: {"threads": n, "xe_step": seconds, "greedy": ..., "sample_5": ...,
"beam_5": ...} (medians). Never run in CI; see run_model_peer.sh."""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, V, E, H, FC = 32, 16, 200, 256, 512, 256
PAD, BOS, EOS = 0, 1, 2


class Captioner(nn.Module):
    """img = relu(W_img f); h0 = tanh(W_init img); GRU input = [e(w_t), img]; logits = W_out h."""

    def __init__(self, p=0.2):
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.img = nn.Linear(FC, E)
        self.init = nn.Linear(E, H)
        self.rnn = nn.GRU(2 * E, H, batch_first=True)
        self.cell = nn.GRUCell(2 * E, H)
        self.logit = nn.Linear(H, V)
        self.drop = nn.Dropout(p)
        with torch.no_grad():
            self.logit.bias[EOS] = -1e4
            self.logit.bias[PAD] = -1e9
            self.logit.bias[BOS] = -1e9

    def encode(self, fc):
        img = F.relu(self.img(fc))
        return img, torch.tanh(self.init(img))

    def token_logprobs(self, fc, seqs):
        img, h0 = self.encode(fc)
        inp = torch.cat([torch.full((seqs.size(0), 1), BOS), seqs[:, :-1]], 1)
        e = self.drop(self.embed(inp))
        x = torch.cat([e, img.unsqueeze(1).expand(-1, e.size(1), -1)], 2)
        hs, _ = self.rnn(x, h0.unsqueeze(0))
        logp = F.log_softmax(self.logit(self.drop(hs)), -1)
        return logp.gather(2, seqs.unsqueeze(2)).squeeze(2)

    def _sync_cell(self):
        # Decoding uses the GRU's weights through a GRUCell (one step at a time).
        self.cell.weight_ih = self.rnn.weight_ih_l0
        self.cell.weight_hh = self.rnn.weight_hh_l0
        self.cell.bias_ih = self.rnn.bias_ih_l0
        self.cell.bias_hh = self.rnn.bias_hh_l0

    @torch.no_grad()
    def rollout(self, fc, sample):
        self._sync_cell()
        img, h = self.encode(fc)
        w = torch.full((fc.size(0),), BOS, dtype=torch.long)
        out, lps = [], []
        for t in range(T + 1):
            h = self.cell(torch.cat([self.embed(w), img], 1), h)
            logp = F.log_softmax(self.logit(h), -1)
            w = torch.multinomial(logp.exp(), 1).squeeze(1) if sample else logp.argmax(1)
            lp = logp.gather(1, w.unsqueeze(1)).squeeze(1)
            if t < T:
                out.append(w)
                lps.append(lp)
        return torch.stack(out, 1), torch.stack(lps, 1)

    @torch.no_grad()
    def beam(self, fc, k):
        self._sync_cell()
        img, h = self.encode(fc)
        n = fc.size(0)
        img = img.repeat_interleave(k, 0)
        h = h.repeat_interleave(k, 0)
        score = torch.zeros(n, k)
        score[:, 1:] = float("-inf")
        w = torch.full((n * k,), BOS, dtype=torch.long)
        seqs = torch.zeros(n * k, 0, dtype=torch.long)
        for t in range(T + 1):
            h = self.cell(torch.cat([self.embed(w), img], 1), h)
            logp = F.log_softmax(self.logit(h), -1)
            if t == T:
                break
            cand = (score.view(n * k, 1) + logp).view(n, k * V)
            score, idx = cand.topk(k, 1)
            parent = (idx // V + torch.arange(n).unsqueeze(1) * k).view(-1)
            w = (idx % V).view(-1)
            h = h[parent]
            seqs = torch.cat([seqs[parent], w.unsqueeze(1)], 1)
        return seqs, score


def median_time(fn, warmup=2, reps=10):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    m = Captioner()
    fc = torch.rand(B, FC)
    seqs = torch.cat([torch.randint(4, V, (B, T)), torch.full((B, 1), EOS)], 1)
    opt = torch.optim.AdamW(m.parameters(), lr=5e-4, weight_decay=0.0)

    def xe_step():
        m.train()
        logp = m.token_logprobs(fc, seqs)
        loss = -logp.sum() / logp.numel()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 2.0)
        opt.step()

    res = {"threads": args.threads, "xe_step": median_time(xe_step)}
    m.eval()
    res["greedy"] = median_time(lambda: m.rollout(fc, sample=False))
    fc5 = fc.repeat_interleave(5, 0)
    res["sample_5"] = median_time(lambda: m.rollout(fc5, sample=True))
    res["beam_5"] = median_time(lambda: m.beam(fc, 5))
    res["torch"] = torch.__version__
    print(json.dumps(res))


if __name__ == "__main__":
    main()
