//! Latent files: raw f32 `[T, 64]` time-major (`.vae`, 51.2 kbit/s), NAC8 (per frame an F16
//! scale and 64 int8, 13.2 kbit/s) and NAC4 (per frame an F16 scale and 32 bytes of packed
//! 4-bit values, 6.8 kbit/s). NAC files start with a magic and a header; anything else is
//! read as raw f32 and must hold whole frames.

pub const NAC8_MAGIC: &[u8; 4] = b"NAC8";
pub const NAC4_MAGIC: &[u8; 4] = b"NAC4";

/// Which container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatentFormat {
    RawF32,
    Nac8,
    Nac4,
}

impl LatentFormat {
    pub fn extension(self) -> &'static str {
        match self {
            LatentFormat::RawF32 => "vae",
            LatentFormat::Nac8 => "nac8",
            LatentFormat::Nac4 => "nac4",
        }
    }
}

/// Writes `latents` ([frames, channels] time-major) in `format`.
pub fn encode_latents(latents: &[f32], channels: usize, format: LatentFormat) -> Vec<u8> {
    assert!(channels > 0 && latents.len().is_multiple_of(channels));
    let frames = latents.len() / channels;
    let header = |magic: &[u8; 4]| {
        let mut h = magic.to_vec();
        h.extend_from_slice(&(frames as u32).to_le_bytes());
        h.extend_from_slice(&(channels as u32).to_le_bytes());
        h
    };
    match format {
        LatentFormat::RawF32 => latents.iter().flat_map(|x| x.to_le_bytes()).collect(),
        LatentFormat::Nac8 | LatentFormat::Nac4 => {
            let (magic, levels) =
                if format == LatentFormat::Nac8 { (NAC8_MAGIC, 127.0f32) } else { (NAC4_MAGIC, 7.0f32) };
            let mut out = header(magic);
            for f in latents.chunks(channels) {
                let peak = f.iter().fold(0f32, |m, x| m.max(x.abs()));
                let scale = half::f16::from_f32(if peak > 0.0 { peak / levels } else { 0.0 });
                let s = scale.to_f32();
                out.extend_from_slice(&scale.to_le_bytes());
                let q: Vec<i8> =
                    f.iter().map(|x| if s > 0.0 { (x / s).round().clamp(-levels, levels) as i8 } else { 0 }).collect();
                if format == LatentFormat::Nac8 {
                    out.extend(q.iter().map(|v| *v as u8));
                } else {
                    for pair in q.chunks(2) {
                        let lo = (pair[0] + 8) as u8;
                        let hi = (pair.get(1).copied().unwrap_or(0) + 8) as u8;
                        out.push(lo | (hi << 4));
                    }
                }
            }
            out
        }
    }
}

/// The frames a latent file of any of the three formats declares (its NAC header's count, or
/// whole f32 frames of `channels`), read without decoding it: a bound can be checked first.
pub fn latent_frames(bytes: &[u8], channels: usize) -> usize {
    match (bytes.get(..4), bytes.get(4..8)) {
        (Some(m), Some(n)) if m == NAC8_MAGIC || m == NAC4_MAGIC => {
            u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize
        }
        _ => bytes.len() / (4 * channels.max(1)),
    }
}

/// Reads a latent file of any of the three formats (detected by magic); returns the
/// format and the time-major values.
pub fn decode_latents(bytes: &[u8], channels: usize) -> Result<(LatentFormat, Vec<f32>), String> {
    let nac = |magic: &[u8; 4]| bytes.len() >= 12 && &bytes[..4] == magic;
    let format = if nac(NAC8_MAGIC) {
        LatentFormat::Nac8
    } else if nac(NAC4_MAGIC) {
        LatentFormat::Nac4
    } else {
        if bytes.is_empty() || !bytes.len().is_multiple_of(4 * channels) {
            return Err(format!(
                "{} bytes are not whole frames of {channels} f32 latents (and no NAC magic)",
                bytes.len()
            ));
        }
        return Ok((
            LatentFormat::RawF32,
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        ));
    };
    let frames = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let ch = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    if ch != channels {
        return Err(format!("the file holds {ch} latent channels, the VAE takes {channels}"));
    }
    let per = 2 + if format == LatentFormat::Nac8 { ch } else { ch.div_ceil(2) };
    let body = &bytes[12..];
    if frames.checked_mul(per) != Some(body.len()) {
        return Err(format!("{} bytes after the header do not hold {frames} frames", body.len()));
    }
    let mut out = Vec::with_capacity(frames * ch);
    for f in body.chunks(per) {
        let s = half::f16::from_le_bytes([f[0], f[1]]).to_f32();
        if format == LatentFormat::Nac8 {
            out.extend(f[2..].iter().map(|&b| b as i8 as f32 * s));
        } else {
            for (k, &b) in f[2..].iter().enumerate() {
                out.push(((b & 0x0f) as i8 - 8) as f32 * s);
                if 2 * k + 1 < ch {
                    out.push(((b >> 4) as i8 - 8) as f32 * s);
                }
            }
        }
    }
    Ok((format, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_within_their_step() {
        let z = crate::rng::torch_cpu::randn(3, 37 * 64);
        for (fmt, rel) in [(LatentFormat::RawF32, 0.0), (LatentFormat::Nac8, 0.02), (LatentFormat::Nac4, 0.25)] {
            let bytes = encode_latents(&z, 64, fmt);
            let (got_fmt, back) = decode_latents(&bytes, 64).unwrap();
            assert_eq!(got_fmt, fmt);
            assert_eq!(back.len(), z.len());
            let n: f64 = z.iter().zip(&back).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
            let d: f64 = z.iter().map(|a| (*a as f64).powi(2)).sum();
            assert!((n / d).sqrt() <= rel, "{fmt:?}: relative RMS {}", (n / d).sqrt());
        }
        // bit rates of yue2.cpp's architecture reference: 64 f32, 2 + 64, 2 + 32 bytes per 40 ms frame
        assert_eq!(encode_latents(&z, 64, LatentFormat::Nac8).len(), 12 + 37 * 66);
        assert_eq!(encode_latents(&z, 64, LatentFormat::Nac4).len(), 12 + 37 * 34);
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(decode_latents(&[0u8; 10], 64).is_err());
        let mut b = encode_latents(&[1.0; 128], 64, LatentFormat::Nac8);
        b.pop();
        assert!(decode_latents(&b, 64).unwrap_err().contains("frames"));
        assert!(decode_latents(&encode_latents(&[1.0; 64], 64, LatentFormat::Nac4), 32).is_err());
    }
}
