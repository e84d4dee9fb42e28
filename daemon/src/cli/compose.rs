//! `yued compose`: the autoregressive half alone. Writes one replayable request per song:
//! for YuE2 the request with its score, its semantic codes and its exact seeds, so
//! `yued synth --request` (or `POST /synth`) renders it without sampling again.
use super::common::{random_u64, DeviceArgs};
use anyhow::Context;
use std::path::{Path, PathBuf};
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::generate::CancelToken;
use yued_engine::models::yue2::pipeline::{replay_request, Event, PipelineOptions, Shared};
use yued_engine::registry::{Bucket, Registry};
use yued_protocol::{Family, Limits, Request};

/// Runs the autoregressive half of a request and writes the replayable request of each song.
#[derive(clap::Args)]
pub struct ComposeArgs {
    /// A directory of model files, sorted by architecture (the first of each bucket in
    /// name order is used); or give --model.
    #[arg(long, required_unless_present = "model")]
    pub models: Option<PathBuf>,
    /// The YuE2 backbone GGUF (instead of --models).
    #[arg(long, conflicts_with = "models")]
    pub model: Option<PathBuf>,
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
    let model = match (&a.model, &a.models) {
        (Some(m), _) => m.clone(),
        (None, Some(dir)) => {
            let (reg, _) = Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
            reg.resolve(Bucket::Yue2, "").map_err(|e| anyhow::anyhow!("--models {}: {e}", dir.display()))?.path.clone()
        }
        (None, None) => unreachable!("clap requires one"),
    };
    let body = std::fs::read(&a.request).with_context(|| format!("reading {}", a.request.display()))?;
    let Request::Yue2(mut req) = Request::from_json(&body, &[Family::Yue2]).map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    let req = req.with_resolved_seeds(random_u64);
    let shared = Shared::open(&model, &PipelineOptions { max_seq: a.max_seq, ..PipelineOptions::default() })?;
    let limits = Limits { context: shared.max_seq as u32, codebook_size: shared.info.tokens.codebook_size, max_batch: req.lm_batch_size.max(1), ..Limits::default() };
    req.validate(&limits).map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    let backend = a.device.open()?;
    let f = yued_engine::gguf::GgufFile::open(&model)?;
    if f.get(yued_engine::models::yue2::demo::DEMO_KEY).is_some() {
        eprintln!("warning: {} holds RANDOM demo weights", model.display());
    }
    let mut ar = ArModel::load(&f, &shared.info, &backend)?;
    let pb = super::progress_bar(1, "compose");
    let songs = shared
        .compose_codes(&mut ar, &backend, &req, &CancelToken::new(), &mut |e| match e {
            Event::Progress { stage, song, done, total } => {
                pb.set_message(format!("song {song} {}", stage.as_str()));
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
    for (meta, _) in &songs {
        // The song's own request: its score, codes and planning seed; every variation.
        let mut replay = replay_request(&req, meta, 0);
        replay.synth_batch_size = req.synth_batch_size;
        let out = numbered(&a.out, meta.index as usize, songs.len());
        std::fs::write(&out, serde_json::to_string_pretty(&replay)?).with_context(|| format!("writing {}", out.display()))?;
        println!("{}: song {} ({} codes{}, lm_seed {})", out.display(), meta.index, meta.codes.len(), if meta.ended { "" } else { ", cut by the budget" }, replay.lm_seed);
    }
    Ok(())
}
