#!/usr/bin/env python3
"""Compares caprl's Transformer benchmark with its PyTorch peer (transformer_torch.py).

Usage: compare_transformer.py FILE...

Every file holds JSON lines (other lines are skipped). A line with "source": "caprl" is caprl's
(`caprl bench transformer --json`-style: "shape", "threads", seconds per task); a line with a
"torch" key and "model": "transformer" is the peer's (model_torch.py's lines are skipped). Each
side keeps its fastest time per (shape, threads, task), so a burst of load from other tenants of
a shared machine does not decide the ratio. Prints a markdown table of tokens/s with the ratio
caprl / PyTorch (above 1: caprl is faster).

Tokens per run come from the line's "tokens" object when it has one, else from the peer's line of
the same shape, else from the shapes below (the peer's definitions)."""

import json
import sys

TASKS = ("xe_step", "greedy", "sample_5", "beam_5", "greedy_uncached")


def default_tokens(B, B_dec, T):
    return {
        "xe_step": B * (T + 1),
        "greedy": B_dec * T,
        "sample_5": 5 * B_dec * T,
        "beam_5": 5 * B_dec * T,
        "greedy_uncached": B_dec * T,
    }


TOKENS = {
    "synth": default_tokens(32, 32, 16),
    "coco": default_tokens(50, 10, 16),
    "coco-ref": default_tokens(50, 10, 16),
}


def read(paths):
    """-> (caprl, peer): {(shape, threads, task): seconds}, and tokens {(shape, task): n}."""
    sides = {"caprl": {}, "peer": {}}
    tokens = {"caprl": {}, "peer": {}}
    for path in paths:
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            if d.get("source") == "caprl":
                side = "caprl"
                if d.get("model", "transformer") != "transformer":
                    continue
            elif "torch" in d:
                side = "peer"
                if d.get("model") != "transformer":  # model_torch.py's GRU lines have none
                    continue
            else:
                continue
            shape, threads = str(d.get("shape", "?")), int(d.get("threads", 0))
            for task, n in (d.get("tokens") or {}).items():
                tokens[side][(shape, task)] = n
            names = set(TASKS) | set(d.get("tokens") or {})
            for task in names:
                t = d.get(task)
                if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
                    key = (shape, threads, task)
                    sides[side][key] = min(t, sides[side].get(key, t))
    return sides["caprl"], sides["peer"], tokens


def token_count(tokens, side, shape, task):
    other = "peer" if side == "caprl" else "caprl"
    for src in (tokens[side], tokens[other]):
        if (shape, task) in src:
            return src[(shape, task)]
    return TOKENS.get(shape, {}).get(task)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    caprl, peer, tokens = read(sys.argv[1:])
    order = {t: i for i, t in enumerate(TASKS)}
    keys = sorted(set(caprl) | set(peer), key=lambda k: (k[0], order.get(k[2], len(TASKS)), k[2], k[1]))
    print("| shape | task | threads | caprl tokens/s | PyTorch tokens/s | ratio |")
    print("|---|---|---|---|---|---|")
    for shape, threads, task in keys:
        rates = []
        for side, times in (("caprl", caprl), ("peer", peer)):
            t = times.get((shape, threads, task))
            n = token_count(tokens, side, shape, task)
            rates.append(n / t if t and n else None)
        ours, theirs = rates
        cell = lambda r: f"{r:,.0f}" if r else "n/a"
        ratio = f"{ours / theirs:.2f}x" if ours and theirs else "n/a"
        print(f"| {shape} | {task} | {threads} | {cell(ours)} | {cell(theirs)} | {ratio} |")


if __name__ == "__main__":
    main()
