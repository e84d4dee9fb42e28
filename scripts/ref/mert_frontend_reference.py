#!/usr/bin/env python3
"""Independent numpy reference of MERT-v2's log-mel front end, as yue2.cpp's `mert.h` computes it
(`docs/design/listening-part1.md`, section 3), for the Rust front end's parity test.

Usage (from the repository root; numpy only):

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python scripts/ref/mert_frontend_reference.py     # writes fixtures/mert/frontend.json

The front end: a centred STFT (the signal reflect-padded by n_fft / 2 on both sides, without
repeating the edge sample), each frame times the window, the power spectrum |X|^2 of bins
0..n_fft/2, the filterbank applied in double, 10 log10(max(x, 1e-10)), torch's last centred
frame dropped (n // hop frames are kept), then per bin (x - mean) / max(std, 1e-5) with the
mean and std the checkpoint ships.

The inputs are made from closed formulas (in float64, rounded to float32), which the Rust test
computes the same way, so the fixture holds only the cases' sizes and the outputs.
"""
import json
import os

import numpy as np


def inputs(n, n_fft, mels):
    i = np.arange(n, dtype=np.float64)
    signal = (0.5 * np.sin(0.01 * i * (1.0 + (i % 7))) + 0.25 * np.cos(0.037 * i)).astype(np.float32)
    j = np.arange(n_fft, dtype=np.float64)
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * j / n_fft)).astype(np.float32)
    bins = n_fft // 2 + 1
    b = np.arange(bins, dtype=np.float64)[:, None]
    k = np.arange(mels, dtype=np.float64)[None, :]
    width = bins / (mels + 1)
    centre = (k + 1.0) * width
    fb = np.maximum(0.0, 1.0 - np.abs(b - centre) / width).astype(np.float32)  # [bins, mels]
    mean = (-20.0 + 0.1 * np.arange(mels)).astype(np.float32)
    std = (5.0 + 0.01 * np.arange(mels)).astype(np.float32)
    std[0] = 1e-7  # below the floor: divided by 1e-5
    return signal, window, fb, mean, std


def front_end(signal, window, fb, mean, std, n_fft, hop):
    n = len(signal)
    padded = np.pad(signal.astype(np.float64), n_fft // 2, mode="reflect")
    frames = n // hop
    out = np.empty((frames, fb.shape[1]), dtype=np.float32)
    for f in range(frames):
        seg = padded[f * hop : f * hop + n_fft] * window.astype(np.float64)
        spec = np.fft.rfft(seg)
        power = spec.real**2 + spec.imag**2
        acc = power @ fb.astype(np.float64)
        db = 10.0 * np.log10(np.maximum(acc, 1e-10))
        out[f] = ((db - mean) / np.maximum(std, 1e-5)).astype(np.float32)
    return out


def main():
    cases = []
    for n, n_fft, hop, mels in [(400, 64, 16, 8), (12000, 2048, 240, 128)]:
        sig, win, fb, mean, std = inputs(n, n_fft, mels)
        out = front_end(sig, win, fb, mean, std, n_fft, hop)
        cases.append({"n": n, "n_fft": n_fft, "hop": hop, "mels": mels, "frames": out.shape[0],
                      "log_mel": [float(x) for x in out.reshape(-1)]})
    path = os.path.join("fixtures", "mert", "frontend.json")
    with open(path, "w") as fh:
        json.dump({"cases": cases}, fh)
    print(f"wrote {path}: {[c['frames'] for c in cases]} frames")


if __name__ == "__main__":
    main()
