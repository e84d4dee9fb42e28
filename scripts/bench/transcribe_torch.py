#!/usr/bin/env python3
"""The PyTorch side of `yued bench --only transcribe --torch-python PY`: the SheetSage2
transcriber of scripts/ref/sheetsage2_reference.py at the configuration of the GGUF files yued
times (their `mert2.config_json` and `sheetsage2.config_json`, given here as JSON), on random
float32 weights, in float32, on `--threads` threads. A run is the reference's window loop
(`transcribe` without its parity checks): per window of the plan, MERT over the window's audio
padded to the head's window (the head's LoRA merged into it at load), the softmax mix of its
states and the memory projection; the overlap prefix; greedy decoding under the reference's
grammar to eos, the stop time or the token budget; the events decoded, accepted and stitched.

Two departures from the reference, both in PyTorch's favour and neither changing a number:
the reference's StepDecoder appends each step's keys and values to a list and concatenates
the list every step (quadratic in the tokens, fine for its 384-token fixtures); here the same
step writes them into a cache allocated once for the budget. And the reference's traces
(logits, margins, hidden states) are not kept.

Prints {"times": [seconds per run], "tokens": [tokens drawn per window, last run], "runs":
[{"total", "encode", "decode", "steps", "tokens"}]} as JSON; `steps` counts decoder steps as
yued does (the tokens of each window's sequence but the last). Progress goes to stderr.

With `--steps N --frames F`, times decoder steps alone instead (random weights draw eos when
they happen to, so a recording's tokens differ between implementations): N steps from an empty
cache at a memory of F frames, each feeding the last step's argmax, after a warm-up; prints
{"step_ms": [milliseconds a step, per run]}.

Needs torch, numpy and safetensors (the reference imports them), never the test suite.
"""
import argparse
import json
import math
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "ref"))
import sheetsage2_reference as S  # noqa: E402
import mert_reference as mr  # noqa: E402  (the reference's MERT forward, imported by S too)

# The MERT reference builds its rotary angles in float64 (for its parity fixtures); here the
# rotated halves come back in the states' float32.
_rotary = mr.rotary
mr.rotary = lambda x, base: _rotary(x, base).to(x.dtype)

RATE = S.RATE
LONG_RUN_S = 20.0  # as yued's bench: a warm-up longer than this counts as the first run


def configure(cfg):
    """The reference's module constants set to the files' configuration; the vocabulary."""
    mr.MERT_CONFIG.update({k: v for k, v in cfg["mert"].items() if k in mr.MERT_CONFIG})
    h = cfg["head"]
    S.WINDOW, S.TIME_HZ = float(h["input_audio_length"]), int(h["time_hz"])
    S.MAX_OUT, S.D_MODEL, S.D_INTER = h["max_output_seq_len"], h["hidden_size"], h["intermediate_size"]
    S.N_DEC, S.N_HEADS = h["decoder_layers"], h["num_attention_heads"]
    S.LORA_RANK, S.LORA_ALPHA = h["lora_rank"], float(h["lora_alpha"])
    S.OVERLAP, S.LOOKAHEAD = 2.0 * S.WINDOW / 3.0, S.WINDOW / 3.0
    vocab = S.Vocab(S.WINDOW, S.TIME_HZ)
    assert vocab.n_tokens == h["vocab_size"], (vocab.n_tokens, h["vocab_size"])
    return vocab


def head_weights(vocab, g):
    """Random float32 head weights under the checkpoint's names (S.head_weights shapes its
    tiny fixture head by hand; here plain random values, as yued's demo head has)."""
    d, ff, dm, layers = S.D_MODEL, S.D_INTER, mr.MERT_CONFIG["hidden_size"], mr.MERT_CONFIG["num_hidden_layers"]
    w = {}

    def rnd(shape, scale):
        return torch.randn(shape, generator=g) * scale

    def lin(name, cin, cout):
        w[f"{name}.weight"], w[f"{name}.bias"] = rnd((cout, cin), 1.0 / math.sqrt(cin)), rnd((cout,), 0.05)

    def ln(name):
        w[f"{name}.weight"], w[f"{name}.bias"] = 1.0 + rnd((d,), 0.1), rnd((d,), 0.1)

    w["layer_weight"] = rnd((layers + 1,), 1.0)
    lin("encoder_projection", dm, d)
    w["token_embedding.weight"] = rnd((vocab.n_tokens, d), 1.0 / math.sqrt(d))
    w["decoder.embed_positions.weight"] = rnd((S.MAX_OUT + 2, d), 1.0 / math.sqrt(d))
    ln("decoder.layernorm_embedding")
    for l in range(S.N_DEC):
        p = f"decoder.layers.{l}"
        for att in ("self_attn", "encoder_attn"):
            for n in ("q", "k", "v", "out"):
                lin(f"{p}.{att}.{n}_proj", d, d)
            ln(f"{p}.{att}_layer_norm")
        lin(f"{p}.fc1", d, ff)
        lin(f"{p}.fc2", ff, d)
        ln(f"{p}.final_layer_norm")
    for l in range(layers):
        for n in ("query", "key", "value", "out"):
            m = f"adapter.layers.{l}.attn.{n}_proj"
            w[f"{m}.lora_A.weight"] = rnd((S.LORA_RANK, dm), 1.0 / math.sqrt(dm))
            w[f"{m}.lora_B.weight"] = rnd((dm, S.LORA_RANK), 0.1)
    return w


def merged_mert(head, g):
    """Random MERT weights with the head's LoRA merged (W += alpha / rank * B @ A), as yued loads."""
    w = mr.mert_weights(g)
    for l in range(mr.MERT_CONFIG["num_hidden_layers"]):
        for n in ("query", "key", "value", "out"):
            m = f"adapter.layers.{l}.attn.{n}_proj"
            a, b = head[f"{m}.lora_A.weight"], head[f"{m}.lora_B.weight"]
            w[f"layers.{l}.attn.{n}_proj.weight"] += (S.LORA_ALPHA / S.LORA_RANK) * (b @ a)
    return w


def encode(mert_w, head, segment):
    """S._encode in float32: MERT's states, their softmax mix, the memory projection."""
    _, _, states = mr.mert(mert_w, torch.from_numpy(segment), mr.MERT_CONFIG["num_hidden_layers"])
    weights = torch.softmax(head["layer_weight"], dim=0)
    mixed = states[0] * weights[0]
    for l in range(1, len(states)):
        mixed = mixed + states[l] * weights[l]
    return F.linear(mixed, head["encoder_projection.weight"], head["encoder_projection.bias"])


class CachedDecoder(S.StepDecoder):
    """S.StepDecoder's step with its self-attention keys and values written into a cache
    allocated once for the budget instead of concatenated every step."""

    def __init__(self, head, memory):
        super().__init__(head, memory)
        shape = (S.N_HEADS, S.MAX_OUT, S.D_MODEL // S.N_HEADS)
        self.kc = [torch.empty(shape) for _ in range(S.N_DEC)]
        self.vc = [torch.empty(shape) for _ in range(S.N_DEC)]

    def step(self, token):
        s, w, n = (S.D_MODEL // S.N_HEADS) ** -0.5, self.w, self.pos + 1
        h = w["token_embedding.weight"][token][None] + w["decoder.embed_positions.weight"][self.pos + 2][None]
        h = self._ln("decoder.layernorm_embedding", h)
        for l in range(S.N_DEC):
            p = f"decoder.layers.{l}"
            q = self._heads(self._lin(f"{p}.self_attn.q_proj", h) * s)
            self.kc[l][:, self.pos] = self._heads(self._lin(f"{p}.self_attn.k_proj", h))[:, 0]
            self.vc[l][:, self.pos] = self._heads(self._lin(f"{p}.self_attn.v_proj", h))[:, 0]
            a = self._attend(q, self.kc[l][:, :n], self.vc[l][:, :n])
            h = self._ln(f"{p}.self_attn_layer_norm", h + self._lin(f"{p}.self_attn.out_proj", a))
            q = self._heads(self._lin(f"{p}.encoder_attn.q_proj", h) * s)
            a = self._attend(q, self.mk[l], self.mv[l])
            h = self._ln(f"{p}.encoder_attn_layer_norm", h + self._lin(f"{p}.encoder_attn.out_proj", a))
            f = self._lin(f"{p}.fc2", F.gelu(self._lin(f"{p}.fc1", h)))
            h = self._ln(f"{p}.final_layer_norm", h + f)
        self.pos = n
        return (h @ w["token_embedding.weight"].T)[0]


def generate(vocab, head, memory, prefix, stop_time):
    """S.generate without its traces: the prefix fed, then greedy under the grammar until eos,
    a time token at or past `stop_time`, or the budget."""
    dec = CachedDecoder(head, memory)
    tokens = list(prefix)
    for t in prefix[:-1]:
        dec.step(t)
    g = S.Grammar(vocab)
    for t in prefix[prefix.index(vocab.out) + 1:]:
        g.update(t)
    token, time0 = prefix[-1], vocab.start("time")
    while len(tokens) < S.MAX_OUT:
        logits = dec.step(token)
        token = int(torch.argmax(logits.masked_fill(~g.allowed(), -math.inf)))
        tokens.append(token)
        if g.update(token):
            break
        if vocab.kind(token) == "time" and (token - time0) / vocab.time_hz >= stop_time:
            break
    if tokens[-1] != vocab.eos:
        tokens.append(vocab.eos)
    return tokens


def transcribe(vocab, mert_w, head, samples):
    """S.transcribe without its checks and probes, each window's encoding and decoding timed."""
    n, t_start = len(samples), time.perf_counter()
    duration, window = n / RATE, S.lround(S.WINDOW * RATE)
    stitched, encode_s, decode_s, steps, drawn = [], 0.0, 0.0, 0, []
    plan_all = S.window_plan(duration)
    refused = None
    for index, plan in enumerate(plan_all):
        t0 = time.perf_counter()
        prefix, base = vocab.task_prefix(), 0
        if index > 0:
            overlap, b = S.overlap_prefix(vocab, stitched, plan["start"], plan["prefix_end"])
            if overlap is not None:
                if len(overlap) >= S.MAX_OUT - 128:
                    # The reference's rule, checked before the encoding as yued checks it.
                    refused = (f"window {index + 1} refused: Overlap prefix fills the context "
                               f"({len(overlap)} tokens of {S.MAX_OUT})")
                    print(f"  torch: {refused}", file=sys.stderr, flush=True)
                    break
                prefix, base = overlap, b
        offset = S.lround(plan["start"] * RATE)
        avail = min(window, n - offset)
        segment = np.zeros(window, dtype=np.float32)
        segment[:avail] = samples[offset:offset + avail]
        memory = encode(mert_w, head, segment)
        t1 = time.perf_counter()
        tokens = generate(vocab, head, memory, prefix, plan["stop_time"])
        events, anchors = S.decode_events(vocab, tokens)
        lookup, _ = S.time_map(anchors)
        accepted = S.accept(events, lookup, plan["start"], plan["accept_start"], plan["accept_end"], duration, index,
                            base)
        stitched = sorted(stitched + accepted, key=lambda e: (e["time"], e["global_subbeat"]))
        t2 = time.perf_counter()
        encode_s, decode_s = encode_s + t1 - t0, decode_s + t2 - t1
        steps += len(tokens) - 1
        drawn.append(len(tokens) - len(prefix))
        print(f"  torch: window {index + 1}/{len(plan_all)}: encoded in {t1 - t0:.1f} s, {drawn[-1]} tokens "
              f"in {t2 - t1:.1f} s", file=sys.stderr, flush=True)
    return {"total": time.perf_counter() - t_start, "encode": encode_s, "decode": decode_s, "steps": steps,
            "tokens": drawn, "windows": len(plan_all), "refused": refused}


def step_ms(vocab, head, frames, steps):
    """Milliseconds a decoder step over `steps` tokens fed from an empty cache (each the last
    step's argmax) at a memory of `frames` rows, the cross keys and values made beforehand
    (as yued's bench times its steps)."""
    dec = CachedDecoder(head, torch.zeros(frames, S.D_MODEL))
    token = vocab.sos
    t0 = time.perf_counter()
    for _ in range(steps):
        token = int(torch.argmax(dec.step(token)))
    return 1e3 * (time.perf_counter() - t0) / steps


def recording(seconds):
    """A slow sweep and a fixed tone over a little noise, 24 kHz (as yued's bench writes it)."""
    t = np.arange(int(seconds * RATE), dtype=np.float64) / RATE
    noise = (np.random.default_rng(1).random(len(t)) - 0.5) * 0.05
    x = 0.3 * np.sin(2 * np.pi * (220.0 + 0.5 * (t % 60.0)) * t) + 0.2 * np.sin(t * 1100.0) + noise
    return x.astype(np.float32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", required=True, help="JSON: {\"mert\": {...}, \"head\": {...}}")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--steps", type=int, help="time this many decoder steps instead of a recording")
    p.add_argument("--frames", type=int, help="with --steps: the memory's frames")
    a = p.parse_args()
    vocab = configure(json.loads(pathlib.Path(a.configs).read_text()))
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    head = head_weights(vocab, g)
    if a.steps:
        with torch.inference_mode():
            ms = [step_ms(vocab, head, a.frames, a.steps) for _ in range(max(1, a.reps) + 1)][1:]  # a warm-up first
        print(json.dumps({"step_ms": ms, "steps": a.steps, "frames": a.frames, "threads": a.threads}))
        return
    mert_w = merged_mert(head, g)
    samples = recording(a.seconds)
    runs = []
    with torch.inference_mode():
        warm = transcribe(vocab, mert_w, head, samples)
        if warm["total"] > LONG_RUN_S:
            runs.append(warm)
        while len(runs) < max(1, a.reps):
            runs.append(transcribe(vocab, mert_w, head, samples))
    print(json.dumps({"times": [r["total"] for r in runs], "tokens": runs[-1]["tokens"], "runs": runs,
                      "threads": a.threads}))


if __name__ == "__main__":
    main()
