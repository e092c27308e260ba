"""Python rewards for `caprl bench reward`: what serving a Python reward costs per rollout.

- ``zero``: returns zeros; its time is the serving itself (the batch sent, the call, the reply).
- ``bleu4``: sentence BLEU-4 with pycocoevalcap's scorer (pure Python), the reward as a Python
  user would write it today.
- ``bleu4_caprl``: the same through the caprl wheel's Rust scorer (``caprl.score.Bleu``).
"""


def zero(batch):
    return [0.0] * len(batch)


def _bleu4(scorer, batch):
    gts = {i: list(refs) for i, refs in enumerate(batch.references)}
    res = {i: [c] for i, c in enumerate(batch.captions)}
    return scorer(gts, res)[1][3]


def bleu4(batch):
    from pycocoevalcap.bleu.bleu import Bleu

    return _bleu4(lambda g, r: Bleu(4).compute_score(g, r, verbose=0), batch)


def bleu4_caprl(batch):
    from caprl.score import Bleu

    return _bleu4(lambda g, r: Bleu(4).compute_score(g, r), batch)
