//! `yued transcribe`: a recording to the ABC score SheetSage2 hears in it (MERT-v2 with the
//! head's LoRA, the BART decoder under the event grammar, the notation), the score a YuE2
//! request's `abc` takes; a progress bar over the windows and their tokens.
use super::common::DeviceArgs;
use anyhow::Context;
use std::path::PathBuf;
use yued_engine::models::sheetsage2::pipeline::{Transcriber, SAMPLE_RATE};

#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// The transcriber head's GGUF (`yued convert sheetsage2`, or the published
    /// `SheetSage2-<QUANT>.gguf`); its MERT file is read from the same folder, named after
    /// the head's base model with the head's quant suffix (`SheetSage2-Q8_0.gguf` reads
    /// `MERT-v2-FullSong-Q8_0.gguf`).
    #[arg(long)]
    pub model: PathBuf,
    /// The recording (WAV, FLAC, MP3, Ogg, …; its channels are averaged and it is resampled
    /// to 24 kHz). Longer than the head's window (300 s), it is transcribed in overlapping
    /// windows whose events are joined.
    #[arg(long)]
    pub audio: PathBuf,
    /// Write the score here instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The melodies alone, without chord symbols (both voices stay): the score a cover
    /// sings from.
    #[arg(long)]
    pub melody_only: bool,
    /// Also write the decoded events, the input of `yued notation --events`, as JSON here.
    #[arg(long)]
    pub events_out: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: TranscribeArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&a.audio).with_context(|| format!("reading {}", a.audio.display()))?;
    let pcm = yued_audio::decode::decode(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", a.audio.display()))?;
    let mono = yued_audio::resample::mono_at(&pcm, SAMPLE_RATE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let backend = a.device.open()?;
    let mut tr = Transcriber::open(&a.model, &backend).with_context(|| format!("loading {}", a.model.display()))?;
    let mut job = tr.start(mono).map_err(|e| anyhow::anyhow!("{}: {e}", a.audio.display()))?;
    let budget = tr.head.cfg.max_output_seq_len;
    let pb = super::progress_bar(1000, "transcribing");
    while job.step(&mut tr, &backend)? {
        pb.set_position((job.progress(budget) * 1000.0) as u64);
    }
    pb.finish_and_clear();
    if let Some(path) = &a.events_out {
        let text = serde_json::to_string_pretty(&job.events())?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    let abc = job.abc(a.melody_only).map_err(|e| anyhow::anyhow!("{}: no score: {e}", a.audio.display()))?;
    match &a.out {
        Some(path) => {
            std::fs::write(path, &abc).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {} ({} windows)", path.display(), job.windows().len());
        }
        None => print!("{abc}"),
    }
    Ok(())
}
