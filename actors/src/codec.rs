//! The neural codec on the VAE alone, shared by `yued codec` and the daemon's `/vae` jobs:
//! any decodable audio -> 48 kHz stereo -> posterior-mean latents, and latents -> the
//! requested audio container. No actor or HTTP here; the caller owns the VAE.
use yued_audio::encode::normalize_and_encode;
use yued_audio::Pcm;
use yued_engine::ggml::Backend;
use yued_engine::models::yue2::generate::CancelToken;
use yued_engine::models::yue2::vae::{Tile, VaeModel};
use yued_protocol::OutputFormat;

/// Decodes an audio file, converts it to the VAE's rate and channel count, and encodes it:
/// the time-major latents `[T, latent_channels]`. The audio is zero-padded to whole frames.
pub fn audio_to_latents(vae: &mut VaeModel, backend: &Backend, bytes: &[u8]) -> Result<Vec<f32>, String> {
    let pcm = yued_audio::decode::decode(bytes).map_err(|e| e.to_string())?;
    pcm_to_latents(vae, backend, &pcm)
}

/// As [`audio_to_latents`] from PCM already in memory.
pub fn pcm_to_latents(vae: &mut VaeModel, backend: &Backend, pcm: &Pcm) -> Result<Vec<f32>, String> {
    let ch = vae.info.audio_channels;
    let pcm = yued_audio::resample::resample(&yued_audio::resample::to_channels(pcm, ch), vae.info.sample_rate).map_err(|e| e.to_string())?;
    let hop = vae.info.hop();
    let n = pcm.frames().div_ceil(hop).max(1) * hop;
    let mut planar = Vec::with_capacity(n * ch);
    for c in 0..ch {
        let src = pcm.channel(c);
        planar.extend_from_slice(src);
        planar.extend(std::iter::repeat_n(0.0, n - src.len()));
    }
    vae.encode(backend, &planar).map_err(|e| e.to_string())
}

/// How a decode writes its audio.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    pub format: OutputFormat,
    pub peak_clip: i64,
    pub mp3_bitrate: u32,
    pub core: usize,
    pub halo: usize,
}

/// Decodes time-major latents tile by tile (each tile handed to `on_tile` as it lands) and
/// encodes the whole into `opts.format`, normalised unless the format is wav32.
pub fn latents_to_audio(vae: &mut VaeModel, backend: &Backend, latents: &[f32], opts: DecodeOptions, cancel: &CancelToken, on_tile: &mut dyn FnMut(Tile<'_>)) -> Result<(Pcm, Vec<u8>), String> {
    let pcm = vae.decode_tiled(backend, latents, opts.core, opts.halo, cancel, on_tile).map_err(|e| e.to_string())?;
    let audio = Pcm::new(vae.info.sample_rate, vae.info.audio_channels, pcm);
    let bytes = normalize_and_encode(audio.clone(), opts.format, opts.peak_clip, opts.mp3_bitrate).map_err(|e| e.to_string())?;
    Ok((audio, bytes))
}
