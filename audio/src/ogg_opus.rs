//! Incremental Ogg Opus: planar float in, whole Ogg pages out, so each chunk of pages can
//! travel as one WebSocket message and the concatenation of every chunk is a valid
//! `.opus` file (RFC 7845). OpusHead carries the encoder's lookahead as pre-skip, granule
//! positions count 48 kHz samples including it, and `finish` feeds the lookahead's worth of
//! silence so the tail is not lost, then ends the stream at the exact input length.
use crate::AudioError;
use ogg::writing::{PacketWriteEndInfo, PacketWriter};

/// 20 ms at 48 kHz.
pub const FRAME: usize = 960;

pub struct OggOpusStream {
    enc: opus::Encoder,
    writer: PacketWriter<'static, Vec<u8>>,
    serial: u32,
    channels: usize,
    pre_skip: u64,
    /// Interleaved samples waiting for a whole frame.
    pending: Vec<f32>,
    /// Input samples per channel so far.
    input: u64,
    /// Samples per channel encoded into packets (multiples of FRAME).
    encoded: u64,
    headers_out: bool,
    /// The rate of the audio before it was resampled to 48 kHz (the OpusHead's "input
    /// sample rate", for decoders that want the original back).
    input_rate: u32,
}

impl OggOpusStream {
    /// A 48 kHz stream at `bitrate` bits per second.
    pub fn new(channels: usize, bitrate: i32, serial: u32) -> Result<Self, AudioError> {
        let ch = match channels {
            1 => opus::Channels::Mono,
            2 => opus::Channels::Stereo,
            n => return Err(AudioError::Format(format!("Opus streams carry 1 or 2 channels, not {n}"))),
        };
        let mut enc =
            opus::Encoder::new(48000, ch, opus::Application::Audio).map_err(|e| AudioError::Format(e.to_string()))?;
        enc.set_bitrate(opus::Bitrate::Bits(bitrate)).map_err(|e| AudioError::Format(e.to_string()))?;
        let pre_skip = enc.get_lookahead().map_err(|e| AudioError::Format(e.to_string()))? as u64;
        Ok(OggOpusStream {
            enc,
            writer: PacketWriter::new(Vec::new()),
            serial,
            channels,
            pre_skip,
            pending: Vec::new(),
            input: 0,
            encoded: 0,
            headers_out: false,
            input_rate: 48000,
        })
    }

    /// Records the original rate of audio resampled to 48 kHz for this stream.
    pub fn with_input_rate(mut self, rate: u32) -> Self {
        self.input_rate = rate;
        self
    }

    pub fn pre_skip(&self) -> u64 {
        self.pre_skip
    }

    fn headers(&mut self) -> Result<(), AudioError> {
        if self.headers_out {
            return Ok(());
        }
        let mut head = Vec::with_capacity(19);
        head.extend_from_slice(b"OpusHead");
        head.push(1);
        head.push(self.channels as u8);
        head.extend_from_slice(&(self.pre_skip as u16).to_le_bytes());
        head.extend_from_slice(&self.input_rate.to_le_bytes());
        head.extend_from_slice(&0i16.to_le_bytes());
        head.push(0);
        self.writer.write_packet(head, self.serial, PacketWriteEndInfo::EndPage, 0)?;
        let vendor = b"yued";
        let mut tags = Vec::new();
        tags.extend_from_slice(b"OpusTags");
        tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
        tags.extend_from_slice(vendor);
        tags.extend_from_slice(&0u32.to_le_bytes());
        self.writer.write_packet(tags, self.serial, PacketWriteEndInfo::EndPage, 0)?;
        self.headers_out = true;
        Ok(())
    }

    fn encode_frames(&mut self, last: Option<u64>) -> Result<(), AudioError> {
        let per = FRAME * self.channels;
        let mut out = vec![0u8; 4000];
        while self.pending.len() >= per {
            let frame: Vec<f32> = self.pending.drain(..per).collect();
            let n = self.enc.encode_float(&frame, &mut out).map_err(|e| AudioError::Format(e.to_string()))?;
            self.encoded += FRAME as u64;
            let more = self.pending.len() >= per;
            let (info, granule) = match last {
                Some(total) if !more => (PacketWriteEndInfo::EndStream, self.pre_skip + total),
                _ => (if more { PacketWriteEndInfo::NormalPacket } else { PacketWriteEndInfo::EndPage }, self.encoded),
            };
            self.writer.write_packet(out[..n].to_vec(), self.serial, info, granule)?;
        }
        Ok(())
    }

    /// Adds planar samples (`channels` runs of equal length); returns the whole Ogg pages
    /// completed by them (the first call also returns the two header pages).
    pub fn push(&mut self, planar: &[f32]) -> Result<Vec<u8>, AudioError> {
        self.headers()?;
        let n = planar.len() / self.channels;
        for i in 0..n {
            for c in 0..self.channels {
                self.pending.push(planar[c * n + i]);
            }
        }
        self.input += n as u64;
        self.encode_frames(None)?;
        Ok(std::mem::take(self.writer.inner_mut()))
    }

    /// Flushes the lookahead with silence and ends the stream; returns the last pages.
    pub fn finish(mut self) -> Result<Vec<u8>, AudioError> {
        self.headers()?;
        let total = self.input;
        // Enough silence to push the lookahead out, rounded up to whole frames.
        let needed = (total + self.pre_skip).div_ceil(FRAME as u64) * FRAME as u64;
        let pad = (needed - self.encoded) as usize * self.channels - self.pending.len();
        self.pending.extend(std::iter::repeat_n(0.0, pad));
        if self.pending.is_empty() {
            // Nothing left to encode: close with an empty end-of-stream page.
            self.writer.write_packet(Vec::new(), self.serial, PacketWriteEndInfo::EndStream, self.pre_skip + total)?;
        } else {
            self.encode_frames(Some(total))?;
        }
        Ok(std::mem::take(self.writer.inner_mut()))
    }
}

/// Decodes a whole Ogg Opus stream (mono or stereo, at 48 kHz): its channel count and its
/// planar samples, the encoder's pre-skip and the last page's padding removed.
pub fn decode_ogg_opus(bytes: &[u8]) -> Result<(usize, Vec<f32>), AudioError> {
    let mut inter = Vec::new();
    let b = ogg_opus_blocks(bytes, None, &mut |s| inter.extend_from_slice(s))?;
    Ok((b.channels, b.planar(&inter)))
}

/// The Ogg Opus packet loop: each packet's interleaved samples to `each`, stopping past
/// `max_seconds` when given.
pub(crate) fn ogg_opus_blocks(
    bytes: &[u8],
    max_seconds: Option<f64>,
    each: &mut dyn FnMut(&[f32]),
) -> Result<crate::Blocks, AudioError> {
    let bad = |e: &dyn std::fmt::Display| AudioError::Format(format!("the file does not decode: {e}"));
    let mut r = ogg::reading::PacketReader::new(std::io::Cursor::new(bytes));
    let head = r.read_packet().map_err(|e| bad(&e))?.ok_or_else(|| bad(&"an empty Ogg stream"))?;
    if !head.data.starts_with(b"OpusHead") || head.data.len() < 19 {
        return Err(bad(&"not an Ogg Opus stream (no OpusHead)"));
    }
    let channels = head.data[9] as usize;
    let ch = match channels {
        1 => opus::Channels::Mono,
        2 => opus::Channels::Stereo,
        n => return Err(bad(&format!("an Opus stream of {n} channels (1 or 2 are decoded)"))),
    };
    let pre_skip = u16::from_le_bytes([head.data[10], head.data[11]]) as usize;
    let mut dec = opus::Decoder::new(48000, ch).map_err(|e| bad(&e))?;
    let _tags = r.read_packet().map_err(|e| bad(&e))?;
    let limit = crate::Blocks::limit(max_seconds, 48000);
    let mut last_granule = 0u64;
    let mut frames = 0usize;
    let mut buf = vec![0f32; 5760 * channels];
    while let Some(p) = r.read_packet().map_err(|e| bad(&e))? {
        last_granule = p.absgp_page();
        if p.data.is_empty() {
            continue;
        }
        let n = dec.decode_float(&p.data, &mut buf, false).map_err(|e| bad(&e))?;
        each(&buf[..n * channels]);
        frames += n;
        if limit.is_some_and(|l| frames as u64 > l) {
            return Ok(crate::Blocks { rate: 48000, channels, skip: 0, frames: 0, over: true });
        }
    }
    let keep = (last_granule as usize).saturating_sub(pre_skip).min(frames.saturating_sub(pre_skip));
    if keep == 0 {
        return Err(bad(&"no samples"));
    }
    Ok(crate::Blocks { rate: 48000, channels, skip: pre_skip.min(frames), frames: keep, over: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(n: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(2 * n);
        for c in 0..2 {
            for i in 0..n {
                let t = i as f32 / 48000.0;
                v.push(0.5 * (2.0 * std::f32::consts::PI * (220.0 + 400.0 * t + c as f32 * 50.0) * t).sin());
            }
        }
        v
    }

    #[test]
    fn chunks_concatenate_into_a_valid_stream_of_the_exact_length() {
        let n = 48000 + 1234;
        let pcm = sweep(n);
        let mut s = OggOpusStream::new(2, 128_000, 7).unwrap();
        let mut bytes = Vec::new();
        let mut messages = 0;
        // uneven chunks, like VAE tiles
        let mut at = 0;
        for len in [10_000usize, 7_000, 20_000, n - 37_000] {
            let chunk: Vec<f32> = (0..2).flat_map(|c| pcm[c * n + at..c * n + at + len].to_vec()).collect();
            let out = s.push(&chunk).unwrap();
            assert!(out.is_empty() || out.starts_with(b"OggS"), "each message is whole pages");
            messages += !out.is_empty() as usize;
            bytes.extend(out);
            at += len;
        }
        bytes.extend(s.finish().unwrap());
        assert!(messages >= 3);
        let (ch, dec) = decode_ogg_opus(&bytes).unwrap();
        assert_eq!(ch, 2);
        assert_eq!(dec.len() / 2, n, "decodes to the input length exactly");
        // correlation with the source (after the codec's delay is removed by pre-skip)
        let l = &dec[..n];
        let dot: f64 = l.iter().zip(&pcm[..n]).map(|(a, b)| (*a as f64) * (*b as f64)).sum();
        let na: f64 = l.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = pcm[..n].iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
        assert!(dot / (na * nb) > 0.95, "correlation {}", dot / (na * nb));
    }
}
