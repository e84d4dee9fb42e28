use super::common::{fresh_default, not_an_input, write_file, DeviceArgs};
use anyhow::Context;
use std::path::{Path, PathBuf};
use yued_actors::codec::{audio_to_latents, latents_to_audio, DecodeOptions};
use yued_engine::cancel::CancelToken;
use yued_engine::gguf::GgufFile;
use yued_engine::latent::{decode_latents, encode_latents, LatentFormat};
use yued_engine::models::yue2::vae::VaeModel;
use yued_protocol::OutputFormat;

/// The neural codec: audio to latents and back, with the VAE alone (YuE2's Oobleck VAE,
/// or with `--family mm3` MiniMax Music 3's flow VAE, whose encoder is its `encoder.*` tensors).
#[derive(clap::Subcommand)]
pub enum CodecCommand {
    /// Audio (WAV, MP3, FLAC, Ogg Vorbis/Opus, AAC/M4A; any rate and channel count, converted
    /// to the VAE's: 48 kHz stereo for YuE2, 44.1 kHz stereo for MiniMax Music 3) to latents
    /// (.vae, or .nac8 / .nac4 with --q8 / --q4).
    Encode(EncodeArgs),
    /// Latents (any of the three formats, detected by magic) to audio.
    Decode(DecodeArgs),
}

/// What both directions take: whose VAE, the files, the device.
#[derive(clap::Args)]
pub struct CodecIo {
    /// Whose VAE: `yue2` (48 kHz, 64 latent channels at 25 Hz) or `mm3` (MiniMax Music 3's
    /// flow VAE: 44.1 kHz, 128 channels at 86.13 Hz).
    #[arg(long, default_value = "yue2")]
    pub family: yued_protocol::Family,
    /// VAE GGUF (for mm3 the vocoder file, `mm3-vae`; encoding needs its encoder tensors).
    #[arg(long)]
    pub vae: PathBuf,
    /// Input file.
    #[arg(short = 'i')]
    pub input: PathBuf,
    /// Output file (default: the input with the output extension).
    #[arg(short = 'o')]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

#[derive(clap::Args)]
pub struct EncodeArgs {
    #[command(flatten)]
    pub io: CodecIo,
    /// Quantize the latents to int8 (.nac8).
    #[arg(long)]
    pub q8: bool,
    /// Quantize the latents to 4 bits (.nac4).
    #[arg(long, conflicts_with = "q8")]
    pub q4: bool,
}

#[derive(clap::Args)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub io: CodecIo,
    /// The audio format: mp3, opus, ogg, flac, aac, m4a, wav16, wav24, wav32.
    #[arg(long, default_value = "wav16")]
    pub format: String,
    /// The MP3 bitrate in kbps, 32 to 320 (--format mp3).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(32..=320))]
    pub bitrate: u32,
    /// Latent frames per decoded tile (YuE2; MiniMax decodes tiles of 256).
    #[arg(long, default_value_t = 512)]
    pub vae_core: usize,
    /// Context frames decoded on each side of a tile and dropped (no seams).
    #[arg(long, default_value_t = 16)]
    pub vae_halo: usize,
}

impl CodecIo {
    /// Where the run writes, checked before the work: `-o`, never the input itself; else the
    /// input with the output's extension `ext`, never over a file already there (a decode of
    /// `song.vae` would otherwise replace the `song.wav` it came from).
    fn out_path(&self, ext: &str) -> anyhow::Result<PathBuf> {
        let out = match &self.output {
            Some(o) => o.clone(),
            None => fresh_default(self.input.with_extension(ext))?,
        };
        not_an_input(&out, &[&self.input, &self.vae])?;
        Ok(out)
    }
}

impl EncodeArgs {
    /// The latent file an encode writes: raw f32, or int8 / 4-bit with --q8 / --q4.
    fn latent_format(&self) -> LatentFormat {
        if self.q8 {
            LatentFormat::Nac8
        } else if self.q4 {
            LatentFormat::Nac4
        } else {
            LatentFormat::RawF32
        }
    }
}

/// What a codec run does: encode with its latent format, or decode with its options.
enum Direction {
    Encode(LatentFormat),
    Decode { format: OutputFormat, bitrate: u32, core: usize, halo: usize },
}

pub fn run(c: CodecCommand) -> anyhow::Result<()> {
    let (io, dir) = match c {
        CodecCommand::Encode(a) => {
            let fmt = a.latent_format();
            (a.io, Direction::Encode(fmt))
        }
        CodecCommand::Decode(a) => {
            let format: OutputFormat = a.format.parse().map_err(|e| anyhow::anyhow!("--format: {e}"))?;
            (a.io, Direction::Decode { format, bitrate: a.bitrate, core: a.vae_core, halo: a.vae_halo })
        }
    };
    let out = io.out_path(match &dir {
        Direction::Encode(fmt) => fmt.extension(),
        Direction::Decode { format, .. } => format.extension(),
    })?;
    let backend = io.device.open()?;
    if io.family == yued_protocol::Family::Mm3 {
        return run_mm3(&dir, &io, &out, &backend);
    }
    let vf = GgufFile::open(&io.vae)?;
    let mut vae = VaeModel::load(&vf, &backend)?;
    let lat = vae.info.latent_channels;
    let bytes = std::fs::read(&io.input).with_context(|| format!("reading {}", io.input.display()))?;
    match dir {
        Direction::Encode(fmt) => {
            let pb = super::spinner("encode");
            let z = audio_to_latents(&mut vae, &backend, &bytes);
            pb.finish_and_clear();
            let z = z.map_err(|e| anyhow::anyhow!("{}: {e}", io.input.display()))?;
            write_file(&out, encode_latents(&z, lat, fmt))?;
            println!(
                "{}: {} frames ({:.2} s) as {}",
                out.display(),
                z.len() / lat,
                vae.info.audio_spec().latent_seconds(z.len() / lat),
                fmt.extension()
            );
        }
        Direction::Decode { format, bitrate, core, halo } => {
            let (_, z) = decode_latents(&bytes, lat).map_err(|e| anyhow::anyhow!("{}: {e}", io.input.display()))?;
            let pb = super::progress_bar((z.len() / lat).div_ceil(core.max(1)) as u64, "decode");
            let opts = DecodeOptions { format, peak_clip: 10, mp3_bitrate: bitrate, core, halo };
            let (audio, encoded) =
                latents_to_audio(&mut vae, &backend, &z, opts, &CancelToken::new(), &mut |_| pb.inc(1))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            pb.finish_and_clear();
            write_file(&out, encoded)?;
            println!("{}: {:.2} s", out.display(), audio.seconds());
        }
    }
    Ok(())
}

/// `yued codec --family mm3`: MiniMax Music 3's flow VAE.
fn run_mm3(dir: &Direction, a: &CodecIo, out: &Path, backend: &yued_engine::ggml::Backend) -> anyhow::Result<()> {
    use yued_engine::models::mm3::{vae::VaeModel, vae_enc::VaeEncoder};
    let vf = GgufFile::open(&a.vae)?;
    let bytes = std::fs::read(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    let spec = VaeModel::info(&vf)?.audio_spec();
    let lat = spec.latent_channels;
    if let Direction::Encode(fmt) = *dir {
        let mut enc = VaeEncoder::load(&vf, backend)?;
        let pb = super::spinner("encode");
        let z = yued_actors::codec::mm3_audio_to_latents(&mut enc, backend, &bytes);
        pb.finish_and_clear();
        let z = z.map_err(|e| anyhow::anyhow!("{}: {e}", a.input.display()))?;
        write_file(out, encode_latents(&z, lat, fmt))?;
        println!(
            "{}: {} frames ({:.2} s) as {}",
            out.display(),
            z.len() / lat,
            spec.latent_seconds(z.len() / lat),
            fmt.extension()
        );
    } else if let Direction::Decode { format, bitrate, .. } = *dir {
        let (_, z) = decode_latents(&bytes, lat).map_err(|e| anyhow::anyhow!("{}: {e}", a.input.display()))?;
        let mut vae = VaeModel::load(&vf, backend)?;
        let pb = super::progress_bar((z.len() / lat).div_ceil(yued_actors::codec::MM3_TILE) as u64, "decode");
        let (audio, encoded) =
            yued_actors::codec::mm3_latents_to_audio(&mut vae, backend, &z, format, bitrate, &mut |done, _| {
                pb.set_position(done as u64)
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        pb.finish_and_clear();
        write_file(out, encoded)?;
        println!("{}: {:.2} s at {} Hz", out.display(), audio.seconds(), audio.sample_rate);
    }
    Ok(())
}
