"""What the PyTorch peers (model_torch.py, transformer_torch.py, scst_torch.py,
scst_transformer_torch.py) share: caprl's special tokens, the timer, the optimiser step and the
build facts every result line ends with. Imported as a sibling module: the peers run as
`python3 scripts/peer/NAME.py`, which puts this folder first on sys.path."""

import time

import torch

PAD, BOS, EOS = 0, 1, 2


def median(ts):
    """The upper median of the timings ts (the middle one of an odd count)."""
    return sorted(ts)[len(ts) // 2]


def median_time(fn, warmup=2, reps=10):
    """The median seconds of `reps` runs of fn after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def clipped_step(m, opt, loss):
    """Backward of loss, the gradient norm of m clipped to 2.0, one step of opt."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 2.0)
    opt.step()


def torch_build():
    """The result line's last fields: PyTorch's version and the CPU level of its own kernels
    (ATEN_CPU_CAPABILITY holds it lower)."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
