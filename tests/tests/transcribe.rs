//! `POST /transcribe` on the real daemon's embedded default (the tiny listening demo's
//! SheetSage2 head): a recording becomes a job like any other (journaled, listed as a
//! transcription, its owner's alone), its result the score the engine gives the same file,
//! or the engine's reason for none; `melody_only`; the 400s; the route's 404 without a
//! transcriber.
use std::time::Duration;
use yued_e2e::*;

const B: &str = "e2e-transcribe-boundary";
const ALICE: &str = "alice-transcribe-secret-77d1";
const BOB: &str = "bob-transcribe-secret-19c4";
/// How long a job may take.
const LIMIT: Duration = Duration::from_secs(900);

/// A form part: name, content type, bytes.
type Part<'a> = (&'a str, &'a str, &'a [u8]);

fn post(d: &Daemon, parts: &[Part], key: &str) -> (u16, serde_json::Value) {
    let r = d
        .http
        .post(d.url("/transcribe"))
        .header("content-type", format!("multipart/form-data; boundary={B}"))
        .header("x-api-key", key)
        .body(form_data(B, parts))
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

/// The job's outcome as the engine's would read: the score, or the reason for none.
fn outcome(d: &Daemon, id: &str) -> Result<String, String> {
    let st = d.wait_as(id, ALICE, LIMIT);
    match st["status"].as_str() {
        Some("done") => {
            let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).header("x-api-key", ALICE).send().unwrap();
            assert_eq!(r.headers()["content-type"], "application/json");
            let v: serde_json::Value = r.json().unwrap();
            Ok(v["abc"].as_str().expect("a score").to_string())
        }
        _ => {
            let why = st["error"].as_str().unwrap_or_default();
            Err(why.strip_prefix("no score: ").unwrap_or(why).to_string())
        }
    }
}

#[test]
fn a_recording_becomes_the_engine_s_score_and_stays_its_owners() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{ALICE} name=alice\n{BOB} name=bob\n")).unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--api-keys-file", keys.to_str().unwrap()]);
    let props: serde_json::Value = serde_json::from_str(&d.get_as("/props", ALICE).1).unwrap();
    let head = std::path::PathBuf::from(props["transcriber"].as_str().expect("the demo's transcriber in /props"));
    let openapi: serde_json::Value = serde_json::from_str(&d.get_as("/openapi.json", ALICE).1).unwrap();
    assert!(openapi["paths"]["/transcribe"]["post"].is_object(), "/transcribe in the OpenAPI document");

    let (wav, pcm) = chord_wav(6.0, 44_100);
    let mut ids = vec![];
    for (melody_only, flag) in [(false, None), (true, Some("true"))] {
        let mut parts: Vec<Part> = vec![("audio", "audio/wav", &wav)];
        if let Some(f) = flag {
            parts.push(("melody_only", "text/plain", f.as_bytes()));
        }
        let (s, v) = post(&d, &parts, ALICE);
        assert_eq!(s, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        let got = outcome(&d, &id);
        let want = engine_score(&head, &pcm, melody_only);
        assert_eq!(got, want, "melody_only {melody_only}: the route's outcome is the engine's for the same file");
        ids.push(id);
    }
    assert_eq!(std::fs::read_dir(data.join("uploads")).unwrap().count(), 0, "the uploads are gone");
    let list: serde_json::Value = serde_json::from_str(&d.get_as("/jobs", ALICE).1).unwrap();
    let ops: Vec<_> = ids
        .iter()
        .map(|id| {
            let e = list["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id.as_str()).unwrap();
            e["upload"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ops, ["transcribe", "transcribe_melody"]);

    // Bob sees neither job.
    for id in &ids {
        for path in [format!("/job?id={id}"), format!("/job?id={id}&result=1")] {
            let (s, body) = d.get_as(&path, BOB);
            assert_eq!((s, body.contains("unknown job")), (404, true), "{path}: {body}");
        }
        assert!(!d.get_as("/jobs", BOB).1.contains(id.as_str()));
    }

    // The 400s: no audio, a bad flag, under MERT's 1025 samples, an unknown part.
    let (short, _) = chord_wav(0.02, 24_000);
    let cases: Vec<(Vec<Part>, &str)> = vec![
        (vec![("melody_only", "text/plain", b"true")], "audio: missing"),
        (vec![("audio", "audio/wav", &wav), ("melody_only", "text/plain", b"maybe")], "melody_only"),
        (vec![("audio", "audio/wav", &short)], "1025 samples"),
        (vec![("audio", "audio/mpeg", b"not an mp3")], "audio:"),
        (vec![("request", "application/json", b"{}")], "unknown part"),
    ];
    for (parts, needle) in cases {
        let (s, v) = post(&d, &parts, ALICE);
        assert_eq!(s, 400, "{needle}: {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{needle}: {v}");
    }
    assert_eq!(std::fs::read_dir(data.join("uploads")).unwrap().count(), 0, "no refused upload is kept");
}

#[test]
fn without_a_transcriber_the_route_says_which_flag_serves_it() {
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
    let (s, v) = post(&d, &[("audio", "audio/wav", &chord_wav(2.0, 24_000).0)], "");
    assert_eq!(s, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--transcriber"), "{v}");
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert!(props.get("transcriber").is_none(), "{props}");
}

/// A ten-minute upload through the daemon, on the parity fixture's head (tiny random weights
/// of the PyTorch reference, 9 s windows: 199 of them, each later one continuing its overlap's
/// events): the job runs every window and ends as the engine ends the same file. The demo's
/// head is not used here: its random weights decode each window to its budget, so its second
/// or third window's overlap prefix fills the context and is refused (the reference's rule).
#[test]
fn a_ten_minute_upload_runs_through_its_windows_as_the_engine_does() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    yued_engine::models::mert::convert::convert(&fixtures.join("mert/ckpt/mert"), &models).unwrap();
    let (head, _) =
        yued_engine::models::sheetsage2::convert::convert(&fixtures.join("sheetsage2/ckpt"), &models).unwrap();
    let rate = 24_000;
    let samples: Vec<f32> = (0..600 * rate)
        .map(|i| {
            let t = i as f32 / rate as f32;
            0.3 * (2.0 * std::f32::consts::PI * (220.0 + 0.5 * (t % 60.0)) * t).sin() + 0.2 * (1100.0 * t).sin()
        })
        .collect();
    let wav = yued_audio::encode::encode(
        &yued_audio::Pcm::new(rate as u32, 1, samples),
        yued_protocol::OutputFormat::Wav16,
        128,
    )
    .unwrap();
    let pcm = yued_audio::decode::decode(&wav).unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--transcriber", head.to_str().unwrap()]);
    let (s, v) = post(&d, &[("audio", "audio/wav", &wav)], ALICE);
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap();
    let got = outcome(&d, id);
    assert!(!got.as_ref().is_err_and(|e| e.contains("Overlap prefix")), "every window ran: {got:?}");
    assert_eq!(got, engine_score(&head, &pcm, false), "the route's outcome is the engine's for the same file");
}
