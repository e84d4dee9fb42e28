#!/usr/bin/env python3
"""LoKr, AI Toolkit, GGUF-style and rsLoRA adapter fixtures (issue: adapters as yue2.cpp takes them).

Usage (from the repository root, in a venv with torch, safetensors and LyCORIS):

    python -m venv /tmp/torch && /tmp/torch/bin/pip install torch safetensors einops toml
    /tmp/torch/bin/pip install --no-deps lycoris-lora==4.1.3
    /tmp/torch/bin/python scripts/ref/lokr_reference.py      # writes fixtures/lora/lokr/

What it writes
--------------
* shapes.json: the torch shapes of a tiny backbone's tensors the adapters name (two layers,
  hidden 12, the NAR twins, vae2llm, the time embedder); the Rust test scans against them.
* adapters/: one adapter per way the community ships one, seeded random factors:
    aitk_lokr.safetensors     AI Toolkit / LyCORIS keys: text_encoders.model.layers.0.self_attn.
                              q_proj.lokr_w1 (whole) + lokr_w2_a/_b (a product) with a per-module
                              .alpha; diffusion_model.layers.0.mlp.up_proj (the NAR half under the
                              AR names) lokr_w1_a/_b + lokr_w2 with the metadata alpha;
                              diffusion_model.vae2llm.diff and .diff_b
    native_lokr_fused.safetensors
                              layers.0.self_attn.qkv_proj.lokr_w1 + lokr_w2, both whole (scale 1),
                              FUSED: split onto q, k, v by rows of the Kronecker product
    gguf_lokr_dim.safetensors yue2.blk.1.attn_output.lokr_w1_a/_b + lokr_w2_a/_b with the metadata
                              alpha 8 and lokr_dim 4, and yue2.time_embd.0.lora_A/B.weight (LoRA
                              at the metadata alpha over its rank)
    rslora/                   PEFT keys on layers.0.nar_self_attn.k_proj, adapter_config.json with
                              use_rslora (alpha / sqrt(rank))
    ignored.safetensors       a plain LoRA beside a key naming nothing of the backbone (skipped)
    dora/, loha.safetensors, pissa.safetensors, pattern/
                              refused by name: a DoRA magnitude vector, LoHa's hada_w factors, a
                              PiSSA delta's metadata, a rank_pattern in adapter_config.json
* expected.safetensors: each usable adapter's dense delta at strength 0.75 on every tensor it
  changes, `<adapter>/<tensor>`, computed by LyCORIS's `lokr.diff_weight` (torch.kron) for LoKr,
  torch for LoRA and the diffs. The LoKr scale follows yue2.cpp's adapter.h where LyCORIS
  differs: alpha over w2's rank when w2 is factorised, else over w1's (LyCORIS takes w1's first);
  the fixtures factor at most one side per module without lokr_dim, where the two agree.
"""
import json
import math
from pathlib import Path

import torch
from lycoris.functional import lokr
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "lora" / "lokr"
ADAPTERS = OUT / "adapters"
S = 0.75

SHAPES = {
    "model.layers.0.self_attn.q_proj.weight": [16, 12],
    "model.layers.0.self_attn.k_proj.weight": [8, 12],
    "model.layers.0.self_attn.v_proj.weight": [8, 12],
    "model.layers.0.self_attn.o_proj.weight": [12, 16],
    "model.layers.1.self_attn.o_proj.weight": [12, 16],
    "model.layers.0.mlp.up_proj.weight": [24, 12],
    "model.layers.0.nar_mlp.up_proj.weight": [24, 12],
    "model.layers.0.nar_self_attn.k_proj.weight": [8, 12],
    "model.layers.1.nar_self_attn.o_proj.weight": [12, 16],
    "vae2llm.weight": [12, 8],
    "vae2llm.bias": [12],
    "time_embedder.mlp.0.weight": [12, 6],
    "time_embedder.mlp.0.bias": [12],
}

gen = torch.Generator().manual_seed(34)


def rnd(*shape):
    return (torch.randn(*shape, generator=gen) * 0.5).float()


def kron(w1=None, w1a=None, w1b=None, w2=None, w2a=None, w2b=None, gamma=1.0):
    return lokr.diff_weight(w1, w1a, w1b, w2, w2a, w2b, None, gamma=gamma)


def main():
    ADAPTERS.mkdir(parents=True, exist_ok=True)
    expected = {}

    # AI Toolkit / LyCORIS keys.
    q = dict(w1=rnd(4, 3), w2a=rnd(4, 2), w2b=rnd(2, 4))
    up = dict(w1a=rnd(2, 1), w1b=rnd(1, 3), w2=rnd(12, 4))
    vd, vb = rnd(12, 8), rnd(12)
    t = {
        "text_encoders.model.layers.0.self_attn.q_proj.lokr_w1": q["w1"],
        "text_encoders.model.layers.0.self_attn.q_proj.lokr_w2_a": q["w2a"],
        "text_encoders.model.layers.0.self_attn.q_proj.lokr_w2_b": q["w2b"],
        "text_encoders.model.layers.0.self_attn.q_proj.alpha": torch.tensor(3.0),
        "diffusion_model.layers.0.mlp.up_proj.lokr_w1_a": up["w1a"],
        "diffusion_model.layers.0.mlp.up_proj.lokr_w1_b": up["w1b"],
        "diffusion_model.layers.0.mlp.up_proj.lokr_w2": up["w2"],
        "diffusion_model.vae2llm.diff": vd,
        "diffusion_model.vae2llm.diff_b": vb,
    }
    save_file(t, ADAPTERS / "aitk_lokr.safetensors", metadata={"alpha": "2.0"})
    a = "aitk_lokr.safetensors"
    expected[f"{a}/model.layers.0.self_attn.q_proj.weight"] = S * kron(**q, gamma=3.0)
    expected[f"{a}/model.layers.0.nar_mlp.up_proj.weight"] = S * kron(**up, gamma=2.0)
    expected[f"{a}/vae2llm.weight"] = S * vd
    expected[f"{a}/vae2llm.bias"] = S * vb

    # A fused qkv LoKr, both factors whole: scale 1, split by rows.
    w1, w2 = rnd(4, 3), rnd(8, 4)
    save_file({"layers.0.self_attn.qkv_proj.lokr_w1": w1, "layers.0.self_attn.qkv_proj.lokr_w2": w2},
              ADAPTERS / "native_lokr_fused.safetensors")
    full = S * kron(w1=w1, w2=w2, gamma=7.0)  # a gamma with no factor: LyCORIS's scale is 1
    a = "native_lokr_fused.safetensors"
    for name, (r0, r1) in [("q_proj", (0, 16)), ("k_proj", (16, 24)), ("v_proj", (24, 32))]:
        expected[f"{a}/model.layers.0.self_attn.{name}.weight"] = full[r0:r1]

    # GGUF-style keys, both factors products, lokr_dim 4 and alpha 8 in the metadata.
    o = dict(w1a=rnd(3, 2), w1b=rnd(2, 4), w2a=rnd(4, 2), w2b=rnd(2, 4))
    la, lb = rnd(2, 6), rnd(12, 2)
    save_file({
        "yue2.blk.1.attn_output.lokr_w1_a": o["w1a"], "yue2.blk.1.attn_output.lokr_w1_b": o["w1b"],
        "yue2.blk.1.attn_output.lokr_w2_a": o["w2a"], "yue2.blk.1.attn_output.lokr_w2_b": o["w2b"],
        "yue2.time_embd.0.lora_A.weight": la, "yue2.time_embd.0.lora_B.weight": lb,
    }, ADAPTERS / "gguf_lokr_dim.safetensors", metadata={"alpha": "8", "lokr_dim": "4"})
    a = "gguf_lokr_dim.safetensors"
    # LyCORIS divides by w1a's rank (2): a gamma of 8 * 2 / 4 gives alpha / lokr_dim.
    expected[f"{a}/model.layers.1.self_attn.o_proj.weight"] = S * kron(**o, gamma=8.0 * 2 / 4)
    expected[f"{a}/time_embedder.mlp.0.weight"] = S * (8.0 / 2) * (lb @ la)

    # rsLoRA (PEFT): alpha / sqrt(rank).
    d = ADAPTERS / "rslora"
    d.mkdir(exist_ok=True)
    ka, kb = rnd(4, 12), rnd(8, 4)
    save_file({"base_model.model.model.layers.0.nar_self_attn.k_proj.lora_A.weight": ka,
               "base_model.model.model.layers.0.nar_self_attn.k_proj.lora_B.weight": kb},
              d / "adapter_model.safetensors")
    (d / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "use_rslora": True}))
    expected["rslora/model.layers.0.nar_self_attn.k_proj.weight"] = S * (8 / math.sqrt(4)) * (kb @ ka)

    # A key naming nothing of the backbone beside a usable LoRA: skipped, counted.
    ia, ib = rnd(2, 16), rnd(12, 2)
    save_file({"layers.1.nar_self_attn.o_proj.lora_A.weight": ia, "layers.1.nar_self_attn.o_proj.lora_B.weight": ib,
               "conditioner.proj.lora_A.weight": rnd(2, 5)}, ADAPTERS / "ignored.safetensors")
    expected["ignored.safetensors/model.layers.1.nar_self_attn.o_proj.weight"] = S * 1.0 * (ib @ ia)

    # Refused by name.
    d = ADAPTERS / "dora"
    d.mkdir(exist_ok=True)
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": rnd(2, 12),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": rnd(16, 2),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector": rnd(16)},
              d / "adapter_model.safetensors")
    save_file({"layers.0.self_attn.q_proj.hada_w1_a": rnd(16, 2), "layers.0.self_attn.q_proj.hada_w1_b": rnd(2, 12)},
              ADAPTERS / "loha.safetensors")
    save_file({"layers.0.self_attn.q_proj.lora_A.weight": rnd(2, 12),
               "layers.0.self_attn.q_proj.lora_B.weight": rnd(16, 2)},
              ADAPTERS / "pissa.safetensors", metadata={"hot_step_pissa_delta": "1"})
    d = ADAPTERS / "pattern"
    d.mkdir(exist_ok=True)
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": rnd(2, 12),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": rnd(16, 2)},
              d / "adapter_model.safetensors")
    (d / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 2, "rank_pattern": {"q_proj": 4}}))

    (OUT / "shapes.json").write_text(json.dumps(SHAPES, indent=1, sort_keys=True) + "\n")
    save_file({k: v.contiguous().float() for k, v in expected.items()}, OUT / "expected.safetensors")
    print(f"wrote {len(expected)} expected deltas to {OUT}")


if __name__ == "__main__":
    main()
