"""Runs one of self-critical.pytorch's tools on the CPU, unchanged: its code moves models and
tensors to CUDA unconditionally (`.cuda()`, `.to('cuda')`, `torch.cuda.synchronize()`), so those
are made no-ops here before the tool runs. Threads: torch's default (one per core).

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

script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path.insert(0, ".")
runpy.run_path(script, run_name="__main__")
