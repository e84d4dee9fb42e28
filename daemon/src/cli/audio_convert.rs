//! `yued audio-convert`: any decodable audio to any container we write, the format chosen
//! by the output extension (yue2.cpp's mp3-codec, widened to every format).
use anyhow::Context;
use std::path::PathBuf;
use yued_audio::resample::{resample, to_channels};
use yued_protocol::OutputFormat;

#[derive(clap::Args)]
pub struct AudioConvertArgs {
    /// Input file: WAV, MP3, FLAC, Ogg Vorbis, Ogg Opus, AAC (ADTS) or M4A.
    #[arg(short = 'i', long = "input")]
    pub input: PathBuf,
    /// Output file; its extension picks the format: .wav .mp3 .flac .ogg .opus .aac .m4a.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// MP3 bitrate in kbps, 32 to 320.
    #[arg(short = 'b', long = "bitrate", default_value_t = 128,
        value_parser = clap::value_parser!(u32).range(32..=320))]
    pub bitrate: u32,
    /// WAV sample format for a .wav output: wav16, wav24 or wav32 (float).
    #[arg(long, default_value = "wav16")]
    pub format: String,
    /// Resample to this rate (Hz); default keeps the input's (Opus output is always 48 kHz).
    #[arg(long)]
    pub rate: Option<u32>,
    /// Mix to this many channels (1 or 2); default keeps the input's.
    #[arg(long)]
    pub channels: Option<usize>,
}

/// The output format an extension asks for; `.wav` takes the `--format` flavour.
pub fn format_for(path: &std::path::Path, wav: &str) -> anyhow::Result<OutputFormat> {
    let ext = path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).unwrap_or_default();
    if ext == "wav" {
        let f: OutputFormat = wav.parse().map_err(|e| anyhow::anyhow!("--format: {e}"))?;
        anyhow::ensure!(f.extension() == "wav", "--format: '{wav}' is not a WAV flavour (wav16, wav24, wav32)");
        return Ok(f);
    }
    OutputFormat::all().iter().copied().find(|f| f.extension() == ext).ok_or_else(|| {
        anyhow::anyhow!("{}: unknown output extension '.{ext}' (wav, mp3, flac, ogg, opus, aac, m4a)", path.display())
    })
}

pub fn run(a: AudioConvertArgs) -> anyhow::Result<()> {
    let format = format_for(&a.output, &a.format)?;
    let bytes = std::fs::read(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    let mut pcm = yued_audio::decode::decode(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", a.input.display()))?;
    if let Some(c) = a.channels {
        anyhow::ensure!((1..=2).contains(&c), "--channels: {c} (1 or 2)");
        pcm = to_channels(&pcm, c);
    }
    anyhow::ensure!(pcm.channels <= 2, "{}: {} channels; pass --channels 1 or 2", a.input.display(), pcm.channels);
    // Opus resamples to 48 kHz inside the encoder (recording this rate in its header).
    let rate = a.rate.unwrap_or(pcm.sample_rate);
    anyhow::ensure!((8_000..=192_000).contains(&rate), "--rate: {rate} Hz (8000..192000)");
    let pcm = resample(&pcm, rate)?;
    let out = yued_audio::encode::encode(&pcm, format, a.bitrate)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.output.display()))?;
    std::fs::write(&a.output, &out).with_context(|| format!("writing {}", a.output.display()))?;
    println!(
        "{}: {} {:.3} s, {} Hz, {} ch, {} bytes",
        a.output.display(),
        format.name(),
        pcm.seconds(),
        pcm.sample_rate,
        pcm.channels,
        out.len()
    );
    Ok(())
}
