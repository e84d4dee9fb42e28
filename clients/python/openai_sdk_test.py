#!/usr/bin/env python3
"""yued's OpenAI-compatible routes driven by the official `openai` Python SDK (PyPI),
against the real daemon on the embedded demo models. Run by tests/tests/openai_sdk.rs (with
the venv scripts/pyclients.sh makes); standalone:

    YUED_BIN=target/debug/yued python3 clients/python/openai_sdk_test.py

Checks: models.list(); audio.speech.create() writes a FLAC ffprobe reads at 48 kHz stereo;
with_streaming_response streams an Ogg Opus file whose first bytes arrive before the job
is done; a full admission cap surfaces as the SDK's RateLimitError; /v1/audio/music with
"async": true gives a job id the native routes know; audio.transcriptions.create() answers
with the score `yued transcribe` writes for the same file (or its reason for none).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(method, url, body=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def ffprobe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", path], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def check(cond, msg):
    if not cond:
        raise SystemExit(f"check failed: {msg}")


def main():
    yued = os.environ["YUED_BIN"]
    tmp = tempfile.mkdtemp(prefix="yued-openai-")
    port = free_port()
    log = open(os.path.join(tmp, "daemon.log"), "w")
    daemon = subprocess.Popen([yued, "serve", "--port", str(port), "--data-dir", os.path.join(tmp, "data"), "--device", "CPU", "--threads", "1", "--admission-cap", "3", "--admission-share", "3"], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if http("GET", base + "/health")["ready"]:
                    break
            except Exception:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit("yued did not come up")
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)

        ids = [m.id for m in client.models.list().data]
        check("yue2" in ids and "mm3" in ids, f"models.list names both families: {ids}")
        print("models:", ids)

        # A whole song as FLAC.
        flac = os.path.join(tmp, "song.flac")
        speech = client.audio.speech.create(model="yue2", voice="coral", input="[verse]\nla la la", response_format="flac", extra_body={"duration": 3})
        speech.write_to_file(flac)
        info = ffprobe(flac)
        s = info["streams"][0]
        check(s["codec_name"] == "flac" and int(s["sample_rate"]) == 48000 and s["channels"] == 2, f"a 48 kHz stereo FLAC: {s}")
        check(abs(float(info["format"]["duration"]) - 3.0) < 0.6, f"about 3 s: {info['format']['duration']}")
        print("speech flac:", info["format"]["duration"], "s")

        # Streamed Opus: the first bytes come while the job still runs.
        opus = os.path.join(tmp, "live.opus")
        with client.audio.speech.with_streaming_response.create(model="yue2", voice="alloy", input="[verse]\nhum hum", response_format="opus", extra_body={"duration": 8}) as r:
            job = r.headers["x-yued-job"]
            first_state = None
            with open(opus, "wb") as f:
                for chunk in r.iter_bytes():
                    if first_state is None and chunk:
                        first_state = http("GET", f"{base}/job?id={job}")["status"]
                    f.write(chunk)
        check(first_state in ("queued", "running"), f"the first bytes arrive before the job is done (it was {first_state})")
        s = ffprobe(opus)["streams"][0]
        check(s["codec_name"] == "opus" and s["channels"] == 2, f"a playable Opus stream: {s}")
        print("speech opus streamed: first bytes while", first_state)

        # A client that goes away before its song ends cancels it (the job is its alone).
        with client.audio.speech.with_streaming_response.create(model="yue2", voice="sage", input="[verse]\nleave early", response_format="opus", extra_body={"duration": 60}) as r:
            gone = r.headers["x-yued-job"]
            next(r.iter_bytes())
        state = None
        for _ in range(300):
            state = http("GET", f"{base}/job?id={gone}")["status"]
            if state in ("cancelled", "done", "failed"):
                break
            time.sleep(0.1)
        check(state == "cancelled", f"a streamed song whose client left is cancelled (it is {state})")
        print("client left mid-stream: job", state)

        # A song that fails before its first audio (the demo's random weights cannot plan a
        # score) is the SDK's UnprocessableEntityError when it would have streamed too (Opus),
        # never a 200 with an empty body.
        try:
            got = client.post("/audio/music", body={"model": "yue2", "style": "x", "lyrics": "[verse] la", "duration": 3,
                                                    "output_format": "opus"}, cast_to=object)
            raise SystemExit(f"check failed: a failed song answered 2xx: {got!r:.200}")
        except openai.UnprocessableEntityError as e:
            check("failed" in str(e), f"the error says the song failed: {e}")
        print("a streamed song that fails before its audio: 422")

        # MiniMax through the same SDK call, and the music route's async job.
        mm3 = os.path.join(tmp, "mm3.wav")
        client.audio.speech.create(model="mm3", voice="nova", input="[verse]\nneon", response_format="wav", instructions="bright synth-pop", extra_body={"duration": 4}).write_to_file(mm3)
        s = ffprobe(mm3)["streams"][0]
        check(int(s["sample_rate"]) == 44100, f"MiniMax at 44.1 kHz: {s}")
        queued = client.post("/audio/music", body={"model": "yue2", "style": "lo-fi", "lyrics": "[verse] x", "cot": "off", "duration": 2, "async": True}, cast_to=object)
        check(len(queued["id"]) == 16 and http("GET", f"{base}/job?id={queued['id']}")["status"] in ("queued", "running", "done"), f"an async music job: {queued}")

        # A recording to its score through the transcriptions call: the listening demo's
        # SheetSage2 head. The SDK's answer is the engine's for the same file (`yued transcribe`):
        # the score, or (random weights) the reason there is none.
        check("sheetsage2" in ids, f"models.list names the transcriber: {ids}")
        head = os.path.join(tmp, "data", "models", "SheetSage2-demo-tiny-F32.gguf")
        cli = subprocess.run([yued, "transcribe", "--model", head, "--audio", flac, "--threads", "1"], capture_output=True, text=True)
        for fmt in ("json", "text"):
            try:
                with open(flac, "rb") as f:
                    got = client.audio.transcriptions.create(model="sheetsage2", file=f, response_format=fmt)
                text = got if isinstance(got, str) else got.text
                check(cli.returncode == 0 and text == cli.stdout, f"{fmt}: the SDK's score is the CLI's: {text!r} vs {cli.stdout!r} {cli.stderr!r}")
            except openai.UnprocessableEntityError as e:
                why = cli.stderr.strip().split("no score: ")[-1]
                check(cli.returncode != 0 and why and why in str(e), f"{fmt}: the SDK's reason is the CLI's: {e} vs {cli.stderr!r}")
        try:
            with open(flac, "rb") as f:
                client.audio.transcriptions.create(model="whisper-1", file=f)
            raise SystemExit("check failed: a model other than the transcriber must be refused")
        except openai.BadRequestError as e:
            check("model" in str(e), f"the error names the model: {e}")
        # Errors name their field as OpenAI's `param`, typed as the client's fault.
        try:
            client.audio.transcriptions.create(model="sheetsage2", file=("junk.wav", b"not audio at all", "audio/wav"))
            raise SystemExit("check failed: a file that does not decode must be refused")
        except openai.BadRequestError as e:
            check(e.param == "file" and e.type == "invalid_request_error", f"param file: {e.param} {e.type} {e}")
        print("transcriptions: the SDK's answer is the engine's")

        # A full admission cap is the SDK's RateLimitError.
        # Long jobs fill the cap (the async job above may still hold a place).
        blockers = []
        for _ in range(4):
            try:
                blockers.append(http("POST", base + "/synth", {"style": "blocker", "cot": "off", "duration": 120, "steps": 4, "output_format": "wav16", "semantic_sampling": {"min_tokens": 2500}})["id"])
            except urllib.error.HTTPError as e:
                check(e.code == 429, f"only a full cap refuses: {e.code}")
                break
        try:
            client.audio.speech.create(model="yue2", voice="echo", input="[verse] x", response_format="mp3")
            raise SystemExit("check failed: a full queue must be refused")
        except openai.RateLimitError as e:
            print("rate limited:", e.status_code)
        for b in blockers:
            try:
                http("POST", f"{base}/job?id={b}&cancel=1")
            except Exception:
                pass
        # A bad argument is the SDK's BadRequestError naming it.
        try:
            client.audio.speech.create(model="yue2", voice="nobody", input="x")
            raise SystemExit("check failed: an unknown voice must be refused")
        except openai.BadRequestError as e:
            check("voice" in str(e), f"the error names the voice: {e}")
        try:
            client.post("/audio/speech", body={"model": "yue2", "voice": "alloy"}, cast_to=object)
            raise SystemExit("check failed: a speech body without input must be refused")
        except openai.BadRequestError as e:
            check(e.param == "input", f"the missing field is the param: {e.param} {e}")
        try:
            client.post("/audio/speech", body={"model": "yue2", "input": "la " * (2 << 20)}, cast_to=object)
            raise SystemExit("check failed: a body over the limit must be refused")
        except openai.APIStatusError as e:
            check(e.status_code == 413 and "too large" in e.message and e.type == "invalid_request_error", f"413: {e}")
        print("errors: OpenAI's shape, the field as param")

        # One model, as LangChain and LiteLLM probe it; an unknown one is the SDK's NotFoundError.
        check(client.models.retrieve("yue2").id == "yue2", "models.retrieve names the family")
        try:
            client.models.retrieve("nope")
            raise SystemExit("check failed: an unknown model must be a 404")
        except openai.NotFoundError as e:
            check("names no model" in e.message, f"the 404 says why: {e}")

        # A song cancelled while the SDK waits is its ConflictError, never retried (the SDK retries
        # 409s by submitting the whole song again, unless told not to).
        retrying = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=2, timeout=600)
        before = len(http("GET", base + "/jobs")["jobs"])
        outcome = {}

        def wait_for_song():
            try:
                retrying.audio.speech.create(model="yue2", voice="alloy", input="[verse]\nla", response_format="mp3", extra_body={"duration": 120})
                outcome["error"] = None
            except openai.APIStatusError as e:
                outcome["error"] = e

        waiter = threading.Thread(target=wait_for_song)
        waiter.start()
        job = None
        for _ in range(600):
            jobs = http("GET", base + "/jobs")["jobs"]
            if len(jobs) > before and jobs[-1]["status"] in ("queued", "running"):
                job = jobs[-1]["id"]
                break
            time.sleep(0.05)
        check(job is not None, "the waited-for song was never listed")
        http("POST", f"{base}/job?id={job}&cancel=1")
        waiter.join(120)
        err = outcome.get("error")
        check(isinstance(err, openai.ConflictError), f"the cancel is the SDK's ConflictError: {err!r}")
        after = len(http("GET", base + "/jobs")["jobs"])
        check(after == before + 1, f"the SDK did not submit the song again ({after - before} jobs)")
        print("a cancelled wait: ConflictError, not retried")
        print("OPENAI SDK OK")
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        if os.environ.get("KEEP_TMP") is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
