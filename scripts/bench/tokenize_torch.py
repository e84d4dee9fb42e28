#!/usr/bin/env python3
"""The PyTorch side of `yued bench --only tokenize --torch-python PY`: the audio tokenizer
(MERT-v2 and its head) of scripts/ref/mert_reference.py at the configuration of the GGUF
files yued times (their `mert2.config_json` and `yue2-tokenizer.config_json`, given here as
JSON), on random float32 weights, in float32, on `--threads` threads: the reference's own
`tokenize` (MERT on each 30 s chunk up to the head's layer, the states resampled onto the 25 Hz
grid and standardised, the head over its windows). Prints {"times": [seconds per run, ...]} as JSON.

Needs torch (and numpy, safetensors, which the reference imports), never the test suite.
"""
import argparse
import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "ref"))
import mert_reference as M  # noqa: E402

# The reference builds its rotary angles in float64 (for its parity fixtures); here the
# rotated halves come back in the states' float32.
_rotary = M.rotary
M.rotary = lambda x, base: _rotary(x, base).to(x.dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", required=True, help="JSON: {\"mert\": {...}, \"head\": {...}}")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    cfg = json.loads(pathlib.Path(a.configs).read_text())
    M.MERT_CONFIG.update({k: v for k, v in cfg["mert"].items() if k in M.MERT_CONFIG})
    M.HEAD_CONFIG.update({k: v for k, v in cfg["head"].items() if k in M.HEAD_CONFIG})
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    w = M.mert_weights(g)
    head = M.Head()
    head.load_state_dict(M.head_weights(g))
    head.eval()
    n = int(a.seconds * M.RATE)
    x = torch.from_numpy(M.audio(n, 3)).float()
    times = []
    with torch.inference_mode():
        M.tokenize(w, head, x, torch.float32)  # warm-up
        for _ in range(max(1, a.reps)):
            t0 = time.perf_counter()
            codes = M.tokenize(w, head, x, torch.float32)[1]
            times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "codes": int(codes.numel()), "threads": a.threads}))


if __name__ == "__main__":
    main()
