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
    /// How the logits are computed: one forward over every token, or the first token then
    /// the others one by one through the KV cache (the two must agree).
    #[arg(long, value_enum, default_value = "prefill")]
    pub mode: EvalMode,
    /// The directory of LoRA adapters --adapter names.
    #[arg(long)]
    pub adapters: Option<PathBuf>,
    /// An adapter of --adapters merged into the AR half, `NAME` or `NAME:SCALE` (strength,
    /// default 1); repeat to stack them in order.
    #[arg(long = "adapter", requires = "adapters")]
    pub adapter: Vec<String>,
    /// An F32 KV cache instead of F16 (parity checks against a float reference).
    #[arg(long)]
    pub kv_f32: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: LmEvalArgs) -> anyhow::Result<()> {
    let bb = Backbone::open(&a.model)?;
    let vocab = bb.info.config.vocab_size;
    let tokens: Vec<u32> = a
        .tokens
        .split(',')
        .map(|s| s.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("--tokens: {s:?} is not a token id")))
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(!tokens.is_empty(), "--tokens: no token");
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= vocab) {
        anyhow::bail!("--tokens: id {t} is outside the vocabulary of {vocab}");
    }
    anyhow::ensure!(
        tokens.len() <= bb.info.config.max_position_embeddings,
        "--tokens: {} tokens exceed the context",
        tokens.len()
    );
    let backend = a.device.open()?;
    let refs = a
        .adapter
        .iter()
        .map(|s| {
            let (name, scale) = match s.rsplit_once(':') {
                Some((n, v)) => {
                    (n, v.parse::<f64>().map_err(|_| anyhow::anyhow!("--adapter {s}: '{v}' is not a strength"))?)
                }
                None => (s.as_str(), 1.0),
            };
            Ok(yued_engine::models::yue2::adapter::AdapterUse::both(name, scale as f32))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (terms, _) = yued_engine::models::yue2::adapter::request_terms(a.adapters.as_deref(), &a.model, &refs)
        .map_err(|e| anyhow::anyhow!("--adapter: {e}"))?;
    let mut model = ArModel::load_with(&bb.file, &bb.info, &backend, &terms)?;
    let kv = if a.kv_f32 { yued_engine::ggml::GgmlType::F32 } else { yued_engine::kv_cache::KV_TYPE };
    let mut sets = vec![KvSet::with_type(&backend, bb.info.config.kv_dims(), tokens.len(), 1, kv)?];
    let rows = 0..vocab as u32;
    let mut out: Vec<f32> = Vec::with_capacity(tokens.len() * vocab);
    match a.mode {
        EvalMode::Prefill => {
            let pb = super::spinner("prefill");
            let l = model.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens, set: 0 }], rows, Positions::All);
            pb.finish_and_clear();
            l?.per_seq[0].iter().for_each(|r| out.extend_from_slice(r));
        }
        EvalMode::Decode => {
            let pb = super::progress_bar(tokens.len() as u64, "decode");
            for t in &tokens {
                pb.inc(1);
                let l = model.forward(
                    &backend,
                    &mut sets,
                    &[SeqInput { tokens: std::slice::from_ref(t), set: 0 }],
                    rows.clone(),
                    Positions::Last,
                )?;
                out.extend_from_slice(&l.per_seq[0][0]);
            }
            pb.finish_and_clear();
        }
    }
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    super::common::write_file(&a.out, bytes)?;
    println!("wrote {} ({} x {} f32)", a.out.display(), tokens.len(), vocab);
    Ok(())
}
