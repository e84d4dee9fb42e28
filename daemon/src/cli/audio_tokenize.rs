//! `yued audio-tokenize`: a recording to the audio tokenizer's 25 Hz semantic codes (MERT-v2
//! and the tokenizer head), the codes a YuE2 request's `semantic_tokens` or `source_tokens`
//! take.
use super::common::DeviceArgs;
use anyhow::Context;
use std::path::PathBuf;
use yued_engine::models::audio_tokenizer::pipeline::AudioTokenizer;

#[derive(clap::Args)]
pub struct AudioTokenizeArgs {
    /// The tokenizer head's GGUF (`yued convert audio-tokenizer`); its MERT file is read from
    /// the same folder, named after the head's base model with the head's quant suffix
    /// (`…-tokenizer-v4-F32.gguf` reads `MERT-v2-FullSong-F32.gguf`).
    #[arg(long)]
    pub model: PathBuf,
    /// The recording (WAV, FLAC, MP3, Ogg, …): its channels are averaged and it is resampled
    /// to 24 kHz. At least a second long.
    pub audio: PathBuf,
    /// Write the codes here as JSON (`{"frame_rate": 25, "codes": [...]}`) instead of
    /// printing them comma separated.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: AudioTokenizeArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&a.audio).with_context(|| format!("reading {}", a.audio.display()))?;
    let pcm = yued_audio::decode::decode(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", a.audio.display()))?;
    let n = pcm.frames();
    let mono: Vec<f32> =
        (0..n).map(|i| (0..pcm.channels).map(|c| pcm.channel(c)[i]).sum::<f32>() / pcm.channels as f32).collect();
    let mono = yued_audio::Pcm::new(pcm.sample_rate, 1, mono);
    let mono = yued_audio::resample::resample(&mono, 24_000).map_err(|e| anyhow::anyhow!("{e}"))?.data;
    let backend = a.device.open()?;
    let mut tok = AudioTokenizer::open(&a.model, &backend).with_context(|| format!("loading {}", a.model.display()))?;
    let mut job = tok
        .start(mono)
        .ok_or_else(|| anyhow::anyhow!("{}: under a second of audio; the tokenizer needs one", a.audio.display()))?;
    let pb = super::progress_bar(job.steps() as u64, "tokenizing");
    while job.step(&mut tok, &backend)? {
        pb.set_position(job.done() as u64);
    }
    pb.finish_and_clear();
    let codes = job.codes();
    match &a.out {
        Some(path) => {
            let json = serde_json::json!({ "frame_rate": tok.head.cfg.frame_rate, "codes": codes });
            std::fs::write(path, serde_json::to_string(&json)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {} codes to {}", codes.len(), path.display());
        }
        None => println!("{}", codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")),
    }
    Ok(())
}
