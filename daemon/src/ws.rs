//! WebSocket streaming (actix-ws): `GET /stream?id=N` follows a job, `GET /synth/stream`
//! takes the request as its first text message and follows the job it creates. Text
//! frames carry the JSON events, binary frames the audio: Ogg Opus pages by default (the
//! concatenation of the binary frames is a playable .opus file), or `?format=pcm16`
//! (interleaved s16le, one frame per tile). Closing the socket never cancels the job; on
//! `/synth/stream` an explicit `{"cmd":"cancel"}` does.
// Handlers return ready HTTP responses as their error values on purpose.
#![allow(clippy::result_large_err)]
use crate::http::{check_request, client_key, error, job_id, submit, AppState};
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason};
use futures_util::StreamExt;
use yued_actors::hub::{StreamItem, Subscribe};
use yued_actors::scheduler::{Cancel, GetState};
use yued_protocol::{JobId, StreamCodec, StreamCommand, StreamEvent};

#[derive(serde::Deserialize)]
pub struct StreamQuery {
    id: Option<String>,
    format: Option<String>,
}

fn codec(q: &Option<String>) -> Result<StreamCodec, HttpResponse> {
    match q.as_deref() {
        None | Some("opus") => Ok(StreamCodec::Opus),
        Some("pcm16") => Ok(StreamCodec::Pcm16),
        Some(other) => Err(error(actix_web::http::StatusCode::BAD_REQUEST, format!("format: unknown stream format '{other}' (opus or pcm16)"))),
    }
}

pub async fn stream(req: HttpRequest, body: web::Payload, q: web::Query<StreamQuery>, st: web::Data<AppState>) -> Result<HttpResponse, actix_web::Error> {
    let id = match job_id(&q.id) {
        Ok(id) => id,
        Err(r) => return Ok(r),
    };
    let codec = match codec(&q.format) {
        Ok(c) => c,
        Err(r) => return Ok(r),
    };
    if st.scheduler.send(GetState(id.clone())).await.ok().flatten().is_none() {
        return Ok(error(actix_web::http::StatusCode::NOT_FOUND, format!("unknown job {id}")));
    }
    let (resp, session, msgs) = actix_ws::handle(&req, body)?;
    let msgs = msgs.aggregate_continuations();
    let st = st.into_inner();
    actix_web::rt::spawn(async move {
        follow(st, session, msgs, id, codec, false).await;
    });
    Ok(resp)
}

pub async fn synth_stream(req: HttpRequest, body: web::Payload, q: web::Query<StreamQuery>, st: web::Data<AppState>) -> Result<HttpResponse, actix_web::Error> {
    let codec = match codec(&q.format) {
        Ok(c) => c,
        Err(r) => return Ok(r),
    };
    let client = client_key(&req);
    let (resp, mut session, msgs) = actix_ws::handle(&req, body)?;
    let mut msgs = msgs.max_frame_size(st.max_body_bytes).aggregate_continuations();
    let st = st.into_inner();
    actix_web::rt::spawn(async move {
        // The first text message is the request.
        let first = loop {
            match msgs.next().await {
                Some(Ok(actix_ws::AggregatedMessage::Text(t))) => break t,
                Some(Ok(actix_ws::AggregatedMessage::Ping(p))) => {
                    let _ = session.pong(&p).await;
                }
                Some(Ok(_)) => continue,
                _ => return,
            }
        };
        let request = match check_request(first.as_bytes(), &st) {
            Ok(r) => r,
            Err(msg) => {
                let _ = session.text(StreamEvent::Failed { error: msg.clone() }.to_text()).await;
                let _ = session.close(Some(CloseReason { code: CloseCode::Policy, description: Some(truncate(&msg)) })).await;
                return;
            }
        };
        let id = match submit(&st, client, request, None).await {
            Ok(id) => id,
            Err(resp) => {
                let msg = format!("submission refused ({})", resp.status());
                let _ = session.text(StreamEvent::Failed { error: msg.clone() }.to_text()).await;
                let _ = session.close(Some(CloseReason { code: CloseCode::Again, description: Some(msg) })).await;
                return;
            }
        };
        let _ = session.text(serde_json::json!({"event": "job", "id": id}).to_string()).await;
        follow(st, session, msgs, id, codec, true).await;
    });
    Ok(resp)
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

/// Pumps the hub's items for `id` into the socket until the terminal event, answering
/// pings and (when `can_cancel`) the cancel command.
async fn follow(st: std::sync::Arc<AppState>, mut session: actix_ws::Session, mut msgs: actix_ws::AggregatedMessageStream, id: JobId, codec: StreamCodec, can_cancel: bool) {
    let Ok(Some(mut rx)) = st.hub.send(Subscribe { job: id.clone(), codec }).await else {
        let _ = session.close(Some(CloseReason { code: CloseCode::Error, description: Some("stream hub unavailable".into()) })).await;
        return;
    };
    st.metrics.ws_listeners.inc();
    let mut ended = false;
    loop {
        tokio::select! {
            item = rx.recv() => match item {
                Some(StreamItem::Text(t)) => {
                    ended = StreamEvent::from_text(&t).map(|e| e.is_terminal()).unwrap_or(false);
                    if session.text(t).await.is_err() { break; }
                }
                Some(StreamItem::Binary(b)) => {
                    if session.binary(b).await.is_err() { break; }
                }
                None => {
                    let reason = if ended {
                        CloseReason { code: CloseCode::Normal, description: Some("job finished".into()) }
                    } else {
                        CloseReason { code: CloseCode::Policy, description: Some("listener fell too far behind".into()) }
                    };
                    let _ = session.close(Some(reason)).await;
                    break;
                }
            },
            m = msgs.next() => match m {
                Some(Ok(actix_ws::AggregatedMessage::Ping(p))) => { let _ = session.pong(&p).await; }
                Some(Ok(actix_ws::AggregatedMessage::Text(t))) if can_cancel => {
                    if let Ok(StreamCommand::Cancel) = StreamCommand::from_text(&t) {
                        let _ = st.scheduler.send(Cancel(id.clone())).await;
                    }
                }
                Some(Ok(actix_ws::AggregatedMessage::Close(_))) | None | Some(Err(_)) => break,
                _ => {}
            }
        }
    }
    st.metrics.ws_listeners.dec();
}
