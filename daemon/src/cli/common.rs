//! What the model subcommands share: opening the device and the backbone.
use anyhow::Context;
use std::path::Path;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::yue2::config::BackboneInfo;
use yued_engine::models::yue2::prompt::Instructions;
use yued_engine::tokenizer::BpeTokenizer;

/// Device flags of every compute subcommand.
#[derive(clap::Args, Clone, Debug)]
pub struct DeviceArgs {
    /// Compute device: auto, CPU, CUDA0, Vulkan0, MTL0.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU threads (0 = every core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

impl DeviceArgs {
    pub fn open(&self) -> anyhow::Result<Backend> {
        let b = Backend::new(&self.device)?;
        b.set_threads(self.threads);
        Ok(b)
    }
}

/// A backbone file opened and described.
pub struct Backbone {
    pub file: GgufFile,
    pub info: BackboneInfo,
    pub tokenizer: BpeTokenizer,
    pub instructions: Instructions,
}

impl Backbone {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let file = GgufFile::open(path)?;
        let info = BackboneInfo::from_gguf(&file)?;
        let tokenizer = BpeTokenizer::from_gguf(&file)?;
        let instructions = Instructions::from_gguf(&file);
        if let Some(p) = file.get(yued_engine::models::yue2::demo::DEMO_KEY) {
            eprintln!("warning: {} holds RANDOM demo weights ({})", path.display(), p.summary());
        }
        Ok(Backbone { file, info, tokenizer, instructions })
    }

    /// The KV bound: `--max-seq` if set, else the model context.
    pub fn max_seq(&self, flag: usize) -> usize {
        if flag > 0 {
            flag.min(self.info.config.max_position_embeddings)
        } else {
            self.info.config.max_position_embeddings
        }
    }
}

/// Reads a request JSON file (every field optional, defaults applied).
pub fn read_request(path: &Path) -> anyhow::Result<yued_protocol::Yue2Request> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    yued_protocol::Yue2Request::from_json(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// A seed source for `-1` seeds.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
