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
    let req = yued_protocol::Yue2Request::from_json(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    warn_ignored(path, &bytes, yued_protocol::Family::Yue2);
    Ok(req)
}

/// Reads a request JSON file of either family (`served`: the families the run has models of),
/// naming on stderr the fields it does not read.
pub fn read_any_request(path: &Path, served: &[yued_protocol::Family]) -> anyhow::Result<yued_protocol::Request> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if served.is_empty() {
        anyhow::bail!("no model of either family (YuE2, MiniMax Music 3) to run {} with", path.display());
    }
    let req =
        yued_protocol::Request::from_json(&bytes, served).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    warn_ignored(path, &bytes, req.family());
    Ok(req)
}

/// Says on stderr which of the file's fields the request does not read (a misspelling, or
/// the other family's field): the daemon names them in its reply, the tools here.
fn warn_ignored(path: &Path, bytes: &[u8], family: yued_protocol::Family) {
    let value = serde_json::from_slice(bytes).unwrap_or_default();
    let ignored = yued_protocol::request::ignored_fields(&value, family);
    if !ignored.is_empty() {
        eprintln!(
            "warning: {}: a {} request does not read {} (ignored)",
            path.display(),
            family.as_str(),
            ignored.join(", ")
        );
    }
}

/// Refuses, before any work, to write `out` over one of the run's `inputs` (the same file
/// under any name): a request, a recording or a model the run reads must outlive it.
pub fn not_an_input(out: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(o) = std::fs::metadata(out) else { return Ok(()) };
    for input in inputs {
        if std::fs::metadata(input).is_ok_and(|i| (i.dev(), i.ino()) == (o.dev(), o.ino())) {
            anyhow::bail!("{} is the input {}: name another output", out.display(), input.display());
        }
    }
    Ok(())
}

/// An output the run names itself (`-o` not given): never a file that is already there, which
/// may be the user's (a recording beside its latents); `-o` names one to replace it.
pub fn fresh_default(out: std::path::PathBuf) -> anyhow::Result<std::path::PathBuf> {
    if out.exists() {
        anyhow::bail!("{} exists: name the output with -o to replace it", out.display());
    }
    Ok(out)
}

/// Writes `bytes` to `path`, its folder created if missing; errors name the file.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A seed source for `-1` seeds.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
