#!/usr/bin/env python3
"""The helper of scripts/bench/chaos.sh (Python standard library only).

Subcommands, each run against its own daemon(s) on loopback and appending its table rows
(JSON lines: figure, ok, result, detail) to --rows:
  kills   kill -9 at random points across N jobs of both families, restart on the same data
          dir after each, then every job done once, its audio byte-identical to a reference run
  fuzz    mutated /synth bodies and /vae uploads (seeded): answers by class, no 5xx, the
          daemon alive, every 4xx a JSON {"error": "..."}
  ws      N WebSocket listeners on one job (some reading 1 byte/s): render time against the
          same job without listeners, slow listeners dropped with a close reason, RSS
  batch-kills  rounds of four jobs of both families decoding together, one kill -9 a round
          at a random moment, restart: every job done once, byte-identical to a reference run
  table   prints the rows as one markdown table; exit status 1 when a row failed
"""
import argparse
import array
import base64
import collections
import http.client
import io
import json
import math
import os
import random
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import wave

TERMINAL = ("done", "failed", "cancelled")


def log(*a):
    print("[chaos]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# The daemon and HTTP


START_NICE = os.nice(0)


def _normal_priority():
    """The daemon runs at the priority the script was started with, whatever the helper's."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, START_NICE)
    except OSError:
        pass


class Daemon:
    """One `yued serve` on loopback; its pid goes to the pid file the shell's trap reads."""

    def __init__(self, a, name, port, extra=(), env=None):
        self.bin, self.port, self.pidfile, self.threads = a.bin, port, a.pidfile, a.threads
        self.data = os.path.join(a.work, name)
        self.log = self.data + ".log"
        self.extra, self.env = list(extra), env
        self.proc = None
        os.makedirs(self.data, exist_ok=True)

    def start(self, timeout=120):
        env = dict(os.environ)
        env.update(self.env or {})
        self.log_offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [self.bin, "serve", "--port", str(self.port), "--data-dir", self.data, "--threads", str(self.threads), "--log-format", "json"] + self.extra,
                stdout=f, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, preexec_fn=_normal_priority)
        with open(self.pidfile, "a") as f:
            f.write("%d\n" % self.proc.pid)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("yued exited at start (%s); see %s" % (self.proc.returncode, self.log))
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                r = c.getresponse()
                body = r.read()
                c.close()
                if r.status == 200 and json.loads(body)["ready"]:
                    return time.time() - t0
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                pass
            time.sleep(0.02)
        raise RuntimeError("yued did not become ready in %d s" % timeout)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            os.kill(self.proc.pid, 0)
            return True
        except OSError:
            return False

    def kill9(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def log_lines_since_start(self):
        """The JSON log lines this start of the daemon wrote."""
        out = []
        with open(self.log, "rb") as f:
            f.seek(self.log_offset)
            for raw in f:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    pass
        return out

    def all_log_lines(self):
        out = []
        with open(self.log, "rb") as f:
            for raw in f:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    pass
        return out


class Http:
    """A keep-alive HTTP/1.1 connection that reconnects once when the server closed it."""

    def __init__(self, port, timeout=60):
        self.port, self.timeout, self.c = port, timeout, None

    def close(self):
        if self.c is not None:
            self.c.close()
        self.c = None

    def req(self, method, path, body=None, headers=None, retry=True):
        for attempt in (0, 1):
            try:
                if self.c is None:
                    self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                self.c.request(method, path, body=body, headers=headers or {})
                r = self.c.getresponse()
                data = r.read()
                hdrs = {k.lower(): v for k, v in r.getheaders()}
                if hdrs.get("connection", "").lower() == "close":
                    self.close()
                return r.status, hdrs, data
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 1 or not retry:
                    raise

    def json(self, method, path, body=None):
        st, _, data = self.req(method, path, body)
        return st, json.loads(data) if data else None


def parse_multipart(content_type, data):
    """[(headers dict, body bytes)] of a multipart body."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise ValueError("no boundary in %r" % content_type)
    delim = b"--" + m.group(1).encode()
    parts = []
    for seg in data.split(delim)[1:]:
        if seg.startswith(b"--"):
            break
        if seg.startswith(b"\r\n"):
            seg = seg[2:]
        head, _, body = seg.partition(b"\r\n\r\n")
        if body.endswith(b"\r\n"):
            body = body[:-2]
        hdrs = {}
        for line in head.split(b"\r\n"):
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        parts.append((hdrs, body))
    return parts


def add_row(a, figure, ok, result, detail):
    with open(a.rows, "a") as f:
        f.write(json.dumps({"figure": figure, "ok": bool(ok), "result": result, "detail": detail}) + "\n")
    log("%s: %s — %s" % (figure, result, detail))


# ---------------------------------------------------------------------------------------
# 1. kill -9 at random points

STAGE_ORDER = {"plan": 1, "semantic": 1, "synth": 2, "decode": 3, "encode": 4}
TARGET_ORDER = {"ar": 1, "synth": 2, "decode": 3, "encode": 4}
# MiniMax lm_seeds whose songs on the tiny demo run past 12 s (so each stage lasts a while).
MM3_LM_SEEDS = [1, 4, 7, 8, 9, 10, 11, 14, 15, 16]


def chaos_requests(n, rng):
    states = (["queued", "ar", "synth", "decode", "encode"] * (n // 5 + 1))[:n]
    rng.shuffle(states)
    reqs = []
    for i in range(n):
        # A FLAC encode lasts long enough (~0.1 s) to be hit; the others mix both.
        fmt = "flac" if states[i] == "encode" else rng.choice(["wav16", "flac"])
        if i % 2 == 0:
            # YuE2 decodes each 512-frame (20.5 s) VAE tile as its chunks land, inside
            # `synth`; the `decode` stage is the last tile's tail, long enough to be hit only
            # on a song past one tile.
            secs = 26 if states[i] == "decode" else 10
            reqs.append({"style": "chaos %d" % i, "lyrics": "[verse] la la\n[chorus] oh", "cot": "off", "duration": secs, "steps": 4,
                         "output_format": fmt, "seed": 100 + i, "lm_seed": 200 + i, "semantic_sampling": {"min_tokens": 25 * secs}})
        else:
            reqs.append({"family": "mm3", "caption": "x", "lyrics": "[verse] la", "duration": 12, "steps": 4, "seed": 100 + i,
                         "lm_seed": MM3_LM_SEEDS[(i // 2) % len(MM3_LM_SEEDS)], "output_format": fmt})
    return states, reqs


BLOCKER = {"style": "blocker", "lyrics": "[verse] la", "cot": "off", "duration": 60, "steps": 4, "output_format": "wav16",
           "seed": 1, "lm_seed": 2, "semantic_sampling": {"min_tokens": 1500}}


def submit(h, req, tries=600):
    body = json.dumps(req).encode()
    for _ in range(tries):
        st, hd, data = h.req("POST", "/synth", body, {"Content-Type": "application/json"})
        if st == 200:
            return json.loads(data)["id"]
        if st == 429:
            time.sleep(0.2)
            continue
        raise RuntimeError("submit answered %d: %s" % (st, data[:300]))
    raise RuntimeError("submit refused at the cap for too long")


def wait_all(h, ids, timeout):
    t0 = time.time()
    last = {}
    while time.time() - t0 < timeout:
        last = {}
        for i in ids:
            st, s = h.json("GET", "/job?id=" + i)
            last[i] = s["status"] if st == 200 else "http %d" % st
        if all(v in TERMINAL or v.startswith("http") for v in last.values()):
            return last
        time.sleep(0.25)
    return last


def fetch_result(h, jid):
    st, hd, data = h.req("GET", "/job?id=%s&result=1" % jid)
    if st != 200:
        return None
    parts = parse_multipart(hd.get("content-type", ""), data)
    audio = [b for (hh, b) in parts if hh.get("content-type", "").startswith("audio/")]
    js = [b for (hh, b) in parts if hh.get("content-type", "").startswith("application/json")]
    return {"boundary": hd.get("content-type", "").split("boundary=")[-1], "audio": audio, "json": js,
            "audio_ct": [hh.get("content-type") for (hh, b) in parts if hh.get("content-type", "").startswith("audio/")]}


def pcm_of(a, blob, ct, tag):
    """Interleaved int16 samples of a result's audio (FLAC through `yued audio-convert`)."""
    path = os.path.join(a.work, "cmp-" + tag)
    if "wav" not in ct:
        src = path + ".flac"
        with open(src, "wb") as f:
            f.write(blob)
        subprocess.run([a.bin, "audio-convert", "-i", src, "-o", path + ".wav"], check=True, capture_output=True)
        with open(path + ".wav", "rb") as f:
            blob = f.read()
    with wave.open(io.BytesIO(blob)) as w:
        x = array.array("h")
        x.frombytes(w.readframes(w.getnframes()))
    return x


def compare_pcm(x, y):
    """(correlation, largest |difference| in LSB, samples that differ, samples compared)."""
    n = min(len(x), len(y))
    if n == 0:
        return float("nan"), 0, 0, 0
    sx = sy = sxx = syy = sxy = 0.0
    maxd = nd = 0
    for i in range(n):
        u, v = x[i], y[i]
        sx += u
        sy += v
        sxx += u * u
        syy += v * v
        sxy += u * v
        dd = abs(u - v)
        if dd:
            nd += 1
            if dd > maxd:
                maxd = dd
    cov = sxy - sx * sy / n
    den = math.sqrt(max(sxx - sx * sx / n, 0) * max(syy - sy * sy / n, 0))
    return (cov / den if den > 0 else float("nan")), maxd, nd, n


def restore_lines(lines):
    """The journal restore's words in a daemon's JSON log lines, in order: ("resumed", fields)
    for a job resumed after a kill, ("failed", fields) for one not resumed again."""
    for line in lines:
        fields = line.get("fields", {})
        msg = fields.get("message", "")
        if "resuming a job interrupted" in msg:
            yield "resumed", fields
        elif "not resumed again" in msg:
            yield "failed", fields


def cmd_kills(a):
    t_start = time.time()
    rng = random.Random(a.seed)
    n = a.jobs
    states, reqs = chaos_requests(n, rng)
    fam = ["yue2" if "family" not in r else "mm3" for r in reqs]
    cap = ["--admission-cap", str(n + 8)]

    # Reference: the same requests on a fresh daemon, no kills.
    ref_d = Daemon(a, "kills-ref", a.port, cap)
    ref_d.start()
    h = Http(a.port)
    t0 = time.time()
    ref_ids = [submit(h, r) for r in reqs]
    final = wait_all(h, ref_ids, 900)
    ref = [fetch_result(h, i) if final.get(i) == "done" else None for i in ref_ids]
    ref_secs = time.time() - t0
    h.close()
    ref_d.stop()
    ref_bad = [k for k in range(n) if ref[k] is None]
    log("reference: %d jobs in %.1f s, %d not done" % (n, ref_secs, len(ref_bad)))

    # The chaos run.
    d = Daemon(a, "kills", a.port + 1, cap)
    d.start()
    h = Http(d.port)
    ids = [None] * n
    blockers = []
    hit = set()          # jobs that were running at some kill
    kills = []           # one dict per kill
    restarts = []
    resumed_log = collections.Counter()
    failed_at_start = []

    def status(jid):
        st, s = h.json("GET", "/job?id=" + jid)
        return s if st == 200 else {"status": "http %d" % st}

    def running():
        st, s = h.json("GET", "/status")
        return s["queue"]["running"], s["queue"]["queued"]

    def kill_and_restart(k, rec):
        d.kill9()
        h.close()
        hit.update(rec["running"])
        restarts.append(d.start())
        for kind, fields in restore_lines(d.log_lines_since_start()):
            if kind == "resumed":
                rec.setdefault("resumed", []).append(fields.get("job"))
                resumed_log[fields.get("job")] += 1
            else:
                failed_at_start.append(fields.get("job"))
        kills.append(rec)
        log("kill %2d: job %d (%s, target %s) landed in %s; running %s; resumed %s" % (
            k, k, fam[k], states[k], rec["landed"], rec["running"], rec.get("resumed", [])))

    for k in range(n):
        target = states[k]
        if target == "queued":
            # Job k waits behind a blocker (a job outside the N): the kill finds k queued and
            # only the blocker running; after the restart the blocker is cancelled.
            t0 = time.time()
            while time.time() - t0 < 600:
                run, q = running()
                if not run and q == 0:
                    break
                time.sleep(0.05)
            b = submit(h, BLOCKER)
            blockers.append(b)
            t0 = time.time()
            while status(b)["status"] != "running" and time.time() - t0 < 120:
                time.sleep(0.01)
            ids[k] = submit(h, reqs[k])
            time.sleep(rng.uniform(0.2, 1.0))
            run, _ = running()
            s = status(ids[k])
            bs = status(b)
            rec = {"job": k, "target": target, "landed": s["status"] if s["status"] != "running" else s.get("stage"),
                   "running": run, "blocker_stage": bs.get("stage")}
            kill_and_restart(k, rec)
            st, _ = h.json("POST", "/job?id=%s&cancel=1" % b)
            rec["blocker_cancel"] = st
            continue
        if ids[k] is None:
            ids[k] = submit(h, reqs[k])
        if target == "ar" and k + 1 < n and states[k + 1] != "queued" and ids[k + 1] is None:
            # Queued behind k during its kill (only for an AR kill: the next job's AR may
            # start while k encodes, and a kill then would count for both).
            ids[k + 1] = submit(h, reqs[k + 1])
        tgt = TARGET_ORDER[target]
        thr = rng.uniform(0.1, 0.9) if target in ("ar", "synth") else 0.0
        if target == "decode" and fam[k] == "mm3":
            # MiniMax has no separate decode stage: each window is rendered and decoded
            # inside `synth`; aim at its second half.
            tgt, thr = 2, rng.uniform(0.5, 0.95)
        jid = ids[k]
        rec = None
        t0 = time.time()
        while time.time() - t0 < 600:
            s = status(jid)
            if s["status"] in TERMINAL or s["status"].startswith("http"):
                rec = {"job": k, "target": target, "landed": "missed (job %s first)" % s["status"], "running": []}
                kills.append(rec)
                log("kill %2d: job %d (%s, target %s): %s" % (k, k, fam[k], target, rec["landed"]))
                break
            stg = s.get("stage")
            if s["status"] == "running" and stg in STAGE_ORDER:
                cur, prog = STAGE_ORDER[stg], s.get("progress") or 0.0
                if cur > tgt or (cur == tgt and prog >= thr):
                    # Only this job in the stages (a job running at two kills is failed by
                    # design), and the stage logged is the one read last before the kill.
                    run, _ = running()
                    s = status(jid)
                    if run != [jid] or s["status"] != "running":
                        time.sleep(0.002)
                        continue
                    rec = {"job": k, "target": target, "landed": s.get("stage") or "running", "progress": round(s.get("progress") or 0.0, 3), "running": run}
                    kill_and_restart(k, rec)
                    break
            time.sleep(0.002)
        if rec is None:
            rec = {"job": k, "target": target, "landed": "missed (timeout)", "running": []}
            kills.append(rec)

    final = wait_all(h, ids, 900)
    st, hs = h.json("GET", "/status")
    got = [fetch_result(h, i) if final.get(i) == "done" else None for i in ids]
    resumed_in = {r["job"]: r["landed"] for r in kills}
    # Diagnosis for MiniMax jobs resumed from their journaled codes: the reference's own
    # replay part (its codes and seeds) submitted again, no kill, on this daemon.
    replays = {}
    for k in range(n):
        if fam[k] == "mm3" and resumed_in.get(k) in ("synth", "decode", "encode") and ref[k] and got[k] and got[k]["audio"] != ref[k]["audio"]:
            rid = submit(h, json.loads(ref[k]["json"][0]))
            if wait_all(h, [rid], 300).get(rid) == "done":
                replays[k] = fetch_result(h, rid)
    chaos_secs = time.time() - t_start - ref_secs
    pid_ok = d.alive()
    h.close()
    d.stop()

    # Figures.
    done = sum(1 for i in ids if final.get(i) == "done")
    not_done = ["job %d (%s): %s" % (k, ids[k], final.get(ids[k])) for k in range(n) if final.get(ids[k]) != "done"]
    all_ids = ids + blockers
    unique = len(set(all_ids)) == len(all_ids)
    known, stored = hs["queue"]["jobs_known"], hs["queue"]["results_stored"]
    one_track = all(g is not None and len(g["audio"]) == 1 and len(g["json"]) == 1 for g in got)
    twice = [j for j, c in resumed_log.items() if c > 1]
    landed = collections.Counter()
    for r in kills:
        landed[r["landed"]] += 1
    real_kills = sum(1 for r in kills if not r["landed"].startswith("missed"))

    same, json_same, differ, mm3_synth_differ = 0, 0, [], []
    for k in range(n):
        g, rf = got[k], ref[k]
        if g is None or rf is None or len(g["audio"]) != 1 or len(rf["audio"]) != 1:
            differ.append("job %d: no result to compare" % k)
            continue
        if g["json"] == rf["json"]:
            json_same += 1
        if g["audio"][0] == rf["audio"][0]:
            same += 1
            continue
        try:
            x, y = pcm_of(a, g["audio"][0], g["audio_ct"][0], "got%d" % k), pcm_of(a, rf["audio"][0], rf["audio_ct"][0], "ref%d" % k)
            c, maxd, nd, ns = compare_pcm(x, y)
            cmp_s = "correlation %.6f, %d of %d samples differ (largest by %d LSB of 16 bits)%s" % (
                c, nd, ns, maxd, "" if len(x) == len(y) else ", lengths %d vs %d samples" % (len(x), len(y)))
        except Exception as e:  # noqa: BLE001 - a comparison that cannot decode is reported as such
            cmp_s = "could not decode for a correlation: %s" % e
        desc = "job %d (%s, %s, killed in %s): %d vs %d bytes, %s" % (
            k, fam[k], reqs[k]["output_format"], resumed_in.get(k, "?"), len(g["audio"][0]), len(rf["audio"][0]), cmp_s)
        # A MiniMax job resumed in its synthesis half (codes journaled): reported apart.
        if fam[k] == "mm3" and resumed_in.get(k) in ("synth", "decode", "encode"):
            rp = replays.get(k)
            if rp and rp["audio"]:
                desc += "; its reference replay part resubmitted (no kill): %s the reference, %s this resumed result" % (
                    "identical to" if rp["audio"][0] == rf["audio"][0] else "differs from",
                    "identical to" if rp["audio"][0] == g["audio"][0] else "differs from")
            mm3_synth_differ.append(desc)
        else:
            differ.append(desc)
    log("kills: %d identical, differ %s, mm3 synthesis-half differ %s" % (same, differ, mm3_synth_differ))

    with open(os.path.join(a.work, "kills.json"), "w") as f:
        json.dump({"ids": ids, "blockers": blockers, "kills": kills, "final": final, "restarts": restarts}, f, indent=1)

    ok1 = done == n and unique and known == n + len(blockers) and stored == n and one_track and not twice and not failed_at_start and pid_ok and real_kills == n and not ref_bad
    landed_s = ", ".join("%s %d" % (k, v) for k, v in sorted(landed.items(), key=lambda kv: (STAGE_ORDER.get(kv[0], 0 if kv[0] == "queued" else 9), kv[0])))
    add_row(a, "1. kill -9 (%d kills, %d jobs: %d YuE2 + %d MiniMax)" % (n, n, fam.count("yue2"), fam.count("mm3")), ok1,
            "%s: %d/%d done, %d lost, ids unique: %s" % ("PASS" if ok1 else "FAIL", done, n, n - done, "yes" if unique else "NO"),
            "kills landed (stage read from /job just before each kill, target job): %s; %d kills, %d restarts (ready in %.2f-%.2f s); "
            "/health jobs_known %d = %d jobs + %d blockers (each blocker ran while a job sat queued at a kill, cancelled after the restart), "
            "results_stored %d; one audio + one replay part per result: %s; no job resumed twice: %s; MiniMax has no separate decode stage "
            "(its 'decode' kills aim at the second half of synth, where windows are rendered and decoded); %.0f s with the reference run%s" % (
                landed_s, real_kills, len(restarts), min(restarts or [0]), max(restarts or [0]), known, n, len(blockers), stored,
                "yes" if one_track else "NO", "yes" if not twice else "NO (%s)" % twice, chaos_secs + ref_secs,
                (("; not done: " + "; ".join(not_done)) if not_done else "") + (("; failed at a start: %s" % failed_at_start) if failed_at_start else "")))
    mm3_resumed = sum(1 for k in range(n) if fam[k] == "mm3" and resumed_in.get(k) in ("synth", "decode", "encode"))
    ok2 = not differ and not ref_bad
    add_row(a, "1. replay determinism (audio vs a reference run without kills)", ok2,
            "%s: %d/%d byte-identical (the %d MiniMax jobs resumed in their synthesis half: next row)" % (
                "PASS" if ok2 else "FAIL", same - (mm3_resumed - len(mm3_synth_differ)), n - mm3_resumed, mm3_resumed),
            "reference: the same %d requests (fixed seeds) on a fresh daemon, %.0f s; all jobs: %d/%d audio parts byte-identical, replay .json "
            "parts identical %d/%d%s" % (n, ref_secs, same, n, json_same, n, ("; differing: " + "; ".join(differ)) if differ else ""))
    add_row(a, "1. MiniMax jobs resumed in their synthesis half", not mm3_synth_differ,
            "%s: %d/%d byte-identical" % ("PASS" if not mm3_synth_differ else "FAIL", mm3_resumed - len(mm3_synth_differ), mm3_resumed),
            ("resumed from the journaled codes after a kill in synth/encode; " + ("; ".join(mm3_synth_differ) if mm3_synth_differ else "none differs")))


# ---------------------------------------------------------------------------------------
# 2. mutated /synth bodies and /vae uploads

YUE2_BASE = {"style": "x", "lyrics": "[verse] la", "cot": "off", "duration": 0.4, "steps": 1, "output_format": "wav16", "seed": 5, "lm_seed": 6,
             "semantic_sampling": {"min_tokens": 10}}
MM3_BASE = {"family": "mm3", "caption": "x", "lyrics": "[verse] la", "duration": 2, "steps": 3, "seed": 5, "lm_seed": 6, "output_format": "wav16"}
YUE2_FIELDS = ["style", "lyrics", "abc", "cot", "duration", "lm_seed", "seed", "steps", "lm_batch_size", "synth_batch_size", "cfg_scale",
               "semantic_tokens", "peak_clip", "output_format", "mp3_bitrate", "adapters", "source_tokens", "source_start", "source_end",
               "plan_retries", "abc_sampling", "semantic_sampling", "family"]
SAMPLING_FIELDS = ["temperature", "top_p", "top_k", "repetition_penalty", "penalty_window", "min_tokens", "max_tokens"]
MM3_FIELDS = ["family", "caption", "lyrics", "duration", "steps", "seed", "lm_seed", "lm_cfg", "lm_top_k", "lm_batch_size", "synth_batch_size",
              "dit_cfg", "peak_clip", "output_format", "audio_codes", "lm_model", "depth_model", "cond_model", "dit_model", "vae_model"]
ODD_NUMBERS = [-1, 0, 1, -1e9, 1e9, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -2**63 - 1, 1e308, -1e308, 0.5, -0.0, 1e-300, 3.5, 1e6,
               86400, 361, 100000, 4097, 65536]
HUGE_LITERALS = ["1e400", "-1e400", "1" * 40, "9" * 400, "-" + "9" * 30, "0." + "0" * 500 + "1", "1.7976931348623157e309", "1E+99999"]
GARBAGE_CHARS = "abcXYZ019 \t\n\r\"\\/{}[]:,'`~!@#$%^&*()é漢字😀\u0000\u0001\u001f\u007f\u200b\ufeff\u2028\ud800\udfff"


def garbage_string(rng):
    n = rng.choice([0, 1, 2, 5, 20, 100, 1000, 20000])
    return "".join(rng.choice(GARBAGE_CHARS) for _ in range(n))


def junk_value(rng, depth=0):
    kind = rng.randrange(10)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice(ODD_NUMBERS)
    if kind == 3:
        return garbage_string(rng)
    if kind == 4 and depth < 4:
        return [junk_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 5 and depth < 4:
        return {garbage_string(rng)[:10]: junk_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    if kind == 6:
        return rng.choice(["", "mp3", "wav", "WAV16", "flac ", "off", "full", "on", "none", "yue2", "mm3", "null", "NaN", "Infinity", "-1"])
    if kind == 7:
        return ",".join(str(rng.choice([-1, 0, 1, 7, 1023, 1024, 65535, 2**32, 10**30])) for _ in range(rng.randrange(1, 60)))
    if kind == 8:
        return rng.uniform(-1e6, 1e6)
    return rng.randrange(-10, 100000)


def deep(rng):
    n = rng.choice([5, 50, 127, 128, 129, 300, 3000])
    if rng.random() < 0.5:
        return "[" * n + "]" * n
    return '{"a":' * n + "1" + "}" * n


def mutate_synth(rng):
    """A mutated /synth body (bytes) and what was done to it."""
    r = rng.random()
    if r < 0.04:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 10, 100, 3000]))), "random bytes"
    if r < 0.06:
        return rng.choice([b"", b"null", b"1", b'"x"', b"[]", b"{}", b"\xef\xbb\xbf{}", b"{}{}", b"{,}", b"{\"a\"}", b" ", b"\x00"]), "non-object"
    base = json.loads(json.dumps(rng.choice([YUE2_BASE, MM3_BASE])))
    fields = MM3_FIELDS if base.get("family") == "mm3" else YUE2_FIELDS
    did = []
    placeholders = {}
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(11)
        f = rng.choice(fields)
        if op == 0 and base:
            k = rng.choice(list(base))
            del base[k]
            did.append("remove " + k)
        elif op == 1:
            base[f] = junk_value(rng)
            did.append("%s: %s" % (f, type(base[f]).__name__))
        elif op == 2:
            base[f] = rng.choice(ODD_NUMBERS)
            did.append("%s=%r" % (f, base[f]))
        elif op == 3:
            base[f] = garbage_string(rng)
            did.append("%s garbage string" % f)
        elif op == 4:
            tag = "@@HUGE%d@@" % len(placeholders)
            placeholders['"%s"' % tag] = rng.choice(HUGE_LITERALS)
            base[f] = tag
            did.append("%s huge literal" % f)
        elif op == 5:
            tag = "@@DEEP%d@@" % len(placeholders)
            placeholders['"%s"' % tag] = deep(rng)
            base[rng.choice([f, "junk"])] = tag
            did.append("nested junk")
        elif op == 6:
            base["family"] = rng.choice(["mm4", "MM3", "Yue2", "", "yue2 ", "yue", "minimax", 3, None, ["mm3"], {"mm3": 1}, garbage_string(rng)])
            did.append("family=%r" % (base["family"],)[:40])
        elif op == 7:
            ss = base.setdefault("semantic_sampling", {}) if "family" not in base or base.get("family") != "mm3" else base.setdefault("abc_sampling", {})
            if not isinstance(ss, dict):
                ss = {}
                base["semantic_sampling"] = ss
            sf = rng.choice(SAMPLING_FIELDS)
            ss[sf] = rng.choice([junk_value(rng), rng.choice(ODD_NUMBERS)])
            did.append("sampling.%s" % sf)
        elif op == 8:
            base[garbage_string(rng)[:30] or "unknown"] = junk_value(rng)
            did.append("unknown field")
        elif op == 9:
            k = rng.choice(["audio_codes", "semantic_tokens", "source_tokens", "abc", "adapters", "lyrics"])
            base[k] = rng.choice([junk_value(rng), ",".join(str(rng.randrange(-5, 70000)) for _ in range(rng.randrange(1, 400))),
                                  "[verse]\n" * rng.randrange(1, 3000), [{"name": garbage_string(rng)[:20], "scale": rng.choice(ODD_NUMBERS)}]])
            did.append("%s junk" % k)
        else:
            base[f] = rng.choice([[], {}, [1, "a"], {"x": 1}, None, True])
            did.append("%s wrong type" % f)
    text = json.dumps(base, ensure_ascii=rng.random() < 0.5)
    for k, v in placeholders.items():
        text = text.replace(k, v)
    if rng.random() < 0.1:
        text = text[:-1] + ', "duration": "x"}' if text.endswith("}") else text
        did.append("duplicate key")
    body = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.12:
        body = body[:rng.randrange(len(body) + 1)]
        did.append("truncated")
    if rng.random() < 0.02:
        body += rng.choice([b"garbage", b"\x00", b"}", b" {}"])
        did.append("trailing bytes")
    return body, "; ".join(did)


def wav_bytes(rng, secs=0.2, rate=44100, channels=1):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        n = int(secs * rate)
        w.writeframes(array.array("h", (rng.randrange(-3000, 3000) for _ in range(n * channels))).tobytes())
    return buf.getvalue()


def multipart(parts, boundary):
    """parts: [(name or None, filename or None, content type or None, bytes, extra header lines or None)];
    an extra line b"nodisposition" leaves the part's Content-Disposition out."""
    out = io.BytesIO()
    for name, fname, ct, data, extra in parts:
        extra = extra or []
        out.write(b"--" + boundary + b"\r\n")
        if b"nodisposition" not in extra:
            cd = "form-data"
            if name is not None:
                cd += '; name="%s"' % name
            if fname is not None:
                cd += '; filename="%s"' % fname
            out.write(("Content-Disposition: %s\r\n" % cd).encode("utf-8", "surrogatepass"))
        if ct:
            out.write(("Content-Type: %s\r\n" % ct).encode())
        for line in extra:
            if line != b"nodisposition":
                out.write(line + b"\r\n")
        out.write(b"\r\n" + data + b"\r\n")
    out.write(b"--" + boundary + b"--\r\n")
    return out.getvalue()


def latents(rng, frames, width=64, special=None):
    vals = [rng.uniform(-2, 2) for _ in range(frames * width)]
    if special is not None and vals:
        vals[rng.randrange(len(vals))] = special
    return struct.pack("<%df" % len(vals), *vals)


def mutate_vae(rng, context):
    """(body, content type, what was done, expect_accept)."""
    boundary = b"chaos%08x" % rng.getrandbits(32)
    ct = "multipart/form-data; boundary=" + boundary.decode()
    op = rng.randrange(22)
    parts, desc, accept = None, "", False
    if op == 0:
        parts, desc, accept = [("src_latents", "z.vae", "application/octet-stream", latents(rng, rng.randrange(1, 12)), None)], "valid latents", True
    elif op == 1:
        parts, desc = [("src_latents", "z.vae", None, bytes(rng.randrange(256) for _ in range(rng.choice([1, 3, 255, 257, 511, 1001]))), None)], "odd-length latents"
    elif op == 2:
        parts, desc = [("src_latents", None, None, latents(rng, rng.randrange(1, 6), special=rng.choice([float("nan"), float("inf"), float("-inf")])), None)], "NaN/Inf latents"
    elif op == 3:
        parts, desc = [("src_latents", None, None, b"", None)], "empty latents"
    elif op == 4:
        if rng.random() < 0.05:
            parts, desc = [("src_latents", None, None, bytes(4 * 64 * (context + 1)), None)], "latents past the context"
        else:
            parts, desc = [("src_latents", None, None, latents(rng, 2, width=63), None)], "latents 63 wide"
    elif op == 5:
        parts, desc = [("audio", "a.wav", "audio/wav", bytes(rng.randrange(256) for _ in range(rng.choice([0, 4, 44, 1000, 5000]))), None)], "random audio bytes"
    elif op == 6:
        w = wav_bytes(rng)
        parts, desc = [("audio", "a.wav", "audio/wav", w[:rng.randrange(len(w))], None)], "truncated WAV"
    elif op == 7:
        parts, desc, accept = [("audio", "a.wav", "audio/wav", wav_bytes(rng, rng.uniform(0.05, 0.3), rng.choice([8000, 22050, 44100, 48000]), rng.choice([1, 2])), None)], "valid WAV", True
    elif op == 8:
        w = bytearray(wav_bytes(rng, 0.05))
        field = rng.choice([(22, "<H", [0, 7, 65535]), (24, "<I", [0, 1, 4000000000]), (34, "<H", [0, 7, 13, 64]), (40, "<I", [0, 2**31, 4294967295]), (4, "<I", [0, 12])])
        struct.pack_into(field[1], w, field[0], rng.choice(field[2]))
        parts, desc = [("audio", "a.wav", "audio/wav", bytes(w), None)], "WAV header odd value at byte %d" % field[0]
    elif op == 9:
        parts, desc = [("audio", None, None, wav_bytes(rng, 0.05), None), ("src_latents", None, None, latents(rng, 2), None)], "both parts"
    elif op == 10:
        parts, desc = [("request", None, "application/json", b'{"output_format": "flac"}', None)], "neither part"
    elif op == 11:
        name = rng.choice(["Audio", "latents", "", "audio ", "src-latents", "file", garbage_string(rng)[:20].replace('"', "")])
        parts, desc = [(name, None, None, latents(rng, 2), None)], "wrong part name"
    elif op == 12:
        parts, desc = [("src_latents", None, None, latents(rng, 2), None), ("src_latents", None, None, latents(rng, 2), None)], "duplicate part"
    elif op == 13:
        parts, desc = [(None, None, None, latents(rng, 2), [b"nodisposition"] if rng.random() < 0.5 else None)], "part without a name"
    elif op == 14:
        junk = rng.choice([b"{", b"[]", b"null", b'{"output_format": 5}', b'{"output_format": "wav99"}', b'{"peak_clip": 1e400}', b'{"mp3_bitrate": -1}',
                           b'{"duration": "x"}', deep(rng).encode(), bytes(rng.randrange(256) for _ in range(50))])
        parts, desc = [("src_latents", None, None, latents(rng, 2), None), ("request", None, "application/json", junk, None)], "junk request part"
    elif op == 15:
        parts, desc, accept = [("src_latents", None, None, latents(rng, 3), None), ("request", None, "application/json", b'{"output_format": "flac", "peak_clip": 3}', None)], "latents + valid request part", True
    elif op == 16:
        body = multipart([("src_latents", None, None, latents(rng, 4), None)], boundary)
        return body[:rng.randrange(len(body))], ct, "truncated multipart", False
    elif op == 17:
        body = multipart([("src_latents", None, None, latents(rng, 2), None)], boundary)
        return body, rng.choice(["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=other", "application/json",
                                 "multipart/mixed; boundary=" + boundary.decode(), "text/plain", ""]), "wrong content type", False
    elif op == 18:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 10, 1000]))), ct, "random body", False
    elif op == 19:
        parts, desc = [("src_latents", None, None, latents(rng, 2), [b"X-Junk: " + b"a" * rng.choice([10, 5000, 20000])])], "long part header"
    elif op == 20:
        parts, desc = [("src_latents", "../../etc/passwd", "audio/wav", latents(rng, 2), None)], "odd filename"
        accept = True
    else:
        parts, desc = [("audio", "a.mp3", "audio/mpeg", b"ID3" + bytes(rng.randrange(256) for _ in range(2000)), None)], "fake MP3"
    return multipart(parts, boundary), ct, desc, accept


def classify_4xx(data):
    """(is a JSON {"error": str}, named field or None)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return False, None
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), str) or set(obj) != {"error"}:
        return False, None
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*):", obj["error"])
    return True, m.group(1) if m else None


def run_mutants(a, d, h, name, gen, n):
    classes = collections.Counter()
    bad_json, named, body_named, unnamed = [], collections.Counter(), 0, collections.Counter()
    five, conn_err, accepted_unexpected, cancels = [], [], collections.Counter(), collections.Counter()
    dead_at = None
    prev = None
    for i in range(n):
        body, ct, desc, expect = gen(i)
        headers = {"Content-Type": ct} if ct else {}
        try:
            st, hd, data = h.req("POST", name, body, headers, retry=False)
        except (OSError, http.client.HTTPException) as e:
            h.close()
            err = e
            st = None
            if not isinstance(e, socket.timeout):
                # One retry on a fresh connection: the server may close an idle keep-alive.
                try:
                    st, hd, data = h.req("POST", name, body, headers, retry=False)
                except (OSError, http.client.HTTPException) as e2:
                    h.close()
                    err = e2
            if st is None:
                classes["no answer"] += 1
                # The same request alone, on a fresh connection: does it hang by itself?
                alone = Http(d.port, timeout=10)
                try:
                    ast, _, adata = alone.req("POST", name, body, headers, retry=False)
                    alone_s = "%d %s" % (ast, adata[:100].decode("utf-8", "replace"))
                except (OSError, http.client.HTTPException) as e3:
                    alone_s = "no answer either (%r)" % e3
                alone.close()
                conn_err.append({"mutation": desc, "error": repr(err), "previous": prev, "alone": alone_s, "request": repr(body[:200]), "content_type": ct})
                prev = desc
                if not d.alive():
                    dead_at = i
                    break
                continue
        prev = desc
        if st >= 500:
            classes["5xx"] += 1
            five.append({"status": st, "body": data[:500].decode("utf-8", "replace"), "request": repr(body[:300]) + ("... (%d bytes)" % len(body) if len(body) > 300 else ""),
                         "content_type": ct, "mutation": desc})
        elif st >= 400:
            classes[str(st)] += 1
            ok, field = classify_4xx(data)
            if not ok:
                bad_json.append((st, data[:200], desc))
            elif field in ("body", "multipart"):
                body_named += 1
            elif field:
                named[field] += 1
            else:
                unnamed[json.loads(data)["error"][:60]] += 1
        elif st == 200:
            classes["200"] += 1
            try:
                jid = json.loads(data)["id"]
                cst, _, _ = h.req("POST", "/job?id=%s&cancel=1" % jid)
                cancels[cst] += 1
            except (ValueError, KeyError):
                bad_json.append((st, data[:200], desc))
            if not expect and name == "/vae":
                accepted_unexpected[desc] += 1
        else:
            classes[str(st)] += 1
        if i % 250 == 0 and not d.alive():
            dead_at = i
            break
    return {"classes": classes, "bad_json": bad_json, "named": named, "body_named": body_named, "unnamed": unnamed, "five": five,
            "conn_err": conn_err, "dead_at": dead_at, "cancels": cancels, "accepted_unexpected": accepted_unexpected}


def cmd_fuzz(a):
    t0 = time.time()
    d = Daemon(a, "fuzz", a.port + 2)
    d.start()
    pid = d.pid
    h = Http(d.port, timeout=10)
    st, props = h.json("GET", "/props")
    context = props.get("context", 24576)
    rng = random.Random(a.seed * 7919 + 1)

    def gen_synth(i):
        body, desc = mutate_synth(rng)
        ct = rng.choice(["application/json"] * 8 + ["text/plain", "", "application/x-www-form-urlencoded"])
        return body, ct, desc, None

    def gen_vae(i):
        return mutate_vae(rng, context)

    out = {}
    for route, gen, n in (("/synth", gen_synth, a.synth), ("/vae", gen_vae, a.vae)):
        t1 = time.time()
        out[route] = run_mutants(a, d, h, route, gen, n)
        out[route]["secs"] = time.time() - t1
        log("%s: %d mutants in %.1f s: %s" % (route, n, out[route]["secs"], dict(out[route]["classes"])))
    alive = d.alive() and d.pid == pid
    try:
        st, hs = h.json("GET", "/health")
        healthy = st == 200
    except (OSError, http.client.HTTPException):
        healthy = False
    h.close()
    d.stop()
    with open(os.path.join(a.work, "fuzz.json"), "w") as f:
        json.dump({k: {kk: (dict(vv) if isinstance(vv, collections.Counter) else vv) for kk, vv in v.items()} for k, v in out.items()}, f, indent=1, default=repr)
    for route, n in (("/synth", a.synth), ("/vae", a.vae)):
        r = out[route]
        ok = not r["five"] and r["dead_at"] is None and not r["bad_json"] and alive and healthy and not r["conn_err"]
        n4 = sum(v for k, v in r["classes"].items() if k.startswith("4"))
        named_total = sum(r["named"].values())
        classes = ", ".join("%s %d" % (k, v) for k, v in sorted(r["classes"].items()))
        detail = ("seed %d, %.0f s; 4xx bodies JSON {\"error\"}: %d/%d; naming a request field (`<field>: ...`): %d (%d distinct: %s), "
                  "`body:`/`multipart:` %d, other %d%s; accepted mutants cancelled at once (cancel answers %s)" % (
                      a.seed, r["secs"], n4 - len(r["bad_json"]), n4, named_total, len(r["named"]),
                      " ".join(sorted(r["named"])[:40]), r["body_named"], sum(r["unnamed"].values()),
                      (" (" + "; ".join("%s ×%d" % (k, v) for k, v in r["unnamed"].most_common(6)) + ")") if r["unnamed"] else "",
                      dict(r["cancels"])))
        if route == "/vae":
            detail += "; accepted besides the valid uploads: %s" % (", ".join("%s ×%d" % kv for kv in r["accepted_unexpected"].most_common()) or "none")
        if r["five"]:
            detail += "; 5xx (first %d of %d): " % (min(3, len(r["five"])), len(r["five"])) + " | ".join(
                "%d %s for the mutation '%s' (content-type %s), request %s" % (x["status"], x["body"], x["mutation"], x["content_type"], x["request"]) for x in r["five"][:3])
            five_kinds = collections.Counter("%d %s [%s]" % (x["status"], x["body"], x["mutation"]) for x in r["five"])
            detail += "; all 5xx by kind: " + "; ".join("%s ×%d" % kv for kv in five_kinds.most_common())
        if r["bad_json"]:
            detail += "; non-JSON 4xx: " + " | ".join("%d %r (%s)" % x for x in r["bad_json"][:3])
        if r["conn_err"]:
            detail += "; no answer (%d): " % len(r["conn_err"]) + " | ".join(
                "'%s' after '%s': %s, content-type %s, request %s; the same request alone on a fresh connection: %s" % (
                    x["mutation"], x["previous"], x["error"], x["content_type"], x["request"], x["alone"]) for x in r["conn_err"][:3])
        if r["dead_at"] is not None:
            detail += "; THE DAEMON DIED at mutant %d" % r["dead_at"]
        add_row(a, "2. %d mutated %s %s" % (n, route, "bodies" if route == "/synth" else "uploads"), ok,
                "%s: %s; 5xx %d; daemon pid %d alive: %s" % ("PASS" if ok else "FAIL", classes, len(r["five"]), pid, "yes" if alive else "NO"), detail)


# ---------------------------------------------------------------------------------------
# 3. WebSocket fan-out with slow readers


class WsConn:
    """A client WebSocket on /stream: frames parsed as they come, payloads of binary frames
    counted and skipped, pings answered (fast listeners only)."""

    def __init__(self, port, jid, slow):
        self.slow = slow
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /stream?id=%s&format=pcm16 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (jid, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            c = self.s.recv(1)       # byte by byte: nothing of the stream is read ahead
            if not c:
                raise OSError("closed during the handshake")
            head += c
        if not head.startswith(b"HTTP/1.1 101"):
            raise OSError("handshake refused: %r" % head[:200])
        self.s.setblocking(False)
        self.hdr = bytearray()
        self.skip = 0
        self.collect = 0
        self.payload = bytearray()
        self.opcode = 0
        self.msg_opcode = 0
        self.tiles = 0
        self.bin_bytes = 0
        self.events = collections.Counter()
        self.done = False
        self.close_code = None
        self.close_reason = None
        self.eof = False
        self.read_bytes = 0
        self.t_close = None
        self.t_pong = None

    def _need(self):
        if len(self.hdr) < 2:
            return 2
        l7 = self.hdr[1] & 0x7F
        return 2 + (2 if l7 == 126 else 8 if l7 == 127 else 0) + (4 if self.hdr[1] & 0x80 else 0)

    def send_frame(self, opcode, payload=b""):
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        try:
            self.s.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)
        except OSError:
            pass

    def _frame(self):
        op, data = self.opcode, bytes(self.payload)
        self.payload = bytearray()
        if op == 0:
            op = self.msg_opcode
        if op == 1:
            try:
                ev = json.loads(data).get("event", "?")
            except ValueError:
                ev = "?"
            self.events[ev] += 1
            if ev in TERMINAL:
                self.done = True
        elif op == 2:
            self.tiles += 1
        elif op == 8:
            self.close_code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else 1005
            self.close_reason = data[2:].decode("utf-8", "replace")
            self.t_close = time.time()
            if not self.slow:
                self.send_frame(8, data[:2])
        elif op == 9 and not self.slow:
            self.send_frame(10, data)
            self.t_pong = time.time()

    def feed(self, data):
        pos, n = 0, len(data)
        self.read_bytes += n
        while pos < n:
            if self.skip:
                take = min(self.skip, n - pos)
                self.skip -= take
                self.bin_bytes += take
                pos += take
                if not self.skip:
                    self._frame()
                continue
            if self.collect:
                take = min(self.collect, n - pos)
                self.payload += data[pos:pos + take]
                self.collect -= take
                pos += take
                if not self.collect:
                    self._frame()
                continue
            need = self._need()
            take = min(need - len(self.hdr), n - pos)
            self.hdr += data[pos:pos + take]
            pos += take
            if len(self.hdr) < self._need():
                continue
            b0, l7 = self.hdr[0], self.hdr[1] & 0x7F
            length = l7 if l7 < 126 else struct.unpack(">H", self.hdr[2:4])[0] if l7 == 126 else struct.unpack(">Q", self.hdr[2:10])[0]
            self.opcode = b0 & 0x0F
            if self.opcode in (1, 2):
                self.msg_opcode = self.opcode
            self.hdr = bytearray()
            eff = self.opcode or self.msg_opcode
            if length == 0:
                self._frame()
            elif eff == 2:
                self.skip = length
            else:
                self.collect = length

    def read_some(self, limit=1 << 18):
        try:
            data = self.s.recv(limit)
        except BlockingIOError:
            return True
        except OSError:
            self.eof = True
            return False
        if not data:
            self.eof = True
            return False
        self.feed(data)
        return True


def cmd_ws(a):
    t0 = time.time()
    ping = 1
    d = Daemon(a, "ws", a.port + 3, env={"YUED_WS_PING_SECS": str(ping)})
    d.start()
    # The listeners share the 2 cores with the daemon here (they would be elsewhere): this
    # process reads at nice 10, the daemon's compute threads' own, so that its reading
    # neither passes for the daemon's cost nor starves (a listener that cannot answer a
    # ping within 3 s is dropped).
    nice = os.nice(0)
    try:
        nice = os.nice(max(0, 10 - nice))
    except OSError:
        pass
    # --client-cpu N: the listeners on core N only (with --threads 1 the daemon's compute
    # thread then has a core the listeners' client does not take).
    if a.client_cpu is not None:
        os.sched_setaffinity(0, {a.client_cpu})
    h = Http(d.port)
    # 60 s of audio: its AR half outlasts the slow listeners' 3 x ping of silence, so they
    # are dropped while the song still renders (a job that ends before that is measured
    # apart, below).
    song = {"style": "fanout", "lyrics": "[verse] la", "cot": "off", "duration": 60, "steps": 8, "output_format": "wav16", "seed": 5, "lm_seed": 6,
            "semantic_sampling": {"min_tokens": 1500}}
    peak = [d.rss_kib()]

    def metric(name):
        st, _, data = h.req("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
        return 0.0

    def listen(jid):
        conns, errors = [], []
        n_slow = a.slow
        for i in range(a.listeners):
            try:
                conns.append(WsConn(d.port, jid, slow=i < n_slow))
            except OSError as e:
                errors.append(repr(e))
        t_conn = time.time()
        sel = selectors.DefaultSelector()
        fast = [c for c in conns if not c.slow]
        slow = [c for c in conns if c.slow]
        for c in fast:
            sel.register(c.s, selectors.EVENT_READ, c)
        open_fast = len(fast)
        next_tick = time.time() + 1.0
        next_poll = time.time()
        job_done_at = None
        deadline = time.time() + 600
        while time.time() < deadline:
            for key, _ in sel.select(timeout=0.2):
                c = key.data
                if not c.read_some() or c.close_code is not None:
                    sel.unregister(c.s)
                    c.s.close()
                    open_fast -= 1
            now = time.time()
            if job_done_at is None and now >= next_poll:
                next_poll = now + 0.1
                st, s = h.json("GET", "/job?id=" + jid)
                if s["status"] in TERMINAL:
                    job_done_at = now
            if now >= next_tick:
                next_tick += 1.0
                peak.append(d.rss_kib())
                for c in slow:
                    if not c.eof:
                        try:
                            b = c.s.recv(1)
                            if b:
                                c.feed(b)
                            else:
                                c.eof = True
                        except BlockingIOError:
                            pass
                        except OSError:
                            c.eof = True
            if open_fast == 0 and job_done_at is not None and now - job_done_at > 3 * ping + 2:
                break
        # The slow readers now read what is left, fast, to find how the daemon ended them.
        slow_read_slowly = [c.read_bytes for c in slow]
        rss_slow_connected = d.rss_kib()
        for c in slow:
            c.s.setblocking(True)
            c.s.settimeout(3)
            try:
                while True:
                    data = c.s.recv(1 << 18)
                    if not data:
                        c.eof = True
                        break
                    c.feed(data)
            except OSError:
                pass
            c.s.close()
        for c in fast:
            try:
                c.s.close()
            except OSError:
                pass
        return {"fast": fast, "slow": slow, "errors": errors, "slow_read_slowly": slow_read_slowly, "connect_secs": t_conn, "done_at": job_done_at,
                "rss_slow_connected": rss_slow_connected}

    def stages():
        _, _, data = h.req("GET", "/metrics")
        out = {}
        for m in re.finditer(r'^yued_stage_duration_seconds_sum\{family="\w+",stage="(\w+)"\} (\S+)$', data.decode(), re.M):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        return out

    def render(listen_to=False):
        t = time.time()
        s0 = stages()
        jid = submit(h, song)
        res = listen(jid) if listen_to else None
        while True:
            st, s = h.json("GET", "/job?id=" + jid)
            if s["status"] in TERMINAL:
                break
            time.sleep(0.05)
        wall = ((res or {}).get("done_at") or time.time()) - t
        s1 = stages()
        # The stages that stream to the listeners (synth, decode, encode) apart from the AR
        # half (no audio goes out during it): the jobs run one at a time, so the deltas of
        # the daemon's per-stage sums are this job's.
        streaming = sum(s1.get(k, 0) - s0.get(k, 0) for k in ("synth", "decode", "encode"))
        ar = sum(s1.get(k, 0) - s0.get(k, 0) for k in ("plan", "semantic"))
        (res if res is not None else last).update({"streaming": streaming, "ar": ar})
        return s["metrics"]["worker_seconds"] if s["status"] == "done" else float("nan"), wall, res

    # Interleaved: without, with, without, with, ..., without (the host's noise hits both).
    last = {}
    render()                      # warm-up (module loads, page cache), not counted
    time.sleep(1)
    rss_before = d.rss_kib()
    dropped_before = metric("yued_stream_dropped_listeners_total")
    base, runs, rss_after = [], [], []
    for r in range(a.ws_rounds):
        w, wall, _ = render()
        base.append((w, wall, dict(last)))
        log("render without listeners: worker %.2f s, wall %.2f s" % (w, wall))
        w, wall, res = render(True)
        runs.append((w, wall, res))
        time.sleep(2)
        rss_after.append(d.rss_kib())
        log("render with %d listeners: worker %.2f s, wall %.2f s; RSS after %.0f MiB" % (a.listeners, w, wall, rss_after[-1] / 1024))
    w, wall, _ = render()
    base.append((w, wall, dict(last)))
    log("render without listeners: worker %.2f s, wall %.2f s" % (w, wall))
    listeners_after = metric("yued_stream_listeners")
    dropped = metric("yued_stream_dropped_listeners_total") - dropped_before
    logs = d.all_log_lines()
    h.close()
    d.stop()
    peak_rss = max(peak + rss_after)

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    bw = [b[0] for b in base]
    lw = [r[0] for r in runs]
    bs = [b[2]["streaming"] for b in base]
    ls = [r[2]["streaming"] for r in runs]
    noise = max(bs) - min(bs)
    allowance = max(noise, 0.10 * median(bs))
    render_ok = median(ls) <= median(bs) + allowance
    fast_full = fast_n = slow_n = slow_done = 0
    tiles = set()
    slow_reasons, fast_early, slow_read, pong_gap = collections.Counter(), collections.Counter(), [], []
    with_reason = slow_no_frame = 0
    errors = []
    for _, _, res in runs:
        fast, slow = res["fast"], res["slow"]
        tiles_max = max([c.tiles for c in fast] + [0])
        tiles.add(tiles_max)
        fast_n += len(fast)
        slow_n += len(slow)
        fast_full += sum(1 for c in fast if c.done and c.tiles == tiles_max)
        fast_early.update("%s %s" % (c.close_code, c.close_reason) for c in fast if not c.done)
        pong_gap += [c.t_close - c.t_pong for c in fast if not c.done and c.t_close and c.t_pong]
        slow_done += sum(1 for c in slow if c.done)
        slow_reasons.update("%s %s" % (c.close_code, c.close_reason or "(no reason)") for c in slow if c.close_code is not None)
        with_reason += sum(1 for c in slow if c.close_code is not None and c.close_reason and not c.done)
        slow_no_frame += sum(1 for c in slow if c.close_code is None and not c.done)
        slow_read += res["slow_read_slowly"]
        errors += res["errors"]
    log_away = sum(1 for l in logs if "stopped answering" in l.get("fields", {}).get("message", ""))
    log_slow = sum(1 for l in logs if "reads too slowly" in l.get("fields", {}).get("message", ""))
    slow_ok = with_reason == slow_n and slow_done == 0
    fast_ok = fast_full == fast_n and not errors
    # Bounded: the fan-outs after the first leave the RSS where the first did.
    growth = (rss_after[-1] - max(rss_after[:-1])) if len(rss_after) > 1 else 0
    rss_ok = growth <= 32 * 1024 and listeners_after == 0
    ok = render_ok and slow_ok and fast_ok and rss_ok
    fmt = lambda xs: "/".join("%.2f" % x for x in xs)  # noqa: E731
    add_row(a, "3. WebSocket fan-out (%d listeners, %d at 1 byte/s; YUED_WS_PING_SECS=%d; %d rounds)" % (a.listeners, a.slow, ping, a.ws_rounds), ok,
            "%s: streaming stages (synth+decode+encode) median %.2f s with listeners vs %.2f s without (spread %.2f s); slow dropped with a close reason %d/%d; fast complete %d/%d; "
            "RSS %.0f MiB before, %s MiB after each round (peak %.0f)" % (
                "PASS" if ok else "FAIL", median(ls), median(bs), noise, with_reason, slow_n, fast_full, fast_n,
                rss_before / 1024, "/".join("%.0f" % (x / 1024) for x in rss_after), peak_rss / 1024),
            "one YuE2 song (60 s, 8 steps, pcm16 stream, seeds fixed; the listener client at nice %d), runs interleaved without/with listeners after a warm-up; "
            "streaming stages (from yued_stage_duration_seconds): with %s, without %s; the AR half (no audio out yet; on this VM it swings "
            "with how idle the cores are): with %s, without %s; whole job (worker_seconds): with %s, without %s; wall submit->done: with %s, "
            "without %s; render %s (allowed: the median without + max(spread, 10%%)); "
            "each fast listener got all %s tiles (20 s of audio each)%s; slow listeners' close frames: %s%s (read %s bytes at 1 byte/s before the "
            "daemon gave up on them; daemon log: %d 'peer stopped answering', %d 'reads too slowly'; yued_stream_dropped_listeners_total +%d); "
            "listeners open after: %d; %s; RSS bound: repeated fan-outs do not keep raising it (the last round's after <= the earlier rounds' highest + 32 MiB: %+.0f MiB); "
            "RSS with the slow listeners still connected after the job: %s MiB" % (
                nice, fmt(ls), fmt(bs), fmt([r[2]["ar"] for r in runs]), fmt([b[2]["ar"] for b in base]), fmt(lw), fmt(bw), fmt([r[1] for r in runs]), fmt([b[1] for b in base]), "within noise" if render_ok else "SLOWER than noise allows",
                "/".join(str(t) for t in sorted(tiles)),
                (", %d ended early (close %s; their last pong had gone out %.1f..%.1f s before that close)" % (
                    sum(fast_early.values()), dict(fast_early), min(pong_gap or [0]), max(pong_gap or [0]))) if fast_early else "",
                ", ".join("%s ×%d" % kv for kv in slow_reasons.items()) or "none",
                ("; %d slow ended without a close frame" % slow_no_frame) if slow_no_frame else "",
                "..".join(str(x) for x in (min(slow_read or [0]), max(slow_read or [0]))),
                log_away, log_slow, dropped, listeners_after,
                ("connect errors: %s" % errors[:3]) if errors else "no connect errors", growth / 1024,
                "/".join("%.0f" % (r[2]["rss_slow_connected"] / 1024) for r in runs)))
    held_after_job(a, ping_default=True)
    log("ws section %.0f s" % (time.time() - t0))


def held_after_job(a, ping_default):
    """Slow listeners on a job that ends before the drop deadline (3 x the default ping of
    10 s): what the daemon keeps for them while they stay connected, and after they close."""
    d = Daemon(a, "ws-ping10", a.port + 3)
    d.start()
    h = Http(d.port)
    song = {"style": "fanout", "lyrics": "[verse] la", "cot": "off", "duration": 30, "steps": 8, "output_format": "wav16", "seed": 5, "lm_seed": 6,
            "semantic_sampling": {"min_tokens": 750}}
    jid = submit(h, {**song, "duration": 1, "semantic_sampling": {"min_tokens": 25}})   # warm-up
    wait_all(h, [jid], 120)
    time.sleep(1)
    rss0 = d.rss_kib()
    jid = submit(h, song)
    conns = [WsConn(d.port, jid, slow=True) for _ in range(a.slow)]
    t0 = time.time()
    st = wait_all(h, [jid], 300)[jid]
    t_done = time.time() - t0

    def metric(name):
        _, _, data = h.req("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return -1

    held = []
    for _ in range(3):
        time.sleep(5)
        held.append(d.rss_kib())
    listeners = metric("yued_stream_listeners")
    fds = metric("process_open_fds")
    got = []
    for c in conns:     # what each had been sent: drained fast now
        c.s.setblocking(True)
        c.s.settimeout(3)
        try:
            while True:
                data = c.s.recv(1 << 18)
                if not data:
                    break
                c.feed(data)
        except OSError:
            pass
        got.append(c.read_bytes)
        c.s.close()
    time.sleep(2)
    rss1 = d.rss_kib()
    h.close()
    d.stop()
    ends = collections.Counter("%s %s" % (c.close_code, c.close_reason) if c.close_code else "no close frame" for c in conns)
    add_row(a, "3. (observed) %d slow listeners on a job that ends before the drop deadline (default ping 10 s)" % a.slow, True,
            "NOTE: RSS %.0f MiB before, %s MiB for 15 s after the job ended while they stayed connected, %.0f MiB once they closed" % (
                rss0 / 1024, "/".join("%.0f" % (x / 1024) for x in held), rss1 / 1024),
            "the 30 s song (job %s after %.1f s); each slow listener had been sent %.1f MB (the whole pcm16 stream, close: %s) that the daemon "
            "holds until the reader takes it or goes: at 1 byte/s, indefinitely; yued_stream_listeners %d and process_open_fds %d meanwhile; "
            "informational, not one of the brief's requirements" % (
                st, t_done, (sum(got) / len(got) / 1e6) if got else 0, ", ".join("%s ×%d" % kv for kv in ends.items()), listeners, fds))


# ---------------------------------------------------------------------------------------
# 4. kill -9 while songs of different jobs decode together


def batch_requests(rounds, rng):
    """Four requests a round: two YuE2 and two MiniMax songs of mixed lengths (fixed seeds)."""
    reqs = []
    for k in range(4 * rounds):
        fmt = rng.choice(["wav16", "flac"])
        if k % 2 == 0:
            secs = rng.choice([6, 10, 14])
            reqs.append({"style": "batch %d" % k, "lyrics": "[verse] la la\n[chorus] oh", "cot": "off", "duration": secs,
                         "steps": 4, "output_format": fmt, "seed": 300 + k, "lm_seed": 400 + k,
                         "semantic_sampling": {"min_tokens": 25 * secs}})
        else:
            reqs.append({"family": "mm3", "caption": "batch %d" % k, "lyrics": "[verse] la", "duration": rng.choice([8, 12]),
                         "steps": 4, "seed": 300 + k, "lm_seed": MM3_LM_SEEDS[(k // 2) % len(MM3_LM_SEEDS)], "output_format": fmt})
    return reqs


def cmd_batch_kills(a):
    """Rounds of four jobs submitted at once (each family's two songs share their AR half's
    decode steps, the default --parallel), one kill -9 a round at a random moment while two
    or more of them run, the daemon restarted on the same data dir before the next round:
    every job done once, its result byte-identical to a reference run without kills."""
    rng = random.Random(a.seed + 4)
    rounds = max(1, a.jobs)
    reqs = batch_requests(rounds, rng)
    n = len(reqs)
    cap = ["--admission-cap", "16"]
    ref_d = Daemon(a, "batch-kills-ref", a.port + 4, cap)
    ref_d.start()
    h = Http(ref_d.port)
    ref_ids, round_secs = [], []
    for r in range(rounds):
        t0 = time.time()
        ids = [submit(h, q) for q in reqs[4 * r:4 * r + 4]]
        wait_all(h, ids, 900)
        round_secs.append(time.time() - t0)
        ref_ids += ids
    ref = [fetch_result(h, i) for i in ref_ids]
    h.close()
    ref_d.stop()
    log("batch kills: reference rounds %s s" % ["%.1f" % t for t in round_secs])

    d = Daemon(a, "batch-kills", a.port + 5, cap)
    d.start()
    h = Http(d.port)
    ids, kills, restarts, resumed, failed_at_start, from_codes = [], [], [], collections.Counter(), [], 0
    for r in range(rounds):
        mine = [submit(h, q) for q in reqs[4 * r:4 * r + 4]]
        ids += mine
        # Even rounds aim at two songs in one decode step (their AR halves early in the round),
        # odd ones at any two jobs running (a batch beside a song in its synthesis half, ...).
        shared = r % 2 == 0
        time.sleep(rng.uniform(0.0, 0.3 if shared else 0.8) * round_secs[r])
        landed = None
        t0 = time.time()
        while time.time() - t0 < 600:
            st = {}
            for i in mine:
                c, s = h.json("GET", "/job?id=" + i)
                if c != 200:
                    st[i] = "http %d" % c
                else:
                    st[i] = s.get("stage") or "running" if s["status"] == "running" else s["status"]
            running = [v for v in st.values() if v in STAGE_ORDER or v == "running"]
            if len([v for v in running if STAGE_ORDER.get(v) == 1 or not shared]) >= 2:
                landed = sorted(st.values(), key=lambda v: STAGE_ORDER.get(v, 9))
                break
            if all(v in TERMINAL for v in st.values()) or sum(v in TERMINAL for v in st.values()) >= 3:
                break
            time.sleep(0.002)
        if landed is None:
            kills.append({"round": r, "landed": "missed"})
            log("batch kill %d: missed (fewer than two running)" % r)
        else:
            d.kill9()
            h.close()
            restarts.append(d.start())
            kills.append({"round": r, "landed": landed, "shared": shared})
            log("batch kill %d: the round's jobs in %s" % (r, "+".join(landed)))
        wait_all(h, mine, 900)
    final = wait_all(h, ids, 900)
    got = [fetch_result(h, i) if final.get(i) == "done" else None for i in ids]
    pid_ok = d.alive()
    h.close()
    d.stop()
    for kind, fields in restore_lines(d.all_log_lines()):
        if kind == "resumed":
            resumed[fields.get("job")] += 1
            from_codes += 1 if int(fields.get("codes", 0)) > 0 else 0
        else:
            failed_at_start.append(fields.get("job"))

    done = sum(1 for i in ids if final.get(i) == "done")
    real = [k for k in kills if k["landed"] != "missed"]
    in_step = sum(1 for k in real if sum(STAGE_ORDER.get(v) == 1 for v in k["landed"]) >= 2)
    stages = collections.Counter(v for k in real for v in k["landed"])
    twice = [j for j, c in resumed.items() if c > 1]
    same, differ = 0, []
    for k in range(n):
        g, rf = got[k], ref[k]
        if g is None or rf is None:
            differ.append("job %d: no result to compare" % k)
        elif g["audio"] == rf["audio"] and g["json"] == rf["json"]:
            same += 1
        else:
            differ.append("job %d (%s): %s" % (k, reqs[k].get("family", "yue2"),
                                               "audio differs" if g["audio"] != rf["audio"] else "replay part differs"))
    # A round whose moment came when fewer than two ran is no kill (missed, counted apart).
    ok1 = done == n and len(set(ids)) == n and not twice and not failed_at_start and pid_ok and 2 * len(real) >= rounds
    add_row(a, "4. kill -9 amid shared decode steps (%d rounds of 4 jobs, 2 YuE2 + 2 MiniMax: %d jobs)" % (rounds, n), ok1,
            "%s: %d/%d done, %d lost" % ("PASS" if ok1 else "FAIL", done, n, n - done),
            "each round's four jobs submitted at once and one kill at a random moment while two or more ran "
            "(%d of %d rounds, %d of them with two songs in one decode step; a missed round had fewer than two "
            "running at its moment); the round's jobs at its kill: %s; "
            "resumed after a kill: %d jobs (%d from their journaled codes), none twice: %s; ready again in %.2f-%.2f s%s" % (
                len(real), rounds, in_step, ", ".join("%s %d" % kv for kv in sorted(stages.items(), key=lambda kv: STAGE_ORDER.get(kv[0], 9))),
                sum(resumed.values()), from_codes, "yes" if not twice else "NO (%s)" % twice, min(restarts or [0]),
                max(restarts or [0]),
                ("; failed at a start: %s" % failed_at_start) if failed_at_start else ""))
    add_row(a, "4. the killed rounds against a reference run without kills", not differ,
            "%s: %d/%d results byte-identical (audio and replay parts)" % ("PASS" if not differ else "FAIL", same, n),
            "the same %d requests (fixed seeds) on a fresh daemon, round by round (%.0f s)%s" % (
                n, sum(round_secs), ("; differing: " + "; ".join(differ)) if differ else ""))


# ---------------------------------------------------------------------------------------


def cmd_table(a):
    rows = []
    with open(a.rows) as f:
        for line in f:
            rows.append(json.loads(line))
    esc = lambda s: s.replace("|", "\\|").replace("\n", " ")  # noqa: E731
    print("| figure | result | detail |")
    print("|---|---|---|")
    for r in rows:
        print("| %s | %s | %s |" % (esc(r["figure"]), esc(r["result"]), esc(r["detail"])))
    return 0 if rows and all(r["ok"] for r in rows) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["kills", "fuzz", "ws", "batch-kills", "table"])
    p.add_argument("--bin")
    p.add_argument("--work")
    p.add_argument("--pidfile")
    p.add_argument("--rows", required=True)
    p.add_argument("--port", type=int, default=18877)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--synth", type=int, default=10000)
    p.add_argument("--vae", type=int, default=1000)
    p.add_argument("--listeners", type=int, default=200)
    p.add_argument("--slow", type=int, default=20)
    p.add_argument("--ws-rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="the daemon's --threads")
    p.add_argument("--client-cpu", type=int, default=None, help="section 3: pin the listeners' client to this CPU")
    a = p.parse_args()
    if a.cmd == "table":
        sys.exit(cmd_table(a))
    try:
        {"kills": cmd_kills, "fuzz": cmd_fuzz, "ws": cmd_ws, "batch-kills": cmd_batch_kills}[a.cmd](a)
    except Exception as e:  # noqa: BLE001 - a section that breaks is a failed row, and the others still run
        import traceback
        traceback.print_exc()
        add_row(a, "%s (section)" % a.cmd, False, "FAIL: the section stopped: %s" % e, "see the log above")


if __name__ == "__main__":
    main()
