//! `/openapi.json`, built once at start from the types that parse and validate (schemars
//! derives on the protocol's requests, replies and bounds) and from this daemon's own
//! settings: the families and model files it serves, `--max-batch`, `--max-steps`, its
//! adapters, its API keys. What it says is what the handlers check; the rules a JSON
//! Schema cannot say (a code list against the codebook, a prompt against the KV cache,
//! `source_start` against the source's length, `min_tokens` against `max_tokens`, the
//! content of an upload) are written in the descriptions and answered 400 naming the field.
//! The suite drives the running daemon with schemathesis against this document.
use crate::kinds::{self, Kind};
use crate::openai::{SpeechBody, VOICES};
pub use crate::schema::Facts;
use crate::schema::{body_schema, set};
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};
use yued_protocol::{CancelReply, ErrorBody, Family, JobList, JobStatus, Props, SubmitReply};

/// The schema of `T` as the daemon writes it (a reply), `$ref`s into `definitions`.
fn reply_schema<T: JsonSchema>(defs: &mut Map<String, Value>) -> Value {
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas/".into())
        .for_serialize()
        .into_generator();
    let s = g.subschema_for::<T>().to_value();
    defs.extend(g.take_definitions(true));
    s
}

/// The `request` part of a `/vae` upload: a kind's options (no content rule, nothing
/// required); without a `family` it is YuE2's.
fn vae_options(bodies: &[(&dyn Kind, Value)]) -> Value {
    let strip = |b: &Value| {
        let mut s = b.clone();
        let o = s.as_object_mut().expect("an object schema");
        for k in ["allOf", "anyOf", "required", "description", "title"] {
            o.remove(k);
        }
        s
    };
    json!({"anyOf": bodies.iter().map(|(k, b)| k.options_schema(strip(b))).collect::<Vec<_>>()})
}

/// The `/synth` body: any served kind's.
fn synth_body(bodies: &[(&dyn Kind, Value)]) -> Value {
    let refs: Vec<Value> =
        bodies.iter().map(|(k, _)| json!({"$ref": format!("#/components/schemas/{}", k.schema_name())})).collect();
    json!({"anyOf": refs})
}

/// A family's body for `/v1/audio/music`: its native fields, `model` naming a model of
/// that family, `async`; the body's own `family` is replaced by the model's.
fn music_body(f: &Facts, body: &Value, family: Family) -> Value {
    let mut s = body.clone();
    let mut names: Vec<Value> =
        f.model_ids.iter().filter(|(_, fam)| *fam == family).map(|(m, _)| Value::from(m.as_str())).collect();
    if f.families[0] == family {
        names.insert(0, "".into());
    }
    let o = s.as_object_mut().expect("an object schema");
    let props = o.get_mut("properties").and_then(Value::as_object_mut).expect("properties");
    props.insert(
        "model".into(),
        json!({"type": "string", "enum": names, "description": "the family or one of its \
        files (GET /v1/models); empty: the first family served"}),
    );
    props.insert(
        "async".into(),
        json!({"type": "boolean", "default": false, "description": "answer with the job id \
        at once instead of the audio"}),
    );
    props.insert("family".into(), json!({"description": "ignored: the model names the family"}));
    // The model routes the body, not its fields.
    o.remove("anyOf");
    if let Some(all) = o.get_mut("allOf").and_then(Value::as_array_mut) {
        all.truncate(1);
    }
    if f.families[0] != family {
        let req = o.entry("required").or_insert(json!([]));
        req.as_array_mut().expect("a list").push("model".into());
    }
    s
}

fn error_response(desc: &str) -> Value {
    json!({"description": desc,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
}

fn openai_error(desc: &str) -> Value {
    json!({"description": desc,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAiError"}}}})
}

fn json_reply(desc: &str, schema: Value) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": schema}}})
}

/// The answers every keyed route may give besides its own.
fn common(f: &Facts, responses: &mut Map<String, Value>, openai: bool) {
    let err = |d: &str| if openai { openai_error(d) } else { error_response(d) };
    if f.api_keys {
        responses.insert("401".into(), err("no API key, or an unknown one"));
    }
}

/// Who may call a route: with an API key (native or OpenAI error shape), or anyone.
#[derive(Clone, Copy, PartialEq)]
enum Door {
    Keyed,
    OpenAi,
    Open,
}

fn op(
    f: &Facts,
    summary: &str,
    description: &str,
    params: Value,
    body: Option<Value>,
    mut responses: Map<String, Value>,
    door: Door,
) -> Value {
    let open = door == Door::Open;
    if !open {
        common(f, &mut responses, door == Door::OpenAi);
    }
    let mut o = json!({"summary": summary, "description": description, "responses": responses});
    if params.as_array().is_some_and(|p| !p.is_empty()) {
        o["parameters"] = params;
    }
    if let Some(b) = body {
        o["requestBody"] = b;
    }
    if open && f.api_keys {
        o["security"] = json!([]);
    }
    o
}

fn map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a map literal"),
    }
}

fn job_param(desc: &str) -> Value {
    json!({"name": "id", "in": "query", "required": true, "description": desc,
        "schema": {"$ref": "#/components/schemas/JobId"}})
}

/// Any value of a flag: `1` and `true` set it, anything else leaves it unset.
/// A query flag: 1 or true, 0, false or empty; another value is a 400 naming it.
fn flag_param(name: &str, required: bool, desc: &str) -> Value {
    json!({"name": name, "in": "query", "required": required, "description": desc, "schema": {"type": "string",
        "enum": ["1", "true", "0", "false", ""]}})
}

fn audio_content() -> Value {
    let mut c = Map::new();
    for mime in ["audio/mpeg", "audio/ogg", "audio/flac", "audio/aac", "audio/wav", "audio/pcm", "audio/mp4"] {
        c.insert(mime.into(), json!({"schema": {"type": "string", "format": "binary"}}));
    }
    Value::Object(c)
}

/// The whole document.
pub fn document(f: &Facts) -> Value {
    let mut defs = Map::new();
    let r = Replies {
        submit: reply_schema::<SubmitReply>(&mut defs),
        status: reply_schema::<JobStatus>(&mut defs),
        cancel: reply_schema::<CancelReply>(&mut defs),
        jobs: reply_schema::<JobList>(&mut defs),
        props: reply_schema::<Props>(&mut defs),
        health: reply_schema::<crate::http::Health>(&mut defs),
        queue_status: reply_schema::<crate::http::Status>(&mut defs),
    };
    reply_schema::<ErrorBody>(&mut defs);
    let k = kind_bodies(f, &mut defs);
    let mut paths = Map::new();
    job_paths(f, &r, &k, &mut paths);
    stream_paths(f, &mut paths);
    ticket_paths(f, &mut defs, &mut paths);
    server_paths(f, &r, &mut paths);
    openai_paths(f, &k, &mut paths);
    mcp_paths(f, &mut paths);
    page_paths(f, &mut paths);
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "yued", "version": env!("CARGO_PKG_VERSION"), "description": "Song generation (YuE2 and \
            MiniMax Music 3): each family's native job contract (as yue2.cpp's and minimaxmusic.cpp's \
            architecture references define it), OpenAI-compatible routes, an MCP server. Errors are JSON naming \
            the field at fault: {\"error\": \"field: what is wrong\"} \
                (OpenAI's shape on /v1). Every route answers another method with 405 and an Allow header."},
        "paths": paths,
        "components": {"schemas": defs},
    });
    if f.api_keys {
        doc["components"]["securitySchemes"] = json!({"bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}});
        doc["security"] = json!([{"bearer": []}, {"apiKey": []}]);
    }
    doc
}

/// The schemas of the replies the routes answer with.
struct Replies {
    submit: Value,
    status: Value,
    cancel: Value,
    jobs: Value,
    props: Value,
    health: Value,
    queue_status: Value,
}

/// The bodies the routes take that depend on the kinds served.
struct KindBodies {
    synth: Value,
    vae_options: Value,
    music: Vec<Value>,
}

/// Each served kind's body (in the order the daemon serves them) and OpenAI's bodies into
/// `defs`; the bodies built from them.
fn kind_bodies(f: &Facts, defs: &mut Map<String, Value>) -> KindBodies {
    let bodies: Vec<(&dyn Kind, Value)> =
        f.families.iter().map(|&fam| (kinds::of(fam), kinds::of(fam).body_schema(f))).collect();
    let mut speech = body_schema::<SpeechBody>();
    {
        let mut models = vec![Value::from("")];
        models.extend(f.model_ids.iter().map(|(m, _)| Value::from(m.as_str())));
        set(&mut speech, "model", "enum", Value::Array(models));
        let mut voices: Vec<Value> = VOICES.iter().map(|(n, _)| Value::from(*n)).collect();
        voices.extend([Value::from(""), Value::Null]);
        set(&mut speech, "voice", "enum", Value::Array(voices));
        speech["title"] = "OpenAI speech request".into();
    }
    let music: Vec<Value> = bodies.iter().map(|(k, b)| music_body(f, b, k.family())).collect();
    let vae_options = vae_options(&bodies);
    let synth = synth_body(&bodies);
    for (k, b) in bodies {
        defs.insert(k.schema_name().into(), b);
    }
    defs.insert("SpeechBody".into(), speech);
    defs.insert(
        "OpenAiError".into(),
        json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "object",
            "required": ["message", "type"], "properties": {"message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}),
    );

    KindBodies { synth, vae_options, music }
}

/// What a key whose role does not reach a route gets.
fn forbidden(f: &Facts, mut m: Map<String, Value>, what: &str) -> Map<String, Value> {
    if f.api_keys {
        m.insert("403".into(), error_response(what));
    }
    m
}

fn too_large(n: usize) -> Value {
    error_response(&format!("the body is larger than {n} bytes"))
}

fn not_a_form() -> Value {
    error_response("the body is not multipart/form-data")
}

fn full() -> Value {
    json!({"description": "the admission cap, or the caller's share of it, is reached: retry later",
        "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
}

fn unavailable() -> Value {
    error_response("the job could not be journaled (it is not accepted), or the daemon is shutting down")
}

/// An upload route's 503: also when the uploads' memory is full (Retry-After says when).
fn upload_unavailable() -> Value {
    error_response(
        "the uploads' memory is full (with Retry-After), the job could not be journaled, or the daemon \
        is shutting down",
    )
}

/// An upload body that sent nothing for 30 s.
fn stalled() -> Value {
    error_response("the body stopped arriving (30 s without a byte)")
}

fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

const WS_NOTE: &str =
    "A WebSocket (RFC 6455): the 101 upgrade answers a GET with the handshake headers. Then text frames \
        carry JSON events (queued, stage, score, codes, format, tile, done, failed, cancelled) and binary frames the \
        audio, exactly one after each tile event: Ogg Opus pages by default (one Ogg stream per track: a track's \
        frames, by the tile event's track, concatenate to a playable .opus file; a frame may be empty, and a track \
        ends with a tile of 0 samples carrying its last pages), or with format=pcm16 interleaved s16le, one frame \
        per decoded tile. The daemon pings an idle listener and closes one that stops answering or reads too \
        slowly, with a reason (close codes: 1000 the job ended, 1001 the daemon stops, 1008 too slow or refused, \
        1011 a server error, the reason says which, 1013 the queue is full).";

/// The job routes: submit a song or a VAE job, a job's status, result and cancel, the jobs.
fn job_paths(f: &Facts, r: &Replies, k: &KindBodies, paths: &mut Map<String, Value>) {
    paths.insert(
        "/synth".into(),
        json!({"post": op(f, "Submit a song", "The native job contract: the body is a YuE2 or MiniMax Music 3 \
            request; the answer is the job id at once. Poll GET /job, follow GET /stream, fetch GET /job?result=1.",
            json!([]), Some(json_body(k.synth.clone())),
            map(json!({"200": json_reply("the job id", r.submit.clone()), "400": error_response("the body is not a \
                request of a served family; the error names the field"), "413": too_large(f.max_body_bytes),
                "429": full(), "503": unavailable()})), Door::Keyed)}),
    );
    let vae_request = "a JSON request of options (YuE2's by default; with \"family\": \"mm3\" MiniMax Music 3's): \
        output_format, peak_clip, mp3_bitrate and, for MiniMax, vae_model";
    paths.insert(
        "/vae".into(),
        json!({"post": op(f, "Encode audio to latents, or decode latents to audio", &format!("multipart/form-data \
            with exactly one of `audio` (any file symphonia decodes: WAV, FLAC, MP3, Ogg, AAC/M4A; encoded to YuE2's \
            [T, 64] latents at 25 Hz, or MiniMax's [T, 128]) or `src_latents` (raw little-endian f32 latents, decoded \
            to audio), and an optional `request` part. The upload is checked before it is queued: audio that does not \
            decode, latents that are not whole frames, hold NaN or exceed the model's length are a 400. At most {} \
            bytes.", f.max_upload_bytes), json!([]),
            Some(json!({"required": true, "content": {"multipart/form-data": {
                "schema": {"type": "object", "properties": {"audio": {"type": "string", "format": "binary",
                    "description": "audio to encode"}, "src_latents": {"type": "string", "format": "binary",
                    "description": "raw f32 latents to decode"}, "request": {"allOf": [k.vae_options.clone()],
                    "description": vae_request}}, "additionalProperties": false,
                    "oneOf": [{"required": ["audio"]}, {"required": ["src_latents"]}],
                    "description": "exactly one of audio and src_latents (both, or neither, is a 400)"},
                "encoding": {"request": {"contentType": "application/json"}}}}})),
            map(json!({"200": json_reply("the job id", r.submit.clone()), "400": error_response("a part \
                missing, twice or unknown, or an upload that does not check"),
                "408": stalled(), "413": too_large(f.max_upload_bytes), "415": not_a_form(), "429": full(),
                "500": error_response("the upload could not be stored"), "503": upload_unavailable()})), Door::Keyed)}),
    );
    if f.tokenize {
        paths.insert(
            "/tokenize".into(),
            json!({"post": op(f, "Turn a recording into semantic codes", &format!("multipart/form-data with one \
                `audio` part: any file symphonia decodes (WAV, FLAC, MP3, Ogg, AAC/M4A), any rate and channel count, \
                from one second to {:.0} s. The audio tokenizer (MERT-v2 and its head) writes the 25 Hz codes a YuE2 \
                request's semantic_tokens (render again) or source_tokens (continue) take; the job's result is \
                {{\"codes\": \"12046,8433,...\"}}. The upload is checked before it is queued: a missing part, audio \
                that does not decode, under a second or too long is a 400. At most {} bytes.",
                crate::http::MAX_TOKENIZE_SECONDS, f.max_upload_bytes), json!([]),
                Some(json!({"required": true, "content": {"multipart/form-data": {
                    "schema": {"type": "object", "properties": {"audio": {"type": "string", "format": "binary",
                        "description": "the recording"}}, "required": ["audio"], "additionalProperties": false}}}})),
                map(json!({"200": json_reply("the job id", r.submit.clone()), "400": error_response("no audio \
                    part, a part twice or unknown, or audio that does not decode or is out of bounds"),
                    "408": stalled(), "413": too_large(f.max_upload_bytes), "415": not_a_form(), "429": full(),
                    "500": error_response("the upload could not be stored"),
                    "503": upload_unavailable()})), Door::Keyed)}),
        );
    }
    if f.transcribe {
        paths.insert("/transcribe".into(), transcribe_path(f, r));
    }
    let codes = json!({"type": "object", "required": ["codes"], "additionalProperties": false, "properties":
        {"codes": {"type": "string", "description": "comma separated semantic codes, 25 per second"}},
        "description": "a tokenization job's result"});
    let score = json!({"type": "object", "required": ["abc"], "additionalProperties": false, "properties":
        {"abc": {"type": "string", "description": "the ABC score (X:1, T:, M:, L:, Q:, the Vocal and Ins voices, K:)"}},
        "description": "a transcription job's result"});
    paths.insert(
        "/job".into(),
        json!({
            "get": op(f, "A job's status, or its result", "With result=1 (or true), the finished job's result: \
                multipart/mixed, one part per file (the audio tracks, a replay request per track, the latents of a VAE \
                job); a tokenization job's is its codes, a transcription job's its score, as JSON. Otherwise the \
                status.",
                json!([job_param("the job"), flag_param("result", false, "1 or true: the \
                result instead of the status")]), None,
                map(json!({"200": {"description": "the status (JSON), or the result (multipart/mixed; JSON codes)",
                    "content": {"application/json": {"schema": {"anyOf": [r.status.clone(), codes, score]}},
                    "multipart/mixed": {"schema": {"type": "string",
                    "format": "binary"}}}}, "400": error_response("a malformed id or result flag, or a cancel sent \
                    as a GET"), "404": error_response("an unknown job, or no result (not done, or expired)"),
                    "503": error_response("the scheduler is not running")})), Door::Keyed),
            "post": op(f, "Cancel a job", "cancel=1 (or true) cancels a queued or running job; cancelling a cancelled \
                job answers the same.", json!([job_param("the job"), {"name": "cancel", "in": "query", "required": true,
                "schema": {"type": "string", "enum": ["1", "true"]}}]), None,
                map(json!({"200": json_reply("cancelled", r.cancel.clone()),
                    "400": error_response("a malformed id, or cancel \
                    is not 1"), "404": error_response("an unknown job"), "409": error_response("the job has already \
                    ended (done or failed)"), "503": error_response("the scheduler is not running")})), Door::Keyed),
        }),
    );
    paths.insert(
        "/jobs".into(),
        json!({"get": op(f, "The caller's jobs", "The jobs submitted with the caller's API key (else from its \
            address) that the daemon still knows, oldest first, with their journaled requests. all=1 (an admin key): \
            every principal's, each naming its owner.", json!([flag_param("all", false, "1 or true: every principal's \
            jobs (an admin key)")]), None, forbidden(f, map(json!({"200": json_reply("the jobs", r.jobs.clone()),
            "400": error_response("a malformed all flag"), "503": error_response("the scheduler is not running")})),
            "all=1 without an admin key"), Door::Keyed)}),
    );
}

/// The WebSocket routes.
fn stream_paths(f: &Facts, paths: &mut Map<String, Value>) {
    let ws_fail =
        map(json!({"101": {"description": "switching protocols: the stream follows"}, "400": error_response("not a \
            WebSocket handshake, or a malformed parameter")}));
    let mut stream_r = ws_fail.clone();
    stream_r.insert("404".into(), error_response("an unknown job"));
    let format = json!({"name": "format", "in": "query", "required": false, "schema": {"type": "string",
        "enum": ["opus", "pcm16"]}});
    let handshake = [
        json!({"name": "Upgrade", "in": "header", "required": true, "schema": {"type": "string",
            "enum": ["websocket"]}}),
        json!({"name": "Sec-WebSocket-Key", "in": "header", "required": true, "schema": {"type": "string",
            "pattern": "^[A-Za-z0-9+/]{22}==$"}}),
        json!({"name": "Sec-WebSocket-Version", "in": "header", "required": true, "schema": {"type": "string",
            "enum": ["13"]}}),
    ];
    let with_handshake = |mut p: Vec<Value>| {
        if f.api_keys {
            p.push(ticket_param());
        }
        p.extend(handshake.iter().cloned());
        Value::Array(p)
    };
    paths.insert(
        "/stream".into(),
        json!({"get": op(f, "Follow a job (WebSocket)", &format!("{WS_NOTE} A finished job \
        replays its audio as tiles, then its final event, then a close."), with_handshake(vec![job_param("the job to \
        follow"), format.clone()]), None, stream_r, Door::Keyed)}),
    );
    paths.insert(
        "/synth/stream".into(),
        json!({"get": op(f, "Submit and follow (WebSocket)", &format!("{WS_NOTE} The \
        first text message is the request (a /synth body); {{\"cmd\": \"cancel\"}} cancels the job. Closing the \
            socket does not."), with_handshake(vec![format]), None, ws_fail, Door::Keyed)}),
    );
}

/// The query parameter a browser's stream is admitted by instead of its key.
fn ticket_param() -> Value {
    json!({"name": "ticket", "in": "query", "required": false, "description": "a stream ticket (POST /tickets) \
        instead of the API key: for a browser, which cannot set a header here. Taken once.",
        "schema": {"type": "string"}})
}

/// `POST /tickets`.
fn ticket_paths(f: &Facts, defs: &mut Map<String, Value>, paths: &mut Map<String, Value>) {
    let reply = reply_schema::<crate::tickets::TicketReply>(defs);
    let body = json!({"required": true, "content": {"application/json": {"schema": {"oneOf": [
        {"type": "object", "title": "A job's WebSocket", "properties": {"path": {"const": "/stream"},
            "id": {"$ref": "#/components/schemas/JobId"}}, "required": ["path", "id"], "additionalProperties": false},
        {"type": "object", "title": "A submission's WebSocket, or the log (an admin key)",
            "properties": {"path": {"enum": ["/synth/stream", "/logs"]}}, "required": ["path"],
            "additionalProperties": false}]}}}});
    paths.insert(
        "/tickets".into(),
        json!({"post": op(f, "A stream ticket", "A ticket to open one stream (/stream of one job, /synth/stream or \
        /logs) with ?ticket= instead of ?api_key=: a WebSocket or an EventSource cannot set a header, and a key in a \
        URL ends up in proxy logs and browser history. Signed with the caller's key, good for 60 s, taken once; a \
        node whose keys file holds the same key takes it too. 400 on a daemon without API keys (its streams need \
        none).", json!([]), Some(body), forbidden(f, map(json!({"200": json_reply("the ticket", reply),
        "400": error_response("the body is not a ticket request, a route that takes none, a /stream ticket without a \
        job id, or a daemon without API keys")})), "a /logs ticket without an admin key"), Door::Keyed)}),
    );
}

/// The daemon's own routes: health, status, what it serves, its log and metrics, this
/// document.
fn server_paths(f: &Facts, r: &Replies, paths: &mut Map<String, Value>) {
    for (path, what) in [
        ("/health", "Liveness and readiness"),
        ("/status", "Health, queue and result storage"),
        ("/system/queue", "The same as /status"),
    ] {
        let (schema, description, door, params) = if path == "/health" {
            (
                r.health.clone(),
                "Open without an API key: status, readiness and uptime, no job ids. Liveness: a 200 while the \
                process answers, its status unhealthy while the journal refuses writes (it is tried again every 5 s; \
                submissions are refused until a write succeeds) or degraded while a cluster node's connection is \
                down. With ready=1, a readiness probe: a 503 until it is ready and while either lasts.",
                Door::Open,
                json!([flag_param("ready", false, "1 or true: a readiness probe, 503 until `ready` is true")]),
            )
        } else {
            (
                r.queue_status.clone(),
                "The queue's figures and the running jobs' ids: the caller's own (an admin key: \
                all). 503 while the journal refuses writes.",
                Door::Keyed,
                json!([]),
            )
        };
        paths.insert(
            path.into(),
            json!({"get": op(f, what, description, params, None, map(json!({"200": json_reply("ok or loading",
                schema.clone()), "400": error_response("a malformed ready flag"), "503": {"description": "unhealthy \
                (the journal refuses writes), not ready (ready=1: also while a cluster node's connection is down), \
                or the scheduler is not running", "content": {"application/json": {"schema": {"anyOf": [schema,
                {"$ref": "#/components/schemas/ErrorBody"}]}}}}})), door)}),
        );
    }
    paths.insert(
        "/props".into(),
        json!({"get": op(f, "What this daemon serves", "Version, models, rates, context, \
        output formats, adapters, and each family's default request.", json!([]), None,
        map(json!({"200": json_reply("the server's description", r.props.clone())})), Door::Keyed)}),
    );
    paths.insert(
        "/logs".into(),
        json!({"get": op(f, "The daemon's log (server-sent events)", "The last 512 lines, \
        then each new one, as they come; the stream does not end. An admin key where keys are configured.",
        if f.api_keys { json!([ticket_param()]) } else { json!([]) },
        None, forbidden(f, map(json!({"200": {"description": "an event stream",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}}})), "not an admin key"), Door::Keyed)}),
    );
    paths.insert(
        "/metrics".into(),
        json!({"get": op(f, "Prometheus metrics", "The text exposition format (the yued_ \
        metrics and the process's). An admin or a metrics key where keys are configured (or the --metrics-listen port, \
        without one).", json!([]), None, forbidden(f, map(json!({"200": {"description": "metrics",
        "content": {"text/plain": {"schema": {"type": "string"}}}}})), "not an admin or a metrics key"),
        Door::Keyed)}),
    );
    paths.insert(
        "/openapi.json".into(),
        json!({"get": op(f, "This document", "Open without an API key.", json!([]),
        None, map(json!({"200": {"description": "OpenAPI 3.1",
        "content": {"application/json": {"schema": {"type": "object"}}}}})), Door::Open)}),
    );
}

/// The OpenAI-compatible routes.
fn openai_paths(f: &Facts, k: &KindBodies, paths: &mut Map<String, Value>) {
    paths.insert(
        "/v1/models".into(),
        json!({"get": op(f, "OpenAI-compatible: the models", "The families served, then each model file, in OpenAI's \
            list shape.", json!([]), None,
            map(json!({"200": json_reply("the list", json!({"type": "object", "required": ["object", "data"],
                "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"type": "object",
                "required": ["id", "object", "owned_by"], "properties": {"id": {"type": "string"},
                "object": {"const": "model"}, "created": {"type": "integer"}, "owned_by": {"type": "string"},
                "family": {"type": "string"}, "component": {"type": "string"}}}}}}))})), Door::OpenAi)}),
    );
    paths.insert(
        "/v1/models/{id}".into(),
        json!({"get": op(f, "OpenAI-compatible: one model", "One entry of GET /v1/models (what LangChain and LiteLLM \
            ask to probe a model); an id it does not list is a 404 in OpenAI's shape.",
            json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]), None,
            map(json!({"200": json_reply("the model", json!({"type": "object", "required": ["id", "object", "owned_by"],
                "properties": {"id": {"type": "string"}, "object": {"const": "model"}, "created": {"type": "integer"},
                "owned_by": {"type": "string"}, "family": {"type": "string"}, "component": {"type": "string"}}})),
                "404": openai_error("no model of this id")})), Door::OpenAi)}),
    );
    let openai_answers = |first: Value| {
        map(json!({"200": first, "400": openai_error("the body is not a request; param names the field"),
                "409": openai_error("the job was cancelled before it ended"), "413": openai_error(&format!("the body \
                is larger than {} bytes", f.max_body_bytes)), "422": openai_error("the song failed (for example: the \
                model could not write a valid score on these weights)"), "429": {"description": "the admission cap, or \
                the caller's share of it, is reached (the SDKs' RateLimitError)",
                "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAiError"}}}},
                "503": openai_error("the job could not be journaled, or the daemon is shutting down")}))
    };
    let voices = VOICES.iter().map(|(n, s)| format!("{n}: {s}")).collect::<Vec<_>>().join("; ");
    paths.insert(
        "/v1/audio/speech".into(),
        json!({"post": op(f, "OpenAI-compatible speech: a song", &format!("OpenAI's speech body: input is the lyrics, \
            instructions the style (YuE2) or caption (MiniMax), voice a style preset put before them ({voices}). \
            Answers with the audio: opus and pcm (s16le stereo at the family's rate) flow as the tiles are encoded, \
            the other formats once the file is written. The job id is in x-yued-job. An ordinary job: same admission \
            cap, fairness, journal; a client that disconnects cancels it."), json!([]),
            Some(json_body(json!({"$ref": "#/components/schemas/SpeechBody"}))),
            openai_answers(json!({"description": "the audio", "headers": {"x-yued-job": {"schema": {"type": "string"}}},
                "content": audio_content()})), Door::OpenAi)}),
    );
    if f.transcribe {
        let text = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string",
            "description": "the ABC score"}}});
        paths.insert(
            "/v1/audio/transcriptions".into(),
            json!({"post": op(f, "OpenAI-compatible transcription: a recording's score", &format!("OpenAI's \
                transcription form: file (any container /transcribe takes, up to {:.0} s), model the transcriber \
                (sheetsage2, or its file's name), response_format json ({{\"text\": \"X:1...\"}}) or text (the ABC \
                itself); language, prompt and temperature are taken and ignored; melody_only (true or false) leaves \
                the chord symbols out. A /transcribe job the caller waits for: same checks, cap, fairness, journal; \
                a client that disconnects cancels it; a recording whose events make no score is a 422 naming why.",
                crate::http::MAX_TRANSCRIBE_SECONDS), json!([]),
                Some(json!({"required": true, "content": {"multipart/form-data": {"schema": {"type": "object",
                    "required": ["file", "model"], "additionalProperties": false, "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "model": {"type": "string", "enum": ["sheetsage2"]},
                    "response_format": {"type": "string", "enum": ["json", "text"]},
                    "melody_only": {"type": "string", "enum": ["true", "false", "1", "0"]},
                    "language": {"type": "string"}, "prompt": {"type": "string"},
                    "temperature": {"type": "string"}}}}}})),
                {
                    let mut a = openai_answers(json!({"description": "the score", "headers": {"x-yued-job": {"schema":
                        {"type": "string"}}}, "content": {"application/json": {"schema": text},
                        "text/plain": {"schema": {"type": "string"}}}}));
                    a.insert("415".into(), openai_error("the body is not multipart/form-data"));
                    // An upload's bound, not a JSON body's.
                    a.insert("413".into(), openai_error(&format!("the upload is larger than {} bytes",
                        f.max_upload_bytes)));
                    a.insert("408".into(), openai_error("the body stopped arriving (30 s without a byte)"));
                    a.insert("503".into(), openai_error("the uploads' memory is full (with Retry-After), the job \
                        could not be journaled, or the daemon is shutting down"));
                    a
                }, Door::OpenAi)}),
        );
    }
    let mut music_ok = audio_content();
    music_ok["application/json"] = json!({"schema": {"type": "object", "required": ["id", "object", "status"],
        "properties": {"id": {"$ref": "#/components/schemas/JobId"}, "object": {"const": "music.job"},
        "status": {"const": "queued"}, "status_url": {"type": "string"}, "result_url": {"type": "string"},
        "ignored": {"type": "array", "items": {"type": "string"}, "description": "the body's fields the request \
        does not read (an audio answer names them in an x-yued-ignored header)"}}}});
    paths.insert(
        "/v1/audio/music".into(),
        json!({"post": op(f, "A family's native request, answered with its audio", "The body is a /synth body of the \
            family `model` names, plus model and async. Answers with the first track's audio (one opus track flows as \
            it is encoded), or with async: true the job id at once (JSON). A client that disconnects from a waiting \
            answer cancels the job.", json!([]), Some(json_body(json!({"anyOf": k.music.clone()}))),
            openai_answers(json!({"description": "the audio, or the job (async)",
                "headers": {"x-yued-job": {"schema": {"type": "string"}}}, "content": music_ok})), Door::OpenAi)}),
    );
}

/// The MCP server.
fn mcp_paths(f: &Facts, paths: &mut Map<String, Value>) {
    let rpc = json!({"type": "object", "required": ["jsonrpc"], "properties": {"jsonrpc": {"const": "2.0"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": i64::MIN, "maximum": u64::MAX}]},
        "method": {"type": "string"}, "params": {"type": "object"}, "result": {}, "error": {"type": "object"}},
        "anyOf": [{"required": ["method"]}, {"required": ["result"]}, {"required": ["error"]}],
            "description": "a request (method and id), a notification (method) or a response (result or error)"});
    let rpc_reply = json!({"type": "object", "required": ["jsonrpc"], "properties": {"jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]}, "result": {"type": "object"}, "error": {"type": "object",
        "required": ["code", "message"], "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}}});
    let session = json!({"name": "Mcp-Session-Id", "in": "header", "required": false, "description": "the session \
        initialize opened (every message but initialize names it)", "schema": {"type": "string"}});
    paths.insert(
        "/mcp".into(),
        json!({
            "post": op(f, "MCP (Streamable HTTP): one JSON-RPC message", "The Model Context Protocol, revisions \
                2025-03-26 to 2025-11-25: initialize (opens a session, Mcp-Session-Id), ping, tools/list, tools/call \
                (compose_song, song_status, song_result, cancel_song), resources/list, resources/read \
                (yued://guide/songwriting). A request is answered with one JSON-RPC response; a notification or a \
                response with 202.", json!([session.clone()]), Some(json_body(rpc)),
                map(json!({"200": json_reply("the JSON-RPC response (an error in it for an unknown method or tool)",
                    rpc_reply.clone()), "202": {"description": "a notification or response, accepted"},
                    "400": json_reply("not one JSON-RPC message, no session named, or an unknown protocol revision",
                    rpc_reply.clone()), "403": json_reply("an Origin that is not this server", rpc_reply.clone()),
                    "404": json_reply("an ended or unknown session", rpc_reply.clone()),
                    "413": too_large(f.max_body_bytes)})), Door::Keyed),
            "delete": op(f, "MCP: end a session", "", json!([{"name": "Mcp-Session-Id", "in": "header",
                "required": true, "schema": {"type": "string"}}]), None,
                map(json!({"204": {"description": "ended"}, "400": json_reply("no session named", rpc_reply.clone()),
                    "404": json_reply("an unknown session", rpc_reply)})), Door::Keyed),
        }),
    );
}

/// The exported songs' links, the WebUI and the reference page.
fn page_paths(f: &Facts, paths: &mut Map<String, Value>) {
    paths.insert(
        "/links/{token}".into(),
        json!({"get": op(f, "An exported song (MCP's song_result)", &format!("The song's own Opus or FLAC file. The \
            token is the capability: no API key; a 404 {} seconds after the link was made, or once the result has \
            expired.", f.link_ttl_secs),
            json!([{"name": "token", "in": "path", "required": true, "schema": {"type": "string"}}]), None,
            map(json!({"200": {"description": "the file", "content": {"audio/flac": {"schema": {"type": "string",
                "format": "binary"}}, "audio/ogg": {"schema": {"type": "string", "format": "binary"}}}},
                "404": error_response("no such link, or it has expired")})), Door::Open)}),
    );
    for (path, what, mime) in
        [("/", "The WebUI", "text/html"), ("/docs", "This API's reference page (Swagger UI, compiled in)", "text/html")]
    {
        paths.insert(
            path.into(),
            json!({"get": op(f, what, "Open without an API key.", json!([]), None,
                map(json!({"200": {"description": what, "content": {mime: {"schema": {"type": "string"}}}}})),
                Door::Open)}),
        );
    }
}

/// `POST /transcribe`, served with a transcriber.
fn transcribe_path(f: &Facts, r: &Replies) -> Value {
    let about = format!(
        "multipart/form-data with one `audio` part (as /tokenize takes it, up to {:.0} s) and an optional \
        `melody_only` part (true or false, default false). The SheetSage2 transcriber (MERT-v2 with its LoRA, a \
        BART decoder under the event grammar, the notation) hears the score a YuE2 request's abc takes; a recording \
        longer than the head's window (300 s) is transcribed in overlapping windows. The job's result is \
        {{\"abc\": \"X:1\\n...\"}}: both melody voices with chord symbols, or with melody_only the melodies alone. \
        A job whose events make no score fails, naming why. At most {} bytes.",
        crate::http::MAX_TRANSCRIBE_SECONDS,
        f.max_upload_bytes
    );
    let body = json!({"required": true, "content": {"multipart/form-data": {"schema": {"type": "object",
        "properties": {"audio": {"type": "string", "format": "binary", "description": "the recording"},
        "melody_only": {"type": "string", "enum": ["true", "false", "1", "0"],
        "description": "the melodies without chord symbols"}}, "required": ["audio"],
        "additionalProperties": false}}}});
    let replies = json!({"200": json_reply("the job id", r.submit.clone()), "400": error_response("no audio \
        part, a part twice or unknown, melody_only not a flag, or audio that does not decode or is \
        out of bounds"), "408": stalled(), "413": too_large(f.max_upload_bytes), "415": not_a_form(), "429": full(),
        "500": error_response("the upload could not be stored"), "503": upload_unavailable()});
    let summary = "Turn a recording into an ABC score";
    json!({"post": op(f, summary, &about, json!([]), Some(body), map(replies), Door::Keyed)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use yued_protocol::{Limits, OutputFormat};

    fn facts() -> Facts {
        Facts {
            families: vec![Family::Yue2, Family::Mm3],
            limits: Limits { max_batch: 2, max_steps: 40, ..Limits::default() },
            formats: OutputFormat::all().to_vec(),
            mm3_models: vec![("lm_model", vec!["a-lm.gguf".into()]), ("vae_model", vec!["a-vae.gguf".into()])],
            adapters: vec![],
            model_ids: vec![
                ("yue2".into(), Family::Yue2),
                ("mm3".into(), Family::Mm3),
                ("y.gguf".into(), Family::Yue2),
                ("a-lm.gguf".into(), Family::Mm3),
            ],
            api_keys: true,
            max_body_bytes: 1 << 20,
            max_upload_bytes: 1 << 20,
            link_ttl_secs: 3600,
            tokenize: true,
            transcribe: true,
        }
    }

    /// Every `$ref` names a schema of the document.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn the_document_resolves_and_carries_the_daemon_bounds() {
        let d = document(&facts());
        let mut found = Vec::new();
        refs(&d, &mut found);
        assert!(!found.is_empty());
        for r in found {
            assert!(d.pointer(r.trim_start_matches('#')).is_some(), "{r} does not resolve");
        }
        let y = &d["components"]["schemas"]["Yue2Body"]["properties"];
        assert_eq!(y["lm_batch_size"]["anyOf"][0]["maximum"], 2);
        assert_eq!(y["steps"]["anyOf"][0]["maximum"], 40);
        assert_eq!(y["steps"]["anyOf"][1]["type"], "null");
        assert_eq!(y["adapters"]["anyOf"][0]["maxItems"], 0);
        assert_eq!(y["duration"]["anyOf"][0]["exclusiveMinimum"], 0);
        assert_eq!(y["duration"]["default"], 360.0);
        let m = &d["components"]["schemas"]["Mm3Body"];
        assert_eq!(m["required"], json!(["caption", "lyrics"]));
        assert_eq!(m["properties"]["lm_model"]["anyOf"][0]["enum"], json!(["", "a-lm.gguf"]));
        assert_eq!(m["properties"]["steps"]["anyOf"][0]["minimum"], 2);
        // The replies are the protocol's types.
        assert!(d["components"]["schemas"]["JobStatus"]["properties"]["queue_position"].is_object());
        assert_eq!(d["paths"]["/health"]["get"]["security"], json!([]));
        assert!(d["paths"]["/synth"]["post"]["responses"]["401"].is_object());
    }
}
