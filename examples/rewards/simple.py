"""Two rewards without a model, to copy from: serve them with

    caprl run --set reward.python=examples/rewards/simple.py \
              --set 'reward.spec=cider=1,py:length_bonus=0.2'

Each function takes a batch (``batch.captions``, ``batch.tokens``, ``batch.references``,
``batch.image_ids``, ``batch.rows``, ``batch.finished``; one entry per caption) and returns one
finite number per caption.
"""

import numpy as np


def length_bonus(batch):
    """1 for a caption as long as its references' mean, falling off linearly either side."""
    out = np.empty(len(batch))
    for i, (caption, refs) in enumerate(zip(batch.captions, batch.references)):
        target = np.mean([len(r.split()) for r in refs])
        out[i] = max(0.0, 1.0 - abs(len(caption.split()) - target) / target)
    return out


def mentions(batch):
    """The share of the references' content words (4 letters or more) the caption uses."""
    values = []
    for caption, refs in zip(batch.captions, batch.references):
        wanted = {w for r in refs for w in r.split() if len(w) >= 4}
        said = set(caption.split())
        values.append(len(wanted & said) / len(wanted) if wanted else 0.0)
    return values
