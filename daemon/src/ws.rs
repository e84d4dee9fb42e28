//! WebSocket streaming (actix-ws): `GET /stream?id=N` follows a job, `GET /synth/stream`
//! takes the request as its first text message and follows the job it creates. Text
//! frames carry the JSON events, binary frames the audio, one after each `tile` event: Ogg
//! Opus pages by default (one Ogg stream per track: a track's frames concatenate to a
//! playable .opus file), or `?format=pcm16` (interleaved s16le, one frame per tile). Closing
//! the socket never cancels the job; on `/synth/stream` an explicit `{"cmd":"cancel"}` does.
// Handlers return ready HTTP responses as their error values on purpose.
#![allow(clippy::result_large_err)]
use crate::http::{check_synth_body, client_key, job_id, refusal_text, submit, AppState};
use crate::reply::error;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason};
use futures_util::StreamExt;
use yued_contract::stream::{HubItem, PcmTile, StreamItem, TileEncoder, OPUS_RATE};
use yued_contract::Jobs;
use yued_protocol::{JobId, JobState, StreamCodec, StreamCommand, StreamEvent, SubmitReply};

#[derive(serde::Deserialize)]
pub struct StreamQuery {
    id: Option<String>,
    format: Option<String>,
}

fn codec(q: &Option<String>) -> Result<StreamCodec, HttpResponse> {
    match q.as_deref() {
        None | Some("opus") => Ok(StreamCodec::Opus),
        Some("pcm16") => Ok(StreamCodec::Pcm16),
        Some(other) => Err(error(
            actix_web::http::StatusCode::BAD_REQUEST,
            format!("format: unknown stream format '{other}' (opus or pcm16)"),
        )),
    }
}

pub async fn stream(
    req: HttpRequest,
    body: web::Payload,
    q: web::Query<StreamQuery>,
    st: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let id = match job_id(&q.id) {
        Ok(id) => id,
        Err(r) => return Ok(r),
    };
    let codec = match codec(&q.format) {
        Ok(c) => c,
        Err(r) => return Ok(r),
    };
    // Another principal's job is as unknown as a job nobody has.
    let jobs = st.jobs.of(&crate::auth::caller(&req));
    if jobs.state(&id).await.ok().flatten().is_none() {
        return Ok(error(actix_web::http::StatusCode::NOT_FOUND, format!("unknown job {id}")));
    }
    let admitted = crate::auth::Admitted::of(&req);
    let peer = crate::peer::Peer::of(&req);
    let (resp, session, msgs) = actix_ws::handle(&req, body)?;
    let msgs = msgs.aggregate_continuations();
    let st = st.into_inner();
    actix_web::rt::spawn(async move {
        follow(st, jobs, (admitted, peer), session, msgs, id, codec, false).await;
    });
    Ok(resp)
}

pub async fn synth_stream(
    req: HttpRequest,
    body: web::Payload,
    q: web::Query<StreamQuery>,
    st: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let codec = match codec(&q.format) {
        Ok(c) => c,
        Err(r) => return Ok(r),
    };
    let client = client_key(&req);
    let jobs = st.jobs.of(&crate::auth::caller(&req));
    let admitted = crate::auth::Admitted::of(&req);
    let peer = crate::peer::Peer::of(&req);
    let (resp, mut session, msgs) = actix_ws::handle(&req, body)?;
    let mut msgs = msgs.max_frame_size(st.max_body_bytes).aggregate_continuations();
    actix_web::rt::spawn(async move {
        // The first text message is the request, within three keepalive periods (a socket
        // that says nothing is not held open).
        let wait = 3 * st.ws_ping;
        let first = tokio::time::timeout(wait, async {
            loop {
                match msgs.next().await {
                    Some(Ok(actix_ws::AggregatedMessage::Text(t))) => return Ok(t),
                    Some(Ok(actix_ws::AggregatedMessage::Ping(p))) => {
                        let _ = session.pong(&p).await;
                    }
                    Some(Ok(actix_ws::AggregatedMessage::Close(_))) | None => return Err(None),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(Some(protocol_close(&e))),
                }
            }
        })
        .await;
        let first = match first {
            Ok(Ok(t)) => t,
            Ok(Err(reason)) => {
                let _ = session.close(reason).await;
                return;
            }
            Err(_) => {
                let description = format!("no request within {} s", wait.as_secs());
                let _ =
                    session.close(Some(CloseReason { code: CloseCode::Policy, description: Some(description) })).await;
                return;
            }
        };
        let (ignored, request) = match check_synth_body(first.into_bytes(), &st).await {
            Ok(r) => r,
            Err(msg) => {
                let msg = msg.unwrap_or_else(|| "the request check did not run".into());
                let _ = session.text(StreamEvent::Failed { error: msg.clone() }.to_text()).await;
                let _ = session
                    .close(Some(CloseReason { code: CloseCode::Policy, description: Some(truncate(&msg)) }))
                    .await;
                return;
            }
        };
        let id = match submit(&st, client, request, None).await {
            Ok(id) => id,
            Err(resp) => {
                let msg = refusal_text(resp).await;
                let _ = session.text(StreamEvent::Failed { error: msg.clone() }.to_text()).await;
                let reason = CloseReason { code: CloseCode::Again, description: Some(truncate(&msg)) };
                let _ = session.close(Some(reason)).await;
                return;
            }
        };
        // As `POST /synth` answers: the id, and the fields the request does not read.
        let _ = session
            .text(
                serde_json::to_string(&JobEvent { event: "job", reply: SubmitReply { id: id.clone(), ignored } })
                    .expect("serializes"),
            )
            .await;
        follow(st.into_inner(), jobs, (admitted, peer), session, msgs, id, codec, true).await;
    });
    Ok(resp)
}

/// `/synth/stream`'s first event: `POST /synth`'s reply with `"event": "job"`.
#[derive(serde::Serialize)]
struct JobEvent {
    event: &'static str,
    #[serde(flatten)]
    reply: SubmitReply,
}

/// The close a peer's broken frame earns (RFC 6455 7.4.1): 1009 for a message over the
/// bound, 1007 for text that is not UTF-8, 1002 for the rest.
fn protocol_close(e: &actix_ws::ProtocolError) -> CloseReason {
    let (code, what) = match e {
        actix_ws::ProtocolError::Overflow | actix_ws::ProtocolError::InvalidLength(_) => {
            (CloseCode::Size, "message too big")
        }
        actix_ws::ProtocolError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            (CloseCode::Invalid, "text that is not UTF-8")
        }
        _ => (CloseCode::Protocol, "a malformed frame"),
    };
    CloseReason { code, description: Some(what.into()) }
}

fn truncate(s: &str) -> String {
    // Close reasons must fit a control frame (123 bytes).
    let mut out = String::new();
    for c in s.chars() {
        if out.len() + c.len_utf8() > 120 {
            break;
        }
        out.push(c);
    }
    out
}

/// The stream of a job that has ended, at once: a done job's result audio as tiles (framed
/// as live: format, tile events, s16 or each track's Ogg Opus stream; the samples are the
/// result file's, normalised over the song) then `done`; a failed or cancelled job's
/// terminal event; then a close.
async fn replay_ended(st: &AppState, jobs: &Jobs, mut session: actix_ws::Session, id: &JobId, codec: StreamCodec) {
    let status = jobs.status(id).await.ok().flatten();
    let close = |description: &str| CloseReason { code: CloseCode::Normal, description: Some(description.into()) };
    let Some(status) = status.filter(|s| s.status.is_terminal()) else {
        let _ = session
            .close(Some(CloseReason { code: CloseCode::Error, description: Some("no stream for this job".into()) }))
            .await;
        return;
    };
    let (items, reason) = match status.status {
        JobState::Failed => (
            vec![StreamItem::Text(StreamEvent::Failed { error: status.error.unwrap_or_default() }.to_text())],
            "job finished",
        ),
        JobState::Cancelled => (vec![StreamItem::Text(StreamEvent::Cancelled {}.to_text())], "job finished"),
        _ => {
            let parts = jobs.parts(id).await.unwrap_or_default();
            let tile_samples = st.vae.audio.samples_per_latent * 512;
            let job = id.clone();
            match web::block(move || result_as_tiles(&job, &parts, codec, tile_samples)).await {
                Ok(Some(items)) => (items, "job finished"),
                _ => (
                    vec![StreamItem::Text(StreamEvent::Done { tracks: 0, audio_seconds: 0.0 }.to_text())],
                    "the job's result has expired",
                ),
            }
        }
    };
    for it in items {
        let (bytes, sent) = match it {
            StreamItem::Text(t) => (t.len(), session.text(t).await),
            StreamItem::Binary(b) => (b.len(), session.binary(b).await),
        };
        if sent.is_err() {
            return;
        }
        st.metrics.ws_bytes_total.inc_by(bytes as u64);
    }
    let _ = session.close(Some(close(reason))).await;
}

/// A stored result's audio tracks decoded and cut into tiles of `tile_samples`, encoded as
/// the live stream's, ending on `done`; `None` when the result has no audio left.
fn result_as_tiles(
    job: &JobId,
    parts: &[(std::path::PathBuf, String)],
    codec: StreamCodec,
    tile_samples: usize,
) -> Option<Vec<StreamItem>> {
    let mut encoder = TileEncoder::new(job);
    let mut items = Vec::new();
    let (mut tracks, mut seconds, mut index) = (0u32, 0.0, 0u32);
    for (path, ct) in parts.iter().filter(|(_, ct)| ct.starts_with("audio/")) {
        let pcm = yued_audio::decode::decode(&std::fs::read(path).ok()?)
            .map_err(|e| {
                tracing::warn!(job = %job, file = %path.display(), content_type = %ct, error = %e, "result \
                audio does not decode")
            })
            .ok()?;
        let n = pcm.data.len() / pcm.channels;
        // Never clipped, as live: a file above full scale (wav32 is not normalised) is
        // attenuated by its peak.
        let gain = 1.0 / pcm.data.iter().fold(1f32, |m, x| m.max(x.abs()));
        for start in (0..n).step_by(tile_samples.max(1)) {
            let end = (start + tile_samples).min(n);
            let planar: Vec<f32> =
                (0..pcm.channels).flat_map(|c| pcm.data[c * n + start..c * n + end].iter().map(|x| x * gain)).collect();
            let t = encoder.encode(&PcmTile {
                track: tracks,
                index,
                start_sample: start as u64,
                sample_rate: pcm.sample_rate,
                channels: pcm.channels,
                planar,
            });
            if index == 0 {
                // As live: Opus always decodes at 48 kHz (the encoder resamples other rates).
                let sample_rate = if codec == StreamCodec::Opus { OPUS_RATE } else { t.sample_rate };
                items.push(StreamItem::Text(
                    StreamEvent::Format { codec, sample_rate, channels: t.channels as u16 }.to_text(),
                ));
            }
            items.extend(yued_contract::stream::items(&HubItem::Tile(t), codec, false));
            index += 1;
        }
        tracks += 1;
        seconds += pcm.seconds();
    }
    if tracks == 0 {
        return None;
    }
    for end in encoder.finish() {
        items.extend(yued_contract::stream::items(&HubItem::Tile(end), codec, false));
    }
    items.push(StreamItem::Text(StreamEvent::Done { tracks, audio_seconds: seconds }.to_text()));
    Some(items)
}

/// Whether a frame went out within three keepalive periods. A peer that reads too slowly
/// stalls the write once the socket's buffers are full; past that it is dropped and its
/// connection cut (reset: a graceful close would wait on the peer to read what is buffered
/// for it, holding the socket and megabytes), so a stuck writer never outlives it and its
/// queue in the hub stays bounded.
async fn sent_in_time(
    st: &AppState,
    id: &JobId,
    peer: Option<&crate::peer::Peer>,
    send: impl std::future::Future<Output = Result<(), actix_ws::Closed>>,
) -> bool {
    match tokio::time::timeout(3 * st.ws_ping, send).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            st.metrics.ws_dropped_listeners_total.inc();
            tracing::warn!(job = %id, "a WebSocket listener reads too slowly: dropped");
            if let Some(p) = peer {
                p.cut();
            }
            false
        }
    }
}

/// Keepalive: a Ping after `every` of silence on either side (a listener that only reads
/// says nothing until pinged); a peer that has sent nothing, not even a Pong, for three
/// times that is gone, and its socket is closed.
struct Keepalive {
    every: std::time::Duration,
    tick: tokio::time::Interval,
    last_sent: tokio::time::Instant,
    last_heard: tokio::time::Instant,
}

impl Keepalive {
    async fn start(every: std::time::Duration) -> Self {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let now = tokio::time::Instant::now();
        Keepalive { every, tick, last_sent: now, last_heard: now }
    }

    /// Pings a quiet peer; false when the peer is gone (its socket closed here).
    async fn on_tick(
        &mut self,
        session: &mut actix_ws::Session,
        id: &JobId,
        metrics: &yued_contract::metrics::Metrics,
    ) -> bool {
        if self.last_heard.elapsed() >= 3 * self.every {
            // A listener that stopped reading stops answering too: dropped, as one the hub
            // or a stalled write gives up on (a peer that closes its socket is not).
            metrics.ws_dropped_listeners_total.inc();
            tracing::info!(job = %id, "WebSocket peer stopped answering: closing");
            let reason = CloseReason { code: CloseCode::Away, description: Some("peer stopped answering".into()) };
            let _ = session.clone().close(Some(reason)).await;
            return false;
        }
        if self.last_sent.elapsed() >= self.every || self.last_heard.elapsed() >= self.every {
            if session.ping(b"yued").await.is_err() {
                return false;
            }
            self.last_sent = tokio::time::Instant::now();
        }
        true
    }
}

/// Sends one of the hub's items (`None`: the job's stream is over, and the socket is
/// closed with why); false when the listener is done with.
async fn send_item(
    st: &AppState,
    (session, peer): (&mut actix_ws::Session, Option<&crate::peer::Peer>),
    id: &JobId,
    item: Option<StreamItem>,
    ended: &mut bool,
) -> bool {
    match item {
        Some(StreamItem::Text(t)) => {
            *ended = StreamEvent::from_text(&t).map(|e| e.is_terminal()).unwrap_or(false);
            sent_in_time(st, id, peer, session.text(t)).await
        }
        Some(StreamItem::Binary(b)) => sent_in_time(st, id, peer, session.binary(b)).await,
        None => {
            let reason = if *ended {
                CloseReason { code: CloseCode::Normal, description: Some("job finished".into()) }
            } else {
                CloseReason { code: CloseCode::Policy, description: Some("listener fell too far behind".into()) }
            };
            let _ = session.clone().close(Some(reason)).await;
            false
        }
    }
}

/// What woke a listener's loop.
enum Event {
    Peer(Option<Result<actix_ws::AggregatedMessage, actix_ws::ProtocolError>>),
    Tick,
    Item(Option<StreamItem>),
    Stopping,
}

/// Pumps the hub's items for `id` into the socket until the terminal event, answering
/// pings and (when `can_cancel`) the cancel command, while the key that opened it stands (a
/// key revoked by a reload closes its sockets at their next item, command or keepalive tick).
#[allow(clippy::too_many_arguments)]
async fn follow(
    st: std::sync::Arc<AppState>,
    jobs: Jobs,
    (admitted, peer): (crate::auth::Admitted, Option<crate::peer::Peer>),
    mut session: actix_ws::Session,
    mut msgs: actix_ws::AggregatedMessageStream,
    id: JobId,
    codec: StreamCodec,
    can_cancel: bool,
) {
    let mut rx = match jobs.subscribe(&id, codec).await {
        Ok(Some(sub)) => sub,
        Ok(None) => {
            // The job has ended (the hub frees a stream at its end): its story is on disk.
            st.metrics.ws_listeners.inc();
            replay_ended(&st, &jobs, session, &id, codec).await;
            st.metrics.ws_listeners.dec();
            return;
        }
        Err(e) => {
            let _ =
                session.close(Some(CloseReason { code: CloseCode::Error, description: Some(truncate(&e.0)) })).await;
            return;
        }
    };
    st.metrics.ws_listeners.inc();
    let mut ended = false;
    let mut keepalive = Keepalive::start(st.ws_ping).await;
    // Once the job has ended, what this listener has not read is held for it alone (the
    // hub freed the job's history): it has three keepalive periods to drain, then it is
    // dropped and pointed at the result.
    let mut ended_at: Option<tokio::time::Instant> = None;
    let mut stopping = st.stopping.clone();
    loop {
        if ended_at.is_none() && rx.ended.load(std::sync::atomic::Ordering::Acquire) {
            ended_at = Some(tokio::time::Instant::now());
        }
        if ended_at.is_some_and(|t| t.elapsed() >= 3 * st.ws_ping) && !rx.is_empty() {
            st.metrics.ws_dropped_listeners_total.inc();
            tracing::warn!(job = %id, behind = rx.len(), "a WebSocket listener is still behind after the job ended: \
                dropped");
            let description =
                format!("listener fell too far behind; the job has ended: its result is at /job?id={id}&result=1");
            let _ = session.close(Some(CloseReason { code: CloseCode::Policy, description: Some(description) })).await;
            break;
        }
        let event = tokio::select! {
            // Biased: what the peer said first (its pongs must count before the keepalive
            // check, even while the tiles keep the other arms ready), then the keepalive,
            // then the next item.
            biased;
            m = msgs.next() => Event::Peer(m),
            _ = keepalive.tick.tick() => Event::Tick,
            Ok(_) = stopping.wait_for(|s| *s) => Event::Stopping,
            item = rx.recv() => Event::Item(item),
        };
        if !admitted.still() {
            tracing::info!(job = %id, "the WebSocket's API key was revoked: closing");
            let reason = CloseReason { code: CloseCode::Policy, description: Some("API key revoked".into()) };
            let _ = session.close(Some(reason)).await;
            break;
        }
        match event {
            Event::Peer(m) => {
                if matches!(m, Some(Ok(_))) {
                    keepalive.last_heard = tokio::time::Instant::now();
                }
                match m {
                    Some(Ok(actix_ws::AggregatedMessage::Ping(p))) => {
                        let _ = session.pong(&p).await;
                    }
                    Some(Ok(actix_ws::AggregatedMessage::Text(t))) if can_cancel => {
                        if let Ok(StreamCommand::Cancel) = StreamCommand::from_text(&t) {
                            let _ = jobs.cancel(&id).await;
                        }
                    }
                    Some(Ok(actix_ws::AggregatedMessage::Close(_))) | None => break,
                    Some(Err(e)) => {
                        let _ = session.close(Some(protocol_close(&e))).await;
                        break;
                    }
                    _ => {}
                }
            }
            Event::Tick => {
                if !keepalive.on_tick(&mut session, &id, &st.metrics).await {
                    break;
                }
            }
            Event::Stopping => {
                // A single node's job stays in its journal and resumes at the next start (a
                // client that reconnects hears it again from sample 0); a cluster's goes on
                // on its worker, which another API node streams.
                let description = "daemon stopping: reconnect (the job resumes or goes on)".to_string();
                let _ =
                    session.close(Some(CloseReason { code: CloseCode::Away, description: Some(description) })).await;
                break;
            }
            Event::Item(None) if rx.is_cut() => {
                let description = format!(
                    "kept audio unreadable (see the daemon's log); the result will be at /job?id={id}&result=1"
                );
                let _ =
                    session.close(Some(CloseReason { code: CloseCode::Error, description: Some(description) })).await;
                break;
            }
            Event::Item(item) => {
                if !send_item(&st, (&mut session, peer.as_ref()), &id, item, &mut ended).await {
                    break;
                }
                keepalive.last_sent = tokio::time::Instant::now();
            }
        }
    }
    st.metrics.ws_listeners.dec();
}
