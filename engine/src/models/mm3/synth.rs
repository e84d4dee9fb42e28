//! MiniMax Music 3's synthesis half, as the reference pipeline runs it: the frames' states
//! in windows of 200 frames with a hop of 100, each window's condition encoded alone; per
//! window `steps` Euler steps of the guided DiT velocity from noise (t = 0) to data (t = 1)
//! over the sigmas `1 - linspace(1, 1/N, N)` then 1; a window after the first starts from
//! the previous one: its first frames' condition is the previous window's (the carried
//! range), and at every step its first `overlap` latents are blended from that window's
//! noise toward the carried latents (`(1 - (1 - 1e-6) t) noise + t carried`), then restored
//! to the carried latents at the end. The carry is the latent range `[L - 344, L - 172)`.
//! Decoding: every window through the VAE, the first keeping its left edge, later ones
//! cropping 86 latents on the left, all but the last cropping 258 on the right; stitched
//! and clamped to [-1, 1].
use crate::ggml::{Backend, GgmlError};
use crate::models::mm3::cond::CondEncoder;
use crate::models::mm3::dit::DitModel;
use crate::models::mm3::vae::VaeModel;
use crate::rng::philox::philox4x32_10;

/// LM frames per window and the hop between windows.
pub const WINDOW_FRAMES: usize = 200;
pub const WINDOW_HOP: usize = 100;
/// Latent frames of the carried overlap (and half the carried range).
pub const OVERLAP_LATENTS: usize = 172;
/// Latents cropped from the decoded windows: on the left of all but the first, on the
/// right of all but the last.
pub const CROP_LEFT: usize = 86;
pub const CROP_RIGHT: usize = 344 - 86;

/// The windows of a song of `frames` LM frames: `(start, end)` frame ranges.
pub fn windows(frames: usize) -> Vec<(usize, usize)> {
    let starts: Vec<usize> =
        if frames <= WINDOW_FRAMES { vec![0] } else { (0..frames - WINDOW_HOP).step_by(WINDOW_HOP).collect() };
    starts.into_iter().map(|s| (s, (s + WINDOW_FRAMES).min(frames))).collect()
}

/// The schedule of `n` steps: `f32(1) - f32(linspace_f64(1, 1/n, n))`, then 1.
pub fn sigmas(n: usize) -> Vec<f32> {
    let lin = |i: usize| if n == 1 { 1.0 } else { 1.0 + (1.0 / n as f64 - 1.0) * i as f64 / (n - 1) as f64 };
    (0..n).map(|i| 1.0f32 - lin(i) as f32).chain(std::iter::once(1.0)).collect()
}

/// A stream of standard normal values (the initial noise, consumed window by window, each
/// window's block channel-major: `[channels][latents]`).
pub trait Noise {
    fn normals(&mut self, n: usize) -> Vec<f32>;
}

/// minimaxmusic.cpp's noise: Philox4x32-10 keyed by the seed, one counter per 4 values, Box-Muller
/// on pairs (curand's `normal4`), one continuous stream across windows.
pub struct PhiloxNoise {
    key: [u32; 2],
    counter: u64,
    spare: Vec<f32>,
}

impl PhiloxNoise {
    pub fn new(seed: u64) -> Self {
        PhiloxNoise { key: [seed as u32, (seed >> 32) as u32], counter: 0, spare: Vec::new() }
    }
    fn next4(&mut self) -> [f32; 4] {
        let r = philox4x32_10([self.counter as u32, (self.counter >> 32) as u32, 0, 0], self.key);
        self.counter += 1;
        let u = |x: u32| x as f32 * 2.328_306_4e-10 + 2.328_306_4e-10 / 2.0;
        let bm = |a: u32, b: u32| {
            let (u1, u2) = (u(a), u(b));
            let r = (-2.0 * u1.ln()).sqrt();
            let th = 2.0 * std::f32::consts::PI * u2;
            (r * th.sin(), r * th.cos())
        };
        let (a, b) = bm(r[0], r[1]);
        let (c, d) = bm(r[2], r[3]);
        [a, b, c, d]
    }
}

impl Noise for PhiloxNoise {
    fn normals(&mut self, n: usize) -> Vec<f32> {
        let mut out = std::mem::take(&mut self.spare);
        while out.len() < n {
            out.extend(self.next4());
        }
        self.spare = out.split_off(n);
        out
    }
}

/// Given values (tests inject the reference's noise).
pub struct FixedNoise(pub std::collections::VecDeque<f32>);

impl Noise for FixedNoise {
    fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.0.pop_front().expect("ran out of injected noise")).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynthSettings {
    pub steps: usize,
    pub dit_cfg: f32,
    /// Both guidance branches (and all variations) in one DiT batch.
    pub batch_cfg: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("cancelled")]
    Cancelled,
}

/// One window's result: its condition and the final latents of each variation (time-major).
pub struct Window {
    pub index: usize,
    pub condition: Vec<f32>,
    pub latents: Vec<Vec<f32>>,
    pub frames: usize,
}

/// Renders the windows of a song: `states` are the song's frames (`frames` of `8 * hidden`
/// values), one noise stream per variation. `on_window` gets each window as it completes
/// (its latents decode while the next one renders); `progress(step, total)` after each step.
#[allow(clippy::too_many_arguments)]
pub fn render(
    backend: &Backend,
    cond: &mut CondEncoder,
    dit: &mut DitModel,
    states: &[f32],
    frames: usize,
    noise: &mut [Box<dyn Noise + Send>],
    s: &SynthSettings,
    cancelled: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(usize, usize),
    on_window: &mut dyn FnMut(Window) -> Result<(), SynthError>,
) -> Result<(), SynthError> {
    let mut w = WindowRenderer::new(s);
    let total = windows(frames).len() * s.steps;
    while let Some(win) =
        w.next(backend, cond, dit, states, frames, true, noise, s, cancelled, &mut |d| progress(d, total))?
    {
        on_window(win)?;
    }
    Ok(())
}

/// A song's windows rendered one at a time, each as soon as its frames are known: window
/// k (frames `100k..100k + 200`) needs only those frames and window k - 1's carry, so a song
/// still being written renders its full windows as their frames arrive, and the rest once
/// it ends. The same windows as [`render`]'s, bit for bit.
pub struct WindowRenderer {
    next: usize,
    sig: Vec<f32>,
    done_steps: usize,
    /// The carry: (latents per variation, condition), time-major.
    carry: Option<(Vec<Vec<f32>>, Vec<f32>)>,
}

impl WindowRenderer {
    pub fn new(s: &SynthSettings) -> Self {
        WindowRenderer { next: 0, sig: sigmas(s.steps), done_steps: 0, carry: None }
    }

    /// Windows rendered so far.
    pub fn rendered(&self) -> usize {
        self.next
    }

    /// The next window when its frames are known: `states` holds the song's first `frames`
    /// frames, all of it when `complete`. `None`: it needs more frames, or the song has no
    /// more windows. `progress(steps done)` counts this renderer's DiT steps.
    #[allow(clippy::too_many_arguments)]
    pub fn next(
        &mut self,
        backend: &Backend,
        cond: &mut CondEncoder,
        dit: &mut DitModel,
        states: &[f32],
        frames: usize,
        complete: bool,
        noise: &mut [Box<dyn Noise + Send>],
        s: &SynthSettings,
        cancelled: &dyn Fn() -> bool,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Option<Window>, SynthError> {
        let k = self.next;
        let (start, end) = if complete {
            match windows(frames).get(k) {
                Some(&w) => w,
                None => return Ok(None),
            }
        } else if frames >= k * WINDOW_HOP + WINDOW_FRAMES {
            (k * WINDOW_HOP, k * WINDOW_HOP + WINDOW_FRAMES)
        } else {
            return Ok(None);
        };
        let per_frame = states.len() / frames.max(1);
        let c = dit.cfg.in_channels;
        let cd = dit.cfg.condition_dim;
        let m = noise.len();
        let mut condition = cond.encode(backend, &states[start * per_frame..end * per_frame], end - start)?;
        let l = condition.len() / cd;
        let overlap = self.carry.as_ref().map_or(0, |(lat, _)| (lat[0].len() / c).min(l));
        if let Some((_, prev_cond)) = &self.carry {
            condition[..overlap * cd].copy_from_slice(&prev_cond[..overlap * cd]);
        }
        // Noise: each variation's block, channel-major, made time-major.
        let mut x: Vec<Vec<f32>> = noise
            .iter_mut()
            .map(|n| {
                let cm = n.normals(c * l);
                let mut tm = vec![0f32; c * l];
                for ch in 0..c {
                    for t in 0..l {
                        tm[t * c + ch] = cm[ch * l + t];
                    }
                }
                tm
            })
            .collect();
        let prompt: Vec<Vec<f32>> = x.iter().map(|v| v[..overlap * c].to_vec()).collect();
        for i in 0..s.steps {
            if cancelled() {
                return Err(SynthError::Cancelled);
            }
            let t = self.sig[i];
            if let Some((prev, _)) = &self.carry {
                for (v, xv) in x.iter_mut().enumerate() {
                    for j in 0..overlap * c {
                        xv[j] = (1.0 - (1.0 - 1e-6) * t) * prompt[v][j] + t * prev[v][j];
                    }
                }
            }
            let flat: Vec<f32> = x.concat();
            let vel = dit.guided(backend, &flat, &condition, l, m, t, s.dit_cfg, s.batch_cfg)?;
            let dt = self.sig[i + 1] - t;
            for (v, xv) in x.iter_mut().enumerate() {
                for (a, b) in xv.iter_mut().zip(&vel[v * l * c..(v + 1) * l * c]) {
                    *a += dt * b;
                }
            }
            self.done_steps += 1;
            progress(self.done_steps);
        }
        if let Some((prev, _)) = &self.carry {
            for (v, xv) in x.iter_mut().enumerate() {
                xv[..overlap * c].copy_from_slice(&prev[v][..overlap * c]);
            }
        }
        let os = l.saturating_sub(2 * OVERLAP_LATENTS);
        let oe = os.max(l.saturating_sub(OVERLAP_LATENTS));
        self.carry =
            Some((x.iter().map(|v| v[os * c..oe * c].to_vec()).collect(), condition[os * cd..oe * cd].to_vec()));
        self.next += 1;
        Ok(Some(Window { index: k, condition, latents: x, frames: l }))
    }
}

/// Decodes window `index` of a song whose window count is not known yet: the part kept
/// whether or not a later window follows (planar stereo, cropped and clamped as
/// [`decode_window`] crops it), and the right edge kept only if none follows. The two
/// together are `decode_window` of the last window; the first alone, of any other.
pub fn decode_open(
    backend: &Backend,
    vae: &mut VaeModel,
    latents: &[f32],
    index: usize,
) -> Result<(Vec<f32>, Vec<f32>), GgmlError> {
    let pcm = vae.decode(backend, latents)?;
    let n = pcm.len() / 2;
    let hop = vae.info.hop();
    let left = if index == 0 { 0 } else { CROP_LEFT * hop };
    let cut = n.saturating_sub(CROP_RIGHT * hop).max(left);
    let part = |a: usize, b: usize| {
        (0..2).flat_map(|side| pcm[side * n + a..side * n + b].iter().map(|x| x.clamp(-1.0, 1.0))).collect::<Vec<f32>>()
    };
    Ok((part(left, cut), part(cut, n)))
}

/// Decodes window `index` of `count` and crops it for stitching: planar stereo.
pub fn decode_window(
    backend: &Backend,
    vae: &mut VaeModel,
    latents: &[f32],
    index: usize,
    count: usize,
) -> Result<Vec<f32>, GgmlError> {
    let pcm = vae.decode(backend, latents)?;
    let n = pcm.len() / 2;
    let hop = vae.info.hop();
    let left = if index == 0 { 0 } else { CROP_LEFT * hop };
    let right = if index + 1 == count { 0 } else { CROP_RIGHT * hop };
    let keep = n.saturating_sub(left + right);
    let mut out = Vec::with_capacity(2 * keep);
    for side in 0..2 {
        out.extend(pcm[side * n + left..side * n + left + keep].iter().map(|x| x.clamp(-1.0, 1.0)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_schedule() {
        assert_eq!(windows(150), vec![(0, 150)]);
        assert_eq!(windows(200), vec![(0, 200)]);
        assert_eq!(windows(250), vec![(0, 200), (100, 250)]);
        assert_eq!(windows(301), vec![(0, 200), (100, 300), (200, 301)]);
        let s = sigmas(30);
        assert_eq!(s.len(), 31);
        assert_eq!(s[0], 0.0);
        assert_eq!(s[30], 1.0);
        // Not exactly k/N: the f32 difference of the f64 linspace.
        assert_eq!(s[1], 1.0f32 - (1.0 + (1.0 / 30.0 - 1.0) / 29.0) as f32);
        let mut a = PhiloxNoise::new(7);
        let mut b = PhiloxNoise::new(7);
        let (x, y) = (a.normals(10), [b.normals(3), b.normals(7)].concat());
        assert_eq!(x, y, "one continuous stream however it is consumed");
        let mut big = PhiloxNoise::new(1).normals(20_000);
        let mean = big.iter().sum::<f32>() / big.len() as f32;
        big.iter_mut().for_each(|v| *v = *v * *v);
        let var = big.iter().sum::<f32>() / big.len() as f32;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "{mean} {var}");
    }
}
