//! WAV 16 and 24-bit integer and 32-bit IEEE float, interleaved from planar PCM (hound).
use crate::{AudioError, Pcm};
use std::io::{Seek, Write};

/// Sample encodings of a WAV file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WavKind {
    Int16,
    Int24,
    Float32,
}

/// Writes `pcm` as WAV into `w`. Integer formats round and saturate.
pub fn write_wav<W: Write + Seek>(w: W, pcm: &Pcm, kind: WavKind) -> Result<(), AudioError> {
    let spec = hound::WavSpec {
        channels: pcm.channels as u16,
        sample_rate: pcm.sample_rate,
        bits_per_sample: match kind {
            WavKind::Int16 => 16,
            WavKind::Int24 => 24,
            WavKind::Float32 => 32,
        },
        sample_format: if kind == WavKind::Float32 { hound::SampleFormat::Float } else { hound::SampleFormat::Int },
    };
    let mut wr = hound::WavWriter::new(w, spec)?;
    let n = pcm.frames();
    for i in 0..n {
        for c in 0..pcm.channels {
            let x = pcm.data[c * n + i];
            match kind {
                WavKind::Int16 => wr.write_sample((x.clamp(-1.0, 1.0) * 32767.0).round() as i16)?,
                WavKind::Int24 => wr.write_sample((x.clamp(-1.0, 1.0) * 8_388_607.0).round() as i32)?,
                WavKind::Float32 => wr.write_sample(x)?,
            }
        }
    }
    wr.finalize()?;
    Ok(())
}

/// WAV bytes in memory.
pub fn wav_bytes(pcm: &Pcm, kind: WavKind) -> Result<Vec<u8>, AudioError> {
    let mut cur = std::io::Cursor::new(Vec::new());
    write_wav(&mut cur, pcm, kind)?;
    Ok(cur.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_hound() {
        let pcm = Pcm::new(48000, 2, vec![0.0, 0.5, -1.0, 0.25, -0.25, 1.0]);
        for (kind, bits) in [(WavKind::Int16, 16), (WavKind::Int24, 24), (WavKind::Float32, 32)] {
            let b = wav_bytes(&pcm, kind).unwrap();
            let r = hound::WavReader::new(std::io::Cursor::new(b)).unwrap();
            assert_eq!(r.spec().channels, 2);
            assert_eq!(r.spec().sample_rate, 48000);
            assert_eq!(r.spec().bits_per_sample, bits);
            assert_eq!(r.duration(), 3);
            if kind == WavKind::Float32 {
                let s: Vec<f32> = r.into_samples::<f32>().map(|x| x.unwrap()).collect();
                assert_eq!(s, vec![0.0, 0.25, 0.5, -0.25, -1.0, 1.0], "interleaved L R");
            } else if kind == WavKind::Int16 {
                let s: Vec<i32> = r.into_samples::<i32>().map(|x| x.unwrap()).collect();
                assert_eq!(s, vec![0, 8192, 16384, -8192, -32767, 32767]);
            }
        }
    }
}
