//! Serving-overhead measurements against a running daemon: an open-loop HTTP load (a fixed
//! request rate; latency from the moment each request is sent, and also from its scheduled
//! time, so a stalled server cannot hide its queueing) and a WebSocket fan-out (N listeners
//! on one job, every tile counted). Used by `yue load` and `yue fanout`.
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What an HTTP load run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    pub requests: usize,
    pub seconds: f64,
    pub achieved_rps: f64,
    /// Latency from the moment a request was sent to its whole response.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Latency from the request's scheduled time: adds the generator's own lateness (tokio's
    /// timer wakes up to a millisecond late) and any backlog of requests waiting for a free
    /// connection, which is where a server that stalls shows.
    pub p50_from_schedule_ms: f64,
    pub p99_from_schedule_ms: f64,
    /// Responses by status code (0: a transport error).
    pub statuses: BTreeMap<u16, usize>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let k = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

/// Sends `rps` requests per second for `seconds` over at most `connections` in flight:
/// GET `url`, or POST `body` as JSON when given.
pub async fn http_load(
    url: &str,
    body: Option<String>,
    api_key: Option<String>,
    rps: u32,
    seconds: f64,
    connections: usize,
) -> anyhow::Result<LoadReport> {
    let client =
        reqwest::Client::builder().pool_max_idle_per_host(connections).timeout(Duration::from_secs(30)).build()?;
    let total = ((rps as f64) * seconds).round().max(1.0) as usize;
    let interval = Duration::from_secs_f64(1.0 / rps.max(1) as f64);
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(connections.max(1)));
    // The schedule is kept by a plain thread (`thread::sleep` wakes within ~0.1 ms; tokio's
    // timer rounds up to the next millisecond, which read as server latency), which hands
    // each request to the runtime when it is due.
    let handle = tokio::runtime::Handle::current();
    let url = url.to_string();
    let t0 = Instant::now();
    let dispatch = move || -> anyhow::Result<Vec<tokio::task::JoinHandle<(f64, f64, u16)>>> {
        let mut tasks = Vec::with_capacity(total);
        for i in 0..total {
            let due = t0 + interval * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let permit = handle.block_on(sem.clone().acquire_owned())?;
            let (client, url, body, key) = (client.clone(), url.clone(), body.clone(), api_key.clone());
            tasks.push(handle.spawn(async move {
                let mut rq = match body {
                    Some(b) => client.post(&url).header("content-type", "application/json").body(b),
                    None => client.get(&url),
                };
                if let Some(k) = key {
                    rq = rq.header("x-api-key", k);
                }
                let sent = Instant::now();
                let status = match rq.send().await {
                    Ok(r) => {
                        let s = r.status().as_u16();
                        let _ = r.bytes().await;
                        s
                    }
                    Err(_) => 0,
                };
                drop(permit);
                (sent.elapsed().as_secs_f64() * 1e3, due.elapsed().as_secs_f64() * 1e3, status)
            }));
        }
        Ok(tasks)
    };
    let tasks = tokio::task::spawn_blocking(dispatch).await??;
    let mut lat = Vec::with_capacity(total);
    let mut sched = Vec::with_capacity(total);
    let mut statuses = BTreeMap::new();
    for t in tasks {
        let (ms, from_due, s) = t.await?;
        lat.push(ms);
        sched.push(from_due);
        *statuses.entry(s).or_insert(0) += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    sched.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(LoadReport {
        requests: total,
        seconds: secs,
        achieved_rps: total as f64 / secs,
        p50_ms: percentile(&lat, 50.0),
        p90_ms: percentile(&lat, 90.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: *lat.last().unwrap_or(&0.0),
        p50_from_schedule_ms: percentile(&sched, 50.0),
        p99_from_schedule_ms: percentile(&sched, 99.0),
        statuses,
    })
}

/// What a WebSocket fan-out measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FanoutReport {
    pub listeners: usize,
    /// Audio frames (tiles) each listener received, fewest and most.
    pub tiles_min: usize,
    pub tiles_max: usize,
    /// Listeners that saw the job's end (`done`, `failed` or `cancelled`).
    pub completed: usize,
    /// Listeners that did not see the end: closed early by the daemon (a slow consumer), or
    /// whose socket failed (each failure is printed to stderr).
    pub dropped: usize,
    pub bytes: u64,
    pub seconds: f64,
}

/// Opens `listeners` WebSockets on `/stream?id=ID&format=pcm16` and reads them to the end.
pub async fn ws_fanout(
    ws_base: &str,
    id: &str,
    api_key: Option<String>,
    listeners: usize,
) -> anyhow::Result<FanoutReport> {
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(listeners);
    for _ in 0..listeners {
        let url = format!("{}/stream?id={id}&format=pcm16", ws_base.trim_end_matches('/'));
        let api_key = api_key.clone();
        tasks.push(tokio::spawn(async move {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            // The key in a header, never in the URL.
            let mut request = url.into_client_request()?;
            if let Some(k) = &api_key {
                request.headers_mut().insert("x-api-key", k.parse()?);
            }
            let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
            let (mut tiles, mut bytes, mut completed) = (0usize, 0u64, false);
            while let Some(m) = ws.next().await {
                match m? {
                    tokio_tungstenite::tungstenite::Message::Binary(b) => {
                        tiles += 1;
                        bytes += b.len() as u64;
                    }
                    tokio_tungstenite::tungstenite::Message::Text(t)
                        if t.contains("\"event\":\"done\"")
                            || t.contains("\"event\":\"failed\"")
                            || t.contains("\"event\":\"cancelled\"") =>
                    {
                        completed = true;
                        break;
                    }
                    tokio_tungstenite::tungstenite::Message::Close(_) => break,
                    _ => {}
                }
            }
            anyhow::Ok((tiles, bytes, completed))
        }));
    }
    let (mut tiles_min, mut tiles_max, mut completed, mut bytes) = (usize::MAX, 0, 0, 0u64);
    for t in tasks {
        // A listener that could not connect, or whose socket broke, is one the report counts
        // as dropped (with no tiles); the others' figures still come.
        let (tiles, b, done) = match t.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                eprintln!("a listener failed: {e}");
                (0, 0, false)
            }
            Err(e) => {
                eprintln!("a listener's task failed: {e}");
                (0, 0, false)
            }
        };
        tiles_min = tiles_min.min(tiles);
        tiles_max = tiles_max.max(tiles);
        completed += done as usize;
        bytes += b;
    }
    Ok(FanoutReport {
        listeners,
        tiles_min: if listeners == 0 { 0 } else { tiles_min },
        tiles_max,
        completed,
        dropped: listeners - completed,
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
