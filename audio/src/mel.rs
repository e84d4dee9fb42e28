//! Log-mel spectrograms, to compare two renders of the same song (the solver benchmark's
//! mel correlation): a Hann-windowed STFT ([`realfft`]), its power spectrum through a
//! triangular filterbank on the HTK mel scale, then `10 log10(max(x, 1e-10))`.

/// The log-mel spectrogram of `mono` at `rate` Hz: `n_mels` values a frame, frames `hop`
/// samples apart (frame k covers `k hop .. k hop + n_fft`; a signal shorter than one
/// window gives no frame).
pub fn log_mel(mono: &[f32], rate: u32, n_fft: usize, hop: usize, n_mels: usize) -> Vec<f32> {
    assert!(n_fft >= 2 && hop >= 1 && n_mels >= 1, "an STFT needs a window, a hop and a band");
    let fft = realfft::RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
    let window: Vec<f32> =
        (0..n_fft).map(|i| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * i as f32 / n_fft as f32).cos()).collect();
    let bank = filterbank(rate, n_fft, n_mels);
    let (mut input, mut spectrum) = (fft.make_input_vec(), fft.make_output_vec());
    let mut out = Vec::new();
    let mut start = 0;
    while start + n_fft <= mono.len() {
        for (x, (s, w)) in input.iter_mut().zip(mono[start..start + n_fft].iter().zip(&window)) {
            *x = s * w;
        }
        fft.process(&mut input, &mut spectrum).expect("the planner's own buffers");
        let power: Vec<f32> = spectrum.iter().map(|c| c.norm_sqr()).collect();
        for band in &bank {
            let e: f32 = band.iter().map(|&(bin, w)| w * power[bin]).sum();
            out.push(10.0 * e.max(1e-10).log10());
        }
        start += hop;
    }
    out
}

fn hz_to_mel(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

fn mel_to_hz(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// Each band's (bin, weight) pairs: triangles evenly spaced in mel from 0 to Nyquist.
fn filterbank(rate: u32, n_fft: usize, n_mels: usize) -> Vec<Vec<(usize, f32)>> {
    let nyquist = rate as f64 / 2.0;
    let edges: Vec<f64> =
        (0..n_mels + 2).map(|i| mel_to_hz(hz_to_mel(nyquist) * i as f64 / (n_mels + 1) as f64)).collect();
    let bin_hz = rate as f64 / n_fft as f64;
    (0..n_mels)
        .map(|m| {
            let (lo, mid, hi) = (edges[m], edges[m + 1], edges[m + 2]);
            (0..=n_fft / 2)
                .filter_map(|b| {
                    let f = b as f64 * bin_hz;
                    let w = if f > lo && f <= mid {
                        (f - lo) / (mid - lo)
                    } else if f > mid && f < hi {
                        (hi - f) / (hi - mid)
                    } else {
                        0.0
                    };
                    (w > 0.0).then_some((b, w as f32))
                })
                .collect()
        })
        .collect()
}

/// Pearson's correlation of two equally long series (1 for identical ones, 0 when either
/// is constant).
pub fn correlation(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "series of one length");
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().map(|&x| x as f64).sum::<f64>() / n, b.iter().map(|&x| x as f64).sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    if saa == 0.0 || sbb == 0.0 {
        0.0
    } else {
        sab / (saa * sbb).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(hz: f32, rate: u32, n: usize) -> Vec<f32> {
        (0..n).map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin()).collect()
    }

    /// A tone's energy lies in the band whose triangle holds its frequency; frames are
    /// `hop` apart over whole windows.
    #[test]
    fn a_tone_lights_its_own_band() {
        let (rate, n_fft, hop, n_mels) = (16_000, 1024, 256, 40);
        let x = tone(1000.0, rate, 4096);
        let m = log_mel(&x, rate, n_fft, hop, n_mels);
        assert_eq!(m.len(), ((4096 - n_fft) / hop + 1) * n_mels);
        let frame = &m[..n_mels];
        let loudest = (0..n_mels).max_by(|&i, &j| frame[i].total_cmp(&frame[j])).unwrap();
        let centre = |b: usize| mel_to_hz(hz_to_mel(8000.0) * (b + 1) as f64 / (n_mels + 1) as f64);
        let nearest = (0..n_mels).min_by(|&i, &j| (centre(i) - 1000.0).abs().total_cmp(&(centre(j) - 1000.0).abs()));
        assert_eq!(Some(loudest), nearest);
        assert!(log_mel(&x[..100], rate, n_fft, hop, n_mels).is_empty());
        assert!((hz_to_mel(mel_to_hz(1234.5)) - 1234.5).abs() < 1e-9);
    }

    #[test]
    fn correlation_is_one_for_a_copy_and_falls_for_another_sound() {
        let (rate, n) = (16_000, 8192);
        let a = log_mel(&tone(440.0, rate, n), rate, 1024, 256, 40);
        assert!((correlation(&a, &a) - 1.0).abs() < 1e-12);
        let louder: Vec<f32> = tone(440.0, rate, n).iter().map(|x| 0.5 * x).collect();
        // A gain is an offset in dB: the shape, and the correlation, stay.
        assert!(correlation(&a, &log_mel(&louder, rate, 1024, 256, 40)) > 0.999);
        let other = log_mel(&tone(3000.0, rate, n), rate, 1024, 256, 40);
        assert!(correlation(&a, &other) < 0.9);
        assert_eq!(correlation(&[1.0, 1.0], &[0.0, 2.0]), 0.0);
    }
}
