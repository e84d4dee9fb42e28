//! `yued tokenize --audio`: a recording to the audio tokenizer's 25 Hz semantic codes (MERT-v2
//! and the tokenizer head), the codes a YuE2 request's `semantic_tokens` or `source_tokens`
//! take; a progress bar over MERT's chunks and the head's windows.
use super::common::DeviceArgs;
use anyhow::Context;
use std::path::Path;
use yued_engine::models::audio_tokenizer::pipeline::{AudioTokenizer, SAMPLE_RATE};

pub fn run(model: &Path, audio: &Path, out: Option<&Path>, device: &DeviceArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(audio).with_context(|| format!("reading {}", audio.display()))?;
    let pcm = yued_audio::decode::decode(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", audio.display()))?;
    let mono = yued_audio::resample::mono_at(&pcm, SAMPLE_RATE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let backend = device.open()?;
    let mut tok = AudioTokenizer::open(model, &backend).with_context(|| format!("loading {}", model.display()))?;
    let mut job = tok
        .start(mono)
        .ok_or_else(|| anyhow::anyhow!("{}: under a second of audio; the tokenizer needs one", audio.display()))?;
    let pb = super::progress_bar(job.steps() as u64, "tokenizing");
    while job.step(&mut tok, &backend)? {
        pb.set_position(job.done() as u64);
    }
    pb.finish_and_clear();
    emit(job.codes(), Some(tok.head.cfg.frame_rate), out)
}

/// Prints `ids` comma separated, or writes them to `out` (JSON with the frame rate for a
/// `.json` name and codes, else the same line).
pub fn emit(ids: &[u32], frame_rate: Option<usize>, out: Option<&Path>) -> anyhow::Result<()> {
    let line = ids.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    let Some(path) = out else {
        println!("{line}");
        return Ok(());
    };
    let text = match frame_rate {
        Some(rate) if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) => {
            serde_json::to_string(&serde_json::json!({ "frame_rate": rate, "codes": ids }))?
        }
        _ => line,
    };
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {} values to {}", ids.len(), path.display());
    Ok(())
}
