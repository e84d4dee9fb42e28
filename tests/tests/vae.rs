//! `POST /vae` on the real daemon: encode an upload to latents, decode latents to audio in
//! the requested format, and the 400s of the seed's list.
use std::time::Duration;
use yued_e2e::*;

const B: &str = "e2e-vae-boundary";

/// A multipart/form-data body from (name, content type, bytes) parts.
fn form(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, ct, data) in parts {
        body.extend_from_slice(format!("--{B}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}.bin\"\r\nContent-Type: {ct}\r\n\r\n").as_bytes());
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
    body
}

fn post(d: &Daemon, body: Vec<u8>) -> (u16, serde_json::Value) {
    let r = d.http.post(d.url("/vae")).header("content-type", format!("multipart/form-data; boundary={B}")).body(body).send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

fn result(d: &Daemon, id: &str) -> Vec<(String, Vec<u8>)> {
    let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    multipart_parts(&r.bytes().unwrap(), yued_protocol::MULTIPART_BOUNDARY)
}

/// One second of a mono 44.1 kHz sweep as WAV: the upload goes through resampling.
fn sweep_wav() -> Vec<u8> {
    let data: Vec<f32> = (0..44100)
        .map(|i| {
            let t = i as f32 / 44100.0;
            0.4 * (2.0 * std::f32::consts::PI * (300.0 + 400.0 * t) * t).sin()
        })
        .collect();
    yued_audio::encode::encode(&yued_audio::Pcm::new(44100, 1, data), yued_protocol::OutputFormat::Wav16, 128).unwrap()
}

#[test]
fn vae_jobs_encode_and_decode_and_refuse_bad_uploads() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);

    // Encode: 1 s at 44.1 kHz = 48000 samples at 48 kHz = 25 latent frames.
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &sweep_wav())]));
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let st = d.wait(&id, Duration::from_secs(120));
    assert_eq!(st["status"], "done", "{st}");
    assert!(st.get("metrics").is_none() || st["metrics"].is_null(), "no synthesis metrics on a VAE job: {st}");
    let parts = result(&d, &id);
    assert_eq!(parts.len(), 1);
    assert!(parts[0].0.contains("application/octet-stream"), "{}", parts[0].0);
    let latents = parts[0].1.clone();
    assert_eq!(latents.len(), 25 * 64 * 4);
    // The upload is gone once the job has ended.
    assert_eq!(std::fs::read_dir(dir.path().join("data/uploads")).unwrap().count(), 0);

    // Decode those latents to FLAC through the request part.
    let (s, v) = post(&d, form(&[("src_latents", "application/octet-stream", &latents), ("request", "application/json", br#"{"output_format": "flac", "peak_clip": 0}"#)]));
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(d.wait(&id, Duration::from_secs(120))["status"], "done");
    let parts = result(&d, &id);
    assert_eq!(parts.len(), 1);
    assert!(parts[0].0.contains("audio/flac"), "{}", parts[0].0);
    let pcm = yued_audio::decode::decode(&parts[0].1).unwrap();
    assert_eq!((pcm.sample_rate, pcm.channels, pcm.frames()), (48000, 2, 1920 * 25 - 64));

    // The 400s: both parts, neither, audio that does not decode, latents that are not whole
    // frames, a bad request part, an unknown part, not a form at all.
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (form(&[("audio", "audio/wav", &sweep_wav()), ("src_latents", "application/octet-stream", &latents)]), "not both"),
        (form(&[("request", "application/json", b"{}")]), "exactly one"),
        (form(&[("audio", "audio/mpeg", b"definitely not an mp3 file")]), "audio:"),
        (form(&[("src_latents", "application/octet-stream", &latents[..100])]), "src_latents"),
        (form(&[("src_latents", "application/octet-stream", &latents), ("request", "application/json", br#"{"output_format": "xyz"}"#)]), "output_format"),
        (form(&[("bogus", "text/plain", b"x")]), "unknown part"),
    ];
    for (body, needle) in cases {
        let (s, v) = post(&d, body);
        assert_eq!(s, 400, "{needle}: {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{needle}: {v}");
    }
    // A body cut inside its closing delimiter is answered at once (the chaos run saw the
    // connection hang on each of these), and a WAV whose header says 0 Hz is a 400 (it made
    // the decoder panic: a 503).
    let whole = form(&[("src_latents", "application/octet-stream", &latents)]);
    for cut in [3, 4, 5, 8, B.len() + 4, B.len() + 6, B.len() + 7, B.len() + 8] {
        let started = std::time::Instant::now();
        let (s, v) = post(&d, whole[..whole.len() - cut].to_vec());
        assert_eq!(s, 400, "cut {cut}: {v}");
        assert!(v["error"].as_str().unwrap().contains("closing delimiter"), "cut {cut}: {v}");
        assert!(started.elapsed() < Duration::from_secs(10), "cut {cut}: answered after {:?}", started.elapsed());
    }
    // Without its last CRLF, or its last LF, the body is whole.
    for cut in [1, 2] {
        let (s, v) = post(&d, whole[..whole.len() - cut].to_vec());
        assert_eq!(s, 200, "cut {cut}: {v}");
        d.wait(v["id"].as_str().unwrap(), Duration::from_secs(120));
    }
    let mut zero_rate = sweep_wav();
    zero_rate[24..28].copy_from_slice(&0u32.to_le_bytes());
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &zero_rate)]));
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("audio:"), "{v}");
    let r = d.http.post(d.url("/vae")).header("content-type", "application/json").body("{}").send().unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // Nothing of the rejected uploads stays on disk.
    assert_eq!(std::fs::read_dir(dir.path().join("data/uploads")).unwrap().count(), 0);

    // /props lists every format with its MIME type.
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    let names: Vec<&str> = props["output_formats"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    for f in ["mp3", "opus", "ogg", "flac", "aac", "m4a", "wav16", "wav24", "wav32"] {
        assert!(names.contains(&f), "{f} missing from {names:?}");
    }
}

#[test]
fn an_upload_over_the_limit_is_413_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--max-upload-bytes", "4096"]);
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &sweep_wav())]));
    assert_eq!(s, 413, "{v}");
    assert!(v["error"].as_str().unwrap().contains("4096"), "{v}");
    assert_eq!(std::fs::read_dir(dir.path().join("data/uploads")).unwrap().count(), 0);
}
