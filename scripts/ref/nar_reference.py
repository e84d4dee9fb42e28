#!/usr/bin/env python3
"""Independent float64 numpy reference for the YuE2 non-autoregressive (NAR) half:
the flow matching heads, the NAR transformer over the AR KV cache, and the
midpoint ODE solver.

Reads a YuE2 backbone GGUF with F32 weights (default: the tiny weights written by
scripts/ref/qwen3_reference.py, fixtures/ar/tiny-qwen3.gguf, which also holds every
NAR tensor) and writes velocity and solver fixtures. A Rust parity test reads them.
The model dimensions (hidden_size, intermediate_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps, rope_theta,
vocab_size and timestep_shift) come from the file's `yue2.config_json`, the token
ids from its `yue2.token.*` keys (absent keys take the engine's defaults: the
published dimensions and ids, timestep_shift 1.0).

Regenerate (from the repository root):

    python3 -m pip install -q gguf numpy
    python3 scripts/ref/nar_reference.py                  # tiny: fixtures/nar/
    cargo run -p yued -- demo-model --preset deep --seed 0 --out /tmp/deep
    python3 scripts/ref/nar_reference.py --gguf /tmp/deep/yue2-demo-deep.gguf --out fixtures/nar/deep --deep

Semantics (the project specification, after the reference C++ implementation):
  * AR cache: the AR half (exactly qwen3_reference.forward) over S, keeping per
    layer K [L, kv, hd] after k_norm and RoPE at 0..L-1, and V [L, kv, hd].
    The NAR never writes to it.
  * temb(t): raw = clip(logit(t), -20, 20) (t >= 1 -> +20, t <= 0 -> -20);
    release curve sig = sigmoid(raw), t' = shift sig / (1 + (shift - 1) sig)
    (shift = config "timestep_shift", default 1.0, where t' ~ t: sigmoid(20) =
    1 - 2.1e-9 at t = 1); 256 frequencies freqs[i] = exp(-ln(1e4) * i / 128),
    e = [cos(t' f), sin(t' f)], temb = W2 @ silu(W0 @ e + b0) + b2
    (time_embedder.mlp.{0,2}).
  * pe[p, 2i] = sin(p w_i), pe[p, 2i+1] = cos(p w_i), w_i = exp(-ln(1e4) 2i / H).
  * latent block z = [LATENT_START = 0, x_0 .. x_{N-1}, LATENT_END = 0] (N + 2 rows
    of the 64-wide latent input); hidden row r = vae2llm(z_r) + temb + pe[r], so the
    markers carry the vae2llm bias, the time embedding and their frame embedding,
    and frame j is row (and pe index) j + 1, LATENT_END is N + 1.
    RoPE positions L .. L + N + 1.
  * per layer with the nar_* weights: pre-norm, QK-norm before RoPE, keys and
    values = concat(AR cache, block), no mask, GQA, SwiGLU MLP.
  * velocity_j = llm2vae(rmsnorm(x, model.norm)[j + 1]); the marker rows are dropped.
  * midpoint, dt = 1 / steps, t = 1 - s dt: first = v(x, t);
    mid = x - first dt / 2; x -= v(mid, t - dt / 2) dt.
  * ab2 (the request's "solver": "ab2"): the first step a midpoint step; each later
    step x -= dt (1.5 v_n - 0.5 v_{n-1}), v_n = v(x_n, t_n), v_0 the first step's
    start velocity: steps + 1 evaluations instead of 2 steps.

Outputs, tiny (raw little-endian float32; latents and velocities time-major [N, 64],
batches [M, N, 64]; cases.json describes every case):
    noise_n9.f32 noise_b3.f32 noise_b2.f32 noise_n5.f32   numpy default_rng(99), f32-rounded
    v_single.f32 v_t1.f32 ode8.f32 v_batch3.f32 ode_batch2.f32 ode8_n5.f32 ab2_8.f32 ab2_batch2.f32
    debug_temb.f32      [3, H] temb at t = 0.7, 1.0, 0.55
    debug_arcache_n9.f32 [layers, 2 (K, V), L, kv, hd] AR cache of the N = 9 sequence
Outputs, --deep (a deeper model, e.g. 28 layers; cases.json records the GGUF's sha256):
    noise_n9.f32 noise_b2.f32 noise_n5.f32   (the same draws as the tiny files of that name)
    v_single.f32 (t 0.7, N 9) v_batch2.f32 (t 0.55, N 9, M 2) ode4_n5.f32 (4 steps, N 5)
    debug_temb.f32      [3, H] temb at t = 0.7, 1.0, 0.55

Self-checks: the tiny GGUF's dimensions and ids equal qwen3_reference's constants
and its weights equal qwen3_reference.build_weights (default --gguf only); the AR
forward used for the cache reproduces qwen3_reference.forward's logits (run with
the file's dimensions); a scalar per-row implementation (its own token-by-token AR
cache, per-row attention loops, math.fsum dot products) reproduces every velocity
evaluation and every solver output to 1e-10 (--skip-naive drops it: about 4 s
tiny, 20 s for a 28-layer hidden-64 model). Tiny only: eleven plausible
misreadings of the specification, among them the old formulation's three choices
(tau_sinusoid: sinusoid of the raw logit; zero_marker_rows: marker rows exact
zeros without bias, temb or pe; pe_frame_index: frames numbered from 0), and sin/cos
order, pe layout, no markers, RoPE offsets, a causal mask, no AR cache and the GQA
head mapping, are each shown to move v_single, v_t1 or ode8 by more than 1e-2 (a
frequency divisor of 127 is printed but now moves them by ~1e-3 only). A
timestep_shift of 3 is shown to change the embedding and the velocity.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from collections import OrderedDict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_GGUF = os.path.join(REPO, "fixtures", "ar", "tiny-qwen3.gguf")
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import qwen3_reference as ar  # noqa: E402  (tiny constants, rotate_half, forward, build_weights)

LATENT = 64
TIME_FREQ_DIM = ar.TIME_FREQ_DIM  # 256
TAU_CLAMP = 20.0
NOISE_SEED = 99
TOL = 1e-10

# Model dimensions and token ids: set from the GGUF by set_dims() before anything runs.
H = I = NL = NH = NKV = HD = GROUP = V = None
EPS = THETA = SHIFT = None
ENDOFTEXT = ABC_START = ABC_END = MUSIC_START = MUSIC_END = CODE_BASE = CODEBOOK = None

# Defaults for keys a file lacks: the engine's (engine/src/model.rs: Yue2Config::full,
# TokenLayout::FULL); head_dim defaults to hidden_size / heads when hidden_size is given.
FULL_CONFIG = OrderedDict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                          rms_norm_eps=1e-6, rope_theta=1e6, vocab_size=184704)
FULL_TOKENS = OrderedDict(endoftext=151643, abc_start=151847, abc_end=151848, music_start=151851,
                          music_end=151852, code_base=151853, codebook_size=32768)

# The brief lists six codes (5, 17, 40, 2, 33, 9) but calls them "9 codes" and asks for
# N = 9 "matching the codes"; one code per latent frame is the pipeline invariant, so the
# six given codes are kept first and three more are appended to reach nine.
CODES9 = [5, 17, 40, 2, 33, 9, 51, 26, 12]
PREFIX_TEXT = [72, 105]  # "H" "i" (byte tokens of the tiny vocabularies)


def prefix():
    return [ENDOFTEXT] + PREFIX_TEXT + [ABC_START, ABC_END, MUSIC_START]


def code_seq(n):
    return prefix() + [CODE_BASE + c for c in CODES9[:n]] + [MUSIC_END]


# --------------------------------------------------------------------------
# metadata and weights
# --------------------------------------------------------------------------


def read_meta(path):
    """(config dict, token dict) from yue2.config_json and yue2.token.*, with the defaults."""
    import gguf

    rd = gguf.GGUFReader(path)

    def field_str(key):
        f = rd.fields[key]
        return bytes(f.parts[f.data[0]]).decode("utf-8")

    def field_int(key):
        f = rd.fields[key]
        return int(f.parts[f.data[0]][0])

    assert field_str("general.architecture") == "yue2", "not a YuE2 backbone"
    raw = json.loads(field_str("yue2.config_json"))
    cfg = OrderedDict()
    for k, d in FULL_CONFIG.items():
        if k == "head_dim" and raw.get(k) is None and raw.get("hidden_size") is not None:
            d = raw["hidden_size"] // raw.get("num_attention_heads", FULL_CONFIG["num_attention_heads"])
        v = raw.get(k)
        cfg[k] = d if v is None else v
    for k in ("rms_norm_eps", "rope_theta"):
        cfg[k] = float(cfg[k])
    shift = raw.get("timestep_shift")
    cfg["timestep_shift"] = 1.0 if shift is None else float(shift)
    assert cfg["timestep_shift"] > 0, cfg["timestep_shift"]
    if "yue2.block_count" in rd.fields:
        assert field_int("yue2.block_count") == cfg["num_hidden_layers"], "block_count disagrees with config"
    tok = OrderedDict((k, field_int("yue2.token." + k) if "yue2.token." + k in rd.fields else d)
                      for k, d in FULL_TOKENS.items())
    assert tok["abc_end"] == tok["abc_start"] + 1 and tok["music_end"] == tok["music_start"] + 1
    assert tok["code_base"] == tok["music_end"] + 1 and tok["code_base"] + tok["codebook_size"] <= cfg["vocab_size"]
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    return cfg, tok


def set_dims(cfg, tok):
    """Sets this module's dimensions and ids; qwen3_reference's constants follow them so
    that its forward (the AR logits check) runs on the same model."""
    g = globals()
    g.update(H=cfg["hidden_size"], I=cfg["intermediate_size"], NL=cfg["num_hidden_layers"],
             NH=cfg["num_attention_heads"], NKV=cfg["num_key_value_heads"], HD=cfg["head_dim"],
             EPS=cfg["rms_norm_eps"], THETA=cfg["rope_theta"], V=cfg["vocab_size"],
             SHIFT=cfg["timestep_shift"])
    g["GROUP"] = NH // NKV
    g.update(ENDOFTEXT=tok["endoftext"], ABC_START=tok["abc_start"], ABC_END=tok["abc_end"],
             MUSIC_START=tok["music_start"], MUSIC_END=tok["music_end"], CODE_BASE=tok["code_base"],
             CODEBOOK=tok["codebook_size"])
    for name, val in (("H", H), ("I", I), ("L", NL), ("NH", NH), ("NKV", NKV), ("HD", HD),
                      ("EPS", EPS), ("THETA", THETA), ("V", V)):
        setattr(ar, name, val)


def check_tiny_dims(cfg, tok):
    """The tiny GGUF: the dimensions read from the file are qwen3_reference's constants."""
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "vocab_size"):
        assert cfg[k] == ar.CONFIG[k], (k, cfg[k], ar.CONFIG[k])
    assert cfg["timestep_shift"] == 1.0
    assert OrderedDict(("yue2.token." + k, v) for k, v in tok.items()) == ar.SPECIAL_IDS, tok


def load_weights(path):
    import gguf

    rd = gguf.GGUFReader(path)
    w = OrderedDict()
    for t in rd.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        shape = [int(x) for x in t.shape][::-1]  # ne innermost first -> torch layout
        w[t.name] = np.asarray(t.data, dtype=np.float32).reshape(shape).astype(np.float64)
    return w


def check_shapes(w):
    assert w["model.embed_tokens.weight"].shape == (V, H)
    assert w["vae2llm.weight"].shape == (H, LATENT)
    assert w["llm2vae.weight"].shape == (LATENT, H)
    assert w["time_embedder.mlp.0.weight"].shape == (H, TIME_FREQ_DIM)
    assert w["time_embedder.mlp.2.weight"].shape == (H, H)
    for l in range(NL):
        for p in ("", "nar_"):
            pre = f"model.layers.{l}.{p}"
            assert w[pre + "self_attn.q_proj.weight"].shape == (NH * HD, H)
            assert w[pre + "self_attn.k_proj.weight"].shape == (NKV * HD, H)
            assert w[pre + "self_attn.o_proj.weight"].shape == (H, NH * HD)
            assert w[pre + "mlp.gate_proj.weight"].shape == (I, H)
            assert w[pre + "mlp.down_proj.weight"].shape == (H, I)


def check_tiny_weights(w):
    ref = ar.build_weights(ar.SEED)
    assert list(ref) == list(w), "GGUF tensor set differs from qwen3_reference.build_weights"
    for k, a in ref.items():
        assert np.array_equal(a.astype(np.float64), w[k]), k


# --------------------------------------------------------------------------
# vectorised float64 implementation
# --------------------------------------------------------------------------

rotate_half = ar.rotate_half


def rmsnorm(x, w):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, pos):
    """x [T, heads, HD], pos [T] -> NeoX rotation at the given absolute positions."""
    inv_freq = THETA ** (-(np.arange(0, HD, 2, dtype=np.float64)) / HD)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([ang, ang], axis=-1)[:, None, :]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def silu(x):
    return x / (1.0 + np.exp(-x))


def ar_forward_with_cache(w, ids):
    """The AR half (same math as qwen3_reference.forward) returning logits and the cache."""
    ids = np.asarray(ids, dtype=np.int64)
    T = len(ids)
    pos = np.arange(T)
    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    cache = []
    for l in range(NL):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, NH, HD)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, NKV, HD)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, NKV, HD)
        q = rope(rmsnorm(q, w[p + "self_attn.q_norm.weight"]), pos)
        k = rope(rmsnorm(k, w[p + "self_attn.k_norm.weight"]), pos)
        cache.append((k.copy(), v.copy()))
        kh = np.repeat(k, GROUP, axis=1)
        vh = np.repeat(v, GROUP, axis=1)
        sc = np.einsum("thd,shd->hts", q, kh) / math.sqrt(HD)
        sc = np.where(mask[None], -np.inf, sc)
        sc = sc - sc.max(axis=-1, keepdims=True)
        pr = np.exp(sc)
        pr = pr / pr.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", pr, vh).reshape(T, NH * HD)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h2 = rmsnorm(x, w[p + "post_attention_layernorm.weight"])
        x = x + (silu(h2 @ w[p + "mlp.gate_proj.weight"].T) * (h2 @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    logits = rmsnorm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return logits, cache


def timestep_raw(t):
    """logit(t) saturated at +-TAU_CLAMP (t >= 1 -> +20, t <= 0 -> -20)."""
    t = float(t)
    if t >= 1.0:
        return TAU_CLAMP
    if t <= 0.0:
        return -TAU_CLAMP
    return float(np.clip(np.log(t / (1.0 - t)), -TAU_CLAMP, TAU_CLAMP))


def timestep_shifted(t, shift=None):
    """The release curve: t' = shift sig / (1 + (shift - 1) sig), sig = sigmoid(raw)."""
    shift = SHIFT if shift is None else shift
    sig = 1.0 / (1.0 + np.exp(-timestep_raw(t)))
    return float(shift * sig / (1.0 + (shift - 1.0) * sig))


def timestep_embedding(w, t, var=frozenset(), shift=None):
    """var: names of deliberate deviations, used only to show the fixtures tell them apart."""
    half = TIME_FREQ_DIM // 2
    freqs = np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float64) / (half - 1 if "freq_shift1" in var else half))
    args = (timestep_raw(t) if "tau_sinusoid" in var else timestep_shifted(t, shift)) * freqs
    e = np.concatenate([np.sin(args), np.cos(args)] if "sin_first" in var else [np.cos(args), np.sin(args)])
    h = silu(w["time_embedder.mlp.0.weight"] @ e + w["time_embedder.mlp.0.bias"])
    return w["time_embedder.mlp.2.weight"] @ h + w["time_embedder.mlp.2.bias"]


def frame_pe(n, var=frozenset()):
    """pe rows 0 .. n - 1 (row p of the block gets pe[p])."""
    wi = np.exp(-math.log(10000.0) * np.arange(0, H, 2, dtype=np.float64) / H)  # [H/2]
    ang = np.arange(n, dtype=np.float64)[:, None] * wi[None, :]
    if "pe_halves" in var:
        return np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)
    pe = np.zeros((n, H))
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang)
    return pe


def velocity(w, cache, state, t, var=frozenset(), shift=None):
    """state [N, LATENT] -> velocity [N, LATENT] over the AR cache (list of (K, V)).

    var: names of deliberate deviations from the specification (empty for the
    fixtures), used only to show that the fixtures tell each of them apart."""
    state = np.asarray(state, dtype=np.float64)
    N = state.shape[0]
    Lc = cache[0][0].shape[0]
    R = N + 2
    z = np.zeros((R, LATENT))  # LATENT_START, the frames, LATENT_END
    z[1:N + 1] = state
    temb = timestep_embedding(w, t, var, shift)
    if "pe_frame_index" in var:  # frames numbered from 0, markers without one
        pe = np.zeros((R, H))
        pe[1:N + 1] = frame_pe(N, var)
    else:
        pe = frame_pe(R, var)
    x = z @ w["vae2llm.weight"].T + w["vae2llm.bias"] + temb[None, :] + pe
    if "zero_marker_rows" in var:
        x[0] = x[N + 1] = 0.0
    if "no_markers" in var:
        x, R = x[1:N + 1], N
    pos = np.arange(R) + (0 if "rope_local" in var else Lc - 1 if "rope_minus1" in var else Lc)
    if "drop_cache" in var:
        cache = [(c[0][:0], c[1][:0]) for c in cache]
    for l in range(NL):
        p = f"model.layers.{l}.nar_"
        h = rmsnorm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(R, NH, HD)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(R, NKV, HD)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(R, NKV, HD)
        q = rope(rmsnorm(q, w[p + "self_attn.q_norm.weight"]), pos)
        k = rope(rmsnorm(k, w[p + "self_attn.k_norm.weight"]), pos)
        K = np.concatenate([cache[l][0], k], axis=0)
        V_ = np.concatenate([cache[l][1], v], axis=0)
        rep = (lambda a: np.tile(a, (1, GROUP, 1))) if "gqa_modulo" in var else (lambda a: np.repeat(a, GROUP, axis=1))
        kh, vh = rep(K), rep(V_)  # query head h -> kv head h // GROUP
        sc = np.einsum("thd,shd->hts", q, kh) / math.sqrt(HD)  # no mask
        if "causal" in var:
            sc = np.where(np.triu(np.ones((R, K.shape[0]), dtype=bool), k=K.shape[0] - R + 1)[None], -np.inf, sc)
        sc = sc - sc.max(axis=-1, keepdims=True)
        pr = np.exp(sc)
        pr = pr / pr.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", pr, vh).reshape(R, NH * HD)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h2 = rmsnorm(x, w[p + "pre_mlp_layernorm.weight"])
        x = x + (silu(h2 @ w[p + "mlp.gate_proj.weight"].T) * (h2 @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    y = rmsnorm(x, w["model.norm.weight"])
    if "no_markers" in var:
        y = np.concatenate([np.zeros((1, H)), y, np.zeros((1, H))])
    return y[1:N + 1] @ w["llm2vae.weight"].T + w["llm2vae.bias"]


def midpoint(vfn, noise, steps):
    state = np.asarray(noise, dtype=np.float64).copy()
    dt = 1.0 / steps
    for s in range(steps):
        t = 1.0 - s * dt
        first = vfn(state, t)
        mid = state - first * dt / 2.0
        state = state - vfn(mid, t - dt / 2.0) * dt
    return state


def ab2(vfn, noise, steps):
    """Adams-Bashforth 2: the first step a midpoint step, each later one a single
    evaluation, x -= dt (1.5 v_n - 0.5 v_{n-1}) with v_n = v(x_n, t_n) and v_0 the
    first step's start velocity (steps + 1 evaluations)."""
    state = np.asarray(noise, dtype=np.float64).copy()
    dt = 1.0 / steps
    prev = None
    for s in range(steps):
        t = 1.0 - s * dt
        v = vfn(state, t)
        if prev is None:
            mid = state - v * dt / 2.0
            state = state - vfn(mid, t - dt / 2.0) * dt
        else:
            state = state - dt * (1.5 * v - 0.5 * prev)
        prev = v
    return state


SOLVERS = {"ode": midpoint, "ab2": ab2}


# --------------------------------------------------------------------------
# independent scalar implementation (lists, math.fsum, per-row loops)
# --------------------------------------------------------------------------


class Naive:
    def __init__(self, w64):
        self.W = {k: (v.tolist()) for k, v in w64.items()}

    @staticmethod
    def matvec(Wl, xv):
        return [math.fsum(wi * xi for wi, xi in zip(row, xv)) for row in Wl]

    @staticmethod
    def rms(xv, wv):
        ms = math.fsum(a * a for a in xv) / len(xv)
        r = 1.0 / math.sqrt(ms + EPS)
        return [a * r * b for a, b in zip(xv, wv)]

    @staticmethod
    def rope(vec, pos):
        half = HD // 2
        out = [0.0] * HD
        for i in range(half):
            ang = pos * math.pow(THETA, -2.0 * i / HD)
            c, s = math.cos(ang), math.sin(ang)
            a, b = vec[i], vec[i + half]
            out[i] = a * c - b * s
            out[i + half] = b * c + a * s
        return out

    @staticmethod
    def sig(z):
        return z / (1.0 + math.exp(-z))

    def attend(self, qh, keys, vals):
        sc = [math.fsum(a * b for a, b in zip(qh, kk)) / math.sqrt(HD) for kk in keys]
        m = max(sc)
        e = [math.exp(s - m) for s in sc]
        z = math.fsum(e)
        return [math.fsum((e[j] / z) * vals[j][d] for j in range(len(vals))) for d in range(HD)]

    def ar_cache(self, ids):
        """Token by token with causal attention; returns kc[l][kvh] = [pos][HD], vc likewise."""
        W = self.W
        kc = [[[] for _ in range(NKV)] for _ in range(NL)]
        vc = [[[] for _ in range(NKV)] for _ in range(NL)]
        for pos, tok in enumerate(ids):
            x = list(W["model.embed_tokens.weight"][tok])
            for l in range(NL):
                p = f"model.layers.{l}."
                h = self.rms(x, W[p + "input_layernorm.weight"])
                qf = self.matvec(W[p + "self_attn.q_proj.weight"], h)
                kf = self.matvec(W[p + "self_attn.k_proj.weight"], h)
                vf = self.matvec(W[p + "self_attn.v_proj.weight"], h)
                for j in range(NKV):
                    kc[l][j].append(self.rope(self.rms(kf[j * HD:(j + 1) * HD], W[p + "self_attn.k_norm.weight"]), pos))
                    vc[l][j].append(vf[j * HD:(j + 1) * HD])
                att = []
                for hh in range(NH):
                    qh = self.rope(self.rms(qf[hh * HD:(hh + 1) * HD], W[p + "self_attn.q_norm.weight"]), pos)
                    att.extend(self.attend(qh, kc[l][hh // GROUP], vc[l][hh // GROUP]))
                x = [a + b for a, b in zip(x, self.matvec(W[p + "self_attn.o_proj.weight"], att))]
                h2 = self.rms(x, W[p + "post_attention_layernorm.weight"])
                g = self.matvec(W[p + "mlp.gate_proj.weight"], h2)
                u = self.matvec(W[p + "mlp.up_proj.weight"], h2)
                x = [a + b for a, b in zip(x, self.matvec(W[p + "mlp.down_proj.weight"], [self.sig(gi) * ui for gi, ui in zip(g, u)]))]
        return kc, vc

    def temb(self, t, shift=None):
        W = self.W
        shift = SHIFT if shift is None else shift
        if t >= 1.0:
            raw = TAU_CLAMP
        elif t <= 0.0:
            raw = -TAU_CLAMP
        else:
            raw = min(TAU_CLAMP, max(-TAU_CLAMP, math.log(t) - math.log1p(-t)))
        sig = 1.0 / (1.0 + math.exp(-raw))
        tp = shift * sig / (1.0 + (shift - 1.0) * sig)
        half = TIME_FREQ_DIM // 2
        e = [0.0] * TIME_FREQ_DIM
        for i in range(half):
            a = tp * math.exp(-math.log(10000.0) * i / half)
            e[i] = math.cos(a)
            e[half + i] = math.sin(a)
        hmid = [self.sig(a + b) for a, b in zip(self.matvec(W["time_embedder.mlp.0.weight"], e), W["time_embedder.mlp.0.bias"])]
        return [a + b for a, b in zip(self.matvec(W["time_embedder.mlp.2.weight"], hmid), W["time_embedder.mlp.2.bias"])]

    @staticmethod
    def pe_row(p):
        row = [0.0] * H
        for i in range(H // 2):
            a = p * math.exp(-math.log(10000.0) * (2 * i) / H)
            row[2 * i] = math.sin(a)
            row[2 * i + 1] = math.cos(a)
        return row

    def velocity(self, cache, state, t):
        W = self.W
        kc, vc = cache
        Lc = len(kc[0][0])
        N = len(state)
        te = self.temb(t)
        # block row r: LATENT_START (a zero latent), frame r - 1, LATENT_END (a zero latent)
        latents = [[0.0] * LATENT] + [list(state[j]) for j in range(N)] + [[0.0] * LATENT]
        rows = []
        for r, z in enumerate(latents):
            a = self.matvec(W["vae2llm.weight"], z)
            pe = self.pe_row(r)
            rows.append([a[d] + W["vae2llm.bias"][d] + te[d] + pe[d] for d in range(H)])
        R = len(rows)
        for l in range(NL):
            p = f"model.layers.{l}.nar_"
            # projections of every block row first (all rows are keys for all rows)
            qs, bk, bv = [], [[] for _ in range(NKV)], [[] for _ in range(NKV)]
            for r in range(R):
                pos = Lc + r
                h = self.rms(rows[r], W[p + "input_layernorm.weight"])
                qf = self.matvec(W[p + "self_attn.q_proj.weight"], h)
                kf = self.matvec(W[p + "self_attn.k_proj.weight"], h)
                vf = self.matvec(W[p + "self_attn.v_proj.weight"], h)
                qs.append([self.rope(self.rms(qf[hh * HD:(hh + 1) * HD], W[p + "self_attn.q_norm.weight"]), pos) for hh in range(NH)])
                for j in range(NKV):
                    bk[j].append(self.rope(self.rms(kf[j * HD:(j + 1) * HD], W[p + "self_attn.k_norm.weight"]), pos))
                    bv[j].append(vf[j * HD:(j + 1) * HD])
            new_rows = []
            for r in range(R):
                att = []
                for hh in range(NH):
                    g = hh // GROUP
                    att.extend(self.attend(qs[r][hh], kc[l][g] + bk[g], vc[l][g] + bv[g]))
                x = [a + b for a, b in zip(rows[r], self.matvec(W[p + "self_attn.o_proj.weight"], att))]
                h2 = self.rms(x, W[p + "pre_mlp_layernorm.weight"])
                gg = self.matvec(W[p + "mlp.gate_proj.weight"], h2)
                uu = self.matvec(W[p + "mlp.up_proj.weight"], h2)
                x = [a + b for a, b in zip(x, self.matvec(W[p + "mlp.down_proj.weight"], [self.sig(gi) * ui for gi, ui in zip(gg, uu)]))]
                new_rows.append(x)
            rows = new_rows
        out = []
        for j in range(N):
            y = self.rms(rows[j + 1], W["model.norm.weight"])
            out.append([a + b for a, b in zip(self.matvec(W["llm2vae.weight"], y), W["llm2vae.bias"])])
        return np.array(out)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def rms_of(a):
    return float(np.sqrt(np.mean(np.square(np.asarray(a, dtype=np.float64)))))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# Deliberate deviations (tiny mode): each must move v_single, v_t1 or ode8 by > 1e-2.
# tau_sinusoid, zero_marker_rows and pe_frame_index are the old formulation's choices.
DEVIATIONS = ("tau_sinusoid", "zero_marker_rows", "pe_frame_index", "sin_first",
              "pe_halves", "no_markers", "rope_local", "rope_minus1", "causal",
              "drop_cache", "gqa_modulo")
# Deviations the fixtures can no longer resolve: with the sinusoid of t' in [0, 1] (not of
# the logit in [-20, 20]) a frequency divisor of 127 instead of 128 moves the velocities by
# ~1e-3 only, below a float32 parity test's tolerance. Printed, not asserted.
WEAK_DEVIATIONS = ("freq_shift1",)


def main():
    apr = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    apr.add_argument("--gguf", default=DEFAULT_GGUF, help="YuE2 backbone GGUF with F32 weights (default: the tiny one)")
    apr.add_argument("--out", default=None, help="output directory (default fixtures/nar, with --deep fixtures/nar/deep)")
    apr.add_argument("--deep", action="store_true", help="the small case set for a deeper model (28 layers)")
    apr.add_argument("--skip-naive", action="store_true", help="skip the slow scalar self-check")
    args = apr.parse_args()
    out = args.out or os.path.join(REPO, "fixtures", "nar", "deep" if args.deep else "")
    out = os.path.normpath(out)
    os.makedirs(out, exist_ok=True)
    tiny = os.path.realpath(args.gguf) == os.path.realpath(DEFAULT_GGUF)
    if args.deep and tiny:
        sys.exit("--deep needs --gguf PATH of the deeper model")
    run_naive = not args.skip_naive

    cfg, tok = read_meta(args.gguf)
    if tiny:
        check_tiny_dims(cfg, tok)
    set_dims(cfg, tok)
    w = load_weights(args.gguf)
    check_shapes(w)
    if tiny:
        check_tiny_weights(w)
    gguf_sha = sha256(args.gguf)

    seq9, seq5 = code_seq(9), code_seq(5)
    for seq, n in ((seq9, 9), (seq5, 5)):
        assert seq[:6] == prefix() and seq[-1] == MUSIC_END and len(seq) == 6 + n + 1
        assert all(CODE_BASE <= c < CODE_BASE + CODEBOOK for c in seq[6:-1])
        assert all(0 <= c < V for c in seq)
    if tiny:
        assert seq9 == [256, 72, 105, 259, 260, 261] + [263 + c for c in CODES9] + [262]

    # ---- noise: one generator, drawn in this order (deep mode writes the files it uses)
    rng = np.random.default_rng(NOISE_SEED)
    noise = OrderedDict()
    noise["noise_n9.f32"] = rng.standard_normal((9, LATENT)).astype(np.float32)
    noise["noise_b3.f32"] = rng.standard_normal((3, 9, LATENT)).astype(np.float32)
    noise["noise_b2.f32"] = rng.standard_normal((2, 9, LATENT)).astype(np.float32)
    noise["noise_n5.f32"] = rng.standard_normal((5, LATENT)).astype(np.float32)
    draw_order = {fn: i for i, fn in enumerate(noise)}

    # ---- AR caches
    caches = {}
    for name, seq in (("n9", seq9), ("n5", seq5)):
        logits, cache = ar_forward_with_cache(w, seq)
        ref_logits = ar.forward(w, seq)  # qwen3_reference with this file's dimensions
        err = float(np.max(np.abs(logits - ref_logits)))
        assert err < 1e-12, f"AR cache forward differs from qwen3_reference.forward: {err}"
        caches[name] = cache

    # ---- cases: name, kind, seq-key, N, t, steps, noise file, M
    if args.deep:
        spec = [
            ("v_single", "velocity", "n9", 9, 0.7, None, "noise_n9.f32", 1),
            ("v_batch2", "velocity", "n9", 9, 0.55, None, "noise_b2.f32", 2),
            ("ode4_n5", "ode", "n5", 5, None, 4, "noise_n5.f32", 1),
        ]
    else:
        spec = [
            ("v_single", "velocity", "n9", 9, 0.7, None, "noise_n9.f32", 1),
            ("v_t1", "velocity", "n9", 9, 1.0, None, "noise_n9.f32", 1),
            ("ode8", "ode", "n9", 9, None, 8, "noise_n9.f32", 1),
            ("v_batch3", "velocity", "n9", 9, 0.55, None, "noise_b3.f32", 3),
            ("ode_batch2", "ode", "n9", 9, None, 8, "noise_b2.f32", 2),
            ("ode8_n5", "ode", "n5", 5, None, 8, "noise_n5.f32", 1),
            ("ab2_8", "ab2", "n9", 9, None, 8, "noise_n9.f32", 1),
            ("ab2_batch2", "ab2", "n9", 9, None, 8, "noise_b2.f32", 2),
        ]
    used = {c[6] for c in spec}
    noise = OrderedDict((fn, a) for fn, a in noise.items() if fn in used)
    seqs = {"n9": seq9, "n5": seq5}

    results = OrderedDict()
    for name, kind, sk, N, t, steps, nf, M in spec:
        cache = caches[sk]
        x0 = noise[nf].astype(np.float64)
        batch = x0 if M > 1 else x0[None]
        assert batch.shape == (M, N, LATENT), (name, batch.shape)
        vfn = lambda s, tt, cache=cache: velocity(w, cache, s, tt)  # noqa: E731
        outs = []
        for m in range(M):  # variations are independent: loop
            if kind == "velocity":
                outs.append(vfn(batch[m], t))
            else:
                outs.append(SOLVERS[kind](vfn, batch[m], steps))
        res = np.stack(outs) if M > 1 else outs[0]
        assert np.all(np.isfinite(res)), name
        results[name] = res

    # ---- independent scalar self-check
    naive_err = OrderedDict()
    if run_naive:
        nv = Naive(w)
        ncaches = {}
        for sk, seq in seqs.items():
            kc, vc = nv.ar_cache(seq)
            # the cache itself
            for l in range(NL):
                K = np.array(kc[l]).transpose(1, 0, 2)  # [kv, L, HD] -> [L, kv, HD]
                Vv = np.array(vc[l]).transpose(1, 0, 2)
                e = max(np.max(np.abs(K - caches[sk][l][0])), np.max(np.abs(Vv - caches[sk][l][1])))
                assert e < TOL, f"AR cache {sk} layer {l}: {e}"
            ncaches[sk] = (kc, vc)
        # temb / pe spot checks
        for t in (0.7, 1.0, 0.55, 1e-12, 0.5, 0.0, 1.0 - 1e-9):
            e = np.max(np.abs(np.array(nv.temb(t)) - timestep_embedding(w, t)))
            assert e < TOL, f"temb({t}): {e}"
        for t in (0.7, 1.0, 0.2):
            e = np.max(np.abs(np.array(nv.temb(t, shift=3.0)) - timestep_embedding(w, t, shift=3.0)))
            assert e < TOL, f"temb({t}, shift 3): {e}"
        e = np.max(np.abs(np.array([nv.pe_row(p) for p in range(11)]) - frame_pe(11)))
        assert e < TOL, f"pe: {e}"
        for name, kind, sk, N, t, steps, nf, M in spec:
            x0 = noise[nf].astype(np.float64)
            batch = x0 if M > 1 else x0[None]
            vfn = lambda s, tt, c=ncaches[sk]: nv.velocity(c, s, tt)  # noqa: E731
            outs = []
            for m in range(M):
                outs.append(vfn(batch[m], t) if kind == "velocity" else SOLVERS[kind](vfn, batch[m], steps))
            res = np.stack(outs) if M > 1 else outs[0]
            e = float(np.max(np.abs(res - results[name])))
            assert e < TOL, f"{name}: scalar vs vectorised {e}"
            naive_err[name] = e

    # ---- property checks
    c9 = caches["n9"]
    x0 = noise["noise_n9.f32"].astype(np.float64)
    # the midpoint solver with steps = 1 is the explicit formula
    one = midpoint(lambda s, tt: velocity(w, c9, s, tt), x0, 1)
    f1 = velocity(w, c9, x0, 1.0)
    assert np.max(np.abs(one - (x0 - velocity(w, c9, x0 - f1 / 2, 0.5)))) < 1e-14
    # ab2's first step is that midpoint step; its later ones are one evaluation each
    assert np.array_equal(ab2(lambda s, tt: velocity(w, c9, s, tt), x0, 1), one)
    calls = []
    ab2(lambda s, tt: calls.append(tt) or velocity(w, c9, s, tt), x0, 8)
    assert len(calls) == 9, calls
    # the clamp: t = 1 and t = 1 - 1e-12 (logit 27.6) both saturate at +20, t <= 0 at -20
    assert timestep_raw(1.0) == 20.0 and timestep_raw(1.0 - 1e-12) == 20.0 and timestep_raw(1.0 - 1e-9) == 20.0
    assert timestep_raw(0.0) == -20.0 and timestep_raw(1e-12) == -20.0 and abs(timestep_raw(0.7)) < 1.0
    # ... so t = 1 - 1e-9 (logit 20.7) gives the velocity of t = 1 exactly
    assert np.array_equal(velocity(w, c9, x0, 1.0 - 1e-9), f1)
    # the release curve: shift 1 gives t back (up to the clamp), sigmoid(20) at t = 1
    for t in (0.05, 0.3, 0.5, 0.7, 0.95):
        assert abs(timestep_shifted(t, 1.0) - t) < 1e-15, t
    sig20 = 1.0 / (1.0 + math.exp(-20.0))
    assert timestep_shifted(1.0, 1.0) == sig20 and 2e-9 < 1.0 - sig20 < 2.1e-9
    # ... and sigmoid(-20) = 2.1e-9 (not t) for t = 1e-12, whose logit (-27.6) saturates
    assert abs(timestep_shifted(1e-12, 1.0) - 1.0 / (1.0 + math.exp(20.0))) < 1e-24 and timestep_shifted(1e-12, 1.0) > 2e-9
    assert abs(timestep_shifted(0.5, 3.0) - 0.75) < 1e-15 and abs(timestep_shifted(0.25, 3.0) - 0.5) < 1e-15
    # a shift != 1 changes the embedding and the velocity
    d_temb = float(np.max(np.abs(timestep_embedding(w, 0.7, shift=3.0) - timestep_embedding(w, 0.7, shift=1.0))))
    d_vel = float(np.max(np.abs(velocity(w, c9, x0, 0.7, shift=3.0) - velocity(w, c9, x0, 0.7, shift=1.0))))
    assert d_temb > 1e-2 and d_vel > 1e-2, (d_temb, d_vel)
    if SHIFT == 1.0:
        assert np.array_equal(velocity(w, c9, x0, 0.7, shift=1.0), results["v_single"])
    # velocity of a block depends on the AR cache (the NAR actually attends to it)
    assert np.max(np.abs(velocity(w, caches["n5"], x0[:5], 0.7) - velocity(w, c9, x0, 0.7)[:5])) > 1e-3
    # every plausible misreading of the specification moves the fixtures far beyond f32 noise
    sens = OrderedDict()
    if not args.deep:
        assert np.array_equal(results["v_t1"], f1)
        for var in DEVIATIONS + WEAK_DEVIATIONS:
            vs = float(np.max(np.abs(velocity(w, c9, x0, 0.7, frozenset([var])) - results["v_single"])))
            v1 = float(np.max(np.abs(velocity(w, c9, x0, 1.0, frozenset([var])) - results["v_t1"])))
            od = float(np.max(np.abs(midpoint(lambda s, tt: velocity(w, c9, s, tt, frozenset([var])), x0, 8) - results["ode8"])))
            sens[var] = (vs, v1, od)
            assert max(vs, v1, od) > (1e-2 if var in DEVIATIONS else 1e-4), (var, vs, v1, od)
        # the old formulation (all three of its choices at once) is far from the new one
        old = frozenset(["tau_sinusoid", "zero_marker_rows", "pe_frame_index"])
        sens["old (all three)"] = tuple(
            float(np.max(np.abs(a - results[k]))) for a, k in (
                (velocity(w, c9, x0, 0.7, old), "v_single"), (velocity(w, c9, x0, 1.0, old), "v_t1"),
                (midpoint(lambda s, tt: velocity(w, c9, s, tt, old), x0, 8), "ode8")))
        assert max(sens["old (all three)"]) > 1e-2
    # the f32 outputs are well away from f32 rounding noise
    for name, res in results.items():
        assert rms_of(res) > 1e-2, name

    # ---- write
    files = OrderedDict()
    for fn, a in noise.items():
        p = os.path.join(out, fn)
        with open(p, "wb") as f:
            f.write(np.ascontiguousarray(a.astype("<f4")).tobytes())
        files[fn] = a
    for name, res in results.items():
        fn = name + ".f32"
        p = os.path.join(out, fn)
        with open(p, "wb") as f:
            f.write(np.ascontiguousarray(res.astype("<f4")).tobytes())
        files[fn] = res
    dbg_t = [0.7, 1.0, 0.55]
    temb = np.stack([timestep_embedding(w, t) for t in dbg_t])
    debug_files = [("debug_temb.f32", temb)]
    if not args.deep:
        arc = np.stack([np.stack([c9[l][0], c9[l][1]]) for l in range(NL)])  # [NL, 2, L, kv, HD]
        debug_files.append(("debug_arcache_n9.f32", arc))
    for fn, a in debug_files:
        with open(os.path.join(out, fn), "wb") as f:
            f.write(np.ascontiguousarray(a.astype("<f4")).tobytes())
        files[fn] = a

    gpath = os.path.realpath(args.gguf)
    rel = os.path.relpath(gpath, REPO)
    cases = OrderedDict()
    cases["format"] = "raw little-endian float32, C order; latents/velocities [N, 64], batches [M, N, 64]"
    cases["weights"] = (gpath if rel.startswith("..") else rel) if not args.deep else "yued demo-model --preset deep --seed 0 (the file: " + os.path.basename(gpath) + ", sha256 below)"
    cases["gguf_sha256"] = gguf_sha
    cases["config"] = cfg
    cases["tokens"] = tok
    cases["latent_dim"] = LATENT
    cases["time_freq_dim"] = TIME_FREQ_DIM
    cases["tau_clamp"] = TAU_CLAMP
    cases["timestep_shift"] = SHIFT
    cases["noise_seed"] = NOISE_SEED
    cases["noise"] = OrderedDict(
        (fn, OrderedDict(shape=list(a.shape), draw_order=draw_order[fn])) for fn, a in noise.items()
    )
    cases["noise_note"] = ("numpy default_rng(99).standard_normal drawn in draw_order into one stream "
                           "(noise_n9 [9,64], noise_b3 [3,9,64], noise_b2 [2,9,64], noise_n5 [5,64]), then float32-rounded")
    cl = []
    for name, kind, sk, N, t, steps, nf, M in spec:
        seq = seqs[sk]
        c = OrderedDict()
        c["name"] = name
        c["kind"] = kind
        c["seq"] = seq
        c["ar_len"] = len(seq)
        c["n_frames"] = N
        c["variations"] = M
        c["t"] = t
        c["steps"] = steps
        c["noise"] = nf
        c["output"] = name + ".f32"
        c["shape"] = list(results[name].shape)
        c["rope_first_last"] = [len(seq), len(seq) + N + 1]  # inclusive, block rows 0..N+1
        c["rms"] = rms_of(results[name])
        cl.append(c)
    cases["cases"] = cl
    dbg = OrderedDict(temb=OrderedDict(file="debug_temb.f32", t=dbg_t, t_shifted=[timestep_shifted(t) for t in dbg_t],
                                       shape=list(temb.shape)))
    if not args.deep:
        dbg["arcache"] = OrderedDict(file="debug_arcache_n9.f32", seq="v_single", shape=list(arc.shape),
                                     layout="[layer, 0=K (after k_norm and RoPE) / 1=V, position, kv_head, head_dim]")
    cases["debug"] = dbg
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")

    # ---- summary
    total = 0
    print(f"weights {args.gguf} (sha256 {gguf_sha[:16]})" + (", matches qwen3_reference.build_weights" if tiny else ""))
    print("dims " + ", ".join(f"{k} {v}" for k, v in cfg.items()))
    print("tokens " + ", ".join(f"{k} {v}" for k, v in tok.items()))
    print(f"S9 ({len(seq9)}) {seq9}\nS5 ({len(seq5)}) {seq5}")
    print(f"{'file':24s} {'shape':>16s} {'rms':>12s} {'max|x|':>10s} {'bytes':>6s}  sha256")
    for fn, a in files.items():
        p = os.path.join(out, fn)
        sz = os.path.getsize(p)
        total += sz
        print(f"{fn:24s} {str(list(a.shape)):>16s} {rms_of(a):12.8f} {np.max(np.abs(a)):10.6f} {sz:6d}  {sha256(p)[:16]}")
    total += os.path.getsize(os.path.join(out, "cases.json"))
    print(f"total {total} bytes in {out}")
    assert total < 200 * 1024
    print(f"timestep_shift 3 vs 1 at t = 0.7: max |temb change| {d_temb:.3e}, max |velocity change| {d_vel:.3e}")
    if sens:
        print("max |change| of v_single / v_t1 / ode8 under a deliberate deviation (the largest must exceed 1e-2):")
        for var, (vs, v1, od) in sens.items():
            note = "  (below the fixtures' resolution: not asserted > 1e-2)" if var in WEAK_DEVIATIONS else ""
            print(f"  {var:18s} {vs:10.3e} {v1:10.3e} {od:10.3e}{note}")
    checks = "GGUF == generator, " if tiny else ""
    if naive_err:
        print("scalar per-row implementation vs vectorised, max abs err: " + ", ".join(f"{k} {v:.2e}" for k, v in naive_err.items()))
        print(f"all checks passed ({checks}AR logits == qwen3_reference, AR cache/temb/pe/velocity/ODE scalar < {TOL:g})")
    else:
        print(f"all checks passed ({checks}AR logits == qwen3_reference); scalar self-check skipped")


if __name__ == "__main__":
    main()
