use super::common::{Backbone, DeviceArgs};
use std::path::PathBuf;
use yued_engine::kv_cache::KvSet;
use yued_engine::models::yue2::ar::{ArModel, Positions, SeqInput};

/// How lm-eval feeds the tokens.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum EvalMode {
    /// One forward over every token.
    Prefill,
    /// The first token, then the others one by one through the KV cache.
    Decode,
}

/// Writes the full-vocabulary logits of every position (raw little-endian f32,
/// row-major [n_tokens, vocab]).
#[derive(clap::Args)]
pub struct LmEvalArgs {
    /// Backbone GGUF.
    #[arg(long)]
    pub model: PathBuf,
    /// Token ids, comma separated.
    #[arg(long)]
    pub tokens: String,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value = "prefill")]
    pub mode: EvalMode,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: LmEvalArgs) -> anyhow::Result<()> {
    let bb = Backbone::open(&a.model)?;
    let vocab = bb.info.config.vocab_size;
    let tokens: Vec<u32> = a.tokens.split(',').map(|s| s.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("--tokens: {s:?} is not a token id"))).collect::<Result<_, _>>()?;
    anyhow::ensure!(!tokens.is_empty(), "--tokens: no token");
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= vocab) {
        anyhow::bail!("--tokens: id {t} is outside the vocabulary of {vocab}");
    }
    anyhow::ensure!(tokens.len() <= bb.info.config.max_position_embeddings, "--tokens: {} tokens exceed the context", tokens.len());
    let backend = a.device.open()?;
    let mut model = ArModel::load(&bb.file, &bb.info, &backend)?;
    let mut sets = vec![KvSet::new(&backend, bb.info.config.kv_dims(), tokens.len())?];
    let rows = 0..vocab as u32;
    let mut out: Vec<f32> = Vec::with_capacity(tokens.len() * vocab);
    match a.mode {
        EvalMode::Prefill => {
            let l = model.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens, set: 0 }], rows, Positions::All)?;
            l.per_seq[0].iter().for_each(|r| out.extend_from_slice(r));
        }
        EvalMode::Decode => {
            for t in &tokens {
                let l = model.forward(&backend, &mut sets, &[SeqInput { tokens: std::slice::from_ref(t), set: 0 }], rows.clone(), Positions::Last)?;
                out.extend_from_slice(&l.per_seq[0][0]);
            }
        }
    }
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&a.out, bytes)?;
    println!("wrote {} ({} x {} f32)", a.out.display(), tokens.len(), vocab);
    Ok(())
}
