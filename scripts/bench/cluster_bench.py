"""Helper of scripts/bench/cluster.sh (Python's standard library only).

`jobs`: N songs on a single node and on a cluster's API node, taking turns; for each, the
time from the submit to the first binary frame of a WebSocket listener opened right after
it, and to the `done` event. `table`: the markdown table of those and of the other figures.
"""
import argparse
import json
import os
import select
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from chaos_fuzz import WsConn  # noqa: E402


def one_job(port, song):
    t0 = time.time()
    req = urllib.request.Request("http://127.0.0.1:%d/synth" % port, data=song.encode(), headers={"content-type": "application/json"})
    jid = json.load(urllib.request.urlopen(req))["id"]
    ws = WsConn(port, jid, slow=False)
    first = None
    while not ws.done and not ws.eof:
        select.select([ws.s], [], [], 1.0)
        ws.read_some()
        if first is None and ws.tiles > 0:
            first = time.time() - t0
        if time.time() - t0 > 600:
            raise SystemExit("job %s on port %d did not finish" % (jid, port))
    return {"first_audio": first, "done": time.time() - t0, "tiles": ws.tiles}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def cmd_jobs(a):
    out = {"single": [], "cluster": []}
    for i in range(a.jobs):
        # Taking turns keeps the two under the same machine conditions.
        for name, port in (("single", a.single), ("cluster", a.api)) if i % 2 == 0 else (("cluster", a.api), ("single", a.single)):
            out[name].append(one_job(port, a.song))
            print("%s job %d: %s" % (name, i, out[name][-1]), file=sys.stderr)
    json.dump(out, sys.stdout)


def histogram_quantiles(text, name, qs):
    buckets = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0
    res = []
    for q in qs:
        want = q * total
        res.append(next((le for le, c in buckets if c >= want), float("nan")) if total else float("nan"))
    return total, res


def cmd_table(a):
    jobs = json.load(open(a.jobs_json))
    print("| figure | single node | cluster (API node + 1 worker) | cluster / single |")
    print("|---|---|---|---|")
    for key, label in (("first_audio", "submit -> first audio frame"), ("done", "submit -> done")):
        for p in (50, 99):
            s = pct([j[key] for j in jobs["single"]], p)
            c = pct([j[key] for j in jobs["cluster"]], p)
            print("| %s, p%d (%d jobs each) | %.3f s | %.3f s | %.2f |" % (label, p, len(jobs["single"]), s, c, c / s))
    total, (p50, p99) = histogram_quantiles(open(a.api_metrics).read(), "yued_cluster_tile_latency_seconds", (0.5, 0.99))
    print("| tile latency, pipeline -> listener through JetStream (%d live tiles; bucket bounds) | - | p50 <= %.4f s, p99 <= %.4f s | - |" % (total, p50, p99))
    ls, la = json.load(open(a.load_single)), json.load(open(a.load_api))
    for k in ("p50_ms", "p99_ms"):
        print("| GET /job?id= at %d req/s while a song renders, %s | %.2f ms | %.2f ms | %.2f |" % (a.rps, k[:3], ls[k], la[k], la[k] / ls[k]))
    print("| GET /job?id= achieved rate | %.0f req/s | %.0f req/s | - |" % (ls["achieved_rps"], la["achieved_rps"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("jobs")
    j.add_argument("--single", type=int, required=True)
    j.add_argument("--api", type=int, required=True)
    j.add_argument("--jobs", type=int, default=20)
    j.add_argument("--song", required=True)
    t = sub.add_parser("table")
    for f in ("--jobs-json", "--load-single", "--load-api", "--api-metrics"):
        t.add_argument(f, required=True)
    t.add_argument("--rps", type=int, default=1000)
    a = ap.parse_args()
    {"jobs": cmd_jobs, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
