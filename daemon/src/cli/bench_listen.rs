//! `yued bench --only tokenize`: the audio tokenizer (MERT-v2 and its head) on a synthetic
//! recording at `--preset`'s dimensions (`full`: the published ones, random weights written
//! once into the cache), in seconds per minute of audio, from the F32 files and from their
//! Q8_0 quantization (what yue2.cpp's scripts load; written once beside them); with
//! `--torch-python`, the PyTorch reference on the same configuration and threads beside
//! them (float32), and the ratios.
use super::bench_common::{stats, time, BenchArgs, Table};
use anyhow::Context;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::audio_tokenizer::pipeline::{AudioTokenizer, SAMPLE_RATE};
use yued_engine::models::yue2::demo::Preset;

/// The listening demo of `--preset` in the cache (MERT and the tokenizer head, written once):
/// its folder and preset.
pub(super) fn listen_demo(a: &BenchArgs) -> anyhow::Result<(std::path::PathBuf, Preset)> {
    let preset: Preset = a.preset.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    let dir = a.cache.join(format!("listen-{}", preset.name()));
    let head = dir.join(format!("yue2-tokenizer-demo-{}-F32.gguf", preset.name()));
    if !head.exists() || !dir.join(format!("MERT-v2-demo-{}-F32.gguf", preset.name())).exists() {
        eprintln!("writing the {} listening demo into {} (once)", preset.name(), dir.display());
        let pb = super::progress_bar(100, "listening demo");
        yued_engine::models::audio_tokenizer::demo::write_demo(&dir, preset, 0, &mut |done, total| {
            pb.set_position((done * 100 / total.max(1)) as u64)
        })
        .context("writing the listening demo")?;
        pb.finish_and_clear();
    }
    Ok((dir, preset))
}

/// The tokenizer head of the listening demo.
fn head_file(a: &BenchArgs) -> anyhow::Result<std::path::PathBuf> {
    let (dir, preset) = listen_demo(a)?;
    Ok(dir.join(format!("yue2-tokenizer-demo-{}-F32.gguf", preset.name())))
}

/// The Q8_0 pair beside the F32 one (`…-Q8_0.gguf`, found by the head's rule), written once.
fn q8_head(head: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    use yued_engine::models::quantize::{quantize_file, QuantTarget};
    let (_, mert) = AudioTokenizer::files(head)?;
    let q8 = |p: &std::path::Path| p.with_file_name(p.file_name().unwrap().to_string_lossy().replace("-F32", "-Q8_0"));
    for f in [&mert, &head.to_path_buf()] {
        if !q8(f).exists() {
            eprintln!("quantizing {} to Q8_0 (once)", f.display());
            quantize_file(f, &q8(f), QuantTarget::Q8_0, &mut |_, _| {})?;
        }
    }
    Ok(q8(head))
}

/// Seconds a run of the tokenizer at `head` takes on `mono`.
fn time_file(
    a: &BenchArgs,
    backend: &Backend,
    head: &std::path::Path,
    mono: &[f32],
) -> anyhow::Result<(super::bench_common::Stats, usize)> {
    let mut tok = AudioTokenizer::open(head, backend).with_context(|| format!("loading {}", head.display()))?;
    let frames = tok.start(mono.to_vec()).map(|r| r.frames()).context("--tokenize-seconds: at least one second")?;
    let s = time(a.reps, || {
        let mut run = tok.start(mono.to_vec()).expect("checked above");
        while run.step(&mut tok, backend)? {}
        Ok(())
    })?;
    Ok((s, frames))
}

/// A recording of `seconds` at 24 kHz: a tone whose pitch is `pitch_hz(t)`, a fixed tone and a
/// little noise.
pub(super) fn recording(seconds: f64, pitch_hz: impl Fn(f32) -> f32) -> Vec<f32> {
    let n = (seconds * SAMPLE_RATE as f64) as usize;
    let mut state = 0x2545_f491u32;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let t = i as f32 / SAMPLE_RATE as f32;
            let noise = (state as f32 / u32::MAX as f32 - 0.5) * 0.05;
            0.3 * (2.0 * std::f32::consts::PI * pitch_hz(t) * t).sin() + 0.2 * (t * 1100.0).sin() + noise
        })
        .collect()
}

pub fn run(a: &BenchArgs, backend: &Backend, threads: usize, t: &mut Table) -> anyhow::Result<()> {
    let head = head_file(a)?;
    let seconds = a.tokenize_seconds;
    let mono = recording(seconds, |t| 220.0 + 3.0 * t);
    let per_minute = |s: super::bench_common::Stats| s.map(|x| x * 60.0 / seconds);
    let (ours, frames) = time_file(a, backend, &head, &mono)?;
    let what = format!("{seconds:.0} s recording to {frames} codes, F32 files");
    t.push("tokenize", what, "s/min", per_minute(ours), format!("{:.2} s a run", ours.median));
    let (q8, _) = time_file(a, backend, &q8_head(&head)?, &mono)?;
    let note = format!("{:.2} s a run, {:.2}x the F32 files", q8.median, ours.median / q8.median);
    t.push("tokenize", "the same, Q8_0 files (yue2.cpp's scripts load these)".into(), "s/min", per_minute(q8), note);
    let Some(py) = &a.torch_python else { return Ok(()) };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench/tokenize_torch.py");
    let configs = std::env::temp_dir().join(format!("yued-bench-tokenize-{}.json", std::process::id()));
    let cfg = |p: &std::path::Path, key: &str| -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(GgufFile::open(p)?.get_str(key)?)?)
    };
    let (_, mert) = AudioTokenizer::files(&head)?;
    let doc = serde_json::json!({
        "mert": cfg(&mert, yued_engine::models::mert::config::CONFIG_KEY)?,
        "head": cfg(&head, yued_engine::models::audio_tokenizer::head::CONFIG_KEY)?,
    });
    std::fs::write(&configs, doc.to_string())?;
    eprintln!("timing the PyTorch reference ({} threads)", threads);
    let out = std::process::Command::new(py)
        .arg(&script)
        .args(["--configs", &configs.display().to_string(), "--seconds", &seconds.to_string()])
        .args(["--threads", &threads.to_string(), "--reps", &a.reps.to_string()])
        .output()
        .with_context(|| format!("running {} {}", py.display(), script.display()))?;
    let _ = std::fs::remove_file(&configs);
    anyhow::ensure!(out.status.success(), "the PyTorch reference failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("the PyTorch reference's JSON")?;
    let times: Vec<f64> = v["times"].as_array().context("no times")?.iter().filter_map(|x| x.as_f64()).collect();
    anyhow::ensure!(!times.is_empty(), "the PyTorch reference timed nothing");
    let torch = stats(times);
    t.push(
        "tokenize",
        format!("PyTorch reference, float32, {threads} threads"),
        "s/min",
        per_minute(torch),
        format!("yued {:.2}x as fast (F32), {:.2}x (Q8_0)", torch.median / ours.median, torch.median / q8.median),
    );
    Ok(())
}
