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

/// A stream ticket `key` is given for `ask` (a `POST /tickets` body).
fn ticket(d: &Daemon, key: &str, ask: &serde_json::Value) -> String {
    let r = post(d, "/tickets", key, &ask.to_string());
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().unwrap();
    assert_eq!(v["expires_in"], 60, "{v}");
    v["ticket"].as_str().unwrap().to_string()
}

/// The status a WebSocket handshake to `path` is answered with (101: it opened).
fn handshake(d: &Daemon, path: &str) -> (u16, String) {
    use tokio_tungstenite::tungstenite::{connect, Error};
    match connect(d.ws_url(path)) {
        Ok(_) => (101, String::new()),
        Err(Error::Http(r)) => {
            let body = r.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            (r.status().as_u16(), body)
        }
        Err(e) => panic!("{path}: {e}"),
    }
}

/// Stream tickets: what a browser's stream is opened with instead of a key in its URL. Each is
/// for its key's principal, its route and job, and is taken once; the key itself is never in
/// it, and a key that comes in a URL is warned about once.
fn tickets(d: &Daemon, alices_done: &str, alices_long: &str) {
    let for_stream = |id: &str| serde_json::json!({"path": "/stream", "id": id});
    let t = ticket(d, A, &for_stream(alices_done));
    assert!(!t.contains(A) && !t.contains("alice"), "{t}");
    let at = |id: &str, t: &str| handshake(d, &format!("/stream?id={id}&format=pcm16&ticket={t}"));
    assert_eq!(at(alices_done, &t).0, 101);
    let (status, why) = at(alices_done, &t);
    assert!(status == 401 && why.contains("used already"), "{status} {why}");
    // For another job of the same principal: not this ticket's.
    let t = ticket(d, A, &for_stream(alices_done));
    assert_eq!(at(alices_long, &t).0, 401);
    // Bob's ticket for Alice's job is Bob's: the job is as unknown to it as to him.
    let t = ticket(d, B, &for_stream(alices_long));
    assert_eq!(at(alices_long, &t).0, 404);
    // Forged, or on a route that takes none.
    let forged = t.replace(&t[t.len() - 8..], "00000000");
    assert_eq!(at(alices_long, &forged).0, 401);
    let t = ticket(d, A, &for_stream(alices_done));
    let r = d.http.get(d.url(&format!("/jobs?ticket={t}"))).send().unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().unwrap().contains("a ticket opens only"));
    // The log: an admin's ticket opens it, a user's key gets none.
    let r = post(d, "/tickets", B, r#"{"path": "/logs"}"#);
    assert_eq!(r.status(), 403);
    let t = ticket(d, OPS, &serde_json::json!({"path": "/logs"}));
    let mut log = d.http.get(d.url(&format!("/logs?ticket={t}"))).send().unwrap();
    assert_eq!(log.status(), 200);
    let mut first = [0u8; 5];
    log.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"data:");
    drop(log);
    // Malformed asks name their field.
    for (body, field) in [
        (r#"{"path": "/jobs"}"#, "path:"),
        (r#"{"path": "/stream"}"#, "id: missing"),
        (r#"{"path": "/stream", "id": "nope"}"#, "id:"),
        (r#"{"path": "/logs", "id": "0123456789abcdef"}"#, "id:"),
        (r#"{"path": "/logs", "why": 1}"#, "why: unknown field"),
        (r#"{"path": "/logs", "id": null}"#, "id:"),
        (r#"["/logs"]"#, "not a JSON object"),
    ] {
        let r = post(d, "/tickets", A, body);
        assert_eq!(r.status(), 400, "{body}");
        let e = r.text().unwrap();
        assert!(e.contains(field), "{body}: {e}");
    }
    assert_eq!(d.http.post(d.url("/tickets")).body(r#"{"path": "/logs"}"#).send().unwrap().status(), 401);
    // A key in a URL still works (scripts), and the log says once that it should not be there.
    for _ in 0..2 {
        assert_eq!(d.http.get(d.url(&format!("/jobs?api_key={A}"))).send().unwrap().status(), 200);
    }
    let t0 = Instant::now();
    while d.log().matches("an API key came in a URL").count() != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no warning of a key in a URL");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    tickets(&d, &done, &long);
    tried += 4;
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
    // The stores' figures are the box's: an admin's only.
    for field in ["jobs_known", "results_stored", "results_bytes"] {
        assert!(bob_view["queue"].get(field).is_none() && ops_view["queue"].get(field).is_some(), "{field}");
    }

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
    let ticket = ticket(&d, B, &serde_json::json!({"path": "/stream", "id": bobs_long}));
    let url = d.ws_url(&format!("/stream?id={bobs_long}&ticket={ticket}"));
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

    // The data directory (every tenant's results, the link tokens) is this user's only.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o700);
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

/// One principal's uploads hold at most its share of the uploads' memory (half of it, and at
/// least one largest body): Bob's two bodies that announce the largest length and trickle
/// never shut Alice's upload out.
#[test]
fn one_principals_uploads_leave_room_for_the_others() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{A} name=alice\n{B} name=bob\n")).unwrap();
    // Bodies of at most 1 MiB and 1 MiB of form slack: 6 MiB of room each, 12 MiB in all, a
    // share of 6 MiB.
    let args = ["--api-keys-file", keys.to_str().unwrap(), "--max-upload-bytes", "1048576"];
    let d = Daemon::start(&dir.path().join("data"), &[&args[..], &["--upload-memory-bytes", "12582912"]].concat());
    let addr = d.url("").trim_start_matches("http://").to_string();
    let body = |key: &str, sent: usize| {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "POST /vae HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {key}\r\nContent-Type: multipart/form-data; \
            boundary=b\r\nContent-Length: 2097152\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).unwrap();
        tcp.write_all(&vec![b'x'; sent]).unwrap();
        tcp
    };
    // Bob's first body sends 1.5 MiB of its 2: it holds his whole share (6 MiB). His second
    // waits for room in his share.
    let _first = body(B, 3 << 19);
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let mut second = body(B, 1024);
    // Alice's body of 1 MiB finds room at once (and, not being a form, is a 400).
    let alice = d
        .http
        .post(d.url("/vae"))
        .header("x-api-key", A)
        .header("content-type", "multipart/form-data; boundary=b")
        .body(vec![b'x'; 1 << 20])
        .send()
        .unwrap();
    assert_eq!(alice.status(), 400, "{}", alice.text().unwrap());
    // Bob's second is told, after its wait, that his share is what is short.
    let mut answer = String::new();
    let _ = second.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 429") && answer.contains("share of the upload memory"), "{answer}");
    assert!(answer.to_lowercase().contains("retry-after: 5"), "{answer}");
    assert!(t0.elapsed() >= Duration::from_secs(9), "it waited for his first body first");
}

/// Two principals at their share never lock a third out: the admission cap's last free place
/// is kept for a principal that holds no job.
#[test]
fn the_last_free_place_is_kept_for_a_newcomer() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{A} name=alice\n{B} name=bob\n{CAROL} name=carol\n{OPS} name=ops admin\n")).unwrap();
    // A cap of 4, a share of 2, one song at a time: the songs stay queued or running.
    let args = ["--api-keys-file", keys.to_str().unwrap(), "--admission-cap", "4", "--admission-share", "2"];
    let d = Daemon::start(&dir.path().join("data"), &[&args[..], &["--parallel", "1"]].concat());
    let long = song(300.0, 8);
    let mut held = vec![submit(&d, A, &long), submit(&d, A, &long), submit(&d, B, &long)];
    // Bob holds one and would take the last place: refused, with why and when to retry.
    let r = post(&d, "/synth", B, &long);
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let e = r.text().unwrap();
    assert!(e.contains("kept for a client that holds no job"), "{e}");
    // Carol holds none: she gets it. Then the box is full.
    held.push(submit(&d, CAROL, &long));
    let r = post(&d, "/synth", OPS, &long);
    assert_eq!(r.status(), 429);
    assert!(r.text().unwrap().contains("admission cap of 4"));
    for id in &held {
        assert_eq!(post(&d, &format!("/job?id={id}&cancel=1"), OPS, "").status(), 200, "{id}");
    }
}

/// A song streamed to an OpenAI door stops reaching a key revoked by a reload (a broken
/// transfer within seconds); the song itself goes on, as a removed key's running jobs do.
#[test]
fn a_revoked_key_stops_hearing_its_streamed_song() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{A} name=alice\n{OPS} name=ops admin\n")).unwrap();
    let mut d = Daemon::start(&dir.path().join("data"), &["--api-keys-file", keys.to_str().unwrap()]);
    d.key = Some(OPS.into());
    let body = r#"{"style": "x", "lyrics": "[verse] hum", "cot": "off", "duration": 300, "steps": 8,
        "output_format": "opus", "stream_chunk_seconds": 3, "semantic_sampling": {"min_tokens": 7500}}"#;
    let mut r = post(&d, "/v1/audio/music", A, body);
    assert_eq!(r.status(), 200);
    let job = r.headers()["x-yued-job"].to_str().unwrap().to_string();
    let mut buf = [0u8; 4096];
    assert!(r.read(&mut buf).unwrap() > 0, "the song's first audio");
    std::fs::write(&keys, format!("{OPS} name=ops admin\n")).unwrap();
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let t0 = Instant::now();
    let broken = loop {
        match r.read(&mut buf) {
            Ok(0) => break false,
            Ok(_) => assert!(t0.elapsed() < Duration::from_secs(30), "the revoked key still hears its song"),
            Err(_) => break true,
        }
    };
    assert!(broken, "the transfer ended as if the song were whole");
    assert_eq!(get(&d, &format!("/job?id={job}"), OPS).json::<serde_json::Value>().unwrap()["status"], "running");
    assert_eq!(post(&d, &format!("/job?id={job}&cancel=1"), OPS, "").status(), 200);
}
