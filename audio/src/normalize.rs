//! Percentile peak normalisation: the signal is scaled so that the `1 - peak_clip / 1e6`
//! quantile of |x| over every channel lands at full scale, and what lies above is clipped.
//! `peak_clip = 0` is plain peak normalisation (nothing clips). WAV32 output skips this.

/// Normalises in place; returns the gain applied. Silence is left untouched.
pub fn peak_normalize(data: &mut [f32], peak_clip: i64) -> f32 {
    if data.is_empty() {
        return 1.0;
    }
    let mut mags: Vec<f32> = data.iter().map(|x| if x.is_finite() { x.abs() } else { 0.0 }).collect();
    let q = 1.0 - (peak_clip.clamp(0, 1_000_000) as f64) / 1e6;
    let idx = ((q * mags.len() as f64).ceil() as usize).clamp(1, mags.len()) - 1;
    let (_, peak, _) = mags.select_nth_unstable_by(idx, |a, b| a.total_cmp(b));
    let peak = *peak;
    if peak <= 0.0 {
        return 1.0;
    }
    let gain = 1.0 / peak;
    for x in data.iter_mut() {
        *x = if x.is_finite() { (*x * gain).clamp(-1.0, 1.0) } else { 0.0 };
    }
    gain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_peak_at_zero_clip() {
        let mut v = vec![0.1, -0.25, 0.2, 0.05];
        let g = peak_normalize(&mut v, 0);
        assert_eq!(g, 4.0);
        assert_eq!(v, vec![0.4, -1.0, 0.8, 0.2]);
    }

    #[test]
    fn percentile_clips_the_outliers() {
        // 1e6 samples at 0.5 with 10 spikes at 4.0: peak_clip 10 ignores exactly the spikes.
        let mut v = vec![0.5f32; 1_000_000];
        for i in 0..10 {
            v[i * 1000] = 4.0;
        }
        let g = peak_normalize(&mut v, 10);
        assert_eq!(g, 2.0);
        assert_eq!(v[0], 1.0, "spikes clip at full scale");
        assert_eq!(v[1], 1.0);
        let mut w = vec![0.5f32; 1_000_000];
        w[0] = 4.0;
        w[1] = 4.0;
        assert_eq!(
            peak_normalize(&mut w, 1),
            0.25,
            "1 per million: only one spike may clip, so the peak is the second spike"
        );
    }

    #[test]
    fn silence_and_nan_are_safe() {
        let mut v = vec![0.0f32; 8];
        assert_eq!(peak_normalize(&mut v, 10), 1.0);
        let mut v = vec![f32::NAN, 0.5];
        peak_normalize(&mut v, 0);
        assert_eq!(v, vec![0.0, 1.0]);
    }
}
