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
    /// The MERT-v2-FullSong folder (config.json, *.safetensors) to the mert2 GGUF the
    /// listening tools read: every tensor byte for byte in its native dtype. OUT may be a
    /// folder: the file is then named `MERT-v2-FullSong-<DTYPE>.gguf`, where a head finds it.
    Mert {
        /// Checkpoint folder.
        dir: PathBuf,
        /// Output GGUF, or a folder.
        out: PathBuf,
    },
    /// The audio tokenizer's head folder (its F32 safetensors, an optional config.json
    /// overriding the published configuration) to the yue2-tokenizer GGUF. OUT may be a
    /// folder: the file is then named `yue2-mothersuperior-realaudio-tokenizer-v4-F32.gguf`.
    AudioTokenizer {
        /// Head folder.
        dir: PathBuf,
        /// Output GGUF, or a folder (where the MERT file should be too).
        out: PathBuf,
    },
    /// The SheetSage2 transcriber's folder (config.json, model.safetensors: the head and its
    /// LoRA factors for MERT) to the sheetsage2 GGUF `yued transcribe` and `--transcriber`
    /// read, laid out as yue2.cpp writes it: every tensor byte for byte, the configuration,
    /// and the event vocabulary built from the configuration's window. OUT may be a folder:
    /// the file is then named `SheetSage2-<DTYPE>.gguf`; MERT-v2 (`yued convert mert`) goes
    /// beside it in the same quant.
    Sheetsage2 {
        /// Checkpoint folder.
        dir: PathBuf,
        /// Output GGUF, or a folder (where the MERT file should be too).
        out: PathBuf,
    },
    /// The published MiniMax Music 3 checkpoint (its `language_model/`, `rvq_depth_decoder/`,
    /// `condition_encoder/`, `transformer/`, `vocoder/` folders and `tokenizer/`) to the five
    /// GGUFs minimaxmusic.cpp names (mm3-lm, mm3-depth, mm3-cond, mm3-dit, mm3-vae), native
    /// dtypes byte for byte, the vocoder's weight norm folded. Missing folders are skipped.
    /// The vocoder's encoder (needed to encode audio, never to render) comes from the
    /// training checkpoint `dav.pth` in the same folder when it is there: it is read as
    /// data (never run) and its encoder joins the vocoder file.
    Mm3 {
        /// Checkpoint folder (the repository root).
        dir: PathBuf,
        /// Output folder (created).
        out: PathBuf,
        /// Semantic codes of a test checkpoint with a shrunken vocabulary (default 16384).
        #[arg(long)]
        semantic_codes: Option<u32>,
    },
}

pub fn run(c: ConvertCommand) -> anyhow::Result<()> {
    let pb = super::spinner("convert");
    let r = convert(c);
    pb.finish_and_clear();
    r
}

fn convert(c: ConvertCommand) -> anyhow::Result<()> {
    if let ConvertCommand::Mm3 { dir, out, semantic_codes } = &c {
        let opts = yued_engine::models::mm3::convert::ConvertOptions { semantic_codes: *semantic_codes };
        let done = yued_engine::models::mm3::convert::convert_checkpoint(dir, out, &opts, &mut |m| eprintln!("{m}"))
            .with_context(|| format!("converting {}", dir.display()))?;
        for d in done {
            println!("wrote {} ({} tensors)", d.path.display(), d.tensors);
        }
        return Ok(());
    }
    let listening = match &c {
        ConvertCommand::Mert { dir, out } => Some((dir, yued_engine::models::mert::convert::convert(dir, out))),
        ConvertCommand::AudioTokenizer { dir, out } => {
            Some((dir, yued_engine::models::audio_tokenizer::convert::convert(dir, out)))
        }
        ConvertCommand::Sheetsage2 { dir, out } => {
            Some((dir, yued_engine::models::sheetsage2::convert::convert(dir, out)))
        }
        _ => None,
    };
    if let Some((dir, done)) = listening {
        let (path, n) = done.with_context(|| format!("converting {}", dir.display()))?;
        println!("wrote {} ({n} tensors)", path.display());
        return Ok(());
    }
    let (n, out) = match c {
        ConvertCommand::Backbone { dir, out } => (
            yued_engine::models::yue2::convert::convert_backbone(&dir, &out)
                .with_context(|| format!("converting {}", dir.display()))?,
            out,
        ),
        ConvertCommand::Vae { dir, out } => (
            yued_engine::models::yue2::convert::convert_vae(&dir, &out)
                .with_context(|| format!("converting {}", dir.display()))?,
            out,
        ),
        ConvertCommand::Mm3 { .. }
        | ConvertCommand::Mert { .. }
        | ConvertCommand::AudioTokenizer { .. }
        | ConvertCommand::Sheetsage2 { .. } => {
            unreachable!("converted above")
        }
    };
    println!("wrote {} ({n} tensors)", out.display());
    Ok(())
}
