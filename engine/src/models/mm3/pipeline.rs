//! A MiniMax Music 3 song's synthesis end to end, for the callers that own the modules
//! (the CLI and the daemon's stages lease them differently): the song rendered window by
//! window, each window decoded as soon as it is denoised.
use crate::ggml::Backend;
use crate::models::mm3::compose::Song;
use crate::models::mm3::cond::CondEncoder;
use crate::models::mm3::dit::DitModel;
use crate::models::mm3::synth::{decode_window, render, windows, Noise, PhiloxNoise, SynthError, SynthSettings};
use crate::models::mm3::vae::VaeModel;

/// One decoded window of a track: planar stereo, cropped for stitching.
pub struct AudioPiece<'a> {
    pub variation: usize,
    pub window: usize,
    pub windows: usize,
    pub pcm: &'a [f32],
}

/// Renders the `variations` of a song (noise seeds `seed + j`, batched in the DiT) and
/// decodes each window as it completes; returns each variation's whole planar stereo
/// track. `progress(step, steps)` counts DiT steps.
#[allow(clippy::too_many_arguments)]
pub fn render_song(
    backend: &Backend,
    cond: &mut CondEncoder,
    dit: &mut DitModel,
    vae: &mut VaeModel,
    song: &Song,
    seed: i64,
    variations: usize,
    s: &SynthSettings,
    cancelled: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(usize, usize),
    on_audio: &mut dyn FnMut(AudioPiece<'_>),
) -> Result<Vec<Vec<f32>>, SynthError> {
    let frames = song.frames();
    let count = windows(frames).len();
    let mut noise: Vec<Box<dyn Noise + Send>> = (0..variations)
        .map(|j| Box::new(PhiloxNoise::new(seed.wrapping_add(j as i64) as u64)) as Box<dyn Noise + Send>)
        .collect();
    let mut tracks: Vec<(Vec<f32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); variations];
    render(backend, cond, dit, &song.states, frames, &mut noise, s, cancelled, progress, &mut |w| {
        for (j, lat) in w.latents.iter().enumerate() {
            if cancelled() {
                return Err(SynthError::Cancelled);
            }
            let pcm = decode_window(backend, vae, lat, w.index, count)?;
            on_audio(AudioPiece { variation: j, window: w.index, windows: count, pcm: &pcm });
            let n = pcm.len() / 2;
            tracks[j].0.extend_from_slice(&pcm[..n]);
            tracks[j].1.extend_from_slice(&pcm[n..]);
        }
        Ok(())
    })?;
    Ok(tracks.into_iter().map(|(l, r)| [l, r].concat()).collect())
}
