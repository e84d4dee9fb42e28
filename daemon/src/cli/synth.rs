use super::common::{random_u64, read_any_request, write_file};
use super::npy;
use super::synth_args::{numbered, SynthArgs};
use anyhow::Context;
use std::path::{Path, PathBuf};
use yued_audio::Pcm;
use yued_engine::cancel::CancelToken;
use yued_engine::models::yue2::pipeline::{Event, Pipeline, PipelineOptions, Track};
use yued_engine::registry::{Bucket, Registry};
use yued_engine::rng::torch_cpu::randn;
use yued_protocol::{Request, Stage};

pub fn run(a: SynthArgs) -> anyhow::Result<()> {
    // Every track writes its replay request beside its audio: never over the request read.
    a.check_outputs("")?;
    match files(&a)? {
        Files::Mm3(reg, r) => {
            warn_extension(&a.out, r.output_format);
            super::synth_mm3::run(&a, &reg, *r)
        }
        Files::Yue2(model, vae, req) => {
            warn_extension(&a.out, req.output_format);
            run_yue2(&a, &model, &vae, *req)
        }
    }
}

/// Says so when `--out` names another extension than the request's format writes (the file
/// follows the request: `--out song.wav` of an mp3 request is song.mp3).
fn warn_extension(out: &std::path::Path, format: yued_protocol::OutputFormat) {
    let asked = out.extension().map(|e| e.to_string_lossy().to_lowercase()).unwrap_or_default();
    let written = format.extension();
    if asked != written {
        eprintln!(
            "note: the request's output_format is {}, so the audio is written as .{written} (--out names .{asked}; \
            set output_format in the request to change the format)",
            format.name(),
        );
    }
}

/// What a `yued synth` renders: MiniMax Music 3's five files and its request, or a YuE2
/// backbone, VAE and request.
enum Files {
    Mm3(Registry, Box<yued_protocol::Mm3Request>),
    Yue2(PathBuf, PathBuf, Box<yued_protocol::Yue2Request>),
}

/// The files the flags give (MiniMax's five, `--model`/`--vae`, or a `--models` folder,
/// where the request's family picks).
fn files(a: &SynthArgs) -> anyhow::Result<Files> {
    if let (Some(lm), Some(depth), Some(cond), Some(dit), Some(vae)) = (&a.lm, &a.depth, &a.cond, &a.dit, &a.vae_mm3) {
        let reg = Registry::from_files(&[
            (Bucket::Mm3Lm, lm),
            (Bucket::Mm3Depth, depth),
            (Bucket::Mm3Cond, cond),
            (Bucket::Mm3Dit, dit),
            (Bucket::Mm3Vae, vae),
        ])
        .map_err(|e| anyhow::anyhow!(e))?;
        let Request::Mm3(r) = read_any_request(&a.request, &[yued_protocol::Family::Mm3])? else {
            anyhow::bail!("{}: not a MiniMax Music 3 request (caption and lyrics)", a.request.display());
        };
        return Ok(Files::Mm3(reg, Box::new(r)));
    }
    match (&a.model, &a.vae, &a.models) {
        (Some(m), Some(v), _) => match read_any_request(&a.request, &[yued_protocol::Family::Yue2])? {
            Request::Yue2(r) => Ok(Files::Yue2(m.clone(), v.clone(), Box::new(r))),
            Request::Mm3(_) => unreachable!("only YuE2 is served"),
        },
        (_, _, Some(dir)) => {
            let (reg, _) = Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
            let served = super::synth_mm3::served(&reg);
            match read_any_request(&a.request, &served)? {
                Request::Mm3(r) => Ok(Files::Mm3(reg, Box::new(r))),
                Request::Yue2(r) => {
                    let pick = |b: Bucket| {
                        reg.resolve(b, "")
                            .map(|e| e.path.clone())
                            .map_err(|e| anyhow::anyhow!("--models {}: {e}", dir.display()))
                    };
                    Ok(Files::Yue2(pick(Bucket::Yue2)?, pick(Bucket::Yue2Vae)?, Box::new(r)))
                }
            }
        }
        _ => anyhow::bail!("give --models, or --model and --vae"),
    }
}

/// A YuE2 request read, overridden by the flags, loaded with its adapters, rendered with a
/// progress bar and written track by track.
fn run_yue2(a: &SynthArgs, model: &Path, vae: &Path, mut req: yued_protocol::Yue2Request) -> anyhow::Result<()> {
    if let Some(d) = a.duration {
        req.duration = d;
    }
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    if let Some(s) = a.seed {
        req.seed = s;
    }
    if let Some(s) = a.steps {
        req.steps = s;
    }
    let req = req.with_resolved_seeds(random_u64);
    let backend = a.device.open()?;
    eprintln!("loading {} and {} on {}", model.display(), vae.display(), backend.name());
    let refs = yued_actors::settings::adapters(&req);
    let mut terms = yued_engine::models::yue2::adapter::request_terms(a.adapters.as_deref(), model, &refs)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    if let Some(path) = &a.companion {
        use yued_engine::models::yue2::adapter::{add_companion, open_companion};
        let c = open_companion(path, model).map_err(|e| anyhow::anyhow!("--companion: {e}"))?;
        let same = |name: &str| {
            let file = a.adapters.as_deref().map(|d| d.join(name));
            file.and_then(|f| std::fs::canonicalize(f).ok()) == std::fs::canonicalize(path).ok()
        };
        let named = req.adapters.iter().any(|r| same(&r.name));
        add_companion(&mut terms.1, &c, model, req.companion_scale as f32, named)
            .map_err(|e| anyhow::anyhow!("--companion: {e}"))?;
        eprintln!(
            "companion {} at {}{}",
            c.name,
            req.companion_scale,
            if named { " (named by the request)" } else { "" }
        );
    }
    if !req.adapters.is_empty() {
        eprintln!("merging {} adapter(s): {} AR and {} NAR tensors", req.adapters.len(), terms.0.len(), terms.1.len());
    }
    let opts = PipelineOptions { max_seq: a.max_seq, vae_core: a.vae_core, vae_halo: a.vae_halo, ..Default::default() };
    let mut p = Pipeline::load_adapted(model, vae, backend, &opts, &terms)?;
    if yued_engine::gguf::GgufFile::open(model)?.get(yued_engine::models::yue2::demo::DEMO_KEY).is_some() {
        eprintln!("warning: {} holds RANDOM demo weights: the audio is noise", model.display());
    }
    let limits = yued_actors::settings::yue2_limits(&p.shared, req.lm_batch_size.max(1));
    let fault = |e: yued_protocol::RequestError| anyhow::anyhow!("{}: {e}", a.request.display());
    req.validate(&limits).map_err(fault)?;
    let settings = yued_actors::settings::yue2(&req).map_err(fault)?;
    let mut bar = Bar {
        pb: super::progress_bar(1, "loading"),
        stage: None,
        spec: p.audio_spec(),
        core: settings.tile_core(a.vae_core, a.vae_halo).max(1),
    };
    let tracks = p.run(&settings, &CancelToken::new(), &mut |e| bar.event(e)).map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.pb.finish_and_clear();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let batch = tracks.len() > 1;
    for t in &tracks {
        let suffix = if batch { format!("{}{}", t.song, t.variation) } else { String::new() };
        write_track(a, t, &suffix, &req)?;
    }
    Ok(())
}

/// The progress bar of a render: one bar per stage, the decode counted in tiles.
struct Bar {
    pb: indicatif::ProgressBar,
    stage: Option<Stage>,
    spec: yued_engine::models::AudioSpec,
    /// The tile core, so a track's tiles can be counted.
    core: usize,
}

impl Bar {
    fn enter(&mut self, s: Stage) {
        if self.stage != Some(s) {
            self.stage = Some(s);
            self.pb.set_message(format!("{s:?}").to_lowercase());
            self.pb.reset();
        }
    }

    fn event(&mut self, e: Event<'_>) {
        match e {
            Event::Progress { phase, done, total, .. } => {
                self.enter(yued_actors::settings::stage(phase));
                self.pb.set_length(total as u64);
                self.pb.set_position(done as u64);
            }
            Event::Score { song, abc } => {
                self.pb.println(format!("song {song}: score of {} lines", abc.lines().count()))
            }
            Event::Codes { song, codes, .. } => self.pb.println(format!(
                "song {song}: {} semantic frames ({:.1} s)",
                codes.len(),
                self.spec.code_seconds(codes.len())
            )),
            Event::Latents { .. } => {}
            Event::Tile { tile, .. } => {
                self.enter(Stage::Decode);
                self.pb.inc(1);
                let frames = tile.samples.div_ceil(self.spec.samples_per_latent);
                self.pb.set_length(self.pb.position().max(frames.div_ceil(self.core) as u64));
            }
        }
    }
}

fn write_track(a: &SynthArgs, t: &Track, suffix: &str, req: &yued_protocol::Yue2Request) -> anyhow::Result<()> {
    a.check_outputs(suffix)?;
    let replay = yued_actors::settings::yue2_replay(req, &t.meta(), t.variation);
    let pcm = Pcm::new(t.audio.sample_rate, t.audio.channels, t.pcm.clone());
    let seconds = pcm.seconds();
    let out = numbered(&a.out, suffix, req.output_format.extension());
    let json = numbered(&a.out, suffix, "json");
    let bytes = yued_audio::encode::normalize_and_encode(pcm, req.output_format, req.peak_clip, req.mp3_bitrate)?;
    write_file(&out, bytes)?;
    write_file(&json, serde_json::to_string_pretty(&replay)?)?;
    println!(
        "{}: {:.2} s ({} frames{}), replay {}",
        out.display(),
        seconds,
        t.frames,
        if t.truncated { ", cut by the budget" } else { "" },
        json.display()
    );
    if let Some(p) = &a.score {
        write_file(&numbered(p, suffix, "abc"), &t.abc)?;
    }
    if let Some(p) = &a.tokens {
        write_file(&numbered(p, suffix, "csv"), &replay.semantic_tokens)?;
    }
    if let Some(p) = &a.latent {
        write_file(&numbered(p, suffix, "vae"), t.latents.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())?;
    }
    if let Some(dir) = &a.dump {
        std::fs::create_dir_all(dir)?;
        let tag = if suffix.is_empty() { "track".to_string() } else { format!("track{suffix}") };
        let codes: Vec<i32> = t.codes.iter().map(|&c| c as i32).collect();
        npy::write_i32(&dir.join(format!("{tag}_codes.npy")), &[codes.len()], &codes)?;
        npy::write_f32(
            &dir.join(format!("{tag}_noise.npy")),
            &[t.frames, 64],
            &randn(replay.seed as u64, t.frames * 64),
        )?;
        npy::write_f32(&dir.join(format!("{tag}_latents.npy")), &[t.frames, 64], &t.latents)?;
        npy::write_f32(&dir.join(format!("{tag}_pcm.npy")), &[2, t.pcm.len() / 2], &t.pcm)?;
    }
    Ok(())
}
