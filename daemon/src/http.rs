//! The HTTP routes: thin handlers that parse, validate, and ask an actor.
// Handlers return ready HTTP responses as their error values on purpose.
#![allow(clippy::result_large_err)]
use crate::cli::common::random_u64;
use crate::kinds::VaeFacts;
use crate::reply::{error, file_chunks};
pub use crate::state::AppState;
use crate::upload_room::{UploadPermit, UploadRoom, UPLOAD_COPIES};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use yued_contract::{Submission, SubmitError, UploadOp, UploadTask};
use yued_protocol::{ErrorBody, JobId, JobState, Request, SubmitReply, Yue2Request, MULTIPART_BOUNDARY};

fn bad(msg: impl Into<String>) -> HttpResponse {
    error(actix_web::http::StatusCode::BAD_REQUEST, msg)
}

fn not_found(msg: impl Into<String>) -> HttpResponse {
    error(actix_web::http::StatusCode::NOT_FOUND, msg)
}

/// A 503 (the job system or the journal is not answering, or the daemon is stopping), with
/// when to try again.
fn unavailable(msg: impl Into<String>) -> HttpResponse {
    HttpResponse::ServiceUnavailable().insert_header((header::RETRY_AFTER, "5")).json(ErrorBody { error: msg.into() })
}

/// The principal a request is admitted as (see [`crate::auth`]): its jobs' owner and its
/// place in the fair queue. Never a key.
pub fn client_key(req: &HttpRequest) -> String {
    crate::auth::caller(req).id
}

/// Routes, parses, validates and resolves a request body; the error says what is wrong,
/// naming the field (the 400 paths of `/synth` and `/synth/stream`).
pub fn check_request(body: &[u8], st: &AppState) -> Result<Request, String> {
    let req = Request::from_json(body, &st.families).map_err(|e| e.to_string())?;
    crate::kinds::of(req.family()).check(req, st)
}

/// The request part of a `/vae` upload: a kind's request of options only. Without a
/// `family` key it is YuE2's.
fn vae_options(body: &[u8], st: &AppState) -> Result<Request, String> {
    let names_family = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .is_some_and(|v| v.get("family").is_some_and(|f| !f.is_null()));
    let req = if names_family {
        Request::from_json(body, &st.families).map_err(|e| e.to_string())?
    } else {
        Request::Yue2(Yue2Request::from_json(body).map_err(|e| e.to_string())?)
    };
    crate::kinds::of(req.family()).check_options(req, st)
}

/// Submits a parsed request; the reply of every submission route.
pub async fn submit(
    st: &AppState,
    client: String,
    request: Request,
    upload: Option<UploadTask>,
) -> Result<JobId, HttpResponse> {
    match st.jobs.submit(Submission::new(client, request, upload)).await {
        Ok(id) => Ok(id),
        Err(SubmitError::Full(cap)) => Err(HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, "5"))
            .json(ErrorBody { error: format!("the server is at its admission cap of {cap} jobs; retry later") })),
        Err(e @ (SubmitError::OverShare(_) | SubmitError::KeptForOthers)) => Err(HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, "5"))
            .json(ErrorBody { error: e.to_string() })),
        Err(SubmitError::ShuttingDown) => Err(unavailable("the server is shutting down")),
        Err(SubmitError::Journal(e)) => {
            Err(unavailable(format!("the job could not be journaled, so it is not accepted: {e}")))
        }
        Err(SubmitError::Unavailable(e)) => Err(unavailable(e)),
    }
}

/// A `/synth` body checked off the executor (the length check tokenizes the lyrics, up to
/// the body limit): the request, and the top-level fields it does not read; `Err(None)`
/// when the check could not run.
pub async fn check_synth_body(body: Bytes, st: &web::Data<AppState>) -> Result<(Vec<String>, Request), Option<String>> {
    let state = st.clone();
    let checked = web::block(move || {
        let request = check_request(&body, &state)?;
        let value = serde_json::from_slice(&body).unwrap_or_default();
        Ok::<_, String>((yued_protocol::request::ignored_fields(&value, request.family()), request))
    });
    match checked.await {
        Ok(r) => r.map_err(Some),
        Err(_) => Err(None),
    }
}

/// Why a submission was refused, in words, from its answer (its JSON error and, for a
/// 429, when to try again).
pub async fn refusal_text(resp: HttpResponse) -> String {
    let status = resp.status();
    let retry = resp.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(String::from);
    let body = actix_web::body::to_bytes(resp.into_body()).await.ok();
    let why = body
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["error"].as_str().map(String::from))
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("refused").to_string());
    match retry {
        Some(s) => format!("submission refused ({}): {why} (retry after {s} s)", status.as_u16()),
        None => format!("submission refused ({}): {why}", status.as_u16()),
    }
}

pub async fn post_synth(req: HttpRequest, body: Bytes, st: web::Data<AppState>) -> HttpResponse {
    let (ignored, request) = match check_synth_body(body, &st).await {
        Ok(r) => r,
        Err(Some(msg)) => return bad(msg),
        Err(None) => return unavailable("the request check did not run"),
    };
    match submit(&st, client_key(&req), request, None).await {
        Ok(id) => {
            if !ignored.is_empty() {
                tracing::info!(job = %id, ignored = ?ignored, "fields the request does not read were ignored");
            }
            HttpResponse::Ok().json(SubmitReply { id, ignored })
        }
        Err(resp) => resp,
    }
}

/// The fields of a `/vae` request part a VAE job reads.
const VAE_READS: [&str; 5] = ["family", "output_format", "peak_clip", "mp3_bitrate", "vae_model"];

/// What a multipart body may hold beyond its parts' bytes (delimiters and part headers).
pub(crate) const MULTIPART_SLACK: usize = 1 << 20;

/// How long an upload's body may send nothing before it is given up (a 408): a body holds its
/// room in the uploads' memory while it is read.
const BODY_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// Reads a request body of at most `limit` bytes (`Err(None)` past it), with its room in the
/// uploads' memory ([`UPLOAD_COPIES`] times its bytes): its declared length `expect` at its
/// first byte, else growing as it comes.
async fn read_body(
    mut payload: web::Payload,
    limit: usize,
    expect: Option<usize>,
    room: (&UploadRoom, &mut UploadPermit),
) -> Result<Bytes, Option<HttpResponse>> {
    let (upload_room, permit) = room;
    let mut buf = bytes::BytesMut::new();
    loop {
        let Ok(next) = tokio::time::timeout(BODY_IDLE, payload.next()).await else {
            let msg = format!("the body stopped arriving ({} s without a byte)", BODY_IDLE.as_secs());
            return Err(Some(error(actix_web::http::StatusCode::REQUEST_TIMEOUT, msg)));
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| Some(bad(format!("body: {e}"))))?;
        let len = buf.len() + chunk.len();
        if len > limit {
            return Err(None);
        }
        if len * UPLOAD_COPIES > permit.bytes() {
            // A declared length is taken whole at the first byte (bodies that each wait for
            // the rest of their room while holding part of it could all wait out their time);
            // a body of unknown length grows, twice as much at each step.
            let step = match expect {
                Some(n) => n.max(len),
                None => (2 * len).max(1 << 20),
            };
            upload_room.grow(permit, step.min(limit) * UPLOAD_COPIES).await.map_err(Some)?;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// A multipart body up to its closing delimiter (`--boundary--` at the start of the body
/// or of a line), a slice of it: what the parser is given, then a CRLF, so whatever follows
/// the delimiter (an epilogue, a cut CRLF) cannot stall it. `None` when the delimiter is
/// missing.
fn closed(body: Bytes, boundary: &str) -> Option<Bytes> {
    let close = format!("--{boundary}--");
    let close = close.as_bytes();
    let end = if body.starts_with(close) {
        close.len()
    } else {
        body.windows(close.len() + 2).rposition(|w| w.starts_with(b"\r\n") && &w[2..] == close)? + close.len() + 2
    };
    Some(body.slice(..end))
}

fn too_large(limit: usize) -> HttpResponse {
    error(actix_web::http::StatusCode::PAYLOAD_TOO_LARGE, format!("upload larger than {limit} bytes"))
}

/// The parts of an upload's form, by name, each given at most once.
pub(crate) struct Form {
    parts: std::collections::HashMap<&'static str, Vec<u8>>,
    /// Its room in the uploads' memory, held while its parts are.
    _room: UploadPermit,
}

impl Form {
    pub(crate) fn take(&mut self, name: &str) -> Option<Vec<u8>> {
        self.parts.remove(name)
    }
}

/// Reads an upload's form of the parts `names` (`what` says what the route takes): the whole
/// body first (the parts' bytes are held anyway), so a body cut inside its closing delimiter
/// is refused here (actix-multipart waits forever for the rest of a delimiter once the
/// payload has ended), then each part, at most once.
pub(crate) async fn read_form(
    req: &HttpRequest,
    payload: web::Payload,
    vae: &crate::state::VaeLimits,
    names: &[&'static str],
    what: &str,
) -> Result<Form, HttpResponse> {
    let limit = vae.max_upload_bytes;
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if !is_form {
        return Err(error(
            actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("POST {} takes multipart/form-data with {what}", req.path()),
        ));
    }
    // A declared length past the bound is refused before a byte of the body is read.
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(MULTIPART_SLACK) as u64) {
        return Err(too_large(limit));
    }
    // Room in the memory that bodies being read share, for this one as it comes: three times
    // what has come (the body, the parser's buffer, its parts).
    let mut room = vae.upload_room.start(&crate::auth::caller(req).id);
    let expect = declared.map(|n| n as usize);
    let body =
        match read_body(payload, limit.saturating_add(MULTIPART_SLACK), expect, (&vae.upload_room, &mut room)).await {
            Ok(b) => b,
            Err(Some(resp)) => return Err(resp),
            Err(None) => return Err(too_large(limit)),
        };
    let boundary = actix_web::HttpMessage::mime_type(req)
        .ok()
        .flatten()
        .and_then(|m| m.get_param("boundary").map(|b| b.as_str().to_string()))
        .unwrap_or_default();
    if boundary.is_empty() {
        return Err(bad("multipart: the content type names no boundary"));
    }
    let Some(body) = closed(body, &boundary) else {
        return Err(bad(format!("multipart: the body ends before its closing delimiter --{boundary}--")));
    };
    let mut form = actix_multipart::Multipart::new(
        req.headers(),
        stream::iter([body, Bytes::from_static(b"\r\n")].map(Ok::<_, actix_web::error::PayloadError>)),
    );
    let mut parts = Form { parts: Default::default(), _room: room };
    let mut total = 0usize;
    while let Some(field) = form.next().await {
        let mut field = field.map_err(|e| bad(format!("multipart: {e}")))?;
        let name = field.name().unwrap_or_default().to_string();
        // Its chunks, joined once at their exact length (a growing buffer would take up to
        // twice the part).
        let mut chunks: Vec<Bytes> = Vec::new();
        while let Some(chunk) = field.next().await {
            let chunk = chunk.map_err(|e| bad(format!("multipart part '{name}': {e}")))?;
            total += chunk.len();
            if total > limit {
                return Err(too_large(limit));
            }
            chunks.push(chunk);
        }
        let buf = chunks.concat();
        let Some(&known) = names.iter().find(|n| **n == name) else {
            return Err(bad(format!("unknown part '{name}' ({})", names.join(", "))));
        };
        if parts.parts.insert(known, buf).is_some() {
            return Err(bad(format!("{name}: given twice")));
        }
    }
    Ok(parts)
}

/// Audio to encode: it decodes, the VAE has an encoder, and it is not too long.
async fn check_vae_audio(a: Vec<u8>, vae: &VaeFacts) -> Result<Vec<u8>, HttpResponse> {
    if !vae.has_encoder {
        return Err(bad("audio: this VAE file has no encoder; only src_latents can be decoded"));
    }
    let bound = format!("the {} of {:.0} s", vae.limit, vae.max_seconds);
    measured("audio", a, (0.0, String::new()), vae.max_seconds, bound).await
}

/// The most samples (frames times channels) an upload may decode to, per second of its route's
/// bound: 96 kHz stereo (or 48 kHz in four channels) at the full length. The job decodes the
/// whole file, so this bounds its memory whatever the rate and channels.
const SAMPLES_PER_BOUND_SECOND: f64 = 192_000.0;

/// The part `name` checked to decode (measured packet by packet, never held whole: a small file
/// that decodes to hours is refused as soon as it passes `max`) and to last `min..=max` seconds
/// (`min.1` says who needs the minimum, `bound` what `max` is); 400 otherwise.
async fn measured(
    name: &'static str,
    audio: Vec<u8>,
    min: (f64, String),
    max: f64,
    bound: String,
) -> Result<Vec<u8>, HttpResponse> {
    use yued_audio::decode::Length;
    let measured = web::block(move || yued_audio::decode::measure(&audio, max).map(|l| (l, audio))).await;
    let (length, audio) = match measured {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return Err(bad(format!("{name}: {e}"))),
        Err(_) => return Err(unavailable("the decode check did not run")),
    };
    match length {
        Length::Over => Err(bad(format!("{name}: longer than {bound}"))),
        Length::Whole { seconds, .. } if seconds < min.0 => Err(bad(format!("{name}: {seconds:.2} s; {}", min.1))),
        Length::Whole { seconds, sample_rate, channels }
            if seconds * f64::from(sample_rate) * channels as f64 > max * SAMPLES_PER_BOUND_SECOND =>
        {
            Err(bad(format!(
                "{name}: {channels} channels at {sample_rate} Hz for {seconds:.1} s are more samples than {bound} \
                takes at 96 kHz stereo; downmix or resample it first"
            )))
        }
        Length::Whole { .. } => Ok(audio),
    }
}

/// Latents to decode: whole frames of finite values, within the length bound.
/// The latents of a decode upload in any of the codec's formats (raw f32, `.nac8`, `.nac4`,
/// told by their magic, as `yued codec decode` reads them), checked, as the raw f32 the job
/// reads. The length is checked from the header (or the size) before anything is decoded,
/// and the decoding runs off the executor.
async fn check_vae_latents(z: Vec<u8>, vae: &VaeFacts) -> Result<Vec<u8>, String> {
    let lat = vae.audio.latent_channels;
    let frames = yued_engine::latent::latent_frames(&z, lat);
    let seconds = vae.audio.latent_seconds(frames);
    if seconds > vae.max_seconds + 1e-9 {
        return Err(format!(
            "src_latents: {frames} frames ({seconds:.1} s) exceed the {} of {:.0} s",
            vae.limit, vae.max_seconds
        ));
    }
    web::block(move || {
        let (_, values) = yued_engine::latent::decode_latents(&z, lat).map_err(|e| format!("src_latents: {e}"))?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err("src_latents: the latents hold NaN or infinite values".to_string());
        }
        Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect())
    })
    .await
    .unwrap_or_else(|_| Err("src_latents: the check did not run".into()))
}

/// Writes an upload under the data directory (synced), where its job reads it.
async fn store_upload(dir: &std::path::Path, bytes: Vec<u8>) -> Result<std::path::PathBuf, HttpResponse> {
    let path = dir.join(format!("{:016x}.upload", random_u64()));
    let target = path.clone();
    let written = web::block(move || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&target)?;
        f.write_all(&bytes)?;
        f.sync_all()
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        let _ = std::fs::remove_file(&path);
        return Err(error(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR, "could not store the upload"));
    }
    Ok(path)
}

/// `POST /vae`: multipart/form-data with exactly one of `audio` (encode to latents) or
/// `src_latents` (raw f32 `[T, 64]`, decode to audio), and an optional `request` JSON part
/// whose output_format, peak_clip and mp3_bitrate drive a decode. The upload is checked
/// here (400 on audio that does not decode, latents that are not whole frames or exceed
/// the context), written under the data directory, and queued like any job.
pub async fn post_vae(req: HttpRequest, payload: web::Payload, st: web::Data<AppState>) -> HttpResponse {
    let what = "an 'audio' or a 'src_latents' part";
    let mut form = match read_form(&req, payload, &st.vae, &["audio", "src_latents", "request"], what).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let (audio, latents, request) = (form.take("audio"), form.take("src_latents"), form.take("request"));
    // The request part is a request like /synth's, of which a decode reads output_format,
    // peak_clip and mp3_bitrate (and a MiniMax one its vae_model): every field is type- and
    // bound-checked, but a VAE job has no use for the "style or lyrics" rule of a song. A
    // part that names no family is YuE2's, as it was before MiniMax Music 3 was served.
    let options = match &request {
        Some(body) => match vae_options(body, &st) {
            Ok(r) => r,
            // The part's own JSON errors name the part.
            Err(e) => return bad(e.strip_prefix("body: ").map(|m| format!("request: {m}")).unwrap_or(e)),
        },
        None => Request::Yue2(Yue2Request::default()),
    };
    let vae = match crate::kinds::of(options.family()).vae_facts(&options, &st) {
        Ok(v) => v,
        Err(e) => return bad(e),
    };
    let (op, bytes) = match (audio, latents) {
        (Some(_), Some(_)) => return bad("give exactly one of 'audio' (encode) or 'src_latents' (decode), not both"),
        (None, None) => return bad("give exactly one of 'audio' (encode) or 'src_latents' (decode)"),
        (Some(a), None) => match check_vae_audio(a, &vae).await {
            Ok(a) => (UploadOp::Encode, a),
            Err(resp) => return resp,
        },
        (None, Some(z)) => match check_vae_latents(z, &vae).await {
            Ok(raw) => (UploadOp::Decode, raw),
            Err(e) => return bad(e),
        },
    };
    let path = match store_upload(&st.vae.uploads, bytes).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    // The part's fields a VAE job does not read are named, as /synth names its ignored ones.
    let ignored: Vec<String> = request
        .as_deref()
        .and_then(|b| serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(b).ok())
        .map(|o| o.keys().filter(|k| !VAE_READS.contains(&k.as_str())).cloned().collect())
        .unwrap_or_default();
    match submit(&st, client_key(&req), options, Some(UploadTask { op, input: path.clone() })).await {
        Ok(id) => HttpResponse::Ok().json(SubmitReply { id, ignored }),
        Err(resp) => {
            let _ = std::fs::remove_file(&path);
            resp
        }
    }
}

/// The longest recording `/tokenize` takes (15 minutes: 22 500 codes).
pub const MAX_TOKENIZE_SECONDS: f64 = 900.0;

/// `POST /tokenize`: multipart/form-data with an `audio` part in any container the uploads
/// decode, at any rate and channel count (the job averages it to mono at 24 kHz). Served
/// with an audio tokenizer (`--tokenizer`); the audio is checked here (400 when the part is
/// missing, does not decode, is under a second or too long), written under the data
/// directory and queued like any job, whose result is `{"codes": "12046,8433,..."}`.
pub async fn post_tokenize(req: HttpRequest, payload: web::Payload, st: web::Data<AppState>) -> HttpResponse {
    if !st.audio_tokenizer {
        return not_found(
            "POST /tokenize is served when the daemon runs with an audio tokenizer (--tokenizer HEAD.gguf)",
        );
    }
    let mut form = match read_form(&req, payload, &st.vae, &["audio"], "an 'audio' part").await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let bounds =
        Recording { min: (1.0, "one second"), max: MAX_TOKENIZE_SECONDS, tool: "the tokenizer", route: "/tokenize" };
    let audio = match bounds.check("audio", form.take("audio")).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    listening_job(&req, &st, UploadOp::Tokenize, audio).await
}

/// The longest recording `/transcribe` takes (30 minutes: ten of the head's windows).
pub const MAX_TRANSCRIBE_SECONDS: f64 = 1800.0;

/// `POST /transcribe`: multipart/form-data with an `audio` part (as `/tokenize` takes it)
/// and an optional `melody_only` part (`true`/`false`, `1`/`0`). Served with a transcriber
/// (`--transcriber`); the audio is checked as for `/tokenize` (at least 1025 samples at
/// 24 kHz), and the job's result is `{"abc": "X:1\n..."}`: the whole score, or the melodies
/// without chord symbols.
pub async fn post_transcribe(req: HttpRequest, payload: web::Payload, st: web::Data<AppState>) -> HttpResponse {
    if !st.transcriber {
        return not_found(
            "POST /transcribe is served when the daemon runs with a transcriber (--transcriber HEAD.gguf)",
        );
    }
    let what = "an 'audio' part and an optional 'melody_only' part";
    let mut form = match read_form(&req, payload, &st.vae, &["audio", "melody_only"], what).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let melody_only = match form.take("melody_only").map(|v| parse_flag(&v)) {
        None => false,
        Some(Ok(b)) => b,
        Some(Err(e)) => return bad(format!("melody_only: {e}")),
    };
    let audio = match TRANSCRIBE_RECORDING.check("audio", form.take("audio")).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let op = if melody_only { UploadOp::TranscribeMelody } else { UploadOp::Transcribe };
    listening_job(&req, &st, op, audio).await
}

/// What `/transcribe` takes: from MERT's 1025 samples at 24 kHz to [`MAX_TRANSCRIBE_SECONDS`].
pub const TRANSCRIBE_RECORDING: Recording = Recording {
    min: (1025.0 / 24_000.0, "1025 samples at 24 kHz"),
    max: MAX_TRANSCRIBE_SECONDS,
    tool: "the transcriber",
    route: "/transcribe",
};

/// A form's flag: `true`/`false`, `1`/`0` (any case, surrounding blanks ignored).
pub fn parse_flag(v: &[u8]) -> Result<bool, String> {
    match String::from_utf8_lossy(v).trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        other => Err(format!("'{other}' is not true or false")),
    }
}

/// What a listening route takes of a recording: its bounds in seconds (the lower one with
/// its wording) and names for errors.
pub struct Recording {
    pub min: (f64, &'static str),
    pub max: f64,
    pub tool: &'static str,
    pub route: &'static str,
}

impl Recording {
    /// The part `name`, checked to decode and to last `min..=max` seconds (400 otherwise).
    pub async fn check(&self, name: &'static str, audio: Option<Vec<u8>>) -> Result<Vec<u8>, HttpResponse> {
        let Some(audio) = audio else {
            return Err(bad(format!("{name}: missing (a file part named '{name}')")));
        };
        let min = (self.min.0, format!("{} needs at least {}", self.tool, self.min.1));
        measured(name, audio, min, self.max, format!("the {:.0} s {} takes", self.max, self.route)).await
    }
}

/// Stores a checked recording and queues its listening job; replies with the job's id.
async fn listening_job(req: &HttpRequest, st: &web::Data<AppState>, op: UploadOp, audio: Vec<u8>) -> HttpResponse {
    match submit_upload(req, st, op, audio).await {
        Ok(id) => HttpResponse::Ok().json(SubmitReply::new(id)),
        Err(resp) => resp,
    }
}

/// Stores a checked recording and queues its listening job (the upload removed again when
/// the job is refused).
pub async fn submit_upload(
    req: &HttpRequest,
    st: &web::Data<AppState>,
    op: UploadOp,
    audio: Vec<u8>,
) -> Result<JobId, HttpResponse> {
    let path = store_upload(&st.vae.uploads, audio).await?;
    let task = UploadTask { op, input: path.clone() };
    let submitted = submit(st, client_key(req), Request::Yue2(Yue2Request::default()), Some(task)).await;
    if submitted.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    submitted
}

#[derive(serde::Deserialize)]
pub struct JobQuery {
    id: Option<String>,
    result: Option<String>,
    cancel: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct JobsQuery {
    all: Option<String>,
}

/// A query flag `name`: absent, empty, `0` or `false` is false; `1` or `true` is true; any other
/// value is a 400 naming it (a `result=yes` must not quietly answer the status instead).
fn flag(name: &str, v: &Option<String>) -> Result<bool, HttpResponse> {
    match v.as_deref() {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(bad(format!("{name}: '{other}' is not 1, true, 0 or false"))),
    }
}

pub fn job_id(id: &Option<String>) -> Result<JobId, HttpResponse> {
    let raw = id.as_deref().ok_or_else(|| bad("id: missing"))?;
    JobId::parse(raw).map_err(|e| bad(format!("id: {e}")))
}

/// `GET /jobs`: the caller's jobs (by its API key, else its address), oldest first, with
/// their requests: what a page or a script needs to find its history again. `?all=1`
/// (an admin key; anyone on a box without keys): every principal's, each naming its owner.
pub async fn get_jobs(req: HttpRequest, q: web::Query<JobsQuery>, st: web::Data<AppState>) -> HttpResponse {
    let who = crate::auth::caller(&req);
    let all = match flag("all", &q.all) {
        Ok(a) => a,
        Err(r) => return r,
    };
    if all && !who.is_admin() {
        return error(actix_web::http::StatusCode::FORBIDDEN, "all: every principal's jobs need an admin key");
    }
    match st.jobs.of(&who).list(all).await {
        Ok(list) => HttpResponse::Ok().json(list),
        Err(e) => unavailable(e.0),
    }
}

pub async fn get_job(req: HttpRequest, q: web::Query<JobQuery>, st: web::Data<AppState>) -> HttpResponse {
    let id = match job_id(&q.id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    // A cancel left without its POST (curl without -X POST) must not read as done.
    if q.cancel.is_some() {
        return bad("cancel: a GET only reads; cancelling is POST /job?id=N&cancel=1");
    }
    let jobs = st.jobs.of(&crate::auth::caller(&req));
    match flag("result", &q.result) {
        Ok(true) => return result(&id, &jobs).await,
        Ok(false) => {}
        Err(r) => return r,
    }
    match jobs.status(&id).await {
        Ok(Some(s)) => HttpResponse::Ok().json(s),
        Ok(None) => not_found(format!("unknown job {id}")),
        Err(e) => unavailable(e.0),
    }
}

pub async fn post_job(req: HttpRequest, q: web::Query<JobQuery>, st: web::Data<AppState>) -> HttpResponse {
    let id = match job_id(&q.id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match flag("cancel", &q.cancel) {
        Ok(true) => {}
        Ok(false) => return bad("cancel: POST /job needs cancel=1"),
        Err(r) => return r,
    }
    match st.jobs.of(&crate::auth::caller(&req)).cancel(&id).await {
        Ok(Some(JobState::Cancelled)) => HttpResponse::Ok().json(serde_json::json!({"status": "cancelled"})),
        Ok(Some(s)) => error(actix_web::http::StatusCode::CONFLICT, format!("job {id} is already {}", s.as_str())),
        Ok(None) => not_found(format!("unknown job {id}")),
        Err(e) => unavailable(e.0),
    }
}

/// The multipart result, streamed from the files in bounded chunks.
async fn result(id: &JobId, jobs: &yued_contract::Jobs) -> HttpResponse {
    match jobs.state(id).await {
        Ok(None) => return not_found(format!("unknown job {id}")),
        Ok(Some(JobState::Done)) => {}
        Ok(Some(s)) => return not_found(format!("job {id} has no result ({})", s.as_str())),
        Err(e) => return unavailable(e.0),
    }
    let Some(parts) = jobs.parts(id).await else {
        return not_found(format!("the result of job {id} has expired"));
    };
    // A result of one JSON document (a tokenization's codes) is that document.
    if let [(path, ct)] = parts.as_slice() {
        if ct == "application/json" {
            return HttpResponse::Ok().content_type("application/json").streaming(file_chunks(path.clone()));
        }
    }
    // Each family's clients read its own boundary.
    let boundary = match jobs.family(id).await {
        Ok(Some(family)) => crate::kinds::of(family).boundary(),
        _ => MULTIPART_BOUNDARY,
    };
    let mut segments: Vec<Segment> = Vec::new();
    for (path, ct) in parts {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        segments.push(Segment::Bytes(Bytes::from(format!(
            "--{boundary}\r\nContent-Type: {ct}\r\nContent-Disposition: attachment; filename=\"{name}\"\r\n\r\n"
        ))));
        segments.push(Segment::File(path));
        segments.push(Segment::Bytes(Bytes::from_static(b"\r\n")));
    }
    segments.push(Segment::Bytes(Bytes::from(format!("--{boundary}--\r\n"))));
    let body = stream::iter(segments).flat_map(|s| match s {
        Segment::Bytes(b) => stream::iter(vec![Ok::<Bytes, std::io::Error>(b)]).boxed(),
        Segment::File(p) => file_chunks(p).boxed(),
    });
    HttpResponse::Ok().content_type(format!("multipart/mixed; boundary={boundary}")).streaming(body)
}

enum Segment {
    Bytes(Bytes),
    File(std::path::PathBuf),
}

/// Reply of `GET /health`: liveness and readiness, open to anyone (no job ids, no queue).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Health {
    /// `ok`; `loading` until the compute stages are ready; `unhealthy` while the journal
    /// refuses writes (a 503 to `?ready=1` and on `/status`); `degraded` on a cluster node
    /// while its NATS connection is down. Either way plain `/health` (liveness) stays a 200:
    /// restarting the node mends nothing and would stop its running jobs.
    #[schemars(extend("enum" = ["ok", "loading", "unhealthy", "degraded"]))]
    pub status: &'static str,
    /// Whether the daemon takes and runs jobs now (`status` is `ok`).
    pub ready: bool,
    pub uptime_seconds: f64,
    /// Whether the models are the embedded demo's random weights (songs are noise).
    pub demo_weights: bool,
}

/// Reply of `GET /status` and `/system/queue` (a key, where keys are configured): the
/// health, and the queue as the caller may see it.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Status {
    #[serde(flatten)]
    pub health: Health,
    pub queue: yued_contract::QueueSnapshot,
}

fn health_of(st: &AppState, s: &yued_contract::QueueSnapshot) -> Health {
    let status = if s.journal_error.is_some() {
        "unhealthy"
    } else if s.worker_ready {
        "ok"
    } else {
        "loading"
    };
    Health {
        status,
        ready: status == "ok" && s.accepting,
        uptime_seconds: st.started.elapsed().as_secs_f64(),
        demo_weights: st.demo_weights,
    }
}

/// A journal that refuses writes makes the daemon unhealthy (503) until one succeeds:
/// nothing it acknowledges then would survive a restart.
fn health_status(s: &yued_contract::QueueSnapshot) -> actix_web::http::StatusCode {
    if s.journal_error.is_some() {
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE
    } else {
        actix_web::http::StatusCode::OK
    }
}

#[derive(serde::Deserialize)]
pub struct HealthQuery {
    ready: Option<String>,
}

/// `/health`; `?ready=1` makes it a readiness probe: a 503 (with the same body) until the
/// daemon takes and runs jobs, for a load balancer or an orchestrator that reads statuses only.
pub async fn health(st: web::Data<AppState>, q: web::Query<HealthQuery>) -> HttpResponse {
    use yued_cluster::async_nats::connection::State;
    let ready = match flag("ready", &q.ready) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if st.nats.as_ref().is_some_and(|c| c.connection_state() != State::Connected) {
        let h = Health {
            status: "degraded",
            ready: false,
            uptime_seconds: st.started.elapsed().as_secs_f64(),
            demo_weights: st.demo_weights,
        };
        let status =
            if ready { actix_web::http::StatusCode::SERVICE_UNAVAILABLE } else { actix_web::http::StatusCode::OK };
        return HttpResponse::build(status).insert_header((header::CACHE_CONTROL, "no-store")).json(h);
    }
    match st.jobs.liveness().await {
        Ok(s) => {
            let h = health_of(&st, &s);
            // Plain /health is liveness: a 200 while the process answers (an unhealthy journal
            // is retried on its own, and a restart would stop the running jobs); ready=1 is
            // the probe that says 503 until the daemon takes and runs jobs.
            let status = if ready && (!h.ready || health_status(&s) != actix_web::http::StatusCode::OK) {
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE
            } else {
                actix_web::http::StatusCode::OK
            };
            HttpResponse::build(status).insert_header((header::CACHE_CONTROL, "no-store")).json(h)
        }
        Err(e) => unavailable(e.0),
    }
}

/// `/status`, `/system/queue`: the health and the queue; job ids only the caller's own
/// (an admin's: every running one).
pub async fn status(req: HttpRequest, st: web::Data<AppState>) -> HttpResponse {
    match st.jobs.of(&crate::auth::caller(&req)).snapshot().await {
        Ok(s) => HttpResponse::build(health_status(&s))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(Status { health: health_of(&st, &s), queue: s }),
        Err(e) => unavailable(e.0),
    }
}

pub async fn props(st: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(&st.props)
}

pub async fn metrics(req: HttpRequest, st: web::Data<AppState>) -> HttpResponse {
    if let Some(refused) = crate::auth::refusal(&req, "/metrics") {
        return refused;
    }
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(st.metrics.render())
}

pub async fn openapi(st: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(st.openapi.clone())
}

/// Server-sent events of the daemon log: the kept lines, then the live ones, for as long as the
/// caller's key stays (a key revoked by a reload ends its stream within [`KEY_RECHECK`]).
pub async fn logs(req: HttpRequest, st: web::Data<AppState>) -> HttpResponse {
    if let Some(refused) = crate::auth::refusal(&req, "/logs") {
        return refused;
    }
    let admitted = crate::auth::Admitted::of(&req);
    let (kept, rx) = st.logs.subscribe();
    let head = stream::iter(kept.into_iter().map(|l| Ok::<Bytes, std::io::Error>(sse(&l))));
    let tick = tokio::time::interval(crate::auth::KEY_RECHECK);
    let live = stream::unfold((rx, tick), move |(mut rx, mut tick)| {
        let admitted = admitted.clone();
        async move {
            loop {
                let line = tokio::select! {
                    l = rx.recv() => l,
                    _ = tick.tick() => {
                        if !admitted.still() {
                            return None;
                        }
                        continue;
                    }
                };
                match line {
                    Ok(_) if !admitted.still() => return None,
                    Ok(l) => return Some((Ok(sse(&l)), (rx, tick))),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return None,
                }
            }
        }
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(head.chain(live))
}

fn sse(line: &str) -> Bytes {
    let mut s = String::with_capacity(line.len() + 8);
    for l in line.lines() {
        s.push_str("data: ");
        s.push_str(l);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}
