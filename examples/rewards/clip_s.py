"""CLIP-S (Hessel et al. 2021) as a caprl reward, with a Hugging Face ``transformers`` CLIP model
loaded from a local directory (no download at run time).

The image side is the data set's ``fc`` features, which must be that model's image embeddings:
extract them with ``caprl features --clip $CAPRL_CLIP_DIR --images IMAGES --out DATA``. The text
side is the model's text tower, run here on each rollout's captions. Then::

    CAPRL_CLIP_DIR=/models/clip-vit-base-patch32 caprl run \\
        --set data.dir=DATA --set reward.python=examples/rewards/clip_s.py \\
        --set 'reward.spec=cider=1,py:clip_s=0.5'

Needs ``torch`` and ``transformers`` for the ``python3`` the reward workers run (or point
``CAPRL_PYTHON`` at a virtual environment that has them). caprl's built-in ``clip-s`` does the
same with caprl's own encoders; this file is the shape to copy for any model Python can run.
"""

import os

import numpy as np

_MODEL = None


def _model():
    global _MODEL
    if _MODEL is None:
        import torch
        from transformers import CLIPModel, CLIPTokenizer

        path = os.environ.get("CAPRL_CLIP_DIR")
        if not path:
            raise RuntimeError("set CAPRL_CLIP_DIR to a local Hugging Face CLIP directory")
        torch.set_num_threads(1)
        _MODEL = (CLIPModel.from_pretrained(path).eval(), CLIPTokenizer.from_pretrained(path))
    return _MODEL


def text_embeddings(captions):
    """The model's projected text embedding of each caption, ``[n, d]``."""
    import torch

    model, tokenizer = _model()
    tokens = tokenizer(captions, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = model.get_text_features(**tokens)
    # transformers 4 returns the tensor, 5 an output whose pooled field is the projection.
    out = getattr(out, "pooler_output", out)
    return out.float().numpy()


def clip_s(batch):
    """``2.5 · max(cos(text, image), 0)`` per caption."""
    text = text_embeddings(batch.captions)
    image = batch.features()
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    image = image / np.linalg.norm(image, axis=1, keepdims=True)
    return 2.5 * np.maximum((text * image).sum(axis=1), 0.0)
