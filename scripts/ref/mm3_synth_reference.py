#!/usr/bin/env python3
"""MiniMax Music 3 synthesis-half reference fixtures (tiny random weights, CPU).

Reads the tiny checkpoint fixtures/mm3/ckpt/{condition_encoder,transformer,vocoder}/ (written by
scripts/ref/mm3_ar_reference.py) and the AR fixture fixtures/mm3/ar/budget_5_frames_frame_hiddens.f32,
and writes fixtures/mm3/synth/ (cases.json + raw little-endian float32 tensors, row-major).

Regenerate (CPU only, a few seconds):

    /tmp/mm3venv/bin/python scripts/ref/mm3_synth_reference.py          # write fixtures
    /tmp/mm3venv/bin/python scripts/ref/mm3_synth_reference.py --check  # recompute, compare with the files

(venv as in fixtures/mm3/README.md: torch, diffusers 0.42.1, transformers, safetensors, numpy.)
The script is deterministic: a second run gives byte-identical files.

What it does
------------
* Loads MiniMaxMusic3ConditionEncoder / MiniMaxMusic3Transformer1DModel / MiniMaxMusic3Vocoder with
  from_pretrained (float32) and builds the scheduler with the config the real checkpoint ships
  (FlowMatchEulerDiscreteScheduler(num_train_timesteps=1, shift=1.0, invert_sigmas=True), see
  SCHEDULER_CONFIG) and the guider ClassifierFreeGuidance(guidance_scale=1.7).
* Every windowed / denoising number is produced TWICE: by a line-by-line re-implementation in this
  file (`run_windows`, `denoise_window`) and by the real diffusers modular blocks
  (MiniMaxMusic3PrepareChunksStep + MiniMaxMusic3ChunkDenoiseStep + MiniMaxMusic3VocoderDecodeStep)
  driven by a seeded torch CPU generator. The script refuses to write unless the two agree
  bit-exactly.
* The one deliberate deviation from diffusers: diffusers crops the decoded windows by
  `components.latent_hop_length` = condition_encoder.config.output_hop_length (512), which equals the
  real vocoder hop prod([8, 8, 4, 2]) = 512. The tiny vocoder hop is prod([2, 2]) = 4, so the
  diffusers decode step is run with `latent_hop_length` patched to prod(vocoder.upsampling_ratios).
  With 512 the tiny stitched audio would be empty for every window but the first.

Tensor layouts in the files: latents / velocities / noise as [T, C] (time-major, C = 8 latent
channels), conditions as [T, 16], audio as [2, samples] (row 0 = left). diffusers itself works in
[B, C, T]; the transposition is exact.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

ROOT = Path(__file__).resolve().parents[2]
CKPT = ROOT / "fixtures" / "mm3" / "ckpt"
AR = ROOT / "fixtures" / "mm3" / "ar"
OUT = ROOT / "fixtures" / "mm3" / "synth"

SCHEDULER_CONFIG = {"num_train_timesteps": 1, "shift": 1.0, "invert_sigmas": True, "use_dynamic_shifting": False}
DIT_CFG = 1.7
CHUNK_FRAMES = 200  # before_denoise._CHUNK_FRAMES
CHUNK_HOP = 100  # before_denoise._CHUNK_HOP
OVERLAP_LATENT = 172  # denoise._OVERLAP_LATENT_LENGTH
CROP_LEFT_LATENT = 86  # decoders._CROP_LEFT_LATENT
CROP_RIGHT_LATENT = 344 - 86  # decoders._CROP_RIGHT_LATENT

import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (  # noqa: E402
    ClassifierFreeGuidance,
    FlowMatchEulerDiscreteScheduler,
    MiniMaxMusic3ConditionEncoder,
    MiniMaxMusic3Transformer1DModel,
    MiniMaxMusic3Vocoder,
)
from diffusers.modular_pipelines import SequentialPipelineBlocks  # noqa: E402
from diffusers.modular_pipelines.minimax_music3 import before_denoise, decoders, denoise  # noqa: E402
from diffusers.modular_pipelines.minimax_music3.modular_pipeline import MiniMaxMusic3ModularPipeline  # noqa: E402

assert before_denoise._CHUNK_FRAMES == CHUNK_FRAMES and before_denoise._CHUNK_HOP == CHUNK_HOP
assert denoise._OVERLAP_LATENT_LENGTH == OVERLAP_LATENT
assert decoders._CROP_LEFT_LATENT == CROP_LEFT_LATENT and decoders._CROP_RIGHT_LATENT == CROP_RIGHT_LATENT

FILES = {}  # name -> np.float32 array
CASES = {}


def put(name, arr, doc=None):
    a = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
    assert name not in FILES, name
    FILES[name] = a
    entry = {"file": name + ".f32", "shape": list(a.shape)}
    if doc:
        entry["doc"] = doc
    return entry


def tc(x):  # [B, C, T] or [C, T] torch -> [T, C] numpy
    x = x.detach()
    if x.dim() == 3:
        assert x.shape[0] == 1
        x = x[0]
    return x.transpose(0, 1).contiguous().numpy()


def load_models():
    ce = MiniMaxMusic3ConditionEncoder.from_pretrained(CKPT / "condition_encoder", torch_dtype=torch.float32).eval()
    dit = MiniMaxMusic3Transformer1DModel.from_pretrained(CKPT / "transformer", torch_dtype=torch.float32).eval()
    voc = MiniMaxMusic3Vocoder.from_pretrained(CKPT / "vocoder", torch_dtype=torch.float32).eval()
    return ce, dit, voc


def make_scheduler():
    return FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)


# ------------------------------------------------------------------------------------------------
# Formulas the Rust side must reproduce (checked against torch below)
# ------------------------------------------------------------------------------------------------


def latent_length(n_frames, cfg):
    # condition_embedder_minimax_music3.py, Python float arithmetic, left to right
    return max(
        1,
        int(
            n_frames
            * cfg.output_sampling_rate
            / cfg.input_sampling_rate
            * cfg.input_hop_length
            / cfg.output_hop_length
        ),
    )


def nearest_src_f32(i, n, L):
    # ATen nearest_idx: scale = (float)n / L ; src = min(floor(f32(i) * scale), n - 1)  (all f32)
    if L == n:
        return i
    if L == 2 * n:
        return i >> 1
    scale = np.float32(n) / np.float32(L)
    return min(int(np.floor(np.float32(i) * scale)), n - 1)


def nearest_src_f32_vec(n, L):
    if L == n:
        return np.arange(L, dtype=np.int64)
    if L == 2 * n:
        return np.arange(L, dtype=np.int64) >> 1
    scale = np.float32(n) / np.float32(L)
    return np.minimum(np.floor(np.arange(L, dtype=np.float32) * scale).astype(np.int64), n - 1)


def seed_sigmas(N):
    lin = np.linspace(1.0, 1.0 / N, N)  # float64
    s = (np.float32(1.0) - lin.astype(np.float32)).astype(np.float32)
    return np.concatenate([s, np.ones(1, np.float32)])


# ------------------------------------------------------------------------------------------------
# Re-implementation of the windowed denoise loop (mirrors modular_pipelines/minimax_music3/denoise.py)
# ------------------------------------------------------------------------------------------------


def velocity_cfg(dit, x, t, cond):
    """x [1, C, T], t 0-dim f32 tensor, cond [1, T, D] -> (guided, v_cond, v_uncond)."""
    timestep = t.expand(x.shape[0]).to(x.dtype)
    v_cond = dit(hidden_states=x, timestep=timestep, encoder_hidden_states=cond, return_dict=False)[0]
    v_uncond = dit(
        hidden_states=x, timestep=timestep, encoder_hidden_states=torch.zeros_like(cond), return_dict=False
    )[0]
    shift = v_cond - v_uncond
    return v_uncond + DIT_CFG * shift, v_cond, v_uncond


def denoise_window(dit, noise, cond, steps, noise_prompt=None, prev_latent=None, trace=None):
    sched = make_scheduler()
    sched.set_timesteps(sigmas=np.linspace(1.0, 1.0 / steps, steps), device="cpu")
    latents = noise.clone()
    overlap = 0 if prev_latent is None else noise_prompt.shape[-1]
    for i, t in enumerate(sched.timesteps):
        if overlap > 0:
            tv = t.to(latents.dtype)
            latents[..., :overlap] = (1.0 - (1.0 - 1e-6) * tv) * noise_prompt + tv * prev_latent[..., :overlap]
        if trace is not None:
            trace.append(("x_in", i, latents.clone()))
        v, vc, vu = velocity_cfg(dit, latents, t, cond)
        if trace is not None:
            trace.append(("v", i, v.clone()))
        latents = sched.step(v, t, latents, return_dict=False)[0]
    if overlap > 0:
        latents[..., :overlap] = prev_latent[..., :overlap]
    return latents, sched


def run_windows(ce, dit, voc, frame_hiddens, steps, generator, hop):
    """frame_hiddens [1, F, 8*H]. Returns dict with everything per window + stitched audio."""
    n = frame_hiddens.shape[1]
    starts = [0] if n <= CHUNK_FRAMES else list(range(0, n - CHUNK_HOP, CHUNK_HOP))
    prev_latent = prev_cond = None
    wins = []
    for k, s in enumerate(starts):
        e = min(s + CHUNK_FRAMES, n)
        cond_raw = ce(frame_hiddens[:, s:e])
        cond = cond_raw.clone()
        overlap = 0
        if prev_latent is not None:
            overlap = min(prev_latent.shape[-1], cond.shape[1])
            cond[:, :overlap] = prev_cond[:, :overlap]
        noise = torch.randn((1, dit.config.in_channels, cond.shape[1]), generator=generator, dtype=torch.float32)
        noise_prompt = noise[..., :overlap].clone() if overlap > 0 else None
        lat, _ = denoise_window(dit, noise, cond, steps, noise_prompt, prev_latent)
        L = lat.shape[-1]
        os_ = max(0, L - 2 * OVERLAP_LATENT)
        oe = max(os_, L - OVERLAP_LATENT)
        wins.append(
            dict(start=s, end=e, cond_raw=cond_raw, cond=cond, noise=noise, overlap=overlap,
                 noise_prompt=noise_prompt, prev_latent_in=prev_latent, latent=lat, carry=(os_, oe))
        )
        prev_latent = lat[..., os_:oe]
        prev_cond = cond[:, os_:oe]
    chunks = []
    for k, w in enumerate(wins):
        wav = voc(w["latent"])
        w["wav"] = wav
        left = 0 if k == 0 else CROP_LEFT_LATENT * hop
        right = 0 if k == len(wins) - 1 else CROP_RIGHT_LATENT * hop
        w["crop"] = (left, right)
        chunks.append(wav[..., left: wav.shape[-1] - right])
    audio = torch.cat(chunks, dim=-1).float().clamp(-1.0, 1.0)
    return starts, wins, audio


def run_diffusers_pipeline(ce, dit, voc, frame_hiddens, steps, seed, hop):
    """The real diffusers modular blocks (denoise + decode), CPU generator seeded with `seed`."""
    blocks = SequentialPipelineBlocks.from_blocks_dict(
        {
            "prepare_chunks": before_denoise.MiniMaxMusic3PrepareChunksStep(),
            "denoise": denoise.MiniMaxMusic3ChunkDenoiseStep(),
            "decode": decoders.MiniMaxMusic3VocoderDecodeStep(),
        }
    )
    pipe = blocks.init_pipeline()
    pipe.update_components(
        condition_encoder=ce,
        transformer=dit,
        vocoder=voc,
        scheduler=make_scheduler(),
        guider=ClassifierFreeGuidance(guidance_scale=DIT_CFG),
    )
    orig = MiniMaxMusic3ModularPipeline.latent_hop_length
    MiniMaxMusic3ModularPipeline.latent_hop_length = property(lambda self: hop)
    try:
        g = torch.Generator("cpu").manual_seed(seed)
        state = pipe(
            frame_hiddens=frame_hiddens, generator=g, num_inference_steps=steps, output_type="pt",
            output=["latent_chunks", "audios", "chunk_starts"],
        )
    finally:
        MiniMaxMusic3ModularPipeline.latent_hop_length = orig
    return state


def same(a, b, what):
    a = a.detach() if torch.is_tensor(a) else torch.as_tensor(a)
    b = b.detach() if torch.is_tensor(b) else torch.as_tensor(b)
    if a.shape != b.shape or not torch.equal(a, b):
        d = (a.float() - b.float()).abs().max().item() if a.shape == b.shape else "shape"
        raise SystemExit(f"MISMATCH {what}: {d}")


# ------------------------------------------------------------------------------------------------


def main(check=False):
    ce, dit, voc = load_models()
    cfg_ce, cfg_dit, cfg_voc = ce.config, dit.config, voc.config
    C = cfg_dit.in_channels
    D = cfg_dit.condition_dim
    HID = cfg_ce.condition_hidden_dim
    NL = cfg_ce.num_condition_layers
    hop = int(np.prod(cfg_voc.upsampling_ratios))
    notes = {}

    # ---------------- 1. condition encoder ----------------
    with torch.no_grad():
        w_soft = torch.softmax(ce.layer_weight_logits, dim=0)
        folded = w_soft * ce.layer_scale
        fh5 = np.fromfile(AR / "budget_5_frames_frame_hiddens.f32", dtype="<f4").reshape(5, NL, HID)
        x5 = torch.from_numpy(fh5.reshape(1, 5, NL * HID).copy())
        y5 = ce(x5)[0]  # [L, 16]
        # the same computation written out (diffusers order: mix with softmax weights, then * layer_scale)
        hs = x5.transpose(1, 2).reshape(1, NL, HID, 5)
        mixed = torch.einsum("blht,l->bht", hs, w_soft) * ce.layer_scale
        proj = ce.proj(mixed)  # [1, 16, F]
        L5 = latent_length(5, cfg_ce)
        idx5 = [nearest_src_f32(i, 5, L5) for i in range(L5)]
        same(y5, proj[0, :, idx5].transpose(0, 1), "cond encoder re-implementation")
        # folded-weights variant (minimaxmusic.cpp's formulation): not bit-identical in general, report max diff
        mixed_f = torch.einsum("blht,l->bht", hs, folded)
        y5_f = ce.proj(mixed_f)[0, :, idx5].transpose(0, 1)
        notes["cond_folded_vs_diffusers_maxabs"] = float((y5_f - y5).abs().max())

    # nearest index table (torch F.interpolate, computed on an arange input so the values ARE the indices)
    table = {}
    mism_exact, mism_f32 = [], []
    len_formula_mism = []
    for n in range(1, 9001):
        L = latent_length(n, cfg_ce)
        exactL = max(1, (n * 441) // 128)
        if L != exactL:
            len_formula_mism.append(n)
        src = F.interpolate(torch.arange(n, dtype=torch.float32).view(1, 1, n), size=L, mode="nearest")
        src = src.view(-1).to(torch.int64).tolist()
        f32 = nearest_src_f32_vec(n, L).tolist()
        if f32 != src:
            mism_f32.append(n)
        exact = np.minimum((np.arange(L, dtype=np.int64) * n) // L, n - 1).tolist()
        if exact != src:
            mism_exact.append(n)
        if n <= 200:
            table[n] = (L, src)
    if mism_f32:
        raise SystemExit(f"f32 nearest formula disagrees with torch for n = {mism_f32[:20]}")
    notes["nearest_exact_integer_formula_differs_count_n_1_9000"] = len(mism_exact)
    notes["nearest_exact_integer_formula_differs_for_n_le_200"] = [n for n in mism_exact if n <= 200]
    notes["latent_length_python_float_vs_floor_n_441_over_128_differs_for_n_1_9000"] = len_formula_mism
    table_text = "{\n" + ",\n".join(
        f' "{n}": {{"latent_length": {L}, "src": {json.dumps(src, separators=(",", ":"))}}}' for n, (L, src) in table.items()
    ) + "\n}\n"

    CASES["condition_encoder"] = {
        "doc": "MiniMaxMusic3ConditionEncoder on the AR fixture's 5 frames. input [F, 8*64] = budget_5_frames_frame_hiddens.f32 viewed as [5, 512] (layer-major: index l*64 + h). output [L, 16] with L = int(F*44100/24000*960/512) = 17.",
        "softmax_weights": put("cond_softmax_weights", w_soft.detach(), "softmax(layer_weight_logits), [8]"),
        "layer_scale": put("cond_layer_scale", ce.layer_scale.detach(), "[1]"),
        "folded_weights": put("cond_folded_weights", folded.detach(), "softmax(layer_weight_logits) * layer_scale, [8] (f32 product)"),
        "input_file": "../ar/budget_5_frames_frame_hiddens.f32",
        "input_shape": [5, NL * HID],
        "mixed": put("cond_f5_mixed", mixed[0].transpose(0, 1).detach(), "[F, 64]: einsum(softmax weights) then * layer_scale (diffusers order), before proj"),
        "proj": put("cond_f5_proj", proj[0].transpose(0, 1).detach(), "[F, 16]: after proj conv1d k=3 pad=1, before resampling"),
        "output": put("cond_f5_out", y5.detach(), "[17, 16]"),
        "latent_length": L5,
        "src_index": idx5,
        "folded_vs_diffusers_max_abs": notes["cond_folded_vs_diffusers_maxabs"],
        "tolerance": {"abs": 1e-5, "rel": 1e-5},
    }
    CASES["nearest_table"] = {
        "doc": "For n = 1..200 LM frames: latent_length L (reference formula) and the source frame index torch's F.interpolate(mode='nearest', size=L) reads for each output i (JSON ints). torch computes scale = f32(n)/f32(L) (f32 division) and src = min(floor(f32(i) * scale), n-1) in f32 (identity if L == n, i >> 1 if L == 2n). Verified for n = 1..9000.",
        "file": "nearest_table.json",
        "format": "{\"n\": {\"latent_length\": L, \"src\": [L ints]}} for n = 1..200",
        "exact_integer_formula_floor_i_n_over_L_differs_for_n_le_200": [n for n in mism_exact if n <= 200],
        "exact_integer_formula_differs_count_n_le_9000": len(mism_exact),
        "latent_length_formula_differs_from_floor_441n_over_128_for_n_le_9000": len_formula_mism,
    }

    # ---------------- 2. scheduler ----------------
    sched_case = {"doc": "FlowMatchEulerDiscreteScheduler(num_train_timesteps=1, shift=1.0, invert_sigmas=True).set_timesteps(sigmas=np.linspace(1.0, 1.0/N, N)). sigmas has N+1 entries (trailing 1.0); timesteps = sigmas[:N] (the flow time fed to the DiT).", "config": SCHEDULER_CONFIG}
    for N in (2, 4, 8, 30):
        s = make_scheduler()
        s.set_timesteps(sigmas=np.linspace(1.0, 1.0 / N, N), device="cpu")
        sig = s.sigmas.numpy()
        assert np.array_equal(s.timesteps.numpy(), sig[:N])
        assert np.array_equal(sig, seed_sigmas(N)), N
        sched_case[f"N{N}"] = {
            "sigmas": put(f"sched_sigmas_n{N}", sig, f"[{N + 1}] f32"),
            "sigmas_hex": [f"{np.float32(v).view(np.uint32):08x}" for v in sig],
        }
    # how the C++ port's all-f32 formula compares
    diff_n = []
    for N in range(2, 101):
        ref = seed_sigmas(N)
        i = np.arange(N, dtype=np.float32)
        lin = np.float32(1.0) + (np.float32(1.0) / np.float32(N) - np.float32(1.0)) * i / np.float32(N - 1)
        cpp = np.concatenate([(np.float32(1.0) - lin).astype(np.float32), np.ones(1, np.float32)])
        if not np.array_equal(ref, cpp):
            diff_n.append(N)
    sched_case["all_f32_linspace_formula_differs_for_N_2_100"] = diff_n
    CASES["scheduler"] = sched_case

    # ---------------- 3. DiT velocity ----------------
    g = torch.Generator("cpu").manual_seed(1234)
    dit_case = {"doc": "MiniMaxMusic3Transformer1DModel velocities. x [T, 8], cond [T, 16] (stored time-major; diffusers input is [B, 8, T] / [B, T, 16]). v_uncond uses cond = zeros. guided = v_uncond + 1.7 * (v_cond - v_uncond) (diffusers ClassifierFreeGuidance order). t is the f32 flow time (0 = noise).", "dit_cfg": DIT_CFG, "cases": []}
    temb_store = {}
    with torch.no_grad():
        for T in (20, 33):
            x = torch.randn((1, C, T), generator=g)
            cond = torch.randn((1, T, D), generator=g) * 0.5
            xin = put(f"dit_T{T}_x", tc(x))
            cin = put(f"dit_T{T}_cond", cond[0].numpy())
            for t in (0.0, 0.37, 0.9):
                tt = torch.tensor(t, dtype=torch.float32)
                v, vc, vu = velocity_cfg(dit, x, tt, cond)
                tag = f"dit_T{T}_t{str(t).replace('.', 'p')}"
                dit_case["cases"].append({
                    "T": T, "t": t, "x": xin, "cond": cin,
                    "v_cond": put(tag + "_vcond", tc(vc)),
                    "v_uncond": put(tag + "_vuncond", tc(vu)),
                    "v_guided": put(tag + "_vguided", tc(v)),
                })
                if T == 20:
                    temb_store[t] = dit.time_embed(dit.time_proj(tt.view(1)))[0]
            # batch of 2 different x, one condition (cond branch only and uncond branch)
            if T == 20:
                x2 = torch.randn((1, C, T), generator=g)
                xb = torch.cat([x, x2], 0)
                cb = cond.expand(2, -1, -1).contiguous()
                tb = torch.tensor([0.37, 0.37], dtype=torch.float32)
                vb = dit(hidden_states=xb, timestep=tb, encoder_hidden_states=cb, return_dict=False)[0]
                vbu = dit(hidden_states=xb, timestep=tb, encoder_hidden_states=torch.zeros_like(cb), return_dict=False)[0]
                v1 = dit(hidden_states=x2, timestep=tb[:1], encoder_hidden_states=cond, return_dict=False)[0]
                vg = vbu + DIT_CFG * (vb - vbu)
                dit_case["batch2"] = {
                    "doc": "batch of 2: row 0 = dit_T20_x, row 1 = x2; both share dit_T20_cond; t = 0.37 for both. Files are [2, T, 8].",
                    "x2": put("dit_b2_x2", tc(x2)),
                    "v_cond": put("dit_b2_vcond", np.stack([tc(vb[0:1]), tc(vb[1:2])])),
                    "v_uncond": put("dit_b2_vuncond", np.stack([tc(vbu[0:1]), tc(vbu[1:2])])),
                    "v_guided": put("dit_b2_vguided", np.stack([tc(vg[0:1]), tc(vg[1:2])])),
                    "batched_vs_single_row1_max_abs": float((vb[1:2] - v1).abs().max()),
                }
        # intermediates for T=20, t=0.37, cond branch
        x = torch.from_numpy(FILES["dit_T20_x"].T.copy()).unsqueeze(0)
        cond = torch.from_numpy(FILES["dit_T20_cond"].copy()).unsqueeze(0)
        caps = {}
        hooks = [
            dit.preprocess_conv.register_forward_hook(lambda m, i, o: caps.__setitem__("pre_in", i[0].clone())),
            dit.proj_in.register_forward_hook(lambda m, i, o: caps.__setitem__("proj_in", o.clone())),
            dit.transformer_blocks[0].register_forward_hook(lambda m, i, o: caps.__setitem__("block0", o.clone())),
            dit.transformer_blocks[-1].register_forward_hook(lambda m, i, o: caps.__setitem__("blockN", o.clone())),
        ]
        tt = torch.tensor([0.37], dtype=torch.float32)
        vv = dit(hidden_states=x, timestep=tt, encoder_hidden_states=cond, return_dict=False)[0]
        for h in hooks:
            h.remove()
        same(vv, torch.from_numpy(FILES["dit_T20_t0p37_vcond"].T.copy()).unsqueeze(0), "dit intermediates rerun")
        fourier = dit.time_proj(tt)[0]
        # Fourier angle order check: ((2*pi) * t) @ w.T in f32
        w_f = dit.time_proj.weight[:, 0]
        ang_a = (torch.tensor(np.float32(2.0 * math.pi)) * tt) * w_f  # (2*pi*t) * w, f32 each
        ang_b = torch.tensor(np.float32(2.0 * math.pi)) * (tt * w_f)  # 2*pi * (t*w)
        notes["fourier_order_(2pi*t)*w_bit_exact"] = bool(torch.equal(torch.cat([ang_a.cos(), ang_a.sin()]), fourier))
        notes["fourier_order_2pi*(t*w)_bit_exact"] = bool(torch.equal(torch.cat([ang_b.cos(), ang_b.sin()]), fourier))
        dit_case["intermediates_T20_t0p37_cond"] = {
            "doc": "T=20, t=0.37, cond branch. seq = T+1 rows (row 0 = timestep token).",
            "fourier": put("dit_i_fourier", fourier, "[16] cat(cos, sin) of (2*pi*t) * w"),
            "temb": put("dit_i_temb", temb_store[0.37], "[16] time_embed(fourier)"),
            "concat_in": put("dit_i_concat", caps["pre_in"][0].transpose(0, 1), "[T, 32] = [latent 8 | zeros 8 | cond 16] before preprocess_conv"),
            "proj_in": put("dit_i_proj_in", caps["proj_in"][0], "[T, 16] after preprocess_conv residual + proj_in (before the timestep token is prepended)"),
            "block0_out": put("dit_i_block0", caps["block0"][0], "[T+1, 16] output of transformer_blocks[0]"),
            "blockN_out": put("dit_i_blockN", caps["blockN"][0], "[T+1, 16] output of the last block"),
        }
        dit_case["temb"] = {str(t): put(f"dit_temb_t{str(t).replace('.', 'p')}", v) for t, v in temb_store.items()}
    dit_case["tolerance"] = {"abs": 1e-4, "rel": 1e-4}
    CASES["dit"] = dit_case

    # ---------------- 4. one window, first window, full denoise ----------------
    win_case = {"doc": "One first window (no overlap): condition = cond_f5_out [17, 16]; initial noise = torch.randn((1, 8, 17), generator=torch.Generator('cpu').manual_seed(SEED)) (stored [T, 8]); Euler over the scheduler sigmas with CFG 1.7. trace files hold, per step i, the latent fed to the DiT and the guided velocity.", "cases": []}
    with torch.no_grad():
        cond = y5.unsqueeze(0)
        for steps, seed in ((4, 11), (2, 12)):
            gg = torch.Generator("cpu").manual_seed(seed)
            noise = torch.randn((1, C, cond.shape[1]), generator=gg, dtype=torch.float32)
            trace = []
            lat, sch = denoise_window(dit, noise, cond, steps, trace=trace)
            # diffusers blocks on the same frames (frame_hiddens = the 5 AR frames) and the same seed
            st = run_diffusers_pipeline(ce, dit, voc, x5, steps, seed, hop)
            same(st["latent_chunks"][0], lat, f"one-window latent steps={steps}")
            xs = np.stack([tc(a) for (k, i, a) in trace if k == "x_in"])
            vs = np.stack([tc(a) for (k, i, a) in trace if k == "v"])
            win_case["cases"].append({
                "steps": steps, "seed": seed,
                "noise": put(f"win1_s{steps}_noise", tc(noise), "[17, 8]"),
                "sigmas": [float(v) for v in sch.sigmas],
                "x_in_per_step": put(f"win1_s{steps}_xsteps", xs, f"[{steps}, 17, 8]"),
                "v_per_step": put(f"win1_s{steps}_vsteps", vs, f"[{steps}, 17, 8] guided velocity"),
                "final_latent": put(f"win1_s{steps}_latent", tc(lat), "[17, 8]"),
                "audio": put(f"win1_s{steps}_audio", st["audios"][0], f"[2, {17 * hop}] diffusers decode (single window: no crop), clamped"),
            })
    win_case["condition"] = "cond_f5_out"
    win_case["tolerance"] = {"abs": 2e-4, "rel": 2e-4}
    CASES["one_window"] = win_case

    # ---------------- 5. two windows end to end ----------------
    F2, steps2, seed2 = 250, 2, 2025
    gi = torch.Generator("cpu").manual_seed(77)
    fh = (torch.randn((1, F2, NL * HID), generator=gi) * 0.5).float()
    with torch.no_grad():
        gen = torch.Generator("cpu").manual_seed(seed2)
        starts, wins, audio = run_windows(ce, dit, voc, fh, steps2, gen, hop)
        st = run_diffusers_pipeline(ce, dit, voc, fh, steps2, seed2, hop)
    same(torch.tensor(st["chunk_starts"]), torch.tensor(starts), "chunk starts")
    for k, w in enumerate(wins):
        same(st["latent_chunks"][k], w["latent"], f"window {k} latent")
    same(st["audios"], audio, "stitched audio")
    wcase = {
        "doc": "F=250 LM frames -> chunk_starts [0, 100]: window 0 = frames [0, 200) (T=689), window 1 = frames [100, 250) (T=516). Noise: ONE torch CPU generator manual_seed(seed) consumed by one torch.randn((1, 8, T_k)) call per window, in window order, each drawn channel-major ([8, T_k] row-major). Files store each window's noise as [T_k, 8]. cond_raw = encoder output of the window; cond = after splicing the previous carry's condition into the first `overlap` rows. Carry: latent/cond rows [T-344, T-172) of the previous window (after its overlap rows were restored). Audio: vocoder per window, crop left 86*hop (all but first) and right 258*hop (all but last), concat, clamp(-1, 1). hop = prod(vocoder.upsampling_ratios) = 4 here (512 at full size).",
        "frames": F2, "steps": steps2, "seed": seed2, "dit_cfg": DIT_CFG, "hop": hop,
        "frame_hiddens": put("win2_frame_hiddens", fh[0], f"[{F2}, {NL * HID}] = torch.randn(generator seed 77) * 0.5"),
        "chunk_starts": starts,
        "noise_stream_total": int(sum(w["noise"].numel() for w in wins)),
        "noise_note": "Per-window randn calls are NOT one slice of a single randn(sum) call here: C*T_k = 8*689 = 5512 is not a multiple of 16, and torch's CPU normal_fill redraws the last 16 values of each call (see scripts/ref/randn_reference.py). At full size (C = 128) every C*T_k is a multiple of 16 and the per-window calls do equal one continuous stream. On the generating machine (cpu_capability AVX512) the draws equalled ATEN_CPU_CAPABILITY=avx2 bit for bit (not DEFAULT).",
        "windows": [],
        "audio": put("win2_audio", audio[0], f"[2, {audio.shape[-1]}] stitched, clamped (row 0 = left)"),
        "tolerance": {"latent_abs": 2e-4, "audio_abs": 2e-4},
    }
    for k, w in enumerate(wins):
        T = w["latent"].shape[-1]
        entry = {
            "frames": [w["start"], w["end"]], "T": T, "overlap": w["overlap"], "carry_rows": list(w["carry"]),
            "crop_samples": list(w["crop"]),
            "cond_raw": put(f"win2_w{k}_cond_raw", w["cond_raw"][0], f"[{T}, 16] encoder output"),
            "cond": put(f"win2_w{k}_cond", w["cond"][0], f"[{T}, 16] after splice (the DiT input)"),
            "noise": put(f"win2_w{k}_noise", tc(w["noise"]), f"[{T}, 8] this window's randn draw"),
            "latent": put(f"win2_w{k}_latent", tc(w["latent"]), f"[{T}, 8] final latent (overlap rows restored)"),
            "wav": put(f"win2_w{k}_wav", w["wav"][0], f"[2, {T * hop}] vocoder output before crop"),
        }
        if w["overlap"]:
            entry["noise_prompt"] = "first overlap rows of this window's noise"
            entry["prev_latent"] = put(f"win2_w{k}_prev_latent", tc(w["prev_latent_in"]), "[172, 8] carry from the previous window")
        wcase["windows"].append(entry)
    CASES["two_windows"] = wcase

    # ---------------- 6. VAE decoder alone ----------------
    gv = torch.Generator("cpu").manual_seed(99)
    z = torch.randn((1, C, 7), generator=gv)
    caps = {}
    hk = voc.conv_out.register_forward_hook(lambda m, i, o: caps.__setitem__("pre", o.clone()))
    hk2 = voc.conv_in.register_forward_hook(lambda m, i, o: caps.__setitem__("conv_in", o.clone()))
    with torch.no_grad():
        a = voc(z)
    hk.remove()
    hk2.remove()
    pre = caps["pre"].reshape(1, 2, -1)[0]
    assert torch.equal(torch.tanh(pre), a[0])
    # weight-norm folding check for two tensors (w = g * v / ||v||, norm over all dims but 0)
    sd = voc.state_dict()

    def fold(base):
        gw, vw = sd[base + ".weight_g"], sd[base + ".weight_v"]
        nrm = vw.reshape(vw.shape[0], -1).norm(dim=1).reshape(-1, *([1] * (vw.dim() - 1)))
        return gw * vw / nrm

    for base in ("conv_in", "blocks.0.conv_t1"):
        mod = voc.get_submodule(base)
        assert torch.allclose(fold(base), mod.weight, rtol=0, atol=1e-7), base
    CASES["vae"] = {
        "doc": "MiniMaxMusic3Vocoder alone. latent [7, 8] (time-major; diffusers input [1, 8, 7]); channels 0..3 -> left, 4..7 -> right. pre_tanh = conv_out output, audio = tanh(pre_tanh); the pipeline's clamp(-1, 1) after stitching is a no-op on tanh output.",
        "latent": put("vae_latent", tc(z), "[7, 8]"),
        "conv_in_out": put("vae_conv_in_out", caps["conv_in"], "[2, 32, 7]: per track (batch row 0 = left) output of dec_in_proj -> conv_in"),
        "pre_tanh": put("vae_pre_tanh", pre, f"[2, {7 * hop}]"),
        "audio": put("vae_audio", a[0], f"[2, {7 * hop}]"),
        "folded_conv_in_weight": put("vae_folded_conv_in_weight", fold("conv_in"), "[32, 16, 7] g * v / ||v||_(dims 1,2)"),
        "folded_block0_conv_t1_weight": put("vae_folded_block0_conv_t1_weight", fold("blocks.0.conv_t1"), "[32, 16, 4] ConvTranspose1d weight [in, out, k]; weight_g is [in, 1, 1] (norm per INPUT channel)"),
        "tolerance": {"abs": 1e-5, "rel": 1e-5},
    }

    # ---------------- write / check ----------------
    meta = {
        "_doc": "MiniMax Music 3 synthesis-half reference on tiny random weights (fixtures/mm3/ckpt). All .f32 files are raw little-endian float32, row-major, shapes below. Compute: float32, CPU, torch.set_num_threads(1). Generated by scripts/ref/mm3_synth_reference.py (see its docstring). Windowed/denoise numbers are cross-checked bit-exactly against the real diffusers modular blocks.",
        "versions": {"diffusers": diffusers.__version__, "transformers": transformers.__version__, "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()},
        "configs": {
            "condition_encoder": dict(cfg_ce), "transformer": dict(cfg_dit), "vocoder": dict(cfg_voc),
            "scheduler": SCHEDULER_CONFIG, "guider": {"guidance_scale": DIT_CFG},
        },
        "constants": {
            "chunk_frames": CHUNK_FRAMES, "chunk_hop": CHUNK_HOP, "overlap_latent": OVERLAP_LATENT,
            "carry": "[T - 2*172, T - 172)", "crop_left_latent": CROP_LEFT_LATENT, "crop_right_latent": CROP_RIGHT_LATENT,
            "hop_used_here": hop, "hop_diffusers": "condition_encoder.config.output_hop_length (512); tiny vocoder hop is prod(upsampling_ratios) = 4",
            "blend": "lat[..., :ov] = (1.0 - (1.0 - 1e-6) * t) * noise_prompt + t * prev_latent[..., :ov]  (t = current sigma, f32)",
        },
        "notes": notes,
        "cases": CASES,
    }
    meta = json.loads(json.dumps(meta, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
    if check:
        bad = 0
        for name, a in FILES.items():
            b = np.fromfile(OUT / (name + ".f32"), dtype="<f4")
            if b.size != a.size or not np.array_equal(b.reshape(a.shape), a):
                print("DIFF", name)
                bad += 1
        old = json.loads((OUT / "cases.json").read_text())
        if (OUT / "nearest_table.json").read_text() != table_text:
            print("DIFF nearest_table.json")
            bad += 1
        if old != meta:
            print("DIFF cases.json")
            bad += 1
        print("check:", "OK" if bad == 0 else f"{bad} differences")
        return 1 if bad else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.f32"):
        old.unlink()
    total = 0
    for name, a in FILES.items():
        a.astype("<f4").tofile(OUT / (name + ".f32"))
        total += a.nbytes
    (OUT / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")
    (OUT / "nearest_table.json").write_text(table_text)
    print(f"wrote {len(FILES)} tensors ({total / 1e6:.2f} MB) + cases.json to {OUT}")
    print(json.dumps(notes, indent=1)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main(check="--check" in sys.argv))
