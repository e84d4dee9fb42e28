//! The flags of `yued synth`, shared by its YuE2 and MiniMax Music 3 paths.
use super::common::DeviceArgs;
use std::path::{Path, PathBuf};

/// The full pipeline: style and lyrics (or a replay request) to stereo audio, with the
/// replay request of every track written next to it.
#[derive(clap::Args)]
pub struct SynthArgs {
    /// A directory of model files sorted by architecture (either family; the request's
    /// fields or its "family" pick which); or give --model and --vae (YuE2), or --lm,
    /// --depth, --cond, --dit and --vae-mm3 (MiniMax Music 3).
    #[arg(long, required_unless_present_any = ["model", "lm"])]
    pub models: Option<PathBuf>,
    /// MiniMax Music 3's LM GGUF (mm3-lm), with --depth, --cond, --dit and --vae-mm3.
    #[arg(long, requires_all = ["depth", "cond", "dit", "vae_mm3"], conflicts_with_all = ["models", "model"])]
    pub lm: Option<PathBuf>,
    /// MiniMax Music 3's RVQ depth decoder GGUF (mm3-depth).
    #[arg(long, requires = "lm")]
    pub depth: Option<PathBuf>,
    /// MiniMax Music 3's condition encoder GGUF (mm3-cond).
    #[arg(long, requires = "lm")]
    pub cond: Option<PathBuf>,
    /// MiniMax Music 3's DiT GGUF (mm3-dit).
    #[arg(long, requires = "lm")]
    pub dit: Option<PathBuf>,
    /// MiniMax Music 3's flow VAE GGUF (mm3-vae).
    #[arg(long = "vae-mm3", requires = "lm")]
    pub vae_mm3: Option<PathBuf>,
    /// YuE2 backbone GGUF.
    #[arg(long, requires = "vae")]
    pub model: Option<PathBuf>,
    /// The directory of LoRA adapters the request's `adapters` name (YuE2): each is merged
    /// into the backbone halves it changes, at its strength.
    #[arg(long)]
    pub adapters: Option<PathBuf>,
    /// A NAR-only adapter merged into YuE2's NAR half at the request's companion_scale
    /// (default 1), as `yued serve --companion` does; a request naming the same file among
    /// its adapters merges it once.
    #[arg(long)]
    pub companion: Option<PathBuf>,
    /// YuE2 VAE GGUF.
    #[arg(long, requires = "model")]
    pub vae: Option<PathBuf>,
    /// MiniMax Music 3: run each guidance pair (LM, depth decoder and DiT) as two forwards
    /// instead of one batch of two.
    #[arg(long)]
    pub no_batch_cfg: bool,
    /// Request JSON (every field optional; the architecture references list each field).
    #[arg(long)]
    pub request: PathBuf,
    /// Output audio (its extension follows the request's output_format); a batch numbers
    /// it song then variation (song00.mp3, song01.mp3, ...).
    #[arg(long, default_value = "song.mp3")]
    pub out: PathBuf,
    /// Target length in seconds (overrides the request).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Token sampling seed (overrides the request).
    #[arg(long)]
    pub lm_seed: Option<i64>,
    /// Acoustic noise seed (overrides the request).
    #[arg(long)]
    pub seed: Option<i64>,
    /// Flow matching steps (overrides the request).
    #[arg(long)]
    pub steps: Option<u32>,
    /// Also write the planned score(s).
    #[arg(long)]
    pub score: Option<PathBuf>,
    /// Also write the semantic stream(s) (CSV).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Also write the acoustic latents (.vae: raw f32 [T, 64]).
    #[arg(long)]
    pub latent: Option<PathBuf>,
    /// KV cache size in tokens (default: the model context).
    #[arg(long, default_value_t = 0)]
    pub max_seq: usize,
    /// VAE tile core frames.
    #[arg(long, default_value_t = 512)]
    pub vae_core: usize,
    /// VAE tile halo frames.
    #[arg(long, default_value_t = 16)]
    pub vae_halo: usize,
    /// Dump intermediate tensors (.npy) into this directory (YuE2: codes, noise, latents per
    /// track; MiniMax Music 3: each song's codes [frames + 1, 8] and states [frames, 8, hidden]).
    #[arg(long)]
    pub dump: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// `dir/stem{suffix}.ext` where suffix numbers batch tracks.
impl SynthArgs {
    /// Refuses outputs of the track `suffix` that are the request file itself.
    pub fn check_outputs(&self, suffix: &str) -> anyhow::Result<()> {
        let ext = self.out.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
        for out in [numbered(&self.out, suffix, "json"), numbered(&self.out, suffix, &ext)] {
            super::common::not_an_input(&out, &[&self.request])?;
        }
        for (p, ext) in [(&self.score, "abc"), (&self.tokens, "csv"), (&self.latent, "vae")] {
            if let Some(p) = p {
                super::common::not_an_input(&numbered(p, suffix, ext), &[&self.request])?;
            }
        }
        Ok(())
    }
}

pub fn numbered(path: &Path, suffix: &str, ext: &str) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "song".into());
    path.with_file_name(format!("{stem}{suffix}.{ext}"))
}
