//! The daemon end to end: real binary, real HTTP, real sled journal, real WebSocket.
use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use yued_e2e::*;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn a_job_streams_audio_before_it_is_done_and_its_result_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "16"]);
    let id = d.submit(&song(16.0, 4));
    let url = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    let (frames_before_done, status_at_first_audio, pcm_bytes, tiles, done) = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let (mut n_bin, mut status_first, mut bytes, mut tiles, mut done) = (0, None, 0usize, 0, None);
        while let Some(m) = ws.next().await {
            match m.unwrap() {
                Message::Binary(b) => {
                    if n_bin == 0 {
                        // Blocking HTTP off the async thread.
                        let url = d.url(&format!("/job?id={id}"));
                        let st = tokio::task::spawn_blocking(move || {
                            reqwest::blocking::get(url).unwrap().json::<serde_json::Value>().unwrap()
                        })
                        .await
                        .unwrap();
                        status_first = Some(st["status"].as_str().unwrap().to_string());
                    }
                    n_bin += 1;
                    bytes += b.len();
                }
                Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                    if v["event"] == "tile" {
                        tiles += 1;
                    }
                    if v["event"] == "done" {
                        done = Some(v);
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        (n_bin, status_first, bytes, tiles, done)
    });
    let done = done.expect("a done event");
    assert_eq!(
        status_at_first_audio.as_deref(),
        Some("running"),
        "the first audio frame must arrive while the job still runs"
    );
    assert!(
        frames_before_done >= 2 && tiles == frames_before_done,
        "{frames_before_done} binary frames, {tiles} tile events"
    );
    let frames = 400;
    assert_eq!(pcm_bytes, (1920 * frames - 64) * 2 * 2, "the concatenated PCM is the song's exact length");
    assert_eq!(done["tracks"], 1);
    // status: done with schema-1 metrics
    let s = d.status(&id);
    assert_eq!(s["status"], "done");
    assert_eq!(s["metrics"]["schema"], 1);
    assert!(s["metrics"]["audio_seconds"].as_f64().unwrap() > 15.9);
    // result: replay JSON, WAV, latents
    let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "multipart/mixed; boundary=yue2-batch-boundary");
    let body = r.bytes().unwrap();
    let parts = multipart_parts(&body, "yue2-batch-boundary");
    assert_eq!(parts.len(), 3);
    assert!(
        parts[0].0.contains("application/json")
            && parts[1].0.contains("audio/wav")
            && parts[2].0.contains("application/octet-stream")
    );
    let replay: serde_json::Value = serde_json::from_slice(&parts[0].1).unwrap();
    assert_eq!(replay["semantic_tokens"].as_str().unwrap().split(',').count(), frames);
    let wav = hound::WavReader::new(std::io::Cursor::new(parts[1].1.clone())).unwrap();
    assert_eq!(wav.duration() as usize, 1920 * frames - 64);
    assert_eq!(parts[2].1.len(), frames * 64 * 4);
    // a late listener gets the whole stream again, then the socket closes
    let late = rt().block_on(async {
        let (mut ws, _) =
            tokio_tungstenite::connect_async(d.ws_url(&format!("/stream?id={id}&format=pcm16"))).await.unwrap();
        let mut bytes = 0;
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Binary(b) = m {
                bytes += b.len();
            }
        }
        bytes
    });
    assert_eq!(late, pcm_bytes);
    // the default stream is Ogg Opus: the concatenated binary frames decode to the song
    let opus = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(d.ws_url(&format!("/stream?id={id}"))).await.unwrap();
        let mut bytes = Vec::new();
        let mut format = None;
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Binary(b) => bytes.extend_from_slice(&b),
                Message::Text(t) if t.as_str().contains("\"format\"") => format = Some(t.as_str().to_string()),
                _ => {}
            }
        }
        (bytes, format)
    });
    assert!(opus.1.unwrap().contains("\"codec\":\"opus\""));
    let (ch, pcm) = yued_audio::ogg_opus::decode_ogg_opus(&opus.0).unwrap();
    assert_eq!(ch, 2);
    let got = pcm.len() / 2;
    let want = 1920 * frames - 64;
    assert!(got.abs_diff(want) <= 960, "Opus stream decodes to {got} samples, the song has {want}");
    // unknown ids 404, malformed ids 400, cancel of a finished job 409
    assert_eq!(d.http.get(d.url("/job?id=00000000000000ff")).send().unwrap().status(), 404);
    assert_eq!(d.http.get(d.url("/job?id=xyz")).send().unwrap().status(), 400);
    assert_eq!(d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).send().unwrap().status(), 409);
    // A cancel sent as a GET, and a flag that is not one, are 400s naming them (never the
    // status read as if the cancel or the result had been done).
    for (q, field) in [("cancel=1", "cancel:"), ("result=yes", "result:")] {
        let r = d.http.get(d.url(&format!("/job?id={id}&{q}"))).send().unwrap();
        assert_eq!(r.status(), 400, "{q}");
        assert!(r.text().unwrap().contains(field), "{q}");
    }
    // What a dashboard reads: the job's queue wait (measured at its first progress), completed
    // stages in round buckets up to 8 h, what this daemon is, and its journal's health.
    let m = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    let value = |series: &str| -> f64 {
        m.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(-1.0)
    };
    assert!(value("yued_queue_wait_seconds_count ") >= 1.0, "{m}");
    // The wait for its first sound, from its submission: one song, heard before its end; the
    // other family's series is there at 0 (a dashboard shows 0, not "no data").
    assert_eq!(value("yued_first_audio_seconds_count{family=\"yue2\"} "), 1.0, "{m}");
    let whole = s["metrics"]["queue_seconds"].as_f64().unwrap() + s["metrics"]["worker_seconds"].as_f64().unwrap();
    let first = value("yued_first_audio_seconds_sum{family=\"yue2\"} ");
    assert!(first > 0.0 && first < whole, "first audio after {first} s of the job's {whole} s");
    assert_eq!(value("yued_first_audio_seconds_count{family=\"mm3\"} "), 0.0, "{m}");
    // Each answer timed to its head, by route.
    assert!(value("yued_http_request_duration_seconds_count{route=\"/job\"} ") >= 3.0, "{m}");
    assert!(m.contains("yued_stage_duration_seconds_bucket{family=\"yue2\",stage=\"synth\",le=\"28800\"}"), "{m}");
    assert!(!m.contains("le=\"7.29"), "round bucket bounds");
    let build = m.lines().find(|l| l.starts_with("yued_build_info{")).unwrap_or_default();
    assert!(build.contains("demo_weights=\"true\"") && build.ends_with(" 1"), "{build}");
    assert_eq!(value("yued_journal_healthy "), 1.0);
    // The OpenAI door names the field of a wrong type, as its SDKs read `param`.
    let r = d
        .http
        .post(d.url("/v1/audio/speech"))
        .header("content-type", "application/json")
        .body(r#"{"model": "yue2", "input": "[verse] la", "duration": "5"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().unwrap();
    assert_eq!(v["error"]["param"], "duration", "{v}");
    // The music door names what it ignores, as /synth does.
    let r = d
        .http
        .post(d.url("/v1/audio/music"))
        .header("content-type", "application/json")
        .body(
            r#"{"model": "yue2", "async": true, "style": "x", "cot": "off", "duration": 1, "steps": 1, "duraton": 2}"#,
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().unwrap();
    assert_eq!(v["ignored"], serde_json::json!(["duraton"]), "{v}");
    d.http.post(d.url(&format!("/job?id={}&cancel=1", v["id"].as_str().unwrap()))).send().unwrap();
}

#[test]
fn one_clients_batch_does_not_starve_another_client() {
    let dir = tempfile::tempdir().unwrap();
    // The queue's order alone: one job at a time (in a batch, several of a's would start at once).
    let mut d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--parallel",
            "1",
            "--admission-cap",
            "16",
            "--admission-share",
            "16",
            "--api-key",
            "client-a",
            "--api-key",
            "client-b",
            "--admin-key",
            "ops",
        ],
    );
    d.key = Some("ops".into());
    let body = song(2.0, 2);
    let a: Vec<String> =
        (0..10).map(|_| d.submit_as(&body, Some("client-a")).1["id"].as_str().unwrap().to_string()).collect();
    let (s, v, _) = d.submit_as(&body, Some("client-b"));
    assert_eq!(s, 200);
    let b = v["id"].as_str().unwrap().to_string();
    let pos = d.status(&b)["queue_position"].as_u64().unwrap();
    assert!(pos <= 1, "the single job of client b waits behind at most one job of client a, got position {pos}");
    d.wait(&b, Duration::from_secs(300));
    let still_waiting = a.iter().filter(|id| d.status(id)["status"] == "queued").count();
    assert!(still_waiting >= 5, "client b finished after only {} of client a's jobs", 10 - still_waiting);
    for id in &a {
        let status = |id: &str| {
            d.http
                .get(d.url(&format!("/job?id={id}")))
                .header("x-api-key", "client-a")
                .send()
                .unwrap()
                .json::<serde_json::Value>()
                .unwrap()
        };
        let done = status(id)["status"] == "done";
        let r = d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).header("x-api-key", "client-a").send().unwrap();
        assert_eq!(r.status().as_u16() / 100, if done { 4 } else { 2 });
    }
}

#[test]
fn the_admission_cap_answers_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    // One client may fill the whole cap here (its share is the cap).
    let d = Daemon::start(&dir.path().join("data"), &["--admission-share", "8"]);
    let body = song(30.0, 8);
    let ids: Vec<String> = (0..8).map(|_| d.submit(&body)).collect();
    let (s, v, retry) = d.submit_as(&body, None);
    assert_eq!(s, 429, "{v}");
    assert!(v["error"].as_str().unwrap().contains("cap"));
    assert!(retry.is_some_and(|r| r.parse::<u32>().unwrap() > 0));
    for id in &ids {
        let r = d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).send().unwrap();
        assert_eq!(r.status(), 200);
    }
    for id in &ids {
        assert_eq!(d.wait(id, Duration::from_secs(60))["status"], "cancelled");
    }
    let metrics = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains("yued_admission_rejections_total 1"), "{metrics}");
}

#[test]
fn malformed_requests_get_400_naming_the_field_and_nothing_is_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--max-batch", "2"]);
    let cases = [
        ("{not json", "json"),
        (r#"{"style": "x", "cot": "sideways"}"#, "cot"),
        (r#"{"style": "x", "output_format": "wma"}"#, "output_format"),
        (r#"{"style": "x", "steps": 0}"#, "steps"),
        (r#"{"style": "x", "lm_batch_size": 3}"#, "lm_batch_size"),
        (r#"{"style": "x", "synth_batch_size": 10}"#, "synth_batch_size"),
        (r#"{"style": "x", "plan_retries": 1.5}"#, "plan_retries"),
        (r#"{"style": "x", "plan_retries": 9}"#, "plan_retries"),
        (r#"{"style": "x", "abc_sampling": {"top_p": 0}}"#, "abc_sampling.top_p"),
        (r#"{"style": "x", "semantic_sampling": {"temperature": 6}}"#, "semantic_sampling.temperature"),
        (r#"{"style": "x", "semantic_sampling": {"penalty_window": 0}}"#, "semantic_sampling.penalty_window"),
        (r#"{"style": "x", "semantic_tokens": "1,2", "source_tokens": "3"}"#, "source_tokens"),
        (r#"{"style": "x", "semantic_tokens": "1,99999"}"#, "semantic_tokens"),
        (r#"{"family": "yue2"}"#, "style"),
        // Both families are served by default: a body with neither's fields is YuE2's (a
        // MiniMax request needs its caption), one with both's is refused.
        (r#"{}"#, "style"),
        (r#"{"caption": "x", "cot": "off", "lyrics": "la"}"#, "family"),
        // MiniMax Music 3's bad input.
        (r#"{"family": "mm3", "lyrics": "la"}"#, "caption"),
        (r#"{"caption": "x"}"#, "lyrics"),
        (r#"{"caption": "x", "lyrics": "la", "duration": 0}"#, "duration"),
        (r#"{"caption": "x", "lyrics": "la", "audio_codes": "1,2,3"}"#, "audio_codes"),
        (r#"{"caption": "x", "lyrics": "la", "audio_codes": "1,2,3,4,5,6,7,8,99999,0,0,0,0,0,0,0"}"#, "audio_codes"),
        (r#"{"caption": "x", "lyrics": "la", "dit_model": "nope.gguf"}"#, "dit_model"),
        (r#"{"caption": "x", "lyrics": "la", "lm_model": "yue2-demo-tiny.gguf"}"#, "lm_model"),
        (r#"{"family": "opera", "style": "x"}"#, "family"),
        (r#"{"family": 2, "style": "x"}"#, "family"),
        // Guidance and adapter strengths that overflowed to NaN failed the job inside a stage.
        (r#"{"caption": "x", "lyrics": "la", "dit_cfg": 1e300}"#, "dit_cfg"),
        (r#"{"caption": "x", "lyrics": "la", "lm_cfg": -101}"#, "lm_cfg"),
        (r#"{"style": "x", "cfg_scale": 1e300}"#, "cfg_scale"),
        (r#"{"style": "x", "adapters": [{"name": "a", "scale": 1e300}]}"#, "adapters[0].scale"),
    ];
    for (body, field) in cases {
        let (s, v, _) = d.submit_as(body, None);
        assert_eq!(s, 400, "{body}: {v}");
        let e = v["error"].as_str().unwrap().to_lowercase();
        assert!(e.contains(field), "{body}: error {e:?} should name {field}");
    }
    // The field first: the one a user has to change.
    let long = "pop rock ".repeat(40_000);
    let first = [
        (format!(r#"{{"style": "{long}", "lyrics": "la", "cot": "off"}}"#), "style:"),
        (format!(r#"{{"style": "x", "lyrics": "{long}", "cot": "off"}}"#), "lyrics:"),
        (format!(r#"{{"caption": "{long}", "lyrics": "la"}}"#), "caption:"),
        (format!(r#"{{"caption": "x", "lyrics": "{long}"}}"#), "lyrics:"),
        (r#"{"caption": "x", "lyrics": "la", "duration": 0.01}"#.to_string(), "duration:"),
        (r#"{"style": "x", "cot": "off", "seed": 9223372036854775807}"#.to_string(), "seed:"),
        (r#"{"caption": "x", "lyrics": "la", "lm_seed": 9007199254740992}"#.to_string(), "lm_seed:"),
    ];
    for (body, field) in first {
        let (s, v, _) = d.submit_as(&body, None);
        assert_eq!(s, 400, "{field}: {v}");
        assert!(v["error"].as_str().unwrap().starts_with(field), "{field}: {v}");
    }
    let big = format!(r#"{{"style": "x", "lyrics": "{}"}}"#, "a".repeat(5 << 20));
    let r = d.http.post(d.url("/synth")).header("content-type", "application/json").body(big).send().unwrap();
    assert_eq!(r.status(), 413);
    assert!(r.json::<serde_json::Value>().unwrap()["error"].is_string(), "errors are JSON");
    // A 405 says which methods the route takes (RFC 9110's Allow).
    for (path, allow) in [("/synth", "POST"), ("/job", "GET, POST"), ("/v1/models", "GET")] {
        let r = d.http.put(d.url(path)).send().unwrap();
        assert_eq!(r.status(), 405, "{path}");
        assert_eq!(r.headers().get("allow").and_then(|v| v.to_str().ok()), Some(allow), "{path}");
    }
    assert_eq!(d.http.get(d.url("/nope")).send().unwrap().status(), 404);
    let h: serde_json::Value = d.http.get(d.url("/status")).send().unwrap().json().unwrap();
    assert_eq!(h["queue"]["jobs_known"], 0, "a rejected request is never journaled");
    // A page of another site cannot drive a box without keys: its POST carries its Origin.
    let r = d
        .http
        .post(d.url("/synth"))
        .header("origin", "http://evil.example")
        .body(r#"{"style": "x", "cot": "off", "duration": 1}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().unwrap().contains("evil.example"));
    // Nor read it through a DNS name rebound to 127.0.0.1.
    let r = d.http.get(d.url("/jobs")).header("host", "evil.example").send().unwrap();
    assert_eq!(r.status(), 403);
    // The daemon's own page may.
    let own = d.url("/").trim_end_matches('/').to_string();
    let r = d.http.post(d.url("/job?id=0123456789abcdef&cancel=1")).header("origin", own).send().unwrap();
    assert_eq!(r.status(), 404, "past the guard: an unknown job");
    // Fields a request does not read are taken, as the references take them, and named.
    let (s, v, _) = d.submit_as(r#"{"style": "x", "cot": "off", "duraton": 3, "steps": 1, "duration": 1}"#, None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["ignored"], serde_json::json!(["duraton"]), "{v}");
    let (_, v, _) = d.submit_as(r#"{"style": "x", "cot": "off", "steps": 1, "duration": 1}"#, None);
    assert!(v.get("ignored").is_none(), "{v}");
}

/// kill -9 while the first job renders (its codes journaled) and the second waits: after a
/// restart both complete with their ids, and the journal's resume marker says the first
/// one took the replay path from its journaled codes (its AR stage did not sample again).
#[test]
fn kill_9_then_restart_completes_the_running_and_the_queued_job() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &[]);
    let first = d.submit(&song(40.0, 64));
    let second = d.submit(&song(2.0, 2));
    let t0 = Instant::now();
    while d.status(&first)["stage"] != "synth" {
        assert!(t0.elapsed() < Duration::from_secs(120), "{}", d.status(&first));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (data, port, args) = d.kill9();
    let d = Daemon::start_on(&data, port, args);
    for id in [&first, &second] {
        let s = d.wait(id, Duration::from_secs(600));
        assert_eq!(s["status"], "done", "{id}: {s}");
        let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(multipart_parts(&r.bytes().unwrap(), "yue2-batch-boundary").len(), 3);
    }
    // A new id after the restart repeats none of the journaled ones (ids are random).
    let third = d.submit(&song(1.0, 1));
    assert!(third != first && third != second);
    d.wait(&third, Duration::from_secs(300));
    // This process's counters: the restored jobs (the first, and the second unless it was done
    // before the kill) count as taken, as they count finished.
    let m = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    let value = |name: &str| m.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap();
    let (submitted, done) = (value("yued_jobs_submitted_total "), value("yued_jobs_finished_total{status=\"done\"} "));
    assert!(submitted >= 2 && submitted == done, "{m}");
    let (data, _, _) = d.kill9();
    let records = yued_actors::node::journal_records(&data.join("journal")).unwrap();
    let resumed = |id: &str| records.iter().find(|r| r.id.as_str() == id).map(|r| (r.resumed, r.crashes)).unwrap();
    assert_eq!(resumed(&first), (1, 1), "the first job resumed once from its journaled codes, after one crash");
    assert_eq!(resumed(&second).0, 0, "the second had no codes yet");
    if resumed(&second).1 == 1 {
        // Both were in the stages at the kill: after it each ran alone (a second crash
        // would then be the job's own), the second only once the first had finished.
        let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
        let restart = log.rfind("jobs restored from the journal").unwrap();
        let after = &log[restart..];
        let at = |what: &str, id: &str| {
            after
                .lines()
                .position(|l| l.contains(what) && l.contains(id))
                .unwrap_or_else(|| panic!("{what} {id}: {after}"))
        };
        assert!(at("job finished", &first) < at("job started", &second), "{after}");
    }
}

/// `GET /jobs` lists the caller's jobs only: those of its API key, oldest first, with
/// their requests.
#[test]
fn jobs_lists_the_callers_own_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--api-key", "alice", "--api-key", "bob"]);
    let submit = |key: &str, style: &str| -> String {
        let r = d
            .http
            .post(d.url("/synth"))
            .header("authorization", format!("Bearer {key}"))
            .body(format!(r#"{{"style": "{style}", "lyrics": "[verse] la", "cot": "off", "duration": 1, "steps": 1}}"#))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_string()
    };
    let a1 = submit("alice", "one");
    let b1 = submit("bob", "two");
    let a2 = submit("alice", "three");
    let list = |key: &str| -> serde_json::Value {
        d.http.get(d.url("/jobs")).header("x-api-key", key).send().unwrap().json().unwrap()
    };
    let alice = list("alice");
    let ids: Vec<&str> = alice["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![a1.as_str(), a2.as_str()], "{alice}");
    assert_eq!(alice["jobs"][1]["request"]["style"], "three");
    assert_eq!(alice["jobs"][0]["family"], "yue2");
    assert!(alice["jobs"][0]["submitted_ms"].as_u64().unwrap() > 0);
    let bob = list("bob");
    assert_eq!(bob["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(bob["jobs"][0]["id"], b1.as_str());
    assert_eq!(d.http.get(d.url("/jobs")).send().unwrap().status(), 401, "a key is required when keys are set");
}

#[test]
fn metrics_parse_and_move_and_keys_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--admin-key", "sesame", "--max-steps", "6"]);
    assert_eq!(d.http.get(d.url("/props")).send().unwrap().status(), 401);
    assert_eq!(d.http.get(d.url("/health")).send().unwrap().status(), 200, "health stays open");
    let get = |p: &str| d.http.get(d.url(p)).header("authorization", "Bearer sesame").send().unwrap();
    let props: serde_json::Value = get("/props").json().unwrap();
    assert_eq!(props["sample_rate"], 48000);
    assert_eq!(props["frame_rate"], 25);
    assert!(props["defaults"]["abc_sampling"]["top_k"] == 30);
    let parse = |text: &str| -> std::collections::HashMap<String, f64> {
        let mut m = std::collections::HashMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad exposition line {line:?}"));
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
            // Ours carry the yued_ prefix; the standard process_* series keep their names.
            assert!(name.starts_with("yued_") || name.starts_with("process_"), "unprefixed metric {name}");
            m.insert(name.to_string(), v);
        }
        m
    };
    let before = parse(&get("/metrics").text().unwrap());
    let (s, v, _) = d.submit_as(&song(1.0, 1), Some("sesame"));
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    loop {
        let st: serde_json::Value = get(&format!("/job?id={id}")).json().unwrap();
        if st["status"] == "done" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "{st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = parse(&get("/metrics").text().unwrap());
    // Answers by route pattern and status: the keyless /props was a 401.
    assert_eq!(after["yued_http_requests_total{route=\"/props\",status=\"401\"}"], 1.0);
    assert!(after["yued_http_requests_total{route=\"/job\",status=\"200\"}"] >= 1.0);
    let k = "yued_jobs_finished_total{status=\"done\"}";
    assert_eq!(after[k], before[k] + 1.0);
    assert!(after["yued_audio_produced_seconds_total"] > before["yued_audio_produced_seconds_total"]);
    assert!(get("/openapi.json").json::<serde_json::Value>().unwrap()["paths"]["/synth"].is_object());
    // Under a --max-steps below a family's default, a request that names no steps gets the
    // bound (it was refused: "steps: must be in [1, 6], got 8"), and /props says so.
    assert_eq!(props["defaults"]["steps"], 6);
    assert_eq!(props["mm3"]["defaults"]["steps"], 6);
    for body in
        [r#"{"style": "x", "cot": "off", "lyrics": "la", "duration": 1}"#, r#"{"caption": "x", "lyrics": "la"}"#]
    {
        let (s, v, _) = d.submit_as(body, Some("sesame"));
        assert_eq!(s, 200, "{body}: {v}");
    }
}

/// `/synth/stream` takes a request and a cancel command; a song's stage shows from the step it
/// joins the AR batch (its prompt's prefill the stage's first work), before its first code.
#[test]
fn synth_stream_takes_the_request_and_a_cancel_command() {
    let dir = tempfile::tempdir().unwrap();
    // Prompts in pieces of 4 tokens: the prefill takes many steps before a first code.
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "16", "--prefill-chunk", "4"]);
    let mm3 = r#"{"family": "mm3", "caption": "calm", "lyrics": "[verse] la", "duration": 20, "steps": 2}"#;
    for (body, total) in [(song(40.0, 8), Some(1000)), (mm3.to_string(), None)] {
        let (events, id) = stream_and_cancel(&d, &body);
        assert!(!id.is_empty(), "the job id is announced");
        assert_eq!(events.last().unwrap()["event"], "cancelled", "{events:?}");
        assert_eq!(d.status(&id)["status"], "cancelled");
        let first = events.iter().find(|e| e["event"] == "stage").unwrap_or_else(|| panic!("{events:?}"));
        assert_eq!((first["stage"].as_str(), first["done"].as_u64()), (Some("semantic"), Some(0)), "{events:?}");
        assert!(total.is_none_or(|t| first["total"] == t) && first["total"].as_u64() > Some(0), "{first}");
    }
}

/// Submits `body` on `/synth/stream` and cancels the job at its first stage event: the
/// events until the socket closes, and the job's id.
fn stream_and_cancel(d: &Daemon, body: &str) -> (Vec<serde_json::Value>, String) {
    rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(d.ws_url("/synth/stream")).await.unwrap();
        ws.send(Message::text(body)).await.unwrap();
        let mut events = Vec::new();
        let mut id = String::new();
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Text(t) = m {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["event"] == "job" {
                    id = v["id"].as_str().unwrap().to_string();
                }
                if v["event"] == "stage" && events.iter().all(|e: &serde_json::Value| e["event"] != "stage") {
                    ws.send(Message::text(r#"{"cmd":"cancel"}"#)).await.unwrap();
                }
                events.push(v);
            }
        }
        (events, id)
    })
}

/// A job that aborts the process (the test-only fault `YUED_TEST_ABORT_STYLE`, as a C abort
/// in ggml would) is resumed once after the first crash and failed with a message after
/// the second, never resumed into a crash loop; the daemon then serves the next job.
#[test]
fn a_job_that_crashes_the_daemon_twice_is_failed_not_resumed_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env = [("YUED_TEST_ABORT_STYLE", "crash-loop")];
    let port = free_port();
    let mut d = Daemon::start_with_env(&data, port, vec![], &env);
    let first = d.submit(&song(1.0, 1));
    assert_eq!(d.wait(&first, Duration::from_secs(300))["status"], "done");
    let _ = d
        .http
        .post(d.url("/synth"))
        .header("content-type", "application/json")
        .body(song(1.0, 1).replace("lo-fi piano", "crash-loop"))
        .send();
    let st = wait_exit(&mut d.child, Duration::from_secs(60)).expect("the fault aborts the daemon");
    assert!(!st.success(), "{st:?}");
    // The daemon may abort before it answers the submit (ids are random): the poison's id
    // is the last one the log says was queued.
    let log = d.log();
    let poison = log
        .lines()
        .filter(|l| l.contains("job queued"))
        .filter_map(|l| l.split("job=").nth(1))
        .map(|s| s[..16].to_string())
        .next_back()
        .unwrap();
    assert_ne!(poison, first);
    // The restart resumes it (one crash may be anything): the process aborts again.
    let mut again = Daemon::spawn(&data, port, &[], &env);
    let st = wait_exit(&mut again, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the resumed job did not crash again; log: {}", d.log()));
    assert!(!st.success(), "{st:?}");
    assert!(d.log().contains("crashes=1"), "the resume counted the first crash; log: {}", d.log());
    // The third start fails it instead and keeps serving.
    drop(d);
    let d = Daemon::start_with_env(&data, port, vec![], &env);
    let s = d.wait(&poison, Duration::from_secs(10));
    assert_eq!(s["status"], "failed", "{s}");
    let err = s["error"].as_str().unwrap_or_default();
    assert!(err.contains("2 times") && err.contains("not resumed"), "{s}");
    let fine = d.submit(&song(1.0, 1));
    assert_eq!(d.wait(&fine, Duration::from_secs(300))["status"], "done");
    // The failure is journaled: a fourth start still reports it and runs nothing.
    let (data, port, args) = d.kill9();
    let d = Daemon::start_with_env(&data, port, args, &env);
    assert_eq!(d.status(&poison)["status"], "failed");
}

/// `--models DIR` sorts a directory's GGUFs by architecture and serves the YuE2 pair (a
/// file of another architecture is skipped, said in the log); a file of the wrong
/// architecture given to `--model` is a clear error and a non-zero exit.
#[test]
fn serve_takes_a_models_directory_and_refuses_a_wrong_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let flags = deep_model(&models); // writes yue2-demo-deep{,-vae}.gguf there
    std::fs::write(models.join("broken.gguf"), b"not a gguf").unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--models", models.to_str().unwrap()]);
    let id = d.submit(&song(1.0, 1));
    assert_eq!(d.wait(&id, Duration::from_secs(300))["status"], "done");
    let log = d.log();
    assert!(
        log.contains("yue2-demo-deep.gguf") && log.contains("broken.gguf"),
        "the scan says what it took and skipped: {log}"
    );
    drop(d);
    // The VAE where the backbone belongs.
    let data = dir.path().join("data2");
    let mut child =
        Daemon::spawn(&data, free_port(), &["--model".into(), flags[3].clone(), "--vae".into(), flags[3].clone()], &[]);
    let st = wait_exit(&mut child, Duration::from_secs(60)).expect("a wrong architecture stops the daemon");
    assert!(!st.success());
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(log.contains("'yue2-vae' model where a 'yue2' one belongs"), "{log}");
}

/// A listener on a job that has ended gets its final state at once and a close, never a
/// silent open socket: a done job's audio replayed from the result as tiles (the exact
/// length of the song in s16; one Ogg Opus stream by default) then `done`; a cancelled
/// job's `cancelled`. The hub frees a job's stream at its end: the listener and stream
/// gauges are back to 0.
#[test]
fn a_listener_on_an_ended_job_gets_its_final_state_and_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "16"]);
    let done = d.submit(&song(2.0, 1));
    assert_eq!(d.wait(&done, Duration::from_secs(300))["status"], "done");
    let blocker = d.submit(&song(30.0, 8));
    let cancelled = d.submit(&song(1.0, 1));
    let r = d.http.post(d.url(&format!("/job?id={cancelled}&cancel=1"))).send().unwrap();
    assert!(r.status().is_success());
    assert_eq!(d.wait(&cancelled, Duration::from_secs(60))["status"], "cancelled");
    d.http.post(d.url(&format!("/job?id={blocker}&cancel=1"))).send().unwrap();
    d.wait(&blocker, Duration::from_secs(120));
    let listen = |path: String| {
        rt().block_on(async {
            let (mut ws, _) = tokio_tungstenite::connect_async(path).await.unwrap();
            let (mut events, mut binary, mut closed) = (Vec::new(), Vec::new(), None);
            let t0 = Instant::now();
            while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                match m.unwrap() {
                    Message::Text(t) => events.push(serde_json::from_str::<serde_json::Value>(t.as_str()).unwrap()),
                    Message::Binary(b) => binary.extend_from_slice(&b),
                    Message::Close(c) => {
                        closed = Some(c.map(|c| c.reason.to_string()).unwrap_or_default());
                        break;
                    }
                    _ => {}
                }
            }
            (events, binary, closed, t0.elapsed())
        })
    };
    let (events, pcm, closed, took) = listen(d.ws_url(&format!("/stream?id={done}&format=pcm16")));
    assert_eq!(closed.as_deref(), Some("job finished"), "{events:?}");
    assert!(took < Duration::from_secs(5), "at once, not after a silence: {took:?}");
    assert_eq!(events.first().unwrap()["event"], "format");
    assert!(events.iter().filter(|e| e["event"] == "tile").count() >= 1);
    let last = events.last().unwrap();
    assert_eq!((last["event"].as_str(), last["tracks"].as_u64()), (Some("done"), Some(1)));
    assert_eq!(pcm.len(), (1920 * 50 - 64) * 2 * 2, "the song's exact length in s16 stereo");
    let (events, opus, closed, _) = listen(d.ws_url(&format!("/stream?id={done}")));
    assert_eq!(closed.as_deref(), Some("job finished"));
    assert!(opus.starts_with(b"OggS") && events.last().unwrap()["event"] == "done");
    let (events, bin, closed, _) = listen(d.ws_url(&format!("/stream?id={cancelled}")));
    assert_eq!((events.len(), events[0]["event"].as_str(), bin.len()), (1, Some("cancelled"), 0));
    assert_eq!(closed.as_deref(), Some("job finished"));
    std::thread::sleep(Duration::from_millis(200));
    let metrics = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    for gauge in ["yued_stream_listeners 0", "yued_stream_jobs 0"] {
        assert!(
            metrics.lines().any(|l| l == gauge),
            "{gauge}: {}",
            metrics.lines().filter(|l| l.starts_with("yued_stream")).collect::<Vec<_>>().join("\n")
        );
    }
}

/// A request whose prompt, score and codes cannot fit the KV cache is refused at
/// submission with a 400 naming the field (the tokens are known then), not accepted and
/// failed minutes later; one that fits is accepted.
#[test]
fn a_request_that_cannot_fit_the_cache_is_a_400_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--max-seq", "512"]);
    let (s, v, _) = d.submit_as(&song(30.0, 1), None);
    assert_eq!(s, 400, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.starts_with("duration:") && e.contains("512"), "{e}");
    let long_score =
        format!(r#"{{"style": "x", "cot": "full", "duration": 2, "abc": "X:1\nK:C\n{}"}}"#, "CDEF GABc|".repeat(60));
    let (s, v, _) = d.submit_as(&long_score, None);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("abc:"), "the score is what to shorten: {v}");
    let (s, v, _) = d.submit_as(&format!(r#"{{"style": "x", "cot": "off", "lyrics": "{}"}}"#, "la ".repeat(600)), None);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("lyrics:"), "{v}");
    let h: serde_json::Value = d.http.get(d.url("/status")).send().unwrap().json().unwrap();
    assert_eq!(h["queue"]["jobs_known"], 0, "nothing refused is journaled");
    let id = d.submit(&song(2.0, 1));
    assert_eq!(d.wait(&id, Duration::from_secs(300))["status"], "done");
}

/// A panic in any stage (the test-only fault `YUED_TEST_PANIC=<stage>:<style>`) fails that
/// job with a message naming the stage, frees what the job held (KV sets, leases, pins),
/// and the stage takes the next job: the queue never stalls behind a `running` job.
#[test]
fn a_panicking_stage_fails_its_job_and_takes_the_next() {
    let mm3_song = |caption: &str, lm_seed: u32| {
        serde_json::json!({"family": "mm3", "caption": caption, "lyrics": "la", "duration": 1, "steps": 2,
            "lm_seed": lm_seed})
        .to_string()
    };
    for stage in ["ar", "nar", "vae", "encode"] {
        let dir = tempfile::tempdir().unwrap();
        let fault = format!("{stage}:boom");
        let d = Daemon::start_with_env(
            &dir.path().join("data"),
            free_port(),
            vec![],
            &[("YUED_TEST_PANIC", fault.as_str())],
        );
        let bad = d.submit(&song(1.0, 1).replace("lo-fi piano", "boom"));
        let next = d.submit(&song(1.0, 1));
        let s = d.wait(&bad, Duration::from_secs(120));
        assert_eq!(s["status"], "failed", "{stage}: {s}");
        let err = s["error"].as_str().unwrap_or_default();
        assert!(
            err.contains(&format!("internal error in the {stage} stage")) && err.contains("test fault"),
            "{stage}: {s}"
        );
        assert_eq!(d.wait(&next, Duration::from_secs(300))["status"], "done", "{stage}: the next job runs");
        let again = d.submit(&song(1.0, 1));
        assert_eq!(d.wait(&again, Duration::from_secs(300))["status"], "done", "{stage}: and the one after");
        let metrics = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
        assert!(metrics.lines().any(|l| l == "yued_kv_sets_in_use 0"), "{stage}: KV sets freed");
        assert!(d.log().contains("the stage panicked on this job"), "{stage}: logged");
        // A MiniMax Music 3 job (its caption matches the fault) too: its AR half on the
        // entry stage, its synthesis on the NAR stage, its tracks through the encoder.
        if stage != "vae" {
            let bad = d.submit(&mm3_song("boom", 3));
            let s = d.wait(&bad, Duration::from_secs(120));
            assert!(
                s["status"] == "failed"
                    && s["error"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(&format!("internal error in the {stage} stage")),
                "mm3 {stage}: {s}"
            );
            let next = d.submit(&mm3_song("calm", 4));
            let s = d.wait(&next, Duration::from_secs(120));
            assert_eq!(s["status"], "done", "mm3 {stage}: the next job runs: {s}\n{}", d.log());
        }
    }
}

/// Ended jobs are forgotten as their results go (here: beyond the results' count limit of
/// 2), so the journal and the job table stay bounded; a forgotten job is a 404 like any
/// unknown one, and stays forgotten after a restart.
#[test]
fn ended_jobs_leave_the_journal_with_their_results() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env = [("YUED_RESULT_MAX_COUNT", "2")];
    let port = free_port();
    let d = Daemon::start_with_env(&data, port, vec![], &env);
    let mut ids = Vec::new();
    for _ in 0..4 {
        let id = d.submit(&song(1.0, 1));
        assert_eq!(d.wait(&id, Duration::from_secs(300))["status"], "done");
        ids.push(id);
    }
    let known = |d: &Daemon| {
        d.http.get(d.url("/status")).send().unwrap().json::<serde_json::Value>().unwrap()["queue"]["jobs_known"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(known(&d), 2);
    let code = |d: &Daemon, id: &str| d.http.get(d.url(&format!("/job?id={id}"))).send().unwrap().status().as_u16();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(code(&d, id), if i < 2 { 404 } else { 200 }, "job {i}");
    }
    // Cancelled jobs (no result) are bounded among their own: three cancels push out the
    // oldest cancel, never a finished song (they pushed out the done jobs before).
    let mut cancelled = Vec::new();
    for _ in 0..3 {
        let id = d.submit(&song(40.0, 64));
        let t0 = Instant::now();
        while d.status(&id)["status"] != "running" {
            assert!(t0.elapsed() < Duration::from_secs(60), "{}", d.status(&id));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).send().unwrap().status(), 200);
        assert_eq!(d.wait(&id, Duration::from_secs(60))["status"], "cancelled");
        cancelled.push(id);
    }
    assert_eq!(known(&d), 4);
    assert_eq!(code(&d, &cancelled[0]), 404);
    for id in [&ids[2], &ids[3], &cancelled[1], &cancelled[2]] {
        assert_eq!(code(&d, id), 200, "{id}");
    }
    let (data, port, args) = d.kill9();
    let d = Daemon::start_with_env(&data, port, args, &env);
    assert_eq!(known(&d), 4, "the journal holds the four it kept");
    assert_eq!(code(&d, &ids[0]), 404);
    assert_eq!(code(&d, &ids[3]), 200);
}

/// A cancel is journaled before it is answered: a daemon killed right after answering it
/// finds the job cancelled at its next start (it resumed it and rendered it to done); an
/// upload no waiting job reads is removed at the start; and a second daemon on the same
/// data directory stops before it touches anything in it.
#[test]
fn an_answered_cancel_survives_a_kill_and_a_data_dir_has_one_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &[]);
    let id = d.submit(&song(40.0, 64));
    let t0 = Instant::now();
    while d.status(&id)["stage"] != "synth" {
        assert!(t0.elapsed() < Duration::from_secs(120), "{}", d.status(&id));
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).send().unwrap();
    assert_eq!(r.status(), 200);
    let (data, port, args) = d.kill9();
    let stray = data.join("uploads/00000000deadbeef.upload");
    std::fs::write(&stray, b"left by a daemon killed mid-upload").unwrap();
    let d = Daemon::start_on(&data, port, args.clone());
    assert_eq!(d.status(&id)["status"], "cancelled", "{}", d.log());
    assert_eq!(d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap().status(), 404);
    assert!(!stray.exists(), "a stray upload survived the start");
    // A second daemon on the same folder: refused before it writes there, the first intact.
    let mut second = Daemon::spawn(&data, free_port(), &args, &[]);
    let st = yued_e2e::wait_exit(&mut second, Duration::from_secs(30)).expect("the second daemon kept running");
    assert!(!st.success());
    assert!(d.log().contains("is in use by another yued (pid"), "{}", d.log());
    let next = d.submit(&song(1.0, 1));
    assert_eq!(d.wait(&next, Duration::from_secs(120))["status"], "done");
    let r = d.http.get(d.url(&format!("/job?id={next}&result=1"))).send().unwrap();
    assert_eq!(multipart_parts(&r.bytes().unwrap(), "yue2-batch-boundary").len(), 3);
}

/// With `--metrics-listen`, the scrape port answers `/metrics` without the key the API
/// wants, and SIGTERM stops both servers and the daemon (it hung with two servers).
#[test]
fn the_scrape_port_serves_metrics_and_stops_with_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let scrape = format!("127.0.0.1:{}", free_port());
    let mut d = Daemon::start(&dir.path().join("data"), &["--api-key", "k", "--metrics-listen", &scrape]);
    assert_eq!(d.http.get(d.url("/metrics")).send().unwrap().status(), 401);
    let m = d.http.get(format!("http://{scrape}/metrics")).send().unwrap();
    assert_eq!(m.status(), 200);
    assert!(m.text().unwrap().contains("yued_queue_depth"));
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let st = yued_e2e::wait_exit(&mut d.child, Duration::from_secs(20));
    assert!(st.is_some_and(|s| s.success()), "still running 20 s after SIGTERM: {}", d.log());
    assert!(d.log().contains("shutting down"), "{}", d.log());
}

/// A change the journal cannot record is not acknowledged (the test-only fault: while
/// `$YUED_TEST_JOURNAL_FAULT_FILE` exists every journal write fails): a submission is a 503
/// naming the journal, a queued job whose start cannot be recorded fails loudly instead of
/// running unrecorded, and `/status` is 503 `unhealthy` (as `/health?ready=1`; plain `/health`,
/// liveness, stays 200) until a write succeeds again.
#[test]
fn journal_write_failures_are_not_acknowledged_and_make_the_daemon_unhealthy() {
    let dir = tempfile::tempdir().unwrap();
    let fault = dir.path().join("journal-fault");
    let env = [("YUED_TEST_JOURNAL_FAULT_FILE", fault.to_str().unwrap())];
    // One job at a time: the second job waits in the queue while the first runs.
    let args = vec!["--parallel".to_string(), "1".to_string()];
    let d = Daemon::start_with_env(&dir.path().join("data"), free_port(), args, &env);
    let health = |d: &Daemon| {
        let r = d.http.get(d.url("/status")).send().unwrap();
        (r.status().as_u16(), r.json::<serde_json::Value>().unwrap())
    };
    assert_eq!(health(&d).0, 200);
    let running = d.submit(&song(20.0, 8));
    let queued = d.submit(&song(1.0, 1));
    let t0 = Instant::now();
    while d.status(&running)["status"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&fault, b"").unwrap();
    let (s, v, _) = d.submit_as(&song(1.0, 1), None);
    assert_eq!(s, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("journal"), "{v}");
    let (code, h) = health(&d);
    assert_eq!((code, h["status"].as_str()), (503, Some("unhealthy")), "{h}");
    // Liveness stays a 200 (a restart would stop the running job and mend nothing); the
    // readiness probe says 503.
    let live = d.http.get(d.url("/health")).send().unwrap();
    assert_eq!(live.status(), 200);
    assert_eq!(live.json::<serde_json::Value>().unwrap()["status"], "unhealthy");
    assert_eq!(d.http.get(d.url("/health?ready=1")).send().unwrap().status(), 503);
    assert!(h["queue"]["journal_error"].as_str().unwrap().contains("test fault"), "{h}");
    // The queued job's start cannot be recorded when the running one ends: it fails loudly.
    let s = d.wait(&queued, Duration::from_secs(300));
    assert_eq!(s["status"], "failed", "{s}");
    assert!(s["error"].as_str().unwrap().contains("journal could not record"), "{s}");
    // Writes succeed again: the next submission is accepted and the daemon is healthy.
    std::fs::remove_file(&fault).unwrap();
    let next = d.submit(&song(1.0, 1));
    assert_eq!(health(&d).0, 200);
    assert_eq!(d.wait(&next, Duration::from_secs(300))["status"], "done");
    // What could not be written then is on disk now: the running job ended (done) while the
    // journal refused writes, and the first write that succeeded wrote every record again.
    assert_eq!(d.status(&running)["status"], "done");
    let (data, _, _) = d.kill9();
    let records = yued_actors::node::journal_records(&data.join("journal")).unwrap();
    let state = |id: &str| records.iter().find(|r| r.id.as_str() == id).map(|r| r.state);
    assert_eq!(state(&running), Some(yued_protocol::JobState::Done));
    assert_eq!(state(&queued), Some(yued_protocol::JobState::Failed));
}

/// WebSocket keepalive: a listener that has been sent nothing for `ws_ping_secs` gets a
/// Ping (and stays connected while it answers), and a peer that answers nothing for three
/// times as long is closed with a reason.
#[test]
fn idle_listeners_are_pinged_and_silent_peers_closed() {
    let dir = tempfile::tempdir().unwrap();
    // One job at a time: the listener's job waits in the queue, silent, behind the blocker.
    let args = vec!["--parallel".to_string(), "1".to_string()];
    let d = Daemon::start_with_env(&dir.path().join("data"), free_port(), args, &[("YUED_WS_PING_SECS", "1")]);
    let blocker = d.submit(&song(60.0, 64));
    let waiting = d.submit(&song(1.0, 1));
    let url = d.ws_url(&format!("/stream?id={waiting}"));
    let (pings, open_after) = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.clone()).await.unwrap();
        let mut pings = 0;
        let t0 = Instant::now();
        let mut open = true;
        while t0.elapsed() < Duration::from_millis(4500) {
            match tokio::time::timeout(Duration::from_millis(200), ws.next()).await {
                Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => {
                    open = false;
                    break;
                }
                _ => {}
            }
        }
        (pings, open)
    });
    assert!(pings >= 2, "{pings} pings in 4.5 s of silence at 1 s");
    assert!(open_after, "a listener that answers stays connected");
    let reason = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        // Reads nothing for 5 s, so answers nothing. Then the server has closed it: a Close
        // frame, or (when the client's automatic Pong replies meet the closed socket first)
        // the connection's end.
        tokio::time::sleep(Duration::from_secs(5)).await;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
                Ok(Some(Ok(Message::Close(c)))) => break c.map(|c| c.reason.to_string()),
                Ok(Some(Ok(_))) => continue,
                Ok(None) | Ok(Some(Err(_))) => break None,
                Err(_) => panic!("the silent peer's socket was not closed"),
            }
        }
    });
    assert!(reason.is_none() || reason.as_deref() == Some("peer stopped answering"), "{reason:?}");
    assert!(d.log().contains("WebSocket peer stopped answering"), "the daemon closed it for that reason");
    for id in [&blocker, &waiting] {
        d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).send().unwrap();
    }
}

/// Listeners that stop reading are dropped (their queue in the hub is bounded and a stalled
/// write gives up after three keepalive periods) while a reading listener gets every tile
/// and the song completes; memory stays bounded and the listener gauge returns to 0.
#[test]
fn listeners_that_stop_reading_are_dropped_and_the_song_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(
        &dir.path().join("data"),
        free_port(),
        vec!["--vae-core".into(), "16".into()],
        &[("YUED_WS_PING_SECS", "1")],
    );
    // 120 s: 3000 frames, 188 tiles, 23 MB of s16 per listener: more than the socket
    // buffers and the hub's queue of a listener that reads nothing can absorb.
    let gauge = |name: &str| -> f64 {
        let m = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
        m.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let fds = gauge("process_open_fds");
    let id = d.submit(&song(120.0, 1));
    let url = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    let rt = rt();
    let (tiles, done, stalled) = rt.block_on(async {
        let mut stalled = Vec::new();
        for _ in 0..3 {
            stalled.push(tokio_tungstenite::connect_async(url.clone()).await.unwrap().0);
        }
        let (mut ws, _) = tokio_tungstenite::connect_async(url.clone()).await.unwrap();
        let (mut tiles, mut done) = (0, false);
        while let Some(m) = ws.next().await {
            match m.unwrap() {
                Message::Binary(_) => tiles += 1,
                Message::Text(t) if t.as_str().starts_with("{\"event\":\"done\"") => done = true,
                Message::Close(_) => break,
                _ => {}
            }
        }
        (tiles, done, stalled)
    });
    assert!(done, "the reading listener got the end");
    assert_eq!(tiles, 188, "and every tile");
    let t0 = Instant::now();
    while gauge("yued_stream_listeners") != 0.0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "listeners left: {}", gauge("yued_stream_listeners"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(gauge("yued_stream_dropped_listeners_total") >= 1.0, "the stalled listeners were dropped");
    // Their connections are cut, not left waiting for peers that never read (each would hold
    // a socket and megabytes): the daemon's descriptors are back to what they were while the
    // stalled clients still hold their ends.
    let t0 = Instant::now();
    while gauge("process_open_fds") > fds {
        assert!(t0.elapsed() < Duration::from_secs(30), "{} descriptors, {fds} before", gauge("process_open_fds"));
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stalled);
    assert!(gauge("process_resident_memory_bytes") < 600e6, "RSS {}", gauge("process_resident_memory_bytes"));
}

/// With no model flags the daemon serves both demo families: `/props` lists them; a
/// MiniMax Music 3 request is validated, journaled with its family, rendered window by
/// window (its audio heard on the stream at 44.1 kHz as PCM and as 48 kHz Opus), packaged
/// with its replay request, and its record survives a kill -9 and restart, while a YuE2
/// job still renders.
#[test]
fn both_families_are_served_and_a_minimax_song_renders_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &[]);
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert_eq!(props["families"], serde_json::json!(["yue2", "mm3"]), "{props}");
    assert_eq!(props["mm3"]["models"]["mm3-lm"], serde_json::json!(["mm3-demo-tiny-lm.gguf"]));
    assert_eq!(props["mm3"]["defaults"]["lm_cfg"], 1.5);
    assert_eq!(props["mm3"]["sample_rate"], 44100);
    assert_eq!(props["sample_rate"], 48000, "YuE2's fields stay where its clients read them");
    let body = r#"{"caption": "<|genre pop|> bright", "lyrics": "[Verse] la la", "duration": 5, "steps": 3,
        "lm_seed": 4, "seed": 5, "output_format": "wav16", "lm_model": "mm3-demo-tiny-lm.gguf"}"#;
    let mm3 = d.submit(body);
    // Listen as it renders: PCM frames at 44.1 kHz, then done.
    let url = d.ws_url(&format!("/stream?id={mm3}&format=pcm16"));
    let (mut events, mut pcm_bytes) = (Vec::new(), 0usize);
    rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                    let terminal = matches!(v["event"].as_str(), Some("done" | "failed" | "cancelled"));
                    events.push(v);
                    if terminal {
                        break;
                    }
                }
                Message::Binary(b) => pcm_bytes += b.len(),
                _ => {}
            }
        }
    });
    let s = d.wait(&mm3, Duration::from_secs(120));
    assert_eq!(s["status"], "done", "{s}; log: {}", d.log());
    let format =
        events.iter().find(|e| e["event"] == "format").unwrap_or_else(|| panic!("no format event: {events:?}"));
    assert_eq!((format["sample_rate"].as_u64(), format["channels"].as_u64()), (Some(44100), Some(2)));
    assert!(events.iter().any(|e| e["event"] == "codes"), "{events:?}");
    assert_eq!(events.last().unwrap()["event"], "done");
    assert!(pcm_bytes > 0);
    // Its frames count as the AR half's tokens (they were not counted at all).
    let frames = events.iter().find(|e| e["event"] == "codes").unwrap()["frames"].as_f64().unwrap();
    let m = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    let tokens: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("yued_ar_tokens_total{family=\"mm3\",stage=\"semantic\"} "))
        .unwrap_or_else(|| panic!("no semantic tokens counted: {m}"))
        .parse()
        .unwrap();
    assert!((frames..=frames + 1.0).contains(&tokens), "{tokens} tokens for {frames} frames");
    // Its first sound is in MiniMax's series.
    assert!(m.lines().any(|l| l.starts_with("yued_first_audio_seconds_count{family=\"mm3\"} ") && !l.ends_with(" 0")));
    // The result: the track and its replay request.
    let r = d.http.get(d.url(&format!("/job?id={mm3}&result=1"))).send().unwrap();
    let boundary =
        r.headers()["content-type"].to_str().unwrap().split("boundary=").nth(1).unwrap().trim_matches('"').to_string();
    assert_eq!(boundary, "mm3-batch-boundary", "minimaxmusic.cpp's boundary");
    let parts = multipart_parts(&r.bytes().unwrap(), &boundary);
    assert!(parts[0].0.contains("json"), "the replay request comes first");
    let wav = parts.iter().find(|(t, _)| t.contains("wav")).expect("a wav part");
    let reader = hound::WavReader::new(std::io::Cursor::new(wav.1.clone())).unwrap();
    assert_eq!((reader.spec().sample_rate, reader.spec().channels), (44100, 2));
    assert_eq!(pcm_bytes, reader.duration() as usize * 4, "the stream carried every sample of the track");
    let replay: serde_json::Value =
        serde_json::from_slice(&parts.iter().find(|(t, _)| t.contains("json")).unwrap().1).unwrap();
    assert_eq!(
        (replay["family"].as_str(), replay["lm_seed"].as_i64(), replay["seed"].as_i64()),
        (Some("mm3"), Some(4), Some(5))
    );
    assert!(replay["audio_codes"].as_str().unwrap().split(',').count() >= 16);
    // The Opus stream (the default) of the same job is a 48 kHz file of the same length.
    let url = d.ws_url(&format!("/stream?id={mm3}"));
    let ogg = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let mut ogg = Vec::new();
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Binary(b) => ogg.extend_from_slice(&b),
                Message::Text(t) if t.contains("\"done\"") => break,
                _ => {}
            }
        }
        ogg
    });
    let (ch, pcm48) = yued_audio::ogg_opus::decode_ogg_opus(&ogg).unwrap();
    let secs48 = pcm48.len() as f64 / ch as f64 / 48_000.0;
    let secs = reader.duration() as f64 / 44_100.0;
    assert!((secs48 - secs).abs() < 0.03, "Opus stream {secs48} s against the track's {secs} s");
    // The replay renders as a job too, to the same bytes (the sampled song's states are
    // its replay's).
    let again = d.submit(&replay.to_string());
    assert_eq!(d.wait(&again, Duration::from_secs(120))["status"], "done");
    let r = d.http.get(d.url(&format!("/job?id={again}&result=1"))).send().unwrap();
    let replayed = multipart_parts(&r.bytes().unwrap(), &boundary);
    assert!(
        replayed.iter().find(|(t, _)| t.contains("wav")).expect("a wav part").1 == wav.1,
        "the replay's audio differs from the original's"
    );
    // With lm_seed 168 the demo LM draws its end token before the song's first frame: the
    // draw is made again among the codes, and the song renders (it failed, empty, before).
    let early = d.submit(
        r#"{"family": "mm3", "caption": "calm", "lyrics": "la", "duration": 1, "steps": 2, "lm_seed": 168,
        "seed": 1, "output_format": "wav16"}"#,
    );
    let s = d.wait(&early, Duration::from_secs(120));
    assert_eq!(s["status"], "done", "{s}");
    let r = d.http.get(d.url(&format!("/job?id={early}&result=1"))).send().unwrap();
    let parts = multipart_parts(&r.bytes().unwrap(), &boundary);
    let replay: serde_json::Value =
        serde_json::from_slice(&parts.iter().find(|(t, _)| t.contains("json")).unwrap().1).unwrap();
    assert!(replay["audio_codes"].as_str().unwrap().split(',').count() >= 16, "at least a frame: {replay}");
    // A request without output_format gets minimaxmusic.cpp's MP3: a 20 s song at 44.1 kHz
    // (LAME once ran out of room past about 7 s of it and failed the job).
    let mp3 = d.submit(r#"{"family": "mm3", "caption": "calm", "lyrics": "la", "duration": 20, "steps": 2}"#);
    let s = d.wait(&mp3, Duration::from_secs(120));
    assert_eq!(s["status"], "done", "{s}");
    let r = d.http.get(d.url(&format!("/job?id={mp3}&result=1"))).send().unwrap();
    let parts = multipart_parts(&r.bytes().unwrap(), &boundary);
    let track = parts.iter().find(|(t, _)| t.contains("audio/mpeg")).expect("an MP3 part");
    let pcm = yued_audio::decode::decode(&track.1).unwrap();
    let secs = pcm.frames() as f64 / f64::from(pcm.sample_rate);
    assert_eq!((pcm.sample_rate, pcm.channels), (44_100, 2));
    assert!((secs - s["metrics"]["audio_seconds"].as_f64().unwrap()).abs() < 0.03, "{secs} s: {s}");
    let yue = d.submit(&song(0.4, 2));
    assert_eq!(d.wait(&yue, Duration::from_secs(120))["status"], "done");
    let (data, port, args) = d.kill9();
    let d = Daemon::start_on(&data, port, args);
    assert_eq!(d.status(&mm3)["status"], "done", "the MiniMax record reloads");
    assert!(!d.log().contains('\x1b'), "a log written to a pipe has no colour codes");
}

/// kill -9 while a MiniMax Music 3 song is in its synthesis half (its codes journaled):
/// after a restart it completes from the journal's codes (the replay path, marked in the
/// journal), with the same codes in its replay request.
#[test]
fn kill_9_mid_minimax_song_resumes_from_its_journaled_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // STRICT: the synthesis half starts once every code is written and journaled.
    let d = Daemon::start(&data, &["--strict"]);
    let id = d.submit(
        r#"{"family": "mm3", "caption": "ambient", "lyrics": "[verse] la", "duration": 12, "steps": 60,
        "lm_seed": 8, "seed": 9, "output_format": "wav16"}"#,
    );
    let t0 = Instant::now();
    while d.status(&id)["stage"] != "synth" {
        assert!(t0.elapsed() < Duration::from_secs(120), "{}", d.status(&id));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (data, port, args) = d.kill9();
    let d = Daemon::start_on(&data, port, args);
    let s = d.wait(&id, Duration::from_secs(300));
    assert_eq!(s["status"], "done", "{s}; log: {}", d.log());
    let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
    let parts = multipart_parts(&r.bytes().unwrap(), "mm3-batch-boundary");
    let replay: serde_json::Value = serde_json::from_slice(&parts[0].1).unwrap();
    assert_eq!((replay["lm_seed"].as_i64(), replay["seed"].as_i64()), (Some(8), Some(9)));
    // The same request run again without a kill writes the same codes and the same audio.
    let fresh = d.submit(
        r#"{"family": "mm3", "caption": "ambient", "lyrics": "[verse] la", "duration": 12, "steps": 60,
        "lm_seed": 8, "seed": 9, "output_format": "wav16"}"#,
    );
    assert_eq!(d.wait(&fresh, Duration::from_secs(300))["status"], "done");
    let r = d.http.get(d.url(&format!("/job?id={fresh}&result=1"))).send().unwrap();
    let fresh_parts = multipart_parts(&r.bytes().unwrap(), "mm3-batch-boundary");
    let again: serde_json::Value = serde_json::from_slice(&fresh_parts[0].1).unwrap();
    assert_eq!(again["audio_codes"], replay["audio_codes"], "the resumed job kept the codes it had journaled");
    let wav = |p: &[(String, Vec<u8>)]| p.iter().find(|(t, _)| t.contains("wav")).expect("a wav part").1.clone();
    assert!(wav(&parts) == wav(&fresh_parts), "the resumed job's audio differs from an uninterrupted run's");
    let (data, _, _) = d.kill9();
    let records = yued_actors::node::journal_records(&data.join("journal")).unwrap();
    let rec = records.iter().find(|r| r.id.as_str() == id).unwrap();
    assert_eq!((rec.resumed, rec.crashes), (1, 1), "resumed once from its journaled codes, after one crash");
}

/// `--models DIR` holding only MiniMax Music 3's five files, with YuE2's pair named by
/// `--model` and `--vae`: both families are served (the pair wins for YuE2, the directory
/// still gives MiniMax). Without the pair the daemon refuses to start and says how.
#[test]
fn a_minimax_directory_serves_beside_a_named_yue2_pair() {
    let dir = tempfile::tempdir().unwrap();
    // A first start writes both demos into the data directory.
    let first = Daemon::start(&dir.path().join("data"), &[]);
    drop(first);
    let demo = dir.path().join("data/models");
    let mm3 = dir.path().join("mm3");
    std::fs::create_dir_all(&mm3).unwrap();
    for c in ["lm", "depth", "cond", "dit", "vae"] {
        let name = format!("mm3-demo-tiny-{c}.gguf");
        std::fs::copy(demo.join(&name), mm3.join(&name)).unwrap();
    }
    let (m, v) = (demo.join("yue2-demo-tiny.gguf"), demo.join("yue2-demo-tiny-vae.gguf"));
    let args = ["--models", mm3.to_str().unwrap(), "--model", m.to_str().unwrap(), "--vae", v.to_str().unwrap()];
    let d = Daemon::start(&dir.path().join("data2"), &args);
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert_eq!(props["families"], serde_json::json!(["yue2", "mm3"]), "{props}");
    assert!(props["model"].as_str().unwrap().ends_with("yue2-demo-tiny.gguf"), "{props}");
    drop(d);
    let out = std::process::Command::new(yued_bin())
        .args(["serve", "--models", mm3.to_str().unwrap(), "--data-dir", dir.path().join("data3").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--model and --vae"), "{err}");
}

/// The frames a stream socket gave: (text events, binary frames each with the `tile`
/// event before it, or `None` when a binary frame followed no `tile`), and the close.
type Heard = (Vec<serde_json::Value>, Vec<(Option<serde_json::Value>, Vec<u8>)>, Option<(u16, String)>);

async fn hear(url: String, first: Option<String>) -> Heard {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    if let Some(body) = first {
        ws.send(Message::text(body)).await.unwrap();
    }
    let (mut events, mut binaries, mut close, mut last_tile) = (Vec::new(), Vec::new(), None, None);
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Text(t) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["event"] == "tile" {
                    assert!(last_tile.is_none(), "two tile events without a binary frame between: {v}");
                    last_tile = Some(v.clone());
                }
                events.push(v);
            }
            Message::Binary(b) => binaries.push((last_tile.take(), b.to_vec())),
            Message::Close(c) => {
                close = c.map(|c| (u16::from(c.code), c.reason.to_string()));
                break;
            }
            _ => {}
        }
    }
    (events, binaries, close)
}

/// A job of two tracks streams each as its own Ogg Opus file: every `tile` event is followed
/// by exactly one binary frame, and the frames of one track (by the `tile` before each)
/// decode to that track's length, live and for a listener after the end alike (one Ogg
/// stream spliced the two tracks' tiles into one file before).
#[test]
fn each_track_of_a_job_streams_its_own_opus_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "32"]);
    let body = song(8.0, 4).replace("\"steps\"", "\"synth_batch_size\": 2, \"steps\"");
    let id = d.submit(&body);
    let url = d.ws_url(&format!("/stream?id={id}"));
    for when in ["live", "after the end"] {
        let (events, binaries, close) = rt().block_on(hear(url.clone(), None));
        assert_eq!(close.as_ref().map(|c| c.0), Some(1000), "{when}: {close:?}");
        assert!(events.iter().any(|e| e["event"] == "done"), "{when}");
        // Live means from the hub, whose history holds the stage events a replay has not.
        assert_eq!(events.iter().any(|e| e["event"] == "stage"), when == "live", "{when}");
        let tiles = events.iter().filter(|e| e["event"] == "tile").count();
        assert_eq!(tiles, binaries.len(), "{when}: one binary frame after each tile event");
        let mut ogg = [Vec::new(), Vec::new()];
        for (tile, bytes) in &binaries {
            let tile = tile.as_ref().unwrap_or_else(|| panic!("{when}: a binary frame with no tile event"));
            ogg[tile["track"].as_u64().unwrap() as usize].extend_from_slice(bytes);
        }
        for (track, file) in ogg.iter().enumerate() {
            let (ch, pcm) = yued_audio::ogg_opus::decode_ogg_opus(file)
                .unwrap_or_else(|e| panic!("{when}: track {track} is no Ogg Opus file: {e}"));
            assert_eq!(ch, 2);
            let (got, want) = (pcm.len() / 2, 1920 * 200 - 64);
            assert!(got.abs_diff(want) <= 960, "{when}: track {track} decodes to {got} samples, not {want}");
        }
    }
}

/// `/synth/stream` as a client meets it: the `job` event names the fields the request does
/// not read (as `POST /synth` does), a socket that sends no request is closed (1008), a
/// frame over the bound gets 1009, and SIGTERM closes a listener with 1001 saying the job
/// resumes at the next start.
#[test]
fn synth_stream_names_ignored_fields_and_closes_with_the_right_codes() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("YUED_WS_PING_SECS", "1"), ("YUED_MAX_BODY_BYTES", "65536")];
    let mut d = Daemon::start_with_env(&dir.path().join("data"), free_port(), vec![], &env);
    let url = d.ws_url("/synth/stream?format=pcm16");
    let typo = song(1.0, 1).replace("\"steps\"", "\"duraton\": 9, \"steps\"");
    let (events, _, close) = rt().block_on(hear(url.clone(), Some(typo)));
    assert_eq!(events[0]["event"], "job");
    assert_eq!(events[0]["ignored"], serde_json::json!(["duraton"]), "{}", events[0]);
    assert_eq!(close.map(|c| c.0), Some(1000));
    let (_, _, close) = rt().block_on(hear(url.clone(), None));
    let (code, reason) = close.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.contains("no request within 3 s"), "{reason}");
    let (_, _, close) = rt().block_on(hear(url.clone(), Some("x".repeat(100_000))));
    assert_eq!(close.map(|c| c.0), Some(1009));
    let id = d.submit(&song(40.0, 64));
    let pid = d.child.id().to_string();
    let listen = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    let heard = rt().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(listen).await.unwrap();
        // Stopped once the song is running, while the socket listens.
        while let Some(Ok(m)) = ws.next().await {
            if matches!(&m, Message::Text(t) if t.as_str().contains("\"stage\"")) {
                break;
            }
        }
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Close(c) = m {
                return c.map(|c| (u16::from(c.code), c.reason.to_string()));
            }
        }
        None
    });
    let (code, reason) = heard.expect("a close frame at the shutdown");
    assert_eq!(code, 1001, "{reason}");
    assert!(reason.contains("daemon stopping: reconnect"), "{reason}");
    assert!(wait_exit(&mut d.child, Duration::from_secs(20)).is_some());
}

/// The OpenAI doors cancel the job of a caller that hangs up while it waits (the HTTP server
/// kept such a handler waiting: a transcription, or a song asked for as a file, ran to its
/// end for nobody, and an SDK's retries stacked three of them).
#[test]
fn a_caller_that_hangs_up_cancels_its_job() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let (wav, _) = chord_wav(300.0, 8000);
    let boundary = "hang-up";
    let form = form_data(boundary, &[("file", "audio/wav", &wav), ("model", "text/plain", b"sheetsage2")]);
    let speech = br#"{"model": "yue2", "input": "[verse] la la", "response_format": "flac", "duration": 40}"#;
    let calls: [(&str, String, &[u8]); 2] = [
        ("/v1/audio/transcriptions", format!("multipart/form-data; boundary={boundary}"), &form),
        ("/v1/audio/speech", "application/json".into(), speech),
    ];
    for (path, content_type, body) in calls {
        let before: Vec<String> = jobs_of(&d).into_iter().map(|(id, _)| id).collect();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
        write!(s, "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n").unwrap();
        write!(s, "Content-Length: {}\r\n\r\n", body.len()).unwrap();
        s.write_all(body).unwrap();
        let t0 = Instant::now();
        let id = loop {
            if let Some((id, _)) =
                jobs_of(&d).into_iter().find(|(id, state)| !before.contains(id) && state == "running")
            {
                break id;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "{path}: no job running");
            std::thread::sleep(Duration::from_millis(50));
        };
        drop(s);
        assert_eq!(d.wait(&id, Duration::from_secs(30))["status"], "cancelled", "{path}: {}", d.log());
    }
}

/// The caller's jobs as `GET /jobs` lists them: (id, status).
fn jobs_of(d: &Daemon) -> Vec<(String, String)> {
    let v: serde_json::Value = d.http.get(d.url("/jobs")).send().unwrap().json().unwrap();
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap().to_string(), j["status"].as_str().unwrap().to_string()))
        .collect()
}

/// A daemon whose stream memory is spent at once keeps every tile of a running job in its
/// spool file: a listener who joins mid-song still hears it from sample 0, byte for byte
/// what the listener who was there from the start heard, and the spool is freed at the end.
#[test]
fn a_late_listener_hears_spooled_tiles_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--vae-core", "16", "--stream-memory-bytes", "1"]);
    let id = d.submit(&song(40.0, 4));
    let listen = |url: String, first_tile: Option<tokio::sync::oneshot::Sender<()>>| async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let (mut pcm, mut events, mut first_tile) = (Vec::new(), Vec::new(), first_tile);
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Binary(b) => {
                    pcm.extend_from_slice(&b);
                    if let Some(tx) = first_tile.take() {
                        let _ = tx.send(());
                    }
                }
                Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                    events.push(v["event"].as_str().unwrap_or_default().to_string());
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        (pcm, events)
    };
    let url = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    let ((early, _), (late, late_events), spooled_mid_song) = rt().block_on(async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let early = tokio::spawn(listen(url.clone(), Some(tx)));
        rx.await.unwrap();
        // The job is still running (its first tile just arrived), so the hub serves this one.
        // The hub keeps the tile just after sending it: the gauge may lag the frame a moment.
        let metrics = d.url("/metrics");
        let text = tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            loop {
                let text = reqwest::blocking::get(&metrics).unwrap().text().unwrap();
                let spooled = text
                    .lines()
                    .any(|l| l.strip_prefix("yued_stream_kept_spooled_bytes ").is_some_and(|v| v.trim() != "0"));
                if spooled || t0.elapsed() > Duration::from_secs(10) {
                    break text;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .await
        .unwrap();
        let late = listen(url, None).await;
        (early.await.unwrap(), late, text)
    });
    assert_eq!(late_events.first().map(String::as_str), Some("queued"), "the late listener joined the live stream");
    let kept = |text: &str, name: &str| -> f64 {
        text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(-1.0)
    };
    assert!(kept(&spooled_mid_song, "yued_stream_kept_spooled_bytes") > 0.0, "tiles went to the spool");
    assert!(kept(&spooled_mid_song, "yued_stream_kept_memory_bytes") <= 1.0);
    let frames = 1000;
    assert_eq!(early.len(), (1920 * frames - 64) * 2 * 2, "the whole song");
    assert!(late == early, "the late listener heard the same bytes ({} against {})", late.len(), early.len());
    assert_eq!(d.wait(&id, Duration::from_secs(60))["status"], "done");
    let text = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    assert_eq!(kept(&text, "yued_stream_kept_spooled_bytes"), 0.0, "the job's end freed its spool");
    // The spool files were unnamed: nothing is left on disk.
    assert_eq!(std::fs::read_dir(data.join("streams")).unwrap().count(), 0);
}

/// How a start goes wrong, and how settings stack: a port in use or a keys file without keys
/// stops the start in one line (no panic) before the data directory is touched; flags win over
/// the config file even where the file alone is inconsistent; the file's host names compare in
/// any case; `--port 0` logs the port it took.
#[test]
fn startup_mistakes_are_one_line_and_flags_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let run = |data: &std::path::Path, port: u16, args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut child = Daemon::spawn(data, port, &args, &[]);
        let status = wait_exit(&mut child, Duration::from_secs(60)).expect("the start stops");
        (status.code(), std::fs::read_to_string(data.with_extension("log")).unwrap_or_default())
    };
    // The port is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let data = dir.path().join("in-use");
    let (code, log) = run(&data, port, &[]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains(&format!("binding 127.0.0.1:{port}")) && !log.contains("panicked"), "{log}");
    assert!(!data.exists(), "nothing written before the bind");
    // Keys asked for, none given.
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, "# nobody yet\n").unwrap();
    let data = dir.path().join("no-keys");
    let (code, log) = run(&data, free_port(), &["--api-keys-file", keys.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("no keys in this file") && !log.contains("panicked"), "{log}");
    assert!(!data.exists());
    // The file alone is inconsistent (a share above the default cap, both residency modes
    // against the flag); the flags settle it. Its host name is in capitals.
    let toml = dir.path().join("yued.toml");
    std::fs::write(&toml, "admission_share = 10\nkeep_loaded = true\nallowed_hosts = [\"Proxy.Example\"]\n").unwrap();
    let args = ["--config", toml.to_str().unwrap(), "--admission-cap", "16", "--strict"];
    let d = Daemon::start(&dir.path().join("flags"), &args);
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert_eq!(props["residency"], "strict", "{props}");
    let r = d.http.get(d.url("/props")).header("host", "proxy.example").send().unwrap();
    assert_eq!(r.status(), 200, "the file's allowed host, in its own case");
    drop(d);
    // --port 0: the log says which port it took, and it answers there.
    let data = dir.path().join("port0");
    let mut child = Daemon::spawn(&data, 0, &[], &[]);
    let t0 = Instant::now();
    let port = loop {
        let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
        if let Some(l) = log.lines().find(|l| l.contains("yued listening")) {
            let p = l.split("port=").nth(1).and_then(|p| p.split_whitespace().next()).unwrap().to_string();
            break p.parse::<u16>().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(port, 0);
    let t0 = Instant::now();
    while reqwest::blocking::get(format!("http://127.0.0.1:{port}/health")).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}
