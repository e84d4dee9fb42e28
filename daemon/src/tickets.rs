//! `POST /tickets`: a stream ticket for a browser. A WebSocket or an EventSource cannot set a
//! header, so a page that holds an API key would otherwise put the key in the stream's URL,
//! where a proxy's access log and the browser's history keep it. The page asks for a ticket
//! with its key in a header and opens the stream with `?ticket=` instead: the ticket opens one
//! route (and on `/stream` one job) once, within a minute, and says nothing of the key.
use crate::auth::{Admitted, Keys, TICKET_ROUTES, TICKET_SECONDS};
use crate::reply::error;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use yued_contract::tenancy::TicketScope;
use yued_protocol::JobId;

/// A ticket: add `ticket=<ticket>` to the route's query (with the same `id` on `/stream`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct TicketReply {
    pub ticket: String,
    /// Seconds the ticket is good for; it is taken once.
    pub expires_in: u64,
    /// When it expires (Unix seconds).
    pub expires_at: u64,
}

/// What a ticket is asked for: `{"path": ROUTE}`, and on `/stream` the job's `"id"` (the
/// body's schema is in the OpenAPI document, by route).
fn asked(body: &[u8]) -> Result<(String, String), String> {
    use serde_json::Value;
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let o = v.as_object().ok_or("the body is not a JSON object ({\"path\": \"/stream\", \"id\": ...})")?;
    if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "path" | "id")) {
        return Err(format!("{k}: unknown field (a ticket request has path and id)"));
    }
    let path = match o.get("path") {
        Some(Value::String(p)) if TICKET_ROUTES.contains(&p.as_str()) => p.clone(),
        Some(Value::String(p)) => {
            return Err(format!("path: '{p}' takes no ticket (one of {})", TICKET_ROUTES.join(", ")))
        }
        Some(_) => return Err("path: must be a string".into()),
        None => return Err("path: missing".into()),
    };
    let job = match (path.as_str(), o.get("id")) {
        ("/stream", Some(Value::String(id))) => JobId::parse(id).map(|_| id.clone()).map_err(|e| format!("id: {e}"))?,
        ("/stream", Some(_)) => return Err("id: must be a string".into()),
        ("/stream", None) => return Err("id: missing (a /stream ticket listens to one job)".into()),
        (p, Some(_)) => return Err(format!("id: {p} names no job")),
        (_, None) => String::new(),
    };
    Ok((path, job))
}

pub async fn post(req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, msg);
    let Some(keys) = req.app_data::<web::Data<Keys>>().filter(|k| !k.is_open()) else {
        return bad("this daemon has no API keys: its streams need no ticket".into());
    };
    let (path, job) = match asked(&body) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    // Refused now rather than at the stream: a user key's ticket to the log.
    if let Some(refused) = crate::auth::refusal(&req, &path) {
        return refused;
    }
    let admitted = Admitted::of(&req);
    let issued = admitted.key().and_then(|key| keys.issue(key, &TicketScope { path: &path, job: &job }));
    match issued {
        Some((ticket, expires_at)) => {
            HttpResponse::Ok().json(TicketReply { ticket, expires_in: TICKET_SECONDS, expires_at })
        }
        None => error(StatusCode::UNAUTHORIZED, "the key this request came with is no longer configured"),
    }
}
