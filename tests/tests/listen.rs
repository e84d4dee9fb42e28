//! `POST /tokenize` on the real daemon's embedded default (the tiny listening demo): a
//! recording becomes a job like any other (journaled, listed, its owner's alone, cancelled
//! between steps), its result the codes the engine gives the same file, and those codes
//! render again as a song; the 400s of yue2.cpp's list.
use std::time::{Duration, Instant};
use yued_e2e::*;

const B: &str = "e2e-tokenize-boundary";
const ALICE: &str = "alice-listen-secret-5e1f";
const BOB: &str = "bob-listen-secret-8a2c";
/// How long a job may take.
const LIMIT: Duration = Duration::from_secs(300);

fn form(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    form_data(B, parts)
}

fn post(d: &Daemon, body: Vec<u8>, key: &str) -> (u16, serde_json::Value) {
    let r = d
        .http
        .post(d.url("/tokenize"))
        .header("content-type", format!("multipart/form-data; boundary={B}"))
        .header("x-api-key", key)
        .body(body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

fn chord(seconds: f64, rate: u32) -> (Vec<u8>, yued_audio::Pcm) {
    chord_wav(seconds, rate)
}

#[test]
fn a_recording_becomes_codes_that_render_again_and_stays_its_owners() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{ALICE} name=alice\n{BOB} name=bob\n")).unwrap();
    let data = dir.path().join("data");
    let mut d = Daemon::start(&data, &["--api-keys-file", keys.to_str().unwrap(), "--strict"]);
    d.key = Some(ALICE.into());
    let props: serde_json::Value = serde_json::from_str(&d.get_as("/props", ALICE).1).unwrap();
    let head = std::path::PathBuf::from(props["tokenizer"].as_str().expect("the demo's tokenizer in /props"));
    let openapi: serde_json::Value = serde_json::from_str(&d.get_as("/openapi.json", ALICE).1).unwrap();
    assert!(openapi["paths"]["/tokenize"]["post"].is_object(), "/tokenize in the OpenAPI document");

    // 3.5 s of stereo at 44.1 kHz: 88 codes (87.5 rounds half to even), the engine's.
    let (wav, pcm) = chord(3.5, 44_100);
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &wav)]), ALICE);
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let st = d.wait_as(&id, ALICE, LIMIT);
    assert_eq!(st["status"], "done", "{st}");
    let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).header("x-api-key", ALICE).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let result: serde_json::Value = r.json().unwrap();
    let codes = result["codes"].as_str().unwrap().to_string();
    assert_eq!(codes.split(',').count(), 88);
    assert_eq!(codes, engine_codes(&head, &pcm), "the route's codes are the engine's for the same file");
    // The upload is gone once the job has ended; the journal lists the job as a tokenization.
    assert_eq!(std::fs::read_dir(data.join("uploads")).unwrap().count(), 0);
    let (_, list) = d.get_as("/jobs", ALICE);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let entry = list["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id.as_str()).unwrap().clone();
    assert_eq!((entry["upload"].as_str(), entry["status"].as_str()), (Some("tokenize"), Some("done")), "{entry}");

    // Bob sees it as an unknown job, cannot fetch or cancel it, and does not list it.
    for path in [format!("/job?id={id}"), format!("/job?id={id}&result=1")] {
        let (s, body) = d.get_as(&path, BOB);
        assert_eq!((s, body.contains("unknown job")), (404, true), "{path}: {body}");
    }
    let r = d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).header("x-api-key", BOB).send().unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert!(!d.get_as("/jobs", BOB).1.contains(&id));

    // The codes render again: a song whose replay request carries them.
    let song = d.submit(&format!(r#"{{"semantic_tokens": "{codes}", "steps": 1, "output_format": "wav16"}}"#));
    assert_eq!(d.wait(&song, Duration::from_secs(300))["status"], "done");
    let r = d.http.get(d.url(&format!("/job?id={song}&result=1"))).header("x-api-key", ALICE).send().unwrap();
    let parts = multipart_parts(&r.bytes().unwrap(), yued_protocol::MULTIPART_BOUNDARY);
    let replay = parts.iter().find(|(h, _)| h.contains("application/json")).expect("a replay request");
    let replay: serde_json::Value = serde_json::from_slice(&replay.1).unwrap();
    assert_eq!(replay["semantic_tokens"].as_str(), Some(codes.as_str()));
    // Under STRICT the listening group made way for the song's groups.
    assert!(
        d.log().contains("evicting (STRICT: one coexistence group at a time) module=yue2/tokenizer"),
        "{}",
        d.log()
    );

    // A long recording is cancelled between steps: it was running its tokenize stage.
    let (long, _) = chord(300.0, 8_000);
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &long)]), ALICE);
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    loop {
        let s: serde_json::Value = serde_json::from_str(&d.get_as(&format!("/job?id={id}"), ALICE).1).unwrap();
        if s["status"] == "running" && s["stage"] == "tokenize" {
            assert!(s["progress"].as_f64().unwrap() < 1.0, "{s}");
            break;
        }
        assert_ne!(s["status"], "done", "the long tokenization finished before it could be cancelled: {s}");
        assert!(t0.elapsed() < Duration::from_secs(120), "{s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second recording waits behind it on the same stage: it shows that stage, not begun.
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &wav)]), ALICE);
    assert_eq!(s, 200, "{v}");
    let behind = v["id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    loop {
        let s: serde_json::Value = serde_json::from_str(&d.get_as(&format!("/job?id={behind}"), ALICE).1).unwrap();
        if s["status"] == "running" && s["stage"].is_string() {
            assert_eq!((s["stage"].as_str(), s["progress"].as_f64()), (Some("tokenize"), Some(0.0)), "{s}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the waiting job shows no stage: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = d.http.post(d.url(&format!("/job?id={id}&cancel=1"))).header("x-api-key", ALICE).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(d.wait_as(&id, ALICE, LIMIT)["status"], "cancelled");
    assert_eq!(d.wait_as(&behind, ALICE, LIMIT)["status"], "done");
    let t0 = Instant::now();
    while std::fs::read_dir(data.join("uploads")).unwrap().count() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "the cancelled job's upload stays behind");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The 400s: no audio part, audio that does not decode, under a second, an unknown part,
    // the part twice, not a form at all.
    let (short, _) = chord(0.5, 44_100);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // An empty form (its closing delimiter alone) is no multipart body to actix.
        (form(&[]), "multipart"),
        (form(&[("audio", "audio/mpeg", b"definitely not an mp3 file")]), "audio:"),
        (form(&[("audio", "audio/wav", &short)]), "at least one second"),
        (form(&[("request", "application/json", b"{}")]), "unknown part"),
        (form(&[("audio", "audio/wav", &wav), ("audio", "audio/wav", &wav)]), "twice"),
    ];
    for (body, needle) in cases {
        let (s, v) = post(&d, body, ALICE);
        assert_eq!(s, 400, "{needle}: {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{needle}: {v}");
    }
    // Twenty minutes of silence in FLAC, a few hundred kilobytes that decode to 230 MB of
    // samples: refused for its length, measured without holding them (the daemon's peak
    // resident memory does not move by the decode's size).
    let quiet = yued_audio::Pcm::new(48_000, 1, vec![0.0; 48_000 * 1200]);
    let bomb = yued_audio::encode::encode(&quiet, yued_protocol::OutputFormat::Flac, 0).unwrap();
    drop(quiet);
    assert!(bomb.len() < 4 << 20, "{} bytes", bomb.len());
    let peak = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
        let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB");
        kb.trim().parse::<u64>().unwrap() * 1024
    };
    let before = peak();
    let (s, v) = post(&d, form(&[("audio", "audio/flac", &bomb)]), ALICE);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("longer than the 900 s /tokenize takes"), "{v}");
    let grew = peak().saturating_sub(before);
    assert!(grew < 100 << 20, "the daemon's peak memory grew by {} MB measuring the upload", grew >> 20);
    let r = d.http.post(d.url("/tokenize")).header("x-api-key", ALICE).body("{}").send().unwrap();
    assert_eq!(r.status().as_u16(), 415, "not a form");
    assert_eq!(std::fs::read_dir(data.join("uploads")).unwrap().count(), 0, "no refused upload is kept");
}

#[test]
fn without_a_tokenizer_the_route_says_which_flag_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let (bb, vae) = yued_engine::models::yue2::demo::write_demo(
        &models,
        yued_engine::models::yue2::demo::Preset::Tiny,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--model", bb.to_str().unwrap(), "--vae", vae.to_str().unwrap()]);
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &chord(2.0, 24_000).0)]), "");
    assert_eq!(s, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--tokenizer"), "{v}");
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert!(props.get("tokenizer").is_none(), "{props}");
}
