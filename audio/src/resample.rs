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

/// A resampler for a stream that arrives in pieces (a song's tiles): the pieces' outputs
/// concatenate to the resampling of the whole, with no seam at their boundaries, and
/// [`StreamResampler::finish`] brings the total to [`resampled_len`] of the input.
pub struct StreamResampler {
    rs: Fft<f32>,
    channels: usize,
    from: u32,
    to: u32,
    /// Input frames waiting for a whole chunk, planar.
    pending: Vec<Vec<f32>>,
    /// Output frames still to drop (the filter's delay).
    delay: usize,
    input_total: u64,
    output_total: u64,
}

impl StreamResampler {
    pub fn new(from: u32, to: u32, channels: usize) -> Result<Self, AudioError> {
        let (f, t) = (from as usize, to as usize);
        let min_in = f / gcd(f, t);
        let chunk = 2 * min_in * 1024usize.div_ceil(2 * min_in).max(1);
        let rs = Fft::<f32>::new(f, t, chunk, channels, FixedSync::Input)
            .map_err(|e| AudioError::Format(format!("resample {from} -> {to} Hz: {e}")))?;
        let delay = rs.output_delay();
        Ok(StreamResampler {
            rs,
            channels,
            from,
            to,
            pending: vec![Vec::new(); channels],
            delay,
            input_total: 0,
            output_total: 0,
        })
    }

    /// Resamples what whole chunks of the input allow; returns planar output (maybe empty).
    pub fn push(&mut self, planar: &[f32]) -> Result<Vec<f32>, AudioError> {
        let n = planar.len() / self.channels.max(1);
        for (c, p) in self.pending.iter_mut().enumerate() {
            p.extend_from_slice(&planar[c * n..(c + 1) * n]);
        }
        self.input_total += n as u64;
        self.drain(false)
    }

    /// The rest of the stream: pads the last chunk with silence and trims the output to
    /// the exact length of the whole.
    pub fn finish(mut self) -> Result<Vec<f32>, AudioError> {
        self.drain(true)
    }

    fn drain(&mut self, last: bool) -> Result<Vec<f32>, AudioError> {
        let err =
            |e: &dyn std::fmt::Display| AudioError::Format(format!("resample {} -> {} Hz: {e}", self.from, self.to));
        let want_total = resampled_len(self.input_total as usize, self.from, self.to) as u64;
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); self.channels];
        loop {
            let need = self.rs.input_frames_next();
            let have = self.pending[0].len();
            if have < need && !(last && self.output_total < want_total) {
                break;
            }
            let mut chunk = vec![0f32; need * self.channels];
            let take = have.min(need);
            for (c, p) in self.pending.iter_mut().enumerate() {
                chunk[c * need..c * need + take].copy_from_slice(&p[..take]);
                p.drain(..take);
            }
            let cap = self.rs.output_frames_next();
            let mut buf = vec![0f32; cap * self.channels];
            let input = SequentialSlice::new(&chunk, self.channels, need).map_err(|e| err(&e))?;
            let mut output = SequentialSlice::new_mut(&mut buf, self.channels, cap).map_err(|e| err(&e))?;
            let (_, produced) = self.rs.process_into_buffer(&input, &mut output, None).map_err(|e| err(&e))?;
            let skip = self.delay.min(produced);
            self.delay -= skip;
            let mut keep = produced - skip;
            if last {
                keep = keep.min((want_total - self.output_total) as usize);
            }
            for (c, o) in out.iter_mut().enumerate() {
                o.extend_from_slice(&buf[c * cap + skip..c * cap + skip + keep]);
            }
            self.output_total += keep as u64;
        }
        Ok(out.concat())
    }
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
    let mono: Vec<f32> = if pcm.channels == 1 {
        pcm.data.clone()
    } else {
        (0..n).map(|i| (0..pcm.channels).map(|c| pcm.data[c * n + i]).sum::<f32>() / pcm.channels as f32).collect()
    };
    let mut data = Vec::with_capacity(n * channels);
    for _ in 0..channels {
        data.extend_from_slice(&mono);
    }
    Pcm::new(pcm.sample_rate, channels, data)
}

/// A recording averaged to mono and resampled to `rate`: what the listening tools read.
pub fn mono_at(pcm: &Pcm, rate: u32) -> Result<Vec<f32>, AudioError> {
    Ok(resample(&to_channels(pcm, 1), rate)?.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_in_pieces_resamples_as_the_whole() {
        let n = 44_100 + 333;
        let planar: Vec<f32> =
            (0..2 * n).map(|i| ((i % n) as f32 * 0.01).sin() * if i < n { 1.0 } else { 0.5 }).collect();
        let whole = resample(&Pcm::new(44_100, 2, planar.clone()), 48_000).unwrap();
        let mut s = StreamResampler::new(44_100, 48_000, 2).unwrap();
        let mut parts: Vec<Vec<f32>> = Vec::new();
        let mut at = 0;
        for len in [1000, 5000, 17, 30_000, n - 36_017] {
            let piece: Vec<f32> = planar[at..at + len].iter().chain(&planar[n + at..n + at + len]).copied().collect();
            parts.push(s.push(&piece).unwrap());
            at += len;
        }
        parts.push(s.finish().unwrap());
        // Planar pieces: gather each channel.
        let m = whole.frames();
        let mut left = Vec::new();
        let mut right = Vec::new();
        for p in &parts {
            let k = p.len() / 2;
            left.extend_from_slice(&p[..k]);
            right.extend_from_slice(&p[k..]);
        }
        assert_eq!(left.len(), m, "the exact length of the whole");
        // Everywhere but the last filter length (the two pad the end of the signal differently).
        let k = m - 2048;
        let err = left[..k]
            .iter()
            .zip(&whole.data[..k])
            .chain(right[..k].iter().zip(&whole.data[m..m + k]))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-3, "pieces differ from the whole by {err}");
    }

    fn tone(rate: u32, n: usize, hz: f32) -> Pcm {
        let v: Vec<f32> =
            (0..2 * n).map(|k| (2.0 * std::f32::consts::PI * hz * (k % n) as f32 / rate as f32).sin() * 0.5).collect();
        Pcm::new(rate, 2, v)
    }

    #[test]
    fn lengths_are_exact_and_the_tone_survives() {
        for (from, to, n) in [
            (44_100, 48_000, 44_100 + 77),
            (48_000, 44_100, 48_000 * 2 + 5),
            (16_000, 48_000, 16_001),
            (48_000, 48_000, 10_000),
            (22_050, 48_000, 30_000),
        ] {
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
