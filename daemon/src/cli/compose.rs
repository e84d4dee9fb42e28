//! `yued compose`: the autoregressive half alone, for either family. Writes one replayable
//! request per song: for YuE2 the request with its score, its semantic codes and its exact
//! seeds; for MiniMax Music 3 the request with its `audio_codes` (8 per frame) and the
//! song's own `lm_seed`; so `POST /synth` renders it without sampling again.
use super::common::{not_an_input, random_u64, read_any_request, DeviceArgs};
use anyhow::Context;
use std::path::{Path, PathBuf};
use yued_engine::cancel::CancelToken;
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::pipeline::{Event, PipelineOptions, Shared};
use yued_engine::registry::{Bucket, Registry};
use yued_protocol::{Family, Limits, Request};

/// Runs the autoregressive half of a request and writes the replayable request of each song.
#[derive(clap::Args)]
pub struct ComposeArgs {
    /// A directory of model files, sorted by architecture (the first of each bucket in
    /// name order is used); or give --model.
    #[arg(long, required_unless_present = "model")]
    pub models: Option<PathBuf>,
    /// The YuE2 backbone GGUF (instead of --models; MiniMax Music 3 needs --models).
    #[arg(long, conflicts_with = "models")]
    pub model: Option<PathBuf>,
    /// The directory of LoRA adapters the request's `adapters` name (YuE2): the AR half is
    /// composed with those that change it merged in.
    #[arg(long)]
    pub adapters: Option<PathBuf>,
    /// Request JSON (its family from "family" or its fields, as POST /synth routes it).
    #[arg(long)]
    pub request: PathBuf,
    /// Where the replayable request goes; a batch of N songs writes `stem00.json`,
    /// `stem01.json`, ... beside it.
    #[arg(long, default_value = "request.json")]
    pub out: PathBuf,
    /// Token sampling seed (overrides the request's lm_seed; default random).
    #[arg(long)]
    pub lm_seed: Option<i64>,
    /// KV cache size in tokens (default: the model context).
    #[arg(long, default_value_t = 0)]
    pub max_seq: usize,
    /// MiniMax Music 3: run the guidance pair as two forwards instead of one batch of two
    /// (the reference's sequential path; codes may differ at activation epsilon).
    #[arg(long)]
    pub no_batch_cfg: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
}

fn numbered(path: &Path, song: usize, of: usize) -> PathBuf {
    if of == 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "request".into());
    path.with_file_name(format!("{stem}{song:02}.json"))
}

pub fn run(a: ComposeArgs) -> anyhow::Result<()> {
    let models = match &a.models {
        Some(dir) => Some(Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?.0),
        None => None,
    };
    let served: Vec<Family> = match &models {
        Some(reg) => Family::ALL
            .into_iter()
            .filter(|&f| match f {
                Family::Yue2 => !reg.entries(Bucket::Yue2).is_empty(),
                Family::Mm3 => !reg.entries(Bucket::Mm3Lm).is_empty(),
            })
            .collect(),
        None => vec![Family::Yue2],
    };
    let mut req = match read_any_request(&a.request, &served)? {
        Request::Mm3(req) => return compose_mm3(&a, models.as_ref().expect("MiniMax is served from --models"), req),
        Request::Yue2(req) => req,
    };
    let model = match (&a.model, &models, &a.models) {
        (Some(m), _, _) => m.clone(),
        (None, Some(reg), Some(dir)) => {
            reg.resolve(Bucket::Yue2, "").map_err(|e| anyhow::anyhow!("--models {}: {e}", dir.display()))?.path.clone()
        }
        _ => unreachable!("clap requires --model or --models"),
    };
    not_an_input(&a.out, &[&a.request, &model])?;
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    let req = req.with_resolved_seeds(random_u64);
    let shared = Shared::open(&model, &PipelineOptions { max_seq: a.max_seq, ..PipelineOptions::default() })?;
    let limits = yued_actors::settings::yue2_limits(&shared, req.lm_batch_size.max(1));
    let fault = |e: yued_protocol::RequestError| anyhow::anyhow!("{}: {e}", a.request.display());
    req.validate(&limits).map_err(fault)?;
    let settings = yued_actors::settings::yue2(&req).map_err(fault)?;
    let backend = a.device.open()?;
    let f = yued_engine::gguf::GgufFile::open(&model)?;
    if f.get(yued_engine::models::yue2::demo::DEMO_KEY).is_some() {
        eprintln!("warning: {} holds RANDOM demo weights", model.display());
    }
    let refs = yued_actors::settings::adapters(&req);
    let (ar_terms, _) = yued_engine::models::yue2::adapter::request_terms(a.adapters.as_deref(), &model, &refs)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    let mut ar = ArModel::load_with(&f, &shared.info, &backend, &ar_terms)?;
    let pb = super::progress_bar(1, "compose");
    let songs = shared
        .compose_codes(&mut ar, &backend, &settings, &CancelToken::new(), &mut |e| match e {
            Event::Progress { phase, song, done, total } => {
                pb.set_message(format!("song {song} {}", yued_actors::settings::stage(phase).as_str()));
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            }
            Event::Codes { song, codes, .. } => pb.println(format!("song {song}: {} codes", codes.len())),
            _ => {}
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    pb.finish_and_clear();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for meta in songs.iter().map(|w| &w.meta) {
        // The song's own request: its score, codes and planning seed; every variation.
        let mut replay = yued_actors::settings::yue2_replay(&req, meta, 0);
        replay.synth_batch_size = req.synth_batch_size;
        let out = numbered(&a.out, meta.index as usize, songs.len());
        std::fs::write(&out, serde_json::to_string_pretty(&replay)?)
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "{}: song {} ({} codes{}, lm_seed {})",
            out.display(),
            meta.index,
            meta.codes.len(),
            if meta.ended { "" } else { ", cut by the budget" },
            replay.lm_seed
        );
    }
    Ok(())
}

fn compose_mm3(a: &ComposeArgs, reg: &Registry, mut req: yued_protocol::Mm3Request) -> anyhow::Result<()> {
    use yued_engine::models::mm3::{compose, config, depth::DepthModel, lm, prompt};
    let what = a.request.display();
    not_an_input(&a.out, &[&a.request])?;
    let lm_path =
        reg.resolve(Bucket::Mm3Lm, &req.lm_model).map_err(|e| anyhow::anyhow!("{what}: lm_model: {e}"))?.path.clone();
    let depth_path = reg
        .resolve(Bucket::Mm3Depth, &req.depth_model)
        .map_err(|e| anyhow::anyhow!("{what}: depth_model: {e}"))?
        .path
        .clone();
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    let req = req.with_resolved_seeds(random_u64);
    let backend = a.device.open()?;
    let lf = yued_engine::gguf::GgufFile::open(&lm_path)?;
    let df = yued_engine::gguf::GgufFile::open(&depth_path)?;
    for (f, p) in [(&lf, &lm_path), (&df, &depth_path)] {
        if f.get(config::DEMO_KEY).is_some() {
            eprintln!("warning: {} holds RANDOM demo weights", p.display());
        }
    }
    let mut lm_model = lm::LmModel::load(&lf, &backend).with_context(|| format!("loading {}", lm_path.display()))?;
    let tok = lm::tokenizer(&lf, &lm_model.info)?;
    let mut depth = DepthModel::load(&df, lm_model.hidden(), &backend)
        .with_context(|| format!("loading {}", depth_path.display()))?;
    let codebooks = yued_protocol::request::Mm3Codebooks {
        semantic: lm_model.info.tokens.semantic_size,
        acoustic: depth.cfg.audio_vocab_size as u32,
    };
    let limits = Limits { max_batch: req.lm_batch_size.max(1), mm3_codebooks: codebooks, ..Limits::default() };
    req.validate(&limits).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let prompt = prompt::build(&tok, &lm_model.info.tokens, &req.caption, &req.lyrics)
        .map_err(|e| anyhow::anyhow!("{what}: lyrics: {e}"))?;
    let settings = yued_actors::settings::mm3_ar(&req, !a.no_batch_cfg);
    let codes = req.checked_audio_codes(&codebooks).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let songs = if !codes.is_empty() {
        vec![compose::replay(&backend, &mut lm_model, &mut depth, &prompt, &codes, &|| false)
            .map_err(|e| anyhow::anyhow!("{e}"))?]
    } else {
        let n = req.lm_batch_size.max(1) as usize;
        let pb = super::progress_bar(settings.max_frames as u64 + 1, "frames");
        let mut draws = compose::SeedDraws::new(req.lm_seed, n);
        let songs = compose::compose(
            &backend,
            &mut lm_model,
            &mut depth,
            &prompt,
            n,
            &settings,
            &mut draws,
            &|| false,
            &mut |f, _| pb.set_position(f as u64 + 1),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        pb.finish_and_clear();
        songs
    };
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (i, song) in songs.iter().enumerate() {
        // The song's own request, every variation.
        let mut replay = yued_actors::settings::mm3_replay(&req, song, i, 0, !codes.is_empty());
        replay.synth_batch_size = req.synth_batch_size;
        let out = numbered(&a.out, i, songs.len());
        std::fs::write(&out, serde_json::to_string_pretty(&Request::Mm3(replay.clone()))?)
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "{}: song {i} ({} frames{}, lm_seed {})",
            out.display(),
            song.frames(),
            if song.ended { ", ended by the LM" } else { "" },
            replay.lm_seed
        );
    }
    Ok(())
}
