//! The neural codec on the VAE alone, shared by `yued codec` and the daemon's `/vae` jobs:
//! any decodable audio -> 48 kHz stereo -> posterior-mean latents, and latents -> the
//! requested audio container. No actor or HTTP here; the caller owns the VAE.
use yued_audio::encode::normalize_and_encode;
use yued_audio::Pcm;
use yued_engine::cancel::CancelToken;
use yued_engine::ggml::Backend;
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
    let pcm = yued_audio::resample::resample(&yued_audio::resample::to_channels(pcm, ch), vae.info.sample_rate)
        .map_err(|e| e.to_string())?;
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
pub fn latents_to_audio(
    vae: &mut VaeModel,
    backend: &Backend,
    latents: &[f32],
    opts: DecodeOptions,
    cancel: &CancelToken,
    on_tile: &mut dyn FnMut(Tile<'_>),
) -> Result<(Pcm, Vec<u8>), String> {
    let pcm = vae.decode_tiled(backend, latents, opts.core, opts.halo, cancel, on_tile).map_err(|e| e.to_string())?;
    let audio = Pcm::new(vae.info.sample_rate, vae.info.audio_channels, pcm);
    let bytes = normalize_and_encode(audio.clone(), opts.format, opts.peak_clip, opts.mp3_bitrate)
        .map_err(|e| e.to_string())?;
    Ok((audio, bytes))
}

/// MiniMax Music 3's codec: any decodable audio -> 44.1 kHz stereo -> the flow VAE's
/// posterior mean, time-major `[T, 128]` (zero-padded to whole 512-sample frames).
pub fn mm3_audio_to_latents(
    enc: &mut yued_engine::models::mm3::vae_enc::VaeEncoder,
    backend: &Backend,
    bytes: &[u8],
) -> Result<Vec<f32>, String> {
    let pcm = yued_audio::decode::decode(bytes).map_err(|e| e.to_string())?;
    let rate = yued_protocol::request::mm3::SAMPLE_RATE;
    let pcm =
        yued_audio::resample::resample(&yued_audio::resample::to_channels(&pcm, 2), rate).map_err(|e| e.to_string())?;
    let hop = enc.hop();
    let n = pcm.frames().div_ceil(hop).max(1) * hop;
    let mut planar = Vec::with_capacity(2 * n);
    for c in 0..2 {
        let src = pcm.channel(c);
        planar.extend_from_slice(src);
        planar.extend(std::iter::repeat_n(0.0, n - src.len()));
    }
    enc.encode(backend, &planar).map_err(|e| e.to_string())
}

/// Latent frames of one MiniMax decode tile, and its halo on each side (cropped after).
pub const MM3_TILE: usize = 256;
pub const MM3_HALO: usize = 16;

/// MiniMax Music 3's latents (time-major `[T, 128]`) to audio: decoded in tiles of
/// [`MM3_TILE`] frames behind and ahead of [`MM3_HALO`] frames of context (so a long file
/// never becomes one huge graph), `progress(tiles done, tiles)`, then encoded into
/// `format` at 44.1 kHz (Opus resampled to 48), normalised unless the format is wav32.
pub fn mm3_latents_to_audio(
    vae: &mut yued_engine::models::mm3::vae::VaeModel,
    backend: &Backend,
    latents: &[f32],
    format: OutputFormat,
    mp3_bitrate: u32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Pcm, Vec<u8>), String> {
    let pcm = mm3_decode_tiled(vae, backend, latents, &mut |done, tiles, _| {
        progress(done, tiles);
        Ok(())
    })?;
    let bytes = normalize_and_encode(pcm.clone(), format, 10, mp3_bitrate).map_err(|e| e.to_string())?;
    Ok((pcm, bytes))
}

/// What a MiniMax tiled decode calls after each tile: (tiles done, tiles, planar stereo).
pub type OnMm3Tile<'a> = dyn FnMut(usize, usize, &[f32]) -> Result<(), String> + 'a;

/// MiniMax Music 3's latents to 44.1 kHz stereo, tile by tile ([`MM3_TILE`] frames with
/// [`MM3_HALO`] of context each side, cropped): `on_tile(tiles done, tiles, the tile's
/// planar stereo)` after each; an error it returns (a cancel) stops the decode.
pub fn mm3_decode_tiled(
    vae: &mut yued_engine::models::mm3::vae::VaeModel,
    backend: &Backend,
    latents: &[f32],
    on_tile: &mut OnMm3Tile<'_>,
) -> Result<Pcm, String> {
    let c = vae.info.latent_channels;
    if latents.is_empty() || !latents.len().is_multiple_of(c) {
        return Err(format!("{} latent values are not whole frames of {c} channels", latents.len()));
    }
    let (frames, hop) = (latents.len() / c, vae.info.hop());
    let tiles = frames.div_ceil(MM3_TILE);
    let (mut left, mut right) = (Vec::with_capacity(frames * hop), Vec::with_capacity(frames * hop));
    for k in 0..tiles {
        let (a, b) = (k * MM3_TILE, ((k + 1) * MM3_TILE).min(frames));
        let (s, e) = (a.saturating_sub(MM3_HALO), (b + MM3_HALO).min(frames));
        let pcm = vae.decode(backend, &latents[s * c..e * c]).map_err(|e| e.to_string())?;
        let n = pcm.len() / 2;
        let (from, to) = ((a - s) * hop, (b - s) * hop);
        let tile = [&pcm[from..to], &pcm[n + from..n + to]].concat();
        left.extend_from_slice(&pcm[from..to]);
        right.extend_from_slice(&pcm[n + from..n + to]);
        on_tile(k + 1, tiles, &tile)?;
    }
    Ok(Pcm::new(vae.info.sample_rate, 2, [left, right].concat()))
}
