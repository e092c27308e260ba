"""Runs one of self-critical.pytorch's tools on the CPU, unchanged: its code moves models and
tensors to CUDA unconditionally (`.cuda()`, `.to('cuda')`, `torch.cuda.synchronize()`), so those
are made no-ops here before the tool runs; two more mends below let the Transformer's SCST recipe
(reduce_on_plateau) run with current torch and without language_eval. Threads: torch's default
(one per core).

    python scripts/peer/sctorch_cpu.py tools/train.py --cfg ... (from the checkout's directory)
"""
import runpy
import sys

import torch


def _on_cpu(to):
    def moved(self, *args, **kwargs):
        args = tuple("cpu" if isinstance(a, str) and a.startswith("cuda") else a for a in args)
        if isinstance(kwargs.get("device"), str) and kwargs["device"].startswith("cuda"):
            kwargs["device"] = "cpu"
        return to(self, *args, **kwargs)
    return moved


torch.nn.Module.cuda = lambda self, *args, **kwargs: self
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.Tensor.to = _on_cpu(torch.Tensor.to)
torch.cuda.synchronize = lambda *args, **kwargs: None


class _ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """Current torch dropped ReduceLROnPlateau's `verbose`, which the repository's wrapper (used
    by the Transformer's SCST recipe, reduce_on_plateau) still passes as the tenth argument."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8, verbose=False):
        super().__init__(optimizer, mode, factor, patience, threshold, threshold_mode,
                         cooldown, min_lr, eps)


torch.optim.lr_scheduler.ReduceLROnPlateau = _ReduceLROnPlateau

script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path.insert(0, ".")

import captioning.utils.eval_utils as eval_utils  # noqa: E402 (needs the checkout on the path)

_eval_split = eval_utils.eval_split


def _eval_split_stats(*args, **kwargs):
    """Without language_eval (it needs Java and the SPICE models) eval_split's language
    statistics are None, which the repository's reduce_on_plateau step reads as a dict ('CIDEr'
    in lang_stats) before falling back to the validation loss: an empty dict takes that
    fallback, as the code intends, and reads the same everywhere else."""
    loss, predictions, lang_stats = _eval_split(*args, **kwargs)
    return loss, predictions, {} if lang_stats is None else lang_stats


eval_utils.eval_split = _eval_split_stats
runpy.run_path(script, run_name="__main__")
