use anyhow::Context;
use std::path::PathBuf;
use yued_engine::models::quantize::{quantize_file, QuantTarget};

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// Input GGUF (BF16 or F32): a YuE2 backbone, MiniMax Music 3's LM, depth decoder or
    /// DiT, or a listening model (MERT-v2, the audio tokenizer's head, the SheetSage2 head:
    /// Q8_0 on the linear projections only; positions, convolution kernels, the front end's
    /// tables and the transcriber's LoRA factors keep their type). VAEs and the condition
    /// encoder are never quantized.
    pub input: PathBuf,
    /// Output GGUF.
    pub output: PathBuf,
    /// Q8_0, Q6_K, Q5_K_M (the K mixes keep embeddings and lm_head in Q6_K), or Q4_K_M
    /// (MiniMax's DiT only). Code-writing LMs stop at Q5_K_M; the depth decoder and the
    /// listening models take Q8_0.
    #[arg(long = "type")]
    pub ty: QuantTarget,
}

pub fn run(a: QuantizeArgs) -> anyhow::Result<()> {
    // The input is read while the output is written: the same file would be truncated under
    // its own reader.
    super::common::not_an_input(&a.output, &[&a.input])?;
    let pb = super::progress_bar(0, a.ty.name());
    quantize_file(&a.input, &a.output, a.ty, &mut |d, t| {
        pb.set_length(t as u64);
        pb.set_position(d as u64);
    })
    .with_context(|| format!("quantizing {} to {}", a.input.display(), a.output.display()))?;
    pb.finish_and_clear();
    println!("wrote {}", a.output.display());
    Ok(())
}
