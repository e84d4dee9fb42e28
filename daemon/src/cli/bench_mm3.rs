//! `yued bench --family mm3`: MiniMax Music 3's speed table, measured in one run: the AR
//! half per frame (the LM's feedback step for the guidance pair plus the depth decoder's 7
//! steps), the DiT per Euler step at a full window (689 latents, the guidance pair as one
//! batch), the VAE per second of audio, and a whole song: its time to the first decoded
//! window (what a listener waits for) and its real-time factor.
use super::bench::{time, BenchArgs, Row, Stats};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;
use yued_engine::gguf::GgufFile;
use yued_engine::models::mm3::compose::{compose, ArSettings, SeedDraws};
use yued_engine::models::mm3::cond::CondEncoder;
use yued_engine::models::mm3::demo::write_demo;
use yued_engine::models::mm3::depth::DepthModel;
use yued_engine::models::mm3::dit::DitModel;
use yued_engine::models::mm3::lm::{self, LmModel};
use yued_engine::models::mm3::pipeline::render_song;
use yued_engine::models::mm3::prompt;
use yued_engine::models::mm3::synth::SynthSettings;
use yued_engine::models::mm3::vae::VaeModel;
use yued_engine::models::yue2::demo::Preset;

/// The five files of a demo preset (written once into the cache).
fn files(a: &BenchArgs) -> anyhow::Result<(Vec<PathBuf>, String)> {
    let preset: Preset = a.preset.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    let dir = a.cache.join(format!("mm3-{}", a.preset));
    let names: Vec<PathBuf> = ["lm", "depth", "cond", "dit", "vae"].iter().map(|c| dir.join(format!("mm3-demo-{}-{c}.gguf", a.preset))).collect();
    if !names.iter().all(|p| p.exists()) {
        eprintln!("writing the MiniMax Music 3 {} demo into {} (once)", a.preset, dir.display());
        let pb = super::progress_bar(100, "demo model");
        write_demo(&dir, preset, 0, &mut |done, total| pb.set_position((done * 100 / total.max(1)) as u64)).context("writing the demo model")?;
        pb.finish_and_clear();
    }
    Ok((names, format!("MiniMax Music 3 demo preset {} (random weights)", a.preset)))
}

pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
    let all = a.only.contains("mem,prefill");
    let want = |s: &str| all || only.contains(&s);
    let threads = if a.device.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { a.device.threads };
    let backend = a.device.open()?;
    let (paths, label) = files(a)?;
    let mut rows: Vec<Row> = Vec::new();
    let mut push = |section, what: String, unit, stats: Stats, note: String| {
        let r = Row { section, what, unit, stats, note };
        eprintln!("  {:<8} {:<46} {:>10.3} {:<8} [{:.3} .. {:.3}] {}", r.section, r.what, r.stats.median, r.unit, r.stats.min, r.stats.max, r.note);
        rows.push(r);
    };
    eprintln!("yued bench: {label}, device {}, {threads} threads, {} reps", backend.name(), a.reps);
    let open = |i: usize| GgufFile::open(&paths[i]);
    let caption = "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright vocals";
    let lyrics = "[verse]\nneon lights over the city\n[chorus]\nwe run, we run";
    let mut lm_model = LmModel::load(&open(0)?, &backend)?;
    let tok = lm::tokenizer(&open(0)?, &lm_model.info)?;
    let p = prompt::build(&tok, &lm_model.info.tokens, caption, lyrics).map_err(|e| anyhow::anyhow!(e))?;
    let mut depth = DepthModel::load(&open(1)?, lm_model.hidden(), &backend)?;
    if want("frame") {
        let frames = if a.quick { 16 } else { 64 };
        for batch in [true, false] {
            let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: batch };
            let mut n = 0usize;
            let st = time(a.reps, || {
                let songs = compose(&backend, &mut lm_model, &mut depth, &p, 1, &s, &mut SeedDraws::new(7, 1), &|| false, &mut |_, _| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
                n = songs[0].codes.len();
                Ok(())
            })?;
            let per = st.map(|t| t * 1000.0 / n.max(1) as f64);
            push(
                "frame",
                format!("AR frame (LM + 7 depth steps), {}", if batch { "guidance as a batch of 2" } else { "split guidance" }),
                "ms",
                per,
                format!("{n} frames after a {}-token prompt", p.cond.len()),
            );
        }
    }
    drop((lm_model, depth));
    let mut cond = CondEncoder::load(&open(2)?, &backend)?;
    let mut dit = DitModel::load(&open(3)?, &backend)?;
    let mut vae = VaeModel::load(&open(4)?, &backend)?;
    let c = dit.cfg.clone();
    let window = cond.cfg.latent_length(200);
    if want("dit") {
        let x: Vec<f32> = (0..window * c.in_channels).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let cd: Vec<f32> = (0..window * c.condition_dim).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
        for batch in [true, false] {
            let st = time(a.reps, || {
                dit.guided(&backend, &x, &cd, window, 1, 0.5, 1.7, batch)?;
                Ok(())
            })?;
            push(
                "dit",
                format!("DiT Euler step, {window} latents, {}", if batch { "guidance as a batch of 2" } else { "split guidance" }),
                "ms",
                st.map(|t| t * 1000.0),
                format!("{} blocks of {}", c.num_layers, c.dim()),
            );
        }
    }
    if want("vae") {
        let lat: Vec<f32> = (0..window * vae.info.latent_channels).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let secs = (window * vae.info.hop()) as f64 / vae.info.sample_rate as f64;
        let st = time(a.reps, || {
            vae.decode(&backend, &lat)?;
            Ok(())
        })?;
        push("vae", format!("VAE decode of a window ({window} latents)"), "ms/s", st.map(|t| t * 1000.0 / secs), format!("{secs:.2} s of stereo"));
    }
    if want("e2e") {
        // A whole song: the AR half, then the windows; the first decoded window is when a
        // listener starts hearing.
        let mut lm_model = LmModel::load(&open(0)?, &backend)?;
        let mut depth = DepthModel::load(&open(1)?, lm_model.hidden(), &backend)?;
        let frames = (a.e2e_seconds * 25.0) as usize;
        let t0 = Instant::now();
        let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: true };
        let songs = compose(&backend, &mut lm_model, &mut depth, &p, 1, &s, &mut SeedDraws::new(3, 1), &|| false, &mut |_, _| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
        drop((lm_model, depth));
        let ar = t0.elapsed().as_secs_f64();
        let steps = 30;
        let mut first = None;
        let tracks = render_song(&backend, &mut cond, &mut dit, &mut vae, &songs[0], 5, 1, &SynthSettings { steps, dit_cfg: 1.7, batch_cfg: true }, &|| false, &mut |_, _| {}, &mut |_| {
            first.get_or_insert(t0.elapsed().as_secs_f64());
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let total = t0.elapsed().as_secs_f64();
        let audio = tracks[0].len() as f64 / 2.0 / 44_100.0;
        let one = |v: f64| Stats { median: v, min: v, max: v };
        push("e2e", format!("time to first audio, {:.0} s song", audio), "s", one(first.unwrap_or(total)), format!("AR half {ar:.1} s of it"));
        push("e2e", format!("whole song, {:.0} s, {steps} steps", audio), "x realtime", one(audio / total), format!("{total:.1} s per song"));
    }
    if want("stream") {
        let dir = paths[0].parent().context("the demo's directory")?;
        for r in super::bench_stream::run_mm3(a, dir)? {
            push(r.section, r.what, r.unit, r.stats, r.note);
        }
    }
    println!("{:<8} {:<46} {:>10} {:>10} {:>10}  {:<10} note", "section", "what", "median", "min", "max", "unit");
    for r in &rows {
        println!("{:<8} {:<46} {:>10.3} {:>10.3} {:>10.3}  {:<10} {}", r.section, r.what, r.stats.median, r.stats.min, r.stats.max, r.unit, r.note);
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({ "model": label, "device": backend.name(), "threads": threads, "reps": a.reps, "rows": rows });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
