#!/usr/bin/env python3
"""Float64 numpy reference for MiniMax Music 3's flow VAE *encoder*, written from minimaxmusic.cpp's
description alone (no public implementation exists: diffusers ships the decoder only).

Usage (from the repository root; numpy from PyPI, nothing else):

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python scripts/ref/mm3_encoder_reference.py           # writes fixtures/mm3/encoder/
    /tmp/np/bin/python scripts/ref/mm3_encoder_reference.py --check   # recomputes and compares

The encoder, per side (each stereo channel is encoded alone to its own 64 latent
channels; left first): conv_in = Conv1d(1, E0, 7, pad 3); four blocks (strides 2, 4, 8, 8),
block i: three residual units at E_i (dilations 1, 3, 9), snake, then
Conv1d(E_i, E_{i+1}, kernel 2s, stride s, pad ceil(s/2)); snake_out; conv_out =
Conv1d(E_last, E_last, 3, pad 1); the posterior mean = mean_proj = Conv1d(E_last, half, 1).
Residual unit: x + conv2(snake2(conv1(snake1(x)))), conv1 = Conv1d(C, C, 7, dilation d,
pad 3d), conv2 = Conv1d(C, C, 1). Snake with alpha used directly:
y = x + sin(alpha * x)^2 / (alpha + 1e-9). 512 samples per latent frame.

Tensor names are the vocoder GGUF's `encoder.*` names. Widths here are tiny
(E = 2, 4, 8, 16, 32; half = 8) and every weight is an f32 value; the computation runs in
float64 on exactly those values, the output is rounded to f32.

Writes fixtures/mm3/encoder/:
    weights.f32     every tensor, f32 little-endian, in manifest order; each in torch layout,
                    so its GGUF ne is the reversed torch shape (ne0 = kernel)
    manifest.json   [{name, ne, offset, count}], the strides, widths, the audio length
    audio.f32       the input, planar stereo [2, 512 * 6] (two sines and noise, |x| <= 0.6)
    mean.f32        the encoder output, TIME-MAJOR [6, 2 * half] (left's half channels first)
"""
import json
import pathlib
import sys

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "mm3" / "encoder"
STRIDES = [2, 4, 8, 8]
WIDTHS = [2, 4, 8, 16, 32]
HALF = 8
FRAMES = 6
DILATIONS = [1, 3, 9]


def weights(rng):
    """(name, torch shape, f32 values) in load order."""
    out = []

    def conv(name, cout, cin, k):
        w = rng.standard_normal((cout, cin, k)) / np.sqrt(cin * k)
        out.append((f"{name}.weight", (cout, cin, k), w.astype(np.float32)))
        out.append((f"{name}.bias", (cout,), (0.1 * rng.standard_normal(cout)).astype(np.float32)))

    def snake(name, c):
        out.append((f"{name}.alpha", (1, c, 1), rng.uniform(0.5, 1.5, (1, c, 1)).astype(np.float32)))

    conv("encoder.conv_in", WIDTHS[0], 1, 7)
    for i, s in enumerate(STRIDES):
        c = WIDTHS[i]
        for r in range(3):
            p = f"encoder.blocks.{i}.res_unit{r + 1}"
            snake(f"{p}.snake1", c)
            conv(f"{p}.conv1", c, c, 7)
            snake(f"{p}.snake2", c)
            conv(f"{p}.conv2", c, c, 1)
        snake(f"encoder.blocks.{i}.snake1", c)
        conv(f"encoder.blocks.{i}.conv1", WIDTHS[i + 1], c, 2 * s)
    snake("encoder.snake_out", WIDTHS[-1])
    conv("encoder.conv_out", WIDTHS[-1], WIDTHS[-1], 3)
    conv("encoder.mean_proj", HALF, WIDTHS[-1], 1)
    return out


def conv1d(x, w, b, stride=1, pad=0, dil=1):
    """x [Cin, L], w [Cout, Cin, K] -> [Cout, L'] in float64 (torch's Conv1d)."""
    cout, cin, k = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad)))
    lout = (xp.shape[1] - dil * (k - 1) - 1) // stride + 1
    y = np.zeros((cout, lout))
    for j in range(k):
        cols = xp[:, j * dil : j * dil + stride * (lout - 1) + 1 : stride]
        y += w[:, :, j].astype(np.float64) @ cols
    return y + b.astype(np.float64)[:, None]


def snake(x, a):
    a = a.reshape(-1, 1).astype(np.float64)
    return x + np.sin(a * x) ** 2 / (a + 1e-9)


def encode_side(x, w):
    """x [L] float64 -> the mean, [half, L / 512]."""
    g = lambda n: w[n]
    h = conv1d(x[None, :], g("encoder.conv_in.weight"), g("encoder.conv_in.bias"), pad=3)
    for i, s in enumerate(STRIDES):
        for r, d in enumerate(DILATIONS):
            p = f"encoder.blocks.{i}.res_unit{r + 1}"
            y = snake(h, g(f"{p}.snake1.alpha"))
            y = conv1d(y, g(f"{p}.conv1.weight"), g(f"{p}.conv1.bias"), pad=3 * d, dil=d)
            y = snake(y, g(f"{p}.snake2.alpha"))
            y = conv1d(y, g(f"{p}.conv2.weight"), g(f"{p}.conv2.bias"))
            h = h + y
        h = snake(h, g(f"encoder.blocks.{i}.snake1.alpha"))
        h = conv1d(h, g(f"encoder.blocks.{i}.conv1.weight"), g(f"encoder.blocks.{i}.conv1.bias"), stride=s, pad=(s + 1) // 2)
    h = snake(h, g("encoder.snake_out.alpha"))
    h = conv1d(h, g("encoder.conv_out.weight"), g("encoder.conv_out.bias"), pad=1)
    return conv1d(h, g("encoder.mean_proj.weight"), g("encoder.mean_proj.bias"))


def build():
    rng = np.random.default_rng(2026)
    ws = weights(rng)
    n = 512 * FRAMES
    t = np.arange(n) / 44100.0
    audio = np.stack([0.4 * np.sin(2 * np.pi * 220 * t), 0.3 * np.sin(2 * np.pi * 331 * t + 1.0)]) + 0.1 * rng.standard_normal((2, n))
    audio = np.clip(audio, -0.6, 0.6).astype(np.float32)
    w = {name: v for name, _, v in ws}
    sides = [encode_side(audio[c].astype(np.float64), w) for c in range(2)]
    assert sides[0].shape == (HALF, FRAMES), sides[0].shape
    mean = np.concatenate(sides, axis=0).T.astype(np.float32)  # [FRAMES, 2 * HALF]
    manifest, offset, blob = [], 0, []
    for name, shape, v in ws:
        manifest.append({"name": name, "ne": list(reversed(shape)), "offset": offset, "count": int(v.size)})
        offset += int(v.size)
        blob.append(v.reshape(-1))
    doc = {"tensors": manifest, "strides": STRIDES, "widths": WIDTHS, "half": HALF, "samples": n, "frames": FRAMES}
    return doc, np.concatenate(blob).astype("<f4"), audio.astype("<f4"), mean.astype("<f4")


def main():
    doc, blob, audio, mean = build()
    if "--check" in sys.argv:
        old = np.fromfile(OUT / "mean.f32", dtype="<f4")
        assert np.array_equal(np.fromfile(OUT / "weights.f32", dtype="<f4"), blob), "weights differ"
        err = np.abs(old - mean.reshape(-1)).max()
        print(f"max |difference| {err:.3e}")
        assert err == 0.0
        return
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    blob.tofile(OUT / "weights.f32")
    audio.tofile(OUT / "audio.f32")
    mean.tofile(OUT / "mean.f32")
    print(f"wrote {OUT}: {len(doc['tensors'])} tensors, mean rms {np.sqrt((mean.astype(np.float64) ** 2).mean()):.4f}")


if __name__ == "__main__":
    main()
