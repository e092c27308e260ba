#!/usr/bin/env python3
"""Prints the parameter count of a checkpoint (a ckpt-* directory or a directory holding them,
such as a run's best-xe): the f32 values of its model.safetensors, read from the header."""
import json
import struct
import sys
from pathlib import Path


def params(path):
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for d in tensor["shape"]:
            n *= d
        total += n
    return total


def main():
    best = Path(sys.argv[1])
    files = sorted(best.glob("model.safetensors")) or sorted(best.glob("*/model.safetensors"))
    if not files:
        sys.exit(f"no model.safetensors in {best} or its checkpoints")
    print(params(files[-1]))


if __name__ == "__main__":
    main()
