//! The host side of the tokenizer's pipeline, around the two graphs (MERT per chunk, the head
//! per window): which samples each MERT chunk reads, how its states land on the code grid,
//! and which frames each head window decides.
use std::ops::Range;

/// MERT's input rate.
pub const SAMPLE_RATE: usize = 24_000;

/// The tokenizer's grid, from its head's configuration: the MERT chunk, the code rate, the
/// head's window (its hop is half of it, its trimmed inner edges a quarter) and the epsilon on
/// each channel's sigma. [`Grid::PUBLISHED`] is the v9 head's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grid {
    pub chunk_samples: usize,
    pub frame_rate: usize,
    pub window: usize,
    pub eps: f32,
}

impl Grid {
    /// 30 s chunks, 25 codes a second, 512-frame windows, 1e-5.
    pub const PUBLISHED: Grid = Grid { chunk_samples: 30 * SAMPLE_RATE, frame_rate: 25, window: 512, eps: 1e-5 };

    pub fn hop(&self) -> usize {
        self.window / 2
    }

    pub fn trim(&self) -> usize {
        self.window / 4
    }

    /// The MERT chunks of a recording of `n` samples: `chunk_samples` each, a final tail under
    /// 1 s dropped.
    pub fn chunks(&self, n: usize) -> Vec<Range<usize>> {
        (0..n)
            .step_by(self.chunk_samples)
            .map(|s| s..(s + self.chunk_samples).min(n))
            .take_while(|r| r.len() >= SAMPLE_RATE)
            .collect()
    }

    /// Codes of a recording of `n` samples: its length at the frame rate, rounded half to
    /// even, the dropped tail included.
    pub fn code_frames(&self, n: usize) -> usize {
        ((n * self.frame_rate) as f64 / SAMPLE_RATE as f64).round_ties_even() as usize
    }

    /// The head's windows over `t` frames: every [`Grid::hop`] frames, then one pulled back to
    /// end at the last frame if the grid stops short; each keeps its frames but the
    /// [`Grid::trim`] next to an inner edge. Applied in order, a later window's frames
    /// overwrite an earlier one's.
    pub fn windows(&self, t: usize) -> Vec<Window> {
        let (w, trim) = (self.window, self.trim());
        let mut starts: Vec<usize> = (0..t.saturating_sub(w) + 1).step_by(self.hop()).collect();
        if starts.last().is_some_and(|&s| s + w < t) {
            starts.push(t - w);
        }
        starts
            .into_iter()
            .map(|s| {
                let len = w.min(t - s);
                let lo = if s == 0 { 0 } else { s + trim };
                let hi = if s + len >= t { t } else { s + len - trim };
                Window { start: s, len, keep: lo..hi }
            })
            .collect()
    }

    /// Every channel standardised over the song in place: `(x - mean) / (sigma + eps)`, the
    /// population sigma, the sums in f64.
    pub fn standardise(&self, feats: &mut [f32], dim: usize) {
        let t = feats.len() / dim;
        for c in 0..dim {
            let mean = (0..t).map(|i| f64::from(feats[i * dim + c])).sum::<f64>() / t as f64;
            let var = (0..t).map(|i| (f64::from(feats[i * dim + c]) - mean).powi(2)).sum::<f64>() / t as f64;
            let inv = 1.0 / (var.sqrt() + f64::from(self.eps));
            for i in 0..t {
                let x = &mut feats[i * dim + c];
                *x = ((f64::from(*x) - mean) * inv) as f32;
            }
        }
    }
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

/// One head window: the frames it reads (zero-padded to the window) and the frames whose codes
/// it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub len: usize,
    pub keep: Range<usize>,
}

#[cfg(test)]
mod tests;
