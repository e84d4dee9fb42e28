//! `yued tokenize`: a text to the backbone's token ids, or (`--audio`) a recording to the
//! audio tokenizer's 25 Hz semantic codes ([`super::audio_tokenize`]).
use super::common::DeviceArgs;
use std::path::PathBuf;
use yued_engine::gguf::GgufFile;
use yued_engine::tokenizer::BpeTokenizer;

#[derive(clap::Args)]
#[group(id = "input", required = true, multiple = false, args = ["text", "audio"])]
pub struct TokenizeArgs {
    /// With --text, the backbone GGUF carrying the tokenizer; with --audio, the audio
    /// tokenizer head's GGUF (`yued convert audio-tokenizer`), its MERT file read from the
    /// same folder, named after the head's base model with the head's quant suffix
    /// (`…-tokenizer-v4-F32.gguf` reads `MERT-v2-FullSong-F32.gguf`).
    #[arg(long)]
    pub model: PathBuf,
    /// Text to encode (NFC-normalised; special tokens are never matched inside it).
    #[arg(long)]
    pub text: Option<String>,
    /// A recording to turn into semantic codes (WAV, FLAC, MP3, Ogg, …; its channels are
    /// averaged and it is resampled to 24 kHz; at least a second long).
    #[arg(long)]
    pub audio: Option<PathBuf>,
    /// Write the ids or codes here instead of printing them: comma separated on one line
    /// (`.csv`, any other name), or `{"frame_rate": 25, "codes": [...]}` for a `.json` name
    /// (codes only).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: TokenizeArgs) -> anyhow::Result<()> {
    if let Some(audio) = &a.audio {
        return super::audio_tokenize::run(&a.model, audio, a.out.as_deref(), &a.device);
    }
    let f = GgufFile::open(&a.model)?;
    let tok = BpeTokenizer::from_gguf(&f)?;
    let ids: Vec<u32> = tok.encode(a.text.as_deref().unwrap_or_default());
    super::audio_tokenize::emit(&ids, None, a.out.as_deref())
}
