#!/usr/bin/env python3
"""Independent numpy reference of the host side of the audio tokenizer's pipeline (yue2.cpp's
`audio-tokenizer.h`, `docs/design/listening-part1.md` section 5), for the Rust plan's test.

Usage (from the repository root; numpy only):

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python scripts/ref/audio_tokenizer_plan_reference.py   # fixtures/mert/tokenizer_plan.json

- chunks: 30 s of 24 kHz each, a final tail under 1 s dropped;
- codes: Python's round (half to even) of seconds * 25;
- resampling: numpy's `interp` at half-pixel source positions clamped at 0 (what torch's
  `interpolate(linear, align_corners=False)` computes);
- standardisation: numpy's population `std` (ddof 0), `(x - mean) / (std + 1e-5)`;
- windows: 512 frames every 256, one pulled back to the end when the grid stops short, each
  keeping its frames but the 128 next to an inner edge.
The features come from a closed formula the Rust test computes the same way.
"""
import json
import os

import numpy as np

RATE, CHUNK = 24000, 30 * 24000


def chunks(n):
    out = []
    for s in range(0, n, CHUNK):
        e = min(s + CHUNK, n)
        if e - s < RATE:
            break
        out.append([s, e])
    return out


def windows(t):
    starts = list(range(0, max(1, t - 512 + 1), 256))
    if starts[-1] + 512 < t:
        starts.append(max(0, t - 512))
    out = []
    for s in starts:
        n = min(512, t - s)
        lo = s if s == 0 else s + 128
        hi = s + n if s + n >= t else s + n - 128
        out.append([s, n, lo, hi])
    return out


def feats(t, dim):
    i = np.arange(t, dtype=np.float64)[:, None]
    c = np.arange(dim, dtype=np.float64)[None, :]
    return (np.sin(0.1 * i + 0.3 * c) + 0.01 * c).astype(np.float32)


def main():
    lengths = [23999, 24000, 24001, 719999, 720000, 720000 + 23999, 720000 + 24000, 2000000, 36001]
    plan = [{"n": n, "chunks": chunks(n), "codes": int(round(n * 25 / RATE))} for n in lengths]
    tiles = [{"t": t, "windows": windows(t)} for t in [1, 100, 511, 512, 513, 700, 768, 769, 1024, 1500, 2000]]
    resampled = []
    for t_in, t_out, dim in [(10, 25, 3), (75, 75, 4), (120, 37, 5), (749, 750, 8)]:
        f = feats(t_in, dim).astype(np.float64)
        x = np.maximum((np.arange(t_out) + 0.5) * (t_in / t_out) - 0.5, 0.0)
        r = np.stack([np.interp(x, np.arange(t_in), f[:, c]) for c in range(dim)], axis=1)
        s = (r - r.mean(axis=0)) / (r.std(axis=0) + 1e-5)
        resampled.append({"t_in": t_in, "t_out": t_out, "dim": dim,
                          "resampled": [float(v) for v in r.astype(np.float32).reshape(-1)],
                          "standardised": [float(v) for v in s.astype(np.float32).reshape(-1)]})
    path = os.path.join("fixtures", "mert", "tokenizer_plan.json")
    with open(path, "w") as fh:
        json.dump({"plan": plan, "windows": tiles, "resample": resampled}, fh)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
