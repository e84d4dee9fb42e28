use anyhow::Context;
use std::path::PathBuf;
use yued_engine::models::yue2::demo::{write_demo, Preset};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Which models: `yue2` (a backbone and a VAE), `mm3` (MiniMax Music 3's five files: the
    /// LM, the depth decoder, the condition encoder, the DiT and the flow VAE) or `listen`
    /// (MERT-v2, the audio tokenizer's head, whose codes the YuE2 demo backbone of the same
    /// preset takes, and the SheetSage2 transcriber's head).
    #[arg(long, default_value = "yue2")]
    pub family: DemoFamily,
    /// Directory to write the files into (`yue2-demo-{preset}.gguf` and
    /// `yue2-demo-{preset}-vae.gguf`; `mm3-demo-{preset}-lm.gguf`, `-depth`, `-cond`, `-dit`
    /// and `-vae.gguf`;
    /// `MERT-v2-demo-{preset}-F32.gguf`, `yue2-tokenizer-demo-{preset}-F32.gguf` and
    /// `SheetSage2-demo-{preset}-F32.gguf`).
    #[arg(long)]
    pub out: PathBuf,
    /// `tiny` (a few MB, seconds on CPU), `deep` (tiny's widths at the published depth and
    /// head layout: 28 layers, 16 query heads over 8 KV heads; ~17 MB) or `full` (the
    /// published dimensions, Q8_0, ~4 GB).
    #[arg(long, default_value = "tiny")]
    pub preset: Preset,
    /// Seed of the random weights (the same seed writes the same bytes).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// The demo model sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoFamily {
    Yue2,
    Mm3,
    Listen,
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let pb = super::progress_bar(0, "tensors");
    if a.family == DemoFamily::Listen {
        let (mert, head) =
            yued_engine::models::audio_tokenizer::demo::write_demo(&a.out, a.preset, a.seed, &mut |done, total| {
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            })
            .with_context(|| format!("writing the listening demo into {}", a.out.display()))?;
        let transcriber = yued_engine::models::sheetsage2::demo::write_demo(&a.out, a.preset, a.seed)
            .with_context(|| format!("writing the transcriber demo into {}", a.out.display()))?;
        pb.finish_and_clear();
        println!(
            "mert:        {}
tokenizer:   {}
transcriber: {}
(random weights: the codes and scores are noise, for testing and benchmarks)",
            mert.display(),
            head.display(),
            transcriber.display()
        );
        return Ok(());
    }
    if a.family == DemoFamily::Mm3 {
        let files = yued_engine::models::mm3::demo::write_demo(&a.out, a.preset, a.seed, &mut |done, total| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        })
        .with_context(|| format!("writing the demo model into {}", a.out.display()))?;
        pb.finish_and_clear();
        for f in files {
            println!("{}", f.display());
        }
        println!("(random weights: the output is noise, for testing and benchmarks)");
        return Ok(());
    }
    let (bb, vae) = write_demo(&a.out, a.preset, a.seed, &mut |done, total| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    })
    .with_context(|| format!("writing the demo model into {}", a.out.display()))?;
    pb.finish_and_clear();
    println!(
        "backbone: {}\nvae:      {}\n(random weights: the output is noise, for testing and benchmarks)",
        bb.display(),
        vae.display()
    );
    Ok(())
}
