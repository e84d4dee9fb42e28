//! Tenancy on the real daemon: two user keys, an admin key and a metrics key from a keys
//! file. Every route that names a job answers another principal exactly as it answers an
//! unknown id; admins reach everything; the share of the admission cap keeps one client
//! from locking the others out; a SIGHUP revokes and adds keys; and after the run no raw
//! key is in the data directory or the daemon's log.
use std::io::Read;
use std::time::{Duration, Instant};
use yued_e2e::{files_containing, song, Daemon};

const A: &str = "alice-secret-7f3a9c1e5b";
const B: &str = "bob-secret-2d8e4a6c0f";
const OPS: &str = "ops-secret-9b1d3f5a7c";
const PROM: &str = "prom-secret-4c6e8a0b2d";
const CAROL: &str = "carol-secret-1a3c5e7b9d";
const OPS2: &str = "ops2-secret-5e7a9c1d3b";
/// Bob's key after a rotation (the same name).
const B2: &str = "bob-rotated-8f0b2d4e6a";
const UNKNOWN: &str = "0123456789abcdef";

fn get(d: &Daemon, path: &str, key: &str) -> reqwest::blocking::Response {
    d.http.get(d.url(path)).header("x-api-key", key).send().unwrap()
}

fn post(d: &Daemon, path: &str, key: &str, body: &str) -> reqwest::blocking::Response {
    d.http
        .post(d.url(path))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
}

/// The status and body of an answer about `id`, with `id` spelled as the unknown id: two
/// answers that are equal this way tell the caller nothing about whether `id` exists.
fn as_unknown(r: reqwest::blocking::Response, id: &str) -> (u16, String) {
    (r.status().as_u16(), r.text().unwrap().replace(id, UNKNOWN))
}

fn submit(d: &Daemon, key: &str, body: &str) -> String {
    let r = post(d, "/synth", key, body);
    assert_eq!(r.status(), 200);
    r.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_string()
}

fn wait(d: &Daemon, id: &str, key: &str, want: &str) {
    let t0 = Instant::now();
    loop {
        let s: serde_json::Value = get(d, &format!("/job?id={id}"), key).json().unwrap();
        if s["status"] == want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(180), "job {id}: {s}, waiting for {want}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A new MCP session of `key`'s: its id.
fn mcp_session(d: &Daemon, key: &str) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = post(d, "/mcp", key, &init.to_string());
    assert_eq!(r.status(), 200);
    r.headers()["mcp-session-id"].to_str().unwrap().to_string()
}

/// One JSON-RPC message to the MCP endpoint in `session`, as `key`.
fn mcp_send(d: &Daemon, key: &str, session: &str, msg: serde_json::Value) -> reqwest::blocking::Response {
    d.http
        .post(d.url("/mcp"))
        .header("x-api-key", key)
        .header("mcp-session-id", session)
        .header("content-type", "application/json")
        .body(msg.to_string())
        .send()
        .unwrap()
}

/// One MCP tool call in a fresh session.
fn mcp_call(d: &Daemon, key: &str, tool: &str, job: &str) -> String {
    let session = mcp_session(d, key);
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool,
        "arguments": {"job_id": job}}});
    let r = mcp_send(d, key, &session, call);
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().unwrap();
    // The whole answer (a tool error is a result with isError; a protocol error an error).
    format!("{}{}", v["result"], v["error"])
}

#[test]
fn no_principal_reaches_anothers_jobs_or_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(
        &keys,
        format!(
            "# the box's keys\n{A} name=alice\n{B}\n{OPS} name=ops admin\n{PROM} name=prom metrics\n{OPS2} admin\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut d = Daemon::start(&data, &["--api-keys-file", keys.to_str().unwrap(), "--admission-cap", "6"]);
    d.key = Some(OPS.into());

    // Alice: a short song that finishes, a long one that keeps running, and one through
    // the OpenAI door's async ids.
    let done = submit(&d, A, &song(1.0, 1));
    wait(&d, &done, A, "done");
    let oa = post(
        &d,
        "/v1/audio/music",
        A,
        r#"{"async": true, "style": "x", "lyrics": "[verse] la", "cot": "off", "duration": 1, "steps": 1}"#,
    );
    assert_eq!(oa.status(), 200);
    let oa: serde_json::Value = oa.json().unwrap();
    let oa = oa["id"].as_str().unwrap().to_string();
    wait(&d, &oa, A, "done");
    let long = submit(&d, A, &song(30.0, 8));

    // Bob, on every route that names a job: the answer an unknown id gets.
    let mut tried = 0;
    for id in [&done, &long, &oa] {
        for path in [format!("/job?id={id}"), format!("/job?id={id}&result=1"), format!("/stream?id={id}")] {
            let theirs = as_unknown(get(&d, &path, B), id);
            let none = as_unknown(get(&d, &path.replace(id.as_str(), UNKNOWN), B), UNKNOWN);
            assert_eq!(theirs.0, 404, "{path}: {theirs:?}");
            assert_eq!(theirs, none, "{path}");
            tried += 1;
        }
        let theirs = as_unknown(post(&d, &format!("/job?id={id}&cancel=1"), B, ""), id);
        assert_eq!(theirs, as_unknown(post(&d, &format!("/job?id={UNKNOWN}&cancel=1"), B, ""), UNKNOWN), "cancel {id}");
        assert_eq!(theirs.0, 404);
        for tool in ["song_status", "song_result", "cancel_song"] {
            let theirs = mcp_call(&d, B, tool, id).replace(id.as_str(), UNKNOWN);
            assert_eq!(theirs, mcp_call(&d, B, tool, UNKNOWN), "{tool} {id}");
            assert!(theirs.contains("unknown job"), "{tool}: {theirs}");
            tried += 1;
        }
        tried += 1;
    }
    // An MCP session is its opener's: another key can neither use nor end it.
    let bobs_session = mcp_session(&d, B);
    let ping = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(mcp_send(&d, A, &bobs_session, ping.clone()).status(), 404);
    let del = |key: &str| {
        d.http.delete(d.url("/mcp")).header("x-api-key", key).header("mcp-session-id", &bobs_session).send().unwrap()
    };
    assert_eq!(del(A).status(), 404);
    assert_eq!(mcp_send(&d, B, &bobs_session, ping).status(), 200, "Alice's tries did not end Bob's session");
    assert_eq!(del(B).status(), 204);
    tried += 2;

    // Alice reaches her own; the WebSocket route gets past the ownership check to the
    // handshake (this GET is not one).
    assert_eq!(get(&d, &format!("/job?id={done}&result=1"), A).status(), 200);
    assert_eq!(get(&d, &format!("/stream?id={done}"), A).status(), 400);
    assert!(mcp_call(&d, A, "song_status", &done).contains("done"));
    let mine: serde_json::Value = get(&d, "/jobs", B).json().unwrap();
    assert_eq!(mine["jobs"].as_array().unwrap().len(), 0, "{mine}");
    // Bob's cancels did nothing.
    assert_ne!(get(&d, &format!("/job?id={long}"), A).json::<serde_json::Value>().unwrap()["status"], "cancelled");

    // Admin-only routes.
    assert_eq!(get(&d, "/jobs?all=1", B).status(), 403);
    assert_eq!(get(&d, "/logs", B).status(), 403);
    assert_eq!(get(&d, "/metrics", B).status(), 403);
    assert_eq!(get(&d, "/metrics", PROM).status(), 200);
    assert_eq!(get(&d, "/jobs", PROM).status(), 403, "a metrics key only scrapes");
    assert_eq!(get(&d, "/metrics", "nope").status(), 401);
    // However the path is spelled: the router decodes percent-escapes, and so does the check.
    for path in ["/%6Cogs", "/%6c%6f%67%73", "/l%6Fgs?x=1", "/%6Detrics"] {
        assert_eq!(get(&d, path, B).status(), 403, "{path}");
    }
    assert_eq!(get(&d, "/%6Aobs", PROM).status(), 403, "a metrics key only scrapes, however spelled");
    assert_eq!(get(&d, "/%6Detrics", PROM).status(), 200);
    tried += 5;
    let all: serde_json::Value = get(&d, "/jobs?all=1", OPS).json().unwrap();
    let owners: Vec<&str> = all["jobs"].as_array().unwrap().iter().map(|j| j["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, vec!["alice"; 3], "{all}");
    assert_eq!(get(&d, &format!("/job?id={done}&result=1"), OPS).status(), 200, "an admin reaches any job");
    tried += 6;

    // Liveness only in the open; the queue with a key, and only one's own running jobs.
    let h: serde_json::Value = d.http.get(d.url("/health")).send().unwrap().json().unwrap();
    let fields: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(fields, vec!["demo_weights", "ready", "status", "uptime_seconds"], "{h}");
    assert_eq!(d.http.get(d.url("/status")).send().unwrap().status(), 401);
    let ops_view: serde_json::Value = get(&d, "/status", OPS).json().unwrap();
    let alice_view: serde_json::Value = get(&d, "/status", A).json().unwrap();
    assert_eq!(ops_view["queue"]["running"], alice_view["queue"]["running"], "alice's running jobs are all there are");
    let bob_view: serde_json::Value = get(&d, "/system/queue", B).json().unwrap();
    assert_eq!(bob_view["queue"]["running"], serde_json::json!([]), "{bob_view}");
    assert_eq!(bob_view["queue"]["share"], 3);

    // The share: with a cap of 6, one principal holds at most 3; past it a 429 with
    // Retry-After, while Bob still gets in.
    let mut extra = Vec::new();
    let refusal = loop {
        let r = post(&d, "/synth", A, &song(30.0, 8));
        if r.status() != 200 {
            break r;
        }
        extra.push(r.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_string());
        assert!(extra.len() <= 3, "alice was never refused");
    };
    assert_eq!(refusal.status(), 429);
    assert!(refusal.headers().get("retry-after").is_some());
    assert!(refusal.text().unwrap().contains("share"));
    let held = get(&d, "/jobs", A).json::<serde_json::Value>().unwrap()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] == "queued" || j["status"] == "running")
        .count();
    assert!((1..=3).contains(&held) && extra.len() >= 2, "{held} held, {} more accepted", extra.len());
    let bobs = submit(&d, B, &song(1.0, 1));
    // Bob listens to a long song of his; an admin about to be removed follows the log.
    let bobs_long = submit(&d, B, &song(30.0, 8));
    let url = d.ws_url(&format!("/stream?id={bobs_long}&api_key={B}"));
    let (mut bob_ws, _) = tokio_tungstenite::tungstenite::connect(url).unwrap();
    if let tokio_tungstenite::tungstenite::stream::MaybeTlsStream::Plain(s) = bob_ws.get_mut() {
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    }
    let mut gone_admins_logs = get(&d, "/logs", OPS2);
    assert_eq!(gone_admins_logs.status(), 200);

    // The log: principal ids, never a key.
    let mut logs = get(&d, "/logs", OPS);
    assert_eq!(logs.status(), 200);
    let mut seen = Vec::new();
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(&bobs) && t0.elapsed() < Duration::from_secs(20) {
        let n = logs.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.contains("client=alice"), "{text}");
    drop(logs);

    // Rotation: Bob's key is replaced by a new one of the same name, Carol's comes, without a
    // restart; Bob's running job finishes.
    std::fs::write(&keys, format!("{A} name=alice\n{OPS} name=ops admin\n{CAROL} name=carol\n{B2} name=bob\n"))
        .unwrap();
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let t0 = Instant::now();
    while get(&d, "/jobs", B).status() != 401 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the keys were not reloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&d, "/jobs", CAROL).status(), 200);
    assert_eq!(get(&d, "/jobs", B2).status(), 200);
    // What the removed keys had open ends with them: the admin's log within seconds, Bob's
    // socket at its next keepalive tick, closed with why (his name is still there, under a
    // new key: the old key is what was revoked).
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "a removed admin key still follows the log");
        if gone_admins_logs.read(&mut buf).unwrap() == 0 {
            break;
        }
    }
    let closed = loop {
        match bob_ws.read() {
            Ok(tokio_tungstenite::tungstenite::Message::Close(c)) => break c.map(|c| c.reason.to_string()),
            Ok(_) => continue,
            Err(e) => panic!("Bob's socket was not closed with a reason: {e}"),
        }
    };
    assert_eq!(closed.as_deref(), Some("API key revoked"));
    for id in extra.iter().chain([&long, &bobs_long]) {
        let s = post(&d, &format!("/job?id={id}&cancel=1"), OPS, "").status().as_u16();
        assert!(s == 200 || s == 409, "an admin cancels any job: {s}");
    }
    wait(&d, &bobs, OPS, "done");
    for id in extra.iter().chain([&long, &bobs_long]) {
        let s = d.wait(id, Duration::from_secs(120));
        assert!(s["status"] == "cancelled" || s["status"] == "done", "{s}");
    }
    eprintln!("tenancy: {tried} route and job pairs tried as another principal, 0 leaks");

    // Nothing on disk or in the log holds a key.
    drop(d);
    for key in [A, B, B2, OPS, PROM, CAROL, OPS2] {
        let mut hits = files_containing(&data, key.as_bytes());
        if std::fs::read(data.with_extension("log")).unwrap().windows(key.len()).any(|w| w == key.as_bytes()) {
            hits.push(data.with_extension("log"));
        }
        assert!(hits.is_empty(), "{key} written to {hits:?}");
    }
}
