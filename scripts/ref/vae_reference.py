#!/usr/bin/env python3
"""Float64 torch reference for the Oobleck VAE (decoder and encoder) with tiny random weights.

Usage (from the repository root):

    python3 -m pip install -q torch numpy gguf     # plain PyPI; never from a project script
    python3 scripts/ref/vae_reference.py           # writes fixtures/vae/
    python3 scripts/ref/vae_reference.py --check   # recomputes, compares with fixtures/vae/

Writes fixtures/vae/:
    tiny-vae.gguf      general.architecture = yue2-vae, every tensor F32 in torch layout
                       (so GGUF ne = reversed torch shape), names/shapes = engine/src/vae_layout.rs
    z_{T}.f32          latents, little-endian f32, TIME-MAJOR [T, 64] (the .vae layout),
                       T = 1, 7, 64, 200 (numpy default_rng(11), drawn in that order as [64, T])
    dec_{T}.f32        decoder output, planar [2, 1920*T - 64] (left channel, then right),
                       T = 1, 7, 64
    dec_200.f16        the same for T = 200, stored as IEEE half (little-endian) for size
    enc_in.f32         encoder input, planar [2, 1920*12] (two sines + noise, |x| <= 0.5)
    enc_mean.f32       encoder posterior mean (first 64 of the 128 output channels),
                       TIME-MAJOR [12, 64]
    cases.json         shapes, layouts, dtypes, RMS, max |x|, sha256 of every file

Semantics (the weights are stored as f32; the computation runs in float64 on exactly
those f32 values, then the outputs are rounded to f32 / f16):
  * weight norm, dim=0: w = g * v / ||v||, the norm over every torch axis but the first:
    per output channel for Conv1d (v [Cout, Cin, K], g [Cout, 1, 1]), per INPUT channel
    for ConvTranspose1d (v [Cin, Cout, K], g [Cin, 1, 1]).
  * SnakeBeta, alpha/beta [C] in log scale: y = x + sin(exp(alpha) * x)^2 / exp(beta)
    (no epsilon).
  * decoder: conv1 = Conv1d(64, C0, 7, pad 3); block i (stride s): snake1(C_i) ->
    conv_t1 = ConvTranspose1d(C_i, C_{i+1}, 2s, stride s, pad ceil(s/2)) -> res_unit1..3
    (dilation 1, 3, 9); then snake1(C_last) -> conv2 = Conv1d(C_last, 2, 7, pad 3); no tanh.
    res unit: x + conv2(snake2(conv1(snake1(x)))), conv1 = Conv1d(C, C, 7, dilation d,
    pad 3d), conv2 = Conv1d(C, C, 1).
    A transposed conv with pad p is the full-length output ((L-1)*s + 2s) cropped by p on
    each side, so T frames -> exactly 1920*T - 64 samples (asserted).
  * encoder: conv1 = Conv1d(2, E0, 7, pad 3); block i over strides [2, 2, 4, 4, 5, 6]:
    res_unit1..3(E_i) -> snake1(E_i) -> conv1 = Conv1d(E_i, E_{i+1}, 2s, stride s,
    pad ceil(s/2)); then snake1(E_last) -> conv2 = Conv1d(E_last, 128, 3, pad 1); the
    encode output is the first 64 channels (the mean). E = the decoder widths reversed.
  * tiny widths: decoder C = [16, 8, 8, 4, 4, 4, 4], strides [6, 5, 4, 4, 2, 2];
    encoder E = [4, 4, 4, 4, 8, 8, 16].

Initialisation: torch.manual_seed(7), then in the order of the layout list (decoder tensors,
then encoder tensors), drawn in float64 and rounded to f32: weight_v ~ N(0, 1);
weight_g ~ U(0.5, 1.5) * gain (gain 1 for a Conv1d, 0.6 * sqrt(Cout * s / Cin) for a
transposed conv, whose per-input-channel norm would otherwise shrink the output by
sqrt(Cin / (Cout * s)), and 0.3 for a residual unit's conv2 so the 18 residual sums and the
snakes' positive offsets do not compound; block RMS stays ~0.6-0.9, output RMS ~1); bias ~ 0.05 N(0, 1); alpha, beta ~ 0.3 U(-1, 1). The draws
are float64 on purpose: torch's float32 randn differs by CPU kernel in the last bits (see
scripts/ref/randn_reference.py), its float64 path does not.

Every output is computed twice: by the torch model (torch.nn.utils.parametrizations.
weight_norm on nn.Conv1d / nn.ConvTranspose1d, float64, one thread) and by an independent
numpy float64 implementation written from the semantics above (explicit tap loops, the
transposed conv as scatter + crop); they must agree to 1e-10 relative RMS.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO, "fixtures", "vae")

ARCH = "yue2-vae"
LATENT = 64
AUDIO = 2
SAMPLE_RATE = 48000
STRIDES = [6, 5, 4, 4, 2, 2]
CHANNELS = [16, 8, 8, 4, 4, 4, 4]
RES_DILATIONS = [1, 3, 9]
HOP = 1920
DEC_T = [1, 7, 64, 200]
F16_T = {200}
ENC_FRAMES = 12
INIT_SEED = 7
LATENT_SEED = 11
AUDIO_SEED = 12
RES_CONV2_GAIN = 0.3
CONV_T_GAIN = 0.6


# ----------------------------------------------------------------------------- layout
# A literal transcription of engine/src/vae_layout.rs: (name, ne) with ne innermost first.
def wn_conv(prefix, cin, cout, k):
    return [(f"{prefix}.weight_g", [1, 1, cout]), (f"{prefix}.weight_v", [k, cin, cout]), (f"{prefix}.bias", [cout])]


def wn_conv_t(prefix, cin, cout, k):
    return [(f"{prefix}.weight_g", [1, 1, cin]), (f"{prefix}.weight_v", [k, cout, cin]), (f"{prefix}.bias", [cout])]


def snake(prefix, c):
    return [(f"{prefix}.alpha", [c]), (f"{prefix}.beta", [c])]


def res_unit(prefix, c):
    return snake(f"{prefix}.snake1", c) + wn_conv(f"{prefix}.conv1", c, c, 7) + \
        snake(f"{prefix}.snake2", c) + wn_conv(f"{prefix}.conv2", c, c, 1)


def decoder_shapes(latent, channels, strides, audio):
    assert len(channels) == len(strides) + 1
    v = wn_conv("decoder.conv1", latent, channels[0], 7)
    for i, s in enumerate(strides):
        p = f"decoder.block.{i}"
        v += snake(f"{p}.snake1", channels[i])
        v += wn_conv_t(f"{p}.conv_t1", channels[i], channels[i + 1], 2 * s)
        for r in range(3):
            v += res_unit(f"{p}.res_unit{r + 1}", channels[i + 1])
    v += snake("decoder.snake1", channels[-1])
    v += wn_conv("decoder.conv2", channels[-1], audio, 7)
    return v


def encoder_shapes(latent, channels, strides, audio):
    assert len(channels) == len(strides) + 1
    ch = channels[::-1]
    st = strides[::-1]
    v = wn_conv("encoder.conv1", audio, ch[0], 7)
    for i, s in enumerate(st):
        p = f"encoder.block.{i}"
        for r in range(3):
            v += res_unit(f"{p}.res_unit{r + 1}", ch[i])
        v += snake(f"{p}.snake1", ch[i])
        v += wn_conv(f"{p}.conv1", ch[i], ch[i + 1], 2 * s)
    v += snake("encoder.snake1", ch[-1])
    v += wn_conv("encoder.conv2", ch[-1], 2 * latent, 3)
    return v


def layout():
    return decoder_shapes(LATENT, CHANNELS, STRIDES, AUDIO) + encoder_shapes(LATENT, CHANNELS, STRIDES, AUDIO)


# ----------------------------------------------------------------------------- torch model
def build_torch_model():
    import torch
    import torch.nn as nn
    from torch.nn.utils.parametrizations import weight_norm

    def wn(m):
        return weight_norm(m, name="weight", dim=0)

    class Snake(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.alpha = nn.Parameter(torch.zeros(c))
            self.beta = nn.Parameter(torch.zeros(c))

        def forward(self, x):
            a = torch.exp(self.alpha)[None, :, None]
            b = torch.exp(self.beta)[None, :, None]
            return x + torch.sin(a * x) ** 2 / b

    class ResUnit(nn.Module):
        def __init__(self, c, d):
            super().__init__()
            self.snake1 = Snake(c)
            self.conv1 = wn(nn.Conv1d(c, c, 7, dilation=d, padding=3 * d))
            self.snake2 = Snake(c)
            self.conv2 = wn(nn.Conv1d(c, c, 1))

        def forward(self, x):
            y = self.conv2(self.snake2(self.conv1(self.snake1(x))))
            assert y.shape == x.shape
            return x + y

    class DecBlock(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.snake1 = Snake(cin)
            self.conv_t1 = wn(nn.ConvTranspose1d(cin, cout, 2 * s, stride=s, padding=math.ceil(s / 2)))
            self.res_unit1 = ResUnit(cout, 1)
            self.res_unit2 = ResUnit(cout, 3)
            self.res_unit3 = ResUnit(cout, 9)

        def forward(self, x):
            x = self.conv_t1(self.snake1(x))
            return self.res_unit3(self.res_unit2(self.res_unit1(x)))

    class EncBlock(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.res_unit1 = ResUnit(cin, 1)
            self.res_unit2 = ResUnit(cin, 3)
            self.res_unit3 = ResUnit(cin, 9)
            self.snake1 = Snake(cin)
            self.conv1 = wn(nn.Conv1d(cin, cout, 2 * s, stride=s, padding=math.ceil(s / 2)))

        def forward(self, x):
            x = self.res_unit3(self.res_unit2(self.res_unit1(x)))
            return self.conv1(self.snake1(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = wn(nn.Conv1d(LATENT, CHANNELS[0], 7, padding=3))
            self.block = nn.ModuleList(DecBlock(CHANNELS[i], CHANNELS[i + 1], s) for i, s in enumerate(STRIDES))
            self.snake1 = Snake(CHANNELS[-1])
            self.conv2 = wn(nn.Conv1d(CHANNELS[-1], AUDIO, 7, padding=3))

        def forward(self, z, trace=None):
            x = self.conv1(z)
            for b in self.block:
                x = b(x)
                if trace is not None:
                    trace.append(float(x.pow(2).mean().sqrt()))
            return self.conv2(self.snake1(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            ch, st = CHANNELS[::-1], STRIDES[::-1]
            self.conv1 = wn(nn.Conv1d(AUDIO, ch[0], 7, padding=3))
            self.block = nn.ModuleList(EncBlock(ch[i], ch[i + 1], s) for i, s in enumerate(st))
            self.snake1 = Snake(ch[-1])
            self.conv2 = wn(nn.Conv1d(ch[-1], 2 * LATENT, 3, padding=1))

        def forward(self, x):
            x = self.conv1(x)
            for b in self.block:
                x = b(x)
            return self.conv2(self.snake1(x))

    class Vae(nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = Decoder()
            self.encoder = Encoder()

    return Vae().double()


def torch_key(name):
    """GGUF name -> torch state-dict key (parametrizations.weight_norm naming)."""
    if name.endswith(".weight_g"):
        return name[: -len(".weight_g")] + ".parametrizations.weight.original0"
    if name.endswith(".weight_v"):
        return name[: -len(".weight_v")] + ".parametrizations.weight.original1"
    return name


# ----------------------------------------------------------------------------- weights
def gain_for(name, shapes):
    """Extra factor on weight_g that keeps activations O(1) (see the header)."""
    if ".conv_t1." in name:
        k, cout, cin = shapes[name[: -len("weight_g")] + "weight_v"]
        s = k // 2
        return CONV_T_GAIN * math.sqrt(cout * s / cin)
    if ".res_unit" in name and ".conv2." in name:
        return RES_CONV2_GAIN
    return 1.0


def init_weights():
    import torch

    torch.manual_seed(INIT_SEED)
    lay = layout()
    shapes = dict(lay)
    weights = {}
    for name, ne in lay:
        shape = tuple(reversed(ne))  # torch layout
        if name.endswith(".weight_v"):
            t = torch.randn(shape, dtype=torch.float64)
        elif name.endswith(".weight_g"):
            t = (torch.rand(shape, dtype=torch.float64) + 0.5) * gain_for(name, shapes)
        elif name.endswith(".bias"):
            t = 0.05 * torch.randn(shape, dtype=torch.float64)
        elif name.endswith(".alpha") or name.endswith(".beta"):
            t = 0.3 * (2.0 * torch.rand(shape, dtype=torch.float64) - 1.0)
        else:
            raise AssertionError(name)
        weights[name] = t.numpy().astype("<f4")
    return weights


def load_into(model, weights):
    import torch

    sd = model.state_dict()
    want = {torch_key(n) for n in weights}
    assert set(sd) == want, f"torch model and layout disagree: {sorted(set(sd) ^ want)}"
    new = {}
    for name, arr in weights.items():
        key = torch_key(name)
        assert tuple(sd[key].shape) == arr.shape, (name, tuple(sd[key].shape), arr.shape)
        new[key] = torch.from_numpy(arr.astype(np.float64))
    model.load_state_dict(new, strict=True)


# ----------------------------------------------------------------------------- numpy reference
def np_wn(w, g, v):
    v = w[v].astype(np.float64)
    g = w[g].astype(np.float64)
    norm = np.sqrt((v ** 2).sum(axis=(1, 2), keepdims=True))
    return g * v / norm


def np_conv(w, prefix, x, stride=1, pad=0, dil=1):
    W = np_wn(w, prefix + ".weight_g", prefix + ".weight_v")  # [Cout, Cin, K]
    b = w[prefix + ".bias"].astype(np.float64)
    cout, cin, k = W.shape
    xp = np.pad(x, ((0, 0), (pad, pad)))
    lout = (xp.shape[1] - dil * (k - 1) - 1) // stride + 1
    out = np.zeros((cout, lout))
    for j in range(k):
        out += W[:, :, j] @ xp[:, j * dil: j * dil + stride * (lout - 1) + 1: stride]
    return out + b[:, None]


def np_conv_t(w, prefix, x, s):
    W = np_wn(w, prefix + ".weight_g", prefix + ".weight_v")  # [Cin, Cout, K]
    b = w[prefix + ".bias"].astype(np.float64)
    cin, cout, k = W.shape
    L = x.shape[1]
    full = np.zeros((cout, (L - 1) * s + k))
    for j in range(k):
        full[:, j: j + s * (L - 1) + 1: s] += W[:, :, j].T @ x
    p = math.ceil(s / 2)
    return full[:, p: full.shape[1] - p] + b[:, None]


def np_snake(w, prefix, x):
    a = np.exp(w[prefix + ".alpha"].astype(np.float64))[:, None]
    bb = np.exp(w[prefix + ".beta"].astype(np.float64))[:, None]
    return x + np.sin(a * x) ** 2 / bb


def np_res(w, p, x, d):
    y = np_conv(w, p + ".conv1", np_snake(w, p + ".snake1", x), pad=3 * d, dil=d)
    y = np_conv(w, p + ".conv2", np_snake(w, p + ".snake2", y))
    return x + y


def np_decode(w, z):
    x = np_conv(w, "decoder.conv1", z, pad=3)
    for i, s in enumerate(STRIDES):
        p = f"decoder.block.{i}"
        x = np_conv_t(w, p + ".conv_t1", np_snake(w, p + ".snake1", x), s)
        for r, d in enumerate(RES_DILATIONS):
            x = np_res(w, f"{p}.res_unit{r + 1}", x, d)
    return np_conv(w, "decoder.conv2", np_snake(w, "decoder.snake1", x), pad=3)


def np_encode(w, a):
    x = np_conv(w, "encoder.conv1", a, pad=3)
    for i, s in enumerate(STRIDES[::-1]):
        p = f"encoder.block.{i}"
        for r, d in enumerate(RES_DILATIONS):
            x = np_res(w, f"{p}.res_unit{r + 1}", x, d)
        x = np_conv(w, p + ".conv1", np_snake(w, p + ".snake1", x), stride=s, pad=math.ceil(s / 2))
    return np_conv(w, "encoder.conv2", np_snake(w, "encoder.snake1", x), pad=1)


# ----------------------------------------------------------------------------- gguf
def write_gguf(path, weights):
    import gguf

    wr = gguf.GGUFWriter(path, ARCH)
    wr.add_uint32(f"{ARCH}.latent_channels", LATENT)
    wr.add_uint32(f"{ARCH}.sampling_rate", SAMPLE_RATE)
    wr.add_uint32(f"{ARCH}.audio_channels", AUDIO)
    wr.add_key_value(f"{ARCH}.upsampling_ratios", list(STRIDES), gguf.GGUFValueType.ARRAY,
                     sub_type=gguf.GGUFValueType.INT32)
    for name, _ in layout():
        wr.add_tensor(name, weights[name])  # torch layout; gguf writes ne reversed
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def verify_gguf(path, weights):
    import gguf

    rd = gguf.GGUFReader(path)
    f = rd.fields
    assert bytes(f["general.architecture"].parts[-1]).decode() == ARCH
    for key, val in (("latent_channels", LATENT), ("sampling_rate", SAMPLE_RATE), ("audio_channels", AUDIO)):
        fld = f[f"{ARCH}.{key}"]
        assert fld.types == [gguf.GGUFValueType.UINT32] and int(fld.parts[-1][0]) == val, key
    fld = f[f"{ARCH}.upsampling_ratios"]
    assert fld.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert [int(fld.parts[i][0]) for i in fld.data] == STRIDES
    lay = layout()
    assert len(rd.tensors) == len(lay), (len(rd.tensors), len(lay))
    for t, (name, ne) in zip(rd.tensors, lay):
        assert t.name == name, (t.name, name)
        assert [int(x) for x in t.shape] == ne, (name, list(t.shape), ne)  # reader's shape is ne order
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
        assert np.array_equal(np.asarray(t.data).reshape(-1), weights[name].reshape(-1)), name


# ----------------------------------------------------------------------------- inputs
def make_latents():
    rng = np.random.default_rng(LATENT_SEED)
    return {T: rng.standard_normal((LATENT, T)).astype("<f4") for T in DEC_T}


def make_audio():
    n = HOP * ENC_FRAMES
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    noise = np.random.default_rng(AUDIO_SEED).standard_normal((2, n))
    left = 0.6 * np.sin(2 * np.pi * 220.0 * t) + 0.3 * np.sin(2 * np.pi * 1375.0 * t + 0.5)
    right = 0.5 * np.sin(2 * np.pi * 330.0 * t + 1.0) + 0.4 * np.sin(2 * np.pi * 2750.0 * t)
    sig = np.stack([left, right]) + 0.1 * np.clip(noise, -3, 3)
    sig = 0.5 * sig / np.abs(sig).max()  # amplitude exactly 0.5
    return sig.astype("<f4")


# ----------------------------------------------------------------------------- main
def rms(x):
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rel_rms_err(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)) / max(rms(b), 1e-300))


def generate(out):
    import torch

    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    weights = init_weights()
    model = build_torch_model()
    load_into(model, weights)
    model.eval()
    w64 = weights  # numpy reference reads the f32 values and promotes to f64

    gguf_path = os.path.join(out, "tiny-vae.gguf")
    write_gguf(gguf_path, weights)
    verify_gguf(gguf_path, weights)

    cases = {
        "_doc": ("Oobleck VAE reference (scripts/ref/vae_reference.py): float64 torch on the f32 weights of "
                 "tiny-vae.gguf. .f32/.f16 files are raw little-endian. z_T and enc_mean are time-major "
                 "[T, 64]; dec_T and enc_in are planar [2, N] (left row, then right row). rms = sqrt(mean x^2) "
                 "of the float64 result over all elements; max_abs likewise. dec_200 is stored as float16: "
                 "compare it with a tolerance of at least max_abs * 2^-11 per element."),
        "gguf": "tiny-vae.gguf",
        "latent_channels": LATENT, "audio_channels": AUDIO, "sampling_rate": SAMPLE_RATE,
        "strides": STRIDES, "decoder_channels": CHANNELS, "encoder_channels": CHANNELS[::-1],
        "res_dilations": RES_DILATIONS, "hop": HOP,
        "init": {"torch_manual_seed": INIT_SEED, "res_conv2_gain": RES_CONV2_GAIN, "conv_t_gain": CONV_T_GAIN},
        "decode": [], "encode": [],
    }
    files = {}

    def save(name, arr, dtype):
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(np.ascontiguousarray(arr).astype(dtype).tobytes())
        files[name] = path

    lat = make_latents()
    for T in DEC_T:
        z = lat[T]
        z64 = z.astype(np.float64)
        trace = []
        with torch.no_grad():
            y = model.decoder(torch.from_numpy(z64)[None], trace=trace)[0].numpy()
        n = HOP * T - 64
        assert y.shape == (AUDIO, n), (T, y.shape)
        y_np = np_decode(w64, z64)
        err = rel_rms_err(y_np, y)
        assert err < 1e-10, f"decoder T={T}: torch vs numpy rel rms err {err}"
        r = rms(y)
        assert 0.01 < r < 100, f"decoder T={T}: output RMS {r} out of range"
        zname = f"z_{T}.f32"
        save(zname, z.T, "<f4")  # time-major [T, 64]
        if T in F16_T:
            dname, dt = f"dec_{T}.f16", "<f2"
            assert np.abs(y).max() < 60000
        else:
            dname, dt = f"dec_{T}.f32", "<f4"
        save(dname, y, dt)
        cases["decode"].append({
            "frames": T, "latents": zname, "latents_layout": "time-major [T, 64] f32",
            "output": dname, "output_dtype": "f16" if dt == "<f2" else "f32",
            "output_layout": f"planar [2, {n}]", "samples_per_channel": n,
            "rms": r, "max_abs": float(np.abs(y).max()),
            "rms_per_channel": [rms(y[0]), rms(y[1])],
            "block_rms": trace, "torch_vs_numpy_rel_rms_err": err,
        })

    audio = make_audio()
    a64 = audio.astype(np.float64)
    with torch.no_grad():
        h = model.encoder(torch.from_numpy(a64)[None])[0].numpy()
    assert h.shape == (2 * LATENT, ENC_FRAMES), h.shape
    h_np = np_encode(w64, a64)
    err = rel_rms_err(h_np, h)
    assert err < 1e-10, f"encoder: torch vs numpy rel rms err {err}"
    mean = h[:LATENT]
    r = rms(mean)
    assert 0.01 < r < 100, f"encoder mean RMS {r} out of range"
    save("enc_in.f32", audio, "<f4")
    save("enc_mean.f32", mean.T, "<f4")  # time-major [12, 64]
    cases["encode"].append({
        "input": "enc_in.f32", "input_layout": f"planar [2, {HOP * ENC_FRAMES}] f32",
        "input_rms": rms(audio), "input_max_abs": float(np.abs(audio).max()),
        "output": "enc_mean.f32", "output_layout": f"time-major [{ENC_FRAMES}, 64] f32 (channels 0..63 of 128)",
        "frames": ENC_FRAMES, "rms": r, "max_abs": float(np.abs(mean).max()),
        "logvar_half_rms": rms(h[LATENT:]), "torch_vs_numpy_rel_rms_err": err,
    })

    files["tiny-vae.gguf"] = gguf_path
    cases["sha256"] = {k: sha256(files[k]) for k in sorted(files)}
    cases["bytes"] = {k: os.path.getsize(files[k]) for k in sorted(files)}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    return cases


def compare(new_dir, old_dir):
    """Numeric comparison: the GGUF and inputs must be byte-identical, computed outputs may
    differ by float64 summation order (BLAS / build), so they are compared with a tolerance."""
    with open(os.path.join(old_dir, "cases.json")) as f:
        old = json.load(f)
    with open(os.path.join(new_dir, "cases.json")) as f:
        new = json.load(f)
    ok = True
    for name in sorted(new["sha256"]):
        a = open(os.path.join(new_dir, name), "rb").read()
        b = open(os.path.join(old_dir, name), "rb").read()
        if a == b:
            continue
        if name.startswith(("dec_", "enc_mean")) and len(a) == len(b):
            dt = "<f2" if name.endswith(".f16") else "<f4"
            x = np.frombuffer(a, dt).astype(np.float64)
            y = np.frombuffer(b, dt).astype(np.float64)
            tol = np.abs(y).max() * (2.0**-10 if dt == "<f2" else 2.0**-21)
            d = float(np.abs(x - y).max())
            print(f"{name}: not byte-identical, max |diff| {d:.3e} (tolerance {tol:.3e})")
            ok &= d <= tol
        else:
            print(f"{name}: differs")
            ok = False
    if not ok:
        sys.exit("fixtures/vae is stale")
    print("fixtures/vae is up to date")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare with fixtures/vae")
    args = ap.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(tmp)
            compare(tmp, OUT_DIR)
        return
    cases = generate(OUT_DIR)
    total = sum(cases["bytes"].values()) + os.path.getsize(os.path.join(OUT_DIR, "cases.json"))
    for d in cases["decode"]:
        print(f"decode T={d['frames']:3d}: {d['samples_per_channel']} samples/ch, rms {d['rms']:.4f}, "
              f"max {d['max_abs']:.3f}, block rms {[round(v, 3) for v in d['block_rms']]}, "
              f"torch/numpy {d['torch_vs_numpy_rel_rms_err']:.1e}")
    e = cases["encode"][0]
    print(f"encode: mean rms {e['rms']:.4f}, torch/numpy {e['torch_vs_numpy_rel_rms_err']:.1e}")
    for k, v in cases["bytes"].items():
        print(f"  {k:16s} {v:9d}")
    print(f"fixtures/vae total {total} bytes")
    assert total < 3 * 2**20, "fixtures/vae must stay under 3 MiB"


if __name__ == "__main__":
    main()
