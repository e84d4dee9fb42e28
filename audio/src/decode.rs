//! Decoding uploads: WAV, MP3, FLAC, Ogg Vorbis, AAC/M4A through symphonia, Ogg Opus
//! through libopus; any rate and channel count comes out as planar f32. A file that does
//! not decode is an error, never a panic.
use crate::ogg_opus::ogg_opus_blocks;
use crate::{AudioError, Blocks, Pcm};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::DecoderOptions;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// The sample rates an upload may have, in Hz.
pub const RATES: std::ops::RangeInclusive<u32> = 8_000..=768_000;
/// The most channels an upload may have (7.1).
pub const MAX_CHANNELS: usize = 8;

/// Decodes a whole file held in memory. A header that declares a rate outside [`RATES`] or
/// more than [`MAX_CHANNELS`] channels is refused, and a decoder that panics on a malformed
/// file (symphonia does on some) is an error like any other.
pub fn decode(bytes: &[u8]) -> Result<Pcm, AudioError> {
    let mut inter = Vec::new();
    let b = blocks(bytes, None, &mut |s| inter.extend_from_slice(s))?;
    checked(Pcm::new(b.rate, b.channels, b.planar(&inter)))
}

/// A recording's length, as a check before a job needs it (see [`measure`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Length {
    /// It lasts `seconds`, at `sample_rate` with `channels`.
    Whole { seconds: f64, sample_rate: u32, channels: usize },
    /// It lasts longer than the bound it was measured against: decoding stopped there.
    Over,
}

/// Decodes `bytes` only to measure them, one packet held at a time, and stops once past
/// `max_seconds` (or at once, when the container declares a longer length): a small file
/// that decodes to hours costs neither the memory nor the time of its samples. What does
/// not decode is an error, as in [`decode`].
pub fn measure(bytes: &[u8], max_seconds: f64) -> Result<Length, AudioError> {
    let b = blocks(bytes, Some(max_seconds), &mut |_| {})?;
    if b.over {
        return Ok(Length::Over);
    }
    checked(Pcm::new(b.rate, b.channels, Vec::new()))?;
    let seconds = b.frames as f64 / f64::from(b.rate);
    Ok(if seconds > max_seconds {
        Length::Over
    } else {
        Length::Whole { seconds, sample_rate: b.rate, channels: b.channels }
    })
}

fn checked(pcm: Pcm) -> Result<Pcm, AudioError> {
    if !RATES.contains(&pcm.sample_rate) {
        return Err(AudioError::Format(format!(
            "a sample rate of {} Hz is outside {}..={} Hz",
            pcm.sample_rate,
            RATES.start(),
            RATES.end()
        )));
    }
    if pcm.channels == 0 || pcm.channels > MAX_CHANNELS {
        return Err(AudioError::Format(format!("{} channels (1 to {MAX_CHANNELS} are decoded)", pcm.channels)));
    }
    Ok(pcm)
}

/// Decodes `bytes` block by block, each block's interleaved samples to `each`, stopping
/// past `max_seconds` when given. Ogg Opus goes to libopus, the rest to symphonia (its panics
/// on malformed files caught).
fn blocks(bytes: &[u8], max_seconds: Option<f64>, each: &mut dyn FnMut(&[f32])) -> Result<Blocks, AudioError> {
    if bytes.len() >= 36 && bytes.starts_with(b"OggS") && bytes[28..36] == *b"OpusHead" {
        return ogg_opus_blocks(bytes, max_seconds, each);
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| symphonia_blocks(bytes, max_seconds, each))) {
        Ok(r) => r,
        Err(_) => Err(AudioError::Format("the file does not decode: the decoder failed on a malformed file".into())),
    }
}

fn symphonia_blocks(
    bytes: &[u8],
    max_seconds: Option<f64>,
    each: &mut dyn FnMut(&[f32]),
) -> Result<Blocks, AudioError> {
    let bad = |e: &dyn std::fmt::Display| AudioError::Format(format!("the file does not decode: {e}"));
    if bytes.is_empty() {
        return Err(AudioError::Format("the file is empty (0 bytes)".into()));
    }
    let mss = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes.to_vec())), Default::default());
    let opts = FormatOptions { enable_gapless: true, ..Default::default() };
    let probed = symphonia::default::get_probe()
        .format(&Hint::new(), mss, &opts, &MetadataOptions::default())
        .map_err(|e| match e {
            symphonia::core::errors::Error::Unsupported(_) | symphonia::core::errors::Error::IoError(_) => {
                AudioError::Format(format!(
                    "the file does not decode: not audio in a container this daemon reads ({} bytes; WAV, \
                     FLAC, MP3, Ogg Vorbis/Opus, AAC/M4A are)",
                    bytes.len()
                ))
            }
            e => bad(&e),
        })?;
    let mut format = probed.format;
    let track =
        format.default_track().ok_or_else(|| AudioError::Format("the file does not decode: no audio track".into()))?;
    let track_id = track.id;
    let rate = track
        .codec_params
        .sample_rate
        .ok_or_else(|| AudioError::Format("the file does not decode: unknown sample rate".into()))?;
    if !RATES.contains(&rate) {
        return Err(AudioError::Format(format!(
            "a sample rate of {rate} Hz is outside {}..={} Hz",
            RATES.start(),
            RATES.end()
        )));
    }
    if track.codec_params.channels.is_some_and(|c| c.count() > MAX_CHANNELS) {
        return Err(AudioError::Format(format!("more than {MAX_CHANNELS} channels")));
    }
    let mut dec =
        symphonia::default::get_codecs().make(&track.codec_params, &DecoderOptions::default()).map_err(|e| bad(&e))?;
    let mut channels = track.codec_params.channels.map(|c| c.count()).unwrap_or(0);
    // The container's sample count, when it has one (FLAC's STREAMINFO, WAV's data size): the
    // last block may be padded. A count the bytes cannot hold is the "unknown size" of a
    // stream written to a pipe (ffmpeg's, sox's WAV: sizes of 0xFFFFFFFF): not a count.
    let declared = track.codec_params.n_frames.filter(|&d| {
        let p = &track.codec_params;
        match (p.bits_per_coded_sample, p.channels) {
            (Some(bits), Some(ch)) => d.saturating_mul(u64::from(bits) * ch.count() as u64) / 8 <= bytes.len() as u64,
            _ => true,
        }
    });
    let limit = Blocks::limit(max_seconds, rate);
    if let (Some(limit), Some(d)) = (limit, declared) {
        if d > limit {
            return Ok(Blocks { rate, channels, skip: 0, frames: 0, over: true });
        }
    }
    let mut total = 0u64;
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(symphonia::core::errors::Error::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(symphonia::core::errors::Error::ResetRequired) => break,
            Err(e) => return Err(bad(&e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        match dec.decode(&packet) {
            Ok(buf) => {
                let spec = *buf.spec();
                channels = spec.channels.count();
                total += buf.frames() as u64;
                let mut sb = SampleBuffer::<f32>::new(buf.capacity() as u64, spec);
                sb.copy_interleaved_ref(buf);
                each(sb.samples());
            }
            Err(symphonia::core::errors::Error::DecodeError(_)) => continue,
            Err(e) => return Err(bad(&e)),
        }
        if limit.is_some_and(|l| total > l) {
            return Ok(Blocks { rate, channels, skip: 0, frames: 0, over: true });
        }
    }
    if channels == 0 || total == 0 {
        return Err(AudioError::Format("the file does not decode: no samples".into()));
    }
    let mut n = total as usize;
    if let Some(d) = declared {
        n = n.min(d as usize);
    }
    // An MP4 edit list (our M4A writer's, Apple's, ffmpeg's) hides the AAC encoder priming
    // and the padding of the last frame.
    let mut skip = 0;
    if bytes.len() > 8 && &bytes[4..8] == b"ftyp" {
        if let Some((s, keep)) = crate::aac::mp4_edit(bytes, rate) {
            skip = s.min(n);
            n = (n - skip).min(keep);
        }
    }
    Ok(Blocks { rate, channels, skip, frames: n, over: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::encode;
    use yued_protocol::OutputFormat;

    fn sweep(n: usize) -> Pcm {
        let mut v = Vec::with_capacity(2 * n);
        for c in 0..2 {
            for i in 0..n {
                let t = i as f32 / 48000.0;
                v.push(0.5 * (2.0 * std::f32::consts::PI * (200.0 + 300.0 * t + 40.0 * c as f32) * t).sin());
            }
        }
        Pcm::new(48000, 2, v)
    }

    /// Best correlation of `a` against `b` over small shifts (codec delays).
    fn corr(a: &[f32], b: &[f32], max_shift: usize) -> f64 {
        (0..=max_shift)
            .map(|s| {
                let n = a.len().min(b.len().saturating_sub(s));
                let (x, y) = (&a[..n], &b[s..s + n]);
                let dot: f64 = x.iter().zip(y).map(|(p, q)| (*p as f64) * (*q as f64)).sum();
                let nx: f64 = x.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
                let ny: f64 = y.iter().map(|q| (*q as f64).powi(2)).sum::<f64>().sqrt();
                dot / (nx * ny)
            })
            .fold(f64::MIN, f64::max)
    }

    #[test]
    fn every_encoder_round_trips() {
        let src = sweep(48000 * 2 + 777);
        for (f, min_corr, exact_len) in [
            (OutputFormat::Wav16, 0.999, true),
            (OutputFormat::Wav24, 0.999, true),
            (OutputFormat::Wav32, 0.9999, true),
            (OutputFormat::Flac, 0.999, true),
            (OutputFormat::Opus, 0.95, true),
            (OutputFormat::Mp3, 0.95, false),
            (OutputFormat::Ogg, 0.95, true),
            (OutputFormat::M4a, 0.95, true),
        ] {
            let bytes = encode(&src, f, 192).unwrap_or_else(|e| panic!("{f:?}: {e}"));
            let back = decode(&bytes).unwrap_or_else(|e| panic!("{f:?}: {e}"));
            assert_eq!(back.sample_rate, 48000, "{f:?}");
            assert_eq!(back.channels, 2, "{f:?}");
            if exact_len {
                assert_eq!(back.frames(), src.frames(), "{f:?} length");
            } else {
                // MP3: LAME's tag lets the decoder trim delay and padding to within a frame.
                assert!(back.frames().abs_diff(src.frames()) <= 1152, "{f:?}: {} vs {}", back.frames(), src.frames());
            }
            // Measured without keeping the samples: the same length, and over a shorter bound.
            let secs = back.frames() as f64 / 48000.0;
            let whole = Length::Whole { seconds: secs, sample_rate: 48000, channels: 2 };
            assert_eq!(measure(&bytes, 10.0).unwrap(), whole, "{f:?}");
            assert_eq!(measure(&bytes, secs).unwrap(), whole, "{f:?}: a bound of exactly its length");
            assert_eq!(measure(&bytes, 0.5).unwrap(), Length::Over, "{f:?}");
            let window = 24000.min(back.frames() - 3000);
            let shifts = if exact_len { 0 } else { 2500 };
            let c = corr(&src.channel(0)[4800..4800 + window], &back.channel(0)[4800..], shifts);
            assert!(c > min_corr, "{f:?}: correlation {c}");
        }
    }

    /// MP3 of whole songs at MiniMax's 44.1 kHz and YuE2's 48 kHz (and a lower rate, whose
    /// frames hold fewer samples), mono and stereo, at the bitrates' ends: every one encodes
    /// (LAME fails a call whose output would overrun the room it is given) and decodes at its
    /// rate: to its exact length where a LAME tag says the delay and padding (above 48 kb/s),
    /// else to within two frames.
    #[test]
    fn mp3_encodes_whole_songs_at_each_rate_and_bitrate() {
        for (rate, channels) in [(44100, 2), (48000, 2), (22050, 1), (44100, 1)] {
            let n = rate as usize * 40;
            let mut state = 1u64;
            let v: Vec<f32> = (0..n * channels)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1.8
                })
                .collect();
            let noise = Pcm::new(rate, channels, v);
            for kbps in [32, 128, 320] {
                let what = format!("{rate} Hz, {channels} ch, {kbps} kb/s");
                let bytes = encode(&noise, OutputFormat::Mp3, kbps).unwrap_or_else(|e| panic!("{what}: {e}"));
                let back = decode(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(back.channels, channels, "{what}");
                if rate != 22050 || kbps > 32 {
                    assert_eq!(back.sample_rate, rate, "{what}");
                }
                if kbps > 48 && rate != 22050 {
                    assert_eq!(back.frames(), n, "{what}: the LAME tag gives the exact length");
                }
                let secs = back.frames() as f64 / f64::from(back.sample_rate);
                assert!((secs - 40.0).abs() <= 2304.0 / f64::from(back.sample_rate), "{what}: {secs} s of 40");
            }
        }
    }

    /// Raw ADTS carries no length: the decoded stream starts with the FDK encoder's 2048
    /// frames of priming and ends on a whole AAC frame (M4A's edit list hides both).
    #[test]
    fn adts_plays_priming_then_the_signal() {
        let src = sweep(48000 + 100);
        let bytes = encode(&src, OutputFormat::Aac, 192).unwrap();
        let mut adts_frames = 0;
        let mut at = 0;
        while at + 7 <= bytes.len() {
            assert_eq!((bytes[at], bytes[at + 1] & 0xf6), (0xff, 0xf0), "ADTS sync at {at}");
            let len =
                ((bytes[at + 3] as usize & 3) << 11) | ((bytes[at + 4] as usize) << 3) | (bytes[at + 5] as usize >> 5);
            at += len;
            adts_frames += 1;
        }
        let back = decode(&bytes).unwrap();
        assert_eq!((back.sample_rate, back.channels), (48000, 2));
        // Every sample leaves the encoder: whole frames covering priming + signal.
        assert_eq!(adts_frames, (src.frames() + 2048).div_ceil(1024));
        // symphonia's ADTS reader sometimes drops the final frame at end of file.
        assert!(
            back.frames().abs_diff(adts_frames * 1024) <= 1024,
            "{} decoded of {adts_frames} frames",
            back.frames()
        );
        let c = corr(&src.channel(1)[4800..28800], &back.channel(1)[4800 + 2048..], 0);
        assert!(c > 0.95, "aligned at 2048: {c}");
    }

    /// A WAV written to a pipe (ffmpeg's `-f wav -`, sox's `-t wav -`) declares sizes of
    /// 0xFFFFFFFF: it is measured by what it holds (it was refused as over every bound).
    #[test]
    fn a_wav_of_unknown_size_is_measured_by_its_samples() {
        let src = sweep(48000 * 3);
        let mut bytes = encode(&src, OutputFormat::Wav16, 128).unwrap();
        let data = bytes.windows(4).position(|w| w == b"data").unwrap();
        bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        bytes[data + 4..data + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let whole = Length::Whole { seconds: 3.0, sample_rate: 48000, channels: 2 };
        assert_eq!(measure(&bytes, 900.0).unwrap(), whole);
        assert_eq!(decode(&bytes).unwrap().frames(), src.frames());
    }

    /// An empty file and one that is no audio say so.
    #[test]
    fn an_empty_or_foreign_file_says_what_it_is() {
        let e = decode(b"").unwrap_err().to_string();
        assert!(e.contains("empty (0 bytes)"), "{e}");
        let e = decode(b"hello, this is text and no audio at all").unwrap_err().to_string();
        assert!(e.contains("not audio in a container"), "{e}");
    }

    #[test]
    fn garbage_and_truncated_files_are_errors_not_panics() {
        let good = encode(&sweep(4800), OutputFormat::Flac, 128).unwrap();
        let mut state = 7u64;
        for cut in [0, 1, 4, 20, 44, 100, good.len() / 2] {
            let _ = decode(&good[..cut.min(good.len())]);
        }
        // Every container we write, cut anywhere and with a flipped byte.
        for f in [OutputFormat::M4a, OutputFormat::Aac, OutputFormat::Ogg, OutputFormat::Opus, OutputFormat::Mp3] {
            let bytes = encode(&sweep(4800), f, 128).unwrap();
            for k in 0..40 {
                let cut = bytes.len() * k / 40;
                let _ = decode(&bytes[..cut]);
                let mut flipped = bytes.clone();
                flipped[cut.min(bytes.len() - 1)] ^= 0x5a;
                let _ = decode(&flipped);
            }
        }
        for _ in 0..200 {
            let n = (state % 3000) as usize;
            let mut junk = Vec::with_capacity(n);
            for _ in 0..n {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                junk.push((state >> 33) as u8);
            }
            if n > 4 && state.is_multiple_of(2) {
                junk[..4].copy_from_slice(b"RIFF");
            }
            let _ = decode(&junk);
        }
        assert!(decode(b"definitely not audio").is_err());
    }

    /// A 16-bit PCM WAV whose header says `rate` and `channels`, with `frames` frames.
    fn wav_header(rate: u32, channels: u16, frames: u32) -> Vec<u8> {
        let data = frames * channels as u32 * 2;
        let mut v = Vec::new();
        v.extend_from_slice(b"RIFF");
        v.extend_from_slice(&(36 + data).to_le_bytes());
        v.extend_from_slice(b"WAVEfmt ");
        v.extend_from_slice(&16u32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&channels.to_le_bytes());
        v.extend_from_slice(&rate.to_le_bytes());
        v.extend_from_slice(&rate.wrapping_mul(channels as u32 * 2).to_le_bytes());
        v.extend_from_slice(&(channels * 2).to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(b"data");
        v.extend_from_slice(&data.to_le_bytes());
        v.extend((0..data).map(|i| (i % 7) as u8));
        v
    }

    #[test]
    fn a_file_that_decodes_to_hours_is_measured_over_its_bound_without_its_samples() {
        // Two minutes of silence compress to little: measuring them against ten seconds
        // stops after ten seconds' packets (and one second of slack), whatever the container.
        let quiet = Pcm::new(48000, 2, vec![0.0; 2 * 48000 * 120]);
        for f in [OutputFormat::Flac, OutputFormat::Opus, OutputFormat::Mp3, OutputFormat::Ogg, OutputFormat::M4a] {
            let bytes = encode(&quiet, f, 64).unwrap_or_else(|e| panic!("{f:?}: {e}"));
            assert_eq!(measure(&bytes, 10.0).unwrap(), Length::Over, "{f:?}");
            let mut seen = 0;
            let b = blocks(&bytes, Some(10.0), &mut |s| seen += s.len() / 2).unwrap();
            assert!(b.over && seen <= 11 * 48000 + 8192, "{f:?}: {seen} frames decoded for a 10 s bound");
            let whole = measure(&bytes, 200.0).unwrap();
            assert!(
                matches!(whole, Length::Whole { seconds, .. } if (seconds - 120.0).abs() < 0.05),
                "{f:?}: {whole:?}"
            );
        }
        // A WAV header that declares more than its bytes hold (an hour in 100 bytes) is
        // measured by what it holds, as a stream written to a pipe is.
        let mut long = wav_header(48_000, 2, 100);
        let declared: u32 = 48_000 * 2 * 2 * 3600;
        long[4..8].copy_from_slice(&(36 + declared).to_le_bytes());
        long[40..44].copy_from_slice(&declared.to_le_bytes());
        let b = blocks(&long, Some(60.0), &mut |_| {}).unwrap();
        assert!(!b.over && b.frames == 100, "{} frames", b.frames);
        // One whose declared length the bytes could hold, past the bound, is refused before
        // its data is decoded.
        let real = wav_header(8_000, 1, 8_000 * 90);
        let mut seen = 0;
        assert!(blocks(&real, Some(60.0), &mut |s| seen += s.len()).unwrap().over);
        assert_eq!(seen, 0);
    }

    /// Headers the chaos run sent to `/vae`: a rate of 0 made symphonia panic, 4 GHz and
    /// 9 channels were accepted. Each is an error naming what is wrong; a sane one decodes.
    #[test]
    fn absurd_headers_are_refused() {
        for (rate, ch, want) in
            [(0, 2, "decode"), (4_000_000_000, 2, "Hz"), (7_999, 2, "Hz"), (48_000, 9, "channels"), (48_000, 0, "")]
        {
            let e = decode(&wav_header(rate, ch, 100)).expect_err(&format!("{rate} Hz x {ch}"));
            assert!(e.to_string().contains(want), "{rate} Hz x {ch}: {e}");
        }
        let ok = decode(&wav_header(44_100, 1, 100)).unwrap();
        assert_eq!((ok.sample_rate, ok.channels, ok.frames()), (44_100, 1, 100));
        let six = decode(&wav_header(48_000, 6, 100)).unwrap();
        assert_eq!(six.channels, 6);
    }
}
