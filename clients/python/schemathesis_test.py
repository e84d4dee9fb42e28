#!/usr/bin/env python3
"""schemathesis (PyPI) against the real daemon: every operation of /openapi.json, every
check, positive and negative data, a fixed seed. Run by tests/tests/schemathesis.rs (with the
venv scripts/pyclients.sh makes); standalone:

    YUED_BIN=target/debug/yued python3 clients/python/schemathesis_test.py [EXAMPLES]

The daemon serves both demo families with an API key, songs cut to 3 s and at most 40 steps
(so a schema-valid song renders in seconds). Not fuzzed: GET /logs (a stream that does not
end) and the two WebSockets (a 101 switches protocols; tests/tests/daemon.rs drives them).
Passes on zero failures and zero errors.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "schemathesis-key"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    yued = os.environ["YUED_BIN"]
    examples = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].isdigit() else os.environ.get("YUED_SCHEMATHESIS_EXAMPLES", "200")
    tmp = tempfile.mkdtemp(prefix="yued-schemathesis-")
    port = free_port()
    log = open(os.path.join(tmp, "daemon.log"), "w")
    args = [yued, "serve", "--port", str(port), "--data-dir", os.path.join(tmp, "data"), "--device", "CPU", "--threads", "1",
            "--admission-cap", "2", "--admission-share", "2", "--api-key", KEY, "--max-duration", "3", "--max-steps", "40", "--max-seq", "1024"]
    daemon = subprocess.Popen(args, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if json.loads(r.read())["status"] == "ok":
                        break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("the daemon did not become ready")
        st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "schemathesis"), SCHEMATHESIS_HOOKS="hooks")
        # The long run at seed 1, then a short one at seed 7 (which once found a float-typed
        # integer the daemon refused).
        for seed, n in (("1", examples), ("7", "40")):
            cmd = [st, "--config-file", os.path.join(HERE, "schemathesis", "schemathesis.toml"), "--no-color", "run",
                   f"{base}/openapi.json", "-H", f"Authorization: Bearer {KEY}", "--checks", "all", "--mode", "all",
                   "--seed", seed, "--max-examples", n, "--request-timeout", "600", "--exclude-path", "/logs",
                   "--exclude-path", "/stream", "--exclude-path", "/synth/stream"] + sys.argv[2:]
            t0 = time.time()
            out = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            print(out.stdout[-20000:])
            print(out.stderr[-5000:], file=sys.stderr)
            print(f"schemathesis (seed {seed}, {n} examples): exit {out.returncode} in {time.time() - t0:.0f} s")
            if out.returncode != 0:
                raise SystemExit("schemathesis found failures or errors (exit %d)" % out.returncode)
        # The daemon is still healthy after the run.
        with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
            check = json.loads(r.read())["status"]
        if check != "ok":
            raise SystemExit(f"the daemon is {check} after the run")
        print("SCHEMATHESIS OK")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
