"""Caption metrics with pycocoevalcap's call shapes, computed by caprl's Rust scorer.

Drop-in classes (same constructor, same ``compute_score(gts, res)``, same return
types; the numbers agree with the reference code within 1e-6):

- :class:`Cider`, :class:`Bleu`, :class:`Rouge` — ``pycocoevalcap``'s, over
  ``gts = {id: [ref, ...]}`` and ``res = {id: [caption]}``.
- :class:`CiderD` — self-critical.pytorch's training reward (ruotianluo/cider's
  ``CiderD``), over ``gts = {id: [ref, ...]}`` and ``res = [{"image_id", "caption": [str]}]``,
  with ``df="corpus"`` or the training document frequencies it ships
  (``df="coco-train-idxs"`` reads ``data/coco-train-idxs.p`` as it does).
- :class:`PTBTokenizer` — pycocoevalcap's tokenizer, with caprl's Rust port of its rules
  (no Java). Text given to the scorers is split on whitespace only, as in pycocoevalcap:
  tokenise raw captions first.

The scorers release the GIL while they score and use every core (``parallel=False``
keeps them on the calling thread).
"""

import os
import pickle

import numpy as np

from . import _native

__all__ = ["Bleu", "Cider", "CiderD", "DocFreq", "PTBTokenizer", "Rouge", "load_df"]

DocFreq = _native.DocFreq


def _check_caption(caption, what):
    if not isinstance(caption, str):
        raise TypeError(f"{what} is {type(caption).__name__} {caption!r}, not a str")
    return caption


def _check_refs(refs, image_id):
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"gts[{image_id!r}] must be a list of reference captions, "
                        f"not {type(refs).__name__}")
    if not refs:
        raise ValueError(f"gts[{image_id!r}] is empty: every image needs at least one reference")
    return [_check_caption(r, f"gts[{image_id!r}][{i}]") for i, r in enumerate(refs)]


def _check_hypo(hypo, what):
    if not isinstance(hypo, (list, tuple)) or len(hypo) != 1:
        raise ValueError(f"{what} must be a list holding exactly one caption, got {hypo!r}")
    return _check_caption(hypo[0], f"{what}[0]")


def _by_image(gts, res):
    """pycocoevalcap's input: gts and res keyed by the same image ids, in gts's order."""
    if not isinstance(gts, dict) or not isinstance(res, dict):
        raise TypeError("gts and res must be dicts keyed by image id "
                        "(gts: {id: [ref, ...]}, res: {id: [caption]})")
    if gts.keys() != res.keys():
        missing = [k for k in res if k not in gts][:5]
        extra = [k for k in gts if k not in res][:5]
        parts = []
        if missing:
            parts.append(f"image id(s) {missing} of res have no references in gts")
        if extra:
            parts.append(f"image id(s) {extra} of gts have no caption in res")
        raise ValueError("gts and res must hold the same image ids: " + "; ".join(parts))
    refs = [_check_refs(refs, k) for k, refs in gts.items()]
    cands = [_check_hypo(res[k], f"res[{k!r}]") for k in gts]
    return refs, cands


class Cider:
    """CIDEr-D as pycocoevalcap computes it for evaluation (there named ``Cider``):
    document frequencies counted over the images being scored."""

    def __init__(self, test=None, refs=None, n=4, sigma=6.0, parallel=True):
        _fixed_shape(n, sigma)
        self._parallel = parallel

    def compute_score(self, gts, res):
        refs, cands = _by_image(gts, res)
        cider, _, _ = _native.score(refs, cands, parallel=self._parallel)
        scores = np.array(cider)
        return np.mean(scores), scores

    def method(self):
        return "CIDEr"


class Bleu:
    """BLEU-1..n as pycocoevalcap's ``Bleu(n)`` (``closest`` reference length): returns
    the corpus scores and the per-image scores as lists, one per order."""

    def __init__(self, n=4, parallel=True):
        if not 1 <= n <= 4:
            raise ValueError(f"Bleu(n={n}): caprl computes BLEU-1 to BLEU-4")
        self._n = n
        self._parallel = parallel

    def compute_score(self, gts, res, verbose=0):
        refs, cands = _by_image(gts, res)
        _, _, (corpus, per_image) = _native.score(refs, cands, bleu=True, parallel=self._parallel)
        score = list(corpus[: self._n])
        scores = [[image[k] for image in per_image] for k in range(self._n)]
        return score, scores

    def method(self):
        return "Bleu"


class Rouge:
    """ROUGE-L as pycocoevalcap's ``Rouge`` (beta 1.2)."""

    def __init__(self, parallel=True):
        self._parallel = parallel

    def compute_score(self, gts, res):
        refs, cands = _by_image(gts, res)
        _, rouge, _ = _native.score(refs, cands, rouge=True, parallel=self._parallel)
        scores = np.array(rouge)
        return np.mean(scores), scores

    def method(self):
        return "Rouge"


class CiderD:
    """self-critical.pytorch's CIDEr-D reward (ruotianluo/cider's ``CiderD``).

    ``df`` is where the document frequencies come from:

    - ``"corpus"``: counted over the references of the candidates being scored, one
      reference set per candidate (so an image with five samples counts five times, as
      in ruotianluo's corpus mode);
    - a name such as ``"coco-train-idxs"``: the pickle ``data/<name>.p`` that
      self-critical.pytorch's ``scripts/prepro_ngrams.py`` writes, read as it reads it;
    - a path to such a pickle, or to a ``.df`` file from ``caprl data df``;
    - a dict ``{"document_frequency": {ngram tuple: count}, "ref_len": images}``, or a
      :class:`DocFreq`.

    Like self-critical.pytorch, reading a pickle runs ``pickle.load``: give it files you trust.
    """

    def __init__(self, n=4, sigma=6.0, df="corpus", parallel=True):
        _fixed_shape(n, sigma)
        self._parallel = parallel
        self._df = None if (isinstance(df, str) and df == "corpus") else load_df(df)

    def compute_score(self, gts, res):
        if not isinstance(gts, dict):
            raise TypeError("gts must be a dict {image_id: [reference, ...]}")
        if not isinstance(res, (list, tuple)):
            raise TypeError('res must be a list of {"image_id": id, "caption": [caption]}')
        # Samples of one image share its reference list (get_self_critical_reward repeats the
        # list object): each distinct list is checked and prepared once.
        sets, slot_of, which, cands = [], {}, [], []
        for i, entry in enumerate(res):
            if not isinstance(entry, dict) or "image_id" not in entry or "caption" not in entry:
                raise ValueError(f'res[{i}] must be a dict with "image_id" and "caption", got {entry!r}')
            image_id = entry["image_id"]
            if image_id not in gts:
                raise ValueError(f"res[{i}]: image_id {image_id!r} has no references in gts")
            refs = gts[image_id]
            slot = slot_of.get(id(refs))
            if slot is None:
                slot = slot_of[id(refs)] = len(sets)
                sets.append(_check_refs(refs, image_id))
            which.append(slot)
            cands.append(_check_hypo(entry["caption"], f"res[{i}]['caption']"))
        scores = np.array(_native.ciderd(sets, which, cands, df=self._df, parallel=self._parallel))
        return np.mean(scores), scores

    def method(self):
        return "CIDEr-D"


def load_df(df):
    """A :class:`DocFreq` from what :class:`CiderD` accepts as ``df`` (not ``"corpus"``)."""
    if isinstance(df, DocFreq):
        return df
    if isinstance(df, dict):
        return _from_pickle_dict(df, "the df dict")
    if not isinstance(df, (str, os.PathLike)):
        raise TypeError(f"df must be 'corpus', a file name or a dict, not {type(df).__name__}")
    path = os.fspath(df)
    if not os.path.exists(path):
        named = os.path.join("data", path + ".p")
        if not os.path.exists(named):
            raise FileNotFoundError(
                f"no document-frequency file {path!r} (nor {named!r}, where self-critical.pytorch "
                "keeps them); make one with its scripts/prepro_ngrams.py or `caprl data df`")
        path = named
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic == b"CAPRLDF\0":
        return DocFreq.load(path)
    try:
        with open(path, "rb") as f:
            table = pickle.load(f, encoding="latin1")
    except Exception as e:
        raise ValueError(f"{path}: not a document-frequency pickle ({type(e).__name__}: {e}); "
                         "expected self-critical.pytorch's prepro_ngrams.py output or a "
                         "`caprl data df` file") from e
    return _from_pickle_dict(table, path)


def _from_pickle_dict(table, where):
    if not isinstance(table, dict) or "document_frequency" not in table or "ref_len" not in table:
        raise ValueError(f'{where}: expected a dict with "document_frequency" and "ref_len" '
                         "(self-critical.pytorch's df pickle)")
    counts = table["document_frequency"]
    if not isinstance(counts, dict):
        raise TypeError(f'{where}: "document_frequency" must be a dict of n-gram tuples to counts')
    try:
        ref_len = float(table["ref_len"])
    except (TypeError, ValueError) as e:
        raise ValueError(f'{where}: "ref_len" must be a number of images') from e
    try:
        return DocFreq.from_counts(counts, ref_len)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from e


def _fixed_shape(n, sigma):
    if n != 4 or sigma != 6.0:
        raise ValueError(f"n={n}, sigma={sigma}: caprl computes CIDEr-D with the published "
                         "n=4 and sigma=6 only")


class PTBTokenizer:
    """pycocoevalcap's tokenizer with caprl's Rust port of the Stanford PTB rules (no Java):
    ``tokenize({id: [{"caption": str}, ...]})`` returns ``{id: [tokenised str, ...]}``,
    lower-cased and with pycocoevalcap's punctuation removed."""

    def tokenize(self, captions_for_image):
        if not isinstance(captions_for_image, dict):
            raise TypeError('captions_for_image must be a dict {id: [{"caption": str}, ...]}')
        keys, texts = [], []
        for k, entries in captions_for_image.items():
            for i, c in enumerate(entries):
                if not isinstance(c, dict) or "caption" not in c:
                    raise ValueError(f'captions_for_image[{k!r}][{i}] must be a dict with "caption"')
                keys.append(k)
                texts.append(_check_caption(c["caption"], f"captions_for_image[{k!r}][{i}]['caption']"))
        out = {}
        for k, tokens in zip(keys, _native.ptb_tokenize(texts)):
            out.setdefault(k, []).append(tokens)
        return out
