#!/usr/bin/env python3
"""Torch reference of MERT-v2-FullSong and the audio-tokenizer head (yue2.cpp's architecture
reference, "Audio tokenizer"; `docs/design/listening-part1.md`), on tiny random weights, for the
Rust graphs' parity tests. Written from the architecture description with torch's own layers:
`torch.stft`, `F.layer_norm`, `F.conv1d`, `F.gelu` (erf), a plain softmax attention with rotary
halves, and for the head `torch.nn.TransformerEncoder(norm_first=True, activation="gelu")`.

Usage (from the repository root; torch is needed here only, never in CI):

    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install numpy torch safetensors
    /tmp/torch/bin/python scripts/ref/mert_reference.py      # writes fixtures/mert/{ckpt,model}/

Writes, deterministically (a second run gives the same bytes):
    ckpt/mert/config.json, model.safetensors      a tiny MERT-v2 in the checkpoint's layout (F32)
    ckpt/tokenizer/config.json, tokenizer_head.safetensors   a tiny head in the v9 layout (F32);
                                                  the JSON holds what convert.py's TOKENIZER_CONFIG
                                                  would (heads, the MERT layer, chunk, window)
    model/cases.json      the inputs' sizes, the frame counts, the codes
    model/<case>.<what>.f32   float32 little-endian, time-major [frames][channels]:
        mel, stage0..2 (each subsampling block's output), state0..L (state0 = the subsampled
        frames, state l+1 = conformer block l's output), features (the tokenizer's
        standardised input on the code grid)

The audio comes from an integer generator (xorshift32 noise plus a square wave whose period
drifts), so the Rust test rebuilds it bit for bit: sample i = int16 value / 32768.
"""
import json
import math
import pathlib

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "mert"
RATE = 24000

MERT_CONFIG = {
    "model_type": "mert2",
    "sampling_rate": RATE,
    "n_fft": 2048,
    "hop_length": 240,
    "win_length": 2048,
    "num_mel_bins": 128,
    "subsampling_channels": [128, 32, 64],
    "subsampling_depths": [1, 2, 1],
    "subsampling_layer_norm_eps": 1e-6,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "conv_depthwise_kernel_size": 31,
    "layer_norm_eps": 1e-5,
    "rotary_embedding_base": 10000.0,
    "inputs_to_logits_ratio": 960,
}

HEAD_CONFIG = {
    "base_model_name_or_path": "m-a-p/MERT-v2-FullSong",
    "mert_layer": 2,
    "chunk_seconds": 4,
    "frame_rate": 25,
    "window": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "layer_norm_eps": 1e-5,
    "instance_norm_eps": 1e-5,
    "vocab_size": 1024,
}


def audio(n, salt):
    """n samples from xorshift32 noise (amplitude 1/8) plus a square wave (amplitude 1/4)."""
    x = (0x9E3779B9 ^ salt) & 0xFFFFFFFF
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        noise = (x >> 20) - 2048  # -2048..2047
        period = 40 + (i // 4800) % 60
        square = 8192 if (i // period) % 2 == 0 else -8192
        out[i] = square + 2 * noise
    return out.astype(np.float32) / 32768.0


# ---------------------------------------------------------------------------------------------
# Weights


def mert_weights(g):
    c = MERT_CONFIG
    w = {}

    def rnd(shape, scale):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).float()

    def ln(name, dim):
        w[f"{name}.weight"] = 1.0 + rnd((dim,), 0.1)
        w[f"{name}.bias"] = rnd((dim,), 0.1)

    def lin(name, cin, cout, bias=True):
        w[f"{name}.weight"] = rnd((cout, cin), 1.0 / math.sqrt(cin))
        if bias:
            w[f"{name}.bias"] = rnd((cout,), 0.05)

    n_fft, mels = c["n_fft"], c["num_mel_bins"]
    j = torch.arange(n_fft, dtype=torch.float64)
    w["feature_extractor.spectrogram.window"] = (0.5 - 0.5 * torch.cos(2 * math.pi * j / n_fft)).float()
    bins = n_fft // 2 + 1
    # a triangular filterbank on a mel-like warp of the bins
    hz = torch.arange(bins, dtype=torch.float64) * RATE / n_fft
    mel = 2595.0 * torch.log10(1.0 + hz / 700.0)
    edges = torch.linspace(0.0, float(mel[-1]), mels + 2, dtype=torch.float64)
    lo, mid, hi = edges[:-2][None], edges[1:-1][None], edges[2:][None]
    m = mel[:, None]
    fb = torch.clamp(torch.minimum((m - lo) / (mid - lo), (hi - m) / (hi - mid)), min=0.0)
    w["feature_extractor.mel_scale.fb"] = fb.float()  # [bins, mels]
    w["feature_extractor.mel_mean"] = (-30.0 + rnd((mels,), 5.0).double()).float()
    w["feature_extractor.mel_std"] = (12.0 + rnd((mels,), 2.0).double().abs()).float()

    chans = [mels] + c["subsampling_channels"]
    for i in range(3):
        cin, cout, p = chans[i], chans[i + 1], f"subsampling_module.{i}"
        if i > 0:
            ln(f"{p}.resampling_layer.0", cin)
            w[f"{p}.resampling_layer.2.weight"] = rnd((cout, cin, 2), 1.0 / math.sqrt(2 * cin))
            w[f"{p}.resampling_layer.2.bias"] = rnd((cout,), 0.05)
        for d in range(c["subsampling_depths"][i]):
            q = f"{p}.convnext_layers.{d}"
            w[f"{q}.depthwise_block.1.weight"] = rnd((cout, 1, 7), 1.0 / math.sqrt(7))
            w[f"{q}.depthwise_block.1.bias"] = rnd((cout,), 0.05)
            ln(f"{q}.pointwise_block.0", cout)
            lin(f"{q}.pointwise_block.1", cout, 4 * cout)
            w[f"{q}.pointwise_block.3.weight"] = rnd((1, 1, 4 * cout), 0.5)
            w[f"{q}.pointwise_block.3.bias"] = rnd((1, 1, 4 * cout), 0.1)
            lin(f"{q}.pointwise_block.4", 4 * cout, cout)
    d, inter, k = c["hidden_size"], c["intermediate_size"], c["conv_depthwise_kernel_size"]
    for l in range(c["num_hidden_layers"]):
        p = f"layers.{l}"
        for f in ["ffn1", "ffn2"]:
            ln(f"{p}.{f}_layer_norm", d)
            lin(f"{p}.{f}.w_1", d, inter)
            lin(f"{p}.{f}.w_2", inter, d)
        ln(f"{p}.attn_layer_norm", d)
        for n in ["query", "key", "value", "out"]:
            lin(f"{p}.attn.{n}_proj", d, d)
        ln(f"{p}.conv_module.layer_norm", d)
        w[f"{p}.conv_module.conv_block.1.weight"] = rnd((2 * d, d, 1), 1.0 / math.sqrt(d))
        w[f"{p}.conv_module.conv_block.3.weight"] = rnd((d, 1, k), 1.0 / math.sqrt(k))
        ln(f"{p}.conv_module.conv_block.4.1", d)
        w[f"{p}.conv_module.conv_block.6.weight"] = rnd((d, d, 1), 1.0 / math.sqrt(d))
        ln(f"{p}.final_layer_norm", d)
    return w


def head_weights(g):
    c = HEAD_CONFIG
    d, ff, W = c["hidden_size"], c["intermediate_size"], c["window"]
    dm = MERT_CONFIG["hidden_size"]
    w = {}

    def rnd(shape, scale):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).float()

    w["inp.weight"] = rnd((d, dm), 1.0 / math.sqrt(dm))
    w["inp.bias"] = rnd((d,), 0.05)
    w["pos"] = rnd((1, W, d), 0.1)
    for l in range(c["num_hidden_layers"]):
        p = f"enc.layers.{l}"
        w[f"{p}.self_attn.in_proj_weight"] = rnd((3 * d, d), 1.0 / math.sqrt(d))
        w[f"{p}.self_attn.in_proj_bias"] = rnd((3 * d,), 0.05)
        w[f"{p}.self_attn.out_proj.weight"] = rnd((d, d), 1.0 / math.sqrt(d))
        w[f"{p}.self_attn.out_proj.bias"] = rnd((d,), 0.05)
        w[f"{p}.linear1.weight"] = rnd((ff, d), 1.0 / math.sqrt(d))
        w[f"{p}.linear1.bias"] = rnd((ff,), 0.05)
        w[f"{p}.linear2.weight"] = rnd((d, ff), 1.0 / math.sqrt(ff))
        w[f"{p}.linear2.bias"] = rnd((d,), 0.05)
        for n in ["norm1", "norm2"]:
            w[f"{p}.{n}.weight"] = 1.0 + rnd((d,), 0.1)
            w[f"{p}.{n}.bias"] = rnd((d,), 0.1)
    w["norm.weight"] = 1.0 + rnd((d,), 0.1)
    w["norm.bias"] = rnd((d,), 0.1)
    w["head.weight"] = rnd((c["vocab_size"], d), 1.0 / math.sqrt(d))
    w["head.bias"] = rnd((c["vocab_size"],), 0.05)
    return w


# ---------------------------------------------------------------------------------------------
# MERT, in float64 on the f32 weights


def log_mel(w, x):
    c = MERT_CONFIG
    spec = torch.stft(x, n_fft=c["n_fft"], hop_length=c["hop_length"], win_length=c["win_length"],
                      window=w["feature_extractor.spectrogram.window"], center=True, pad_mode="reflect",
                      return_complex=True)
    power = spec.abs() ** 2  # [bins, frames]
    mel = power.T @ w["feature_extractor.mel_scale.fb"]
    db = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
    db = db[:-1]
    return (db - w["feature_extractor.mel_mean"]) / torch.clamp(w["feature_extractor.mel_std"], min=1e-5)


def layer_norm(w, name, x, eps):
    return F.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], eps)


def linear(w, name, x):
    return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def depthwise(x, kernel, bias):
    """x [T, C] -> same-padded depthwise conv over time."""
    k = kernel.shape[-1]
    y = F.conv1d(x.T[None], kernel, bias, padding=k // 2, groups=x.shape[1])
    return y[0].T


def convnext(w, p, x):
    eps = MERT_CONFIG["subsampling_layer_norm_eps"]
    y = depthwise(x, w[f"{p}.depthwise_block.1.weight"], w[f"{p}.depthwise_block.1.bias"])
    y = layer_norm(w, f"{p}.pointwise_block.0", y, eps)
    y = F.gelu(linear(w, f"{p}.pointwise_block.1", y))
    mag = torch.linalg.vector_norm(y, dim=0, keepdim=True)  # over time, per channel
    n = mag / (mag.mean(dim=-1, keepdim=True) + 1e-6)
    y = w[f"{p}.pointwise_block.3.weight"][0] * (y * n) + w[f"{p}.pointwise_block.3.bias"][0] + y
    return x + linear(w, f"{p}.pointwise_block.4", y)


def subsample(w, x):
    c = MERT_CONFIG
    outs = []
    for i in range(3):
        p = f"subsampling_module.{i}"
        if i > 0:
            x = layer_norm(w, f"{p}.resampling_layer.0", x, c["subsampling_layer_norm_eps"])
            x = F.conv1d(x.T[None], w[f"{p}.resampling_layer.2.weight"], w[f"{p}.resampling_layer.2.bias"],
                         stride=2)[0].T
        for d in range(c["subsampling_depths"][i]):
            x = convnext(w, f"{p}.convnext_layers.{d}", x)
        outs.append(x)
    return outs


def rotary(x, base):
    """x [H, T, hd]: rotate the two halves of each head (the NeoX layout)."""
    hd, t = x.shape[-1], x.shape[-2]
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def conformer(w, p, x):
    c = MERT_CONFIG
    eps, h = c["layer_norm_eps"], c["num_attention_heads"]

    def ffn(name, x):
        return linear(w, f"{p}.{name}.w_2", F.gelu(linear(w, f"{p}.{name}.w_1", x)))

    x = x + 0.5 * ffn("ffn1", layer_norm(w, f"{p}.ffn1_layer_norm", x, eps))
    a = layer_norm(w, f"{p}.attn_layer_norm", x, eps)
    t, d = a.shape

    def heads(name):
        return linear(w, f"{p}.attn.{name}_proj", a).reshape(t, h, d // h).transpose(0, 1)

    q = rotary(heads("query"), c["rotary_embedding_base"])
    k = rotary(heads("key"), c["rotary_embedding_base"])
    v = heads("value")
    att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d // h), dim=-1) @ v  # [H, T, hd]
    x = x + linear(w, f"{p}.attn.out_proj", att.transpose(0, 1).reshape(t, d))
    y = layer_norm(w, f"{p}.conv_module.layer_norm", x, eps)
    y = F.conv1d(y.T[None], w[f"{p}.conv_module.conv_block.1.weight"])[0].T  # [T, 2D]
    y = y[:, :d] * torch.sigmoid(y[:, d:])
    y = depthwise(y, w[f"{p}.conv_module.conv_block.3.weight"], None)
    y = F.gelu(layer_norm(w, f"{p}.conv_module.conv_block.4.1", y, eps))
    y = F.conv1d(y.T[None], w[f"{p}.conv_module.conv_block.6.weight"])[0].T
    x = x + y
    x = x + 0.5 * ffn("ffn2", layer_norm(w, f"{p}.ffn2_layer_norm", x, eps))
    return layer_norm(w, f"{p}.final_layer_norm", x, eps)


def mert(w, x, blocks):
    """The mel, the three subsampling outputs and states 0..blocks."""
    mel = log_mel(w, x)
    stages = subsample(w, mel)
    states = [stages[-1]]
    for l in range(blocks):
        states.append(conformer(w, f"layers.{l}", states[-1]))
    return mel, stages, states


# ---------------------------------------------------------------------------------------------
# The tokenizer


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        c = HEAD_CONFIG
        d = c["hidden_size"]
        self.inp = torch.nn.Linear(MERT_CONFIG["hidden_size"], d)
        self.pos = torch.nn.Parameter(torch.zeros(1, c["window"], d))
        layer = torch.nn.TransformerEncoderLayer(d, c["num_attention_heads"], c["intermediate_size"], dropout=0.0,
                                                 activation="gelu", batch_first=True, norm_first=True,
                                                 layer_norm_eps=c["layer_norm_eps"])
        self.enc = torch.nn.TransformerEncoder(layer, c["num_hidden_layers"], enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d, eps=c["layer_norm_eps"])
        self.head = torch.nn.Linear(d, c["vocab_size"])

    def forward(self, f):
        return self.head(self.norm(self.enc(self.inp(f) + self.pos))).argmax(-1)


def tokenize(w, head, x, dtype=torch.float64):
    """The features and codes of `x`; the head reads the f32-rounded features in `dtype`
    (float64 for the fixtures, float32 for the benchmark)."""
    c = HEAD_CONFIG
    chunk = c["chunk_seconds"] * RATE
    frames = []
    for s in range(0, len(x), chunk):
        piece = x[s : s + chunk]
        if len(piece) < RATE:
            break
        frames.append(mert(w, piece, c["mert_layer"] + 1)[2][-1])
    f = torch.cat(frames)
    t_out = round(len(x) * c["frame_rate"] / RATE)
    f = F.interpolate(f.T[None], size=t_out, mode="linear", align_corners=False)[0].T
    mean = f.mean(dim=0, keepdim=True)
    std = f.std(dim=0, unbiased=False, keepdim=True)
    f = ((f - mean) / (std + c["instance_norm_eps"])).float().to(dtype)  # the f32 the head reads
    W = c["window"]
    starts = list(range(0, max(1, t_out - W + 1), W // 2))
    if starts[-1] + W < t_out:
        starts.append(max(0, t_out - W))
    codes = torch.zeros(t_out, dtype=torch.long)
    for s0 in starts:
        n = min(W, t_out - s0)
        win = torch.zeros(W, f.shape[1], dtype=dtype)
        win[:n] = f[s0 : s0 + n]
        with torch.no_grad():
            pred = head(win[None])[0]
        lo = s0 + (0 if s0 == 0 else W // 4)
        hi = s0 + n - (0 if s0 + n >= t_out else W // 4)
        codes[lo:hi] = pred[lo - s0 : hi - s0]
    return f, codes, starts


def dump(path, t):
    path.write_bytes(t.detach().float().contiguous().numpy().astype("<f4").tobytes())


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(20261203)
    mw, hw = mert_weights(g), head_weights(g)
    (ROOT / "ckpt" / "mert").mkdir(parents=True, exist_ok=True)
    (ROOT / "ckpt" / "tokenizer").mkdir(parents=True, exist_ok=True)
    (ROOT / "model").mkdir(parents=True, exist_ok=True)
    (ROOT / "ckpt" / "mert" / "config.json").write_text(json.dumps(MERT_CONFIG, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in sorted(mw.items())}, str(ROOT / "ckpt" / "mert" / "model.safetensors"))
    (ROOT / "ckpt" / "tokenizer" / "config.json").write_text(json.dumps(HEAD_CONFIG, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in sorted(hw.items())},
              str(ROOT / "ckpt" / "tokenizer" / "tokenizer_head.safetensors"))

    w64 = {k: v.double() for k, v in mw.items()}
    head = Head().double()
    head.load_state_dict({k: v.double() for k, v in hw.items()})
    head.eval()

    cases = {}
    out = ROOT / "model"
    # one MERT chunk, every intermediate: 2.53 s (252 mel frames, 63 states)
    n = int(2.53 * RATE)
    x = torch.from_numpy(audio(n, 1)).double()
    mel, stages, states = mert(w64, x, MERT_CONFIG["num_hidden_layers"])
    dump(out / "short.mel.f32", mel)
    for i, s in enumerate(stages):
        dump(out / f"short.stage{i}.f32", s)
    for i, s in enumerate(states):
        dump(out / f"short.state{i}.f32", s)
    cases["short"] = {"samples": n, "salt": 1, "mel_frames": mel.shape[0],
                      "stage_frames": [s.shape[0] for s in stages], "states": len(states)}
    # the tokenizer over several chunks: a kept 1.3 s tail, then a dropped 0.6 s one
    head64 = head
    for name, secs, salt in [("kept_tail", 9.3, 2), ("dropped_tail", 12.6, 3)]:
        n = int(round(secs * RATE))
        x = torch.from_numpy(audio(n, salt)).double()
        f, codes, starts = tokenize(w64, head64, x)
        dump(out / f"{name}.features.f32", f)
        cases[name] = {"samples": n, "salt": salt, "frames": f.shape[0], "windows": starts,
                       "codes": [int(c) for c in codes]}
    (out / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print({k: {kk: vv for kk, vv in v.items() if kk != "codes"} for k, v in cases.items()})


if __name__ == "__main__":
    main()
