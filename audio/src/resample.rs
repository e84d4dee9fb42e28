//! Sample-rate conversion with rubato's synchronous FFT resampler (fixed ratio, offline
//! quality). Used for uploads whose rate differs from what the consumer needs (48 kHz for
//! the VAE) and by `yued audio-convert`.
use crate::{AudioError, Pcm};
use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{Fft, FixedSync, Resampler};

/// The exact output length for `frames` input frames: the nearest whole frame. rubato's
/// own count rounds up (one extra frame for 44.1 <-> 48 kHz), so the result is trimmed.
pub fn resampled_len(frames: usize, from: u32, to: u32) -> usize {
    ((frames as u128 * to as u128 + from as u128 / 2) / from as u128) as usize
}

/// Resamples `pcm` to `rate`; a no-op copy when it is already there.
pub fn resample(pcm: &Pcm, rate: u32) -> Result<Pcm, AudioError> {
    if rate == 0 {
        return Err(AudioError::Format("resample: target rate 0".into()));
    }
    if pcm.sample_rate == rate {
        return Ok(pcm.clone());
    }
    if pcm.frames() == 0 {
        return Ok(Pcm::new(rate, pcm.channels, Vec::new()));
    }
    let err = |e: &dyn std::fmt::Display| AudioError::Format(format!("resample {} -> {rate} Hz: {e}", pcm.sample_rate));
    let (n, ch) = (pcm.frames(), pcm.channels);
    // rubato's FFT filter is centred on index fft_size_in / 2 while it trims
    // fft_size_out / 2 frames of delay: when the block holds an odd number of the
    // smallest whole-ratio blocks (7 x 147 for 44.1 -> 48 kHz) one of the halves is
    // fractional and the output lands half a sample early or late. An even count of
    // blocks keeps both halves whole and the output aligned with the input.
    let (from, to) = (pcm.sample_rate as usize, rate as usize);
    let min_in = from / gcd(from, to);
    let chunk = 2 * min_in * 1024usize.div_ceil(2 * min_in).max(1);
    let mut rs = Fft::<f32>::new(from, to, chunk, ch, FixedSync::Both).map_err(|e| err(&e))?;
    let input = SequentialSlice::new(&pcm.data, ch, n).map_err(|e| err(&e))?;
    let cap = rs.process_all_needed_output_len(n);
    let mut out = vec![0f32; cap * ch];
    let mut output = SequentialSlice::new_mut(&mut out, ch, cap).map_err(|e| err(&e))?;
    let (_, produced) = rs.process_all_into_buffer(&input, &mut output, n, None).map_err(|e| err(&e))?;
    let want = resampled_len(n, pcm.sample_rate, rate).min(produced);
    let mut planar = Vec::with_capacity(want * ch);
    for c in 0..ch {
        planar.extend_from_slice(&out[c * cap..c * cap + want]);
    }
    Ok(Pcm::new(rate, ch, planar))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Mixes or duplicates channels to `channels` (mono <-> stereo; more channels are
/// averaged down to mono first).
pub fn to_channels(pcm: &Pcm, channels: usize) -> Pcm {
    if pcm.channels == channels {
        return pcm.clone();
    }
    let n = pcm.frames();
    let mono: Vec<f32> = if pcm.channels == 1 { pcm.data.clone() } else { (0..n).map(|i| (0..pcm.channels).map(|c| pcm.data[c * n + i]).sum::<f32>() / pcm.channels as f32).collect() };
    let mut data = Vec::with_capacity(n * channels);
    for _ in 0..channels {
        data.extend_from_slice(&mono);
    }
    Pcm::new(pcm.sample_rate, channels, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(rate: u32, n: usize, hz: f32) -> Pcm {
        let v: Vec<f32> = (0..2 * n).map(|k| (2.0 * std::f32::consts::PI * hz * (k % n) as f32 / rate as f32).sin() * 0.5).collect();
        Pcm::new(rate, 2, v)
    }

    #[test]
    fn lengths_are_exact_and_the_tone_survives() {
        for (from, to, n) in [(44_100, 48_000, 44_100 + 77), (48_000, 44_100, 48_000 * 2 + 5), (16_000, 48_000, 16_001), (48_000, 48_000, 10_000), (22_050, 48_000, 30_000)] {
            let src = tone(from, n, 440.0);
            let out = resample(&src, to).unwrap();
            assert_eq!(out.frames(), resampled_len(n, from, to), "{from}->{to}");
            assert_eq!(out.sample_rate, to);
            // Compare with the analytic tone at the new rate, away from the edges.
            let want = tone(to, out.frames(), 440.0);
            let (a, b) = (&out.channel(1)[2000..out.frames() - 2000], &want.channel(1)[2000..out.frames() - 2000]);
            let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            // Half a sample of misalignment would be ~1.4e-2 for this tone.
            assert!(err < 2e-3, "{from}->{to}: max error {err}");
        }
    }

    #[test]
    fn channel_mapping() {
        let m = Pcm::new(8000, 1, vec![0.25; 10]);
        let s = to_channels(&m, 2);
        assert_eq!(s.channels, 2);
        assert_eq!(s.channel(1), &[0.25; 10]);
        let s2 = Pcm::new(8000, 2, [vec![1.0; 4], vec![0.0; 4]].concat());
        assert_eq!(to_channels(&s2, 1).data, vec![0.5; 4]);
    }
}
