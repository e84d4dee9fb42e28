use anyhow::Context;
use std::path::PathBuf;

/// Checkpoint folders to GGUF.
#[derive(clap::Subcommand)]
pub enum ConvertCommand {
    /// A backbone folder (config.json + *.safetensors + qwen.tiktoken) to the yue2 GGUF.
    Backbone {
        /// Checkpoint folder.
        dir: PathBuf,
        /// Output GGUF.
        out: PathBuf,
    },
    /// A VAE folder (*.safetensors, optional config.json) to the yue2-vae GGUF.
    Vae {
        /// Checkpoint folder.
        dir: PathBuf,
        /// Output GGUF.
        out: PathBuf,
    },
}

pub fn run(c: ConvertCommand) -> anyhow::Result<()> {
    let (n, out) = match c {
        ConvertCommand::Backbone { dir, out } => (yued_engine::models::yue2::convert::convert_backbone(&dir, &out).with_context(|| format!("converting {}", dir.display()))?, out),
        ConvertCommand::Vae { dir, out } => (yued_engine::models::yue2::convert::convert_vae(&dir, &out).with_context(|| format!("converting {}", dir.display()))?, out),
    };
    println!("wrote {} ({n} tensors)", out.display());
    Ok(())
}
