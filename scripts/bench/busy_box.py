"""A song rendered on a box whose cores are busy with other work: `yued synth` of one demo song
per family, with 0, 1 and 2 other processes spinning on the CPU, at --threads 1 and 2; with a
second binary, the same runs of it alternate with this one's and each row gets their ratio.

Usage: python3 scripts/bench/busy_box.py YUED [BASELINE_YUED] [--reps 3] [--seconds 4]
       [--busy 0,1,2] [--threads 1,2] [--timeout 120]

Each binary writes its own tiny demo models (into a temporary folder). A run that does not end
within --timeout counts as that many seconds and is marked ">". The table: the median of the
reps per row, the baseline's beside it, and baseline / this.
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def busy(n):
    """n processes spinning on the CPU until killed (what another tenant's work looks like)."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def render(binary, models, request, out, threads, timeout):
    # The script sleeps in one blocking wait meanwhile: its output goes to a file, not to a pipe
    # this script would wake up to read, and no polling wait (subprocess.run's timeout polls).
    # Any other runnable thread is load: beside either, ggml's spinning barrier took 3-12x as long.
    with tempfile.TemporaryFile() as log:
        t = time.monotonic()
        argv = [binary, "synth", "--models", models, "--request", request, "--out", out, "--threads", str(threads)]
        p = subprocess.Popen(argv, stdout=log, stderr=log)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        code = p.wait()
        timer.cancel()
        took = time.monotonic() - t
        if took >= timeout:
            return timeout, True
        if code != 0:
            log.seek(0)
            sys.exit(f"{binary} synth failed: {log.read().decode(errors='replace')[-2000:]}")
    return took, False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("yued")
    ap.add_argument("baseline", nargs="?")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each song")
    ap.add_argument("--busy", default="0,1,2", help="counts of busy processes, comma separated")
    ap.add_argument("--threads", default="1,2", help="--threads values, comma separated")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take")
    a = ap.parse_args()
    bins = [("this", a.yued)] + ([("baseline", a.baseline)] if a.baseline else [])
    work = tempfile.mkdtemp(prefix="yued-busy-box-")
    atexit.register(shutil.rmtree, work, True)
    requests = {
        "yue2": {"style": "pop", "lyrics": "[verse]\nla la", "cot": "off", "duration": a.seconds, "seed": 3,
                 "lm_seed": 5, "output_format": "wav32"},
        "mm3": {"family": "mm3", "caption": "pop", "lyrics": "[verse]\nla la", "duration": a.seconds, "seed": 3,
                "lm_seed": 5, "output_format": "wav32"},
    }
    models = {}
    for name, b in bins:
        for fam in requests:
            d = os.path.join(work, f"{name}-{fam}")
            subprocess.run([b, "demo-model", "--family", fam, "--out", d], check=True, capture_output=True)
            models[name, fam] = d
    for fam, req in requests.items():
        with open(os.path.join(work, f"{fam}.json"), "w") as f:
            json.dump(req, f)
    cores = os.cpu_count()
    print(f"# {a.seconds:g} s demo songs (tiny, random weights) on {cores} cores, median of {a.reps}; "
          f"busy = other processes spinning on the CPU meanwhile")
    head = f"{'family':6} {'busy':>4} {'threads':>7} {'this (s)':>10}"
    if a.baseline:
        head += f" {'baseline (s)':>13} {'baseline / this':>16}"
    print(head)
    for fam in requests:
        for n in [int(x) for x in a.busy.split(",")]:
            for threads in [int(x) for x in a.threads.split(",")]:
                times = {name: [] for name, _ in bins}
                late = {name: False for name, _ in bins}
                spinners = busy(n)
                try:
                    time.sleep(0.5)
                    for _ in range(a.reps):
                        # One binary then the other, in turn: a noisy host moves both alike.
                        for name, b in bins:
                            out = os.path.join(work, f"{name}-{fam}.wav")
                            s, timed_out = render(b, models[name, fam], os.path.join(work, f"{fam}.json"), out,
                                                  threads, a.timeout)
                            times[name].append(s)
                            late[name] |= timed_out
                finally:
                    for p in spinners:
                        p.kill()
                        p.wait()
                med = {name: statistics.median(v) for name, v in times.items()}
                show = lambda name: (">" if late[name] else "") + f"{med[name]:.2f}"
                row = f"{fam:6} {n:>4} {threads:>7} {show('this'):>10}"
                if a.baseline:
                    row += f" {show('baseline'):>13} {med['baseline'] / med['this']:>15.2f}x"
                print(row, flush=True)


if __name__ == "__main__":
    main()
