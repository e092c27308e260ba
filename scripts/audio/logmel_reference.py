#!/usr/bin/env python3
"""NumPy reference for caprl's log-mel front end (common/data/src/audio/logmel.rs).

Writes common/data/tests/data/audio/logmel_sine_reference.json: the log-mel spectrogram of
0.5 s of 0.5*sin(2*pi*440 t) + 0.25*sin(2*pi*3000 t) at 16 kHz with the paper's settings
(64 mel bands, 2048-point FFT, 40 ms periodic Hann window, 20 ms hop, centred frames with
zero padding, HTK mel scale, Slaney area normalisation, ln with a 1e-10 floor).
The Rust test `logmel_of_sine_matches_numpy_reference` compares against it; CI needs no Python.

    python3 scripts/audio/logmel_reference.py
"""
import json
import os

import numpy as np

SR, N_FFT, N_MELS = 16000, 2048, 64
WIN, HOP = round(SR * 0.040), round(SR * 0.020)
SECONDS = 0.5


def hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filters():
    points = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SR / 2), N_MELS + 2))
    freqs = np.arange(N_FFT // 2 + 1) * SR / N_FFT
    fb = np.zeros((N_MELS, freqs.size))
    for i in range(N_MELS):
        f0, f1, f2 = points[i : i + 3]
        w = np.minimum((freqs - f0) / (f1 - f0), (f2 - freqs) / (f2 - f1))
        fb[i] = np.maximum(w, 0.0) * 2.0 / (f2 - f0)
    return fb


def logmel(x):
    window = np.zeros(N_FFT)
    off = (N_FFT - WIN) // 2
    window[off : off + WIN] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(WIN) / WIN)
    padded = np.pad(x, N_FFT // 2)
    frames = 1 + len(x) // HOP
    stack = np.stack([padded[t * HOP : t * HOP + N_FFT] * window for t in range(frames)])
    power = np.abs(np.fft.rfft(stack, axis=1)) ** 2
    return np.log(np.maximum(power @ mel_filters().T, 1e-10))


def main():
    n = np.arange(int(SR * SECONDS))
    x = 0.5 * np.sin(2 * np.pi * 440 * n / SR) + 0.25 * np.sin(2 * np.pi * 3000 * n / SR)
    out = {
        "sample_rate": SR,
        "n_fft": N_FFT,
        "win_length": WIN,
        "hop_length": HOP,
        "n_mels": N_MELS,
        "samples": int(len(x)),
        "signal": "0.5*sin(2*pi*440*n/sr) + 0.25*sin(2*pi*3000*n/sr)",
        "numpy": np.__version__,
        "logmel": [[round(float(v), 9) for v in row] for row in logmel(x)],
    }
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "common", "data", "tests", "data", "audio", "logmel_sine_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {len(out['logmel'])} frames x {N_MELS} bands")


if __name__ == "__main__":
    main()
