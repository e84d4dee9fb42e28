//! The MCP server at `/mcp` (yue2.cpp's architecture reference, "Endpoints"): the Streamable HTTP transport of the
//! Model Context Protocol, handshake era (2025-03-26 to 2025-11-25), as a JSON-RPC 2.0
//! handler. One message per POST; a request is answered with one JSON body, a notification
//! or response with 202. `initialize` opens a session (`Mcp-Session-Id`); every later
//! message names it (400 without, 404 for an unknown or ended one); DELETE ends it. No
//! server-to-client stream is offered (GET is a 405), which the transport allows.
//!
//! Four song tools — `compose_song`, `song_status`, `song_result`, `cancel_song` — whose
//! argument allowlist reaches only a song's words, family, length and file format: never a
//! sampling, runtime or model setting. One resource, the songwriting guide. A tool call is
//! an ordinary job under the same API keys (the middleware), admission cap and fairness key
//! as `/synth`. A finished song leaves only as its Opus or FLAC file, through an expiring
//! capability link (`/links/{token}`, see `links.rs`).
use crate::http::{check_request, client_key, submit, AppState};
use crate::reply;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde_json::{json, Value};
use yued_protocol::{Family, JobId, JobState};

/// Handshake-era revisions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const GUIDE_URI: &str = "yued://guide/songwriting";
const GUIDE: &str = include_str!("songwriting.md");

/// The bounds of `compose_song`'s texts, in characters.
const MAX_LYRICS: usize = 20000;
const MAX_STYLE: usize = 4000;

/// The guide as this daemon serves it (its links' lifetime filled in).
fn guide(st: &AppState) -> String {
    GUIDE.replace("{link_lifetime}", &lifetime(st.links.ttl()))
}

/// A link's lifetime in words: "2 minutes", "45 seconds", "1 hour".
fn lifetime(ttl: std::time::Duration) -> String {
    let s = ttl.as_secs();
    let (n, unit) = match s {
        s if s >= 3600 && s % 3600 == 0 => (s / 3600, "hour"),
        s if s >= 60 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

// JSON-RPC 2.0 error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

fn rpc_result(id: &Value, result: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn rpc_error(status: StatusCode, id: &Value, code: i64, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status)
        .json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}}))
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// DNS-rebinding guard the transport asks for: a browser's `Origin`, when present, must be
/// this server's own (its `Host` as sent, or an `--allowed-host`).
fn origin_ok(req: &HttpRequest) -> bool {
    header(req, "origin").is_none_or(|origin| crate::auth::from_own_origin(req, origin))
}

/// `POST /mcp`: one JSON-RPC message.
pub async fn post(req: HttpRequest, body: Bytes, st: web::Data<AppState>) -> HttpResponse {
    if !origin_ok(&req) {
        return rpc_error(StatusCode::FORBIDDEN, &Value::Null, INVALID_REQUEST, "Origin is not this server");
    }
    let msg: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, &Value::Null, PARSE_ERROR, format!("not JSON: {e}")),
    };
    let Some(obj) = msg.as_object() else {
        let what = if msg.is_array() {
            "a batch (batches left the protocol in 2025-06-18; send one message per POST)"
        } else {
            "not a JSON-RPC message"
        };
        return rpc_error(StatusCode::BAD_REQUEST, &Value::Null, INVALID_REQUEST, what);
    };
    let id = obj.get("id").cloned();
    let id_or_null = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return rpc_error(StatusCode::BAD_REQUEST, &id_or_null, INVALID_REQUEST, "jsonrpc: must be \"2.0\"");
    }
    if let Some(v) = header(&req, VERSION_HEADER) {
        if !PROTOCOL_VERSIONS.contains(&v) {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &id_or_null,
                INVALID_REQUEST,
                format!("MCP-Protocol-Version '{v}' is not one of {}", PROTOCOL_VERSIONS.join(", ")),
            );
        }
    }
    if id.as_ref().is_some_and(|i| !(i.is_string() || i.is_i64() || i.is_u64())) {
        return rpc_error(StatusCode::BAD_REQUEST, &Value::Null, INVALID_REQUEST, "id: must be a string or an integer");
    }
    let method = obj.get("method").and_then(Value::as_str);
    let params = obj.get("params").cloned().unwrap_or(json!({}));
    // initialize opens a session; everything else names one.
    if method == Some("initialize") && id.is_some() {
        return initialize(&id_or_null, &params, &st, &crate::auth::owner(&req));
    }
    let session = header(&req, SESSION_HEADER).map(str::to_string);
    match &session {
        None => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &id_or_null,
                INVALID_REQUEST,
                "Mcp-Session-Id: missing (send initialize first)",
            )
        }
        Some(s) if !st.mcp.touch(s, &crate::auth::owner(&req)) => {
            return rpc_error(
                StatusCode::NOT_FOUND,
                &id_or_null,
                INVALID_REQUEST,
                "Mcp-Session-Id: no such session (it ended or expired; initialize again)",
            )
        }
        Some(_) => {}
    }
    let (Some(method), Some(id)) = (method, id) else {
        // A notification (no id) or a response to us (no method): nothing to answer.
        if method.is_none() && !(obj.contains_key("result") || obj.contains_key("error")) {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &id_or_null,
                INVALID_REQUEST,
                "neither a request, a notification nor a response",
            );
        }
        return HttpResponse::Accepted().finish();
    };
    // The session's first 8 hex digits tell a log's sessions apart without writing the id.
    let span = tracing::info_span!("mcp", method, session = session.as_deref().map_or("", |s| s.get(..8).unwrap_or(s)));
    let _enter = span.enter();
    match method {
        "ping" => rpc_result(&id, json!({})),
        "tools/list" => rpc_result(&id, json!({"tools": tools(&st)})),
        "tools/call" => match call_tool(&req, &params, &st).await {
            Ok(result) => rpc_result(&id, result),
            Err((code, msg)) => rpc_error(StatusCode::OK, &id, code, msg),
        },
        "resources/list" => rpc_result(
            &id,
            json!({"resources": [{"uri": GUIDE_URI, "name": "songwriting-guide", "title": "Writing a song for yued",
                "description": "Lyrics structure, section tags, and what each model family expects of its description",
                "mimeType": "text/markdown", "size": guide(&st).len()}]}),
        ),
        "resources/templates/list" => rpc_result(&id, json!({"resourceTemplates": []})),
        "resources/read" => match params.get("uri").and_then(Value::as_str) {
            Some(GUIDE_URI) => rpc_result(
                &id,
                json!({"contents": [{"uri": GUIDE_URI, "mimeType": "text/markdown", "text": guide(&st)}]}),
            ),
            Some(other) => rpc_error(StatusCode::OK, &id, -32002, format!("resource not found: {other}")),
            None => rpc_error(StatusCode::OK, &id, INVALID_PARAMS, "uri: missing"),
        },
        "prompts/list" => rpc_result(&id, json!({"prompts": []})),
        other => rpc_error(StatusCode::OK, &id, METHOD_NOT_FOUND, format!("method not found: {other}")),
    }
}

fn initialize(id: &Value, params: &Value, st: &AppState, owner: &str) -> HttpResponse {
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
    // The client's revision when this server speaks it, else this server's newest (the
    // client then decides whether it can go on).
    let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).copied().unwrap_or(PROTOCOL_VERSIONS[0]);
    let session = match st.mcp.open(owner) {
        Ok(s) => s,
        Err(e) => return rpc_error(StatusCode::INTERNAL_SERVER_ERROR, id, -32603, e),
    };
    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": false, "subscribe": false}},
        "serverInfo": {"name": "yued", "title": "yued song generation", "version": env!("CARGO_PKG_VERSION")},
        "instructions": format!(
            "yued writes songs. Read the resource {GUIDE_URI} first. compose_song queues a song and returns its \
                job_id; poll song_status until it is done (minutes on a GPU, longer on a CPU), then song_result gives \
                a download link to its file, valid for {}.{}",
            lifetime(st.links.ttl()),
            if st.demo_weights {
                " This daemon serves demo models with random weights: every song is noise (the pipeline is real, \
                the music is not); say so to the user."
            } else {
                ""
            }
        ),
    });
    let mut resp = rpc_result(id, result);
    resp.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static(SESSION_HEADER),
        actix_web::http::header::HeaderValue::from_str(&session).expect("hex is a header value"),
    );
    resp
}

/// `DELETE /mcp`: the client ends its session.
pub async fn delete(req: HttpRequest, st: web::Data<AppState>) -> HttpResponse {
    match header(&req, SESSION_HEADER) {
        None => rpc_error(StatusCode::BAD_REQUEST, &Value::Null, INVALID_REQUEST, "Mcp-Session-Id: missing"),
        Some(s) if st.mcp.close(s, &crate::auth::owner(&req)) => HttpResponse::NoContent().finish(),
        Some(_) => rpc_error(StatusCode::NOT_FOUND, &Value::Null, INVALID_REQUEST, "Mcp-Session-Id: no such session"),
    }
}

fn job_id_schema() -> Value {
    json!({"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "the job id compose_song returned"})
}

/// The four tools, with the argument allowlist as their input schemas.
fn tools(st: &AppState) -> Value {
    let families: Vec<&str> = st.families.iter().map(|f| f.as_str()).collect();
    json!([
        {
            "name": "compose_song",
            "title": "Compose a song",
            "description": format!("Queue a new song from a description and lyrics (see the resource {GUIDE_URI}). \
                Returns its job_id at once; the song renders in the background."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "lyrics": {"type": "string", "minLength": 1, "maxLength": MAX_LYRICS, "description": "lyrics \
                        with section tags such as [verse] and [chorus] on lines of their own"},
                    "style": {"type": "string", "maxLength": MAX_STYLE, "description": "YuE2: comma-separated style \
                        tags (genre, mood, instruments, voice); MiniMax Music 3: a caption describing the song"},
                    "duration": {"type": "number", "exclusiveMinimum": 0, "maximum": st.mcp.max_seconds,
                        "description": format!("length in seconds (default {})", default_seconds(st.mcp.max_seconds))},
                    "family": {"type": "string", "enum": families, "description": format!("the model family (default \
                        {})", families[0])},
                    "format": {"type": "string", "enum": ["flac", "opus"], "description": "the file song_result \
                        exports (default flac)"}
                },
                "required": ["lyrics"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false,
                "openWorldHint": false}
        },
        {
            "name": "song_status",
            "title": "A song's status",
            "description": "The state of a song: queued (with its place in the queue), running (stage and progress), \
                done, failed (with the reason) or cancelled.",
            "inputSchema": {"type": "object", "properties": {"job_id": job_id_schema()}, "required": ["job_id"],
                "additionalProperties": false},
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        },
        {
            "name": "song_result",
            "title": "Download a finished song",
            "description": format!("A download link to a finished song's audio file (its Opus or FLAC, as \
                composed). The link needs no API key and expires after {}.", lifetime(st.links.ttl())),
            "inputSchema": {"type": "object", "properties": {"job_id": job_id_schema()}, "required": ["job_id"],
                "additionalProperties": false},
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        },
        {
            "name": "cancel_song",
            "title": "Cancel a song",
            "description": "Stop a queued or running song.",
            "inputSchema": {"type": "object", "properties": {"job_id": job_id_schema()}, "required": ["job_id"],
                "additionalProperties": false},
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true,
                "openWorldHint": false}
        }
    ])
}

/// A tool's answer: its data as structured content and as text.
fn tool_ok(data: Value) -> Value {
    json!({"content": [{"type": "text", "text": data.to_string()}], "structuredContent": data, "isError": false})
}

/// A tool's failure the model should read (a bad argument, a full queue, a song not done).
fn tool_error(msg: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": msg.into()}], "isError": true})
}

/// The arguments of a call, each named in `allowed`; anything else is refused by name.
fn arguments<'a>(params: &'a Value, allowed: &[&str]) -> Result<&'a serde_json::Map<String, Value>, String> {
    static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> = std::sync::OnceLock::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => EMPTY.get_or_init(serde_json::Map::new),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("arguments: must be an object".into()),
    };
    if let Some(k) = args.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("argument '{k}' is not accepted (this tool takes {})", allowed.join(", ")));
    }
    Ok(args)
}

fn string_arg<'a>(args: &'a serde_json::Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key}: must be a string")),
    }
}

fn job_arg(args: &serde_json::Map<String, Value>) -> Result<JobId, String> {
    let raw = string_arg(args, "job_id")?.ok_or("job_id: missing")?;
    JobId::parse(raw).map_err(|e| format!("job_id: {e}"))
}

/// `tools/call`: `Err` is a protocol error (an unknown tool); everything a model can fix
/// is a tool result with `isError`.
async fn call_tool(req: &HttpRequest, params: &Value, st: &web::Data<AppState>) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).ok_or((INVALID_PARAMS, "name: missing".to_string()))?;
    let outcome = match name {
        "compose_song" => compose(req, params, st).await,
        "song_status" => status(req, params, st).await,
        "song_result" => result(req, params, st).await,
        "cancel_song" => cancel(req, params, st).await,
        other => return Err((INVALID_PARAMS, format!("unknown tool: {other}"))),
    };
    tracing::info!(tool = name, ok = outcome.is_ok(), "mcp tool call");
    Ok(match outcome {
        Ok(v) => tool_ok(v),
        Err(e) => tool_error(e),
    })
}

/// A song's length when the call names none: 30 s, or the operator's cap when it is lower.
fn default_seconds(max_seconds: f64) -> f64 {
    30f64.min(max_seconds)
}

async fn compose(req: &HttpRequest, params: &Value, st: &web::Data<AppState>) -> Result<Value, String> {
    let args = arguments(params, &["lyrics", "style", "duration", "family", "format"])?;
    let lyrics =
        string_arg(args, "lyrics")?.filter(|l| !l.trim().is_empty()).ok_or("lyrics: required and not blank")?;
    let style = string_arg(args, "style")?.unwrap_or("").trim().to_string();
    // The bounds the schema states, held (a long text only costs a long prefill).
    for (field, text, max) in [("lyrics", lyrics, MAX_LYRICS), ("style", style.as_str(), MAX_STYLE)] {
        let n = text.chars().count();
        if n > max {
            return Err(format!("{field}: at most {max} characters, got {n}"));
        }
    }
    let duration = match args.get("duration") {
        None | Some(Value::Null) => default_seconds(st.mcp.max_seconds),
        Some(v) => v.as_f64().ok_or("duration: must be a number of seconds")?,
    };
    if !(duration > 0.0 && duration <= st.mcp.max_seconds) {
        // A huge number is shown short (1e308 is not spelt out).
        let got = if duration.abs() < 1e6 { format!("{duration}") } else { format!("{duration:e}") };
        return Err(format!("duration: must be more than 0 and at most {} seconds, got {got}", st.mcp.max_seconds));
    }
    let family = match string_arg(args, "family")? {
        None => st.families[0],
        Some(f) => f.parse::<Family>().ok().filter(|f| st.families.contains(f)).ok_or_else(|| {
            format!(
                "family: '{f}' is not one of {}",
                st.families.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ")
            )
        })?,
    };
    let format = match string_arg(args, "format")?.unwrap_or("flac") {
        f @ ("flac" | "opus") => f,
        other => return Err(format!("format: '{other}' is not flac or opus")),
    };
    let mut native = crate::kinds::of(family).text_body(lyrics, &style, format, st);
    native["duration"] = duration.into();
    let body = serde_json::to_vec(&native).expect("JSON serializes");
    let state = st.clone();
    let request = match web::block(move || check_request(&body, &state)).await {
        Ok(r) => r?,
        Err(_) => return Err("the request check did not run".into()),
    };
    let id = match submit(st, client_key(req), request, None).await {
        Ok(id) => id,
        Err(resp) => {
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(|s| format!(" (retry in {s} s)"))
                .unwrap_or_default();
            let body = actix_web::body::to_bytes(resp.into_body())
                .await
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let msg = body
                .as_ref()
                .and_then(|v| v.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("the song was not accepted")
                .to_string();
            return Err(format!("{msg}{retry}"));
        }
    };
    tracing::info!(job = %id, family = family.as_str(), duration, format, "mcp compose_song");
    Ok(json!({"job_id": id, "status": "queued", "family": family.as_str(), "duration": duration, "format": format}))
}

async fn status(req: &HttpRequest, params: &Value, st: &AppState) -> Result<Value, String> {
    let job = job_arg(arguments(params, &["job_id"])?)?;
    // Another principal's job is as unknown as a job nobody has.
    match st.jobs.of(&crate::auth::caller(req)).status(&job).await {
        Ok(Some(s)) => {
            let mut v = serde_json::to_value(&s).expect("a status serializes");
            v["job_id"] = job.as_str().into();
            Ok(v)
        }
        Ok(None) => Err(format!("job_id: unknown job {job}")),
        Err(e) => Err(e.0),
    }
}

async fn result(req: &HttpRequest, params: &Value, st: &AppState) -> Result<Value, String> {
    let job = job_arg(arguments(params, &["job_id"])?)?;
    let jobs = st.jobs.of(&crate::auth::caller(req));
    match jobs.state(&job).await {
        Ok(Some(JobState::Done)) => {}
        Ok(Some(s)) => return Err(format!("job {job} is {s}: a link exists once it is done (poll song_status)")),
        Ok(None) => return Err(format!("job_id: unknown job {job}")),
        Err(e) => return Err(e.0),
    }
    let (path, content_type) = export_file(&jobs, &job).await?;
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let link = st.links.create(&job).await.map_err(|e| format!("the link could not be made: {e}"))?;
    let url = match &st.mcp.public_url {
        Some(base) => format!("{base}/links/{}", link.token),
        None => {
            let info = req.connection_info();
            format!("{}://{}/links/{}", info.scheme(), info.host(), link.token)
        }
    };
    Ok(json!({"job_id": job, "url": url, "content_type": content_type, "bytes": bytes, "expires_at": link.expires,
            "expires_in_seconds": st.links.ttl().as_secs()}))
}

/// The one file a job may be exported as: its Opus or FLAC audio.
pub async fn export_file(jobs: &yued_contract::Jobs, job: &JobId) -> Result<(std::path::PathBuf, String), String> {
    let parts = jobs.parts(job).await.ok_or_else(|| format!("the result of job {job} has expired"))?;
    parts.into_iter().find(|(_, ct)| ct == "audio/flac" || ct == "audio/ogg; codecs=opus").ok_or_else(|| {
        format!("job {job} has no Opus or FLAC audio (only songs composed as flac or opus are exported)")
    })
}

async fn cancel(req: &HttpRequest, params: &Value, st: &AppState) -> Result<Value, String> {
    let job = job_arg(arguments(params, &["job_id"])?)?;
    match st.jobs.of(&crate::auth::caller(req)).cancel(&job).await {
        Ok(Some(JobState::Cancelled)) => Ok(json!({"job_id": job, "status": "cancelled"})),
        Ok(Some(s)) => Err(format!("job {job} is already {s}")),
        Ok(None) => Err(format!("job_id: unknown job {job}")),
        Err(e) => Err(e.0),
    }
}

/// `GET /links/{token}`: the exported file of a live link (no API key: the token is the
/// capability); 404 for an unknown or expired link and for an expired result.
pub async fn link(path: web::Path<String>, st: web::Data<AppState>) -> HttpResponse {
    let token = path.into_inner();
    let ttl = lifetime(st.links.ttl());
    let gone = || reply::error(StatusCode::NOT_FOUND, format!("no such link (links expire {ttl} after they are made)"));
    let Some(job) = st.links.resolve(&token).await else { return gone() };
    // The token is the capability: the link works for whoever holds it.
    let Ok((file, content_type)) = export_file(&st.jobs.by_capability(), &job).await else { return gone() };
    let ext = file.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_else(|| "bin".into());
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("content-disposition", format!("attachment; filename=\"yued-{job}.{ext}\"")))
        .insert_header(("cache-control", "private, no-store"))
        .insert_header(("referrer-policy", "no-referrer"))
        .streaming(reply::file_chunks(file))
}
