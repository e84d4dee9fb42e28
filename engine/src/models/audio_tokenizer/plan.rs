//! The host side of the tokenizer's pipeline, around the two graphs (MERT per chunk, the head
//! per window): which samples each MERT chunk reads, how its states land on the code grid,
//! and which frames each head window decides.
use std::ops::Range;

/// MERT's input rate.
pub const SAMPLE_RATE: usize = 24_000;
/// Codes a second.
pub const CODE_RATE: usize = 25;
/// MERT reads independent chunks of 30 s.
pub const CHUNK_SAMPLES: usize = 30 * SAMPLE_RATE;
/// The head's window and hop, in frames, and the frames trimmed from a window's inner edges.
pub const WINDOW: usize = 512;
pub const HOP: usize = 256;
pub const TRIM: usize = 128;

/// The MERT chunks of a recording of `n` samples: 30 s each, a final tail under 1 s dropped.
pub fn chunks(n: usize) -> Vec<Range<usize>> {
    (0..n)
        .step_by(CHUNK_SAMPLES)
        .map(|s| s..(s + CHUNK_SAMPLES).min(n))
        .take_while(|r| r.len() >= SAMPLE_RATE)
        .collect()
}

/// Codes of a recording of `n` samples: its length at 25 Hz, rounded half to even, the dropped
/// tail included.
pub fn code_frames(n: usize) -> usize {
    ((n * CODE_RATE) as f64 / SAMPLE_RATE as f64).round_ties_even() as usize
}

/// `t_in` frames of `dim` channels (time-major) resampled linearly onto `t_out`, half-pixel
/// aligned (torch's `interpolate(mode="linear", align_corners=False)`).
pub fn resample(feats: &[f32], t_in: usize, dim: usize, t_out: usize) -> Vec<f32> {
    assert_eq!(feats.len(), t_in * dim);
    let scale = t_in as f64 / t_out as f64;
    let mut out = Vec::with_capacity(t_out * dim);
    for t in 0..t_out {
        let src = ((t as f64 + 0.5) * scale - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(t_in - 1);
        let i1 = (i0 + 1).min(t_in - 1);
        let w = (src - i0 as f64) as f32;
        let (a, b) = (&feats[i0 * dim..(i0 + 1) * dim], &feats[i1 * dim..(i1 + 1) * dim]);
        out.extend(a.iter().zip(b).map(|(x, y)| (1.0 - w) * x + w * y));
    }
    out
}

/// Every channel standardised over the song in place: `(x - mean) / (sigma + 1e-5)`, the
/// population sigma, the sums in f64.
pub fn standardise(feats: &mut [f32], dim: usize) {
    let t = feats.len() / dim;
    for c in 0..dim {
        let mean = (0..t).map(|i| f64::from(feats[i * dim + c])).sum::<f64>() / t as f64;
        let var = (0..t).map(|i| (f64::from(feats[i * dim + c]) - mean).powi(2)).sum::<f64>() / t as f64;
        let inv = 1.0 / (var.sqrt() + 1e-5);
        for i in 0..t {
            let x = &mut feats[i * dim + c];
            *x = ((f64::from(*x) - mean) * inv) as f32;
        }
    }
}

/// One head window: the frames it reads (zero-padded to [`WINDOW`]) and the frames whose codes
/// it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub len: usize,
    pub keep: Range<usize>,
}

/// The head's windows over `t` frames: every [`HOP`] frames, then one pulled back to end at
/// the last frame if the grid stops short; each keeps its frames but the [`TRIM`] next to an
/// inner edge. Applied in order, a later window's frames overwrite an earlier one's.
pub fn windows(t: usize) -> Vec<Window> {
    let mut starts: Vec<usize> = (0..t.saturating_sub(WINDOW) + 1).step_by(HOP).collect();
    if starts.last().is_some_and(|&s| s + WINDOW < t) {
        starts.push(t - WINDOW);
    }
    starts
        .into_iter()
        .map(|s| {
            let len = WINDOW.min(t - s);
            let lo = if s == 0 { 0 } else { s + TRIM };
            let hi = if s + len >= t { t } else { s + len - TRIM };
            Window { start: s, len, keep: lo..hi }
        })
        .collect()
}

#[cfg(test)]
mod tests;
