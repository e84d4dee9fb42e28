#!/usr/bin/env python3
"""yued's MCP server (/mcp, Streamable HTTP) driven by the official `mcp` Python SDK (PyPI),
against the real daemon on the embedded demo models, with an API key and a short link
lifetime. Run by tests/tests/mcp_sdk.rs (with the venv scripts/pyclients.sh makes);
standalone:

    YUED_BIN=target/debug/yued python3 clients/python/mcp_sdk_test.py

Checks: without the key /mcp is a 401; initialize; the four tools and the guide resource;
compose_song for both families (Opus and FLAC); song_status polled to done; song_result's
link downloads a file ffprobe reads, without the API key; a forbidden argument, a duration
over the cap and a full admission cap come back as tool errors; cancel_song; the link is a
404 once it has expired.
"""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

KEY = "mcp-test-key"
LINK_TTL = 6


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def check(cond, msg):
    if not cond:
        raise SystemExit(f"check failed: {msg}")


def http(method, url, body=None, key=KEY, headers=None):
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(), headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def ffprobe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", path], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def structured(res):
    check(not res.is_error, f"tool error: {res.content}")
    return res.structured_content


def error_text(res):
    check(res.is_error, f"expected a tool error, got {res.structured_content}")
    return " ".join(getattr(c, "text", "") for c in res.content)


async def until_done(client, job, timeout=600):
    t0 = time.time()
    seen = set()
    while time.time() - t0 < timeout:
        st = structured(await client.call_tool("song_status", {"job_id": job}))
        seen.add(st["status"])
        if st["status"] in ("done", "failed", "cancelled"):
            return st, seen
        await asyncio.sleep(0.3)
    raise SystemExit(f"job {job} did not finish in {timeout} s")


def download(url, tmp, name):
    status, body, headers = http("GET", url, key=None)
    check(status == 200, f"GET {url} without a key: {status} {body[:200]!r}")
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(body)
    return path, headers


def transport_edges(url):
    """The transport's rules, on the wire: sessions, notifications, GET, DELETE, batches, Origin."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    status, body, headers = http("POST", url, init)
    session = headers.get("mcp-session-id", "")
    check(status == 200 and len(session) == 32, f"initialize: {status} {headers}")
    check(json.loads(body)["result"]["protocolVersion"] == "2025-06-18", f"the client's revision is kept: {body[:200]!r}")
    s = {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    status, body, _ = http("POST", url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=s)
    check(status == 202 and body == b"", f"a notification: {status} {body!r}")
    status, body, _ = http("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    check(status == 400 and json.loads(body)["error"]["code"] == -32600, f"no session: {status} {body!r}")
    status, _, _ = http("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers={"mcp-session-id": "f" * 32})
    check(status == 404, f"an unknown session: {status}")
    status, _, _ = http("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=dict(s, **{"mcp-protocol-version": "1999-01-01"}))
    check(status == 400, f"an unknown protocol revision: {status}")
    status, body, _ = http("POST", url, [{"jsonrpc": "2.0", "id": 3, "method": "ping"}], headers=s)
    check(status == 400 and "batch" in json.loads(body)["error"]["message"], f"a batch: {status} {body!r}")
    status, body, _ = http("POST", url, {"jsonrpc": "2.0", "id": 4, "method": "nothing/here"}, headers=s)
    check(json.loads(body)["error"]["code"] == -32601, f"an unknown method: {body!r}")
    status, body, _ = http("POST", url, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}, headers=s)
    check(json.loads(body)["error"]["code"] == -32602, f"an unknown tool: {body!r}")
    status, _, _ = http("POST", url, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, headers=dict(s, Origin="http://evil.example"))
    check(status == 403, f"a foreign Origin: {status}")
    status, _, headers = http("GET", url, headers=s)
    check(status == 405 and headers.get("allow") == "POST, DELETE", f"GET /mcp: {status} {headers}")
    status, _, _ = http("DELETE", url, headers=s)
    check(status == 204, f"DELETE: {status}")
    status, _, _ = http("POST", url, {"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=s)
    check(status == 404, f"an ended session: {status}")
    print("transport: sessions, 202, 400/404, batch, Origin, GET 405, DELETE")


async def scenario(base, tmp):
    url = f"{base}/mcp"
    transport_edges(url)
    # The key applies to /mcp like to every route.
    status, body, _ = http("POST", url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, key=None)
    check(status == 401, f"/mcp without the key: {status}")
    # ... as a JSON-RPC error, the only body whose message the SDKs pass on to the host.
    check(json.loads(body)["error"]["message"].startswith("missing or unknown API key"), f"the 401's body: {body!r}")
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc)) as client:
            check(client.server_info.name == "yued", f"server info {client.server_info}")
            # The demo's random weights are said where an agent reads first.
            check("random weights" in (client.instructions or ""), f"instructions: {client.instructions}")
            print("protocol", client.protocol_version)
            tools = (await client.list_tools()).tools
            names = sorted(t.name for t in tools)
            check(names == ["cancel_song", "compose_song", "song_result", "song_status"], f"tools {names}")
            compose = next(t for t in tools if t.name == "compose_song")
            allowed = sorted(compose.input_schema["properties"])
            check(allowed == ["duration", "family", "format", "lyrics", "style"], f"compose_song's allowlist {allowed}")
            check(compose.input_schema.get("additionalProperties") is False, "compose_song's schema is closed")
            # The links' lifetime as this daemon has it (not a fixed hour).
            result_tool = next(t for t in tools if t.name == "song_result")
            check(f"{LINK_TTL} seconds" in result_tool.description, f"song_result: {result_tool.description}")
            resources = (await client.list_resources()).resources
            check([str(r.uri) for r in resources] == ["yued://guide/songwriting"], f"resources {resources}")
            guide = (await client.read_resource("yued://guide/songwriting")).contents[0].text
            check("[verse]" in guide and "MiniMax" in guide, "the guide names the tags and the families")
            check(f"works for {LINK_TTL} seconds" in guide, "the guide tells the links' lifetime")

            # Refused arguments: a sampling setting, a runtime setting, a length over the cap.
            long_lyrics = "[verse] " + "la " * 7000
            for args, word in [({"lyrics": "[verse] la", "steps": 100}, "steps"), ({"lyrics": "[verse] la", "threads": 8}, "threads"), ({"lyrics": "[verse] la", "duration": 100000}, "duration"), ({"lyrics": long_lyrics}, "lyrics: at most 20000")]:
                text = error_text(await client.call_tool("compose_song", args))
                check(word in text, f"the refusal of {args} names {word}: {text}")
            print("refused: steps, threads, duration over the cap")

            # One song per family, Opus and FLAC.
            a = structured(await client.call_tool("compose_song", {"lyrics": "[verse]\nla la la\n\n[chorus]\noh oh", "style": "pop, female vocal", "duration": 3, "format": "opus"}))
            b = structured(await client.call_tool("compose_song", {"lyrics": "[verse]\nla la", "style": "a calm piano song", "duration": 3, "family": "mm3", "format": "flac"}))
            check(a["family"] == "yue2" and b["family"] == "mm3", f"families {a} {b}")
            for job in (a, b):
                st, seen = await until_done(client, job["job_id"])
                check(st["status"] == "done", f"job {job['job_id']}: {st}")
                print("job", job["job_id"], "states seen", sorted(seen))
            # The native route knows the same job (same journal).
            status, body, _ = http("GET", f"{base}/job?id={a['job_id']}")
            check(status == 200 and json.loads(body)["status"] == "done", f"GET /job: {status} {body[:200]!r}")

            # The admission cap holds for tool calls: fill it with native jobs, then compose.
            long = {"style": "rock", "lyrics": "[verse] la", "cot": "off", "duration": 120}
            held = [json.loads(http("POST", f"{base}/synth", long)[1])["id"] for _ in range(2)]
            text = error_text(await client.call_tool("compose_song", {"lyrics": "[verse] la", "duration": 2}))
            check("admission cap" in text and "retry" in text, f"the cap refusal: {text}")
            for job in held:
                c = structured(await client.call_tool("cancel_song", {"job_id": job}))
                check(c["status"] == "cancelled", f"cancel {job}: {c}")
            # A running song stops at its stage's next check: wait for the state.
            for job in held:
                for _ in range(300):
                    if structured(await client.call_tool("song_status", {"job_id": job}))["status"] == "cancelled":
                        break
                    await asyncio.sleep(0.1)
            again = structured(await client.call_tool("cancel_song", {"job_id": held[0]}))
            check(again["status"] == "cancelled", f"a second cancel is idempotent: {again}")
            text = error_text(await client.call_tool("cancel_song", {"job_id": a["job_id"]}))
            check("already done" in text, f"cancelling a finished song: {text}")
            text = error_text(await client.call_tool("song_result", {"job_id": held[0]}))
            check("cancelled" in text, f"no link for a cancelled song: {text}")
            print("cap refused a tool call; cancel_song cancelled", held)

            # A call that names no duration gets 30 s, or the operator's cap where it is lower
            # (20 s here): it was refused as over the cap.
            described = compose.input_schema["properties"]["duration"]["description"]
            check("default 20" in described, f"the default the schema states: {described}")
            c = structured(await client.call_tool("compose_song", {"lyrics": "[verse] la"}))
            status, body, _ = http("GET", f"{base}/jobs")
            listed = next(j for j in json.loads(body)["jobs"] if j["id"] == c["job_id"])
            check(listed["request"]["duration"] == 20, f"the default duration under a 20 s cap: {listed}")
            structured(await client.call_tool("cancel_song", {"job_id": c["job_id"]}))

            # The links: the file, without the key; then 404 once expired.
            la = structured(await client.call_tool("song_result", {"job_id": a["job_id"]}))
            lb = structured(await client.call_tool("song_result", {"job_id": b["job_id"]}))
            t_links = time.time()
            # --public-url names where clients reach the daemon (not the address this client used).
            public = base.replace("127.0.0.1", "localhost")
            check(la["url"].startswith(f"{public}/links/"), f"the link ignores --public-url: {la['url']}")
            token = la["url"].rsplit("/", 1)[1]
            check(len(token) == 32 and all(c in "0123456789abcdef" for c in token), f"a 128-bit token: {token}")
            check(la["expires_in_seconds"] == LINK_TTL, f"link lifetime {la}")
            pa, ha = download(la["url"], tmp, "a.opus")
            pb, hb = download(lb["url"], tmp, "b.flac")
            check(ha.get("content-type", "").startswith("audio/ogg") and hb.get("content-type") == "audio/flac", f"content types {ha} {hb}")
            sa, sb = ffprobe(pa)["streams"][0], ffprobe(pb)["streams"][0]
            check(sa["codec_name"] == "opus" and int(sa["channels"]) == 2, f"opus stream {sa}")
            check(sb["codec_name"] == "flac" and int(sb["sample_rate"]) == 44100, f"MiniMax flac stream {sb}")
            check(os.path.getsize(pa) == la["bytes"] and os.path.getsize(pb) == lb["bytes"], "the sizes the tool said")
            print("downloaded", os.path.getsize(pa), "B opus,", os.path.getsize(pb), "B flac (44.1 kHz)")
            status, _, _ = http("GET", f"{base}/links/{'0' * 32}", key=None)
            check(status == 404, f"an unknown token: {status}")
            await asyncio.sleep(max(0.0, LINK_TTL + 1.5 - (time.time() - t_links)))
            status, body, _ = http("GET", la["url"], key=None)
            check(status == 404, f"an expired link: {status}")
            print("expired link:", status)


def main():
    yued = os.environ["YUED_BIN"]
    tmp = tempfile.mkdtemp(prefix="yued-mcp-")
    port = free_port()
    log = open(os.path.join(tmp, "daemon.log"), "w")
    env = dict(os.environ, YUED_LINK_TTL_SECS=str(LINK_TTL), YUED_MCP_MAX_SECONDS="20")
    daemon = subprocess.Popen([yued, "serve", "--port", str(port), "--data-dir", os.path.join(tmp, "data"), "--device", "CPU", "--threads", "1", "--admission-cap", "2", "--admission-share", "2", "--api-key", KEY, "--public-url", f"http://localhost:{port}/"], stdout=log, stderr=log, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                status, body, _ = http("GET", f"{base}/health", key=None)
                if status == 200 and json.loads(body)["status"] == "ok":
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("the daemon did not become ready")
        asyncio.run(scenario(base, tmp))
        print("MCP SDK OK")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
        if "--keep" not in sys.argv:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept", tmp)


if __name__ == "__main__":
    main()
