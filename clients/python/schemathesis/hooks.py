"""A check of yued's own for schemathesis: a schema-valid request may be refused (400) only
for one of the rules the OpenAPI document lists as beyond a JSON Schema (cross-field bounds,
the model's codebook and context, the content of an upload). Any other 400 on positive data
is a schema that promises too much, and fails the run.

schemathesis.toml lets 400 through positive_data_acceptance for the operations that have
such rules; this check is what keeps that exception narrow.
"""
import json
import re
import urllib.request

import schemathesis

# Each: the message a rule the schema cannot express answers with (the field first).
RULES = [
    r"do not fit the KV cache",                                  # prompt + score budget + codes vs the context
    r"^(semantic_tokens|source_tokens): entry \d+ \(\d+\) is (outside|out of range)",  # codes vs the codebook
    r"^(semantic_tokens|source_tokens): \d+ codes do not fit",
    r"^source_tokens: is exclusive with semantic_tokens",
    r"^abc_continue: ",                                           # needs an abc, a cot that plans, no semantic_tokens
    r"^source_start: .* is past the end of the source",
    r"^source_end: must be -1 or at least source_start",
    r"^(abc_sampling|semantic_sampling)\.min_tokens: must not exceed max_tokens",
    r"^audio_codes: ",                                            # whole frames, their count, each code vs its codebook
    r"^lyrics: .*token",                                          # MiniMax's prompt budget
    r"^duration: must be at least 0\.04 s",                      # MiniMax: one 25 Hz frame (unless audio_codes)
    r"^adapters\[\d+\]\.name: must not be empty",                 # a name of Unicode spaces only
    r"^audio: ",                                                  # /vae, /tokenize, /transcribe: an upload that does not decode, or out of bounds
    r"^file: ",                                                   # /v1/audio/transcriptions: the same, its part named file
    r"^src_latents: ",                                            # /vae: not whole frames, NaN, too long
    r"^give exactly one of 'audio'",                              # /vae: the parts' rule
    r"^request: ",                                               # /vae: the request part's JSON (as the part's encoding sends it)
    r"^multipart",                                                # /vae: the framing the HTTP client writes
    r"^(caption|lyrics): is required and must not be empty",      # a blank the ECMA and Rust whitespace classes disagree on
    r"^input: the lyrics must not be empty",
    r"^Mcp-Session-Id: missing",                                 # MCP: every message but initialize names its session (state)
    # JSON has one number type, and a JSON Schema "integer" admits 400.0; yued reads the
    # integer fields as integers, so an integral float is refused (plan_retries by name).
    r"invalid type: floating point `-?[0-9.e+-]+`, expected (i64|u32|u64|i32)",
    r"^plan_retries: must be an integer in \[0, \d+\], got -?[0-9.e+-]+$",
    r"^id: must be a string or an integer",                       # a JSON-RPC id of 1.0, the same rule
]


def message(response):
    try:
        body = json.loads(response.content)
    except ValueError:
        return ""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    return err if isinstance(err, str) else ""


@schemathesis.check
def only_listed_rules_refuse_valid_data(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    text = message(response)
    if not any(re.search(r, text) for r in RULES):
        raise AssertionError(f"schema-valid data refused by a rule the schema does not list: {text!r}")
    return None


@schemathesis.hook
def after_call(context, case, response):
    """A job /synth, /vae, /tokenize or /transcribe accepted is cancelled at once: the run tests the
    contract, and a queue of rendering songs would only slow the routes that wait for their own."""
    if case.operation.method.upper() != "POST" or case.operation.path not in ("/synth", "/vae", "/tokenize", "/transcribe") or response.status_code != 200:
        return
    try:
        job = json.loads(response.content)["id"]
    except (ValueError, KeyError, TypeError):
        return
    base = case.operation.base_url or ""
    headers = {k: v for k, v in (response.request.headers or {}).items() if k.lower() in ("authorization", "x-api-key")}
    req = urllib.request.Request(f"{base.rstrip('/')}/job?id={job}&cancel=1", method="POST", headers=headers)
    try:
        urllib.request.urlopen(req, timeout=30).read()
    except OSError:
        pass
