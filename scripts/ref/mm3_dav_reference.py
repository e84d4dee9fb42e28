#!/usr/bin/env python3
"""A tiny `dav.pth` (MiniMax Music 3's VAE training checkpoint, whose encoder the published
vocoder/ lacks) written by torch.save, and what torch computes from it: the fixture of
`yued convert mm3`'s torch-archive reader and of the encoder it builds.

Usage (from the repository root; the venv of fixtures/mm3/README.md, torch on the CPU):

    /tmp/mm3venv/bin/python scripts/ref/mm3_dav_reference.py          # writes fixtures/mm3/dav/
    /tmp/mm3venv/bin/python scripts/ref/mm3_dav_reference.py --check  # recomputes and compares

The checkpoint is a DAC-style VAE state dict, nested under "generator" beside training junk
(an int, a float, an fp16 decoder tensor) that the reader must step over:

    encoder.block.0                     WNConv1d(1, E0, 7, pad 3)               (conv_in)
    encoder.block.i, i = 1..n           EncoderBlock: block.0..2 ResidualUnit(E_{i-1}, d = 1, 3, 9)
                                        (each block.{0: Snake, 1: WNConv k=7 dil d, 2: Snake,
                                        3: WNConv k=1}), block.3 Snake, block.4 WNConv(E_{i-1},
                                        E_i, 2s, stride s, pad ceil(s/2))
    encoder.block.n+1                   Snake                                   (snake_out)
    encoder.block.n+2                   WNConv1d(E_n, E_n, 3, pad 1)            (conv_out)
    mean_proj                           WNConv1d(E_n, half, 1)                  (posterior mean)

Weight norm as torch.nn.utils.weight_norm stores it (weight_g, weight_v), except mean_proj in
the newer parametrization naming (parametrizations.weight.original0/1): the reader takes both.
The forward runs in torch float64 on those f32 values (torch._weight_norm folds), each side
of the stereo input alone, and the mean is rounded to f32.

Widths are those of the tiny test vocoder (fixtures/mm3/ckpt/vocoder: 8 latent channels, so
half = 4; hop 2 * 2 = 4). Writes fixtures/mm3/dav/:
    dav.pth         the checkpoint
    audio.f32       planar stereo [2, 4 * FRAMES]
    mean.f32        TIME-MAJOR [FRAMES, 2 * half], left's channels first
    manifest.json   strides, widths, half, frames
"""
import json
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

OUT = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "mm3" / "dav"
STRIDES = [2, 2]
WIDTHS = [4, 8, 16]
HALF = 4
FRAMES = 24
DILATIONS = [1, 3, 9]


def state_dict(gen):
    sd = {}

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.float32)

    def wn(name, cout, cin, k, param=False):
        v, g = r(cout, cin, k), (r(cout, 1, 1).abs() + 0.5) / math.sqrt(1.0)
        if param:
            sd[f"{name}.parametrizations.weight.original0"] = g
            sd[f"{name}.parametrizations.weight.original1"] = v
        else:
            sd[f"{name}.weight_g"] = g
            sd[f"{name}.weight_v"] = v
        sd[f"{name}.bias"] = r(cout, scale=0.1)

    def snake(name, c):
        sd[f"{name}.alpha"] = (r(1, c, 1).abs() + 0.3)

    wn("encoder.block.0", WIDTHS[0], 1, 7)
    for i, s in enumerate(STRIDES):
        c = WIDTHS[i]
        for j in range(3):
            p = f"encoder.block.{i + 1}.block.{j}.block"
            snake(f"{p}.0", c)
            wn(f"{p}.1", c, c, 7)
            snake(f"{p}.2", c)
            wn(f"{p}.3", c, c, 1)
        snake(f"encoder.block.{i + 1}.block.3", c)
        wn(f"encoder.block.{i + 1}.block.4", WIDTHS[i + 1], c, 2 * s)
    n = len(STRIDES)
    snake(f"encoder.block.{n + 1}", WIDTHS[-1])
    wn(f"encoder.block.{n + 2}", WIDTHS[-1], WIDTHS[-1], 3)
    wn("mean_proj", HALF, WIDTHS[-1], 1, param=True)
    return sd


def forward(sd, x):
    """One side [1, 1, N] float64 -> [1, half, N / hop]."""
    d = {k: v.to(torch.float64) for k, v in sd.items()}

    def w(name):
        if f"{name}.weight_v" in d:
            return torch._weight_norm(d[f"{name}.weight_v"], d[f"{name}.weight_g"], 0)
        return torch._weight_norm(d[f"{name}.parametrizations.weight.original1"], d[f"{name}.parametrizations.weight.original0"], 0)

    def conv(name, x, stride=1, pad=0, dil=1):
        return F.conv1d(x, w(name), d[f"{name}.bias"], stride=stride, padding=pad, dilation=dil)

    def snake(name, x):
        a = d[f"{name}.alpha"]
        return x + torch.sin(a * x) ** 2 / (a + 1e-9)

    x = conv("encoder.block.0", x, pad=3)
    for i, s in enumerate(STRIDES):
        for j, dil in enumerate(DILATIONS):
            p = f"encoder.block.{i + 1}.block.{j}.block"
            y = conv(f"{p}.3", snake(f"{p}.2", conv(f"{p}.1", snake(f"{p}.0", x), pad=3 * dil, dil=dil)))
            x = x + y
        x = snake(f"encoder.block.{i + 1}.block.3", x)
        x = conv(f"encoder.block.{i + 1}.block.4", x, stride=s, pad=math.ceil(s / 2))
    n = len(STRIDES)
    x = snake(f"encoder.block.{n + 1}", x)
    x = conv(f"encoder.block.{n + 2}", x, pad=1)
    return conv("mean_proj", x)


def main(check=False):
    gen = torch.Generator().manual_seed(2026)
    sd = state_dict(gen)
    hop = int(np.prod(STRIDES))
    n = hop * FRAMES
    t = np.arange(n) / 44100.0
    audio = np.stack([0.5 * np.sin(2 * np.pi * 3000 * t), 0.4 * np.sin(2 * np.pi * 7000 * t + 1.0)]).astype(np.float32)
    audio += (torch.randn(2, n, generator=gen).numpy() * 0.05).astype(np.float32)
    sides = [forward(sd, torch.from_numpy(audio[c : c + 1][None].astype(np.float64)))[0] for c in range(2)]  # [half, T]
    mean = torch.cat(sides, 0).T.contiguous().to(torch.float32).numpy()  # [T, 2 * half]
    assert mean.shape == (FRAMES, 2 * HALF), mean.shape
    manifest = {"strides": STRIDES, "widths": WIDTHS, "half": HALF, "frames": FRAMES}
    if check:
        got = np.fromfile(OUT / "mean.f32", dtype="<f4").reshape(mean.shape)
        ok = np.array_equal(got, mean) and json.loads((OUT / "manifest.json").read_text()) == manifest
        print("fixtures/mm3/dav: " + ("identical" if ok else "DIFFERENT"))
        return 0 if ok else 1
    OUT.mkdir(parents=True, exist_ok=True)
    ckpt = {
        "generator": {k: v for k, v in sd.items()} | {"decoder.model.0.weight": torch.randn(3, 2, generator=gen).half()},
        "epoch": 17,
        "lr": 1e-4,
    }
    torch.save(ckpt, OUT / "dav.pth")
    audio.astype("<f4").tofile(OUT / "audio.f32")
    mean.astype("<f4").tofile(OUT / "mean.f32")
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {OUT}: {len(sd)} encoder tensors, mean {mean.shape}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main(check="--check" in sys.argv))
