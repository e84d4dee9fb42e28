//! The `yued` model tools end to end, as a user runs them: real binary, real files.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `yued` to its end, one run at a time in this file: ggml's CPU workers spin at every
/// node barrier, and two runs side by side on 2 cores spin for each other's descheduled
/// threads (this file's tests took 259 s side by side against 27 s one after another).
fn yued(args: &[&str]) -> Output {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_yued")).args(args).env("NO_COLOR", "1").output().expect("run yued")
}

fn ok(args: &[&str]) -> String {
    let o = yued(args);
    assert!(o.status.success(), "yued {args:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let o = yued(args);
    assert_eq!(o.status.code(), Some(1), "yued {args:?} should fail cleanly (exit 1), got {:?}", o.status);
    String::from_utf8(o.stderr).unwrap()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn demo_inspect_tokenize_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&["demo-model", "--out", s(dir.path()), "--preset", "tiny", "--seed", "4"]);
    assert!(out.contains("random weights"));
    let bb = dir.path().join("yue2-demo-tiny.gguf");
    let inspect = ok(&["gguf", "inspect", s(&bb)]);
    assert!(
        inspect.contains("architecture: yue2")
            && inspect.contains("model.layers.1.nar_mlp.down_proj.weight")
            && inspect.contains("tensors (55,"),
        "{inspect}"
    );
    assert_eq!(ok(&["tokenize", "--model", s(&bb), "--text", "Hé"]).trim(), "72,195,169");
    let q = dir.path().join("q8.gguf");
    ok(&["quantize", s(&bb), s(&q), "--type", "Q8_0"]);
    assert!(ok(&["gguf", "inspect", s(&q)]).contains("q8_0"));
    // A reader that stops early (`| head`): the tool ends quietly, with SIGPIPE's shell status.
    // The reader is gone before the tool starts (a reader dropped after the start could come
    // after a short output has all fit in the pipe).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = Command::new(env!("CARGO_BIN_EXE_yued"))
        .args(["gguf", "inspect", s(&bb)])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(141), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    let vae = dir.path().join("yue2-demo-tiny-vae.gguf");
    assert!(fails(&["quantize", s(&vae), s(&q), "--type", "Q8_0"]).contains("never quantized"));
    assert!(
        yued(&["quantize", s(&bb), s(&q), "--type", "Q4_0"]).status.code() == Some(2),
        "a bad --type is a usage error"
    );
}

/// Outputs never replace what a run reads (or, by default, any file already there): these
/// runs destroyed a model, a request and a recording before.
#[test]
fn outputs_never_replace_the_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let models = d.join("models");
    ok(&["demo-model", "--out", s(&models)]);
    let bb = models.join("yue2-demo-tiny.gguf");
    let before = std::fs::read(&bb).unwrap();
    assert!(fails(&["quantize", s(&bb), s(&bb), "--type", "Q8_0"]).contains("is the input"));
    assert_eq!(std::fs::read(&bb).unwrap(), before, "the model is whole");

    // A recording, its latents (the default name), and a decode that would land on it.
    let wav = d.join("song.wav");
    write_stereo_48k(&wav, 9600, |i| (((i as f32 * 0.05).sin() * 9000.0) as i16, 0));
    let recording = std::fs::read(&wav).unwrap();
    let vae = models.join("yue2-demo-tiny-vae.gguf");
    ok(&["codec", "encode", "--vae", s(&vae), "-i", s(&wav), "--device", "CPU"]);
    assert!(d.join("song.vae").exists());
    let e = fails(&["codec", "decode", "--vae", s(&vae), "-i", s(&d.join("song.vae")), "--device", "CPU"]);
    assert!(e.contains("song.wav exists: name the output with -o"), "{e}");
    assert_eq!(std::fs::read(&wav).unwrap(), recording, "the recording is whole");
    assert!(fails(&["codec", "encode", "--vae", s(&vae), "-i", s(&wav), "-o", s(&wav), "--device", "CPU"])
        .contains("is the input"));

    // A request beside the song it names: the replay request would land on it.
    let req = d.join("song.json");
    let body = r#"{"style": "x", "lyrics": "[verse] la", "cot": "off", "duration": 0.5, "steps": 1,
        "output_format": "wav16", "stylee": "lo-fi"}"#;
    std::fs::write(&req, body).unwrap();
    let out = d.join("song.wav");
    let run = ["synth", "--models", s(&models), "--request", s(&req), "--device", "CPU", "--out"];
    assert!(fails(&[&run[..], &[s(&out)]].concat()).contains("is the input"));
    assert!(fails(&["compose", "--models", s(&models), "--request", s(&req), "--out", s(&req), "--device", "CPU"])
        .contains("is the input"));
    assert_eq!(std::fs::read_to_string(&req).unwrap(), body, "the request is whole");
    // A field the request does not read is named.
    let o = yued(&[&run[..], &[s(&d.join("elsewhere/take.wav"))]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let warned = String::from_utf8_lossy(&o.stderr);
    assert!(warned.contains("does not read stylee"), "{warned}");
    assert!(d.join("elsewhere/take.wav").exists(), "the output's folder is made");
    // YuE2's flags on a MiniMax request are refused, not passed over.
    ok(&["demo-model", "--family", "mm3", "--out", s(&models)]);
    let mm3 = d.join("mm3.json");
    std::fs::write(&mm3, r#"{"caption": "x", "lyrics": "[verse] la", "duration": 0.5, "steps": 2}"#).unwrap();
    let take = d.join("take-mm3.wav");
    let e = fails(&["synth", "--models", s(&models), "--request", s(&mm3), "--out", s(&take), "--latent", "z"]);
    assert!(e.contains("--latent is YuE2's"), "{e}");
}

#[test]
fn bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.gguf");
    let e = fails(&["gguf", "inspect", s(&missing)]);
    assert!(e.contains("nope.gguf") && e.matches("No such file").count() == 1, "the OS error once: {e}");
    assert!(fails(&["gguf", "inspect", s(dir.path())]).contains("a directory, not a GGUF file"));
    // truncated copy of a real model
    let src = std::fs::read(repo().join("fixtures/ar/tiny-qwen3.gguf")).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &src[..src.len() / 2]).unwrap();
    let e = fails(&["tokenize", "--model", s(&cut), "--text", "x"]);
    assert!(e.contains("cut.gguf") && e.contains("truncated"), "{e}");
    // a VAE where a backbone is expected
    ok(&["demo-model", "--out", s(dir.path())]);
    let e = fails(&[
        "lm-eval",
        "--model",
        s(&dir.path().join("yue2-demo-tiny-vae.gguf")),
        "--tokens",
        "1",
        "--out",
        s(&dir.path().join("x.f32")),
        "--device",
        "CPU",
    ]);
    assert!(e.contains("yue2-vae") && e.contains("expected 'yue2'"), "{e}");
    let e = fails(&[
        "lm-eval",
        "--model",
        s(&repo().join("fixtures/ar/tiny-qwen3.gguf")),
        "--tokens",
        "1,999",
        "--out",
        "x",
        "--device",
        "CPU",
    ]);
    assert!(e.contains("999"), "{e}");
    // A request whose prompt cannot fit the cache is refused by name, not by a panic.
    let req = dir.path().join("plan.json");
    std::fs::write(&req, r#"{"style": "x", "lyrics": "[verse] la", "cot": "full"}"#).unwrap();
    let bb = dir.path().join("yue2-demo-tiny.gguf");
    let e = fails(&["plan", "--model", s(&bb), "--request", s(&req), "--max-seq", "5", "--device", "CPU"]);
    assert!(e.contains("do not fit the KV cache of 5"), "{e}");
    assert_eq!(yued(&["audio-convert", "-i", "x.wav", "-o", "y.mp3", "--bitrate", "1"]).status.code(), Some(2));
}

fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn lm_eval_prefill_and_decode_agree_with_each_other_and_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let model = repo().join("fixtures/ar/tiny-qwen3.gguf");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("fixtures/ar/cases.json")).unwrap()).unwrap();
    let toks: Vec<String> = cases["A"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let toks = toks.join(",");
    let (p, d) = (dir.path().join("p.f32"), dir.path().join("d.f32"));
    ok(&["lm-eval", "--model", s(&model), "--tokens", &toks, "--out", s(&p), "--mode", "prefill", "--device", "CPU"]);
    ok(&["lm-eval", "--model", s(&model), "--tokens", &toks, "--out", s(&d), "--mode", "decode", "--device", "CPU"]);
    let (pv, dv) = (read_f32(&p), read_f32(&d));
    let want = read_f32(&repo().join("fixtures/ar/logits_A.f32"));
    assert_eq!(pv.len(), want.len());
    let rel = |a: &[f32], b: &[f32]| {
        let n: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let d: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        (n / d).sqrt()
    };
    assert!(rel(&pv, &want) < 2e-2, "prefill vs reference {}", rel(&pv, &want));
    assert!(rel(&dv, &pv) < 1e-3, "decode vs prefill {}", rel(&dv, &pv));
}

#[test]
fn plan_writes_the_score_even_when_it_looks_malformed() {
    let dir = tempfile::tempdir().unwrap();
    ok(&["demo-model", "--out", s(dir.path())]);
    let req = dir.path().join("req.json");
    std::fs::write(
        &req,
        r#"{"style": "pop", "lyrics": "[verse] hi", "plan_retries": 1,
        "abc_sampling": {"max_tokens": 16, "min_tokens": 2}}"#,
    )
    .unwrap();
    let out = dir.path().join("score.abc");
    let o = yued(&[
        "plan",
        "--model",
        s(&dir.path().join("yue2-demo-tiny.gguf")),
        "--request",
        s(&req),
        "--out",
        s(&out),
        "--lm-seed",
        "3",
        "--device",
        "CPU",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("malformed after 2 attempt(s)") && err.contains("RANDOM"), "{err}");
    assert!(out.exists());
    // a bad request is refused with the field named
    std::fs::write(&req, r#"{"style": "pop", "plan_retries": 9}"#).unwrap();
    let e = fails(&[
        "plan",
        "--model",
        s(&dir.path().join("yue2-demo-tiny.gguf")),
        "--request",
        s(&req),
        "--device",
        "CPU",
    ]);
    assert!(e.contains("plan_retries"), "{e}");
}

#[test]
fn synth_writes_exact_length_audio_and_a_replay_that_renders_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--out", s(d)]);
    let (bb, vae) = (d.join("yue2-demo-tiny.gguf"), d.join("yue2-demo-tiny-vae.gguf"));
    let req = d.join("req.json");
    std::fs::write(
        &req,
        r#"{"style": "lo-fi", "lyrics": "[verse] la", "cot": "off", "duration": 1.0,
        "output_format": "wav16", "synth_batch_size": 2, "semantic_sampling": {"min_tokens": 25}}"#,
    )
    .unwrap();
    let out = d.join("out/song.wav");
    let dump = d.join("dump");
    let stdout = ok(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--request",
        s(&req),
        "--out",
        s(&out),
        "--seed",
        "4",
        "--lm-seed",
        "5",
        "--steps",
        "2",
        "--vae-core",
        "8",
        "--dump",
        s(&dump),
        "--latent",
        s(&d.join("lat.vae")),
        "--tokens",
        s(&d.join("codes.csv")),
        "--device",
        "CPU",
    ]);
    assert!(stdout.contains("song00.wav") && stdout.contains("song01.wav"), "{stdout}");
    for t in ["00", "01"] {
        let wav = d.join(format!("out/song{t}.wav"));
        let r = hound::WavReader::open(&wav).unwrap();
        assert_eq!(r.spec().sample_rate, 48000);
        assert_eq!(r.spec().channels, 2);
        assert_eq!(r.duration() as usize, 1920 * 25 - 64, "exactly 1920 * frames - 64 samples per channel");
        assert!(d.join(format!("out/song{t}.json")).exists());
        assert_eq!(std::fs::metadata(d.join(format!("lat{t}.vae"))).unwrap().len(), 25 * 64 * 4);
        assert!(dump.join(format!("track{t}_latents.npy")).exists());
    }
    let codes = std::fs::read_to_string(d.join("codes01.csv")).unwrap();
    assert_eq!(codes.split(',').count(), 25);
    // The replay request of track 01 renders the same bytes.
    let replay = d.join("out/song01.json");
    let re = d.join("re.wav");
    ok(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--request",
        s(&replay),
        "--out",
        s(&re),
        "--vae-core",
        "8",
        "--device",
        "CPU",
    ]);
    assert_eq!(std::fs::read(&re).unwrap(), std::fs::read(d.join("out/song01.wav")).unwrap());
    // Bad requests name the field.
    std::fs::write(&req, r#"{"style": "x", "steps": 0}"#).unwrap();
    assert!(fails(&["synth", "--model", s(&bb), "--vae", s(&vae), "--request", s(&req), "--device", "CPU"])
        .contains("steps"));
}

/// At the published depth (the `deep` demo: 28 layers, 16 query heads over 8 KV heads): a
/// cot-off song under its default guidance (1.01: a pair of streams, the song's copied
/// out at the end) and an unguided batch of two songs render end to end.
#[test]
fn synth_renders_guided_and_batched_songs_at_the_published_depth() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--out", s(d), "--preset", "deep"]);
    let (bb, vae) = (d.join("yue2-demo-deep.gguf"), d.join("yue2-demo-deep-vae.gguf"));
    for (name, extra, tracks) in [("guided", "", 1), ("batched", r#", "lm_batch_size": 2, "cfg_scale": 1.0"#, 2)] {
        let req = d.join(format!("{name}.json"));
        std::fs::write(
            &req,
            format!(
                r#"{{"style": "lo-fi", "lyrics": "[verse] la", "cot": "off", "duration": 1.0,
            "output_format": "wav16", "semantic_sampling": {{"min_tokens": 25}}{extra}}}"#
            ),
        )
        .unwrap();
        let out = d.join(format!("{name}/song.wav"));
        let stdout = ok(&[
            "synth",
            "--model",
            s(&bb),
            "--vae",
            s(&vae),
            "--request",
            s(&req),
            "--out",
            s(&out),
            "--steps",
            "2",
            "--device",
            "CPU",
        ]);
        let wavs = std::fs::read_dir(d.join(name))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "wav"))
            .count();
        assert_eq!(wavs, tracks, "{name}: {stdout}");
        let replay: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(format!("{name}/song{}.json", if tracks == 1 { "" } else { "00" })))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(replay["semantic_tokens"].as_str().map(|t| t.split(',').count()), Some(25), "{name}: {replay}");
    }
}

/// `yued compose` runs the AR half alone and writes one replayable request per song: the
/// same codes `yued synth` writes for that song at the same seeds, and `yued synth` renders
/// it without sampling again.
#[test]
fn compose_writes_the_replayable_request_of_each_song() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--out", s(&d.join("models"))]);
    let req = d.join("req.json");
    std::fs::write(
        &req,
        r#"{"style": "lo-fi", "lyrics": "[verse] la", "cot": "off", "duration": 1.0,
        "lm_batch_size": 2, "output_format": "wav16", "semantic_sampling": {"min_tokens": 25}}"#,
    )
    .unwrap();
    let out = d.join("composed/request.json");
    let stdout = ok(&[
        "compose",
        "--models",
        s(&d.join("models")),
        "--request",
        s(&req),
        "--out",
        s(&out),
        "--lm-seed",
        "11",
        "--device",
        "CPU",
    ]);
    assert!(stdout.contains("request00.json") && stdout.contains("request01.json"), "{stdout}");
    let composed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("composed/request01.json")).unwrap()).unwrap();
    assert_eq!(composed["lm_seed"], 12, "song 1 samples with lm_seed + 1");
    assert_eq!(composed["lm_batch_size"], 1);
    let codes = composed["semantic_tokens"].as_str().unwrap().to_string();
    assert_eq!(codes.split(',').count(), 25);
    // synth at the same seeds writes the same codes for song 1.
    let (bb, vae) = (d.join("models/yue2-demo-tiny.gguf"), d.join("models/yue2-demo-tiny-vae.gguf"));
    ok(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--request",
        s(&req),
        "--out",
        s(&d.join("synth/song.wav")),
        "--lm-seed",
        "11",
        "--steps",
        "1",
        "--device",
        "CPU",
    ]);
    let synth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("synth/song10.json")).unwrap()).unwrap();
    assert_eq!(synth["semantic_tokens"].as_str().unwrap(), codes);
    // And the composed request renders.
    ok(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--request",
        s(&d.join("composed/request01.json")),
        "--out",
        s(&d.join("replay.wav")),
        "--steps",
        "1",
        "--device",
        "CPU",
    ]);
    assert!(d.join("replay.wav").exists());
    // A body of a family this build does not serve is refused, naming the field.
    std::fs::write(&req, r#"{"family": "mm3", "caption": "x", "lyrics": "la"}"#).unwrap();
    assert!(fails(&["compose", "--models", s(&d.join("models")), "--request", s(&req), "--device", "CPU"])
        .contains("family"));
}

/// MiniMax Music 3's AR half through `yued compose`: a batch of two songs writes two
/// replayable requests (8 codes per frame, each song's own lm_seed); a song composed alone
/// with that seed is the same song; replaying a request keeps its codes; component fields
/// resolve against the registry; a file of the wrong architecture is a clear error.
#[test]
fn compose_writes_minimax_songs_that_replay() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let models = d.join("models");
    let out = ok(&["demo-model", "--family", "mm3", "--out", s(&models)]);
    assert!(out.contains("mm3-demo-tiny-lm.gguf") && out.contains("mm3-demo-tiny-depth.gguf"), "{out}");
    ok(&["demo-model", "--out", s(&models)]);
    let req = d.join("req.json");
    std::fs::write(
        &req,
        r#"{"caption": "<|genre synth-pop|> **bright**", "lyrics": "[Verse] la la\nneon ^ light",
        "duration": 0.6, "lm_batch_size": 2, "lm_top_k": 8}"#,
    )
    .unwrap();
    let stdout = ok(&[
        "compose",
        "--models",
        s(&models),
        "--request",
        s(&req),
        "--out",
        s(&d.join("c/request.json")),
        "--lm-seed",
        "21",
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    assert!(stdout.contains("request00.json") && stdout.contains("request01.json"), "{stdout}");
    let song1: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("c/request01.json")).unwrap()).unwrap();
    assert_eq!(
        (song1["family"].as_str(), song1["lm_seed"].as_i64(), song1["lm_batch_size"].as_i64()),
        (Some("mm3"), Some(22), Some(1))
    );
    let codes = song1["audio_codes"].as_str().unwrap().to_string();
    let n = codes.split(',').count();
    assert!(n.is_multiple_of(8) && (16..=8 * 16).contains(&n), "{n} codes: 1 + up to 15 frames of 8");
    // The same song composed alone at lm_seed 22.
    let one = d.join("one.json");
    std::fs::write(
        &one,
        r#"{"caption": "<|genre synth-pop|> **bright**", "lyrics": "[Verse] la la\nneon ^ light",
        "duration": 0.6, "lm_top_k": 8}"#,
    )
    .unwrap();
    ok(&[
        "compose",
        "--models",
        s(&models),
        "--request",
        s(&one),
        "--out",
        s(&d.join("alone.json")),
        "--lm-seed",
        "22",
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    let alone: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("alone.json")).unwrap()).unwrap();
    assert_eq!(alone["audio_codes"].as_str().unwrap(), codes, "song 1 of a batch is the song of lm_seed + 1");
    // --no-batch-cfg draws the same song on the demo.
    ok(&[
        "compose",
        "--models",
        s(&models),
        "--request",
        s(&one),
        "--out",
        s(&d.join("split.json")),
        "--lm-seed",
        "22",
        "--no-batch-cfg",
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    let split: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("split.json")).unwrap()).unwrap();
    assert_eq!(split["audio_codes"], alone["audio_codes"]);
    // A replay keeps its codes.
    ok(&[
        "compose",
        "--models",
        s(&models),
        "--request",
        s(&d.join("c/request01.json")),
        "--out",
        s(&d.join("replay.json")),
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    let replay: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("replay.json")).unwrap()).unwrap();
    assert_eq!(replay["audio_codes"].as_str().unwrap(), codes);
    // Bad input: named fields, and a file of the wrong architecture.
    std::fs::write(&req, r#"{"caption": "x", "lyrics": "la", "depth_model": "yue2-demo-tiny.gguf"}"#).unwrap();
    let e = fails(&["compose", "--models", s(&models), "--request", s(&req), "--device", "CPU", "--threads", "1"]);
    assert!(e.contains("depth_model") && e.contains("yue2"), "{e}");
    std::fs::write(&req, r#"{"caption": "x", "lyrics": "la", "audio_codes": "1,2,3"}"#).unwrap();
    assert!(fails(&["compose", "--models", s(&models), "--request", s(&req), "--device", "CPU", "--threads", "1"])
        .contains("audio_codes"));
    std::fs::write(&req, r#"{"style": "x", "cot": "off", "lyrics": "la"}"#).unwrap();
    let e = fails(&[
        "compose",
        "--model",
        s(&models.join("mm3-demo-tiny-lm.gguf")),
        "--request",
        s(&req),
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    assert!(e.contains("mm3-lm") && e.contains("yue2"), "{e}");
}

/// A MiniMax Music 3 song end to end through `yued synth --models`: 44.1 kHz stereo of the
/// requested length (ffprobe reads it), one track per song and variation, each with its
/// replay request, and the replay renders the same song.
#[test]
fn synth_renders_a_minimax_song_that_replays_as_the_same_song() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let models = d.join("models");
    ok(&["demo-model", "--family", "mm3", "--out", s(&models)]);
    let req = d.join("req.json");
    std::fs::write(
        &req,
        r#"{"caption": "<|genre pop|> bright", "lyrics": "[Verse]\nhello world", "duration": 4.5,
        "output_format": "wav16", "synth_batch_size": 2, "steps": 3}"#,
    )
    .unwrap();
    let out = ok(&[
        "synth",
        "--models",
        s(&models),
        "--request",
        s(&req),
        "--out",
        s(&d.join("o/song.wav")),
        "--lm-seed",
        "3",
        "--seed",
        "40",
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    assert!(out.contains("song00.wav") && out.contains("song01.wav"), "{out}");
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=sample_rate,channels", "-of", "csv=p=0"])
        .arg(d.join("o/song01.wav"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&probe.stdout).trim(), "44100,2");
    let r = hound::WavReader::open(d.join("o/song01.wav")).unwrap();
    // 112 frames (4.5 s at 25 Hz, unless the LM ended the song) -> int(112 * 441 / 128) latents of 512 samples.
    let replay: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("o/song01.json")).unwrap()).unwrap();
    let frames = replay["audio_codes"].as_str().unwrap().split(',').count() / 8 - 1;
    assert_eq!(r.duration() as usize, (frames * 441 / 128) * 512, "{frames} frames");
    assert_eq!(
        (replay["seed"].as_i64(), replay["lm_seed"].as_i64(), replay["synth_batch_size"].as_i64()),
        (Some(41), Some(3), Some(1))
    );
    // The replay re-derives the states teacher-forced (activation epsilon from the sampled
    // run, as minimaxmusic.cpp's architecture reference says): the same song.
    ok(&[
        "synth",
        "--models",
        s(&models),
        "--request",
        s(&d.join("o/song01.json")),
        "--out",
        s(&d.join("r/song.wav")),
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    let read =
        |p: &Path| hound::WavReader::open(p).unwrap().samples::<i16>().map(|x| x.unwrap() as f64).collect::<Vec<_>>();
    let (a, b) = (read(&d.join("o/song01.wav")), read(&d.join("r/song.wav")));
    assert_eq!(a.len(), b.len());
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    let cos = dot(&a, &b) / (dot(&a, &a) * dot(&b, &b)).sqrt();
    assert!(cos > 0.99, "replay against the sampled render: cosine {cos}");
    let loud = a.iter().filter(|x| x.abs() > 32000.0).count();
    assert!(loud * 100 < a.len(), "{loud} of {} samples at full scale: the demo should not saturate", a.len());
    // The five files by flag, with the AR half's tensors dumped.
    let f = |c: &str| models.join(format!("mm3-demo-tiny-{c}.gguf"));
    let (lm, depth, cond, dit, vae) = (f("lm"), f("depth"), f("cond"), f("dit"), f("vae"));
    ok(&[
        "synth",
        "--lm",
        s(&lm),
        "--depth",
        s(&depth),
        "--cond",
        s(&cond),
        "--dit",
        s(&dit),
        "--vae-mm3",
        s(&vae),
        "--request",
        s(&d.join("o/song01.json")),
        "--out",
        s(&d.join("f/song.wav")),
        "--dump",
        s(&d.join("dump")),
        "--device",
        "CPU",
        "--threads",
        "1",
    ]);
    assert_eq!(
        std::fs::read(d.join("f/song.wav")).unwrap(),
        std::fs::read(d.join("r/song.wav")).unwrap(),
        "the same files by flag render the same bytes"
    );
    let npy = std::fs::read(d.join("dump/song0_codes.npy")).unwrap();
    assert!(
        npy.starts_with(b"\x93NUMPY") && String::from_utf8_lossy(&npy[..128]).contains(&format!("({}, 8)", frames + 1))
    );
    let e = fails(&[
        "synth",
        "--lm",
        s(&dit),
        "--depth",
        s(&depth),
        "--cond",
        s(&cond),
        "--dit",
        s(&dit),
        "--vae-mm3",
        s(&vae),
        "--request",
        s(&req),
        "--device",
        "CPU",
    ]);
    assert!(e.contains("'mm3-dit' model where a 'mm3-lm'"), "{e}");
    // A component field naming another bucket's file is refused.
    std::fs::write(&req, r#"{"caption": "x", "lyrics": "la", "vae_model": "mm3-demo-tiny-dit.gguf"}"#).unwrap();
    let e = fails(&["synth", "--models", s(&models), "--request", s(&req), "--device", "CPU"]);
    assert!(e.contains("vae_model") && e.contains("mm3-dit"), "{e}");
}

#[test]
fn codec_encodes_audio_to_latents_and_back_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--out", s(d)]);
    let vae = d.join("yue2-demo-tiny-vae.gguf");
    // 0.5 s of a stereo tone as WAV
    let wav = d.join("in.wav");
    write_stereo_48k(&wav, 24000, |i| {
        let v = ((i as f32 * 0.05).sin() * 10000.0) as i16;
        (v, v / 2)
    });
    for (flag, ext, size) in
        [(None, "vae", 13 * 64 * 4), (Some("--q8"), "nac8", 12 + 13 * 66), (Some("--q4"), "nac4", 12 + 13 * 34)]
    {
        let out = d.join(format!("z.{ext}"));
        let mut args = vec!["codec", "encode", "--vae", s(&vae), "-i", s(&wav), "-o", s(&out), "--device", "CPU"];
        args.extend(flag);
        ok(&args);
        assert_eq!(std::fs::metadata(&out).unwrap().len() as usize, size, "{ext}: 24000 samples pad to 13 frames");
        let back = d.join(format!("back-{ext}.wav"));
        ok(&[
            "codec",
            "decode",
            "--vae",
            s(&vae),
            "-i",
            s(&out),
            "-o",
            s(&back),
            "--format",
            "wav16",
            "--vae-core",
            "4",
            "--device",
            "CPU",
        ]);
        assert_eq!(hound::WavReader::open(&back).unwrap().duration() as usize, 1920 * 13 - 64);
    }
    let junk = d.join("junk.mp3");
    std::fs::write(&junk, b"this is not audio at all").unwrap();
    assert!(
        fails(&["codec", "encode", "--vae", s(&vae), "-i", s(&junk), "--device", "CPU"]).contains("does not decode")
    );
}

/// `yued codec --family mm3`: a 48 kHz WAV to MiniMax Music 3's latents (resampled to 44.1
/// kHz, 512 samples a frame, the tiny demo's 8 channels) and back to 44.1 kHz audio; a
/// latent file of partial frames and a YuE2 VAE are refused with a message.
#[test]
fn codec_encodes_and_decodes_with_the_minimax_flow_vae() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--family", "mm3", "--out", s(d)]);
    let vae = d.join("mm3-demo-tiny-vae.gguf");
    let wav = d.join("in.wav");
    write_stereo_48k(&wav, 24000, |i| {
        let v = ((i as f32 * 0.05).sin() * 10000.0) as i16;
        (v, v / 2)
    });
    // 24000 samples at 48 kHz are 22050 at 44.1 kHz: 44 frames of 512 (padded), 8 channels.
    let z = d.join("z.vae");
    let said =
        ok(&["codec", "encode", "--family", "mm3", "--vae", s(&vae), "-i", s(&wav), "-o", s(&z), "--device", "CPU"]);
    assert!(said.contains("44 frames"), "{said}");
    let bytes = std::fs::read(&z).unwrap();
    assert_eq!(bytes.len(), 44 * 8 * 4);
    let again = d.join("z2.vae");
    ok(&["codec", "encode", "--family", "mm3", "--vae", s(&vae), "-i", s(&wav), "-o", s(&again), "--device", "CPU"]);
    assert!(std::fs::read(&again).unwrap() == bytes, "the encode is deterministic");
    let back = d.join("back.wav");
    ok(&[
        "codec",
        "decode",
        "--family",
        "mm3",
        "--vae",
        s(&vae),
        "-i",
        s(&z),
        "-o",
        s(&back),
        "--format",
        "wav16",
        "--device",
        "CPU",
    ]);
    let r = hound::WavReader::open(&back).unwrap();
    assert_eq!((r.spec().sample_rate, r.spec().channels, r.duration()), (44100, 2, 44 * 512));
    let partial = d.join("partial.vae");
    std::fs::write(&partial, &bytes[..bytes.len() - 4]).unwrap();
    assert!(fails(&["codec", "decode", "--family", "mm3", "--vae", s(&vae), "-i", s(&partial), "--device", "CPU"])
        .contains("not whole frames"));
    ok(&["demo-model", "--out", s(d)]);
    let yue2_vae = d.join("yue2-demo-tiny-vae.gguf");
    assert!(fails(&["codec", "encode", "--family", "mm3", "--vae", s(&yue2_vae), "-i", s(&wav), "--device", "CPU"])
        .contains("mm3-vae"));
}

/// A mono 44.1 kHz sweep: the resampling and channel paths, not the 48 kHz stereo default.
fn write_sweep_44k_mono(path: &Path, frames: usize) {
    let sweep = |i: usize| {
        let t = i as f32 / 44100.0;
        ((2.0 * std::f32::consts::PI * (300.0 + 400.0 * t) * t).sin() * 12000.0) as i16
    };
    write_wav16(path, 44100, 1, &(0..frames).map(sweep).collect::<Vec<_>>());
}

#[test]
fn codec_encode_resamples_any_rate_and_channel_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["demo-model", "--out", s(d)]);
    let vae = d.join("yue2-demo-tiny-vae.gguf");
    let wav = d.join("mono44.wav");
    write_sweep_44k_mono(&wav, 44100);
    let out = d.join("z.vae");
    ok(&["codec", "encode", "--vae", s(&vae), "-i", s(&wav), "-o", s(&out), "--device", "CPU"]);
    // 1 s at 44.1 kHz is exactly 48000 samples at 48 kHz: 25 frames.
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 25 * 64 * 4);
}

#[test]
fn audio_convert_picks_the_format_by_extension_and_keeps_the_length() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wav = d.join("in.wav");
    write_sweep_44k_mono(&wav, 44100 + 300);
    for (ext, exact) in [("flac", true), ("mp3", false), ("ogg", true), ("m4a", true), ("aac", false), ("opus", true)] {
        let out = d.join(format!("out.{ext}"));
        ok(&["audio-convert", "-i", s(&wav), "-o", s(&out), "-b", "160"]);
        let back = d.join(format!("back-{ext}.wav"));
        ok(&["audio-convert", "-i", s(&out), "-o", s(&back), "--format", "wav24", "--rate", "44100"]);
        let r = hound::WavReader::open(&back).unwrap();
        assert_eq!((r.spec().sample_rate, r.spec().channels, r.spec().bits_per_sample), (44100, 1, 24), "{ext}");
        let n = r.duration() as usize;
        if exact {
            // Opus travels at 48 kHz and comes back resampled: still the same length.
            assert_eq!(n, 44100 + 300, "{ext}");
        } else {
            // MP3 within a frame; raw ADTS plays the encoder priming (2048) and the last frame's padding.
            assert!(n.abs_diff(44100 + 300) <= 3200, "{ext}: {n} frames");
        }
    }
    // A 48 kHz stereo WAV from the mono input, and the errors.
    let st = d.join("st.wav");
    ok(&["audio-convert", "-i", s(&wav), "-o", s(&st), "--rate", "48000", "--channels", "2", "--format", "wav32"]);
    let r = hound::WavReader::open(&st).unwrap();
    assert_eq!((r.spec().sample_rate, r.spec().channels, r.duration()), (48000, 2, 48327));
    assert!(fails(&["audio-convert", "-i", s(&wav), "-o", s(&d.join("x.xyz"))]).contains("unknown output extension"));
    assert!(fails(&["audio-convert", "-i", s(&wav), "-o", s(&d.join("x.wav")), "--format", "mp3"])
        .contains("not a WAV flavour"));
    let junk = d.join("junk.wav");
    std::fs::write(&junk, b"RIFF....WAVEjunk").unwrap();
    assert!(fails(&["audio-convert", "-i", s(&junk), "-o", s(&d.join("y.flac"))]).contains("does not decode"));
}

/// A LoRA of rank 2 on one projection (native layout), written as safetensors.
fn write_lora(path: &Path, module: &str, shape: &[usize]) {
    let (out, inp) = (shape[0], shape[1]);
    let a: Vec<u8> = (0..2 * inp).flat_map(|i| ((i as f32 * 0.61).sin() * 0.6).to_le_bytes()).collect();
    let b: Vec<u8> = (0..out * 2).flat_map(|i| ((i as f32 * 0.37).cos() * 0.6).to_le_bytes()).collect();
    let views = vec![
        (
            format!("{module}.lora_A.weight"),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, inp], &a).unwrap(),
        ),
        (
            format!("{module}.lora_B.weight"),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![out, 2], &b).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

/// `yued adapters list`, `lm-eval --adapter` against PEFT's merged model, and `compose` /
/// `synth --adapters` with the request naming the adapters (the replay keeps them and
/// renders the same bytes).
#[test]
fn adapters_list_lm_eval_compose_and_synth() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (tiny, lora) = (repo().join("fixtures/ar/tiny-qwen3.gguf"), repo().join("fixtures/lora"));
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&["adapters", "list", s(&lora.join("adapters")), "--model", s(&tiny), "--json"]))
            .unwrap();
    let names: Vec<&str> = listed["adapters"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 6, "{listed}");
    let peft = listed["adapters"].as_array().unwrap().iter().find(|a| a["name"] == "peft").unwrap();
    assert_eq!(
        (peft["layout"].as_str(), peft["rank"].as_u64(), peft["alpha"].as_f64(), peft["ar"].as_bool()),
        (Some("peft"), Some(4), Some(8.0), Some(true))
    );
    assert!(ok(&["adapters", "list", s(&lora.join("adapters")), "--model", s(&tiny)]).contains("nar.safetensors"));
    // Another model's file is refused, not measured against (a MiniMax LM's tensor names
    // listed YuE2 adapters as usable).
    let vae = repo().join("fixtures/vae/tiny-vae.gguf");
    let e = fails(&["adapters", "list", s(&lora.join("adapters")), "--model", s(&vae)]);
    assert!(e.contains("--model") && e.contains("'yue2'"), "{e}");

    // lm-eval with the adapter merged: PEFT's merge_and_unload logits; the native layout
    // of the same factors gives the same bytes.
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lora.join("cases.json")).unwrap()).unwrap();
    let toks = cases["seq"].as_array().unwrap().iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
    let (p, n) = (d.join("peft.f32"), d.join("native.f32"));
    let adapter_dir = lora.join("adapters");
    let base = [
        "lm-eval",
        "--model",
        s(&tiny),
        "--tokens",
        &toks,
        "--kv-f32",
        "--device",
        "CPU",
        "--adapters",
        s(&adapter_dir),
    ];
    ok(&[&base[..], &["--out", s(&p), "--adapter", "peft"]].concat());
    ok(&[&base[..], &["--out", s(&n), "--adapter", "native.safetensors:1.0"]].concat());
    let (pv, want) = (read_f32(&p), read_f32(&lora.join("logits.f32")));
    let rel = (pv.iter().zip(&want).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>()
        / want.iter().map(|y| (*y as f64).powi(2)).sum::<f64>())
    .sqrt();
    assert!(rel < 1e-5, "relative RMS {rel:e} against PEFT's merged model");
    assert!(std::fs::read(&p).unwrap() == std::fs::read(&n).unwrap(), "two layouts of one adapter, the same logits");
    assert!(fails(&[&base[..], &["--out", s(&p), "--adapter", "nope"]].concat()).contains("adapters[0].name"));

    // compose and synth on the demo backbone with an adapter shaped for it.
    ok(&["demo-model", "--out", s(&d.join("models"))]);
    let (bb, vae) = (d.join("models/yue2-demo-tiny.gguf"), d.join("models/yue2-demo-tiny-vae.gguf"));
    let f = yued_engine::gguf::GgufFile::open(&bb).unwrap();
    let shapes = yued_engine::models::yue2::adapter::shapes_of(&f);
    let adapters = d.join("adapters");
    std::fs::create_dir_all(&adapters).unwrap();
    write_lora(
        &adapters.join("ar.safetensors"),
        "layers.0.self_attn.q_proj",
        &shapes["model.layers.0.self_attn.q_proj.weight"],
    );
    let req = d.join("req.json");
    let body = |adapters: &str| {
        format!(
            r#"{{"style": "lo-fi", "lyrics": "[verse] la", "cot": "off", "duration": 1.0, "output_format": "wav16",
                "semantic_sampling": {{"min_tokens": 25}}, "adapters": {adapters}}}"#
        )
    };
    let compose = |out: &Path| {
        ok(&[
            "compose",
            "--model",
            s(&bb),
            "--adapters",
            s(&adapters),
            "--request",
            s(&req),
            "--out",
            s(out),
            "--lm-seed",
            "11",
            "--device",
            "CPU",
        ]);
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(out).unwrap()).unwrap()
    };
    std::fs::write(&req, body("[]")).unwrap();
    let plain = compose(&d.join("plain.json"));
    std::fs::write(&req, body(r#"[{"name": "ar.safetensors", "scale": 1.0}]"#)).unwrap();
    let adapted = compose(&d.join("adapted.json"));
    assert_ne!(plain["semantic_tokens"], adapted["semantic_tokens"], "the adapter changes the codes");
    assert_eq!(adapted["adapters"][0]["name"], "ar.safetensors");
    let synth = |request: &Path, out: &Path| {
        ok(&[
            "synth",
            "--model",
            s(&bb),
            "--vae",
            s(&vae),
            "--adapters",
            s(&adapters),
            "--request",
            s(request),
            "--out",
            s(out),
            "--seed",
            "3",
            "--lm-seed",
            "11",
            "--steps",
            "1",
            "--device",
            "CPU",
        ])
    };
    synth(&req, &d.join("a/song.wav"));
    synth(&d.join("a/song.json"), &d.join("b/song.wav"));
    assert!(
        std::fs::read(d.join("a/song.wav")).unwrap() == std::fs::read(d.join("b/song.wav")).unwrap(),
        "the replay with its adapters renders the same bytes"
    );
    let replay: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a/song.json")).unwrap()).unwrap();
    assert_eq!(replay["semantic_tokens"], adapted["semantic_tokens"]);
    // --companion: a NAR-only adapter under the render at the request's companion_scale,
    // merged once when the request names the same file; one that changes the AR half is refused.
    let comp = adapters.join("comp.safetensors");
    write_lora(&comp, "layers.0.nar_self_attn.o_proj", &shapes["model.layers.0.nar_self_attn.o_proj.weight"]);
    let with_companion = |body: &str, out: &str, companion: &Path| {
        std::fs::write(&req, body).unwrap();
        let path = d.join(out);
        let base = [
            &["synth", "--model", s(&bb), "--vae", s(&vae), "--adapters", s(&adapters)][..],
            &["--companion", s(companion), "--request", s(&req), "--out", s(&path)],
        ]
        .concat();
        ok(&[&base[..], &["--seed", "3", "--lm-seed", "11", "--steps", "1", "--device", "CPU"]].concat());
        std::fs::read(&path).unwrap()
    };
    let codes = adapted["semantic_tokens"].as_str().unwrap();
    let song = |extra: &str| format!(r#"{{"semantic_tokens": "{codes}", "output_format": "wav16"{extra}}}"#);
    let off = with_companion(&song(r#", "companion_scale": 0"#), "c0/song.wav", &comp);
    let on = with_companion(&song(""), "c1/song.wav", &comp);
    let named = with_companion(&song(r#", "adapters": [{"name": "comp.safetensors"}]"#), "c2/song.wav", &comp);
    assert!(off != on, "the companion changes the render");
    assert!(named == on, "a request naming the companion merges it once");
    std::fs::write(&req, song("")).unwrap();
    let refused = fails(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--companion",
        s(&adapters.join("ar.safetensors")),
        "--request",
        s(&req),
        "--out",
        s(&d.join("c3.wav")),
        "--device",
        "CPU",
    ]);
    assert!(refused.contains("--companion") && refused.contains("AR half"), "{refused}");
    std::fs::write(&req, body(r#"[{"name": "ar.safetensors", "scale": 1.0}]"#)).unwrap();
    // Without the directory, the request's adapter is a clear error.
    assert!(fails(&[
        "synth",
        "--model",
        s(&bb),
        "--vae",
        s(&vae),
        "--request",
        s(&req),
        "--out",
        s(&d.join("c.wav")),
        "--device",
        "CPU"
    ])
    .contains("--adapters"));
}

/// `n` samples of `scripts/ref/mert_reference.py`'s generator, as the int16 values it scales.
fn reference_audio(n: usize, salt: u32) -> Vec<i16> {
    let mut x = 0x9E37_79B9u32 ^ salt;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let period = 40 + (i / 4800) % 60;
            let square = if (i / period).is_multiple_of(2) { 8192 } else { -8192 };
            (square + 2 * ((x >> 20) as i32 - 2048)) as i16
        })
        .collect()
}

/// 16-bit WAV of interleaved `samples`.
fn write_wav16(path: &Path, rate: u32, channels: u16, samples: &[i16]) {
    let spec =
        hound::WavSpec { channels, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    samples.iter().for_each(|&v| w.write_sample(v).unwrap());
    w.finalize().unwrap();
}

/// `frames` of 16-bit stereo at 48 kHz, each frame's (left, right) from `f`.
fn write_stereo_48k(path: &Path, frames: usize, f: impl Fn(usize) -> (i16, i16)) {
    let samples: Vec<i16> = (0..frames).flat_map(|i| <[i16; 2]>::from(f(i))).collect();
    write_wav16(path, 48000, 2, &samples);
}

fn write_wav(path: &Path, samples: &[i16]) {
    write_wav16(path, 24_000, 1, samples);
}

#[test]
fn tokenize_audio_gives_the_reference_codes_from_the_converted_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = repo().join("fixtures/mert/ckpt");
    assert!(ok(&["convert", "mert", s(&ckpt.join("mert")), s(dir.path())]).contains("MERT-v2-FullSong-F32.gguf"));
    let head = dir.path().join("yue2-mothersuperior-realaudio-tokenizer-v4-F32.gguf");
    assert!(ok(&["convert", "audio-tokenizer", s(&ckpt.join("tokenizer")), s(dir.path())]).contains("31 tensors"));
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("fixtures/mert/model/cases.json")).unwrap()).unwrap();
    let case = &cases["kept_tail"];
    let wav = dir.path().join("song.wav");
    write_wav(
        &wav,
        &reference_audio(case["samples"].as_u64().unwrap() as usize, case["salt"].as_u64().unwrap() as u32),
    );
    let want: Vec<u64> = case["codes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let printed = ok(&["tokenize", "--model", s(&head), "--audio", s(&wav)]);
    let got: Vec<u64> = printed.trim().split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(got, want, "printed codes");
    let out = dir.path().join("codes.json");
    ok(&["tokenize", "--model", s(&head), "--audio", s(&wav), "--out", s(&out)]);
    let csv = dir.path().join("codes.csv");
    ok(&["tokenize", "--model", s(&head), "--audio", s(&wav), "--out", s(&csv)]);
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), printed, "the CSV is the printed line");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(json["frame_rate"], 25);
    assert_eq!(json["codes"].as_array().unwrap().len(), want.len());
    // Under a second, and a head whose MERT is not beside it: clear errors.
    let short = dir.path().join("short.wav");
    write_wav(&short, &reference_audio(20_000, 1));
    assert!(fails(&["tokenize", "--model", s(&head), "--audio", s(&short)]).contains("under a second"));
    let alone = tempfile::tempdir().unwrap();
    let moved = alone.path().join("yue2-mothersuperior-realaudio-tokenizer-v4-F32.gguf");
    std::fs::copy(&head, &moved).unwrap();
    assert!(fails(&["tokenize", "--model", s(&moved), "--audio", s(&wav)]).contains("MERT-v2-FullSong-F32.gguf"));
    // The listening demo: codes the tiny demo backbone's codebook (1024) takes.
    let demo = tempfile::tempdir().unwrap();
    ok(&["demo-model", "--family", "listen", "--out", s(demo.path())]);
    let head = demo.path().join("yue2-tokenizer-demo-tiny-F32.gguf");
    let codes = ok(&["tokenize", "--model", s(&head), "--audio", s(&wav)]);
    let codes: Vec<u32> = codes.trim().split(',').map(|v| v.parse().unwrap()).collect();
    assert!(codes.len() == want.len() && codes.iter().all(|&c| c < 1024), "{codes:?}");
}

/// `yued bench --family mm3 --only batching` on the tiny demo: the clients' songs written one
/// after another and in one batch, checked to be the same songs (the section fails otherwise),
/// and the table's rows for each client count and the prefill stall.
#[test]
fn the_minimax_batching_bench_writes_the_same_songs_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("models");
    let out = ok(&[
        "bench",
        "--family",
        "mm3",
        "--preset",
        "tiny",
        "--only",
        "batching",
        "--quick",
        "--batching-seconds",
        "2",
        "--reps",
        "1",
        "--cache",
        s(&cache),
    ]);
    for c in [1, 2, 4] {
        let batched = format!("MiniMax AR, {c} clients of 2 s, one batch ({} rows)", 2 * c);
        assert!(out.lines().any(|l| l.contains(&batched) && l.contains("the same songs")), "{out}");
        assert!(out.contains(&format!("MiniMax AR, {c} clients of 2 s, one after another")), "{out}");
    }
    assert!(out.contains("the prefill stall"), "{out}");
}

/// `yued bench --only batching` on the tiny YuE2 demo with the client counts and turns asked
/// for: each count's rows, each turn's ratio in the batched row, and the header naming what
/// ggml's CPU kernels were built for.
#[test]
fn the_batching_bench_runs_the_client_counts_asked_in_turns() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("models");
    let out = ok(&[
        "bench",
        "--preset",
        "tiny",
        "--only",
        "batching",
        "--batching-clients",
        "1,3",
        "--batching-reps",
        "2",
        "--batching-seconds",
        "2",
        "--reps",
        "1",
        "--cache",
        s(&cache),
    ]);
    assert!(out.lines().any(|l| l.starts_with("# ") && l.contains("ggml CPU kernels built for")), "{out}");
    for (c, rows) in [(1, 2), (3, 6)] {
        let batched = format!("AR, {c} clients of 2 s, one batch ({rows} rows)");
        let row = out.lines().find(|l| l.contains(&batched)).unwrap_or_else(|| panic!("{out}"));
        let turns = row.split("(each turn: ").nth(1).and_then(|r| r.split(')').next()).expect(row);
        assert_eq!(turns.split(", ").filter(|r| r.parse::<f64>().is_ok_and(|x| x > 0.0)).count(), 2, "{row}");
        assert!(out.contains(&format!("AR, {c} clients of 2 s, one after another")), "{out}");
    }
    assert!(!out.contains("AR, 2 clients") && !out.contains("AR, 4 clients"), "{out}");
}

/// `yued bench --only transcribe` on the tiny listening demo, written into the bench cache (the
/// SheetSage2 head beside the MERT): a row per recording with its windows and tokens, then the
/// decoder step and the window's encoding. One thread: the tests run side by side, and two
/// threads on a busy CPU spend the tiny graphs in ggml's barrier.
#[test]
fn the_transcribe_bench_prints_each_recordings_rows() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("models");
    let args = ["bench", "--only", "transcribe", "--preset", "tiny", "--reps", "1", "--transcribe-seconds", "5,30"];
    let out = ok(&[&args[..], &["--threads", "1", "--cache", s(&cache)]].concat());
    let row = |what: &str| out.lines().find(|l| l.starts_with("transcribe") && l.contains(what));
    for what in ["5 s recording, 1 window, F32 files", "30 s recording, 3 windows, F32 files"] {
        let line = row(what).unwrap_or_else(|| panic!("no row '{what}' in:\n{out}"));
        assert!(line.contains("tokens (") && line.contains("decoder steps"), "{line}");
    }
    assert_eq!(out.lines().filter(|l| l.contains("a decoder step (fed or drawn token)")).count(), 2, "{out}");
    assert_eq!(out.lines().filter(|l| l.contains("a window's encoding (MERT, mix, memory)")).count(), 2, "{out}");
    assert!(cache.join("listen-tiny/SheetSage2-demo-tiny-F32.gguf").exists());
}

/// `yued notation` on the committed SheetSage2 fixtures: a score printed as the fixture has
/// it (full and melody-only, and written with --out), and a stream without a score failing
/// with notation.h's reason.
#[test]
fn notation_writes_the_fixture_scores_and_names_why_there_is_none() {
    let fixtures = repo().join("fixtures/sheetsage2/notation");
    let events = fixtures.join("slash_chords_db.events.json");
    let want = std::fs::read_to_string(fixtures.join("slash_chords_db.abc")).unwrap();
    assert_eq!(ok(&["notation", "--events", s(&events)]), want);
    let melody = std::fs::read_to_string(fixtures.join("slash_chords_db.melody.abc")).unwrap();
    assert_eq!(ok(&["notation", "--events", s(&events), "--melody-only"]), melody);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("score.abc");
    assert_eq!(ok(&["notation", "--events", s(&events), "--out", s(&out)]), "");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), want);

    let skipped = fixtures.join("noscore_14_skipped_beat.events.json");
    let e = fails(&["notation", "--events", s(&skipped)]);
    assert!(e.contains("no score: Measure 1: non-consecutive beat IDs"), "{e}");
    let e = fails(&["notation", "--events", s(&fixtures.join("manifest.json"))]);
    assert!(e.contains("not an events JSON"), "{e}");
}
