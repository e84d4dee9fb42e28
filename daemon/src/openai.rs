//! OpenAI-compatible routes (yue2.cpp's architecture reference, "Endpoints"): `GET /v1/models`, `POST
//! /v1/audio/speech` (OpenAI's speech body: `input` is the lyrics, `instructions` the style
//! or caption, `voice` a style preset) and `POST /v1/audio/music` (a family's native request
//! plus `model`). Both audio routes submit an ordinary job (same admission cap, 429 with
//! Retry-After, fairness, journal) and answer with the audio itself: Opus and PCM flow as
//! the song's tiles are encoded (the bytes of the live stream), the other formats once the
//! file is written. Handlers stay thin: parsing here, validation and jobs where `/synth`
//! has them.
use crate::http::{check_request, client_key, submit, AppState};
use crate::peer::while_connected;
use crate::reply::error;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use yued_contract::stream::StreamItem;
use yued_contract::UploadOp;
use yued_protocol::{Family, JobId, JobState, StreamCodec};

/// `voice` presets: each is a style (YuE2) or caption opening (MiniMax) put before the
/// request's `instructions`. OpenAI's voice names are taken so an SDK's defaults work.
pub const VOICES: [(&str, &str); 11] = [
    ("alloy", "pop, female vocal, bright"),
    ("ash", "indie rock, male vocal, electric guitar"),
    ("ballad", "piano ballad, emotional, slow"),
    ("coral", "acoustic folk, female vocal, acoustic guitar"),
    ("echo", "rock, male vocal, drums"),
    ("fable", "folk, storytelling, fingerpicked guitar"),
    ("onyx", "hip hop, male rap vocal, deep bass"),
    ("nova", "electronic, synth-pop, female vocal"),
    ("sage", "jazz, smooth, saxophone"),
    ("shimmer", "ambient, dreamy, female vocal"),
    ("verse", "country, male vocal, steel guitar"),
];

/// OpenAI's speech body, as `/v1/audio/speech` reads it (the OpenAPI schema is this type's).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeechBody {
    /// A family (`yue2`, `mm3`) or one of its files (GET /v1/models); empty: the first
    /// family served.
    model: String,
    /// The lyrics, with section tags such as `[verse]` on lines of their own.
    #[schemars(pattern(yued_protocol::request::NOT_BLANK))]
    input: String,
    /// A style preset put before `instructions`.
    #[serde(default)]
    voice: Option<String>,
    /// The container; `pcm` is raw s16le stereo at the family's rate.
    #[serde(default)]
    #[schemars(extend("enum" = ["mp3", "opus", "aac", "flac", "wav", "pcm", null]))]
    response_format: Option<String>,
    /// Accepted for OpenAI's clients; it does not change the song.
    #[serde(default)]
    #[schemars(range(min = 0.25, max = 4.0))]
    speed: Option<f64>,
    /// The style (YuE2) or caption (MiniMax Music 3).
    #[serde(default)]
    instructions: Option<String>,
    /// `audio` (opus and pcm always flow as they are encoded).
    #[serde(default)]
    #[schemars(extend("enum" = ["audio", null]))]
    stream_format: Option<String>,
    /// Not OpenAI's: the song's length in seconds (default: the family's).
    #[serde(default)]
    #[schemars(extend("exclusiveMinimum" = 0))]
    duration: Option<f64>,
}

fn openai_error(status: StatusCode, msg: impl Into<String>, kind: &str, param: Option<&str>) -> HttpResponse {
    // OpenAI's error shape, with yued's `error` text readable the same way.
    let msg = msg.into();
    HttpResponse::build(status)
        .json(serde_json::json!({"error": {"message": msg, "type": kind, "param": param, "code": null}}))
}

/// `resp` with `x-should-retry: false`: an answer after the job was admitted (cancelled, or the
/// job system gone while it waited), which OpenAI's SDKs would otherwise retry (they retry
/// 409s and 5xx) by submitting the whole song again.
fn final_answer(mut resp: HttpResponse) -> HttpResponse {
    resp.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static("x-should-retry"),
        actix_web::http::header::HeaderValue::from_static("false"),
    );
    resp
}

fn bad(msg: impl Into<String>, param: Option<&str>) -> HttpResponse {
    openai_error(StatusCode::BAD_REQUEST, msg, "invalid_request_error", param)
}

/// `GET /v1/models`: one entry per family served, then each model file of the registry.
pub async fn models(st: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"object": "list", "data": model_list(&st)}))
}

/// `GET /v1/models/{id}`: one of the list (what LangChain and LiteLLM ask to probe a model).
pub async fn model(id: web::Path<String>, st: web::Data<AppState>) -> HttpResponse {
    let id = id.into_inner();
    match model_list(&st).into_iter().find(|m| m["id"] == id.as_str()) {
        Some(m) => HttpResponse::Ok().json(m),
        None => openai_error(
            StatusCode::NOT_FOUND,
            format!("'{id}' names no model of this daemon (see GET /v1/models)"),
            "invalid_request_error",
            Some("model"),
        ),
    }
}

/// The models `GET /v1/models` lists.
fn model_list(st: &AppState) -> Vec<serde_json::Value> {
    let mut data: Vec<serde_json::Value> = st
        .families
        .iter()
        .map(|f| serde_json::json!({"id": f.as_str(), "object": "model", "created": 0, "owned_by": "yued"}))
        .collect();
    let file = |path: &str| {
        std::path::Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    };
    data.push(serde_json::json!({"id": file(&st.props.model), "object": "model", "created": 0, "owned_by": "yued",
        "family": "yue2"}));
    if let Some(m) = &st.mm3 {
        for b in yued_engine::registry::Bucket::MM3 {
            for e in m.registry.entries(b) {
                data.push(serde_json::json!({"id": e.name, "object": "model", "created": 0, "owned_by": "yued",
                    "family": "mm3", "component": b.arch()}));
            }
        }
    }
    for id in transcriber_ids(st) {
        data.push(serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "yued",
            "family": "yue2", "component": "transcriber"}));
    }
    data
}

/// A route's 404 and 405 under `/v1/`, in OpenAI's error shape (its SDKs show the message).
pub fn route_error(status: StatusCode, msg: String) -> HttpResponse {
    openai_error(status, msg, "invalid_request_error", None)
}

/// The ids `GET /v1/models` lists, each with its family: the families served, then the
/// YuE2 backbone's file and MiniMax Music 3's files.
pub fn model_ids(families: &[Family], model: &str, mm3: Option<&crate::state::Mm3Check>) -> Vec<(String, Family)> {
    let mut ids: Vec<(String, Family)> = families.iter().map(|f| (f.as_str().to_string(), *f)).collect();
    let file = std::path::Path::new(model).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    ids.push((file, Family::Yue2));
    if let Some(m) = mm3 {
        for b in yued_engine::registry::Bucket::MM3 {
            ids.extend(m.registry.entries(b).iter().map(|e| (e.name.clone(), Family::Mm3)));
        }
    }
    ids
}

/// The family a `model` names: one of [`model_ids`], or (empty) the first served.
fn family_of(model: &str, st: &AppState) -> Result<Family, String> {
    if model.is_empty() {
        return Ok(st.families[0]);
    }
    model_ids(&st.families, &st.props.model, st.mm3.as_ref())
        .into_iter()
        .find(|(id, _)| id == model)
        .map(|(_, f)| f)
        .ok_or_else(|| {
            if transcriber_ids(st).iter().any(|t| t == model) {
                format!("'{model}' is the transcriber: it takes recordings at POST /v1/audio/transcriptions")
            } else {
                format!("'{model}' names no model of this daemon (see GET /v1/models)")
            }
        })
}

/// OpenAI's `response_format` to ours, and whether it streams as the live tiles.
fn format_of(name: &str) -> Result<(&'static str, Option<StreamCodec>), String> {
    Ok(match name {
        "mp3" => ("mp3", None),
        "opus" => ("opus", Some(StreamCodec::Opus)),
        "aac" => ("aac", None),
        "flac" => ("flac", None),
        "wav" => ("wav16", None),
        "pcm" => ("wav16", Some(StreamCodec::Pcm16)),
        other => return Err(format!("'{other}' is not one of mp3, opus, aac, flac, wav, pcm")),
    })
}

/// `POST /v1/audio/speech`.
pub async fn speech(req: HttpRequest, body: web::Bytes, st: web::Data<AppState>) -> HttpResponse {
    let mut de = serde_json::Deserializer::from_slice(&body);
    let b: SpeechBody = match serde_path_to_error::deserialize(&mut de) {
        Ok(b) => b,
        Err(e) => return body_error(&e),
    };
    if let Err(e) = de.end() {
        return bad(format!("body: {e}"), None);
    }
    let family = match family_of(&b.model, &st) {
        Ok(f) => f,
        Err(e) => return bad(format!("model: {e}"), Some("model")),
    };
    if b.input.trim().is_empty() {
        return bad("input: the lyrics must not be empty", Some("input"));
    }
    if let Some(s) = b.speed.filter(|s| !(0.25..=4.0).contains(s)) {
        return bad(format!("speed: must be in [0.25, 4.0], got {s}"), Some("speed"));
    }
    if let Some(s) = b.stream_format.as_deref().filter(|s| !matches!(*s, "audio" | "sse")) {
        return bad(format!("stream_format: '{s}' is not audio or sse"), Some("stream_format"));
    }
    if b.stream_format.as_deref() == Some("sse") {
        return bad("stream_format: sse is not served; audio streams the bytes", Some("stream_format"));
    }
    let preset = match b.voice.as_deref() {
        None | Some("") => None,
        Some(v) => match VOICES.iter().find(|(n, _)| *n == v) {
            Some((_, style)) => Some(*style),
            None => {
                return bad(format!("voice: '{v}' is not one of {}", VOICES.map(|(n, _)| n).join(", ")), Some("voice"))
            }
        },
    };
    let (format, codec) = match format_of(b.response_format.as_deref().unwrap_or("mp3")) {
        Ok(f) => f,
        Err(e) => return bad(format!("response_format: {e}"), Some("response_format")),
    };
    let style = [preset.unwrap_or(""), b.instructions.as_deref().unwrap_or("").trim()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let mut native = crate::kinds::of(family).text_body(&b.input, &style, format, &st);
    if let Some(d) = b.duration {
        native["duration"] = d.into();
    }
    if codec.is_some() && family == Family::Yue2 {
        // Painted in short chunks, so the streamed answer starts before the song ends (at
        // yue2.cpp's default, one chunk per context window, the audio all came at the end).
        native["stream_chunk_seconds"] = SPEECH_CHUNK_SECONDS.into();
    }
    // Speech's fields are named as OpenAI names them in its errors.
    let names = [("lyrics", "input"), ("style", "instructions"), ("caption", "instructions")];
    run(&req, &st, native, codec, false, &[], &names).await
}

/// The chunk length of a YuE2 song `/v1/audio/speech` streams (opus, pcm), as the WebUI's.
const SPEECH_CHUNK_SECONDS: f64 = 3.0;

/// `POST /v1/audio/music`: a native request plus `model` (and `"async": true` for the job id).
pub async fn music(req: HttpRequest, body: web::Bytes, st: web::Data<AppState>) -> HttpResponse {
    let mut v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(_) => return bad("body: must be a JSON object", None),
        Err(e) => return bad(format!("body: {e}"), None),
    };
    let obj = v.as_object_mut().expect("an object");
    let model = match obj.remove("model") {
        Some(serde_json::Value::String(m)) => m,
        None => String::new(),
        Some(_) => return bad("model: must be a string", Some("model")),
    };
    let asynchronous = match obj.remove("async") {
        None => false,
        Some(serde_json::Value::Bool(b)) => b,
        Some(_) => return bad("async: must be a boolean", Some("async")),
    };
    let family = match family_of(&model, &st) {
        Ok(f) => f,
        Err(e) => return bad(format!("model: {e}"), Some("model")),
    };
    obj.insert("family".into(), family.as_str().into());
    let ignored = yued_protocol::request::ignored_fields(&v, family);
    let obj = v.as_object_mut().expect("an object");
    // Streamed as live tiles only when it is one track in a streamable format.
    let single =
        ["lm_batch_size", "synth_batch_size"].iter().all(|k| obj.get(*k).and_then(|x| x.as_u64()).unwrap_or(1) == 1);
    let codec = match obj.get("output_format").and_then(|f| f.as_str()) {
        Some("opus") if single => Some(StreamCodec::Opus),
        _ => None,
    };
    let mut resp = run(&req, &st, v, codec, asynchronous, &ignored, &[]).await;
    if !ignored.is_empty() && !asynchronous {
        // An audio answer has no JSON to name them in: a header does.
        if let Ok(h) = actix_web::http::header::HeaderValue::from_str(&ignored.join(", ")) {
            resp.headers_mut().insert(actix_web::http::header::HeaderName::from_static("x-yued-ignored"), h);
        }
    }
    resp
}

/// Submits `native` (checked as `/synth` checks it) and answers with its audio.
async fn run(
    req: &HttpRequest,
    st: &web::Data<AppState>,
    native: serde_json::Value,
    codec: Option<StreamCodec>,
    asynchronous: bool,
    ignored: &[String],
    names: &[(&str, &str)],
) -> HttpResponse {
    let body = serde_json::to_vec(&native).expect("JSON serializes");
    let request = match check_request(&body, st) {
        Ok(r) => r,
        Err(e) => {
            // The field as the caller named it (speech's `input`, not the native `lyrics`).
            let native = param_of(&e).map(str::to_string);
            return match native.as_deref().and_then(|n| names.iter().find(|(from, _)| *from == n)) {
                Some((from, to)) => bad(format!("{to}{}", &e[from.len()..]), Some(to)),
                None => bad(e.clone(), native.as_deref()),
            };
        }
    };
    let id = match submit(st, client_key(req), request, None).await {
        Ok(id) => id,
        Err(resp) => return as_openai(resp).await,
    };
    if asynchronous {
        let mut reply = serde_json::json!({"id": id, "object": "music.job", "status": "queued",
                "status_url": format!("/job?id={id}"), "result_url": format!("/job?id={id}&result=1")});
        if !ignored.is_empty() {
            reply["ignored"] = ignored.into();
        }
        return HttpResponse::Ok().json(reply);
    }
    // From here the caller waits for the audio: if it goes away first, the song is cancelled.
    let jobs = st.jobs.of(&crate::auth::caller(req));
    let mut guard = CancelOnDrop { jobs: jobs.clone(), job: id.clone(), armed: true };
    let sub = match jobs.subscribe(&id, codec.unwrap_or(StreamCodec::Pcm16)).await {
        Ok(s) => s,
        Err(e) => return final_answer(error(StatusCode::SERVICE_UNAVAILABLE, e.0)),
    };
    let (sub, codec) = match (codec, sub) {
        (Some(codec), Some(sub)) => (sub, codec),
        (_, sub) => {
            // The guard, still armed when the caller is gone, cancels the job.
            let Some(resp) = while_connected(req, finished_audio(&jobs, &id, sub)).await else { return gone() };
            guard.disarm();
            return still_theirs(req, resp);
        }
    };
    // The status is sent with the first audio: a job that ends before it has any (a failed
    // song, a cancel) is answered as a finished one is, in OpenAI's shape (a 422 or a 409),
    // never as a 200 with an empty body.
    let mut rx = sub;
    let first = while_connected(req, async {
        loop {
            match rx.recv().await {
                // A tile that completed no Ogg page has an empty frame: nothing to send yet.
                Some(StreamItem::Binary(b)) if b.is_empty() => {}
                Some(StreamItem::Binary(b)) => return Some(b),
                Some(StreamItem::Text(t)) if terminal(&t).is_none() => {}
                // The end before any audio (or the hub's stream gone): the job's own answer.
                _ => return None,
            }
        }
    })
    .await;
    let first = match first {
        None => return gone(),
        Some(Some(b)) => b,
        Some(None) => {
            let Some(resp) = while_connected(req, finished_audio(&jobs, &id, None)).await else { return gone() };
            guard.disarm();
            return still_theirs(req, resp);
        }
    };
    // The live stream's bytes, until the job's terminal event. A song that fails or is
    // cancelled once its audio has begun ends the body with an error, so the client sees a
    // broken transfer rather than a short file that looks whole.
    let mime = if codec == StreamCodec::Opus { "audio/ogg; codecs=opus" } else { "audio/pcm" };
    // A key revoked by a reload ends the body (within [`KEY_RECHECK`]) as a broken transfer;
    // the song goes on, as a removed key's running jobs do.
    let admitted = crate::auth::Admitted::of(req);
    let head = stream::iter([Ok::<Bytes, std::io::Error>(first)]);
    let tick = tokio::time::interval(crate::auth::KEY_RECHECK);
    let rest = stream::unfold(Some((rx, guard, tick)), move |state| {
        let admitted = admitted.clone();
        async move {
            let (mut rx, mut guard, mut tick) = state?;
            loop {
                let item = tokio::select! {
                    item = rx.recv() => item,
                    _ = tick.tick() => {
                        if admitted.still() {
                            continue;
                        }
                        guard.disarm();
                        let e = std::io::Error::other(format!("job {}: the API key was revoked", guard.job));
                        return Some((Err(e), None));
                    }
                };
                match item {
                    Some(StreamItem::Binary(b)) if b.is_empty() => {}
                    Some(StreamItem::Binary(b)) => {
                        return Some((Ok::<Bytes, std::io::Error>(b), Some((rx, guard, tick))))
                    }
                    Some(StreamItem::Text(t)) => match terminal(&t).as_deref() {
                        None => {}
                        Some("done") => {
                            guard.disarm();
                            return None;
                        }
                        Some(how) => {
                            guard.disarm();
                            let e = std::io::Error::other(format!("job {} {how} while its audio streamed", guard.job));
                            return Some((Err(e), None));
                        }
                    },
                    None => {
                        // The hub dropped this reader (it fell too far behind): a broken transfer,
                        // not a short file that looks whole. The song goes on: its file is at the
                        // job id the answer's `x-yued-job` header named.
                        guard.disarm();
                        let e = std::io::Error::other(format!("job {}: the reader fell too far behind", guard.job));
                        return Some((Err(e), None));
                    }
                }
            }
        }
    });
    HttpResponse::Ok().insert_header(("x-yued-job", id.to_string())).content_type(mime).streaming(head.chain(rest))
}

/// `resp`, unless the key the request came with was revoked while it waited (a reload): then
/// a 401 (the song was finished, as a removed key's running jobs are).
fn still_theirs(req: &HttpRequest, resp: HttpResponse) -> HttpResponse {
    if crate::auth::Admitted::of(req).still() {
        return resp;
    }
    let msg = "the API key this request came with was revoked while it waited";
    openai_error(StatusCode::UNAUTHORIZED, msg, "invalid_request_error", None)
}

/// The answer to a caller that went away (nobody reads it): the job's guard, dropped armed
/// with the handler, cancels the job.
fn gone() -> HttpResponse {
    HttpResponse::new(StatusCode::from_u16(499).expect("a valid status code"))
}

/// Cancels a job when the caller that waits for its audio goes away first (the handler's
/// future or the response body is dropped before the job ended, or [`while_connected`] saw
/// the connection closed).
struct CancelOnDrop {
    jobs: yued_contract::Jobs,
    job: JobId,
    armed: bool,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::info!(job = %self.job, "the client went away before its audio: cancelling the job");
            let (jobs, job) = (self.jobs.clone(), self.job.clone());
            actix_web::rt::spawn(async move {
                let _ = jobs.cancel(&job).await;
            });
        }
    }
}

/// The first track's file once the job has ended (its subscription, when the hub still had
/// the job, is read to the terminal event first).
async fn finished_audio(
    jobs: &yued_contract::Jobs,
    id: &JobId,
    sub: Option<yued_contract::stream::Subscription>,
) -> HttpResponse {
    if let Some(mut sub) = sub {
        while let Some(item) = sub.recv().await {
            if let StreamItem::Text(t) = item {
                if terminal(&t).is_some() {
                    break;
                }
            }
        }
    }
    if let Err(resp) = ended(jobs, id).await {
        return resp;
    }
    audio_file(id, jobs).await
}

/// Waits for the job to end; an answer in OpenAI's shape unless it is done (one the SDKs do not
/// retry: the song was admitted).
async fn ended(jobs: &yued_contract::Jobs, id: &JobId) -> Result<(), HttpResponse> {
    ended_as_is(jobs, id).await.map_err(final_answer)
}

async fn ended_as_is(jobs: &yued_contract::Jobs, id: &JobId) -> Result<(), HttpResponse> {
    let state = loop {
        match jobs.state(id).await {
            Ok(Some(s)) if s.is_terminal() => break s,
            Ok(Some(_)) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            Ok(None) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, format!("job {id} is no longer known"))),
            Err(e) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.0)),
        }
    };
    match state {
        JobState::Done => Ok(()),
        JobState::Cancelled => {
            Err(openai_error(StatusCode::CONFLICT, format!("job {id} was cancelled"), "cancelled", None))
        }
        _ => {
            // A song that failed on its content (a score the model could not write, a
            // prompt it could not take): the request's, not the server's.
            let why = match jobs.status(id).await {
                Ok(Some(s)) => s.error.unwrap_or_default(),
                _ => String::new(),
            };
            Err(openai_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("job {id} failed: {why}"),
                "generation_failed",
                None,
            ))
        }
    }
}

/// The transcriber's model ids: its family-like name and its file's name.
pub fn transcriber_ids(st: &AppState) -> Vec<String> {
    let Some(path) = &st.props.transcriber else { return Vec::new() };
    let file = std::path::Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    vec![TRANSCRIBER_ID.to_string(), file]
}

/// The id `model` names the transcriber by (its file's name does too).
pub const TRANSCRIBER_ID: &str = "sheetsage2";

/// `POST /v1/audio/transcriptions`: OpenAI's transcription form (`file`, `model` the
/// transcriber, `response_format` `json` or `text`; `language`, `prompt` and `temperature`
/// taken and ignored) plus `melody_only`. The recording becomes a `/transcribe` job (same
/// checks, cap, fairness, journal); the caller waits for its score: `{"text": "X:1..."}`, or
/// the ABC itself as text. A caller that goes away cancels the job.
pub async fn transcriptions(req: HttpRequest, payload: web::Payload, st: web::Data<AppState>) -> HttpResponse {
    if !st.transcriber {
        let msg = "POST /v1/audio/transcriptions is served when the daemon runs with a transcriber (--transcriber)";
        return openai_error(StatusCode::NOT_FOUND, msg, "not_found", None);
    }
    let names = ["file", "model", "response_format", "melody_only", "language", "prompt", "temperature"];
    let what = "a 'file' part, 'model' and optional 'response_format' and 'melody_only' parts";
    let mut form = match crate::http::read_form(&req, payload, &st.vae, &names, what).await {
        Ok(f) => f,
        Err(resp) => return as_openai(resp).await,
    };
    let text = |v: Option<Vec<u8>>| v.map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
    let model = text(form.take("model"));
    if !transcriber_ids(&st).contains(&model) {
        let ids = transcriber_ids(&st).join(", ");
        return bad(format!("model: '{model}' is not the transcriber (one of {ids})"), Some("model"));
    }
    let as_text = match text(form.take("response_format")).as_str() {
        "" | "json" => false,
        "text" => true,
        other => return bad(format!("response_format: '{other}' is not json or text"), Some("response_format")),
    };
    let melody_only = match form.take("melody_only").map(|v| crate::http::parse_flag(&v)) {
        None => false,
        Some(Ok(b)) => b,
        Some(Err(e)) => return bad(format!("melody_only: {e}"), Some("melody_only")),
    };
    let audio = match crate::http::TRANSCRIBE_RECORDING.check("file", form.take("file")).await {
        Ok(a) => a,
        Err(resp) => return as_openai(resp).await,
    };
    let op = if melody_only { UploadOp::TranscribeMelody } else { UploadOp::Transcribe };
    let id = match crate::http::submit_upload(&req, &st, op, audio).await {
        Ok(id) => id,
        Err(resp) => return as_openai(resp).await,
    };
    // Stored: its room in the uploads' memory is free while the caller waits for the score.
    drop(form);
    let jobs = st.jobs.of(&crate::auth::caller(&req));
    let mut guard = CancelOnDrop { jobs: jobs.clone(), job: id.clone(), armed: true };
    let Some(done) = while_connected(&req, ended(&jobs, &id)).await else { return gone() };
    guard.disarm();
    if let Err(resp) = done {
        return resp;
    }
    match score(&jobs, &id).await {
        Ok(abc) if as_text => HttpResponse::Ok()
            .insert_header(("x-yued-job", id.to_string()))
            .content_type("text/plain; charset=utf-8")
            .body(abc),
        Ok(abc) => {
            HttpResponse::Ok().insert_header(("x-yued-job", id.to_string())).json(serde_json::json!({"text": abc}))
        }
        Err(resp) => resp,
    }
}

/// The ABC of a finished transcription.
async fn score(jobs: &yued_contract::Jobs, id: &JobId) -> Result<String, HttpResponse> {
    let gone = || openai_error(StatusCode::NOT_FOUND, format!("the result of job {id} has expired"), "not_found", None);
    let parts = jobs.parts(id).await.ok_or_else(gone)?;
    let (path, _) = parts.into_iter().find(|(_, ct)| ct.starts_with("application/json")).ok_or_else(gone)?;
    let body: Option<serde_json::Value> = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok());
    body.and_then(|v| v.get("abc").and_then(|a| a.as_str()).map(str::to_string)).ok_or_else(|| {
        openai_error(StatusCode::INTERNAL_SERVER_ERROR, format!("job {id} has no score"), "server_error", None)
    })
}

/// The first audio part of a finished job's result.
async fn audio_file(id: &JobId, jobs: &yued_contract::Jobs) -> HttpResponse {
    let Some(parts) = jobs.parts(id).await else {
        return openai_error(StatusCode::NOT_FOUND, format!("the result of job {id} has expired"), "not_found", None);
    };
    match parts.into_iter().find(|(_, ct)| ct.starts_with("audio/")) {
        Some((path, ct)) => match std::fs::read(&path) {
            Ok(bytes) => HttpResponse::Ok().insert_header(("x-yued-job", id.to_string())).content_type(ct).body(bytes),
            Err(e) => openai_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the result: {e}"),
                "server_error",
                None,
            ),
        },
        None => openai_error(StatusCode::INTERNAL_SERVER_ERROR, format!("job {id} has no audio"), "server_error", None),
    }
}

/// `done`, `failed` or `cancelled` when a stream text is a terminal event.
fn terminal(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let e = v.get("event")?.as_str()?;
    matches!(e, "done" | "failed" | "cancelled").then(|| e.to_string())
}

/// A native error answer in OpenAI's shape (same status and headers: a 429 keeps its
/// Retry-After).
async fn as_openai(resp: HttpResponse) -> HttpResponse {
    let status = resp.status();
    let retry = resp.headers().get("retry-after").cloned();
    let body = actix_web::body::to_bytes(resp.into_body())
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let msg = body.as_ref().and_then(|v| v.get("error")).and_then(|e| e.as_str()).unwrap_or("error").to_string();
    let mut out = openai_error(status, msg.clone(), openai_type(status), param_of(&msg));
    if let Some(r) = retry {
        out.headers_mut().insert(actix_web::http::header::RETRY_AFTER, r);
    }
    out
}

/// OpenAI's error `type` for a status: the client's fault, the rate limit, or the server's.
pub fn openai_type(status: StatusCode) -> &'static str {
    match status {
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_exceeded",
        s if s.is_client_error() => "invalid_request_error",
        _ => "server_error",
    }
}

/// The field a native error names first (`field: why`; `abc_sampling.top_p: ...`), OpenAI's
/// `param`.
fn param_of(msg: &str) -> Option<&str> {
    let (head, _) = msg.split_once(':')?;
    (!head.is_empty() && head.chars().all(|c| c.is_ascii_alphanumeric() || "_.[]".contains(c))).then_some(head)
}

/// A body that does not parse as the route's shape: serde's message, with the field first
/// when serde names one (a missing or unknown field).
fn body_error(e: &serde_path_to_error::Error<serde_json::Error>) -> HttpResponse {
    let text = e.inner().to_string();
    for (prefix, what) in [("missing field `", "missing"), ("unknown field `", "not a field of this route")] {
        if let Some(field) = text.strip_prefix(prefix).and_then(|r| r.split('`').next()) {
            return bad(format!("{field}: {what} ({text})"), Some(field));
        }
    }
    // The field a wrong type or value is in, as OpenAI's SDKs read `param`.
    let path = e.path().to_string();
    if path.is_empty() || path == "." {
        return bad(format!("body: {text}"), None);
    }
    bad(format!("{path}: {text}"), Some(&path))
}
