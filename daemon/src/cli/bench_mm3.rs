//! `yued bench --family mm3`: MiniMax Music 3's speed table, measured in one run: the AR
//! half per frame (the LM's feedback step for the guidance pair plus the depth decoder's 7
//! steps; the depth decoder's frame over its frame cache beside whole sequences), the LM's
//! step alone (next to llama.cpp's with `--llama-cpp`), the DiT per Euler step at a full
//! window (689 latents, the guidance pair as one batch), the VAE per second of audio, and a
//! whole song: its time to the first decoded window (what a listener waits for) and its
//! real-time factor.
use super::bench_common::{stats, threads_of, time, BenchArgs, Stats, Table};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::mm3::compose::{compose, ArSettings, SeedDraws};
use yued_engine::models::mm3::cond::CondEncoder;
use yued_engine::models::mm3::demo::write_demo;
use yued_engine::models::mm3::depth::{step_positions, DepthModel};
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
        let (reg, _) =
            yued_engine::registry::Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
        let found: Vec<Option<PathBuf>> = yued_engine::registry::Bucket::MM3
            .iter()
            .map(|&b| reg.entries(b).first().map(|e| e.path.clone()))
            .collect();
        if found.iter().all(Option::is_none) {
            anyhow::bail!(
                "--models {}: no MiniMax Music 3 component file (mm3-lm, mm3-depth, mm3-cond, mm3-dit, mm3-vae)",
                dir.display()
            );
        }
        return Ok((found, format!("MiniMax Music 3 files of {}", dir.display())));
    }
    let preset: Preset = a.preset.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    let dir = a.cache.join(format!("mm3-{}", a.preset));
    let names: Vec<PathBuf> = ["lm", "depth", "cond", "dit", "vae"]
        .iter()
        .map(|c| dir.join(format!("mm3-demo-{}-{c}.gguf", a.preset)))
        .collect();
    if !names.iter().all(|p| p.exists()) {
        eprintln!("writing the MiniMax Music 3 {} demo into {} (once)", a.preset, dir.display());
        let pb = super::progress_bar(100, "demo model");
        write_demo(&dir, preset, 0, &mut |done, total| pb.set_position((done * 100 / total.max(1)) as u64))
            .context("writing the demo model")?;
        pb.finish_and_clear();
    }
    Ok((names.into_iter().map(Some).collect(), format!("MiniMax Music 3 demo preset {} (random weights)", a.preset)))
}

/// What every section of a MiniMax run measures on.
struct Ctx<'a> {
    a: &'a BenchArgs,
    backend: &'a Backend,
    /// The five component files (lm, depth, cond, dit, vae), where there are.
    paths: &'a [Option<PathBuf>],
    threads: usize,
}

impl Ctx<'_> {
    fn open(&self, i: usize) -> Result<GgufFile, yued_engine::gguf::GgufError> {
        GgufFile::open(self.paths[i].as_ref().expect("a section's files are checked by want()"))
    }

    /// The prompt's ids, from the LM file's tokenizer (the frame and e2e sections).
    fn prompt(&self, lm_model: &LmModel) -> anyhow::Result<prompt::Prompt> {
        let lyrics = "[verse]\nneon lights over the city\n[chorus]\nwe run, we run";
        let caption = "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright vocals";
        let tok = lm::tokenizer(&self.open(0)?, &lm_model.info)?;
        prompt::build(&tok, &lm_model.info.tokens, caption, lyrics).map_err(|e| anyhow::anyhow!(e))
    }
}

/// The AR half per frame: the LM's feedback step plus the depth decoder's 7 steps, with
/// the guidance pair as one batch and split.
fn bench_frame(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    let mut lm_model = LmModel::load(&c.open(0)?, c.backend)?;
    let p = c.prompt(&lm_model)?;
    let mut depth = DepthModel::load(&c.open(1)?, lm_model.hidden(), c.backend)?;
    let frames = if c.a.quick { 16 } else { 64 };
    for batch in [true, false] {
        let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: batch };
        let mut n = 0usize;
        let st = time(c.a.reps, || {
            let songs = compose(
                c.backend,
                &mut lm_model,
                &mut depth,
                &p,
                1,
                &s,
                &mut SeedDraws::new(7, 1),
                &|| false,
                &mut |_, _| {},
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            n = songs[0].codes.len();
            Ok(())
        })?;
        let per = st.map(|t| t * 1000.0 / n.max(1) as f64);
        t.push(
            "frame",
            format!(
                "AR frame (LM + 7 depth steps), {}",
                if batch { "guidance as a batch of 2" } else { "split guidance" }
            ),
            "ms",
            per,
            format!("{n} frames after a {}-token prompt", p.cond.len()),
        );
    }
    bench_depth_frame(c, &mut depth, t)
}

/// The depth decoder alone, a frame's 7 steps both ways side by side: over the frame cache
/// (each step computes its new position; what the composer runs) and as whole sequences
/// (each step reruns the frame so far, as the reference does), for one song's guidance pair
/// (2 rows) and four songs' (8 rows), and how far apart the two ways' logits are.
fn bench_depth_frame(c: &Ctx<'_>, depth: &mut DepthModel, t: &mut Table) -> anyhow::Result<()> {
    let h = depth.cfg.hidden_size;
    let positions = depth.cfg.num_codebooks;
    let mut x = 0x2545_f491_u32;
    for rows in [2, 8] {
        let seqs: Vec<f32> = (0..rows * positions * h)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as f32 / u32::MAX as f32 - 0.5
            })
            .collect();
        let upto = |s: usize, from: usize| -> Vec<f32> {
            seqs.chunks(positions * h).flat_map(|q| q[from * h..s * h].iter().copied()).collect()
        };
        let (mut cached, mut whole) = (Vec::new(), Vec::new());
        let st_cached = time(c.a.reps, || {
            cached.clear();
            for s in 2..=positions {
                cached.push(depth.step(c.backend, &upto(s, step_positions(s).start), s, rows)?.logits);
            }
            Ok(())
        })?;
        let st_whole = time(c.a.reps, || {
            whole.clear();
            for s in 2..=positions {
                whole.push(depth.forward(c.backend, &upto(s, 0), s, rows, false)?.logits);
            }
            Ok(())
        })?;
        // How far the two ways' logits are apart: the largest difference and the relative RMS.
        let (mut apart, mut d2, mut w2) = (0f32, 0f64, 0f64);
        for (a, b) in cached.iter().flatten().flatten().zip(whole.iter().flatten().flatten()) {
            apart = apart.max((a - b).abs());
            d2 += f64::from(a - b).powi(2);
            w2 += f64::from(*b).powi(2);
        }
        let ratio = st_whole.median / st_cached.median;
        t.push(
            "frame",
            format!("depth decoder, a frame's 7 steps over the frame cache, {rows} rows"),
            "ms",
            st_cached.map(|s| s * 1000.0),
            format!(
                "{ratio:.2}x the whole sequences; logits at most {apart:.2e} apart, rel. RMS {:.1e}",
                (d2 / w2.max(f64::MIN_POSITIVE)).sqrt()
            ),
        );
        t.push(
            "frame",
            format!("depth decoder, a frame's 7 steps as whole sequences, {rows} rows"),
            "ms",
            st_whole.map(|s| s * 1000.0),
            "the reference's way: each step reruns the frame so far".into(),
        );
    }
    Ok(())
}

/// Clients' songs in one decode step against one after another (`--only batching`).
fn bench_batching(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    let mut lm_model = LmModel::load(&c.open(0)?, c.backend)?;
    let p = c.prompt(&lm_model)?;
    // A joining prompt of more than one piece: the usual prompt's ids repeated (the full
    // demo's vocabulary holds no text to tokenize a long lyric with).
    let reps = lm_model.prefill_chunk / p.cond.len().max(1) + 2;
    let long = prompt::Prompt { cond: p.cond.repeat(reps), uncond: p.uncond.repeat(reps) };
    let mut depth = DepthModel::load(&c.open(1)?, lm_model.hidden(), c.backend)?;
    let clients = super::bench_common::batching_clients(c.a);
    let reps = if c.a.quick { 1 } else { c.a.reps.min(3) };
    let mut m =
        super::bench_batching::mm3::Models { backend: c.backend, lm: &mut lm_model, depth: &mut depth, prompt: &p };
    let runs = super::bench_batching::mm3::Runs { clients: &clients, reps: c.a.batching_reps, stall_reps: reps };
    super::bench_batching::mm3::run(&mut m, &long, c.a.batching_seconds, c.a.stream_seconds, &runs, t)
}

/// The LM's step alone (and llama.cpp's on the same weights, with `--llama-cpp`).
fn bench_lm(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    // The LM alone, one feedback step of the guidance pair behind a filled cache, and
    // with --llama-cpp llama.cpp's decode of the same weights exported as a `qwen3`
    // GGUF, at equal threads, batch, cache length and KV type (F16).
    let mut lm_model = LmModel::load(&c.open(0)?, c.backend)?;
    let lc = lm_model.info.config.clone();
    let llama = if c.a.llama_cpp {
        let src = c.paths[0].as_ref().expect("checked");
        let q = src.with_extension("qwen3.gguf");
        if !q.exists() {
            eprintln!("exporting the LM as a qwen3 GGUF: {}", q.display());
            lm::export_qwen3(src, &q)?;
        }
        Some(
            yued_engine::ggml::llama_ref::LlamaRef::load(&q, c.backend.name() != "CPU")
                .map_err(|e| anyhow::anyhow!(e))?,
        )
    } else {
        None
    };
    let emb = lm_model.embeddings(&[17]);
    for len in c.a.cache_lengths.clone().unwrap_or(if c.a.quick { vec![256] } else { vec![256, 2048] }) {
        if len + 1 > lc.max_position_embeddings {
            eprintln!("  lm       cache {len} skipped: beyond the LM's {} positions", lc.max_position_embeddings);
            continue;
        }
        let mut set = lm_model.kv_set(c.backend, len + 1, 2)?;
        let mut step = || -> anyhow::Result<f64> {
            set.assume_filled(len);
            let t = Instant::now();
            lm_model.feed(c.backend, &mut set, &[(&emb, 0), (&emb, 1)], true)?;
            Ok(t.elapsed().as_secs_f64())
        };
        let s = stats(yued_engine::ggml::llama_ref::mean_steps(c.a.reps, &mut step)?);
        t.push(
            "lm",
            format!("LM step, guidance pair, cache {len}"),
            "ms/step",
            s.map(|t| t * 1e3),
            format!(
                "{} layers of {}, logits of the {} semantic codes",
                lc.num_hidden_layers,
                lc.hidden_size,
                lm_model.info.tokens.sample_rows().len()
            ),
        );
        if let Some(l) = &llama {
            let session = l.session(2, len, c.threads).map_err(|e| anyhow::anyhow!(e))?;
            let ls = stats(session.steps(2, c.a.reps.max(1)).map_err(|e| anyhow::anyhow!(e))?);
            t.push(
                "llama",
                format!("llama.cpp step, guidance pair, cache {len}"),
                "ms/step",
                ls.map(|t| t * 1e3),
                format!("yued / llama.cpp = {:.2} (llama.cpp: logits of all {})", s.median / ls.median, lc.vocab_size),
            );
        }
    }
    Ok(())
}

/// The DiT per Euler step at a full window, the guidance pair as a batch and split.
fn bench_dit(c: &Ctx<'_>, window: usize, t: &mut Table) -> anyhow::Result<()> {
    let mut dit = DitModel::load(&c.open(3)?, c.backend)?;
    let dc = dit.cfg.clone();
    let x: Vec<f32> = (0..window * dc.in_channels).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let cd: Vec<f32> = (0..window * dc.condition_dim).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    for batch in [true, false] {
        let st = time(c.a.reps, || {
            dit.guided(c.backend, &x, &cd, window, 1, 0.5, 1.7, batch)?;
            Ok(())
        })?;
        t.push(
            "dit",
            format!(
                "DiT Euler step, {window} latents, {}",
                if batch { "guidance as a batch of 2" } else { "split guidance" }
            ),
            "ms",
            st.map(|t| t * 1000.0),
            format!("{} blocks of {}", dc.num_layers, dc.dim()),
        );
    }
    Ok(())
}

/// The VAE per second of audio, one window at a time.
fn bench_vae(c: &Ctx<'_>, window: usize, t: &mut Table) -> anyhow::Result<()> {
    let mut vae = VaeModel::load(&c.open(4)?, c.backend)?;
    let lat: Vec<f32> =
        (0..window * vae.info.latent_channels).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let secs = (window * vae.info.hop()) as f64 / vae.info.sample_rate as f64;
    let st = time(c.a.reps, || {
        vae.decode(c.backend, &lat)?;
        Ok(())
    })?;
    t.push(
        "vae",
        format!("VAE decode of a window ({window} latents)"),
        "ms/s",
        st.map(|t| t * 1000.0 / secs),
        format!("{secs:.2} s of stereo"),
    );
    Ok(())
}

/// A whole song: its time to the first decoded window and its real-time factor.
fn bench_e2e(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    // A whole song: the AR half, then the windows; the first decoded window is when a
    // listener starts hearing.
    let mut lm_model = LmModel::load(&c.open(0)?, c.backend)?;
    let p = c.prompt(&lm_model)?;
    let mut depth = DepthModel::load(&c.open(1)?, lm_model.hidden(), c.backend)?;
    let frames = (c.a.e2e_seconds * 25.0) as usize;
    let t0 = Instant::now();
    let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: true };
    let songs =
        compose(c.backend, &mut lm_model, &mut depth, &p, 1, &s, &mut SeedDraws::new(3, 1), &|| false, &mut |_, _| {})
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop((lm_model, depth));
    let ar = t0.elapsed().as_secs_f64();
    let (mut cond, mut dit, mut vae) = (
        CondEncoder::load(&c.open(2)?, c.backend)?,
        DitModel::load(&c.open(3)?, c.backend)?,
        VaeModel::load(&c.open(4)?, c.backend)?,
    );
    let steps = 30;
    let mut first = None;
    let tracks = render_song(
        c.backend,
        &mut cond,
        &mut dit,
        &mut vae,
        &songs[0],
        5,
        1,
        &SynthSettings { steps, dit_cfg: 1.7, batch_cfg: true },
        &|| false,
        &mut |_, _| {},
        &mut |_| {
            first.get_or_insert(t0.elapsed().as_secs_f64());
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let total = t0.elapsed().as_secs_f64();
    let audio = tracks[0].len() as f64 / 2.0 / 44_100.0;
    let one = |v: f64| Stats { median: v, min: v, max: v };
    t.push(
        "e2e",
        format!("time to first audio, {:.0} s song", audio),
        "s",
        one(first.unwrap_or(total)),
        format!("AR half {ar:.1} s of it"),
    );
    t.push(
        "e2e",
        format!("whole song, {:.0} s, {steps} steps", audio),
        "x realtime",
        one(audio / total),
        format!("{total:.1} s per song"),
    );
    Ok(())
}

pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
    let all = a.only.contains("mem,prefill");
    let (paths, label) = files(a)?;
    // A section runs when asked for and its components are there.
    let needs = |s: &str| -> &[usize] {
        match s {
            "frame" | "batching" => &[0, 1],
            "lm" => &[0],
            "dit" => &[2, 3],
            "vae" => &[2, 4],
            _ => &[0, 1, 2, 3, 4],
        }
    };
    let want = |s: &str| {
        // The default runs every section but batching (minutes a client count at full size).
        let asked = (all && s != "batching") || only.contains(&s);
        let missing: Vec<&str> = needs(s)
            .iter()
            .filter(|&&i| paths[i].is_none())
            .map(|&i| ["lm", "depth", "cond", "dit", "vae"][i])
            .collect();
        if asked && !missing.is_empty() {
            eprintln!("  {s}: skipped, no {} file", missing.join(", "));
        }
        asked && missing.is_empty()
    };
    let threads = threads_of(a);
    let backend = a.device.open()?;
    let mut table = Table::default();
    eprintln!("yued bench: {label}, device {}, {threads} threads, {} reps", backend.name(), a.reps);
    let c = Ctx { a, backend: &backend, paths: &paths, threads };
    let (w_frame, w_lm, w_dit, w_vae, w_e2e) = (want("frame"), want("lm"), want("dit"), want("vae"), want("e2e"));
    if w_frame {
        bench_frame(&c, &mut table)?;
    }
    if w_lm {
        bench_lm(&c, &mut table)?;
    }
    if want("batching") {
        bench_batching(&c, &mut table)?;
    }
    // A full window's latents (689 at the published rates), from the condition encoder's.
    let window =
        if w_dit || w_vae || w_e2e { CondEncoder::load(&c.open(2)?, &backend)?.cfg.latent_length(200) } else { 0 };
    if w_dit {
        bench_dit(&c, window, &mut table)?;
    }
    if w_vae {
        bench_vae(&c, window, &mut table)?;
    }
    if w_e2e {
        bench_e2e(&c, &mut table)?;
    }
    if want("stream") {
        let dir = paths[0].as_ref().and_then(|p| p.parent()).context("the models' directory")?;
        super::bench_stream::run_mm3(a, dir, &mut |r| table.add(r))?;
    }
    table.report(a, &label, backend.name(), threads)
}
