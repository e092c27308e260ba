"""caprl from Python.

- :mod:`caprl.score` — CIDEr-D, BLEU, ROUGE-L and the PTB tokenizer with pycocoevalcap's
  and self-critical.pytorch's call shapes, computed by caprl's Rust scorer.
- :mod:`caprl.runlog` — the step and eval records of a caprl run directory.

The ``caprl`` command (the trainer's CLI) is installed with this package.
"""

from . import runlog, score
from ._native import __version__

__all__ = ["__version__", "runlog", "score"]
