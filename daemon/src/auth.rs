//! Who a request speaks for. With keys configured every route but the open ones (the WebUI
//! page and its assets, `/docs`, `/openapi.json`, `/health`, and the export links, whose
//! token is their capability) needs a key: 401 without a known one, 403 when its role does
//! not reach the route (`/logs` needs an admin key; `/metrics` an admin or a metrics key; a
//! metrics key reaches nothing else). Without any key the box is single-user: every caller
//! may see everything, and its address keeps the fair queue and `/jobs` apart.
//!
//! The keys are read from the flags and the keys file at start and again on SIGHUP, so a key
//! is added or revoked without a restart: a removed key's running jobs finish, its next
//! request is a 401.
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use yued_contract::tenancy::{KeyRef, KeyTable, Principal, Role, TicketScope};

/// Where the keys come from: what a reload reads again.
#[derive(Clone, Debug, Default)]
pub struct KeySource {
    /// User keys (`--api-key`, `api_keys`): keys-file lines.
    pub users: Vec<String>,
    /// Admin keys (`--admin-key`, `admin_keys`).
    pub admins: Vec<String>,
    /// `--api-keys-file`.
    pub file: Option<PathBuf>,
}

impl KeySource {
    /// The table these give now.
    pub fn load(&self) -> anyhow::Result<KeyTable> {
        let mut t = KeyTable::default();
        t.add_lines(&self.users.join("\n"), "--api-key")?;
        let admins: Vec<String> = self
            .admins
            .iter()
            .map(|k| if k.split_whitespace().any(|w| w == "admin") { k.clone() } else { format!("{k} admin") })
            .collect();
        t.add_lines(&admins.join("\n"), "--admin-key")?;
        if let Some(p) = &self.file {
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("reading the keys file {}: {e}", p.display()))?;
            t.add_lines(&text, &p.display().to_string())?;
        }
        for p in t.principals() {
            tracing::debug!(principal = %p.id, role = p.role.as_str(), "API key");
        }
        Ok(t)
    }
}

/// The keys, shared by the routes and replaced whole on a reload, with the stream tickets this
/// node has taken (each is taken once).
#[derive(Clone, Default)]
pub struct Keys {
    table: Arc<RwLock<KeyTable>>,
    /// The tickets taken here, until each expires.
    spent: Arc<Mutex<Spent>>,
    /// Whether the log has said that a key came in a URL (said once).
    warned_url_key: Arc<AtomicBool>,
}

/// The routes a stream ticket opens (a browser's WebSocket and EventSource, which cannot set a
/// header), and how long one is good for.
pub const TICKET_ROUTES: [&str; 3] = ["/stream", "/synth/stream", "/logs"];
pub const TICKET_SECONDS: u64 = 60;
/// The most tickets of one principal a node remembers as taken (a minute's worth at 68 a
/// second, far past what a page opens): past it, that principal's tickets are refused until
/// its oldest expire; the others' are not concerned.
const SPENT_PER_PRINCIPAL: usize = 4096;

/// The tickets a node has taken, by expiry (the oldest are dropped as time passes), each with
/// its principal, whose count is bounded.
#[derive(Default)]
struct Spent {
    by_expiry: std::collections::BTreeMap<(u64, [u8; 16]), String>,
    per_principal: HashMap<String, usize>,
}

impl Spent {
    /// Takes the ticket `(expires, nonce)` of `who` at `now`: `Err` when it was taken already
    /// or `who` has too many in flight.
    fn take(&mut self, who: &str, expires: u64, nonce: [u8; 16], now: u64) -> Result<(), String> {
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 >= now {
                break;
            }
            let gone = entry.remove();
            if let Some(n) = self.per_principal.get_mut(&gone) {
                *n -= 1;
                if *n == 0 {
                    self.per_principal.remove(&gone);
                }
            }
        }
        if self.by_expiry.contains_key(&(expires, nonce)) {
            return Err("the ticket was used already".into());
        }
        let n = self.per_principal.entry(who.to_string()).or_default();
        if *n >= SPENT_PER_PRINCIPAL {
            return Err("this key has too many tickets in flight; try again in a minute".into());
        }
        *n += 1;
        self.by_expiry.insert((expires, nonce), who.to_string());
        Ok(())
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Keys {
    pub fn new(t: KeyTable) -> Keys {
        Keys { table: Arc::new(RwLock::new(t)), ..Keys::default() }
    }

    /// Whether the box has no keys (single-user).
    pub fn is_open(&self) -> bool {
        self.table.read().expect("keys lock").is_empty()
    }

    fn lookup(&self, presented: &[String]) -> Option<(Principal, KeyRef)> {
        let t = self.table.read().expect("keys lock");
        // Every presented key is tried, so a stray header beside a good one does not lock a
        // client out; the first that matches speaks.
        let mut found = None;
        for k in presented {
            if let Some((p, key)) = t.lookup_key(k) {
                found.get_or_insert_with(|| (p.clone(), key));
            }
        }
        found
    }

    fn replace(&self, t: KeyTable) {
        *self.table.write().expect("keys lock") = t;
    }

    /// Whether the key a stream was opened with still admits it as `who` (its principal and
    /// role), or the box has no keys: what a long-lived stream asks as it goes, so a key revoked
    /// by a reload stops reaching what it had opened (the next request is a 401 anyway), even
    /// when its name stays under a new key (a rotation).
    pub fn still_admits(&self, who: &Principal, key: &KeyRef) -> bool {
        let t = self.table.read().expect("keys lock");
        t.is_empty() || t.holds(key, who)
    }

    /// A stream ticket for `scope`, signed with `key`: the ticket and its Unix expiry, or `None`
    /// when the key is gone.
    pub fn issue(&self, key: &KeyRef, scope: &TicketScope) -> Option<(String, u64)> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).ok()?;
        let expires = unix_now() + TICKET_SECONDS;
        let ticket = self.table.read().expect("keys lock").issue_ticket(key, scope, expires, nonce)?;
        Some((ticket, expires))
    }

    /// Takes a ticket presented for `scope`: once, before it expires, while its key stands.
    fn redeem(&self, ticket: &str, scope: &TicketScope) -> Result<(Principal, KeyRef), String> {
        let now = unix_now();
        let r = self.table.read().expect("keys lock").redeem_ticket(ticket, scope, now).map_err(|e| e.to_string())?;
        self.spent.lock().expect("tickets lock").take(&r.principal.id, r.expires, r.nonce, now)?;
        Ok((r.principal, r.key))
    }
}

/// Re-reads the keys on every SIGHUP; a file that cannot be read or parsed leaves the keys
/// as they were (and says why in the log).
pub fn reload_on_sighup(keys: Keys, source: KeySource) {
    actix_web::rt::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            tracing::warn!("SIGHUP cannot be caught here: the keys are only read at start");
            return;
        };
        while hup.recv().await.is_some() {
            match source.load() {
                Ok(t) => {
                    let (n, admins) = (t.len(), t.principals().filter(|p| p.is_admin()).count());
                    if t.is_empty() && !keys.is_open() {
                        tracing::error!(
                            "SIGHUP: the keys would all be gone, which would open the box to anyone; \
                            keeping the old keys"
                        );
                        continue;
                    }
                    keys.replace(t);
                    tracing::info!(keys = n, admins, "SIGHUP: API keys reloaded");
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: the keys were not reloaded (the old ones stay)"),
            }
        }
    });
}

/// A query parameter of `req`.
fn query_param(req: &HttpRequest, name: &str) -> Option<String> {
    web::Query::<HashMap<String, String>>::from_query(req.query_string()).ok().and_then(|q| q.get(name).cloned())
}

/// The API keys a request presents, in this order: `X-API-Key: K`, an `api_key` query
/// parameter (kept for scripts; a browser's stream takes a ticket instead, see
/// [`TICKET_ROUTES`]), `Authorization: Bearer K`.
pub fn presented_keys(req: &HttpRequest) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(v) = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()) {
        keys.push(v.trim().to_string());
    }
    if let Some(k) = query_param(req, "api_key") {
        keys.push(k);
    }
    if let Some(k) =
        req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|a| a.strip_prefix("Bearer "))
    {
        keys.push(k.trim().to_string());
    }
    keys
}

/// The principal the middleware admitted the request as. A request it admitted as nobody (an
/// open route on a box with keys) is a user of no jobs, never the single-user box's admin.
pub fn caller(req: &HttpRequest) -> Principal {
    if let Some(p) = req.extensions().get::<Principal>() {
        return p.clone();
    }
    match req.app_data::<web::Data<Keys>>() {
        Some(k) if !k.is_open() => Principal { id: "anonymous:".into(), role: Role::User },
        _ => address_principal(req),
    }
}

fn address_principal(req: &HttpRequest) -> Principal {
    Principal::open(&req.peer_addr().map(|a| a.ip().to_string()).unwrap_or_else(|| "unknown".into()))
}

/// Routes anyone may reach, keys or not.
fn open_route(path: &str) -> bool {
    matches!(path, "/" | "/health" | "/docs" | "/openapi.json")
        || path.starts_with("/assets/")
        || path.starts_with("/docs/")
        || path.starts_with("/links/")
}

/// A refusal in the route's own error shape (OpenAI's SDKs read theirs).
fn refuse(path: &str, status: StatusCode, msg: &str) -> HttpResponse {
    if path.starts_with("/v1/") {
        let code = if status == StatusCode::UNAUTHORIZED { "invalid_api_key" } else { "insufficient_permissions" };
        HttpResponse::build(status).json(serde_json::json!({"error": {"message": msg, "type": "invalid_request_error",
            "param": null, "code": code}}))
    } else if path == "/mcp" {
        // A JSON-RPC error: the MCP SDKs show only such a body's message to the agent host.
        HttpResponse::build(status)
            .json(serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": msg}}))
    } else {
        crate::reply::error(status, msg)
    }
}

/// Whose a session-like thing the caller opens is (an MCP session): its principal's id where
/// keys are configured; on a box without keys, everyone's ("").
pub fn owner(req: &HttpRequest) -> String {
    match req.app_data::<web::Data<Keys>>() {
        Some(k) if !k.is_open() => caller(req).id,
        _ => String::new(),
    }
}

/// How often a long-lived stream (`/logs`, a WebSocket) asks whether its key still stands.
pub const KEY_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// The key a long-lived stream was opened with (directly or through a ticket), asked again
/// as the stream goes on.
#[derive(Clone)]
pub struct Admitted {
    keys: Option<Keys>,
    who: Option<Principal>,
    key: Option<KeyRef>,
}

impl Admitted {
    /// What the middleware admitted `req` as (nothing to recheck on a box without keys).
    pub fn of(req: &HttpRequest) -> Admitted {
        let keys = req.app_data::<web::Data<Keys>>().map(|k| k.get_ref().clone());
        let ext = req.extensions();
        Admitted { keys, who: ext.get::<Principal>().cloned(), key: ext.get::<KeyRef>().cloned() }
    }

    /// Whether the stream may go on: the box has no keys, or the key it was opened with is
    /// still there (for the same principal).
    pub fn still(&self) -> bool {
        match (&self.keys, &self.who, &self.key) {
            (None, _, _) => true,
            (Some(k), Some(who), Some(key)) => k.still_admits(who, key),
            (Some(k), _, _) => k.is_open(),
        }
    }

    /// The key behind the request, where one admitted it (what a ticket is signed with).
    pub fn key(&self) -> Option<&KeyRef> {
        self.key.as_ref()
    }
}

/// A guarded handler's own check of its route's role, beside the middleware's: whatever path
/// reached the handler, the caller must hold a role that reaches `route` (`Some` is the refusal
/// to send). A server without keys (single-user, or the `--metrics-listen` port) passes.
pub fn refusal(req: &HttpRequest, route: &str) -> Option<HttpResponse> {
    let keys = req.app_data::<web::Data<Keys>>()?;
    if keys.is_open() {
        return None;
    }
    let ext = req.extensions();
    let Some(who) = ext.get::<Principal>() else {
        return Some(refuse(route, StatusCode::UNAUTHORIZED, "missing or unknown API key"));
    };
    forbidden(who, route).map(|why| refuse(route, StatusCode::FORBIDDEN, why))
}

/// What `who` may not reach: `Some(why)` for a 403.
fn forbidden(who: &Principal, path: &str) -> Option<&'static str> {
    match (who.role, path) {
        (Role::Admin, _) => None,
        (Role::Metrics, "/metrics") => None,
        (Role::Metrics, _) => Some("this key only scrapes /metrics"),
        (Role::User, "/metrics") => Some("/metrics needs an admin or a metrics key"),
        (Role::User, "/logs") => Some("/logs needs an admin key"),
        (Role::User, _) => None,
    }
}

/// Where the daemon listens, as the browser guard needs it: on a loopback address without keys,
/// only loopback names reach it (a page that rebinds its own DNS name to 127.0.0.1 would
/// otherwise read everything a box without keys holds).
#[derive(Clone, Debug, Default)]
pub struct Listening {
    pub loopback: bool,
    /// `--allowed-host`: names answered besides localhost and addresses.
    pub allowed: Vec<String>,
}

impl Listening {
    pub fn of(host: &str, allowed: &[String]) -> Listening {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        Listening { loopback, allowed: allowed.to_vec() }
    }

    /// Whether a `Host` (with or without its port) names this daemon: localhost, an address,
    /// or an allowed name.
    fn answers(&self, host: &str) -> bool {
        let name = match host.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => host,
        };
        let bare = name.trim_start_matches('[').trim_end_matches(']').to_lowercase();
        bare == "localhost"
            || bare.ends_with(".localhost")
            || bare.parse::<std::net::IpAddr>().is_ok()
            || self.allowed.contains(&bare)
    }
}

/// The `Host` a request names as its client sent it: never a forwarding header
/// (`X-Forwarded-Host`, `Forwarded`), which a page's own `fetch` may set.
fn sent_host(headers: &actix_web::http::header::HeaderMap) -> String {
    headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

/// Whether a browser's `Origin` is this daemon's own: the request's `Host`, or a name
/// `--allowed-host` gives (a proxy's public name, with any port).
fn own_origin(origin: &str, host: &str, listening: Option<&Listening>) -> bool {
    let Some((_, rest)) = origin.split_once("://") else { return false };
    let rest = rest.trim_end_matches('/');
    let name = match rest.rsplit_once(':') {
        Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
        _ => rest,
    };
    rest.eq_ignore_ascii_case(host) || listening.is_some_and(|l| l.allowed.contains(&name.to_lowercase()))
}

/// [`own_origin`] for a handler (the MCP transport's own check).
pub fn from_own_origin(req: &HttpRequest, origin: &str) -> bool {
    let listening = req.app_data::<web::Data<Listening>>().map(|l| l.get_ref());
    own_origin(origin, &sent_host(req.headers()), listening)
}

/// What a browser may not do on another site's behalf on a box without keys (with keys, a
/// browser holds no credential a page elsewhere could ride on): `Some(why)` for a 403. A request
/// that changes something (any method but GET and HEAD, and a WebSocket handshake) and carries
/// an `Origin` must come from this daemon's own origin (a page elsewhere could otherwise queue
/// and cancel songs, or listen to them); and on loopback the daemon answers only a loopback
/// `Host`, an address or an `--allowed-host` (DNS rebinding). Clients that are not browsers
/// send no `Origin` and are not concerned.
fn cross_site(req: &ServiceRequest, keyless: bool) -> Option<String> {
    let headers = req.headers();
    let host = sent_host(headers);
    let listening = req.app_data::<web::Data<Listening>>().map(|l| l.get_ref());
    let upgrade = headers.get(header::UPGRADE).is_some();
    let changes = !matches!(*req.method(), actix_web::http::Method::GET | actix_web::http::Method::HEAD);
    if keyless && (changes || upgrade) {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !own_origin(origin, &host, listening) {
                return Some(format!("a request from the page at '{origin}' (not this daemon's origin) is refused"));
            }
        }
    }
    let listening = listening?;
    if keyless && listening.loopback && !listening.answers(&host) {
        return Some(format!(
            "Host '{host}' is not this daemon's address (it listens on loopback without API keys: reach it \
            as localhost or by address, or name a proxy's host with --allowed-host)"
        ));
    }
    None
}

/// The middleware: admits the request as a principal (stored in its extensions) or refuses it.
/// Counts every answer by its route pattern and status, and times it to its head (a key's
/// 401s and 403s included: this wraps the key check).
pub async fn count_answers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let metrics = req
        .app_data::<web::Data<crate::state::AppState>>()
        .map(|s| (s.metrics.http_requests_total.clone(), s.metrics.http_request_seconds.clone()));
    let asked = std::time::Instant::now();
    let res = next.call(req).await;
    if let Some((answers, took)) = metrics {
        let (route, status) = match &res {
            Ok(r) => (r.request().match_pattern(), r.status()),
            Err(e) => (None, e.as_response_error().status_code()),
        };
        let route = route.as_deref().unwrap_or("unmatched");
        answers.with_label_values(&[route, status.as_str()]).inc();
        took.with_label_values(&[route]).observe(asked.elapsed().as_secs_f64());
    }
    res
}

/// Who a request on a box with keys speaks for: the first key it presents that is configured,
/// else the stream ticket in its query (`?ticket=`, on a ticket route's GET); `Err` says why not.
fn admit(keys: &Keys, req: &ServiceRequest, path: &str) -> Result<(Principal, KeyRef), String> {
    if let Some(found) = keys.lookup(&presented_keys(req.request())) {
        if query_param(req.request(), "api_key").is_some() && !keys.warned_url_key.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                principal = %found.0.id,
                "an API key came in a URL (?api_key=): URLs end up in proxy logs and browser history; a \
                browser's stream can take a ticket instead (POST /tickets). Said once."
            );
        }
        return Ok(found);
    }
    let Some(ticket) = query_param(req.request(), "ticket") else {
        return Err("missing or unknown API key (Authorization: Bearer KEY or X-API-Key)".into());
    };
    if *req.method() != actix_web::http::Method::GET || !TICKET_ROUTES.contains(&path) {
        return Err(format!("a ticket opens only a GET of {} (send the API key here)", TICKET_ROUTES.join(", ")));
    }
    let job = if path == "/stream" { query_param(req.request(), "id").unwrap_or_default() } else { String::new() };
    keys.redeem(&ticket, &TicketScope { path, job: &job })
        .map_err(|e| format!("ticket: {e} (POST /tickets gives a new one)"))
}

pub async fn require_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let Some(keys) = req.app_data::<web::Data<Keys>>().cloned() else {
        return next.call(req).await.map(|r| r.map_into_left_body());
    };
    if let Some(why) = cross_site(&req, keys.is_open()) {
        let path = req.match_info().as_str().to_string();
        return Ok(req.into_response(refuse(&path, StatusCode::FORBIDDEN, &why)).map_into_right_body());
    }
    // The path as the router reads it (percent-escapes decoded): `/%6Cogs` is `/logs` to it, so it
    // must be `/logs` here too.
    let path = req.match_info().as_str().to_string();
    if keys.is_open() {
        let who = address_principal(req.request());
        req.extensions_mut().insert(who);
    } else if !open_route(&path) {
        let (who, key) = match admit(&keys, &req, &path) {
            Ok(found) => found,
            Err(why) => {
                let resp = refuse(&path, StatusCode::UNAUTHORIZED, &why);
                return Ok(req.into_response(resp).map_into_right_body());
            }
        };
        if let Some(why) = forbidden(&who, &path) {
            return Ok(req.into_response(refuse(&path, StatusCode::FORBIDDEN, why)).map_into_right_body());
        }
        req.extensions_mut().insert(who);
        req.extensions_mut().insert(key);
    }
    next.call(req).await.map(|r| r.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_elsewhere_cannot_ride_on_a_box_without_keys() {
        use actix_web::test::TestRequest;
        let on = |host: &str| web::Data::new(Listening::of(host, &["music.lan".to_string()]));
        let req = |listen: &str, method: actix_web::http::Method, headers: &[(&str, &str)]| {
            let mut r = TestRequest::default().method(method).app_data(on(listen));
            for (k, v) in headers {
                r = r.insert_header((*k, *v));
            }
            r.to_srv_request()
        };
        use actix_web::http::Method;
        let host = ("host", "127.0.0.1:8087");
        // A POST from another page is refused; from the daemon's own page, or from no page, taken.
        let evil = req("127.0.0.1", Method::POST, &[host, ("origin", "http://evil.example")]);
        assert!(cross_site(&evil, true).unwrap().contains("evil.example"));
        assert!(cross_site(&evil, false).is_none(), "with keys a page holds no credential");
        assert!(cross_site(&req("127.0.0.1", Method::POST, &[host, ("origin", "null")]), true).is_some());
        assert!(
            cross_site(&req("127.0.0.1", Method::POST, &[host, ("origin", "http://127.0.0.1:8087")]), true).is_none()
        );
        assert!(cross_site(&req("127.0.0.1", Method::POST, &[host]), true).is_none());
        // A WebSocket handshake is a GET that needs the same check; a plain GET does not.
        let ws = req("127.0.0.1", Method::GET, &[host, ("origin", "http://evil.example"), ("upgrade", "websocket")]);
        assert!(cross_site(&ws, true).is_some());
        assert!(cross_site(&req("127.0.0.1", Method::GET, &[host, ("origin", "http://evil.example")]), true).is_none());
        // DNS rebinding: on loopback without keys, a name that is not localhost, an address or
        // allowed is refused; bound elsewhere, or with keys, any name is taken.
        let rebound = [("host", "evil.example:8087")];
        assert!(cross_site(&req("127.0.0.1", Method::GET, &rebound), true).unwrap().contains("evil.example"));
        // A forwarding header is the client's word, as any page's fetch may set it.
        for fwd in [("x-forwarded-host", "localhost:8087"), ("forwarded", "host=localhost")] {
            assert!(cross_site(&req("127.0.0.1", Method::GET, &[rebound[0], fwd]), true).is_some(), "{fwd:?}");
        }
        let forged = [host, ("x-forwarded-host", "evil.example"), ("origin", "http://evil.example")];
        assert!(cross_site(&req("127.0.0.1", Method::POST, &forged), true).is_some());
        // Behind a proxy: its public name, given with --allowed-host, is an own origin.
        let proxied = [host, ("origin", "https://music.lan")];
        assert!(cross_site(&req("127.0.0.1", Method::POST, &proxied), true).is_none());
        assert!(
            cross_site(&req("127.0.0.1", Method::POST, &[host, ("origin", "http://10.0.0.9:8087")]), true).is_some()
        );
        assert!(cross_site(&req("0.0.0.0", Method::GET, &rebound), true).is_none());
        assert!(cross_site(&req("127.0.0.1", Method::GET, &rebound), false).is_none());
        for ok in ["localhost:8087", "app.localhost", "[::1]:8087", "10.0.0.5:8087", "MUSIC.lan:443", "music.lan"] {
            assert!(cross_site(&req("::1", Method::GET, &[("host", ok)]), true).is_none(), "{ok}");
        }
    }

    #[test]
    fn a_ticket_is_taken_once_and_one_principal_cannot_fill_the_node() {
        let mut spent = Spent::default();
        spent.take("alice", 100, [1; 16], 50).unwrap();
        assert!(spent.take("alice", 100, [1; 16], 60).unwrap_err().contains("used already"));
        for i in 1..SPENT_PER_PRINCIPAL {
            spent
                .take("bob", 100, [(i % 256) as u8, (i / 256) as u8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 60)
                .unwrap();
        }
        spent.take("bob", 100, [9; 16], 60).unwrap();
        assert!(spent.take("bob", 100, [8; 16], 60).unwrap_err().contains("too many"));
        spent.take("alice", 100, [7; 16], 60).unwrap();
        // Past their expiry they are dropped, with their counts.
        spent.take("bob", 200, [8; 16], 101).unwrap();
        assert_eq!(spent.by_expiry.len(), 1);
        assert_eq!(spent.per_principal.get("bob"), Some(&1));
        assert!(!spent.per_principal.contains_key("alice"));
    }

    #[test]
    fn roles_reach_their_routes() {
        let p = |role| Principal { id: "x".into(), role };
        for path in ["/logs", "/metrics", "/job", "/jobs"] {
            assert_eq!(forbidden(&p(Role::Admin), path), None, "{path}");
        }
        assert!(forbidden(&p(Role::User), "/logs").is_some());
        assert!(forbidden(&p(Role::User), "/metrics").is_some());
        assert_eq!(forbidden(&p(Role::User), "/synth"), None);
        assert_eq!(forbidden(&p(Role::Metrics), "/metrics"), None);
        assert!(forbidden(&p(Role::Metrics), "/synth").is_some());
        assert!(open_route("/links/abc") && open_route("/health") && !open_route("/status") && !open_route("/logs"));
    }

    #[test]
    fn flags_and_file_make_one_table() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("keys");
        std::fs::write(&f, "fileKey1 name=carol\n").unwrap();
        let src = KeySource {
            users: vec!["userKey1".into()],
            admins: vec!["adminKey1 name=ops".into()],
            file: Some(f.clone()),
        };
        let t = src.load().unwrap();
        assert_eq!(t.lookup("adminKey1").unwrap(), &Principal { id: "ops".into(), role: Role::Admin });
        assert_eq!(t.lookup("fileKey1").unwrap().id, "carol");
        assert_eq!(t.lookup("userKey1").unwrap().role, Role::User);
        std::fs::write(&f, "fileKey1 name=carol\nfileKey1\n").unwrap();
        let e = src.load().unwrap_err().to_string();
        assert!(e.contains("line 2") && !e.contains("fileKey1"), "{e}");
    }
}
