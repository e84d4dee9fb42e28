//! MERT's log-mel front end, on the host: a centred STFT (the signal reflect-padded by
//! `n_fft / 2`, the edge sample not repeated), each frame times the checkpoint's window, the
//! power spectrum through the checkpoint's filterbank (summed in f64), `10 log10(max(x,
//! 1e-10))`, the last centred frame dropped, and each bin normalised by the checkpoint's
//! statistics, `(x - mean) / max(std, 1e-5)`.
use realfft::RealFftPlanner;

/// The front end's tensors and sizes, as the checkpoint ships them.
pub struct MelFrontend {
    pub n_fft: usize,
    pub hop: usize,
    /// `n_fft` values.
    pub window: Vec<f32>,
    /// `[n_fft / 2 + 1, mels]`, bin-major.
    pub filterbank: Vec<f32>,
    /// `mels` values each.
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl MelFrontend {
    pub fn mels(&self) -> usize {
        self.mean.len()
    }

    /// Frames of a signal of `n` samples: torch's centred count less the dropped last one.
    pub fn frames(&self, n: usize) -> usize {
        n / self.hop
    }

    /// The normalised log-mel spectrogram of `mono` (24 kHz), time-major `[frames, mels]`.
    /// The signal must be longer than `n_fft / 2` (one reflection of padding).
    pub fn log_mel(&self, mono: &[f32]) -> Vec<f32> {
        let (n_fft, mels) = (self.n_fft, self.mels());
        let half = n_fft / 2;
        assert!(mono.len() > half, "a signal of {} samples is too short for n_fft {n_fft}", mono.len());
        let bins = half + 1;
        assert_eq!(self.filterbank.len(), bins * mels, "filterbank of {bins} bins x {mels} mels");
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
        let mut frame = fft.make_input_vec();
        let mut spec = fft.make_output_vec();
        let n = mono.len() as isize;
        // Sample `i` of the padded signal: a single reflection either side.
        let at = |i: isize| -> f32 {
            let j = if i < 0 {
                -i
            } else if i >= n {
                2 * (n - 1) - i
            } else {
                i
            };
            mono[j as usize]
        };
        // Each mel's nonzero bins: the zeros outside them add nothing to its sum.
        let spans: Vec<std::ops::Range<usize>> = (0..mels)
            .map(|m| {
                let nonzero = |b: &usize| self.filterbank[b * mels + m] != 0.0;
                let lo = (0..bins).find(nonzero).unwrap_or(0);
                let hi = (0..bins).rev().find(nonzero).map_or(lo, |b| b + 1);
                lo..hi
            })
            .collect();
        let frames = self.frames(mono.len());
        let mut out = Vec::with_capacity(frames * mels);
        let mut power = vec![0f64; bins];
        for f in 0..frames {
            let start = (f * self.hop) as isize - half as isize;
            for (k, x) in frame.iter_mut().enumerate() {
                *x = at(start + k as isize) * self.window[k];
            }
            fft.process(&mut frame, &mut spec).expect("buffers sized by the plan");
            for (p, c) in power.iter_mut().zip(&spec) {
                *p = f64::from(c.re * c.re + c.im * c.im);
            }
            for (m, span) in spans.iter().enumerate() {
                let acc: f64 = span.clone().map(|b| power[b] * f64::from(self.filterbank[b * mels + m])).sum();
                let db = 10.0 * (acc.max(1e-10) as f32).log10();
                out.push((db - self.mean[m]) / self.std[m].max(1e-5));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
