#!/usr/bin/env python3
"""MiniMax Music 3 next to diffusers, on the same weights (run by scripts/bench/mm3-diffusers.sh).

    mm3_diffusers.py write --preset tiny|mid|full --dir CKPT     random weights, save_pretrained
    mm3_diffusers.py time --dir CKPT --threads N --reps R --json OUT
    mm3_diffusers.py table TORCH.json YUED.json                  the side-by-side table

`write` builds diffusers' MiniMaxMusic3ConditionEncoder, MiniMaxMusic3Transformer1DModel and
MiniMaxMusic3Vocoder with random weights and saves them in the published folder layout
(condition_encoder/, transformer/, vocoder/; float32, as published), which `yued convert mm3`
turns into the GGUFs yued loads: both sides then hold the same numbers.

Presets: `full` is the published configuration; `mid` is the published widths with 4 of the
DiT's 36 blocks (a DiT step costs ~36/4 times more at full depth, on both sides alike);
`tiny` is the test fixture's widths.

`time` measures what yued bench's `dit` and `vae` sections measure, with torch on the CPU
at the given thread count:
  * a guided Euler step at a full window (689 latents): diffusers' guider calls the
    transformer twice (conditional, then a zero condition): "split"; and both as one batch
    of 2: "batch";
  * the vocoder's decode of a window's latents, in ms per second of audio.
The median of `reps` runs after one unmeasured run.
"""
import json
import statistics
import sys
import time
from pathlib import Path

PRESETS = {
    "tiny": {
        "cond": dict(condition_hidden_dim=32, num_condition_layers=8, out_dim=16),
        "dit": dict(in_channels=8, condition_dim=16, num_layers=2, num_attention_heads=2, attention_head_dim=8, ff_inner_dim=32, rotary_dim=4, fourier_embedding_dim=16),
        "vocoder": dict(latent_channels=8, decoder_input_dim=16, decoder_hidden_dim=32, upsampling_ratios=(2, 2)),
    },
    "mid": {"cond": {}, "dit": dict(num_layers=4), "vocoder": {}},
    "full": {"cond": {}, "dit": {}, "vocoder": {}},
}
WINDOW_FRAMES = 200  # LM frames per window


def write(preset, out):
    import torch
    from diffusers import MiniMaxMusic3ConditionEncoder, MiniMaxMusic3Transformer1DModel, MiniMaxMusic3Vocoder

    torch.manual_seed(0)
    p = PRESETS[preset]
    out = Path(out)
    for folder, cls, kw in [
        ("condition_encoder", MiniMaxMusic3ConditionEncoder, p["cond"]),
        ("transformer", MiniMaxMusic3Transformer1DModel, p["dit"]),
        ("vocoder", MiniMaxMusic3Vocoder, p["vocoder"]),
    ]:
        if (out / folder / "config.json").exists():
            print(f"{out / folder}: kept")
            continue
        m = cls(**kw).to(torch.float32).eval()
        with torch.no_grad():
            # Defaults leave some projections at zero; random values everywhere instead, so
            # no kernel takes a shortcut on either side.
            for prm in m.parameters():
                prm.copy_(torch.randn_like(prm) * 0.02)
        m.save_pretrained(out / folder, safe_serialization=True)
        n = sum(x.numel() for x in m.parameters())
        print(f"{out / folder}: {cls.__name__}, {n / 1e6:.1f} M parameters")
        del m


def median_of(reps, f):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return {"median": statistics.median(ts), "min": min(ts), "max": max(ts)}


def time_all(ckpt, threads, reps, out):
    import torch
    from diffusers import MiniMaxMusic3ConditionEncoder, MiniMaxMusic3Transformer1DModel, MiniMaxMusic3Vocoder

    torch.set_num_threads(threads)
    ckpt = Path(ckpt)
    ce = MiniMaxMusic3ConditionEncoder.from_pretrained(ckpt / "condition_encoder", torch_dtype=torch.float32).eval()
    c = ce.config
    window = max(1, int(WINDOW_FRAMES * c.output_sampling_rate / c.input_sampling_rate * c.input_hop_length / c.output_hop_length))
    del ce
    rows = []
    dit = MiniMaxMusic3Transformer1DModel.from_pretrained(ckpt / "transformer", torch_dtype=torch.float32).eval()
    d = dit.config
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, d.in_channels, window, generator=g)
    cond = torch.randn(1, window, d.condition_dim, generator=g)
    t = torch.full((1,), 0.5)
    with torch.inference_mode():

        def split():
            vc = dit(hidden_states=x, timestep=t, encoder_hidden_states=cond, return_dict=False)[0]
            vu = dit(hidden_states=x, timestep=t, encoder_hidden_states=torch.zeros_like(cond), return_dict=False)[0]
            return vu + 1.7 * (vc - vu)

        x2, c2, t2 = torch.cat([x, x]), torch.cat([cond, torch.zeros_like(cond)]), torch.cat([t, t])

        def batch():
            v = dit(hidden_states=x2, timestep=t2, encoder_hidden_states=c2, return_dict=False)[0]
            return v[1:] + 1.7 * (v[:1] - v[1:])

        for name, f in [("batch", batch), ("split", split)]:
            st = median_of(reps, f)
            rows.append({"section": "dit", "kind": name, "unit": "ms", "stats": {k: v * 1000 for k, v in st.items()}, "note": f"{d.num_layers} blocks of {d.num_attention_heads * d.attention_head_dim}, {window} latents"})
            print(f"  diffusers dit {name}: {st['median'] * 1000:.1f} ms", file=sys.stderr)
    del dit
    voc = MiniMaxMusic3Vocoder.from_pretrained(ckpt / "vocoder", torch_dtype=torch.float32).eval()
    v = voc.config
    hop = 1
    for r in v.upsampling_ratios:
        hop *= r
    secs = window * hop / v.sampling_rate
    lat = torch.randn(1, v.latent_channels, window, generator=g)
    with torch.inference_mode():
        st = median_of(reps, lambda: voc(lat))
    rows.append({"section": "vae", "kind": "decode", "unit": "ms/s", "stats": {k: s * 1000 / secs for k, s in st.items()}, "note": f"{secs:.2f} s of stereo"})
    print(f"  diffusers vocoder: {st['median'] * 1000 / secs:.1f} ms per s of audio", file=sys.stderr)
    doc = {"torch": torch.__version__, "threads": threads, "reps": reps, "window": window, "rows": rows}
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")


def table(torch_json, yued_json):
    tj, yj = json.loads(Path(torch_json).read_text()), json.loads(Path(yued_json).read_text())

    def yued_row(section, kind):
        for r in yj["rows"]:
            if r["section"] != section:
                continue
            if section == "vae" or (kind == "batch") == ("batch of 2" in r["what"]):
                return r
        return None

    print(f"MiniMax Music 3 next to diffusers (torch {tj['torch']}), {tj['threads']} threads, median of {tj['reps']}, same weights")
    print(f"{'what':<58} {'yued':>10} {'diffusers':>10} {'unit':<6} {'diffusers / yued':>16}")
    names = {"batch": "DiT guided Euler step, the pair as a batch of 2", "split": "DiT guided Euler step, two calls (diffusers' guider)", "decode": "vocoder decode of a window"}
    for r in tj["rows"]:
        y = yued_row(r["section"], r["kind"])
        if y is None:
            continue
        a, b = y["median"], r["stats"]["median"]
        print(f"{names[r['kind']]:<58} {a:>10.1f} {b:>10.1f} {r['unit']:<6} {b / a:>15.2f}x")
    print(f"({tj['window']} latents per window; {yj['model']}; yued device {yj['device']})")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--preset", choices=sorted(PRESETS), default="mid")
    w.add_argument("--dir", required=True)
    t = sub.add_parser("time")
    t.add_argument("--dir", required=True)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--reps", type=int, default=3)
    t.add_argument("--json", required=True)
    tb = sub.add_parser("table")
    tb.add_argument("torch_json")
    tb.add_argument("yued_json")
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.preset, a.dir)
    elif a.cmd == "time":
        time_all(a.dir, a.threads, a.reps, a.json)
    else:
        table(a.torch_json, a.yued_json)
