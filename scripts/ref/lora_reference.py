#!/usr/bin/env python3
"""LoRA adapter fixtures for YuE2's backbone (issue: stack community adapters per request).

Usage (from the repository root; the venv of fixtures/mm3/README.md plus peft and gguf):

    /tmp/mm3venv/bin/pip install peft gguf
    /tmp/mm3venv/bin/python scripts/ref/lora_reference.py          # writes fixtures/lora/
    /tmp/mm3venv/bin/python scripts/ref/lora_reference.py --check  # recomputes the numbers, compares

What it does
------------
* Reads the AR half of the tiny backbone fixtures/ar/tiny-qwen3.gguf (F32) into a
  transformers Qwen3ForCausalLM (the same weights, float32).
* Attaches a PEFT LoRA (r = 4, lora_alpha = 8, so alpha / rank = 2) on every projection yued
  merges into the AR half (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj), with seeded
  random A and B, and saves it in the PEFT layout (adapters/peft/: adapter_model.safetensors and
  adapter_config.json, the alpha there only).
* Rewrites the same factors in the other layouts the community ships, beside it in
  adapters/ (the scan must normalize all of them to the same terms, so all merge to the
  same bytes):
    comfy.safetensors   text_encoders.yue2.transformer.model.layers.N.self_attn.q_proj.lora_down/lora_up.weight,
                        the alpha as a per-module `.alpha` scalar
    native.safetensors  layers.N.self_attn.qkv_proj and layers.N.mlp.gate_up_proj FUSED (a
                        block-diagonal fusion: A stacked by rows, B block-diagonal, rank 3r and
                        2r with the per-module alpha scaled alike), o_proj and down_proj plain;
                        the alpha in the safetensors metadata (lora_alpha)
    slider.safetensors  adapters.model-layers-N-self_attn-q_proj.lora_A/lora_B.weight, the alpha
                        in the metadata as ss_network_alpha
* merge_and_unload() gives the reference: merged.safetensors (every merged AR projection, in
  torch layout) and logits.f32 (the merged model's logits of SEQ_A, [len, vocab], float32).
* Two more adapters for stacking and for the NAR half (no PEFT reference: their terms are
  exact formulas the Rust test recomputes):
    nar.safetensors     companion.layers.0.nar_self_attn.q_proj.lora_A/B.weight (rank 2,
                        .alpha 2), companion.layers.1.nar_mlp.down_proj.lora_A/B.weight, and
                        io.vae2llm.weight, a full replacement (W += s * (F - W))
    diff.safetensors    layers.1.mlp.up_proj.diff (W += s * D)
* A quantized base: q8/ holds a [64, 64] base quantized to Q8_0 by gguf-py (which mirrors
  ggml's reference quantizer), a LoRA pair, and the Q8_0 bytes of
  quantize(dequantize(base) + 0.75 * 2 * B @ A): what the merge engine must produce.
"""
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "lora"
# The adapters themselves: a directory `--adapters` can point at.
ADAPTERS = OUT / "adapters"
SEQ_A = [256, 72, 101, 108, 108, 111, 32, 259, 120, 260, 261, 270, 300, 262]
R, ALPHA = 4, 8.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def module_of(t):
    return "self_attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"


def read_backbone():
    import gguf

    r = gguf.GGUFReader(str(ROOT / "fixtures" / "ar" / "tiny-qwen3.gguf"))
    return {t.name: np.array(t.data, dtype=np.float32) for t in r.tensors}


def build(check):
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.numpy import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    w = read_backbone()
    layers = max(int(k.split(".")[2]) for k in w if k.startswith("model.layers.")) + 1
    cfg = Qwen3Config(
        vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=512,
        tie_word_embeddings=False, attention_bias=False,
    )
    model = Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    sd = model.state_dict()
    ar = {k: torch.from_numpy(w[k]) for k in sd}
    model.load_state_dict(ar, strict=True)
    lcfg = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, bias="none", init_lora_weights=False)
    pm = get_peft_model(model, lcfg)
    g = torch.Generator().manual_seed(7)
    factors = {}  # (layer, target) -> (A [r, in], B [out, r]) float32 numpy
    with torch.no_grad():
        for l in range(layers):
            for t in TARGETS:
                mod = getattr(getattr(pm.base_model.model.model.layers[l], module_of(t)), t)
                a = torch.randn(mod.lora_A["default"].weight.shape, generator=g) * 0.3
                b = torch.randn(mod.lora_B["default"].weight.shape, generator=g) * 0.3
                mod.lora_A["default"].weight.copy_(a)
                mod.lora_B["default"].weight.copy_(b)
                factors[(l, t)] = (a.numpy().astype(np.float32), b.numpy().astype(np.float32))
    if not check:
        pm.save_pretrained(ADAPTERS / "peft")
        # The base model's path means nothing here.
        c = json.loads((ADAPTERS / "peft" / "adapter_config.json").read_text())
        c["base_model_name_or_path"] = "yued/tiny-qwen3"
        (ADAPTERS / "peft" / "adapter_config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        for junk in (ADAPTERS / "peft").glob("README.md"):
            junk.unlink()
    merged = pm.merge_and_unload().eval()
    with torch.no_grad():
        logits = merged(torch.tensor([SEQ_A])).logits[0].numpy().astype(np.float32)
    msd = merged.state_dict()
    merged_w = {f"model.layers.{l}.{module_of(t)}.{t}.weight": msd[f"model.layers.{l}.{module_of(t)}.{t}.weight"].numpy().astype(np.float32) for l in range(layers) for t in TARGETS}

    # The other layouts, from the same factors.
    comfy, native, slider = {}, {}, {}
    for l in range(layers):
        for t in TARGETS:
            a, b = factors[(l, t)]
            m = f"model.layers.{l}.{module_of(t)}.{t}"
            comfy[f"text_encoders.yue2.transformer.{m}.lora_down.weight"] = a
            comfy[f"text_encoders.yue2.transformer.{m}.lora_up.weight"] = b
            comfy[f"text_encoders.yue2.transformer.{m}.alpha"] = np.array(ALPHA, dtype=np.float32)
            s = f"adapters.model-layers-{l}-{module_of(t)}-{t}"
            slider[f"{s}.lora_A.weight"] = a
            slider[f"{s}.lora_B.weight"] = b
        for fused, parts in [("self_attn.qkv_proj", ["q_proj", "k_proj", "v_proj"]), ("mlp.gate_up_proj", ["gate_proj", "up_proj"])]:
            As = [factors[(l, p)][0] for p in parts]
            Bs = [factors[(l, p)][1] for p in parts]
            A = np.concatenate(As, 0)  # [k * r, in]
            B = np.zeros((sum(x.shape[0] for x in Bs), len(parts) * R), dtype=np.float32)
            row = 0
            for i, x in enumerate(Bs):
                B[row : row + x.shape[0], i * R : (i + 1) * R] = x
                row += x.shape[0]
            native[f"layers.{l}.{fused}.lora_A.weight"] = A
            native[f"layers.{l}.{fused}.lora_B.weight"] = B
            # alpha / rank must stay 2 at rank k * r.
            native[f"layers.{l}.{fused}.alpha"] = np.array(ALPHA * len(parts), dtype=np.float32)
        for t in ["o_proj", "down_proj"]:
            a, b = factors[(l, t)]
            native[f"layers.{l}.{module_of(t)}.{t}.lora_A.weight"] = a
            native[f"layers.{l}.{module_of(t)}.{t}.lora_B.weight"] = b

    rng = np.random.default_rng(11)
    nar = {
        "companion.layers.0.nar_self_attn.q_proj.lora_A.weight": (rng.standard_normal((2, 64)) * 0.3).astype(np.float32),
        "companion.layers.0.nar_self_attn.q_proj.lora_B.weight": (rng.standard_normal((64, 2)) * 0.3).astype(np.float32),
        "companion.layers.0.nar_self_attn.q_proj.alpha": np.array(2.0, dtype=np.float32),
        "companion.layers.1.nar_mlp.down_proj.lora_A.weight": (rng.standard_normal((2, 96)) * 0.3).astype(np.float32),
        "companion.layers.1.nar_mlp.down_proj.lora_B.weight": (rng.standard_normal((64, 2)) * 0.3).astype(np.float32),
        "companion.layers.1.nar_mlp.down_proj.alpha": np.array(2.0, dtype=np.float32),
        "io.vae2llm.weight": (rng.standard_normal(w["vae2llm.weight"].shape) * 0.2).astype(np.float32),
    }
    diff = {"layers.1.mlp.up_proj.diff": (rng.standard_normal((96, 64)) * 0.05).astype(np.float32)}

    # A Q8_0 base and its merge, by gguf-py's numpy quantizer.
    import gguf
    from gguf import GGMLQuantizationType as Q

    base = (rng.standard_normal((64, 64)) * 0.5).astype(np.float32)
    qa = (rng.standard_normal((4, 64)) * 0.3).astype(np.float32)
    qb = (rng.standard_normal((64, 4)) * 0.3).astype(np.float32)
    base_q = gguf.quants.quantize(base, Q.Q8_0)
    deq = gguf.quants.dequantize(base_q, Q.Q8_0).astype(np.float32)
    want_q = gguf.quants.quantize((deq + np.float32(0.75 * 2.0) * (qb @ qa)).astype(np.float32), Q.Q8_0)

    if check:
        got = np.fromfile(OUT / "logits.f32", dtype="<f4").reshape(logits.shape)
        ok = np.array_equal(got, logits) and np.array_equal(np.fromfile(OUT / "q8" / "merged.q8_0", dtype=np.uint8), want_q.reshape(-1))
        print("fixtures/lora: " + ("identical" if ok else "DIFFERENT"))
        return 0 if ok else 1
    save_file(comfy, str(ADAPTERS / "comfy.safetensors"))
    save_file(native, str(ADAPTERS / "native.safetensors"), metadata={"lora_alpha": str(ALPHA)})
    save_file(slider, str(ADAPTERS / "slider.safetensors"), metadata={"ss_network_alpha": str(ALPHA), "ss_network_dim": str(R)})
    save_file(nar, str(ADAPTERS / "nar.safetensors"))
    save_file(diff, str(ADAPTERS / "diff.safetensors"))
    save_file(merged_w, str(OUT / "merged.safetensors"))
    logits.astype("<f4").tofile(OUT / "logits.f32")
    (OUT / "q8").mkdir(exist_ok=True)
    base_q.reshape(-1).tofile(OUT / "q8" / "base.q8_0")
    want_q.reshape(-1).tofile(OUT / "q8" / "merged.q8_0")
    save_file({"lora_A": qa, "lora_B": qb}, str(OUT / "q8" / "factors.safetensors"))
    cases = {
        "seq": SEQ_A, "rank": R, "alpha": ALPHA, "layers": layers, "targets": TARGETS,
        "q8": {"rows": 64, "cols": 64, "strength": 0.75, "alpha_over_rank": 2.0},
        "argmax": [int(i) for i in logits.argmax(-1)],
    }
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    ADAPTERS.mkdir(parents=True, exist_ok=True)
    sys.exit(build("--check" in sys.argv))
