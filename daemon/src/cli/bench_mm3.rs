//! `yued bench --family mm3`: MiniMax Music 3's speed table, measured in one run: the AR
//! half per frame (the LM's feedback step for the guidance pair plus the depth decoder's 7
//! steps), the LM's step alone (next to llama.cpp's with `--llama-cpp`), the DiT per Euler step at a full window (689 latents, the guidance pair as one
//! batch), the VAE per second of audio, and a whole song: its time to the first decoded
//! window (what a listener waits for) and its real-time factor.
use super::bench_common::{stats, time, BenchArgs, Row, Stats};
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

/// The five component files (lm, depth, cond, dit, vae; `None` where `--models` has
/// none): those of `--models`, else of a demo preset (written once into the cache).
fn files(a: &BenchArgs) -> anyhow::Result<(Vec<Option<PathBuf>>, String)> {
    if let Some(dir) = &a.models {
        let (reg, _) = yued_engine::registry::Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
        let found: Vec<Option<PathBuf>> = yued_engine::registry::Bucket::MM3.iter().map(|&b| reg.entries(b).first().map(|e| e.path.clone())).collect();
        if found.iter().all(Option::is_none) {
            anyhow::bail!("--models {}: no MiniMax Music 3 component file (mm3-lm, mm3-depth, mm3-cond, mm3-dit, mm3-vae)", dir.display());
        }
        return Ok((found, format!("MiniMax Music 3 files of {}", dir.display())));
    }
    let preset: Preset = a.preset.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    let dir = a.cache.join(format!("mm3-{}", a.preset));
    let names: Vec<PathBuf> = ["lm", "depth", "cond", "dit", "vae"].iter().map(|c| dir.join(format!("mm3-demo-{}-{c}.gguf", a.preset))).collect();
    if !names.iter().all(|p| p.exists()) {
        eprintln!("writing the MiniMax Music 3 {} demo into {} (once)", a.preset, dir.display());
        let pb = super::progress_bar(100, "demo model");
        write_demo(&dir, preset, 0, &mut |done, total| pb.set_position((done * 100 / total.max(1)) as u64)).context("writing the demo model")?;
        pb.finish_and_clear();
    }
    Ok((names.into_iter().map(Some).collect(), format!("MiniMax Music 3 demo preset {} (random weights)", a.preset)))
}

pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
    let all = a.only.contains("mem,prefill");
    let (paths, label) = files(a)?;
    // A section runs when asked for and its components are there.
    let needs = |s: &str| -> &[usize] {
        match s {
            "frame" => &[0, 1],
            "lm" => &[0],
            "dit" => &[2, 3],
            "vae" => &[2, 4],
            _ => &[0, 1, 2, 3, 4],
        }
    };
    let want = |s: &str| {
        let asked = all || only.contains(&s);
        let missing: Vec<&str> = needs(s).iter().filter(|&&i| paths[i].is_none()).map(|&i| ["lm", "depth", "cond", "dit", "vae"][i]).collect();
        if asked && !missing.is_empty() {
            eprintln!("  {s}: skipped, no {} file", missing.join(", "));
        }
        asked && missing.is_empty()
    };
    let threads = if a.device.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { a.device.threads };
    let backend = a.device.open()?;
    let mut rows: Vec<Row> = Vec::new();
    let mut push = |section, what: String, unit, stats: Stats, note: String| {
        let r = Row { section, what, unit, stats, note };
        eprintln!("  {:<8} {:<46} {:>10.3} {:<8} [{:.3} .. {:.3}] {}", r.section, r.what, r.stats.median, r.unit, r.stats.min, r.stats.max, r.note);
        rows.push(r);
    };
    eprintln!("yued bench: {label}, device {}, {threads} threads, {} reps", backend.name(), a.reps);
    let open = |i: usize| GgufFile::open(paths[i].as_ref().expect("a section's files are checked by want()"));
    let caption = "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright vocals";
    let lyrics = "[verse]\nneon lights over the city\n[chorus]\nwe run, we run";
    let (w_frame, w_lm, w_dit, w_vae, w_e2e) = (want("frame"), want("lm"), want("dit"), want("vae"), want("e2e"));
    // The prompt's ids, from the LM file's tokenizer (the frame and e2e sections).
    let prompt_of = |lm_model: &LmModel| -> anyhow::Result<prompt::Prompt> {
        let tok = lm::tokenizer(&open(0)?, &lm_model.info)?;
        prompt::build(&tok, &lm_model.info.tokens, caption, lyrics).map_err(|e| anyhow::anyhow!(e))
    };
    if w_frame {
        let mut lm_model = LmModel::load(&open(0)?, &backend)?;
        let p = prompt_of(&lm_model)?;
        let mut depth = DepthModel::load(&open(1)?, lm_model.hidden(), &backend)?;
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
    if w_lm {
        // The LM alone, one feedback step of the guidance pair behind a filled cache, and
        // with --llama-cpp llama.cpp's decode of the same weights exported as a `qwen3`
        // GGUF, at equal threads, batch, cache length and KV type (F16).
        let mut lm_model = LmModel::load(&open(0)?, &backend)?;
        let c = lm_model.info.config.clone();
        let llama = if a.llama_cpp {
            let src = paths[0].as_ref().expect("checked");
            let q = src.with_extension("qwen3.gguf");
            if !q.exists() {
                eprintln!("exporting the LM as a qwen3 GGUF: {}", q.display());
                lm::export_qwen3(src, &q)?;
            }
            Some(yued_engine::ggml::llama_ref::LlamaRef::load(&q, backend.name() != "CPU").map_err(|e| anyhow::anyhow!(e))?)
        } else {
            None
        };
        let emb = lm_model.embeddings(&[17]);
        for len in a.cache_lengths.clone().unwrap_or(if a.quick { vec![256] } else { vec![256, 2048] }) {
            if len + 1 > c.max_position_embeddings {
                eprintln!("  lm       cache {len} skipped: beyond the LM's {} positions", c.max_position_embeddings);
                continue;
            }
            let mut set = lm_model.kv_set(&backend, len + 1, 2)?;
            let mut step = || -> anyhow::Result<f64> {
                set.assume_filled(len);
                let t = Instant::now();
                lm_model.feed(&backend, &mut set, &[(&emb, 0), (&emb, 1)], true)?;
                Ok(t.elapsed().as_secs_f64())
            };
            let s = stats(yued_engine::ggml::llama_ref::mean_steps(a.reps, &mut step)?);
            push(
                "lm",
                format!("LM step, guidance pair, cache {len}"),
                "ms/step",
                s.map(|t| t * 1e3),
                format!("{} layers of {}, logits of the {} semantic codes", c.num_hidden_layers, c.hidden_size, lm_model.info.tokens.sample_rows().len()),
            );
            if let Some(l) = &llama {
                let session = l.session(2, len, threads).map_err(|e| anyhow::anyhow!(e))?;
                let ls = stats(session.steps(2, a.reps.max(1)).map_err(|e| anyhow::anyhow!(e))?);
                push(
                    "llama",
                    format!("llama.cpp step, guidance pair, cache {len}"),
                    "ms/step",
                    ls.map(|t| t * 1e3),
                    format!("yued / llama.cpp = {:.2} (llama.cpp: logits of all {})", s.median / ls.median, c.vocab_size),
                );
            }
        }
    }
    // A full window's latents (689 at the published rates), from the condition encoder's.
    let window = if w_dit || w_vae || w_e2e { CondEncoder::load(&open(2)?, &backend)?.cfg.latent_length(200) } else { 0 };
    if w_dit {
        let mut dit = DitModel::load(&open(3)?, &backend)?;
        let c = dit.cfg.clone();
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
    if w_vae {
        let mut vae = VaeModel::load(&open(4)?, &backend)?;
        let lat: Vec<f32> = (0..window * vae.info.latent_channels).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let secs = (window * vae.info.hop()) as f64 / vae.info.sample_rate as f64;
        let st = time(a.reps, || {
            vae.decode(&backend, &lat)?;
            Ok(())
        })?;
        push("vae", format!("VAE decode of a window ({window} latents)"), "ms/s", st.map(|t| t * 1000.0 / secs), format!("{secs:.2} s of stereo"));
    }
    if w_e2e {
        // A whole song: the AR half, then the windows; the first decoded window is when a
        // listener starts hearing.
        let mut lm_model = LmModel::load(&open(0)?, &backend)?;
        let p = prompt_of(&lm_model)?;
        let mut depth = DepthModel::load(&open(1)?, lm_model.hidden(), &backend)?;
        let frames = (a.e2e_seconds * 25.0) as usize;
        let t0 = Instant::now();
        let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: true };
        let songs = compose(&backend, &mut lm_model, &mut depth, &p, 1, &s, &mut SeedDraws::new(3, 1), &|| false, &mut |_, _| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
        drop((lm_model, depth));
        let ar = t0.elapsed().as_secs_f64();
        let (mut cond, mut dit, mut vae) = (CondEncoder::load(&open(2)?, &backend)?, DitModel::load(&open(3)?, &backend)?, VaeModel::load(&open(4)?, &backend)?);
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
        let dir = paths[0].as_ref().and_then(|p| p.parent()).context("the models' directory")?;
        super::bench_stream::run_mm3(a, dir, &mut |r| push(r.section, r.what, r.unit, r.stats, r.note))?;
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
