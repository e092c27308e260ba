"""Serves Python reward functions to a caprl reward worker.

A reward worker whose ``reward.spec`` names ``py:<function>`` starts this file as a child
process (``python3 -c <this file> <module>``; the file ships in the caprl binary and in this
package), with ``reward.python`` as ``<module>``: a module name on ``PYTHONPATH`` or the path of a
``.py`` file. The worker keeps everything else — the NATS queue, acks, redelivery, exactly-once
use, the run log — and calls this process once per rollout and function.

A reward function takes a :class:`Batch` and returns one number per caption::

    def length_bonus(batch):
        return [min(len(c.split()), 12) / 12 for c in batch.captions]

The protocol is one JSON object per line on stdin and on the original stdout (``print`` in the
user's module goes to stderr, which the worker logs):

- ``{"functions": [...]}`` → ``{"ok": true}`` once the module and every function are found;
- ``{"function": f, "batch": {...}}`` → ``{"values": [...]}``;
- any failure → ``{"error": "...", "kind": "import" | "raised" | "values"}``.
"""

import importlib
import importlib.util
import json
import math
import numbers
import os
import struct
import sys
import traceback


class _Features:
    """The data set's ``fc`` rows, read from its directory as caprl reads them (docs/data.md):
    ``features.safetensors`` (row ``i`` is entry ``i`` of ``features.ids.json``, memory-mapped)
    or ``features/fc/<id>.npy``."""

    def __init__(self, data_dir):
        self.dir = data_dir
        self._fc = None

    def rows(self, rows, image_ids):
        import numpy as np

        packed = os.path.join(self.dir, "features.safetensors")
        if os.path.isfile(packed):
            if self._fc is None:
                with open(packed, "rb") as f:
                    n = struct.unpack("<Q", f.read(8))[0]
                    fc = json.loads(f.read(n))["fc"]
                if fc["dtype"] != "F32":
                    raise ValueError(f"{packed}: fc is {fc['dtype']}, caprl writes F32")
                start = 8 + n + fc["data_offsets"][0]
                self._fc = np.memmap(packed, "<f4", "r", start, tuple(fc["shape"]))
            return np.asarray(self._fc[list(rows)])
        files = [os.path.join(self.dir, "features", "fc", f"{i}.npy") for i in image_ids]
        return np.stack([np.load(p).astype(np.float32).reshape(-1) for p in files])


_FEATURES = None


class Batch:
    """The captions of one rollout, with what rewards compare them with.

    Every list has one entry per caption, in the rollout's order.

    - ``task``: the rollout's task id (for messages and logs).
    - ``image_ids``: the image each caption describes (the data set's ids).
    - ``rows``: the image's feature row in the data set.
    - ``captions``: the caption as words joined by spaces (no ``<eos>``).
    - ``tokens``: the caption's word ids in the run's vocabulary (no ``<eos>``).
    - ``finished``: whether the caption ended with ``<eos>`` (one cut at ``data.max_len`` did not).
    - ``references``: the image's reference captions, as in the data set.

    ``features()`` returns the images' ``fc`` feature rows, one per caption (NumPy, float32).
    """

    __slots__ = ("task", "image_ids", "rows", "captions", "tokens", "finished", "references")

    def __init__(self, fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __len__(self):
        return len(self.captions)

    def features(self):
        """The ``fc`` feature row of each caption's image, ``[len(batch), D]`` float32."""
        return _FEATURES.rows(self.rows, self.image_ids)


def _load(module):
    if module.endswith(".py") or os.sep in module:
        name = os.path.splitext(os.path.basename(module))[0]
        spec = importlib.util.spec_from_file_location(name, module)
        if spec is None or not os.path.isfile(module):
            raise ImportError(f"no Python file {module}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(module)


def _values(function, returned, n):
    """The floats `returned` holds, or the reason it is not one finite number per caption."""
    try:
        values = list(returned)
    except TypeError:
        return None, f"{function} returned {type(returned).__name__}, not a sequence of {n} numbers"
    if len(values) != n:
        return None, f"{function} returned {len(values)} values for {n} captions"
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return None, f"{function} returned {type(v).__name__} {v!r} for caption {i}, not a number"
        f = float(v)
        if not math.isfinite(f):
            return None, f"{function} returned {f} for caption {i}; rewards must be finite"
        out.append(f)
    return out, None


def serve(module, inp, out):
    global _FEATURES
    functions = {}
    for line in inp:
        request = json.loads(line)
        if "functions" in request:
            _FEATURES = _Features(request.get("data", ""))
            try:
                mod = _load(module)
                missing = [f for f in request["functions"] if not callable(getattr(mod, f, None))]
                if missing:
                    raise ImportError(f"{module} has no function {', '.join(missing)}")
                functions = {f: getattr(mod, f) for f in request["functions"]}
                reply = {"ok": True}
            except BaseException as e:  # noqa: BLE001 - reported to the worker, which stops
                detail = "".join(traceback.format_exception_only(type(e), e)).strip()
                reply = {"error": f"loading {module}: {detail}", "kind": "import"}
        else:
            name = request["function"]
            batch = Batch(request["batch"])
            try:
                values, why = _values(name, functions[name](batch), len(batch))
                reply = {"values": values} if why is None else {"error": why, "kind": "values"}
            except Exception:  # noqa: BLE001 - the traceback goes to the worker's log
                reply = {"error": f"{name} raised:\n{traceback.format_exc()}", "kind": "raised"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: reward_server.py <module or file.py>")
    # The protocol owns the original stdout; the user's prints, and whatever a C extension
    # writes to file descriptor 1, go to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, os.getcwd())
    serve(argv[1], sys.stdin, out)


if __name__ == "__main__":
    main(sys.argv)
