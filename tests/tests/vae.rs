//! `POST /vae` on the real daemon: encode an upload to latents, decode latents to audio in
//! the requested format, and the 400s of yue2.cpp's list.
use std::time::Duration;
use yued_e2e::*;

const B: &str = "e2e-vae-boundary";

/// A multipart/form-data body from (name, content type, bytes) parts.
fn form(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, ct, data) in parts {
        body.extend_from_slice(
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"{name}\"; \
            filename=\"{name}.bin\"\r\nContent-Type: {ct}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
    body
}

fn post(d: &Daemon, body: Vec<u8>) -> (u16, serde_json::Value) {
    let r = d
        .http
        .post(d.url("/vae"))
        .header("content-type", format!("multipart/form-data; boundary={B}"))
        .body(body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

fn result(d: &Daemon, id: &str) -> Vec<(String, Vec<u8>)> {
    let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // The family's boundary (MiniMax Music 3's jobs answer with minimaxmusic.cpp's).
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    let boundary =
        ct.split("boundary=").nth(1).unwrap_or(yued_protocol::MULTIPART_BOUNDARY).trim_matches('"').to_string();
    multipart_parts(&r.bytes().unwrap(), &boundary)
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
    let (s, v) = post(
        &d,
        form(&[
            ("src_latents", "application/octet-stream", &latents),
            ("request", "application/json", br#"{"output_format": "flac", "peak_clip": 0, "style": "x"}"#),
        ]),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["ignored"], serde_json::json!(["style"]), "a VAE job reads no style: {v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(d.wait(&id, Duration::from_secs(120))["status"], "done");
    let parts = result(&d, &id);
    assert_eq!(parts.len(), 1);
    assert!(parts[0].0.contains("audio/flac"), "{}", parts[0].0);
    let pcm = yued_audio::decode::decode(&parts[0].1).unwrap();
    assert_eq!((pcm.sample_rate, pcm.channels, pcm.frames()), (48000, 2, 1920 * 25 - 64));
    // The codec's quantized files decode too, told by their magic as `yued codec decode`
    // tells them (they were refused as "not whole frames" or "NaN").
    let values: Vec<f32> = latents.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let nac8 = yued_engine::latent::encode_latents(&values, 64, yued_engine::latent::LatentFormat::Nac8);
    let (s, v) = post(&d, form(&[("src_latents", "application/octet-stream", &nac8)]));
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(d.wait(&id, Duration::from_secs(120))["status"], "done");

    // The 400s: both parts, neither, audio that does not decode, latents that are not whole
    // frames, a bad request part, an unknown part, not a form at all.
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            form(&[("audio", "audio/wav", &sweep_wav()), ("src_latents", "application/octet-stream", &latents)]),
            "not both",
        ),
        (form(&[("request", "application/json", b"{}")]), "exactly one"),
        (form(&[("audio", "audio/mpeg", b"definitely not an mp3 file")]), "audio:"),
        (form(&[("src_latents", "application/octet-stream", &latents[..100])]), "src_latents"),
        (
            form(&[
                ("src_latents", "application/octet-stream", &latents),
                ("request", "application/json", br#"{"output_format": "xyz"}"#),
            ]),
            "output_format",
        ),
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
    assert_eq!(r.status().as_u16(), 415, "not a form");
    // Nothing of the rejected uploads stays on disk.
    assert_eq!(std::fs::read_dir(dir.path().join("data/uploads")).unwrap().count(), 0);

    // /props lists every format with its MIME type.
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    let names: Vec<&str> =
        props["output_formats"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
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
    // A declared length past the bound is answered before any of the body is sent.
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(d.url("/").trim_start_matches("http://").trim_end_matches('/')).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /vae HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary={B}\r\n\
        Content-Length: 10000000000\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    tcp.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413", "{}", String::from_utf8_lossy(&answer));
}

/// Upload bodies share a bounded memory: a body's room (three times its declared length) is
/// taken at its first byte; while one body is being read, a second that finds no room waits,
/// then is a 503 with Retry-After, never read; once the first is gone its room is free again.
#[test]
fn upload_bodies_share_a_bounded_memory() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // The room is at least three times the bound and its 1 MiB of form slack: 6 MiB here.
    let args = ["--max-upload-bytes", "1048576", "--upload-memory-bytes", "1"];
    let d = Daemon::start(&dir.path().join("data"), &args);
    // A body declared at 1.5 MiB of which only the first bytes arrive: it holds 4.5 MiB.
    let mut slow = std::net::TcpStream::connect(d.url("").trim_start_matches("http://")).unwrap();
    let head = format!(
        "POST /vae HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary={B}\r\n\
        Content-Length: 1572864\r\n\r\n--{B}\r\n"
    );
    slow.write_all(head.as_bytes()).unwrap();
    let probe = || {
        let t0 = std::time::Instant::now();
        let r = d
            .http
            .post(d.url("/vae"))
            .header("content-type", format!("multipart/form-data; boundary={B}"))
            .body(vec![b'x'; 1 << 20])
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        (status, retry, t0.elapsed(), r.json::<serde_json::Value>().unwrap_or_default())
    };
    // A body of 1 MiB needs 3 MiB: no room. (Not a form: with room it is a 400.) The slow
    // body's handler may not have taken its room yet on a loaded machine: then the probe had
    // room (a 400), and the next one finds none.
    let mut tries = 0;
    let (status, retry, waited, v) = loop {
        let p = probe();
        tries += 1;
        if p.0 != 400 || tries == 5 {
            break p;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!((status, retry.as_deref()), (503, Some("5")), "{v}");
    assert!(waited >= Duration::from_secs(9), "it waited for room first: {waited:?}");
    assert!(v["error"].as_str().unwrap().contains("upload memory"), "{v}");
    // The first goes (its client hung up): the same body finds room.
    drop(slow);
    let t0 = std::time::Instant::now();
    loop {
        let (status, _, _, v) = probe();
        if status == 400 {
            break;
        }
        assert_eq!(status, 503, "{v}");
        assert!(t0.elapsed() < Duration::from_secs(60), "the hung-up body's room was never freed");
    }
    // And an upload that is one goes through.
    assert_eq!(post(&d, form(&[("audio", "audio/wav", &sweep_wav())])).0, 200);
}

/// The file under the data directory whose name is `name` (the demo writes its models there).
fn find(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if p.is_dir() {
            if let Some(f) = find(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// `POST /vae` of a request part naming `"family": "mm3"`: MiniMax Music 3's flow VAE
/// encodes (the posterior mean, what `yued codec encode --family mm3` writes for the same
/// file) and decodes at 44.1 kHz (Opus at 48), and the MiniMax bounds are its 400s.
#[test]
fn a_minimax_vae_job_encodes_and_decodes_with_the_flow_vae() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &[]);
    let mm3 = br#"{"family": "mm3"}"#;

    // Encode: 1 s at 44.1 kHz = 86.13 latent frames of 512 samples, padded to 87 (of the
    // demo vocoder's latent width: 128 at the published size, fewer on the tiny demo).
    let wav = sweep_wav();
    let (s, v) = post(&d, form(&[("audio", "audio/wav", &wav), ("request", "application/json", mm3)]));
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let st = d.wait(&id, Duration::from_secs(120));
    assert_eq!(st["status"], "done", "{st}; log: {}", d.log());
    let parts = result(&d, &id);
    let latents = parts[0].1.clone();
    assert!(latents.len().is_multiple_of(87 * 4 * 2), "{} bytes", latents.len());
    let lat = latents.len() / (87 * 4);
    // The CLI on the same vocoder file gives the same latents.
    let vae = find(&data, "mm3-demo-tiny-vae.gguf").expect("the demo's MiniMax vocoder");
    let input = dir.path().join("sweep.wav");
    std::fs::write(&input, &wav).unwrap();
    let out = dir.path().join("sweep.vae");
    let cli = std::process::Command::new(yued_bin())
        .args(["codec", "encode", "--family", "mm3", "--vae"])
        .arg(&vae)
        .arg("-i")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    let (a, b) = (f32s(&latents), f32s(&std::fs::read(&out).unwrap()));
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(0f32, f32::max);
    assert!(diff <= 1e-5 * scale.max(1.0), "daemon and CLI latents differ by {diff} (scale {scale})");

    // Decode them: 44.1 kHz stereo, 512 samples a frame; Opus is coded at 48 kHz.
    for (format, rate, samples) in [("wav32", 44100, 87 * 512), ("flac", 44100, 87 * 512)] {
        let req = format!(r#"{{"family": "mm3", "output_format": "{format}"}}"#);
        let (s, v) = post(
            &d,
            form(&[
                ("src_latents", "application/octet-stream", &latents),
                ("request", "application/json", req.as_bytes()),
            ]),
        );
        assert_eq!(s, 200, "{format}: {v}");
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(d.wait(&id, Duration::from_secs(120))["status"], "done", "{format}: {}", d.log());
        let parts = result(&d, &id);
        let pcm = yued_audio::decode::decode(&parts[0].1).unwrap();
        assert_eq!((pcm.sample_rate, pcm.channels, pcm.frames()), (rate, 2, samples), "{format}");
    }
    let (s, v) = post(
        &d,
        form(&[
            ("src_latents", "application/octet-stream", &latents),
            ("request", "application/json", br#"{"family": "mm3", "output_format": "opus"}"#),
        ]),
    );
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(d.wait(&id, Duration::from_secs(120))["status"], "done");
    let pcm = yued_audio::decode::decode(&result(&d, &id)[0].1).unwrap();
    assert_eq!((pcm.sample_rate, pcm.channels), (48000, 2));
    assert!((pcm.seconds() - 87.0 * 512.0 / 44100.0).abs() < 0.03, "{} s", pcm.seconds());

    // The MiniMax 400s name their field: a vocoder file not in the registry, latents of
    // another width, a bound of the MiniMax request.
    let yue2_width = vec![0u8; 4 * (10 * lat + 1)];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            form(&[
                ("src_latents", "application/octet-stream", &latents),
                ("request", "application/json", br#"{"family": "mm3", "vae_model": "nope.gguf"}"#),
            ]),
            "vae_model",
        ),
        (
            form(&[("src_latents", "application/octet-stream", &yue2_width), ("request", "application/json", mm3)]),
            "src_latents",
        ),
        (
            form(&[
                ("src_latents", "application/octet-stream", &latents),
                ("request", "application/json", br#"{"family": "mm3", "steps": 1}"#),
            ]),
            "steps",
        ),
        (
            form(&[
                ("src_latents", "application/octet-stream", &latents),
                ("request", "application/json", br#"{"family": "mm3", "output_format": "xyz"}"#),
            ]),
            "output_format",
        ),
    ];
    for (body, needle) in cases {
        let (s, v) = post(&d, body);
        assert_eq!(s, 400, "{needle}: {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{needle}: {v}");
    }
    assert_eq!(std::fs::read_dir(data.join("uploads")).unwrap().count(), 0);
}
