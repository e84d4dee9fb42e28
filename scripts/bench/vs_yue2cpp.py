"""yued against yue2.cpp on one machine, the same files and the same song (scripts/bench/vs-yue2cpp.sh).

Both programs render one request from the command line, model loading included, one after the
other in each round (the order alternating), so a drifting machine weighs on both alike. yued
writes the full-size demo models (random weights at the published shapes, Q8_0 backbone, F32
VAE), which yue2.cpp's loader reads as they are. yue2.cpp picks its own CPU thread count (the
physical cores: hardware threads / 2); yued gets the same number with --threads unless THREADS is
set. Prints each round's wall times, the medians and their ratio, and how many semantic codes of
the song the two programs write alike before they first differ.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(cmd, log, env=None):
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    took = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"{cmd[0]} failed ({rc}); see {log}")
    return took


def codes(path):
    text = Path(path).read_text().strip()
    return [int(x) for x in text.split(",") if x.strip()]


def main():
    yue_synth, yued, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    seconds = float(os.environ.get("SECONDS_OF_SONG", "8"))
    rounds = int(os.environ.get("ROUNDS", "2"))
    steps = int(os.environ.get("STEPS", "8"))
    device = os.environ.get("YUED_DEVICE", "CPU")
    work.mkdir(parents=True, exist_ok=True)
    models = work / "models"
    model, vae = models / "yue2-demo-full.gguf", models / "yue2-demo-full-vae.gguf"
    if not (model.exists() and vae.exists()):
        subprocess.check_call([yued, "demo-model", "--preset", "full", "--out", str(models)])
    # Both files into the page cache, so that neither program pays the first read.
    for p in (model, vae):
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    request = {
        "style": "bench", "lyrics": "[verse] la la la", "cot": "off", "duration": seconds,
        "lm_seed": 1, "seed": 2, "steps": steps, "output_format": "wav16",
        "semantic_sampling": {"min_tokens": int(seconds * 25)},
    }
    req = work / "request.json"
    req.write_text(json.dumps(request))
    ref_cmd = [yue_synth, "--model", str(model), "--vae", str(vae), "--request", str(req)]
    times = {"yue2.cpp": [], "yued": []}
    threads = os.environ.get("THREADS")
    for r in range(rounds):
        order = ["yue2.cpp", "yued"] if r % 2 == 0 else ["yued", "yue2.cpp"]
        for who in order:
            if who == "yue2.cpp":
                log = work / f"yue2cpp-{r}.log"
                took = run(ref_cmd + ["--out", str(work / "yue2cpp.wav"), "--tokens", str(work / "yue2cpp.csv")], log)
                m = re.search(r"CPU threads: (\d+)", log.read_text())
                if threads is None and m:
                    threads = m.group(1)
            else:
                if threads is None:
                    threads = str(max(1, (os.cpu_count() or 2) // 2))
                log = work / f"yued-{r}.log"
                took = run([yued, "synth", "--model", str(model), "--vae", str(vae), "--request", str(req),
                            "--out", str(work / "yued.wav"), "--tokens", str(work / "yued.csv"),
                            "--threads", threads, "--device", device], log)
            times[who].append(took)
            print(f"round {r + 1}/{rounds}: {who:8} {took:7.1f} s", flush=True)
    a, b = codes(work / "yue2cpp.csv"), codes(work / "yued.csv")
    alike = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    ref, ours = statistics.median(times["yue2.cpp"]), statistics.median(times["yued"])
    print()
    print(f"| {seconds:.0f} s song, cot off, {steps} steps, {threads} threads, wall time with loading "
          f"| yue2.cpp | yued | yue2.cpp / yued |")
    print("|---|---|---|---|")
    for r in range(rounds):
        x, y = times["yue2.cpp"][r], times["yued"][r]
        print(f"| round {r + 1} | {x:.1f} s | {y:.1f} s | {x / y:.2f}x |")
    print(f"| median | {ref:.1f} s | {ours:.1f} s | **{ref / ours:.2f}x** |")
    print()
    print(f"semantic codes: yue2.cpp {len(a)}, yued {len(b)}; the first {alike} are the same codes")


if __name__ == "__main__":
    main()
